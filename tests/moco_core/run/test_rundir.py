"""Run directories have one writer: a lock naming its holder, taken over when the holder is dead; and a finished
evaluation is never overwritten by the next one pointed at the same directory."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app
from moco_core.run.rundir import LOCK, RunDirBusy, acquire_run_dir, release_run_dir

ROOT = Path(__file__).resolve().parents[3]
runner = CliRunner()

HOLD = """
import sys, time
from pathlib import Path
from moco_core.run.rundir import acquire_run_dir
acquire_run_dir(Path(sys.argv[1]))
print("held", flush=True)
time.sleep(600)
"""


@pytest.fixture
def held(tmp_path: Path):
    """A run directory locked by another live process (killed at the end)."""
    run_dir = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], stdout=subprocess.PIPE, text=True,
                              cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert holder.stdout.readline().strip() == "held"
    yield run_dir, holder
    holder.kill()
    holder.wait()


def test_a_second_writer_is_refused_naming_the_holder_until_the_holder_dies(held) -> None:
    run_dir, holder = held
    with pytest.raises(RunDirBusy, match=rf"is in use by pid {holder.pid} on host {socket.gethostname()} since "):
        acquire_run_dir(run_dir)
    holder.send_signal(signal.SIGKILL)  # no clean-up: the lock file stays, but its lock dies with the process
    holder.wait()
    assert (run_dir / LOCK).exists()
    fd = acquire_run_dir(run_dir)  # taken over
    assert json.loads((run_dir / LOCK).read_text())["pid"] == os.getpid()
    release_run_dir(run_dir, fd)
    assert not (run_dir / LOCK).exists()  # cleaned up on exit
    release_run_dir(run_dir, acquire_run_dir(run_dir))  # and free again


def test_a_lock_released_meanwhile_is_not_taken_on_a_removed_file(tmp_path: Path) -> None:
    """Holder A releases (removing the file) after B opened it but before B locked it: B must lock the new file,
    or a third process C could lock that one while B holds the removed one."""
    first = acquire_run_dir(tmp_path)
    stale = os.open(tmp_path / LOCK, os.O_RDWR)
    release_run_dir(tmp_path, first)
    second = acquire_run_dir(tmp_path)
    assert os.fstat(second).st_ino == os.stat(tmp_path / LOCK).st_ino
    with pytest.raises(RunDirBusy):
        acquire_run_dir(tmp_path)
    os.close(stale)
    release_run_dir(tmp_path, second)


PRETRAIN = ["--set", "model.arch=resnet18", "--set", "optim.batch_size=8", "--set", "model.bn_groups=2",
            "--set", "model.queue_size=16", "--set", "optim.epochs=1", "--set", "augment.crop_size=32",
            "--set", "data.workers=0", "--set", "run.knn_every=0", "--quiet"]


def test_every_command_that_writes_a_run_directory_refuses_a_held_one(held, shapes_root: Path) -> None:
    run_dir, holder = held
    commands = [
        ["pretrain", "-c", "embedded", "--data", str(shapes_root), *PRETRAIN],
        ["eval", "linear", "random", "--arch", "resnet18", "-c", "lincls_embedded", "--data", str(shapes_root)],
        ["eval", "voc", "-c", "voc_embedded", "random", "--engine", "torchvision"],
        ["eval", "coco", "-c", "coco_embedded", "random", "--engine", "torchvision", "--resume"],
    ]
    for command in commands:
        result = runner.invoke(app, [*command, "--output-dir", str(run_dir)])
        assert result.exit_code == 2, (command, result.output)
        assert f"error: run.output_dir: {run_dir} is in use by pid {holder.pid}" in result.output
        assert "Traceback" not in result.output and result.output.count("\n") == 1
    assert sorted(p.name for p in run_dir.iterdir()) == [LOCK]  # nothing written beside the holder


def test_a_finished_evaluation_is_kept_and_an_unfinished_one_starts_over(shapes_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "linear"
    args = ["eval", "linear", "random", "--arch", "resnet18", "-c", "lincls_embedded", "--data", str(shapes_root),
            "--output-dir", str(out), "--quiet", "--set", "optim.epochs=1", "--set", "data.workers=0",
            "--set", "data.crop_size=32", "--set", "data.resize=32"]
    out.mkdir()
    (out / "run.json").write_text('{"starts": [{"argv": ["moco"]}]}')  # a killed evaluation's: written first
    (out / "config.yaml").write_text("left by a killed evaluation\n")
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    kept = {name: (out / name).read_bytes() for name in ("config.yaml", "metrics.jsonl", "linear_final.pth.tar")}
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert f"error: run.output_dir: {out} already holds a finished linear evaluation (result.json)" in result.output
    assert {name: (out / name).read_bytes() for name in kept} == kept
    assert not list(out.glob("result.*.result.json"))
    result = runner.invoke(app, [*args, "--resume", "--set", "optim.epochs=2"])  # asked: extended, a new record
    assert result.exit_code == 0, result.output
    extended = json.loads(next(out.glob("result.*.result.json")).read_text())
    assert [h["epoch"] for h in extended["history"]] == [0, 1]


def test_a_fine_tuning_is_continued_only_when_asked(tmp_path: Path) -> None:
    from moco_core import checkpoint

    out = tmp_path / "voc"
    out.mkdir()
    (out / checkpoint.LAST).write_bytes(b"an earlier run's checkpoint")
    result = runner.invoke(app, ["eval", "voc", "-c", "voc_embedded", "random", "--engine",
                                 "torchvision", "--output-dir", str(out)])
    assert result.exit_code == 2
    assert f"already holds a fine-tuning ({checkpoint.LAST}); pass --resume" in result.output
    assert (out / checkpoint.LAST).read_bytes() == b"an earlier run's checkpoint"


def test_two_pretrainings_started_together_leave_one_run(shapes_root: Path, tmp_path: Path) -> None:
    """The issue's case: both exited 0 and metrics.jsonl logged every step twice."""
    out = tmp_path / "run"
    args = [sys.executable, "-m", "cli", "pretrain", "-c", "embedded", "--data", str(shapes_root),
            "--output-dir", str(out), *PRETRAIN]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    runs = [subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True) for _ in range(2)]
    outputs = [r.communicate(timeout=300)[0] for r in runs]
    codes = sorted(r.returncode for r in runs)
    assert codes == [0, 2], outputs
    refused = outputs[[r.returncode for r in runs].index(2)]
    assert "is in use by pid" in refused or "already holds a run" in refused, refused
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(steps) == len(set(steps))


def test_a_lost_history_warning_escapes_the_run_directory_name(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """The warning of a torn run.json is one line whatever the directory is called: a name holding a line break
    and a terminal escape is shown escaped, as errors show it (it was printed raw: two lines and a live escape)."""
    from moco_core.run.rundir import write_run_files

    run_dir = tmp_path / "run\n\x1b[2Jx"
    run_dir.mkdir()
    (run_dir / "run.json").write_text('{\n  "starts": [{"seed": 1')  # ours, cut mid-write
    write_run_files(run_dir, {"model": {"arch": "resnet18"}}, {})
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("warning: ") and "\x1b" not in err, err
    assert "run\\n\\x1b[2Jx" in err and "lost" in err
    assert json.loads((run_dir / "run.json").read_text())["lost"]
