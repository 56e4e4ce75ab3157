"""Mid-epoch checkpoints, resuming part-way through an epoch, and stopping on request, in one process."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from moco_core import checkpoint
from moco_core.config import replace
from moco_core.pretrain_config import PretrainConfig
from moco_core.run.preemption import ResumableSampler, StopSignal
from moco_core.run.train import pretrain


def step_cfg(tiny_cfg: PretrainConfig, out: Path, **run: object) -> PretrainConfig:
    """Batch 8 (4 steps an epoch over the 32 images), 2 epochs, a checkpoint every 3 steps."""
    return replace(tiny_cfg, optim={"batch_size": 8}, model={"bn_groups": 2},
                   run={"output_dir": str(out), "checkpoint_steps": 3, **run})


def assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = (checkpoint.load(p / checkpoint.LAST)["state_dict"] for p in (a, b))
    assert wa.keys() == wb.keys()
    for key in wa:
        assert torch.equal(wa[key], wb[key]), key


def test_resumable_sampler_skips_exactly_what_was_seen() -> None:
    data = list(range(20))
    whole = ResumableSampler(data, num_replicas=2, rank=1, shuffle=True, seed=3, drop_last=True)
    whole.set_epoch(4)
    order = list(whole)
    tail = ResumableSampler(data, num_replicas=2, rank=1, shuffle=True, seed=3, drop_last=True)
    tail.set_epoch(4)
    tail.start = 4
    assert list(tail) == order[4:] and len(tail) == len(order) - 4 == 6
    tail.start = 0
    assert list(tail) == order


def test_step_checkpoints_record_the_position(tiny_cfg: PretrainConfig, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, int, int]] = []
    save = checkpoint.save_atomic

    def spy(obj: dict, path: Path) -> None:
        seen.append((obj["global_step"], obj["epoch"], obj["sampler"]["position"]))
        save(obj, path)

    monkeypatch.setattr(checkpoint, "save_atomic", spy)
    pretrain(step_cfg(tiny_cfg, tmp_path / "run"), show_progress=False)
    # Steps 3 and 6 are mid-epoch (epoch field = the unfinished epoch); 4 and 8 end epochs 1 and 2. Step 3's
    # position is batch 3 of epoch 0, step 6's is batch 2 of epoch 1. No step checkpoint on an epoch's last batch.
    assert seen == [(3, 0, 3), (4, 1, 0), (6, 1, 2), (8, 2, 0)]


def test_resume_from_a_mid_epoch_checkpoint_is_bit_identical(tiny_cfg: PretrainConfig, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    straight = pretrain(step_cfg(tiny_cfg, tmp_path / "straight"), show_progress=False)
    kept = tmp_path / "kept"
    kept.mkdir()
    save = checkpoint.save_atomic

    def keep_step_6(obj: dict, path: Path) -> None:  # what a run killed after step 6 would have left
        save(obj, path)
        if obj["global_step"] == 6:
            shutil.copy(path, kept / checkpoint.LAST)

    monkeypatch.setattr(checkpoint, "save_atomic", keep_step_6)
    pretrain(step_cfg(tiny_cfg, tmp_path / "throwaway"), show_progress=False)
    monkeypatch.setattr(checkpoint, "save_atomic", save)
    resumed = pretrain(step_cfg(tiny_cfg, kept), resume=kept, show_progress=False)
    assert_same_weights(straight, resumed)
    ckpt = checkpoint.load(resumed / checkpoint.LAST)
    assert ckpt["global_step"] == 8 and ckpt["sampler"]["position"] == 0
    straight_lines = [json.loads(line) for line in (straight / "metrics.jsonl").read_text().splitlines()]
    resumed_lines = [json.loads(line) for line in (resumed / "metrics.jsonl").read_text().splitlines()]
    # The resumed run logged steps 7 and 8 and epoch 2's summary, with the same losses as the straight run;
    # the epoch mean includes the two steps trained before the kill (restored from the checkpoint).
    pick = [{k: r[k] for k in ("step", "loss", "epoch_loss") if k in r} for r in straight_lines]
    assert [{k: r[k] for k in ("step", "loss", "epoch_loss") if k in r} for r in resumed_lines] == [
        r for r in pick if r["step"] > 6]


def test_a_stop_request_checkpoints_mid_epoch_and_resumes_exactly(tiny_cfg: PretrainConfig, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    straight = pretrain(step_cfg(tiny_cfg, tmp_path / "straight", checkpoint_steps=0), show_progress=False)
    monkeypatch.setattr(StopSignal, "requested", lambda self, step: step == 5)  # as if SIGTERM came in step 5
    run = pretrain(step_cfg(tiny_cfg, tmp_path / "run", checkpoint_steps=0), show_progress=False)
    ckpt = checkpoint.load(run / checkpoint.LAST)
    assert (ckpt["global_step"], ckpt["epoch"], ckpt["sampler"]["position"]) == (5, 1, 1)
    err = capsys.readouterr().err
    assert "stopped by" in err and "after step 5 (epoch 2)" in err and f"--resume --output-dir {run}" in err
    monkeypatch.undo()
    resumed = pretrain(step_cfg(tiny_cfg, run, checkpoint_steps=0), resume=run, show_progress=False)
    assert_same_weights(straight, resumed)


def test_a_stop_on_the_last_batch_of_an_epoch_writes_the_epoch_checkpoint(tiny_cfg: PretrainConfig, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(StopSignal, "requested", lambda self, step: step == 4)
    run = pretrain(step_cfg(tiny_cfg, tmp_path / "run", checkpoint_every=5), show_progress=False)
    ckpt = checkpoint.load(run / checkpoint.LAST)
    assert (ckpt["global_step"], ckpt["epoch"], ckpt["sampler"]["position"]) == (4, 1, 0)
    summaries = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if "epoch_loss" in line]
    assert len(summaries) == 1  # epoch 1 ended normally before the stop


def test_a_checkpoint_from_other_data_is_refused(tiny_cfg: PretrainConfig, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(StopSignal, "requested", lambda self, step: step == 3)
    run = pretrain(step_cfg(tiny_cfg, tmp_path / "run"), show_progress=False)
    monkeypatch.undo()
    bigger_batches = replace(step_cfg(tiny_cfg, run), optim={"batch_size": 16}, model={"bn_groups": 4})
    with pytest.raises(checkpoint.CheckpointError, match="stopped after batch 3 of epoch 1, but an epoch has 2"):
        pretrain(bigger_batches, resume=run, show_progress=False)


def test_partial_writes_and_torn_log_lines_are_cleaned_on_resume(tiny_cfg: PretrainConfig, tmp_path: Path) -> None:
    run = pretrain(replace(step_cfg(tiny_cfg, tmp_path / "run"), optim={"epochs": 1}), show_progress=False)
    stale = run / f".{checkpoint.LAST}.abc123.tmp"
    stale.write_bytes(b"PK\x03\x04 half a checkpoint")
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"step": 5, "loss": 6.')  # a process killed in the middle of a line
    resumed = pretrain(replace(step_cfg(tiny_cfg, run), optim={"epochs": 2}), resume=run, show_progress=False)
    assert not stale.exists()
    lines = [json.loads(line) for line in (resumed / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines if "loss" in r] == [1, 2, 3, 4, 5, 6, 7, 8]



HOLD_A_WORKER_THEN_FAIL = """
import multiprocessing, sys, time
from moco_core.run import preemption
def worker():
    preemption.ignore_stop_signals()  # as the data workers do
    time.sleep(300)
