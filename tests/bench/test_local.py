"""``moco bench`` on this machine: the cells as processes of a stand-in ``moco`` (the runner's logic, in
milliseconds), spread over the devices one at a time each, a failed cell named with its log, finished cells
skipped and checkpointed ones continued only with --resume; and one real matrix on the embedded data."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app
from cluster.bench import LOG, run_local
from cluster.matrix import cells_of, read_matrix
from moco_core.run.preemption import Stopped

MATRIX = """\
output_dir: out
checkpoints:
  - {label: r18, path: random, arch: resnet18}
  - {label: broken, path: random, arch: resnet34}
evaluations:
  - {label: knn, command: eval knn, preset: knn_embedded}
  - {label: lin, command: eval linear, preset: lincls_embedded}
"""
# A stand-in moco: holds its --device for a moment (failing if another cell holds it), writes result.json, and
# fails like a real command (an error line last) for resnet34
FAKE = """\
import json, os, sys, time
args = sys.argv[1:]
out, device = args[args.index("--output-dir") + 1], args[args.index("--device") + 1]
with open(os.path.join(os.path.dirname(__file__), "calls.jsonl"), "a") as f:
    f.write(json.dumps(args) + "\\n")
busy = os.path.join(os.path.dirname(__file__), device + ".busy")
fd = os.open(busy, os.O_CREAT | os.O_EXCL)  # raises when another cell holds the device
time.sleep(0.3)
os.close(fd)
os.remove(busy)
print("features step 8/8")
if "resnet34" in args:
    print("error: boom: resnet34 is not enough", file=sys.stderr)
    sys.exit(1)
open(os.path.join(out, "result.json"), "w").write("{}")
"""


@pytest.fixture
def bench(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list, list[str], Path]:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.yaml").write_text(MATRIX)
    (tmp_path / "fake").mkdir()
    (tmp_path / "fake" / "moco.py").write_text(FAKE)
    return cells_of(read_matrix("m.yaml"), None), [sys.executable, str(tmp_path / "fake" / "moco.py")], tmp_path


def calls(tmp_path: Path) -> list[list[str]]:
    path = tmp_path / "fake" / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_cells_spread_over_the_devices_and_a_failed_one_is_named_with_its_log(
        bench: tuple[list, list[str], Path], capsys: pytest.CaptureFixture[str]) -> None:
    cells, fake, tmp_path = bench
    assert run_local(cells, devices=["cuda:0", "cuda:1"], jobs=1, resume=False, program=fake) == 1
    made = calls(tmp_path)
    assert len(made) == 4  # every cell ran: the failures stopped none
    assert {a[a.index("--device") + 1] for a in made} == {"cuda:0", "cuda:1"}
    assert not list((tmp_path / "fake").glob("*.busy"))  # never two cells on one device (the fake would fail)
    err = capsys.readouterr().err.splitlines()
    assert err == [f"failed: broken/{e}: out/broken/{e}/{LOG}: error: boom: resnet34 is not enough"
                   for e in ("knn", "lin")] + [
        "error: 2 of 4 cells failed (named above); run the same command with --resume to run what is missing"]
    states = {c.name: json.loads((c.run_dir / "bench.json").read_text())["state"] for c in cells}
    assert states == {"r18/knn": "done", "r18/lin": "done", "broken/knn": "failed", "broken/lin": "failed"}
    # again: the finished cells are skipped, the failed ones run again
    assert run_local(cells, devices=["cpu"], jobs=2, resume=True, program=fake) == 1
    assert [a[3] for a in calls(tmp_path)[4:]] == ["--arch"] * 2 and all("resnet34" in a for a in calls(tmp_path)[4:])


def test_a_cell_with_a_checkpoint_waits_for_resume_and_then_continues_it(
        bench: tuple[list, list[str], Path], capsys: pytest.CaptureFixture[str]) -> None:
    cells, fake, tmp_path = bench
    cells = [c for c in cells if c.checkpoint.label == "r18"]
    for cell in cells:
        cell.run_dir.mkdir(parents=True)
    (cells[1].run_dir / "linear_last.pth.tar").write_bytes(b"")  # eval linear stopped after an epoch
    (cells[0].run_dir / "result.json").write_text("{}")  # kNN done
    assert run_local(cells, devices=["cpu"], jobs=1, resume=False, program=fake) == 0
    assert calls(tmp_path) == []
    assert "0 to run on cpu (1 a device), 1 with a checkpoint to continue (add --resume: r18/lin)" in \
        capsys.readouterr().out
    assert run_local(cells, devices=["cpu"], jobs=1, resume=True, program=fake) == 0
    (args,) = calls(tmp_path)
    assert args[:2] == ["eval", "linear"] and args[-3:] == ["--output-dir", str(cells[1].run_dir.absolute()),
                                                              "--resume"]


def test_bad_devices_and_counts_are_one_line(bench: tuple[list, list[str], Path]) -> None:
    for args, message in ((["--devices", "gpu0"], "error: --devices: option --device: 'gpu0' is not a known value\n"),
                          (["--jobs", "0"], "error: --jobs: must be >= 1, got 0\n")):
        done = CliRunner().invoke(app, ["bench", "m.yaml", *args])
        assert (done.exit_code, done.output) == (2, message)


# A stand-in moco that runs until told to stop, and says so in its log as an evaluation does
SLOW = """\
import signal, sys, time
def stop(signum, frame):
    print("stopped by SIGTERM during the evaluation; continue with: ...", flush=True)
    sys.exit(128 + signum)
