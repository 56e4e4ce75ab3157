"""``moco launch``: the command a job runs, the SLURM script it submits (through a stand-in ``sbatch``), and the
whole pre-emption cycle on submitit's local executor: the signal, the clean stop, the requeue, the resume."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch

from cluster.job import Command, LaunchError
from moco_core import checkpoint
from moco_core.config import replace
from moco_core.pretrain_config import PretrainConfig
from moco_core.run.train import pretrain

pytest.importorskip("submitit")
ROOT = Path(__file__).resolve().parents[2]
# 32 images, batch 8: 4 steps an epoch, 3 epochs = 12 steps (as tests/moco_core/test_faults.py)
SETS = {"model.queue_size": 40, "model.bn_groups": 2, "optim.batch_size": 8, "optim.epochs": 3,
        "augment.crop_size": 32, "run.knn_every": 0, "run.log_every": 1, "run.checkpoint_steps": 0}


def pretrain_args(data: Path, out: Path, workers: int = 0) -> list[str]:
    sets = [arg for key, value in SETS.items() for arg in ("--set", f"{key}={value}")]
    return ["pretrain", "-c", "embedded", "--data", str(data), *sets, "--workers", str(workers), "--device", "cpu",
            "--quiet", "--output-dir", str(out)]


def moco(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``moco ARGS`` to its end. Its output goes through files: a local job's controller outlives the command
    and keeps the standard streams it inherited, so pipes would not close before the job ends."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        code = subprocess.run([sys.executable, "-m", "cli", *args], cwd=ROOT, stdout=out, stderr=err, text=True,
                              timeout=300, env={**os.environ, **(env or {})}).returncode
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(args, code, out.read(), err.read())


def test_the_command_names_its_run_directory_and_resumes_from_what_it_holds(tmp_path: Path) -> None:
    out = tmp_path / "run"
    cmd = Command.parse(["pretrain", "-c", "moco_v2_200ep", f"--output-dir={out}", "--data", "/data/imagenet"])
    assert (cmd.name, cmd.run_dir) == ("pretrain", out)
    assert cmd.argv() == ["pretrain", "-c", "moco_v2_200ep", "--data", "/data/imagenet", "--output-dir", str(out)]
    out.mkdir()
    (out / checkpoint.LAST).write_bytes(b"")
    # a requeued or resubmitted job continues the run in its --output-dir
    assert cmd.argv()[-3:] == ["--output-dir", str(out), "--resume"]
    linear = Command.parse(["eval", "linear", "ckpt.pth.tar", "--output-dir", str(out)])
    assert linear.name == "eval linear" and "--resume" not in linear.argv()
    (out / "linear_last.pth.tar").write_bytes(b"")
    assert linear.argv()[-1] == "--resume" and not linear.finished()
    (out / "result.json").write_text("{}")
    assert linear.finished()  # nothing is run again
    voc = Command.parse(["eval", "voc", "w.pkl", "--output-dir", "rel"])
    assert voc.run_dir == Path.cwd() / "rel" and voc.argv()[-1] != "--resume"


@pytest.mark.parametrize(("argv", "message"), [
    ([], "moco launch runs one of"),
    (["report", "runs"], "moco launch runs one of"),
    (["pretrain", "-c", "embedded"], "give --output-dir DIR"),
    (["pretrain", "--output-dir", "x", "--nproc", "2"], "--nproc: not with moco launch"),
    (["eval", "linear", "w", "--output-dir", "x", "--resume"], "--resume: not with moco launch"),
])
def test_commands_it_cannot_run_are_refused_in_one_line(argv: list[str], message: str) -> None:
    with pytest.raises(LaunchError, match=message):
        Command.parse(argv)


def test_the_cli_refuses_bad_launches_before_submitting(tmp_path: Path) -> None:
    no_slurm = moco("launch", "--", "pretrain", "-c", "embedded", "--output-dir", str(tmp_path / "r"),
                    env={"PATH": "/usr/bin:/bin"})
    assert no_slurm.returncode == 2 and no_slurm.stderr.startswith("error: submitting to slurm failed: Could not "
                                                                   "detect \"srun\""), no_slurm.stderr
    out = tmp_path / "run"
    bad = moco("launch", "--cluster", "local", "--", "pretrain", "-c", "embedded", "--set", "model.dim=-1",
               "--output-dir", str(out))
    assert bad.returncode == 2 and bad.stderr.startswith("error: moco pretrain: model.dim"), bad.stderr
    assert not out.exists()  # nothing submitted, nothing written
    bad = moco("launch", "--cluster", "pbs", "--", "pretrain", "--output-dir", str(out))
    assert bad.returncode == 2 and "--cluster: expected one of slurm, local" in bad.stderr


def test_slurm_gets_the_script_a_user_would_write(tmp_path: Path, shapes_root: Path) -> None:
    """A stand-in ``sbatch`` (no SLURM here) keeps what it was given and answers like the real one."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sbatch = bin_dir / "sbatch"
    sbatch.write_text(f"#!/bin/sh\ncp \"$1\" {tmp_path}/submitted.sh\necho Submitted batch job 4242\n")
    sbatch.chmod(0o755)
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 1\n")  # submitit looks for it; the job never runs here
    (bin_dir / "srun").chmod(0o755)
    out = tmp_path / "run"
    done = moco("launch", "--nodes", "2", "--gpus-per-node", "8", "--partition", "learn", "--time", "4320",
                "--cpus-per-task", "10", "--mem-gb", "400", "--account", "vision", "--constraint", "h100",
                "--signal-delay", "300", "--folder", str(tmp_path / "jobs"), "--", *pretrain_args(shapes_root, out),
                env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})
    assert done.returncode == 0, done.stderr
    assert "submitted job 4242 (slurm, 16 processes)" in done.stdout
    script = (tmp_path / "submitted.sh").read_text()
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=8", "#SBATCH --gpus-per-node=8",
                 "#SBATCH --partition=learn", "#SBATCH --time=4320", "#SBATCH --signal=USR2@300",
                 "#SBATCH --cpus-per-task=10", "#SBATCH --job-name=moco-pretrain", "#SBATCH --mem=400GB",
                 "#SBATCH --account=vision", "#SBATCH --constraint=h100", f"#SBATCH --output={tmp_path}/jobs/",
                 "--open-mode=append"):
        assert line in script, line
    record = json.loads((out / "launch.json").read_text())["submissions"][0]
    assert record["job_id"] == "4242" and record["tasks"] == 16
    assert record["script"] == str(tmp_path / "jobs" / "4242_submission.sh")
    assert Path(record["script"]).read_text() == script  # submitit renames it with the job id
    assert record["argv"][:2] == ["moco", "pretrain"]


