"""run.loggers: TensorBoard and W&B mirror metrics.jsonl, read back with each tool's own reader; a resume logs no
step twice; bad names and missing packages are one-line errors; a failing logger never stops the run."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from cli import app
from moco_core import checkpoint, config
from moco_core.config import ConfigError, load_config
from moco_core.pretrain_config import PretrainConfig
from moco_core.run import loggers
from moco_core.run.train import pretrain
from tests.conftest import tiny_config

INSTALLED = tuple(name for name in config.LOGGERS if importlib.util.find_spec(name) is not None)


def jsonl(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def expected_series(lines: list[dict[str, Any]]) -> dict[str, list[tuple[int, float]]]:
    """Every numeric field but ``step`` as (step, value) in the order written: what a logger must show."""
    series: dict[str, list[tuple[int, float]]] = {}
    for line in lines:
        for name, value in line.items():
            if name != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                series.setdefault(name, []).append((line["step"], float(value)))
    return series


def tensorboard_scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar series of ``log_dir`` as TensorBoard's own reader gives it, purges applied."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})  # 0: keep every point
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def as_tensorboard_stores(series: dict[str, list[tuple[int, float]]]) -> dict[str, list[tuple[int, float]]]:
    """The same values as float32, TensorBoard's scalar type."""
    return {name: [(step, float(np.float32(v))) for step, v in points] for name, points in series.items()}


@pytest.fixture(scope="module")
def resumed_run(shapes_root: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """2 epochs of 2 steps with every installed logger, then --resume from the snapshot after epoch 1 into the
    same directory, as after a kill at the end: steps 3 and 4 are trained and logged again. Returns the run
    directory and the metrics.jsonl lines the first start had written.

    W&B as a user who never set it up: no WANDB_MODE (offline is our default), no key, nothing in $HOME."""
    if not INSTALLED:
        pytest.skip("neither tensorboard nor wandb is installed")
    tmp = tmp_path_factory.mktemp("loggers")
    run_dir = tmp / "run"
    cfg = tiny_config(shapes_root, run_dir, run={"output_dir": str(run_dir), "loggers": INSTALLED, "keep_every": 1})
    with pytest.MonkeyPatch.context() as env:
        for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_PROJECT", "WANDB_CONSOLE", "WANDB_DISABLED"):
            env.delenv(name, raising=False)
        env.setenv("WANDB_SILENT", "true")
        env.setenv("WANDB_ERROR_REPORTING", "false")
        for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
            env.setenv(name, str(tmp / "home" / name.lower()))
        pretrain(cfg, show_progress=False)
        first = jsonl(run_dir)
        pretrain(cfg, resume=run_dir / checkpoint.snapshot_name(0), show_progress=False)
    return run_dir, first


def test_tensorboard_shows_metrics_jsonl_and_a_resume_shows_no_step_twice(
        resumed_run: tuple[Path, list[dict[str, Any]]]) -> None:
    pytest.importorskip("tensorboard")
    run_dir, first = resumed_run
    lines = jsonl(run_dir)
    assert [line["step"] for line in first] == [1, 2, 2, 3, 4, 4] == [line["step"] for line in lines]
    assert lines[3]["images_per_s"] != first[3]["images_per_s"]  # the resume's values differ from the killed run's
    assert len(list((run_dir / "tensorboard").glob("events.out.tfevents.*"))) == 2  # one file a start
    shown = tensorboard_scalars(run_dir / "tensorboard")
    assert set(shown) == {"epoch", "loss", "accuracy", "lr", "images_per_s", "epoch_loss", "epoch_accuracy",
                          "data_wait"}
    # each point once, the resumed run's from step 3 on; the epoch summary repeats lr and images_per_s at the step
    # of its last window, so those series have two points at steps 2 and 4, as metrics.jsonl has two lines there
    assert shown == as_tensorboard_stores(expected_series(lines))


def leet_records(run_file: Path) -> list[dict[str, Any]]:
    """The records of a W&B transaction log (``.wandb``) as wandb's own reader prints them."""
    done = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(run_file)],
                          capture_output=True, text=True, timeout=120, env=os.environ)
    if done.returncode and "No such command 'leet'" in done.stderr:
        pytest.skip("this wandb has no reader of its .wandb files (wandb leet, 0.2x on)")
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def history(records: list[dict[str, Any]]) -> dict[int, dict[str, float]]:
    """W&B's rows, by step, without its own fields (``_step``, ``_runtime``...)."""
    rows = [r["history"] for r in records if r["type"] == "history"]
    return {int(row["step"].get("num", 0)): {k: v for k, v in row["item"].items() if not k.startswith("_")}
            for row in rows}


