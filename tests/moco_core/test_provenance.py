"""Provenance that travels (issue 51, finding 1): a smoke run's mark reaches every record evaluated from its
weights, whatever mode evaluated them; ``moco report`` shows it on the row (md, html, csv) and keeps such rows out
of the tables of real runs unless asked (--mix-marked); a run is never continued across the two modes. Real
commands, in real processes."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from moco_core import smoke
from moco_core.run.records import write_record

TINY = ["--set", "model.queue_size=40", "--set", "model.bn_groups=4", "--set", "optim.batch_size=16",
        "--set", "optim.epochs=2", "--set", "run.knn_every=0", "--set", "data.workers=0"]


def moco(args: list[str], cwd: Path, *, smoke_run: bool) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MOCO_DATA_HOME": str(cwd / "data")}
    env.pop("MOCO_SMOKE", None)
    if smoke_run:
        env["MOCO_SMOKE"] = "1"
    return subprocess.run([sys.executable, "-m", "cli", *args], cwd=Path(__file__).resolve().parents[2], env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_a_smoke_mark_travels_to_every_record_and_the_report_keeps_it_apart(shapes_root: Path,
                                                                            tmp_path: Path) -> None:
    data = ["--data", str(shapes_root)]
    pretrained = moco(["pretrain", "-c", "embedded", *data, *TINY, "--output-dir", str(tmp_path / "smoke_run")],
                      tmp_path, smoke_run=True)
    assert pretrained.returncode == 0, pretrained.stderr
    knn = ["eval", "knn", "-c", "knn_embedded", *data, "--k", "5"]
    # a real evaluation of the smoke run's weights: its record is a smoke one, the backbone says why
    real_eval = moco([*knn[:2], str(tmp_path / "smoke_run"), *knn[2:], "--output-dir", str(tmp_path / "e" / "moco")],
                     tmp_path, smoke_run=False)
    assert real_eval.returncode == 0, real_eval.stderr
    record = json.loads((tmp_path / "e" / "moco" / "result.json").read_text())
    assert record["smoke"] is True and record["backbone"]["pretrain"]["smoke"] is True
    floor = moco([*knn[:2], "random", "--arch", "resnet18", *knn[2:], "--output-dir", str(tmp_path / "e" / "random")],
                 tmp_path, smoke_run=False)
    assert floor.returncode == 0, floor.stderr
    assert "smoke" not in json.loads((tmp_path / "e" / "random" / "result.json").read_text())
    report = moco(["report", str(tmp_path / "e"), "--out", str(tmp_path / "report")], tmp_path, smoke_run=False)
    assert report.returncode == 0, report.stderr
    markdown = (tmp_path / "report" / "report.md").read_text()
    name = shapes_root.name
    titles = [line for line in markdown.splitlines() if line.startswith("## kNN")]
    assert titles == [f"## kNN classification (weighted kNN, k 5): {name}", f"## kNN classification (weighted kNN, "
                      f"k 5): {name}, smoke runs (MOCO\\_SMOKE=1: shortened; numbers mean nothing)"]  # smoke apart
    real, smoke_table = markdown.split(titles[1])
    assert "random init (R18) " in real and "[smoke]" not in real
    assert f"MoCo v2 (R18, 1 ep, {name})" in smoke_table and "\\[smoke\\]" in smoke_table
    assert "[smoke]" in (tmp_path / "report" / "report.html").read_text()
    rows = list(csv.DictReader(io.StringIO((tmp_path / "report" / "report.csv").read_text())))
    assert {(r["pretraining"].split(" (")[0], r["smoke"]) for r in rows if r["origin"] == "ours"} == {
        ("random init", "no"), ("MoCo v2", "yes")}
    mixed = moco(["report", str(tmp_path / "e"), "--out", str(tmp_path / "mixed"), "--mix-marked"], tmp_path,
                 smoke_run=False)
    assert mixed.returncode == 0, mixed.stderr
    markdown = (tmp_path / "mixed" / "report.md").read_text()
    assert [line for line in markdown.splitlines() if line.startswith("## kNN")] == [
        f"## kNN classification (weighted kNN, k 5): {name}"]  # asked: one table, the smoke row marked
    assert f"MoCo v2 (R18, 1 ep, {name})" in markdown and "\\[smoke\\]" in markdown


@pytest.mark.slow
def test_a_run_is_never_continued_in_the_other_mode(shapes_root: Path, tmp_path: Path) -> None:
    data = ["--data", str(shapes_root)]
    for mode, other in ((True, False), (False, True)):
        out = tmp_path / f"smoke_{mode}"
        first = moco(["pretrain", "-c", "embedded", *data, *TINY, "--set", "optim.epochs=1", "--output-dir",
                      str(out)], tmp_path, smoke_run=mode)
        assert first.returncode == 0, first.stderr
        again = moco(["pretrain", "--resume", "--output-dir", str(out), "--set", "optim.epochs=3"], tmp_path,
                     smoke_run=other)
        assert again.returncode == 2, again.stderr
        (line,) = again.stderr.strip().splitlines()[-1:]
        assert line.startswith(f"error: {out / 'checkpoint_last.pth.tar'} holds {smoke.mode(mode)}, and this "
                               f"command is {smoke.mode(other)}: the two are never mixed; continue it "
                               f"{'with MOCO_SMOKE=1' if mode else 'without MOCO_SMOKE'}"), again.stderr
    linear = ["eval", "linear", "random", "--arch", "resnet18", "-c", "lincls_embedded", *data, "--set",
              "data.workers=0", "--output-dir", str(tmp_path / "linear")]
    assert moco(linear, tmp_path, smoke_run=True).returncode == 0
    extended = moco([*linear, "--resume", "--set", "optim.epochs=3"], tmp_path, smoke_run=False)
    assert extended.returncode == 2
    assert f"error: {tmp_path / 'linear'} holds a smoke run (MOCO_SMOKE=1), and this command is a real run" in \
        extended.stderr


def test_a_record_of_a_smoke_pretraining_is_marked_in_any_mode(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from moco_core.model.backbone import BackboneInfo

    monkeypatch.delenv("MOCO_SMOKE", raising=False)
    real = BackboneInfo("x", "moco-suite", "resnet18", None, {"method": "moco", "smoke": False})
    smoked = BackboneInfo("x", "moco-suite", "resnet18", None, {"method": "moco", "smoke": True})
    kwargs = {"task": "knn", "protocol": "knn", "metrics": {"top1": 1.0}, "dataset": {"path": "x"}, "config": {}}
    assert "smoke" not in json.loads(write_record(tmp_path / "a.json", backbone=real, **kwargs).read_text())
    assert json.loads(write_record(tmp_path / "b.json", backbone=smoked, **kwargs).read_text())["smoke"] is True
    monkeypatch.setenv("MOCO_SMOKE", "1")
    assert json.loads(write_record(tmp_path / "c.json", backbone=real, **kwargs).read_text())["smoke"] is True


def test_weights_a_smoke_run_wrote_before_checkpoints_said_so_are_marked_by_its_run_json(
        shapes_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Read through moco_core/model/weights (issue 47's readers): a checkpoint of ours without its ``smoke`` field
    (written before it was) is a smoke run's where the run.json beside it says so, and the kNN record of it, made
    in real mode, is marked, and so is its row in the report; the same checkpoint beside a real run's run.json is
    not."""
    import torch
    from typer.testing import CliRunner

    from cli import app
    from tests.layouts import official_checkpoint

    monkeypatch.delenv("MOCO_SMOKE", raising=False)
    for name, smoked in (("old_smoke", True), ("old_real", False)):
        run = tmp_path / name
        run.mkdir()
        obj = torch.load(official_checkpoint(run / "checkpoint_last.pth.tar"), weights_only=False)
        obj.update(format="moco-suite", method="moco", epoch=1, config={"data": {"path": "embedded"},
                                                                        "optim": {"epochs": 1}})
        torch.save(obj, run / "checkpoint_last.pth.tar")
        (run / "run.json").write_text(json.dumps({"starts": [{"smoke": True} if smoked else {}]}))
        result = CliRunner().invoke(app, ["eval", "knn", str(run), "-c", "knn_32px", "--data", str(shapes_root),
                                          "--k", "5", "--device", "cpu", "--set", "data.workers=0", "--output-dir",
                                          str(tmp_path / "e" / name)])
        assert result.exit_code == 0, result.output
        record = json.loads((tmp_path / "e" / name / "result.json").read_text())
        assert record["backbone"]["pretrain"]["smoke"] is smoked and record.get("smoke", False) is smoked
    report = CliRunner().invoke(app, ["report", str(tmp_path / "e"), "--out", str(tmp_path / "r")])
    assert report.exit_code == 0, report.output
    rows = {(r["pretraining"], r["smoke"]) for r in csv.DictReader(io.StringIO(
        (tmp_path / "r" / "report.csv").read_text())) if r["origin"] == "ours"}
    assert {smoked for _, smoked in rows} == {"yes", "no"} and len(rows) == 2, rows
    assert "\\[smoke\\]" in (tmp_path / "r" / "report.md").read_text()
