"""The ``pycollect`` command as a user runs it."""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pycollect import cli
from pycollect.cli import main


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pycollect", *args], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.timeout(180)
def test_run_defaults_to_cartpole_and_prints_a_summary() -> None:
    result = _run("run", "--frames", "2000", "--seed", "0")
    assert result.returncode == 0, result.stderr
    assert "gymnasium:CartPole-v1" in result.stdout
    for label in ("frames ", "frames/s", "episodes", "mean return"):
        assert label in result.stdout
    assert "frames" in result.stderr  # the progress bar
    assert "importing torch" in result.stderr  # what the first seconds are spent on


def test_run_json_summary(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "run",
            "Pendulum-v1",
            "--frames",
            "800",
            "--frames-per-batch",
            "400",
            "--json",
            "--no-progress",
            "--env-kwarg",
            "g=9.81",
            "--seed",
            "1",
        ]
    )
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["env"] == "gymnasium:Pendulum-v1" and summary["frames"] == 800
    assert summary["episodes"] == 0 and summary["mean_return"] is None and summary["frames_per_s"] > 0


def test_run_counts_episodes_and_mean_return(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--frames", "1000", "--json", "--no-progress", "--env-kwarg", "max_episode_steps=10"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["episodes"] >= 1000 // 10 - 8 and 1 <= summary["mean_return"] <= 10


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "NoSuchEnv-v0"], "unknown gymnasium env id 'NoSuchEnv-v0'"),
        (["run", "--frames-per-batch", "0"], "--frames-per-batch must be a positive integer, got 0"),
        (["run", "--workers", "-1"], "--workers must be a non-negative integer, got -1"),
        (["run", "--envs-per-worker", "0"], "--envs-per-worker must be a positive integer, got 0"),
        (["run", "--frames", "0"], "--frames must be a positive integer or -1 (endless), got 0"),
        (["run", "--max-frames-per-traj", "0"], "--max-frames-per-traj must be a positive integer, got 0"),
        (["run", "--seed", "-1"], "--seed must be a non-negative integer, got -1"),
        (["run", "--env-kwarg", "no_such_kwarg=1"], "with --env-kwarg={'no_such_kwarg': 1} raised TypeError"),
        (["run", "--async"], "--async needs --workers"),
        (["run", "--async", "--workers", "0"], "--async needs --workers"),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_the_flag(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*args, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pycollect: error: ") and err.endswith("\n") and err.count("\n") == 1, err
    assert message in err
    assert not any(re.search(rf"(?<![-\w]){name}\b", err) for name in cli.FLAGS), err  # the user's names


@pytest.mark.timeout(120)
def test_set_reaches_the_collectors_config(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import pycollect

    made: list[pycollect.CollectorConfig] = []
    real = pycollect.Collector

    def recording(*args: object, **kwargs: object) -> pycollect.Collector:
        collector = real(*args, **kwargs)  # type: ignore[arg-type]
        made.append(collector.config)
        return collector

    monkeypatch.setattr(pycollect, "Collector", recording)
    args = ["run", "--frames", "64", "--frames-per-batch", "32", "--envs-per-worker", "2", "--no-progress", "--json"]
    settings = ["max_restarts=7", "heartbeat_timeout_s=45.5", "info_keys=()", "init_random_frames=10"]
    assert main([*args, *(f"--set={setting}" for setting in settings)]) == 0, capsys.readouterr().err
    (config,) = made
    assert config.supervision.max_restarts == 7 and config.supervision.heartbeat_timeout_s == 45.5
    assert config.init_random_frames == 10 and config.envs_per_worker == 2 and config.total_frames == 64


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("max_restart=2", "'max_restart' is not a setting (did you mean 'max_restarts'?)"),
        ("num_workers=2", "--set num_workers=...: use --workers for num_workers"),
        ("sync=False", "--set sync=...: use --async for sync"),
        ("restart='sometimes'", "restart='sometimes': expected one of permanent, transient, never"),
        ("max_restarts", "expected KEY=VALUE"),
    ],
)
def test_a_bad_set_exits_2_naming_it(setting: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with contextlib.suppress(SystemExit):  # argparse's own errors exit 2 through SystemExit
        assert main(["run", "--set", setting, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert message in err, err


def test_run_help_lists_the_settings_set_takes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--set NAME=VALUE" in out and "max_restarts" in out and "apply_weights" in out


def test_bad_numbers_are_refused_before_torch_is_imported() -> None:
    code = "import sys; from pycollect.cli import main; print(main(['run', '--workers', '-1']), 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "2 False", out.stderr
    assert out.stderr == "pycollect: error: --workers must be a non-negative integer, got -1\n"


def test_every_translated_name_is_a_collector_setting_and_every_flag_an_option() -> None:
    import dataclasses
    import inspect

    from pycollect import Collector, CollectorConfig

    settings = {field.name for field in dataclasses.fields(CollectorConfig)}
    options = {option for action in _run_parser()._actions for option in action.option_strings}
    for name, flag in cli.FLAGS.items():
        assert name in settings or name in inspect.signature(Collector).parameters, name
        assert flag in options, flag


def test_flag_names_translate_any_message_of_the_collector() -> None:
    text = "total_frames=1000 is not a multiple of frames_per_batch=304 (num_workers=2, seed=3); seed ok"
    assert cli.flag_names(text) == (
        "--frames=1000 is not a multiple of --frames-per-batch=304 (--workers=2, --seed=3); seed ok"
    )
    assert cli.flag_names("seed must be a non-negative integer") == "--seed must be a non-negative integer"
    assert cli.flag_names("a fresh seed for max_num_workers") == "a fresh seed for max_num_workers"


def _run_parser() -> argparse.ArgumentParser:
    parser = cli.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return commands.choices["run"]


def test_the_progress_bar_counts_to_the_frames_collected(capsys: pytest.CaptureFixture[str]) -> None:
    # 300 frames over 8 envs is rounded up to 304 a batch, and 500 frames take 2 batches: 608.
    assert main(["run", "--frames", "500", "--frames-per-batch", "300", "--seed", "0"]) == 0
    err = capsys.readouterr().err
    assert "608/608" in err and "/500" not in err, err


def test_warnings_are_one_line_each_in_the_cli_format(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--frames", "500", "--frames-per-batch", "300", "--no-progress", "--json"]) == 0
    err = capsys.readouterr().err
    assert err == (
        "pycollect: warning: --frames-per-batch=300 is not a multiple of the 8 environments stepped per batch "
        "(--envs-per-worker=8); each batch holds 304 frames\n"
        "pycollect: warning: --frames (500) is not exactly divisible by --frames-per-batch (304): the collector "
        "delivers 2 batches, 608 frames (108 more)\n"
    )


@pytest.mark.timeout(180)
def test_the_command_prints_warnings_as_pycollect_warning_lines() -> None:
    result = _run("run", "--frames", "500", "--frames-per-batch", "300", "--no-progress")
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith("pycollect: warning: --frames-per-batch=300 is not a multiple"), result.stderr
    assert "PyCollectWarning" not in result.stderr and "cli.py" not in result.stderr, result.stderr


@pytest.mark.timeout(180)
def test_start_up_time_includes_importing_torch() -> None:
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "pycollect", "run", "--frames", "1000", "--json", "--no-progress"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    # -X importtime: "import time: self [us] | cumulative | package", nested packages indented
    cumulative = {
        line.split("|")[2].strip(): int(line.split("|")[1])
        for line in result.stderr.splitlines()
        if line.startswith("import time:") and line.count("|") == 2 and "cumulative" not in line
    }
    torch_s = cumulative["torch"] / 1e6
    setup_s = json.loads(result.stdout)["setup_seconds"]
    assert setup_s >= torch_s - 0.001, (setup_s, torch_s)


@pytest.mark.timeout(180)
def test_a_restart_is_a_warning_line_and_verbose_shows_starts(capfd: pytest.CaptureFixture[str]) -> None:
    env = "callable:pycollect.testing.envs:RaisingEnv"
    args = ["run", env, "--workers", "1", "--env-kwarg", "only_generation=1", "--frames", "2000", "--no-progress"]
    assert main(args) == 0
    err = capfd.readouterr().err
    assert "pycollect worker 0 (generation 1): failed:\nTraceback (most recent call last):" in err, err
    assert "ZeroDivisionError: boom at step 7" in err
    assert "pycollect: warning: worker 0 (generation 1) exited with status 1\n" in err, err
    assert "pycollect: warning: restarting worker 0 as generation 2 in " in err, err
    assert "debug:" not in err and "info:" not in err
    assert main([*args, "-v"]) == 0
    err = capfd.readouterr().err
    assert "pycollect: debug: worker 0 (generation 2) started, pid " in err, err


def test_help_explains_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "pycollect run" in out and "TensorDict" in out
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    assert "--envs-per-worker" in out and "--verbose" in out and "pycollect: warning:" in out


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    assert "usage: pycollect" in capsys.readouterr().out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    import pycollect

    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.strip() == f"pycollect {pycollect.__version__}"


@pytest.mark.timeout(180)
def test_run_with_workers(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--workers", "2", "--frames", "4000", "--json", "--no-progress"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["mode"] == "sync" and summary["workers"] == 2 and summary["frames"] >= 4000
    assert summary["restarts"] == 0 and summary["episodes"] > 0


@pytest.mark.timeout(180)
def test_the_batched_env_example_of_the_help_runs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    line = next(line for line in capsys.readouterr().out.splitlines() if "envpool:Pong-v5" in line)
    args = line.split()[1:]  # the command as the help writes it, less "pycollect"
    assert main([*args, "--frames", "2000", "--json", "--no-progress"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["workers"] == 2 and summary["frames"] >= 2000 and summary["restarts"] == 0


def test_the_plugin_variables_named_in_help_are_the_managers() -> None:
    from pycollect import cli, plugins

    assert (cli.DISABLE_VARIABLE, cli.LOAD_VARIABLE) == (plugins.DISABLE_VARIABLE, plugins.LOAD_VARIABLE)


def test_pytest_plugin_import_does_not_pull_in_torch() -> None:
    code = "import sys, pycollect.testing.pytest_plugin; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.timeout(180)
def test_an_error_while_collecting_is_reported_with_status_1(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "callable:pycollect.testing.envs:RaisingEnv", "--workers", "1", "--no-progress"])
    assert code == 1
    lines = capsys.readouterr().err.splitlines()
    errors = [line for line in lines if line.startswith("pycollect: error:")]
    assert errors == [lines[-1]], lines  # once, last, on one line (the worker printed its traceback)
    assert errors[0].startswith("pycollect: error: worker 0 (generation 4) exited with status 1;"), errors
    assert errors[0].endswith("gave up after 3 restart(s): ZeroDivisionError: boom at step 7"), errors
    assert sum(line.startswith("pycollect: warning: restarting worker 0") for line in lines) == 3, lines


def _source_copy(into: Path) -> Path:
    """What a fresh clone's root holds: pycollect's source tree, without the built extension."""
    import pycollect

    shutil.copytree(
        Path(pycollect.__file__).parent, into / "pycollect", ignore=shutil.ignore_patterns("_core*.so", "__pycache__")
    )
    return into


@pytest.mark.timeout(300)
@pytest.mark.parametrize("workers", [[], ["--workers", "2"]], ids=["in-process", "workers"])
def test_the_readmes_quick_start_works_from_the_clones_root(tmp_path: Path, workers: list[str]) -> None:
    # `pip install . && pycollect run` leaves the user in the clone's root, whose pycollect/
    # (no _core extension) must not shadow the installed package in the workers or the server.
    clone = _source_copy(tmp_path)
    command = Path(sys.executable).with_name("pycollect")  # the installed console script
    assert command.exists(), command
    result = subprocess.run(
        [str(command), "run", *workers, "--frames", "2000", "--no-progress"],
        cwd=clone,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert "frames/s" in result.stdout


@pytest.mark.timeout(180)
def test_run_with_workers_forks_them_from_the_server_it_prestarts() -> None:
    result = _run("run", "--workers", "2", "--frames", "2000", "--no-progress", "--verbose")
    assert result.returncode == 0, result.stderr
    starts = [line for line in result.stderr.splitlines() if "started, pid" in line]
    assert len(starts) == 2 and all("(forked by the fork server)" in line for line in starts), result.stderr


@pytest.mark.timeout(180)
def test_run_checkpoints_and_resume_continues_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    flags = ["run", "CartPole-v1", "--frames-per-batch", "128", "--workers", "2", "--seed", "0", "--json"]
    flags += ["--no-progress"]
    directory = str(tmp_path / "checkpoints")
    assert main([*flags, "--frames", "1280", "--checkpoint-dir", directory, "--checkpoint-every", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["frames"] == 1280
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir())[-1] == "checkpoint-000000010.pt"
    assert main([*flags, "--frames", "2560", "--resume", directory, "--checkpoint-every", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["frames"] == 2560  # ten batches more, from the checkpoint's
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir())[-1] == "checkpoint-000000020.pt"
    other_seed = [*flags[:-3], "1", "--json", "--no-progress", "--frames", "2560", "--resume", directory]
    assert main(other_seed) == 2
    assert "seed: saved 0, here 1" in capsys.readouterr().err