def rows_of(lines: list[dict[str, Any]]) -> dict[int, dict[str, float]]:
    """metrics.jsonl as W&B keeps it: one row a step, a later line's field over an earlier one's; not the line's
    ``time`` (W&B stamps its rows itself)."""
    rows: dict[int, dict[str, float]] = {}
    for line in lines:
        rows.setdefault(line["step"], {}).update({k: v for k, v in line.items() if k not in ("step", "time")
                                                  and v is not None})
    return rows


def test_wandb_offline_run_holds_the_history_and_config_and_a_resume_continues_it(
        resumed_run: tuple[Path, list[dict[str, Any]]]) -> None:
    pytest.importorskip("wandb")
    run_dir, first = resumed_run
    run_id = (run_dir / loggers.WANDB_ID).read_text().strip()
    starts = sorted((run_dir / "wandb").glob("offline-run-*"))
    assert [p.name.rsplit("-", 1)[1] for p in starts] == [run_id, run_id]  # two starts, one W&B run
    killed, resumed = (leet_records(next(p.glob(f"run-{run_id}.wandb"))) for p in starts)
    run = next(r["run"] for r in killed if r["type"] == "run")
    assert run["run_id"] == run_id and run["display_name"] == "run" and run["project"] == "moco"
    stored = config.to_dict(tiny_config(Path("x"), run_dir))
    logged = {k: v for k, v in run["config"]["update"].items() if not k.startswith("_")}
    assert logged["model"] == stored["model"] and logged["optim"] == stored["optim"]
    assert logged["run"]["loggers"] == list(INSTALLED) and logged["run"]["keep_every"] == 1
    assert history(killed) == rows_of(first)  # steps 1-4 as the first start logged them
    assert history(resumed) == {s: row for s, row in rows_of(jsonl(run_dir)).items() if s > 2}  # 3 and 4 again


def test_scalars_are_a_lines_numbers_at_its_step() -> None:
    assert loggers.scalars({"step": 7, "epoch": 1, "loss": 0.25, "note": "x", "best": None, "flag": True,
                            "n": np.int64(3)}) == (7, {"epoch": 1.0, "loss": 0.25, "n": 3.0})
    assert loggers.scalars({"epoch": 1, "loss": 0.25}) is None  # no step: no x for it
    assert loggers.scalars({"step": 7, "note": "x"}) is None


def test_wandb_is_offline_unless_the_user_says_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)  # a key alone does not send anything anywhere
    assert loggers.wandb_mode() == "offline"
    monkeypatch.setenv("WANDB_MODE", "online")
    assert loggers.wandb_mode() is None  # None: wandb reads WANDB_MODE itself


@pytest.mark.parametrize(("value", "message"), [
    ("[nope]", "run.loggers: unknown logger 'nope' (known: tensorboard, wandb)"),
    ("[tensorboard, tensorboard]", "run.loggers: tensorboard is named twice"),
    ("tensorboard", "run.loggers: expected a list, got 'tensorboard'"),
])
def test_bad_logger_names_are_one_line_errors(value: str, message: str, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())  # every package "installed"
    result = CliRunner().invoke(app, ["pretrain", "-c", "embedded", "--data", str(tmp_path), "--print-config",
                                      "--set", f"run.loggers={value}"])
    assert result.exit_code == 2 and result.output == f"error: {message}\n", result.output


