"""``moco trials``: each trial's seed and directory, ``{seed}`` pairing evaluations with pretrainings, continuing
after a stop, and the report's one row of n trials."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app
from cluster.job import LaunchError
from cluster.trials import trial_commands
from moco_core import checkpoint
from reports.report import build_report

SMALL = ["model.queue_size=40", "model.bn_groups=2", "optim.batch_size=8", "optim.epochs=1", "augment.crop_size=32",
         "run.knn_every=0", "data.workers=0"]
LINEAR = ["optim.epochs=1", "optim.batch_size=16", "data.workers=0", "data.crop_size=32", "data.resize=32"]


def sets(values: list[str]) -> list[str]:
    return [a for v in values for a in ("--set", v)]


def test_each_trial_has_its_seed_and_directory(tmp_path: Path) -> None:
    pre, post = trial_commands(["pretrain", "-c", "embedded", "--output-dir", str(tmp_path / "moco")], 2, 7)
    assert pre.run_dir == tmp_path / "moco" / "seed_7" and post.run_dir == tmp_path / "moco" / "seed_8"
    assert pre.argv() == ["pretrain", "-c", "embedded", "--seed", "7", "--output-dir", str(pre.run_dir)]
    (linear,) = trial_commands(["eval", "linear", "runs/moco/seed_{seed}/checkpoint_last.pth.tar", "--output-dir",
                                "lin"], 1, 3)
    assert linear.argv()[:3] == ["eval", "linear", "runs/moco/seed_3/checkpoint_last.pth.tar"]
    assert linear.argv()[3:5] == ["--seed", "3"]  # every seeded command takes --seed (issue 57)
    for argv, message in ((["pretrain", "--output-dir", "x", "--seed", "1"], "--seed: not with moco trials"),
                          (["eval", "linear", "w", "--output-dir", "x", "--set", "run.seed=1"], "--seed: not with"),
                          (["eval", "snapshots", "r", "--output-dir", "x"], "moco trials runs one of"),
                          (["pretrain"], "give --output-dir DIR with moco trials")):
        with pytest.raises(LaunchError, match=message):
            trial_commands(argv, 2, 0)


@pytest.mark.slow
def test_trials_of_a_pretraining_and_its_evaluation_are_one_row(shapes_root: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    pre = runner.invoke(app, ["trials", "2", "--seed", "3", "--", "pretrain", "-c", "embedded", "--data",
                              str(shapes_root), *sets(SMALL), "--quiet", "--output-dir", str(tmp_path / "moco")])
    assert pre.exit_code == 0, pre.output
    linear = ["trials", "2", "--seed", "3", "--", "eval", "linear", str(tmp_path / "moco/seed_{seed}/checkpoint_last"
              ".pth.tar"), "-c", "lincls_embedded", "--data", str(shapes_root), *sets(LINEAR), "--quiet",
              "--output-dir", str(tmp_path / "linear")]
    done = runner.invoke(app, linear)
    assert done.exit_code == 0, done.output
    for seed in (3, 4):
        record = json.loads((tmp_path / "linear" / f"seed_{seed}" / "result.json").read_text())
        assert record["config"]["run"]["seed"] == seed
        assert record["backbone"]["source"].endswith(f"moco/seed_{seed}/checkpoint_last.pth.tar")
        assert record["backbone"]["pretrain"]["config"]["run"]["seed"] == seed
    rows = [r for r in build_report([str(tmp_path / "linear")]).tidy if r["metric"] == "top1"]
    assert [r["n"] for r in rows] == ["2"]  # two pretrainings of one recipe, each evaluated: one row of 2 trials
    (tmp_path / "linear" / "seed_4" / "result.json").unlink()  # as if trial 4 was killed after its last epoch
    again = runner.invoke(app, linear)
    assert again.exit_code == 0, again.output
    assert "seed_3: finished before" in again.output and "--resume" in again.output.split("trial seed_4:")[1]
    assert (tmp_path / "linear" / "seed_4" / "result.json").is_file()
    failing = runner.invoke(app, ["trials", "2", "--", "eval", "linear", str(tmp_path / "none.pth.tar"), "--data",
                                  str(shapes_root), "--output-dir", str(tmp_path / "bad")])
    assert failing.exit_code == 1 and "2 of 2 trials failed: seed_0 (exit status 2), seed_1 (exit status 2)" in \
        failing.output


ROOT = Path(__file__).resolve().parents[2]
STOPPABLE = [*SMALL, "run.log_every=1"]  # 32 images, batch 8, 1 epoch: 4 steps, each logged


def logged_steps(out: Path) -> int:
    try:
        lines = (out / "metrics.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return 0
    return max((json.loads(line)["step"] for line in lines if line.endswith("}") and '"loss"' in line), default=0)


def stop_at_step(args: list[str], out: Path, step: int, sig: int = signal.SIGTERM) -> tuple[int, str]:
    """``moco ARGS`` in a process of its own, sent ``sig`` once ``out`` has logged ``step``: (exit status, stderr)."""
    proc = subprocess.Popen([sys.executable, "-m", "cli", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.monotonic() + 120
        while logged_steps(out) < step:
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, f"step {step} not reached"
            time.sleep(0.02)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    return proc.returncode, err


def test_sigterm_stops_the_trials_and_a_rerun_continues(shapes_root: Path, tmp_path: Path) -> None:
    """The issue's case: the running trial stopped with its checkpoint, then the next seed ran to its end and the
    wrapper exited 0, the first seed unfinished."""
    out = tmp_path / "moco"
    command = ["pretrain", "-c", "embedded", "--data", str(shapes_root), *sets(STOPPABLE), "--quiet", "--output-dir",
               str(out)]
    code, err = stop_at_step(["trials", "2", "--", *command], out / "seed_0", 1)
    assert code == 128 + signal.SIGTERM, err  # 143, as a shell shows a process SIGTERM ended
    rerun = f"moco trials 2 -- {shlex.join(command)}"
    assert err.strip().splitlines()[-1] == ("stopped by SIGTERM during trial seed_0 (moco pretrain); nothing more "
                                            f"was started; continue with: {rerun}")
    assert "Traceback" not in err
    assert not (out / "seed_1").exists()  # the next trial never started
    stopped_at = checkpoint.load(out / "seed_0" / checkpoint.LAST)["global_step"]
    assert 1 <= stopped_at < 4
    again = CliRunner().invoke(app, shlex.split(rerun)[1:])  # the line's command, as a user would paste it
    assert again.exit_code == 0, again.output
    for seed in (0, 1):
        assert checkpoint.load(out / f"seed_{seed}" / checkpoint.LAST)["global_step"] == 4
    starts = json.loads((out / "seed_0" / "run.json").read_text())["starts"]
    assert [s["resumed_from"] for s in starts] == [None, str(out / "seed_0" / checkpoint.LAST)]  # continued
