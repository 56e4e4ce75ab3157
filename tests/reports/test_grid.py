"""The linear head grid in the report: a table of its own, apart from the paper's protocol and apart again when the
head was chosen on val; the robustness columns; the chosen heads; and what reports restates of classification/
(it imports no torch) agreeing with it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reports.protocols import GRID_EPOCHS, GRID_ON_VAL, GRID_PROTOCOL
from reports.records import OPTIONAL_METRICS
from reports.render import to_csv, to_markdown
from reports.report import build_report

from .conftest import WriteRecord, base_record

IMAGENET = {"path": "/data/imagenet", "classes": 1000}
ROBUST = {"imagenet_v2_top1": 50.0, "imagenet_a_top1": 5.0, "imagenet_r_top1": 20.0, "imagenet_sketch_top1": 15.0,
          "imagenet_real_top1": 68.0}


def _grid(protocol: str, top1: float, chosen: str, **metrics: float) -> dict[str, Any]:
    return base_record(protocol=protocol, dataset=IMAGENET, metrics={"top1": top1, "top5": 80.0, **metrics},
                       config={"optim": {"epochs": 10}}, selection={"chosen": chosen, "on": "held-out train split"})


def test_grid_rows_sit_in_tables_of_their_own(write_record: WriteRecord, runs: Path) -> None:
    write_record("paper/result.json", dataset=IMAGENET, config={"optim": {"epochs": 100}})
    for seed, (top1, head) in enumerate(((60.0, "layer4 lr 1"), (62.0, "layer4 lr 1"), (61.0, "layer4 lr 3"))):
        write_record(f"grid/s{seed}/result.json", _grid(GRID_PROTOCOL, top1, head, **ROBUST))
    write_record("grid_val/result.json", _grid(GRID_ON_VAL, 63.0, "layer4 lr 0.1", imagenet_v2_top1=51.0))
    report = build_report([str(runs)])
    titles = [t.title for t in report.tables]
    assert titles == ["Linear classification (the paper's protocol, 100 epochs): imagenet",
                      "Linear head grid (NOT the paper's protocol; 10 epochs, one head chosen on train images held "
                      "out): imagenet",
                      "Linear head grid (NOT the paper's protocol; 10 epochs, one head SELECTED ON VAL, the reported "
                      "set: optimistic): imagenet"]
    paper, grid, on_val = report.tables
    assert len(paper.rows) == 1 and [c.name for c in paper.columns][:4] == ["Pretraining", "n", "top-1", "top-5"]
    assert [c.name for c in grid.columns] == ["Pretraining", "n", "top-1", "top-5", "IN-V2", "IN-A", "IN-R",
                                              "IN-Sketch", "IN-ReaL", "Note"]
    (row,) = grid.rows
    assert row.cells[1].text == "3" and row.cells[2].plain() == "61.0 ± 1.0" and row.cells[4].plain() == "50.0 ± 0.0"
    assert row.cells[-1].text == "chosen: layer4 lr 1 (2 trials), layer4 lr 3"
    assert "never on the set reported" in grid.subtitle and "optimistic" in on_val.subtitle
    assert [c.name for c in on_val.columns] == ["Pretraining", "n", "top-1", "top-5", "IN-V2", "Note"]
    text = to_markdown(report)
    assert text.index("the paper's protocol, 100 epochs") < text.index("Linear head grid (NOT")
    csv = to_csv(report)
    assert f"linear:{GRID_ON_VAL}:/data/imagenet" in csv and '"imagenet_real_top1","","68.0"' in csv


def test_the_random_init_hint_of_a_grid_runs_the_grid(write_record: WriteRecord, runs: Path) -> None:
    write_record("grid/result.json", _grid(GRID_PROTOCOL, 60.0, "layer4 lr 1"))
    write_record("grid_val/result.json", _grid(GRID_ON_VAL, 60.0, "layer4 lr 1"))
    notes = [" ".join(t.notes) for t in build_report([str(runs)]).tables]
    assert "moco eval linear random --arch resnet18 --data /data/imagenet --grid --set optim.epochs=10" in notes[0]
    assert "--data /data/imagenet --grid --set select.split=val --set optim.epochs=10" in notes[1]


def test_the_random_init_hint_of_a_grid_is_built_from_its_invocation(write_record: WriteRecord, runs: Path) -> None:
    """Records that keep how they were asked for (moco_core.commands.invocation) give their own command back, with
    random weights: the grid's preset, --grid, --robustness and the overrides; embedded rows that do not say get
    the grid's embedded preset, not the paper protocol's."""
    asked = {"command": "eval linear", "preset": "lincls_grid", "overrides": ["optim.epochs=10"],
             "options": {"data": "/data/imagenet", "grid": True, "robustness": "/data/robust sets"}, "smoke": False}
    write_record("grid/result.json", {**_grid(GRID_PROTOCOL, 60.0, "layer4 lr 1"), "invocation": asked})
    write_record("embedded/result.json", base_record(protocol=GRID_PROTOCOL, config={"optim": {"epochs": 20}},
                                                     selection={"chosen": "layer4 lr 1"}))
    notes = {t.title.split(": ")[-1]: " ".join(t.notes) for t in build_report([str(runs)]).tables}
    assert (f"moco eval linear random --arch resnet18 -c lincls_grid --data /data/imagenet --grid --robustness "
            f"'/data/robust sets' --set optim.epochs=10 --output-dir {runs / 'random_resnet18'}") in notes["imagenet"]
    assert ("moco eval linear random --arch resnet18 -c lincls_grid_embedded --data embedded --grid --set "
            "optim.epochs=20") in notes["embedded"]


def test_grid_rows_of_smoke_runs_are_marked_and_apart(write_record: WriteRecord, runs: Path) -> None:
    write_record("grid/result.json", _grid(GRID_PROTOCOL, 60.0, "layer4 lr 1"))
    write_record("smoked/result.json", {**_grid(GRID_PROTOCOL, 10.0, "layer4 lr 1"), "smoke": True})
    report = build_report([str(runs)])
    assert [t.title for t in report.tables] == [
        "Linear head grid (NOT the paper's protocol; 10 epochs, one head chosen on train images held out): imagenet",
        "Linear head grid (NOT the paper's protocol; 10 epochs, one head chosen on train images held out): "
        "imagenet, smoke runs (MOCO_SMOKE=1: shortened; numbers mean nothing)"]
    real, smoke = (to_markdown_rows(t) for t in report.tables)
    assert "[smoke]" in smoke and "[smoke]" not in real and "10.0" in smoke and "10.0" not in real


def to_markdown_rows(table: Any) -> str:
    return " ".join(cell.plain() for row in table.rows for cell in row.cells)


def test_what_reports_restates_is_classifications() -> None:
    from classification.frozen.grid_config import SelectConfig, load_grid_config, protocol_name
    from classification.robustness import SETS

    assert OPTIONAL_METRICS["linear"] == tuple(metric for _, metric in SETS.values())
    cfg = load_grid_config("lincls_grid", ["data.path=x"])
    assert cfg.optim.epochs == GRID_EPOCHS and protocol_name(cfg) == GRID_PROTOCOL
    assert protocol_name(cfg.__class__(select=SelectConfig(split="val"))) == GRID_ON_VAL


def test_few_shot_rows_have_a_column_for_each_k_and_reader(write_record: WriteRecord, runs: Path) -> None:
    metrics = {"1shot_linear_top1": 30.0, "1shot_knn_top1": 28.0, "5shot_linear_top1": 45.0, "5shot_knn_top1": 40.0}
    for seed in range(2):
        write_record(f"fewshot/s{seed}/result.json", task="fewshot", protocol="fewshot",
                     metrics={k: v + seed for k, v in metrics.items()}, config={})
    write_record("fewshot/bad.result.json", task="fewshot", protocol="fewshot", metrics={"top1": 3.0}, config={})
    report = build_report([str(runs)])
    (table,) = report.tables
    assert table.title.startswith("Few-shot classification (k labelled images a class; linear: L2 logistic "
                                  "regression, its strength chosen on held-out train images; weighted kNN)")
    assert [c.name for c in table.columns] == ["Pretraining", "n", "1-shot linear", "1-shot kNN", "5-shot linear",
                                               "5-shot kNN"]
    assert table.rows[0].cells[2].plain() == "30.5 ± 0.7"
    assert "moco eval linear random --arch resnet18 --data embedded --shots 1,5" in " ".join(table.notes)
    assert [s.reason for s in report.skipped] == ["no few-shot metric (<k>shot_linear_top1, <k>shot_knn_top1) "
                                                  "(task fewshot)"]