@pytest.mark.parametrize("name", ["tensorboard", "wandb"])
def test_a_logger_whose_package_is_missing_is_refused_with_the_install_command(
        name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == name else real(n, *a))
    line = f"error: run.loggers: {name} is not installed: pip install 'moco[{name}]' (or pip install {name})\n"
    for command in (["pretrain", "-c", "embedded", "--print-config"],
                    ["eval", "linear", "random", "--arch", "resnet18", "-c", "lincls_embedded"],
                    ["eval", "voc", "random", "-c", "voc_embedded", "--print-config"]):
        result = CliRunner().invoke(app, [*command, "--data", str(tmp_path), "--output-dir", str(tmp_path / "out"),
                                          "--set", f"run.loggers=[{name}]"])
        assert result.exit_code == 2 and result.output == line, (command, result.output)
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_defaults_and_presets_log_to_metrics_jsonl_alone() -> None:
    assert load_config(PretrainConfig, "embedded").run.loggers == ()
    with pytest.raises(ConfigError, match="run.loggers"):
        load_config(PretrainConfig, "embedded", ["run.loggers=[tensorboard, 1]"])


class _Crash(Exception):
    pass


class _Recorder:
    """A logger that keeps what it is given; ``fail_at``: the step whose line it raises on."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.logged: list[tuple[int, dict[str, float]]] = []
        self.closed: list[bool] = []
        self.fail_at = fail_at

    def log(self, step: int, values: dict[str, float]) -> None:
        if step == self.fail_at:
            raise OSError(28, "No space left on device")
        self.logged.append((step, values))

    def close(self, *, failed: bool) -> None:
        self.closed.append(failed)


def test_a_failing_logger_is_dropped_with_one_warning_and_the_run_goes_on(
        shapes_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    broken, working = _Recorder(fail_at=2), _Recorder()
    monkeypatch.setattr(loggers, "TensorBoard", lambda run_dir, start: broken)
    monkeypatch.setattr(loggers, "Wandb", lambda run_dir, start, config, quiet=False: working)
    run_dir = tmp_path / "run"
    pretrain(tiny_config(shapes_root, run_dir, optim={"epochs": 1},
                         run={"output_dir": str(run_dir), "loggers": ("tensorboard", "wandb")}), show_progress=False)
    assert [line["step"] for line in jsonl(run_dir)] == [1, 2, 2]  # the record is whole
    assert [step for step, _ in broken.logged] == [1] and broken.closed == []  # dropped at step 2, not closed
    assert [step for step, _ in working.logged] == [1, 2, 2] and working.closed == [False]
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: logger")]
    assert warnings == ["warning: logger tensorboard stopped (OSError: [Errno 28] No space left on device); the run "
                        "goes on without it, metrics.jsonl has every line"]


def test_a_logger_that_cannot_start_is_skipped_and_one_that_runs_is_closed_on_an_error(
        shapes_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    working = _Recorder()

    def no_network(run_dir: Path, start: int, config: dict, quiet: bool = False) -> None:
        raise ConnectionError("wandb.init timed out")

    monkeypatch.setattr(loggers, "TensorBoard", lambda run_dir, start: working)
    monkeypatch.setattr(loggers, "Wandb", no_network)
    real_save = checkpoint.save_atomic

    def crash_at_the_epoch_checkpoint(obj: dict, path: Path) -> None:
        raise _Crash

    monkeypatch.setattr(checkpoint, "save_atomic", crash_at_the_epoch_checkpoint)
    run_dir = tmp_path / "run"
    cfg = tiny_config(shapes_root, run_dir, optim={"epochs": 1},
                      run={"output_dir": str(run_dir), "loggers": ("tensorboard", "wandb")})
    with pytest.raises(_Crash):
        pretrain(cfg, show_progress=False)
    monkeypatch.setattr(checkpoint, "save_atomic", real_save)
    assert [step for step, _ in working.logged] == [1, 2, 2] and working.closed == [True]  # closed, as failed
    assert "warning: logger wandb could not start (ConnectionError: wandb.init timed out)" in capsys.readouterr().err
