"""``moco demo`` end to end on a tiny dataset (linear only; the transfer engines have their own tests)."""

from __future__ import annotations

import io
import json
import re
import sys
import time
from pathlib import Path

import pytest

from moco_core import checkpoint
from moco_demo.run import DEFAULT_TASKS, TASKS, run_demo

TINY_PRETRAIN = ["model.queue_size=40", "model.bn_groups=4", "optim.batch_size=16", "optim.epochs=1",
                 "data.workers=0", "run.knn_every=0", "augment.crop_size=32"]


def tiny(shapes_root: Path) -> dict[str, list[str]]:
    """The demo's presets shrunk to the tiny shapes set, per role."""
    data = f"data.path={shapes_root}"
    return {"moco": [*TINY_PRETRAIN, data], "supervised": [*TINY_PRETRAIN, data],
            "linear": ["optim.epochs=1", "optim.batch_size=16", "data.workers=0", data]}


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_demo_runs_every_step_then_skips_them(shapes_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    overrides = tiny(shapes_root)
    out = tmp_path / "demo"
    terminal = Terminal()
    with monkeypatch.context() as patch:  # run on a terminal, without --progress
        patch.setattr(sys, "stderr", terminal)
        report = run_demo(out, device="cpu", tasks=("linear",), overrides=overrides)
    err = terminal.getvalue()
    assert "demo [6/6] report" in err and "done before" not in err
    # Each long step shows its progress line in place (LINE), never an epoch summary, and the step's closing line
    # clears it; what stays on the screen is the demo's own lines.
    clear = "\r\033[K"
    assert clear + "epoch 1/1 step 1/" in err and "epoch 1/1: loss" not in err
    assert len(re.findall(re.escape(clear) + r"demo \[\d/6\] [^\r\n]+: \d+ s\n", err)) == 6
    visible = [line.rsplit(clear, 1)[-1] for line in err.split("\n")[:-1]]  # what a terminal leaves on screen
    # and the warnings of this tiny data's runs of 1 or 2 steps (moco_core/run/schedule.py)
    assert all(line.startswith(("demo [", "the linear protocol with", "warning: this ")) for line in visible), visible
    records = {name: json.loads((out / "linear" / name / "result.json").read_text())
               for name in ("moco", "supervised", "random")}
    assert records["moco"]["backbone"]["pretrain"]["method"] == "moco"
    assert records["supervised"]["backbone"]["pretrain"]["method"] == "supervised"
    assert records["random"]["backbone"]["format"] == "random"
    markdown = (report / "report.md").read_text()
    assert "MoCo" in markdown and "supervised" in markdown.lower() and "random" in markdown.lower()
    times = json.loads((out / "demo.json").read_text())
    assert [t["name"] for t in times["steps"]][:2] == ["pretrain moco (embedded)", "pretrain supervised "
                                                      "(supervised_embedded)"]
    run_demo(out, device="cpu", tasks=("linear",), overrides=overrides)  # everything is there: only the report
    err = capsys.readouterr().err
    assert err.count("done before") == 5 and "demo [6/6] report: " in err
    again = json.loads((out / "demo.json").read_text())
    assert [t["seconds"] for t in again["steps"]][:5] == [t["seconds"] for t in times["steps"]][:5]  # kept


@pytest.mark.slow
def test_trials_run_the_protocol_per_seed_and_the_report_gathers_them(shapes_root: Path, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from typer.testing import CliRunner

    from cli import app
    from reports.report import build_report

    overrides = tiny(shapes_root)
    out = tmp_path / "demo"
    run_demo(out, device="cpu", tasks=("linear",), overrides=overrides, trials=2, seed=5)
    err = capsys.readouterr().err
    assert "demo [11/11] report" in err
    assert " eta " not in err and "\r" not in err  # not a terminal, no --progress: no step lines in the log
    for seed in (5, 6):  # each trial its own directories, its seed in every step
        moco = json.loads((out / f"seed_{seed}" / "linear" / "moco" / "result.json").read_text())
        assert moco["backbone"]["pretrain"]["config"]["run"]["seed"] == seed and moco["config"]["run"]["seed"] == seed
    shas = {json.loads((out / f"seed_{s}" / "linear" / "moco" / "result.json").read_text())["backbone"]["sha256"]
            for s in (5, 6)}
    assert len(shas) == 2  # two different pretrainings...
    rows = build_report([str(out / f"seed_{s}" / "linear") for s in (5, 6)]).tidy
    top1 = {r["pretraining"]: r["n"] for r in rows if r["metric"] == "top1" and r["origin"] == "ours"}
    assert sorted(top1.values()) == ["2", "2", "2"]  # ...are one row of two trials, as random init and supervised
    assert "± " in (out / "report" / "report.md").read_text()
    run_demo(out, device="cpu", tasks=("linear",), overrides=overrides, trials=2, seed=5)  # continues: all done
    assert capsys.readouterr().err.count("done before") == 10
    bad = CliRunner().invoke(app, ["demo", "--trials", "0", "--output-dir", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "--trials: must be >= 1" in bad.output


def stoppable(shapes_root: Path) -> dict[str, list[str]]:
    """``tiny`` with a MoCo pretraining of 4 steps (2 epochs of 2), each logged: one to stop part-way."""
    overrides = tiny(shapes_root)
    overrides["moco"] = [*overrides["moco"], "optim.epochs=2", "run.log_every=1"]
    return overrides


DEMO = """
import functools, sys
from pathlib import Path
import moco_demo.run
from tests.moco_demo.test_demo import stoppable
moco_demo.run.run_demo = functools.partial(moco_demo.run.run_demo, overrides=stoppable(Path(sys.argv[1])))
from cli import main
sys.argv = ["moco", *sys.argv[2:]]
main()
"""


@pytest.mark.slow
def test_sigterm_stops_the_demo_with_the_command_that_continues_it(shapes_root: Path, tmp_path: Path) -> None:
    """SIGTERM stops the pretraining under way cleanly and pretrain() returns: the demo must not go on to the next
    step, and must say so with a non-zero status (it exited 0), naming the command that continues."""
    import os
    import signal
    import subprocess

    out, root = tmp_path / "demo", Path(__file__).resolve().parents[2]
    args = ["demo", "--output-dir", str(out), "--tasks", "linear", "--device", "cpu"]
    proc = subprocess.Popen([sys.executable, "-c", DEMO, str(shapes_root), *args], cwd=root, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    metrics = out / "pretrain" / "moco" / "metrics.jsonl"
    try:
        deadline = time.monotonic() + 120
        while not (metrics.is_file() and '"loss"' in metrics.read_text()):  # its first step is logged
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1]
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 143, err
    assert err.strip().splitlines()[-1] == (
        "stopped by SIGTERM during demo step 1 of 6 (pretrain moco (embedded)); nothing more was started; continue "
        f"with: moco demo --output-dir {out} --tasks linear --device cpu")
    assert "Traceback" not in err
    assert not (out / "pretrain" / "supervised").exists()  # nothing after the stopped step ran
    assert not (out / "demo.json").exists()  # and its time is not recorded as a step's
    assert checkpoint.load(out / "pretrain" / "moco" / checkpoint.LAST)["global_step"] < 4
    run_demo(out, device="cpu", tasks=("linear",), overrides=stoppable(shapes_root))  # the rerun continues
    starts = json.loads((out / "pretrain" / "moco" / "run.json").read_text())["starts"]
    assert starts[-1]["resumed_from"] == str(out / "pretrain" / "moco" / checkpoint.LAST)
    assert checkpoint.load(out / "pretrain" / "moco" / checkpoint.LAST)["global_step"] == 4
    assert (out / "report" / "report.md").is_file()


def test_unknown_tasks_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown demo tasks"):
        run_demo(tmp_path, tasks=("linear", "imagenet"))


@pytest.mark.parametrize("task", TASKS)
def test_every_demo_task_loads_its_embedded_preset(task: str, tmp_path: Path) -> None:
    """Each task --tasks takes builds its evaluation from its embedded preset, into the step's directory (nothing
    runs here: a preset that does not load, or a task with no evaluation, fails at once, not after the pretraining)."""
    from moco_demo.run import _evaluation

    engine = "detectron2" if task == "densepose" else "torchvision"  # dense pose: DensePose's (not run here)
    config, call = _evaluation(task, "random", tmp_path / task, "cpu", engine, False, [])
    assert callable(call) and not (tmp_path / task).exists()
    assert isinstance(config, dict) and config["run"]["output_dir"] == str(tmp_path / task)  # what its record keeps


def test_densepose_without_its_engine_is_refused_before_any_step(tmp_path: Path) -> None:
    """--tasks densepose on torchvision (or where DensePose is not installed): one line before the pretrainings,
    which would otherwise run for minutes before the first dense-pose step failed."""
    from moco_core.config import ConfigError

    with pytest.raises(ConfigError, match="DensePose"):
        run_demo(tmp_path / "demo", engine="torchvision", tasks=("linear", "densepose"))
    assert not (tmp_path / "demo").exists()


def test_the_default_demo_runs_the_headline_tasks_only() -> None:
    assert DEFAULT_TASKS == ("linear", "voc", "coco") and set(DEFAULT_TASKS) < set(TASKS)
