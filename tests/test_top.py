"""``pycollect top``: the live view of a running collection, and the flags of ``run`` around it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from pycollect.cli import main
from pycollect.exceptions import AttachError
from pycollect.metrics import CollectionMetrics, TrainerMetrics, WorkerMetrics, find_collections
from pycollect.metrics import _top as top_module
from pycollect.metrics._top import format_duration, format_rate, render_metrics, run_top
from pycollect.testing import wait_until

# -- a frame, rendered from metrics made by hand ------------------------------------------------


def _worker(worker: int, **changes: Any) -> WorkerMetrics:
    figures: dict[str, Any] = {
        "worker": worker,
        "state": "running",
        "pid": 1000 + worker,
        "generation": 1,
        "restarts": 0,
        "steps": 5000,
        "frames": 40000,
        "rollouts": 40,
        "env_time_s": 6.0,
        "policy_time_s": 3.0,
        "wait_time_s": 1.0,
        "policy_version": 7,
        "weight_updates": 7,
        "frames_per_s": 4321.0,
        "steps_per_s": 540.1,
        "step_p50_s": 0.000512,
        "step_p99_s": 0.0123,
        "env_share": 0.6,
        "policy_share": 0.3,
        "wait_share": 0.1,
        "heartbeat_age_s": 0.002,
        "ring_filled": 1,
        "ring_slots": 2,
        "straggler": False,
    }
    figures.update(changes)
    return WorkerMetrics(**figures)


TRAINER = TrainerMetrics(
    batches=120,
    frames=122880,
    batches_per_s=11.5,
    frames_per_s=11776.0,
    wait_time_s=3.2,
    wait_share=0.42,
    publishes=12,
    publish_time_s=0.01,
    publish_bytes=12 * 70_000,
    last_publish_bytes=70_000,
    policy_version=12,
    policy_time_s=0.0,
    lag_mean=1.25,
    lag_min=0,
    lag_max=3,
    frames_dropped=256,
)

METRICS = CollectionMetrics(
    pid=4242,
    description="gymnasium:CartPole-v1, workers, 4 workers x 8 envs",
    window_s=5.0,
    trainer=TRAINER,
    workers=(
        _worker(0),
        _worker(1, frames_per_s=4400.0),
        _worker(2, state="starting", pid=None, generation=3, restarts=2, frames_per_s=0.0, steps_per_s=0.0),
        _worker(3, frames_per_s=820.0, steps_per_s=102.5, straggler=True),
        _worker(4, state="failed", pid=None, generation=4, restarts=3, frames_per_s=0.0, heartbeat_age_s=None),
        _worker(5, state="empty", pid=None, generation=2, restarts=1, step_p50_s=None, step_p99_s=None),
    ),
)


def _text(renderable: Any, *, width: int = 200) -> str:
    console = Console(width=width, record=True, file=open(os.devnull, "w"), color_system=None)  # noqa: SIM115
    console.print(renderable)
    console.file.close()
    return console.export_text()


def _rows(text: str) -> dict[int, list[str]]:
    """The worker table's rows by worker: its cells, stripped (columns split at the table's rules)."""
    rows = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in re.split(r"[│|]", line)]
        if len(cells) > 5 and cells[0].isdigit():
            rows[int(cells[0])] = cells
    return rows


def test_a_frame_shows_the_trainer_and_every_worker() -> None:
    text = _text(render_metrics(METRICS))
    header = text[: text.index(_header_line(text))]
    for shown in ("CartPole-v1", "4242", "11,776", "11.5", "42%", "1.25", "256", "12 ", "840.0 kB", "70.0 kB"):
        assert shown in header, (shown, header)
    rows = _rows(text)
    assert sorted(rows) == [0, 1, 2, 3, 4, 5]
    row = " ".join(rows[0])
    for shown in ("running", "1000", "4,321", "540", "512µs", "12.3ms", "60", "30", "10", "1/2", "2.00ms", "7"):
        assert shown in row, (shown, row)


def test_stragglers_and_workers_not_running_are_marked_in_words_and_colour() -> None:
    rows = _rows(_text(render_metrics(METRICS)))
    assert "straggler" in rows[3][1] and "0.19x" in rows[3][1]  # 820 against a median of 4,321
    assert "restarting" in rows[2][1] and "2" in rows[2]  # restarts column
    assert "FAILED" in rows[4][1]
    assert "restarting" in rows[5][1]  # between a crash and its restart
    for worker in (0, 1):
        assert rows[worker][1] == "running"
    console = Console(width=200, record=True, file=open(os.devnull, "w"), color_system="truecolor")  # noqa: SIM115
    console.print(render_metrics(METRICS))
    console.file.close()
    coloured = console.export_text(styles=True)
    straggler_line = next(line for line in coloured.splitlines() if "straggler" in line)
    failed_line = next(line for line in coloured.splitlines() if "FAILED" in line)
    assert "\x1b[" in straggler_line and "\x1b[" in failed_line


def test_a_description_is_shown_as_written_never_as_markup() -> None:
    described = replace(METRICS, description="[callable:SleepyEnv, callable:SleepyEnv] (workers, [bold]x[/bold])")
    assert "[callable:SleepyEnv, callable:SleepyEnv] (workers, [bold]x[/bold])" in _text(render_metrics(described))


def test_a_narrow_console_keeps_the_columns_that_matter_most() -> None:
    rows = _rows(_text(render_metrics(METRICS), width=80))
    assert sorted(rows) == [0, 1, 2, 3, 4, 5]
    assert rows[3][1] == "straggler 0.19x" and rows[4][1] == "FAILED"  # whole words, not cut
    assert "820" in rows[3]  # frames/s stays


def test_a_collection_without_workers_and_a_first_frame_read_too_early() -> None:
    alone = replace(METRICS, workers=())
    assert "no worker processes" in _text(render_metrics(alone))
    assert "measuring" in _text(render_metrics(replace(METRICS, window_s=0.0)))


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(None, "-"), (0.0000005, "0.50µs"), (0.000512, "512µs"), (0.0123, "12.3ms"), (0.25, "250ms"), (3.5, "3.50s")],
)
def test_durations_read_as_us_ms_or_s(seconds: float | None, shown: str) -> None:
    assert format_duration(seconds) == shown


@pytest.mark.parametrize(
    ("rate", "shown"), [(0.0, "0"), (12.34, "12.3"), (950.4, "950"), (12345.6, "12,346"), (2_345_678.0, "2,346k")]
)
def test_rates_keep_three_figures_at_least(rate: float, shown: str) -> None:
    assert format_rate(rate) == shown


# -- a collection made by hand in a child process ---------------------------------------------

FABRICATED = """
import os, sys, threading, time
from pycollect._native import _core