signal.signal(signal.SIGTERM, stop)
print("started", flush=True)
time.sleep(60)
"""


def test_a_stop_signal_stops_the_running_cells_and_starts_no_other(bench: tuple[list, list[str], Path]) -> None:
    cells, _, tmp_path = bench
    (tmp_path / "fake" / "slow.py").write_text(SLOW)
    timer = threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    with pytest.raises(Stopped, match="stopped by SIGTERM during moco bench"):
        run_local(cells, devices=["cpu"], jobs=2, resume=False,
                  program=[sys.executable, str(tmp_path / "fake" / "slow.py")])
    timer.join()
    states = [json.loads((c.run_dir / "bench.json").read_text()) if c.run_dir.exists() else None for c in cells]
    assert [s and (s["state"], s["exit_status"]) for s in states] == [("failed", 128 + signal.SIGTERM)] * 2 + [None] * 2
    assert (cells[0].run_dir / LOG).read_text().splitlines()[-1].startswith("stopped by SIGTERM")


@pytest.mark.slow
def test_a_real_matrix_on_the_embedded_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two kNN cells of random weights as real moco processes, two at a time, under MOCO_SMOKE; then its status
    and moco report on its directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MOCO_SMOKE", "1")
    (tmp_path / "m.yaml").write_text("output_dir: out\ncheckpoints:\n  - {label: r18, path: random, arch: resnet18}\n"
                                     "evaluations:\n  - {label: k5, command: eval knn, preset: knn_embedded, "
                                     "options: {k: 5}}\n  - {label: k10, command: eval knn, preset: knn_embedded}\n")
    done = CliRunner().invoke(app, ["bench", "m.yaml", "--devices", "cpu", "--jobs", "2"])
    assert done.exit_code == 0, done.output
    for k, label in ((5, "k5"), (10, "k10")):
        record = json.loads((tmp_path / "out" / "r18" / label / "result.json").read_text())
        assert record["smoke"] is True and record["config"]["k"] == k, record
    again = CliRunner().invoke(app, ["bench", "m.yaml", "--devices", "cpu"])
    assert again.exit_code == 0 and "2 done or under way, 0 to run" in again.output
    shown = CliRunner().invoke(app, ["bench", "m.yaml", "--status"]).output.splitlines()
    assert shown[1].split()[:3] == ["r18", "done", "top1"] and shown[2] == "2 cells: 2 done, 0 running, 0 queued, " \
        "0 failed, 0 stopped", shown
    # moco report on the matrix's directory: the cells' records, nothing of the bench's own files skipped
    report = CliRunner().invoke(app, ["report", "out", "--out", "report"])
    assert report.exit_code == 0 and "skipped: none" in report.output, report.output
    assert "2 records read from out; none skipped." in (tmp_path / "report" / "report.md").read_text()