def lock_pid(out: Path) -> int | None:
    try:
        return json.loads((out / ".moco.lock").read_text())["pid"]
    except (OSError, ValueError, KeyError):
        return None


def logged_steps(out: Path) -> int:
    try:
        lines = (out / "metrics.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return 0
    return max((json.loads(line)["step"] for line in lines if line.endswith("}") and '"loss"' in line), default=0)


def wait_until(condition, timeout: float = 180.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.slow
def test_preemption_checkpoints_requeues_and_resumes_bit_identically(shapes_root: Path, tmp_path: Path,
                                                                     tiny_cfg: PretrainConfig) -> None:
    out = tmp_path / "run"
    launch = ["launch", "--cluster", "local", "--gpus-per-node", "0", "--tasks-per-node", "1", "--time", "30",
              "--max-timeouts", "5"]
    started = moco(*launch, "--", *pretrain_args(shapes_root, out))
    assert started.returncode == 0, started.stderr
    job = json.loads((out / "launch.json").read_text())["submissions"][0]["job_id"]
    wait_until(lambda: logged_steps(out) >= 5 and lock_pid(out) is not None)
    first = lock_pid(out)
    os.kill(first, signal.SIGUSR2)  # what SLURM sends --signal-delay seconds before the limit, or to pre-empt
    result = out / "jobs" / f"{job}_0_result.pkl"
    wait_until(result.exists)
    log = (out / "jobs" / f"{job}_0_log.err").read_text()
    assert "SIGUSR2 received: stopping after this step with a checkpoint" in log
    assert f"Requeued job {job} (5 remaining timeouts)" in (out / "jobs" / f"{job}_0_log.out").read_text()
    starts = json.loads((out / "run.json").read_text())["starts"]
    assert [s["scheduler_job"] for s in starts] == [job, job]
    assert starts[0]["resumed_from"] is None and starts[1]["resumed_from"] == str(out / checkpoint.LAST)
    stopped = int(log.split("stopped by SIGUSR2 after step ")[1].split()[0])
    assert 5 <= stopped < 12  # mid-run: the second start continued from that step
    ckpt = checkpoint.load(out / checkpoint.LAST)
    assert ckpt["global_step"] == 12
    reference = replace(tiny_cfg, model={"bn_groups": 2}, optim={"batch_size": 8, "epochs": 3},
                        run={"output_dir": str(tmp_path / "reference"), "device": "cpu"})
    expected = checkpoint.load(pretrain(reference, show_progress=False) / checkpoint.LAST)["state_dict"]
    for key, value in expected.items():
        assert torch.equal(ckpt["state_dict"][key], value), key

    again = moco(*launch, "--wait", "--", *pretrain_args(shapes_root, out))  # a resubmission resumes: no work left
    assert again.returncode == 0, again.stderr
    assert len(json.loads((out / "run.json").read_text())["starts"]) == 3
    assert checkpoint.load(out / checkpoint.LAST)["global_step"] == 12
    failed = moco(*launch, "--wait", "--", "eval", "linear", str(tmp_path / "missing.pth.tar"), "--data",
                  str(shapes_root), "--output-dir", str(tmp_path / "linear"))
    assert failed.returncode == 1
    assert failed.stderr.startswith("error: job ") and "missing.pth.tar" in failed.stderr  # the command's own error
    assert len(failed.stderr.splitlines()) == 1


@pytest.mark.slow
def test_a_stop_ends_launch_wait_with_the_command_that_continues(shapes_root: Path, tmp_path: Path) -> None:
    """SIGTERM to the job's task (what scancel sends), then to ``moco launch --wait`` itself: each time the run
    checkpoints, the command exits 143 naming itself, and the last resubmission finishes the run. The wait used
    to report a stopped job as a success."""
    out = tmp_path / "run"
    launch = ["launch", "--cluster", "local", "--gpus-per-node", "0", "--tasks-per-node", "1", "--time", "30",
              "--wait", "--", *pretrain_args(shapes_root, out)]
    rerun = shlex.join(["moco", *launch])

    def stopped_by_sigterm(to_the_wait: bool) -> str:
        with tempfile.TemporaryFile("w+") as log:  # the job's controller keeps the streams it inherits
            proc = subprocess.Popen([sys.executable, "-m", "cli", *shlex.split(rerun)[1:]], cwd=ROOT, stdout=log,
                                    stderr=log, text=True)
            before = logged_steps(out)
            wait_until(lambda: lock_pid(out) is not None and logged_steps(out) > before)
            os.kill(proc.pid if to_the_wait else lock_pid(out), signal.SIGTERM)
            assert proc.wait(timeout=120) == 143
            log.seek(0)
            return log.read().strip().splitlines()[-1]

    line = stopped_by_sigterm(to_the_wait=False)
    assert line.startswith("stopped by SIGTERM during job ") and line.endswith(
        f"(its checkpoint is written); nothing more was started; continue with: {rerun}"), line
    stopped_at = checkpoint.load(out / checkpoint.LAST)["global_step"]
    assert 1 <= stopped_at < 12
    line = stopped_by_sigterm(to_the_wait=True)
    assert line.startswith("stopped by SIGTERM during the wait for job ") and line.endswith(
        f"(the job was told to stop too); nothing more was started; continue with: {rerun}"), line
    assert lock_pid(out) is None  # the job ended before the wait did: a resubmission finds the directory free
    assert stopped_at < checkpoint.load(out / checkpoint.LAST)["global_step"] < 12
    done = moco(*shlex.split(rerun)[1:])
    assert done.returncode == 0, done.stderr
    assert checkpoint.load(out / checkpoint.LAST)["global_step"] == 12
    assert len(json.loads((out / "run.json").read_text())["starts"]) == 3  # each start resumed the last
