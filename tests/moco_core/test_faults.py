"""Real faults on real processes: SIGKILL at random steps and inside a checkpoint write, SIGTERM from a
scheduler, and a rank of a two-process run dying or hanging. Each run is ``python -m cli pretrain``."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from moco_core import checkpoint, distributed
from moco_core.config import replace
from moco_core.run.train import pretrain
from tests.conftest import tiny_config

ROOT = Path(__file__).resolve().parents[2]
# 32 images, batch 8: 4 steps an epoch, 3 epochs = 12 steps; a checkpoint after every step.
OVERRIDES = {"model.queue_size": 40, "model.bn_groups": 2, "optim.batch_size": 8, "optim.epochs": 3,
             "augment.crop_size": 32, "run.knn_every": 0, "run.log_every": 1, "run.checkpoint_steps": 1}
KILL_WRITE = """
import os, signal, sys, torch
real, calls = torch.save, []
def save(obj, f, *a, **k):
    calls.append(1)
    if len(calls) == int(os.environ["KILL_AT_SAVE"]):
        real(obj, f, *a, **k)
        f.flush(); f.truncate(f.tell() // 2); f.flush()  # half of it is on disk when the kill comes
        os.kill(os.getpid(), signal.SIGKILL)
    return real(obj, f, *a, **k)
torch.save = save
from cli import main
sys.argv = ["moco", *sys.argv[1:]]
main()
"""

FAIL_STEP = """
import os, sys
import moco_core.run.engine as engine
real, calls = engine.train_step, []
def train_step(*args, **kwargs):
    calls.append(1)
    if len(calls) == int(os.environ["FAIL_AT_STEP"]):
        raise RuntimeError("CUDA out of memory (injected)")  # what no handler expects: the traceback is shown
    return real(*args, **kwargs)
engine.train_step = train_step
from cli import main
sys.argv = ["moco", *sys.argv[1:]]
main()
"""


def command(data: Path, out: Path, *extra: str, resume: bool = False, workers: int = 0) -> list[str]:
    sets = [arg for key, value in OVERRIDES.items() for arg in ("--set", f"{key}={value}")]
    where = ["--resume", str(out)] if resume else ["-c", "embedded", "--data", str(data), "--output-dir", str(out)]
    return [sys.executable, "-m", "cli", "pretrain", *where, *sets, *extra, "--workers", str(workers), "--quiet",
            "--device", "cpu"]


def start(args: list[str], **kwargs: object) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **kwargs.pop("env", {})}  # type: ignore[dict-item]
    return subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **kwargs)  # type: ignore[call-overload]


def logged_steps(out: Path) -> int:
    try:
        lines = (out / "metrics.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return 0
    steps = [json.loads(line)["step"] for line in lines if line.endswith("}") and '"loss"' in line]  # not torn
    return max(steps, default=0)


def wait_for_step(proc: subprocess.Popen[str], out: Path, step: int, timeout: float = 120.0) -> bool:
    """True once ``step`` is logged; False if the process ended first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if logged_steps(out) >= step:
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.02)
    proc.kill()
    raise AssertionError(f"step {step} not reached in {timeout} s")


@pytest.fixture(scope="module")
def reference(shapes_root: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor]:
    """The weights of the same run, never interrupted, in this process: one run for every test that compares with
    it (they only read it)."""
    out = tmp_path_factory.mktemp("reference")
    cfg = replace(tiny_config(shapes_root, out), model={"bn_groups": 2}, optim={"batch_size": 8, "epochs": 3},
                  run={"output_dir": str(out / "reference"), "checkpoint_steps": 1, "device": "cpu"})
    return checkpoint.load(pretrain(cfg, show_progress=False) / checkpoint.LAST)["state_dict"]


def assert_weights(out: Path, expected: dict[str, torch.Tensor]) -> None:
    ckpt = checkpoint.load(out / checkpoint.LAST)
    assert ckpt["global_step"] == 12
    for key, value in expected.items():
        assert torch.equal(ckpt["state_dict"][key], value), key


def test_sigkill_at_random_steps_resumes_to_the_same_weights(shapes_root: Path, tmp_path: Path,
                                                             reference: dict[str, torch.Tensor]) -> None:
    rng = random.Random(0)
    out, kills, resume = tmp_path / "run", [], False
    while True:
        proc = start(command(shapes_root, out, resume=resume))
        target = logged_steps(out) + rng.randint(1, 4)
        if not wait_for_step(proc, out, target):
            break  # the run finished before the chosen step
        time.sleep(rng.uniform(0.0, 0.3))  # anywhere in the next step, or in its checkpoint write
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        kills.append(logged_steps(out))
        saved = checkpoint.load(out / checkpoint.LAST)  # never torn: loads every time
        assert saved["global_step"] >= target - 1
        resume = True
    assert proc.wait(timeout=120) == 0, proc.stderr.read() if proc.stderr else ""
    assert len(kills) >= 2, kills
    assert_weights(out, reference)
    assert not list(out.glob(".*.tmp"))


