"""How workers and the fork server start: from the trainer's pycollect wherever the trainer runs,
no process at import, a working directory that is gone.

Each test runs a trainer in a fresh interpreter: what is checked (which pycollect a worker
imports, which processes importing starts, the working directory) is a property of a whole
process, and this test process may have a fork server already.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pycollect

pytestmark = pytest.mark.timeout(240)

_SERVER_MODES = [pytest.param("1", id="fork-server"), pytest.param("0", id="fork-exec")]


def _run(script: str, *, cwd: Path, fork_server: str = "1", timeout: float = 200) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYCOLLECT_FORK_SERVER=fork_server, PYTHONWARNINGS="always")
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _last_json(result: subprocess.CompletedProcess[str]) -> object:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


# -- a pycollect/ directory in the trainer's working directory (the clone's root) ----------------

SHADOWED_TRAINER = """
import json, sys
import pycollect
from pycollect import Collector
from pycollect.testing.envs import CountingEnv

assert not pycollect.__file__.startswith(sys.argv[1]), pycollect.__file__
with Collector(CountingEnv, frames_per_batch=8, envs_per_worker=2, num_workers=2, restart="never") as c:
    c.next_batch()
    events = [e for e in c.stats().events if e.kind == "started"]
print(json.dumps(sorted({e.launched_by for e in events})))
"""


def _source_copy(into: Path) -> Path:
    """A copy of pycollect's source tree without the built extension, as in a fresh clone."""
    source = Path(pycollect.__file__).parent
    shutil.copytree(source, into / "pycollect", ignore=shutil.ignore_patterns("_core*.so", "__pycache__"))
    assert not list((into / "pycollect").glob("_core*.so"))
    return into


@pytest.mark.parametrize("fork_server", _SERVER_MODES)
def test_workers_import_the_trainers_pycollect_not_the_one_in_the_working_directory(
    tmp_path: Path, fork_server: str
) -> None:
    clone = _source_copy(tmp_path / "clone")
    app = tmp_path / "app"  # the trainer is a script elsewhere, as the `pycollect` command is
    app.mkdir()
    (app / "train.py").write_text(SHADOWED_TRAINER)
    result = subprocess.run(
        [sys.executable, str(app / "train.py"), str(clone)],
        cwd=clone,
        env=dict(os.environ, PYCOLLECT_FORK_SERVER=fork_server),
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    expected = ["fork_server"] if fork_server == "1" else ["exec"]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == expected


@pytest.mark.parametrize("fork_server", _SERVER_MODES)
@pytest.mark.parametrize("user_path", [None, "/nonexistent/user-path"])
def test_a_worker_gives_its_env_the_users_own_pythonpath(
    tmp_path: Path, fork_server: str, user_path: str | None
) -> None:
    # The env writes down what a process it starts would inherit as PYTHONPATH.
    out = tmp_path / "seen.json"
    script = f"""
import json, os
from pycollect import Collector
from pycollect.testing.envs import CountingEnv

class Reporter(CountingEnv):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with open({str(out)!r}, "w") as f:
            json.dump(os.environ.get("PYTHONPATH"), f)

with Collector(Reporter, frames_per_batch=8, num_workers=1) as c:
    c.next_batch()
"""
    (tmp_path / "reporter_train.py").write_text(script)
    env = dict(os.environ, PYCOLLECT_FORK_SERVER=fork_server)
    env.pop("PYTHONPATH", None)
    if user_path is not None:
        env["PYTHONPATH"] = user_path
    result = subprocess.run(
        [sys.executable, str(tmp_path / "reporter_train.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(out.read_text()) == user_path


# -- nothing starts at import ---------------------------------------------------------------------

CHILDREN = """
def children():
    import os
    me = str(os.getpid())
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[1] == me and fields[0] != "Z":
                found.append(int(entry))
    return found
"""

IN_PROCESS_TRAINER = (
    CHILDREN
    + """
import json
import pycollect
from pycollect import Collector
from pycollect.testing.envs import CountingEnv
with Collector(CountingEnv, frames_per_batch=8) as c:
    c.next_batch()
print(json.dumps(children()))
"""
)


def test_importing_pycollect_and_collecting_in_process_starts_no_process(tmp_path: Path) -> None:
    assert _last_json(_run(IN_PROCESS_TRAINER, cwd=tmp_path)) == []


FIRST_WORKERS_TRAINER = (
    CHILDREN
    + """
import json, sys
from pycollect import Collector
from pycollect._workers import forkserver
from pycollect.testing.envs import CountingEnv
if sys.argv[1:] == ["prestart"]:
    import pycollect
    pycollect.prestart()
    first = forkserver.server_pid()
    assert first in children()
else:
    assert forkserver.server_pid() is None and children() == []
with Collector(CountingEnv, frames_per_batch=8, envs_per_worker=2, num_workers=2) as c:
    c.next_batch()
    events = [e for e in c.stats().events if e.kind == "started"]
    server = forkserver.server_pid()
if sys.argv[1:] == ["prestart"]:
    assert server == first, (server, first)
print(json.dumps([[e.launched_by, e.fallback] for e in events]))
"""
)


@pytest.mark.parametrize("how", ["collector", "prestart"])
def test_the_first_collector_with_workers_uses_the_server_it_starts(tmp_path: Path, how: str) -> None:
    script = tmp_path / "first.py"
    script.write_text(FIRST_WORKERS_TRAINER)
    result = subprocess.run(
        [sys.executable, str(script), how], cwd=tmp_path, capture_output=True, text=True, timeout=200, check=False
    )
    assert _last_json(result) == [["fork_server", None], ["fork_server", None]]


def test_prestart_is_public_and_a_no_op_when_the_server_is_turned_off(tmp_path: Path) -> None:
    assert "prestart" in pycollect.__all__
    script = CHILDREN + "import json, pycollect\npycollect.prestart()\nprint(json.dumps(children()))\n"
    assert _last_json(_run(script, cwd=tmp_path, fork_server="0")) == []


# -- a working directory that was removed ---------------------------------------------------------

GONE_CWD_TRAINER = """
import json, os, sys, tempfile, warnings
from pycollect import Collector, PyCollectWarning
from pycollect.testing.envs import CountingEnv

gone = tempfile.mkdtemp()
os.chdir(gone)
os.rmdir(gone)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with Collector(CountingEnv, frames_per_batch=8, envs_per_worker=2, num_workers=2, restart="never") as c:
        c.next_batch()
        events = [e for e in c.stats().events if e.kind == "started"]
        cwds = [os.readlink(f"/proc/{w.pid}/cwd") for w in c.stats().workers]
messages = [str(w.message) for w in caught if issubclass(w.category, PyCollectWarning)]
print(json.dumps({"by": sorted({e.launched_by for e in events}), "cwds": cwds, "warnings": messages}))
"""


@pytest.mark.parametrize("fork_server", _SERVER_MODES)
def test_a_trainer_whose_working_directory_was_removed_starts_its_workers_in_root(
    tmp_path: Path, fork_server: str
) -> None:
    result = _run(GONE_CWD_TRAINER, cwd=tmp_path, fork_server=fork_server)
    report = _last_json(result)
    assert isinstance(report, dict)
    assert report["by"] == (["fork_server"] if fork_server == "1" else ["exec"])
    assert report["cwds"] == ["/", "/"]
    assert any("working directory" in message and "'/'" in message for message in report["warnings"])
    assert "Traceback" not in result.stderr, result.stderr
