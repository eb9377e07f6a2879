"""The ``pycollect`` command as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

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
        (["run", "--frames-per-batch", "0"], "frames_per_batch must be a positive integer, got 0"),
        (["run", "--workers", "-1"], "num_workers must be a non-negative integer, got -1"),
    ],
)
def test_bad_input_exits_2_with_a_message(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*args, "--no-progress"]) == 2
    assert message in capsys.readouterr().err


def test_help_explains_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "pycollect run" in out and "TensorDict" in out
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert "--envs-per-worker" in capsys.readouterr().out


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
    error = capsys.readouterr().err
    assert error.startswith("pycollect: error: worker 0") and "ZeroDivisionError: boom at step 7" in error