segment = _core.Segment.create(
    [("unused", "uint8", ())], n_workers=4, envs_per_worker=8, steps=1, slots_per_worker=4,
    weights_capacity=0, weights_buffers=3, backing="auto",
)
segment.describe("fabricated collection for test_top")
controls = [segment.worker_control(w) for w in range(4)]
for control in controls:
    control.begin_generation()
    control.pid = os.getpid()
    control.state = "running"
    control.start_metering(8)
stop = threading.Event()

def step():
    while not stop.is_set():
        for w, control in enumerate(controls):
            for _ in range(1 if w == 3 else 5):  # worker 3 steps 5x slower
                control.begin_step()
                control.policy_done()
                control.end_step()
        segment.count_batch(32, 1000, 4, 0, 1, 0)
        time.sleep(0.001)

threading.Thread(target=step, daemon=True).start()
print(os.getpid(), flush=True)
sys.stdin.read()
stop.set()
"""


@pytest.fixture
def fabricated() -> Iterator[subprocess.Popen[str]]:
    """A process holding a collection's counters, written by hand: 4 workers, worker 3 slow."""
    child = subprocess.Popen(
        [sys.executable, "-c", FABRICATED], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stdin is not None
    assert child.stdout.readline().strip() == str(child.pid)
    try:
        yield child
    finally:
        child.stdin.close()
        child.wait(timeout=30)


def _top(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pycollect", "top", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )


@pytest.mark.timeout(120)
def test_top_once_prints_one_frame_of_a_collection_by_pid_or_name(fabricated: subprocess.Popen[str]) -> None:
    for target in (str(fabricated.pid), "for test_top"):
        result = _top("--once", "--refresh", "0.5", target)
        assert result.returncode == 0, result.stderr
        assert "fabricated collection for test_top" in result.stdout and str(fabricated.pid) in result.stdout
        rows = _rows(result.stdout)
        assert sorted(rows) == [0, 1, 2, 3], result.stdout
        assert "straggler" in rows[3][1] and all(rows[w][1] == "running" for w in (0, 1, 2)), result.stdout


@pytest.mark.timeout(120)
def test_top_without_a_target_watches_your_only_collection(
    fabricated: subprocess.Popen[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Other collections of this user may run on the machine: only the child's is "running" here.
    ours = [info for info in find_collections() if info.pid == fabricated.pid]
    assert len(ours) == 1 and ours[0].workers == 4
    monkeypatch.setattr(top_module, "find_collections", lambda: ours)
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["top", "--once", "--refresh", "0.3"]) == 0
    out = capsys.readouterr().out
    assert "fabricated collection for test_top" in out and sorted(_rows(out)) == [0, 1, 2, 3]


def test_top_without_a_target_names_what_is_missing_or_ambiguous(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(top_module, "find_collections", list)
    assert main(["top", "--once"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pycollect: error: no pycollect collection of yours is running") and err.count("\n") == 1
    several = [
        top_module.CollectionInfo(111, "gymnasium:CartPole-v1, workers, 2 workers x 8 envs", 2, 5),
        top_module.CollectionInfo(222, "gymnasium:Pendulum-v1, inprocess, 8 envs", 1, 7),
    ]
    monkeypatch.setattr(top_module, "find_collections", lambda: several)
    assert main(["top", "--once"]) == 2
    captured = capsys.readouterr()
    assert "111" in captured.out and "Pendulum-v1" in captured.out  # the list to choose from
    assert "pycollect: error: 2 collections of yours are running" in captured.err
    assert "pycollect top PID" in captured.err


@pytest.mark.timeout(120)
def test_top_says_when_the_collection_ended_and_exits_0(fabricated: subprocess.Popen[str]) -> None:
    top = subprocess.Popen(
        [sys.executable, "-m", "pycollect", "top", "--refresh", "0.2", str(fabricated.pid)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(lambda: _maps_a_segment(top.pid), timeout_s=60, what="pycollect top to attach")
        assert fabricated.stdin is not None
        fabricated.stdin.close()  # the collection ends
        out, err = top.communicate(timeout=60)
    finally:
        if top.poll() is None:
            top.kill()
            top.wait()
    assert top.returncode == 0, err
    assert f"the collection of pid {fabricated.pid} ended" in out


def _maps_a_segment(pid: int) -> bool:
    fds = Path(f"/proc/{pid}/fd")
    try:
        return any(os.readlink(fd).startswith("/memfd:pycollect") for fd in fds.iterdir())
    except OSError:
        return False


# -- what cannot be watched ---------------------------------------------------------------------


def _error_of(target: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["top", "--once", target]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pycollect: error: ") and err.count("\n") == 1, err
    return err


def test_top_of_a_pid_that_does_not_exist(capsys: pytest.CaptureFixture[str]) -> None:
    missing = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1
    assert f"no process has pid {missing}" in _error_of(str(missing), capsys)


@pytest.mark.timeout(60)
def test_top_of_a_process_that_is_not_a_collection(capsys: pytest.CaptureFixture[str]) -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        assert f"pid {sleeper.pid} (sleep 60) runs no pycollect collection" in _error_of(str(sleeper.pid), capsys)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert "runs no pycollect collection" in _error_of(str(os.getpid()), capsys)  # pytest's own: no segment


@pytest.mark.timeout(60)
def test_top_of_another_users_process(capsys: pytest.CaptureFixture[str]) -> None:
    if os.getuid() != 0:
        others = [p for p in Path("/proc").iterdir() if p.name.isdigit() and p.stat().st_uid != os.getuid()]
        if not others:
            pytest.skip("no process of another user to try, and not root to start one")
        assert "only your own collections can be watched" in _error_of(others[0].name, capsys)
        return
    stranger = subprocess.Popen(["sleep", "60"], user=65534)  # nobody
    try:
        err = _error_of(str(stranger.pid), capsys)
    finally:
        stranger.kill()
        stranger.wait()
    assert f"pid {stranger.pid} (sleep 60) belongs to user id 65534" in err
    assert "only your own collections can be watched" in err


def test_top_of_a_name_no_collection_has(capsys: pytest.CaptureFixture[str]) -> None:
    assert "no running collection of yours matches 'NoSuchCollection-v9'" in _error_of("NoSuchCollection-v9", capsys)


@pytest.mark.parametrize("flag", ["--refresh", "--window"])
def test_top_refuses_a_period_that_is_not_positive(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["top", flag, "0", "123"])
    assert exit_.value.code == 2
    assert f"{flag}: must be a positive number of seconds, got '0'" in capsys.readouterr().err


def test_run_top_raises_attach_error_for_the_library_user() -> None:
    missing = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1
    with pytest.raises(AttachError, match=f"no process has pid {missing}"):
        run_top(missing, once=True)


def test_the_help_reads_well() -> None:
    from pycollect.cli import build_parser

    parser = build_parser()
    assert "pycollect top" in parser.format_help()
    commands = next(a for a in parser._actions if isinstance(a, __import__("argparse")._SubParsersAction))
    top_help = commands.choices["top"].format_help()
    for shown in ("PID_OR_NAME", "--refresh", "--window", "--once", "straggler", "Ctrl-C"):
        assert shown in top_help, shown
    run_help = commands.choices["run"].format_help()
    assert "--top" in run_help and "--prometheus-port" in run_help


# -- pycollect run --top ------------------------------------------------------------------------


@pytest.mark.timeout(180)
def test_run_top_shows_the_runs_own_workers_then_the_summary() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pycollect", "run", "--workers", "2", "--frames", "20000", "--top", "--json"],
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["frames"] >= 20000  # stdout: the summary alone
    # The view is drawn on stderr, where the progress bar would be: its last frame stays.
    assert sorted(_rows(result.stderr)) == [0, 1], result.stderr
    assert "20,480 of 20,480 frames collected" in result.stderr
    assert "it/s" not in result.stderr and "frames/s]" not in result.stderr  # no progress bar


# -- the target: a real 4-worker collection with one worker 5x slower -------------------

SLOW_WORKER = """
import json, select, sys, time
import pycollect
from pycollect.testing.envs import CountingEnv

class SleepyEnv(CountingEnv):
    def __init__(self, delay_s):
        super().__init__(length=1000)
        self.delay_s = delay_s

    def step(self, action):
        time.sleep(self.delay_s)
        return super().step(action)

delays = [0.001, 0.001, 0.001, 0.005]  # worker 3 is 5x slower
with pycollect.Collector(
    SleepyEnv, num_workers=4, envs_per_worker=2, frames_per_batch=2 * 25, sync=False,
    env_kwargs=[{"delay_s": d} for d in delays], total_frames=-1,
) as collector:
    for _ in collector:
        if select.select([sys.stdin], [], [], 0)[0]:
            if sys.stdin.readline().strip() != "counts":
                break
            metrics = collector.stats().metrics
            counts = {"t": time.monotonic(), "frames": [w.frames for w in metrics.workers]}
            print(json.dumps(counts), flush=True)
"""


@pytest.mark.timeout(180)
def test_top_shows_each_workers_rate_as_the_collection_counts_it_and_the_slow_one_as_straggler() -> None:
    trainer = subprocess.Popen(
        [sys.executable, "-c", SLOW_WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert trainer.stdin is not None and trainer.stdout is not None

    def counts() -> dict[str, Any]:
        assert trainer.stdin is not None and trainer.stdout is not None
        trainer.stdin.write("counts\n")
        trainer.stdin.flush()
        return json.loads(trainer.stdout.readline())

    try:
        wait_until(lambda: min(counts()["frames"]) > 0, timeout_s=90, what="every worker to step")
        before = counts()
        top = _top("--once", "--refresh", "2", str(trainer.pid))
        after = counts()
    finally:
        trainer.stdin.write("quit\n")
        trainer.stdin.close()
        trainer.wait(timeout=60)
    assert top.returncode == 0, top.stderr
    rows = _rows(top.stdout)
    assert sorted(rows) == [0, 1, 2, 3], top.stdout
    header = [cell for cell in re.split(r"[│|]", _header_line(top.stdout))]
    column = [cell.strip() for cell in header].index("frames/s")
    elapsed = after["t"] - before["t"]
    for worker in range(4):
        counted = (after["frames"][worker] - before["frames"][worker]) / elapsed
        shown = float(rows[worker][column].replace(",", ""))
        assert shown == pytest.approx(counted, rel=0.10), (worker, shown, counted, top.stdout)
    assert "straggler" in rows[3][1], top.stdout
    assert all(rows[w][1] == "running" for w in (0, 1, 2)), top.stdout


def _header_line(text: str) -> str:
    return next(line for line in text.splitlines() if "frames/s" in line and "worker" in line)


# -- pycollect run --prometheus-port ------------------------------------------------------------


class _FakeEndpoint:
    def __init__(self, calls: list[tuple[Any, ...]], source: Any, port: int) -> None:
        self.calls = calls
        calls.append(("serve", source, port, source.frames))

    def close(self) -> None:
        self.calls.append(("close",))


def test_run_prometheus_port_serves_the_runs_collector_while_it_runs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import pycollect.metrics

    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(
        pycollect.metrics,
        "serve_prometheus",
        lambda source, port, **_: _FakeEndpoint(calls, source, port),
        raising=False,
    )
    assert (
        main(["run", "--frames", "512", "--frames-per-batch", "256", "--no-progress", "--prometheus-port", "9464"]) == 0
    )
    (_, source, port, frames_then), closed = calls
    assert type(source).__name__ == "Collector" and port == 9464 and frames_then == 0  # before the first batch
    assert closed == ("close",)
    assert "frames/s" in capsys.readouterr().out


def test_run_prometheus_port_that_cannot_be_served_is_an_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import pycollect.metrics

    def in_use(source: Any, port: int, **_: Any) -> Any:
        raise OSError(98, "Address already in use")

    monkeypatch.setattr(pycollect.metrics, "serve_prometheus", in_use, raising=False)
    assert main(["run", "--frames", "1024", "--no-progress", "--prometheus-port", "9464"]) == 2
    err = capsys.readouterr().err
    assert err == "pycollect: error: --prometheus-port 9464: [Errno 98] Address already in use\n"


@pytest.mark.parametrize("port", ["0", "65536", "http"])
def test_run_prometheus_port_must_be_a_port(port: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--prometheus-port", port])
    assert exit_.value.code == 2
    assert f"--prometheus-port: must be a port number from 1 to 65535, got '{port}'" in capsys.readouterr().err


def test_with_several_collections_a_terminal_user_picks_one(monkeypatch: pytest.MonkeyPatch) -> None:
    several = [
        top_module.CollectionInfo(111, "gymnasium:CartPole-v1 (workers, 2 workers x 8 envs)", 2, 5),
        top_module.CollectionInfo(222, "gymnasium:Pendulum-v1 (inprocess, 8 envs)", 1, 7),
    ]
    asked = []
    monkeypatch.setattr(top_module.Prompt, "ask", lambda *args, **kwargs: asked.append(kwargs["choices"]) or "2")
    console = Console(file=open(os.devnull, "w"), width=120)  # noqa: SIM115
    try:
        assert top_module._choose(several, console, interactive=True) == several[1]
    finally:
        console.file.close()
    assert asked == [["1", "2"]]
