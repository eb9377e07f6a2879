"""Warnings about what a collector will deliver, as the library and the CLI show them."""

from __future__ import annotations

import json
import warnings

import pytest

from pycollect import Collector, PyCollectWarning
from pycollect.cli import main


def test_total_frames_is_checked_against_the_rounded_batch() -> None:
    # frames_per_batch is rounded up to whole steps first (300 over 8 envs: 304), then total_frames
    message = (
        "total_frames (1000) is not exactly divisible by frames_per_batch (304): "
        "the collector delivers 4 batches, 1216 frames (216 more)"
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        collector = Collector("CartPole-v1", frames_per_batch=300, total_frames=1000, envs_per_worker=8)
    with collector:
        assert (len(collector), collector.frames_per_batch) == (4, 304)
    assert [w.category for w in caught] == [PyCollectWarning, PyCollectWarning]
    assert str(caught[1].message) == message


@pytest.mark.parametrize("total_frames", [1200, -1])
def test_total_frames_that_is_a_multiple_of_the_batch_or_endless_does_not_warn(total_frames: int) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        collector = Collector("CartPole-v1", frames_per_batch=300, total_frames=total_frames, envs_per_worker=4)
    collector.shutdown()


def test_the_cli_shows_the_total_frames_warning_with_its_flags(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["run", "--frames", "1000", "--frames-per-batch", "300", "--envs-per-worker", "4", "--no-progress"]
    assert main(args) == 0
    assert capsys.readouterr().err == (
        "pycollect: warning: --frames (1000) is not exactly divisible by --frames-per-batch (300): the collector "
        "delivers 4 batches, 1200 frames (200 more)\n"
    )


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("extra", "batch"),
    [([], 1024), (["--frames-per-batch", "300"], 304), (["--workers", "2", "--async"], 1024)],
)
def test_the_default_frames_are_whole_batches_and_do_not_warn_about_it(
    extra: list[str], batch: int, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "--json", "--no-progress", "--seed", "0", *extra]) == 0
    out, err = capsys.readouterr()
    assert "divisible" not in err, err
    frames = json.loads(out)["frames"]
    assert frames % batch == 0 and 100_000 <= frames < 100_000 + batch