def test_sigkill_inside_a_checkpoint_write_keeps_the_previous_one(shapes_root: Path, tmp_path: Path,
                                                                 reference: dict[str, torch.Tensor]) -> None:
    out = tmp_path / "run"
    args = [sys.executable, "-c", KILL_WRITE, *command(shapes_root, out)[3:]]
    proc = start(args, env={"KILL_AT_SAVE": "6"})
    assert proc.wait(timeout=120) == -signal.SIGKILL
    saved = checkpoint.load(out / checkpoint.LAST)
    assert saved["global_step"] == 5  # the sixth write was cut in half; the fifth is whole
    torn = list(out.glob(f".{checkpoint.LAST}.*.tmp"))
    assert len(torn) == 1 and 0 < torn[0].stat().st_size
    with pytest.raises(checkpoint.CheckpointError, match="truncated or corrupt"):
        checkpoint.load(torn[0])
    finished = subprocess.run(command(shapes_root, out, resume=True), cwd=ROOT, capture_output=True, text=True,
                              timeout=300)
    assert finished.returncode == 0, finished.stderr
    assert not torn[0].exists()
    assert_weights(out, reference)


def test_sigterm_checkpoints_and_exits_cleanly_then_resumes_exactly(shapes_root: Path, tmp_path: Path,
                                                                    reference: dict[str, torch.Tensor]) -> None:
    out = tmp_path / "run"
    proc = start(command(shapes_root, out, "--set", "run.checkpoint_steps=0"))
    assert wait_for_step(proc, out, 6)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    # 128 + 15, as a shell reports a process SIGTERM ended: `moco pretrain ... && moco eval ...` stops there (it
    # exited 0, and the chain evaluated a half-trained checkpoint)
    assert proc.wait(timeout=60) == 143
    took = time.monotonic() - sent
    err = proc.stderr.read() if proc.stderr else ""
    assert "SIGTERM received" in err and "stopped by SIGTERM" in err and f"--resume --output-dir {out}" in err
    assert took < 30, took  # one step and one checkpoint write
    saved = checkpoint.load(out / checkpoint.LAST)
    assert 6 <= saved["global_step"] < 12
    finished = subprocess.run(command(shapes_root, out, resume=True), cwd=ROOT, capture_output=True, text=True,
                              timeout=300)
    assert finished.returncode == 0, finished.stderr
    assert_weights(out, reference)


def test_sigterm_to_the_whole_process_group_with_loader_workers(shapes_root: Path, tmp_path: Path) -> None:
    """What a scheduler does: every process of the job, the DataLoader workers included, gets SIGTERM."""
    out = tmp_path / "run"
    proc = start(command(shapes_root, out, "--set", "run.checkpoint_steps=0", "--set", "optim.epochs=20",
                         workers=2), start_new_session=True)
    assert wait_for_step(proc, out, 3)
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=60) == 143, proc.stderr.read() if proc.stderr else ""
    saved = checkpoint.load(out / checkpoint.LAST)
    assert saved["global_step"] >= 3 and saved["epoch"] < 20


def ended_with_its_workers(proc: subprocess.Popen[str], timeout: float) -> tuple[int, str]:
    """Wait for ``proc`` (the leader of its own session); its exit code and stderr once every process of the
    session (the loader workers, the ranks) has gone. A process still there after ``timeout`` fails the test."""
    try:
        _, err = proc.communicate(timeout=timeout)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            os.killpg(proc.pid, 0)  # raises ProcessLookupError once the group is empty
            time.sleep(0.1)
        raise AssertionError("the command exited, but processes it started are still running")
    except ProcessLookupError:
        return proc.returncode, err
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the command did not exit within {timeout} s") from None
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_an_unexpected_error_ends_the_run_with_its_loader_workers(shapes_root: Path, tmp_path: Path) -> None:
    """The workers ignore SIGTERM (a scheduler's stop); on an uncaught exception, which keeps the loader alive
    through the traceback, multiprocessing's exit stops them with SIGTERM and waits: the run never exited."""
    args = [sys.executable, "-c", FAIL_STEP, *command(shapes_root, tmp_path / "run", workers=2)[3:]]
    code, err = ended_with_its_workers(start(args, env={"FAIL_AT_STEP": "3"}, start_new_session=True), 60)
    assert code == 1
    assert err.strip().splitlines()[-1] == "RuntimeError: CUDA out of memory (injected)"
    assert "exited unexpectedly" not in err  # the workers' end is not reported as a second failure
    assert checkpoint.load(tmp_path / "run" / checkpoint.LAST)["global_step"] == 2


