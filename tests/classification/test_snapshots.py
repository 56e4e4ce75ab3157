"""``moco eval snapshots``: which snapshots are evaluated, skipped, resumed and waited for; then a real run's
snapshots through the command into the report's curve."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from classification.snapshots import (
    FollowEnded,
    evaluate_snapshots,
    expected_snapshots,
    pretraining_running,
    snapshot_name,
)
from cli import app
from moco_core import checkpoint
from moco_core.config import ConfigError
from moco_core.run.rundir import LOCK
from moco_core.run.train import pretrain
from reports.report import build_report
from tests.conftest import tiny_config


def fake_run(root: Path, keep_every: int, epochs: int, written: list[int]) -> Path:
    run = root / "run"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump({"run": {"keep_every": keep_every}, "optim": {"epochs": epochs}}))
    for index in written:
        (run / snapshot_name(index)).write_bytes(b"")
    return run


class Evaluations:
    """Stands in for the linear protocol: records its calls and writes result.json as a finished one does."""

    def __init__(self, then: dict[str, int] | None = None) -> None:
        self.calls: list[tuple[str, dict, bool]] = []
        self.then = then or {}  # after evaluating this snapshot, the pretraining writes that one

    def __call__(self, snapshot: Path, out: Path, extra: dict, resume: bool) -> Path:
        self.calls.append((snapshot.name, extra, resume))
        out.mkdir(parents=True, exist_ok=True)
        (out / "result.json").write_text("{}")
        if snapshot.name in self.then:
            (snapshot.parent / snapshot_name(self.then[snapshot.name])).write_bytes(b"")
        return out / "result.json"


def test_snapshots_are_the_ones_keep_every_writes(tmp_path: Path) -> None:
    # keep_every 2 over 6 epochs: after epochs 2, 4, 6, named by their 0-based index as moco_core.run.train does
    assert expected_snapshots(fake_run(tmp_path, 2, 6, [])) == ["checkpoint_0001.pth.tar", "checkpoint_0003.pth.tar",
                                                                "checkpoint_0005.pth.tar"]
    with pytest.raises(ConfigError, match="not a pretraining run directory"):
        expected_snapshots(tmp_path)


def test_each_snapshot_is_evaluated_once_and_an_interrupted_one_resumed(tmp_path: Path) -> None:
    run = fake_run(tmp_path, 2, 6, [1, 3])
    out = tmp_path / "evals"
    (out / "checkpoint_0003").mkdir(parents=True)
    (out / "checkpoint_0003" / "linear_last.pth.tar").write_bytes(b"")  # killed after some epochs
    evals = Evaluations()
    evaluate_snapshots(run, out, evals, log=lambda _: None)
    assert evals.calls == [("checkpoint_0001.pth.tar", {"snapshot": {"run": str(run), "epoch": 2}}, False),
                           ("checkpoint_0003.pth.tar", {"snapshot": {"run": str(run), "epoch": 4}}, True)]
    again = Evaluations()
    evaluate_snapshots(run, out, again, log=lambda _: None)
    assert again.calls == []  # run it again at any time: nothing is evaluated twice


def test_follow_waits_for_the_snapshots_still_to_come(tmp_path: Path) -> None:
    run = fake_run(tmp_path, 2, 6, [1])
    said: list[str] = []
    evals = Evaluations(then={"checkpoint_0001.pth.tar": 3, "checkpoint_0003.pth.tar": 5})
    evaluate_snapshots(run, tmp_path / "evals", evals, follow=True, poll_s=0.01, log=said.append)
    assert [name for name, _, _ in evals.calls] == ["checkpoint_0001.pth.tar", "checkpoint_0003.pth.tar",
                                                    "checkpoint_0005.pth.tar"]
    assert any(line.startswith("waiting for checkpoint_0003.pth.tar (2 snapshot(s) to come") for line in said)
    (tmp_path / "none").mkdir()
    with pytest.raises(ConfigError, match="keeps no snapshots"):
        evaluate_snapshots(fake_run(tmp_path / "none", 0, 6, []), tmp_path / "e", evals, follow=True)


@pytest.mark.slow
def test_a_runs_snapshots_through_the_command_into_the_report_curve(shapes_root: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    pretrain(tiny_config(shapes_root, run, optim={"epochs": 2}, run={"keep_every": 1}), show_progress=False)
    assert sorted(p.name for p in run.glob("checkpoint_0*.pth.tar")) == ["checkpoint_0000.pth.tar",
                                                                         "checkpoint_0001.pth.tar"]
    args = ["eval", "snapshots", str(run), "-c", "lincls_embedded", "--data", str(shapes_root), "--quiet",
            *[a for s in ("optim.epochs=1", "optim.batch_size=16", "data.workers=0", "data.crop_size=32",
                          "data.resize=32") for a in ("--set", s)]]
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 0, done.output
    records = {int(p.parent.name[-4:]) + 1: json.loads(p.read_text())
               for p in (run / "linear_snapshots").glob("*/result.json")}
    assert sorted(records) == [1, 2]
    assert all(r["snapshot"] == {"run": str(run), "epoch": e} and r["sanity_check"] == "passed"
               for e, r in records.items())
    again = CliRunner().invoke(app, [*args, "--follow", "--poll", "0.1"])  # every snapshot to come is evaluated
    assert again.exit_code == 0 and f"all 2 snapshots of {run} are evaluated" in again.output
    bad_poll = CliRunner().invoke(app, [*args, "--follow", "--poll", "0"])
    assert bad_poll.exit_code == 2 and "--poll: must be > 0 seconds" in bad_poll.output
    (curve,) = build_report([str(run)]).curves  # moco report: top-1 against the pretraining's epochs
    assert curve.linear == tuple((e, pytest.approx(records[e]["metrics"]["top1"])) for e in (1, 2))
    assert "2 ep" in curve.label  # named by the run's latest checkpoint
    bad = CliRunner().invoke(app, ["eval", "snapshots", str(tmp_path / "nowhere"), "--data", str(shapes_root)])
    assert bad.exit_code == 2 and "no such run directory" in bad.output
    assert checkpoint.load(run / "checkpoint_0000.pth.tar")["epoch"] == 1


HOLD_LOCK = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)  # what moco_core.run.rundir.acquire_run_dir does for a live run
print("locked", flush=True)
sys.stdin.read()  # until killed
"""


