"""Numbers worked out by hand: means, sample standard deviations, differences to supervised, rounding."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from reports.comparisons import margins_over_random
from reports.published import load_published
from reports.records import load_records
from reports.render import to_markdown
from reports.report import build_report
from reports.summary import delta, group, supervised_reference
from reports.tables import fmt, fmt_delta

from .conftest import WriteRecord, base_record

TV_SHA = "7f" * 32


def tv_backbone() -> dict:
    return {"source": "/w/r50.pth", "format": "torchvision", "arch": "resnet50", "sha256": TV_SHA,
            "pretrain": {"method": "supervised"}}


def voc(metrics: dict, backbone: dict | None = None, **extra: object) -> dict:
    fields = {"task": "voc", "protocol": "voc", "metrics": metrics, "engine": "detectron2",
              "dataset": {"path": "/data/VOC2007"}, "config": {"model": "R50-C4"}, **extra}
    if backbone is not None:
        fields["backbone"] = backbone
    return base_record(**fields)


def test_three_trials_mean_and_sample_std(write_record: WriteRecord, runs: Path) -> None:
    for i, (t1, t5) in enumerate([(50.0, 90.0), (52.0, 91.0), (57.0, 92.0)]):
        write_record(f"t{i}/result.json", metrics={"top1": t1, "top5": t5})
    (entry,), _ = group(load_records([str(runs)])[0])
    top1 = entry.metrics["top1"]
    # mean 159 / 3 = 53; deviations -3, -1, +4: squares 9 + 1 + 16 = 26, / (n - 1) = 13, std = sqrt(13)
    assert (entry.n, top1.mean) == (3, 53.0)
    assert top1.std == pytest.approx(math.sqrt(13))
    assert entry.metrics["top5"].std == pytest.approx(1.0)
    row = build_report([str(runs)]).tables[0].rows[0]
    assert [c.plain() for c in row.cells] == ["MoCo (R18, 15 ep, embedded) a1b2c3", "3", "53.0 ± 3.6", "91.0 ± 1.0"]


def test_single_trial_has_no_std(write_record: WriteRecord, runs: Path) -> None:
    write_record("a.result.json")
    (entry,), _ = group(load_records([str(runs)])[0])
    assert entry.metrics["top1"].std is None
    assert build_report([str(runs)]).tables[0].rows[0].cells[2].plain() == "50.0"


def test_voc_deltas_to_supervised(write_record: WriteRecord, runs: Path) -> None:
    write_record("sup1.result.json", voc({"AP50": 81.2, "AP": 53.4, "AP75": 58.6}, tv_backbone()))
    write_record("sup2.result.json", voc({"AP50": 81.4, "AP": 53.6, "AP75": 59.0}, tv_backbone()))
    write_record("moco.result.json", voc({"AP50": 82.0, "AP": 55.0, "AP75": 58.0}))
    main, _ = group(load_records([str(runs)])[0])
    reference, note = supervised_reference(main)
    assert reference is not None and reference.pretraining.kind == "torchvision" and "7f7f7f" in note
    moco = next(e for e in main if e.pretraining.method == "moco")
    # supervised means 81.3, 53.5, 58.8 -> differences +0.7, +1.5, -0.8
    assert delta(moco, reference, "AP50") == pytest.approx(0.7)
    assert delta(moco, reference, "AP") == pytest.approx(1.5)
    assert delta(moco, reference, "AP75") == pytest.approx(-0.8)
    assert delta(reference, reference, "AP50") is None
    table = build_report([str(runs)], published=[]).tables[0]
    cells = {row.cells[0].text: row.cells for row in table.rows}
    moco_cells = cells["MoCo (R18, 15 ep, embedded) a1b2c3"]
    assert [c.plain() for c in moco_cells[2:5]] == ["82.0 (+0.7)", "55.0 (+1.5)", "58.0 (-0.8)"]
    assert [c.sign for c in moco_cells[2:5]] == [1, 1, -1]
    assert cells["supervised (torchvision weights, R50) 7f7f7f"][2].plain() == "81.3 ± 0.1"


def test_no_or_ambiguous_supervised_row_gives_no_deltas(write_record: WriteRecord, runs: Path) -> None:
    write_record("moco.result.json", voc({"AP50": 82.0, "AP": 55.0, "AP75": 58.0}))
    main, _ = group(load_records([str(runs)])[0])
    assert supervised_reference(main)[0] is None
    other = {**tv_backbone(), "sha256": "ab" * 32}
    write_record("sup1.result.json", voc({"AP50": 81.0, "AP": 53.0, "AP75": 58.0}, tv_backbone()))
    write_record("sup2.result.json", voc({"AP50": 80.0, "AP": 52.0, "AP75": 57.0}, other))
    main, _ = group(load_records([str(runs)])[0])
    reference, note = supervised_reference(main)
    assert reference is None and "Several supervised rows" in note


def test_failed_runs_never_enter_the_mean(write_record: WriteRecord, runs: Path) -> None:
    sweep = {"param": "momentum", "value": 0.9, "method": "moco"}
    write_record("a/result.json", sweep=sweep, metrics={"top1": 40.0, "top5": 80.0})
    write_record("b/result.json", sweep=sweep, metrics={"top1": 10.0, "top5": 50.0}, status="failed",
                 failure="NaN loss")
    write_record("c/result.json", sweep={**sweep, "value": 0}, status="failed", failure="chance", metrics=None)
    main, ablation = group(load_records([str(runs)])[0])
    assert main == []
    m0, m09 = ablation
    assert m0.failed and m0.n == 0 and m0.failures == ["chance"] and m0.metrics == {}
    assert not m09.failed and m09.n == 1 and m09.metrics["top1"].values == (40.0,)
    table = build_report([str(runs)]).tables[0]
    assert [c.plain() for c in table.rows[0].cells] == ["MoCo (R18, 15 ep, embedded)", "0", "0", "failed", "failed",
                                                        "failed: chance"]
    assert table.rows[0].kind == "failed"
    assert table.rows[1].cells[-1].text == "1 of 2 trials failed (not in the mean): NaN loss"


def test_rounding_is_half_up_on_the_decimal_value() -> None:
    assert [fmt(v) for v in (16.75, 69.25, 14.249999999999998, -0.04, 0.05)] == ["16.8", "69.3", "14.2", "0.0", "0.1"]
    assert fmt_delta(40.8 - 40.6) == ("+0.2", 1)
    assert fmt_delta(-0.25) == ("-0.3", -1)
    assert fmt_delta(0.04) == ("0.0", 0)


def test_published_differences_to_published_supervised() -> None:
    rows = {(r.task, r.backbone, r.schedule, r.pretrain): r for r in load_published()}
    moco = rows[("voc07+12_det", "R50-C4", "24k", "MoCo v1 200ep")]
    # 81.5 - 81.3, 55.9 - 53.5, 62.6 - 58.8
    assert moco.deltas == pytest.approx({"AP50": 0.2, "AP": 2.4, "AP75": 3.8})
    assert not moco.secondary and rows[("voc07+12_det", "R50-C4", "24k", "random init")].secondary
    coco = rows[("coco_det_seg", "R50-FPN", "2x", "MoCo v1")]
    assert coco.values == {"bbox_AP": 40.8, "segm_AP": 36.9}
    assert coco.deltas == pytest.approx({"bbox_AP": 0.2, "segm_AP": 0.1})


RANDOM = {"source": "random", "format": "random", "arch": "resnet18"}


def test_margin_over_random_init_in_standard_errors(write_record: WriteRecord, runs: Path) -> None:
    for i, (moco, rand) in enumerate([(40.0, 30.0), (41.0, 32.0), (42.0, 34.0)]):
        write_record(f"moco{i}/result.json", metrics={"top1": moco, "top5": 90.0})
        write_record(f"rand{i}/result.json", metrics={"top1": rand, "top5": 80.0}, backbone=RANDOM)
    main, _ = group(load_records([str(runs)])[0])
    (margin,) = margins_over_random(main, "top1")
    # MoCo: mean 41, s = 1; random init: mean 32, s = 2; SE = sqrt(1/3 + 4/3) = sqrt(5/3) = 1.2910
    assert margin.difference == pytest.approx(9.0)
    assert margin.standard_error == pytest.approx(math.sqrt(5 / 3))
    assert margin.ratio == pytest.approx(6.971, abs=1e-3)
    note = ("Above random init (top-1; SE, the standard error of the difference of the two means, from each "
            f"row's trials): {margin.entry.pretraining.label} +9.0 (7.0 SE).")
    assert note in to_markdown(build_report([str(runs)], published=[], expected={}))


def test_no_margin_without_two_trials_on_both_sides(write_record: WriteRecord, runs: Path) -> None:
    write_record("moco0/result.json", metrics={"top1": 40.0, "top5": 90.0})
    write_record("moco1/result.json", metrics={"top1": 41.0, "top5": 90.0})
    write_record("rand0/result.json", metrics={"top1": 30.0, "top5": 80.0}, backbone=RANDOM)
    main, _ = group(load_records([str(runs)])[0])
    assert margins_over_random(main, "top1") == []  # one random-init trial: its noise is unknown
    write_record("rand1/result.json", metrics={"top1": 30.0, "top5": 80.0}, backbone=RANDOM)
    write_record("rand2/result.json", metrics={"top1": 30.0, "top5": 80.0}, backbone=RANDOM)
    write_record("lone/result.json", metrics={"top1": 60.0, "top5": 95.0}, backbone=tv_backbone())
    main, _ = group(load_records([str(runs)])[0])
    (margin,) = margins_over_random(main, "top1")  # the single supervised trial is left out
    assert margin.entry.pretraining.kind == "ours" and margin.standard_error == pytest.approx(math.sqrt(0.5 / 2))


def test_a_margin_without_spread_is_infinite_or_zero() -> None:
    from reports.comparisons import Margin

    assert Margin(None, "top1", 2.0, 0.0).ratio == math.inf and Margin(None, "top1", -2.0, 0.0).ratio == -math.inf
    assert Margin(None, "top1", 0.0, 0.0).ratio == 0.0 and Margin(None, "top1", 3.0, 1.5).ratio == 2.0
