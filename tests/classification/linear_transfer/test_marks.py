"""moco eval transfer and issue 51: the command a stopped suite prints carries on with the weights read as they
were (--weights-format: a file that does not say its method needs it again), and runs; a suite of a smoke run's
weights, or of a pretraining stopped part-way, is marked in the report's transfer tables and kept apart from the
finished real ones (findings 1 and 3), as every other table does; a suite is never resumed in the other mode."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shlex
import signal
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from cli import app
from tests import suite_layouts
from tests.layouts import official_checkpoint, torchvision_weights

runner = CliRunner()
SMALL = ["data.resize=32", "data.crop_size=32", "data.workers=0", "features.batch_size=8", "solver.max_iter=50"]
SETS = [word for s in SMALL for word in ("--set", s)]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return suite_layouts.transfer_suite_layout(tmp_path_factory.mktemp("suite"), only=("dtd", "caltech101"))


def ours(path: Path, *, epoch: int, planned: int, smoke: bool) -> Path:
    """A checkpoint as moco pretrain writes it (the format, method, config and mode it records): ``epoch`` of
    ``planned`` epochs done, by a smoke run or not."""
    obj = torch.load(official_checkpoint(path), weights_only=False)
    obj.update(format="moco-suite", method="moco", epoch=epoch, smoke=smoke,
               config={"data": {"path": "embedded"}, "optim": {"epochs": planned}, "model": {"arch": "resnet18"}})
    torch.save(obj, path)
    return path


def test_a_stopped_suite_prints_the_command_that_carries_on_and_it_reads_the_weights_as_asked(
        root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import classification.linear_transfer.run as suite_run

    monkeypatch.delenv("MOCO_SMOKE", raising=False)
    weights = torchvision_weights(tmp_path / "resnet18.pth")  # a plain file: DINO, BYOL, supervised...?
    out = tmp_path / "run"
    evaluate = suite_run._evaluate

    def stopped_after_one(cfg, spec, *args, **kwargs):  # noqa: ANN001, ANN202
        record = evaluate(cfg, spec, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)  # a scheduler's stop, once the first dataset's record is written
        return record

    monkeypatch.setattr(suite_run, "_evaluate", stopped_after_one)
    first = runner.invoke(app, ["eval", "transfer", str(weights), "--weights-format", "dino", "--data", str(root),
                                "--datasets", "dtd,caltech101", "--device", "cpu", "--quiet", *SETS,
                                "--output-dir", str(out)])
    assert first.exit_code == 143, first.output
    line = first.output.strip().splitlines()[-1]
    prefix = "stopped by SIGTERM during the evaluation; continue with: "
    assert line.startswith(prefix), first.output
    hint = line.removeprefix(prefix)
    assert hint == shlex.join(["moco", "eval", "transfer", str(weights), "--data", str(root), "--datasets",
                               "dtd,caltech101", "--device", "cpu", "--weights-format", "dino", *SETS,
                               "--output-dir", str(out), "--resume"])
    monkeypatch.setattr(suite_run, "_evaluate", evaluate)
    carried = runner.invoke(app, shlex.split(hint)[1:])
    assert carried.exit_code == 0, carried.output
    outcome = json.loads((out / "suite.json").read_text())["datasets"]
    assert outcome["dtd"] == "done before" and outcome["caltech101"].endswith("result.json"), outcome
    for name in ("dtd", "caltech101"):
        assert json.loads((out / name / "result.json").read_text())["backbone"]["pretrain"]["method"] == "dino"


def test_suites_of_smoke_and_unfinished_pretrainings_are_marked_and_apart_in_the_report(
        root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MOCO_SMOKE", raising=False)
    runs = tmp_path / "runs"
    common = ["--data", str(root), "--datasets", "dtd", "--device", "cpu", "--quiet", *SETS]
    weights = {"random": ["random", "--arch", "resnet18"],
               "done": [str(ours(tmp_path / "done.pth.tar", epoch=5, planned=5, smoke=False))],
               "smoke": [str(ours(tmp_path / "smoke.pth.tar", epoch=1, planned=1, smoke=True))],
               "stopped": [str(ours(tmp_path / "stopped.pth.tar", epoch=2, planned=5, smoke=False))]}
    for name, what in weights.items():  # every suite run in real mode: a smoke run's weights are marked all the same
        result = runner.invoke(app, ["eval", "transfer", *what, *common, "--output-dir", str(runs / name)])
        assert result.exit_code == 0, result.output
    assert json.loads((runs / "smoke" / "dtd" / "result.json").read_text())["smoke"] is True
    assert "smoke" not in json.loads((runs / "done" / "dtd" / "result.json").read_text())
    monkeypatch.setenv("MOCO_SMOKE", "1")  # a smoke run never carries on a real suite
    other = runner.invoke(app, ["eval", "transfer", "random", "--arch", "resnet18", *common, "--output-dir",
                                str(runs / "random"), "--resume"])
    assert other.exit_code == 2, other.output
    assert f"error: {runs / 'random'} holds a real run (no MOCO_SMOKE), and this command is a smoke run" in \
        other.output
    monkeypatch.delenv("MOCO_SMOKE")

    report = runner.invoke(app, ["report", str(runs), "--out", str(tmp_path / "r")])
    assert report.exit_code == 0, report.output
    markdown = (tmp_path / "r" / "report.md").read_text()
    titles = [line for line in markdown.splitlines() if line.startswith("## ")]
    own = "## Linear transfer (own data in the suite's layouts, 32-px bicubic crops)"  # a DTD look-alike
    assert titles == [own, f"{own}, smoke runs (MOCO\\_SMOKE=1: shortened; numbers mean nothing)",
                      f"{own}, unfinished pretrainings (stopped before their planned epochs)"], markdown
    real, smoke, unfinished = markdown.split("\n## ")[1:4]
    assert "random init (R18)" in real and "MoCo (R18, 5 ep, embedded)" in real and "smoke" not in real
    assert "(R18, 1 ep, embedded)" in smoke and "\\[smoke\\]" in smoke and "random init" not in smoke
    assert "(R18, 2 of 5 ep, unfinished, embedded)" in unfinished and "[smoke]" not in unfinished
    assert "1 of the 4 transfer suite runs are smoke runs" in markdown
    assert "[smoke]</td>" in (tmp_path / "r" / "report.html").read_text()
    rows = {(re.sub(r" [0-9a-f]{6}$", "", r["pretraining"]), r["smoke"], r["pretrain_unfinished"])
            for r in csv.DictReader(io.StringIO((tmp_path / "r" / "report.csv").read_text()))
            if r["task"] == "transfer"}
    assert rows == {("random init (R18)", "no", ""), ("MoCo (R18, 5 ep, embedded)", "no", "no"),
                    ("MoCo (R18, 1 ep, embedded)", "yes", "no"),
                    ("MoCo (R18, 2 of 5 ep, unfinished, embedded)", "no", "yes")}, rows

    mixed = runner.invoke(app, ["report", str(runs), "--out", str(tmp_path / "m"), "--mix-marked"])
    assert mixed.exit_code == 0, mixed.output
    markdown = (tmp_path / "m" / "report.md").read_text()
    assert [line for line in markdown.splitlines() if line.startswith("## ")] == titles[:1]  # asked: one table
    assert "\\[smoke\\]" in markdown and "2 of 5 ep, unfinished" in markdown