@contextlib.contextmanager
def live_pretraining(run: Path) -> Iterator[subprocess.Popen[str]]:
    """A process holding the run directory's lock, as a running pretraining does."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(run / LOCK)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "locked\n"
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_follow_gives_up_once_no_live_process_holds_the_lock(tmp_path: Path) -> None:
    run = fake_run(tmp_path, 2, 6, [1])
    said: list[str] = []
    with live_pretraining(run) as holder:
        assert pretraining_running(run) is True

        class WhileRunning(Evaluations):  # the pretraining writes the next snapshot, then dies (SIGKILL)
            def __call__(self, snapshot: Path, out: Path, extra: dict, resume: bool) -> Path:
                record = super().__call__(snapshot, out, extra, resume)
                if snapshot.name == "checkpoint_0003.pth.tar":
                    holder.kill()
                    holder.wait()
                return record

        evals = WhileRunning(then={"checkpoint_0001.pth.tar": 3})
        start = time.monotonic()
        with pytest.raises(FollowEnded) as ended:
            evaluate_snapshots(run, tmp_path / "evals", evals, follow=True, poll_s=0.02, grace_s=0.5, log=said.append)
        took = time.monotonic() - start
    assert (run / LOCK).exists() and pretraining_running(run) is False  # a dead holder's lock is free
    assert [name for name, _, _ in evals.calls] == ["checkpoint_0001.pth.tar", "checkpoint_0003.pth.tar"]
    assert str(ended.value) == (f"{run}: stopped waiting for 1 snapshot(s) (checkpoint_0005.pth.tar): the "
                                f"pretraining is not running (no live process has held its .moco.lock for 0.5 s) "
                                f"and no snapshot came meanwhile; 2 of 3 evaluated")
    assert ended.value.exit_code == 1
    assert 0.5 <= took < 10, took


def test_follow_waits_for_a_live_pretraining_until_its_timeout(tmp_path: Path) -> None:
    run = fake_run(tmp_path, 2, 6, [])
    with live_pretraining(run):
        start = time.monotonic()
        with pytest.raises(FollowEnded, match=r"timed out after 0.6 s with no new snapshot \(--timeout\); 0 of 3 "):
            # a grace far shorter than the timeout: a live holder keeps it from ending the wait
            evaluate_snapshots(run, tmp_path / "evals", Evaluations(), follow=True, poll_s=0.02, grace_s=0.1,
                               timeout_s=0.6, log=lambda _: None)
        assert 0.6 <= time.monotonic() - start < 10


def test_follow_ends_at_once_when_the_pretraining_has_finished_without_a_snapshot(tmp_path: Path) -> None:
    run = fake_run(tmp_path, 2, 6, [1, 5])  # 3 was deleted, say
    torch.save({"epoch": 6, "state_dict": {}}, run / checkpoint.LAST)  # all 6 epochs done; no lock: it ended
    evals = Evaluations()
    start = time.monotonic()
    with pytest.raises(FollowEnded, match=r"\(checkpoint_0003.pth.tar\): the pretraining has finished without "
                                          r"writing them; 2 of 3 evaluated"):
        evaluate_snapshots(run, tmp_path / "evals", evals, follow=True, poll_s=0.02, log=lambda _: None)
    assert time.monotonic() - start < 5  # not the hour of grace
    assert [name for name, _, _ in evals.calls] == ["checkpoint_0001.pth.tar", "checkpoint_0005.pth.tar"]


def test_follow_through_the_command_says_why_it_stopped(tmp_path: Path, shapes_root: Path) -> None:
    run = fake_run(tmp_path, 2, 4, [])
    args = ["eval", "snapshots", str(run), "--data", str(shapes_root), "--follow", "--poll", "0.02"]
    result = CliRunner().invoke(app, [*args, "--grace", "0.2"])  # no process holds it: the run is not running
    assert result.exit_code == 1
    assert result.output.strip().splitlines()[-1].startswith(f"error: {run}: stopped waiting for 2 snapshot(s) "
                                                             f"(checkpoint_0001.pth.tar, ...): the pretraining is not "
                                                             f"running")
    with live_pretraining(run):
        result = CliRunner().invoke(app, [*args, "--grace", "0.1", "--timeout", "0.3"])
    assert result.exit_code == 1 and "timed out after 0.3 s with no new snapshot" in result.output
    for name in ("checkpoint_0001", "checkpoint_0003"):  # evaluated before
        (run / "linear_snapshots" / name).mkdir(parents=True)
        (run / "linear_snapshots" / name / "result.json").write_text("{}")
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0 and result.output.strip().splitlines()[-1] == f"all 2 snapshots of {run} are " \
                                                                                 f"evaluated"
    for option, value in (("--timeout", "0"), ("--grace", "-1"), ("--poll", "inf")):
        bad = CliRunner().invoke(app, [*args, option, value])
        assert bad.exit_code == 2 and f"error: {option}: must be > 0 seconds" in bad.output