def test_a_nan_loss_ends_a_two_process_run_with_its_loader_workers(shapes_root: Path, tmp_path: Path) -> None:
    """A rank spawned by --nproc ends on its error with the loader still referenced by the exception: it waited
    for its workers forever, and the launcher for it."""
    args = command(shapes_root, tmp_path / "run", "--nproc", "2", "--set", "optim.lr=1000000000000.0", workers=1)
    code, err = ended_with_its_workers(start(args, env={"OMP_NUM_THREADS": "1"}, start_new_session=True), 120)
    assert code == 1
    assert "error: loss became nan at epoch " in err


@pytest.mark.parametrize("fault", ["SIGKILL", "SIGSTOP"])
def test_a_rank_dying_or_hanging_stops_the_other_within_the_timeout(shapes_root: Path, tmp_path: Path,
                                                                    fault: str) -> None:
    out, port, timeout_s = tmp_path / "run", distributed.free_port(), 10
    ranks = []
    for rank in (0, 1):
        env = {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"}
        ranks.append(start(command(shapes_root, out, "--set", "optim.epochs=50", "--set",
                                   f"run.dist_timeout_s={timeout_s}"), env=env))
    try:
        assert wait_for_step(ranks[0], out, 3)
        ranks[1].send_signal(getattr(signal, fault))
        sent = time.monotonic()
        assert ranks[0].wait(timeout=timeout_s + 50) == 1
        took = time.monotonic() - sent
        err = ranks[0].stderr.read() if ranks[0].stderr else ""
        assert err.strip().splitlines()[-1].startswith("error: rank 0: another process of the run died or hung")
        assert "Traceback" not in err
        assert took < timeout_s + 30, took
        checkpoint.load(out / checkpoint.LAST)
    finally:
        for proc in ranks:
            proc.kill()
            proc.wait()


def test_sigterm_to_one_rank_stops_both_at_the_same_step(shapes_root: Path, tmp_path: Path) -> None:
    """The ranks agree on a stop at the next log step, so none is left waiting in a collective."""
    out, port = tmp_path / "run", distributed.free_port()
    ranks = []
    for rank in (0, 1):
        env = {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"}
        ranks.append(start(command(shapes_root, out, "--set", "optim.epochs=50", "--set", "run.log_every=2",
                                   "--set", "run.checkpoint_steps=0"), env=env))
    try:
        assert wait_for_step(ranks[0], out, 2)
        ranks[1].send_signal(signal.SIGTERM)
        assert [proc.wait(timeout=60) for proc in ranks] == [143, 143]  # the one signalled, and the one it stopped
        err = ranks[0].stderr.read() if ranks[0].stderr else ""
        assert "stopped by a signal to another process" in err
        saved = checkpoint.load(out / checkpoint.LAST)
        assert saved["global_step"] % 2 == 0 and saved["epoch"] < 50  # a log step: where the ranks compare flags
    finally:
        for proc in ranks:
            proc.kill()
            proc.wait()


@pytest.fixture
def file_size_limit():
    """Set RLIMIT_FSIZE for a moment: writes past it fail as on a full disk (EFBIG; Python ignores SIGXFSZ)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)

    def limit(size: int | None) -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft if size is None else size, hard))

    yield limit
    limit(None)


def test_a_full_disk_mid_checkpoint_is_one_line_and_leaves_no_partial_file(shapes_root: Path,
                                                                            tmp_path: Path) -> None:
    """The issue's case: 75 lines of traceback ending in PyTorch's "unexpected pos"."""
    import resource

    out = tmp_path / "run"

    def small_disk() -> None:  # room for the config, the lock and the metrics, not for a checkpoint
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    proc = start(command(shapes_root, out), preexec_fn=small_disk)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 2, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(f"error: cannot write checkpoint {out / checkpoint.LAST}: the "
                                                   f"write stopped short: the device is full or a quota")
    assert err.strip().endswith("no checkpoint was written")
    assert sorted(p.name for p in out.iterdir()) == ["config.yaml", "metrics.jsonl", "run.json"]  # no temporary


def test_a_full_disk_at_start_leaves_no_empty_file(tmp_path: Path, file_size_limit) -> None:
    from moco_core.run.rundir import write_run_files

    file_size_limit(64)
    try:
        with pytest.raises(checkpoint.CheckpointError, match=r"cannot write run.json .*: File too large; no "
                                                              r"run.json was written"):
            write_run_files(tmp_path, {"model": {"arch": "resnet50" * 20}}, {})
    finally:
        file_size_limit(None)
    assert list(tmp_path.iterdir()) == []