if sys.argv[1] == "hook":
    preemption.kill_workers_at_exit()
    preemption.kill_workers_at_exit()  # once is enough; twice must not fail
held = multiprocessing.get_context("fork").Process(target=worker, daemon=True)  # as a DataLoader starts them
held.start()
raise RuntimeError("failed with a worker running")
"""


@pytest.mark.parametrize("hook", [True, False])
def test_an_exit_on_an_error_does_not_wait_for_workers_that_ignore_sigterm(hook: bool) -> None:
    """multiprocessing ends daemonic children with SIGTERM and then joins them without a limit; the hook
    (what moco pretrain and a cluster job register) kills them first. Without it the process hangs: the case
    with no hook shows this test can tell."""
    import os
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", HOLD_A_WORKER_THEN_FAIL, "hook" if hook else "no hook"],
                            stderr=subprocess.PIPE, text=True, cwd=Path(__file__).parents[3],
                            start_new_session=True)
    try:
        _, err = proc.communicate(timeout=60 if hook else 8)
        assert hook, "exited without the hook: the hazard this test relies on is gone"
        assert proc.returncode == 1
        assert err.strip().splitlines()[-1] == "RuntimeError: failed with a worker running"
    except subprocess.TimeoutExpired:
        assert not hook, "the process waited for its worker at exit"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the worker too, if it is still there
        except ProcessLookupError:
            pass
        proc.wait()


STOPPED_EVALUATION = """
import sys, time
from torch.utils.data import DataLoader, Dataset
from moco_core.run.preemption import Stopped, Stopper

class Slow(Dataset):
    def __len__(self):
        return 100000
    def __getitem__(self, i):
        time.sleep(0.005)
        return i

def evaluation():
    for n, _ in enumerate(DataLoader(Slow(), batch_size=2, num_workers=2)):
        if n == 5:
            print("running", flush=True)

try:
    with Stopper() as stopper:
        stopper.doing = "an evaluation"
        evaluation()
except Stopped as stop:
    print(stop, file=sys.stderr, flush=True)
    sys.exit(stop.exit_code)
"""


def test_a_stopped_evaluation_says_one_line_not_its_killed_workers(tmp_path: Path) -> None:
    """A scheduler's SIGTERM reaches the job's every process, the loader's workers too. Under a Stopper (moco demo,
    sweep, trials) the evaluation under way stops with its one line; the workers' ends, which the DataLoader's
    SIGCHLD handler reports, are no error of ours to print after it (it printed 'Exception ignored in ...
    RuntimeError: DataLoader worker (pid N) is killed by signal: Terminated' with a traceback)."""
    import os
    import signal
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[3]
    proc = subprocess.Popen([sys.executable, "-c", STOPPED_EVALUATION], cwd=root, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "running\n"
        os.killpg(proc.pid, signal.SIGTERM)  # the whole process group, as a scheduler signals a job
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 143, err
    assert err.strip() == "stopped by SIGTERM during an evaluation", err
