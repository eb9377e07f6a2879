"""The ``file`` weight-sync scheme: each version in a file, the newest named by a marker file."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import torch

from pycollect.weights import WeightReceiver, WeightSender, WeightSyncScheme

_KEEP = 4  # versions kept on disk, so a reader never finds its file deleted under it


class FileScheme(WeightSyncScheme):
    name = "file"

    def sender(self, context):
        return FileSender(Path(tempfile.mkdtemp(prefix="pycollect-file-weights-")))


class FileSender(WeightSender):
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def receiver(self):
        return FileReceiver(str(self.directory))

    def send(self, state, version, *, timeout_s):
        torch.save({name: tensor.detach().cpu() for name, tensor in state.items()}, self.directory / f"{version}.pt")
        marker = self.directory / "latest.tmp"
        marker.write_text(str(version))
        os.replace(marker, self.directory / "latest")  # atomic: readers see the old or the new version
        for old in self.directory.glob("*.pt"):
            if int(old.stem) <= version - _KEEP:
                old.unlink()

    def close(self):
        shutil.rmtree(self.directory, ignore_errors=True)


class FileReceiver(WeightReceiver):
    def __init__(self, directory: str) -> None:
        self.directory = Path(directory)
        self.applied = 0

    def attach(self, context):
        pass

    def receive(self, module):
        try:
            version = int((self.directory / "latest").read_text())
        except FileNotFoundError:
            return None  # nothing sent yet
        if version <= self.applied:
            return None
        module.load_state_dict(torch.load(self.directory / f"{version}.pt"))
        self.applied = version
        return version
