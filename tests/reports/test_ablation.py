"""Sweeps with trials: the records of one point of one curve (mechanism, recipe, value) that differ in their
pretraining's seed are its trials, shown as mean ± std (n) in the ablation table and as error bars in its plot."""

from __future__ import annotations

from pathlib import Path

import pytest
from matplotlib.container import ErrorbarContainer

from reports.plots import ablation_figure
from reports.pretraining import series_digest
from reports.published import load_published
from reports.records import load_records
from reports.report import build_report
from reports.summary import group

from .conftest import WriteRecord, base_record


def sweep_record(value: int, seed: int, top1: float, lr: float = 0.06, method: str = "moco") -> dict:
    """A K-sweep point's record as ``sweep --trials`` writes it: the point's config (for end2end K is the batch),
    the trial's seed."""
    model = {"arch": "resnet18", "queue_size": 4096 if method == "end2end" else value, "momentum": 0.99}
    optim = {"lr": lr, "epochs": 15, "batch_size": value if method == "end2end" else 128}
    config = {"method": method, "model": model, "optim": optim, "data": {"path": "embedded"},
              "run": {"seed": seed, "output_dir": f"runs/sweep/seed_{seed}/K={value}/pretrain"}}
    backbone = {**base_record()["backbone"], "sha256": f"{value:04x}{seed:02x}" * 10 + "0000",
                "pretrain": {"method": method, "epochs": 15, "partial_epoch_steps": 0, "config": config}}
    return base_record(backbone=backbone, metrics={"top1": top1, "top5": 90.0}, config={"optim": {"epochs": 100}},
                       sweep={"param": "queue_size", "value": value, "method": method})


def test_the_trials_of_a_point_give_mean_std_and_n(write_record: WriteRecord, runs: Path) -> None:
    for seed, top1 in enumerate((40.0, 44.0, 42.0)):
        write_record(f"s{seed}/K1024.result.json", sweep_record(1024, seed, top1))
    for seed, top1 in enumerate((35.0, 36.0)):
        write_record(f"s{seed}/K256.result.json", sweep_record(256, seed, top1))
    write_record("one/K4096.result.json", sweep_record(4096, 0, 45.0))
    _, ablation = group(load_records([str(runs)])[0])
    assert [(e.sweep.value, e.n) for e in ablation] == [(256, 2), (1024, 3), (4096, 1)]  # type: ignore[union-attr]
    (table,) = build_report([str(runs)], published=[], expected={}).tables
    # 1024: mean 42, deviations -2, 2, 0 -> std sqrt(8 / 2) = 2; 256: mean 35.5, std sqrt(0.5) = 0.71
    assert [[c.plain() for c in row.cells[1:4]] for row in table.rows] == [
        ["256", "2", "35.5 ± 0.7"], ["1024", "3", "42.0 ± 2.0"], ["4096", "1", "45.0"]]
    assert {row.cells[0].text for row in table.rows} == {"MoCo (R18, 15 ep, embedded)"}  # one curve
    assert any("mean ± sample std over n" in note for note in table.notes)
    assert table.ablation is not None
    (points,) = table.ablation.series.values()
    assert [(p.value, p.mean, p.n) for p in points] == [(256, 35.5, 2), (1024, 42.0, 3), (4096, 45.0, 1)]
    assert points[1].std == pytest.approx(2.0) and points[2].std is None


def test_the_plot_draws_each_points_std_as_its_error_bar(write_record: WriteRecord, runs: Path) -> None:
    for seed, top1 in enumerate((40.0, 44.0, 42.0)):
        write_record(f"s{seed}/K1024.result.json", sweep_record(1024, seed, top1))
    write_record("one/K4096.result.json", sweep_record(4096, 0, 45.0))
    (table,) = build_report([str(runs)], published=[], expected={}).tables
    assert table.ablation is not None
    axes = ablation_figure(table.ablation).axes[0]
    (bars,) = [c for c in axes.containers if isinstance(c, ErrorbarContainer)]
    _, _, (segments,) = bars.lines
    spans = [tuple(float(v) for v in (s[0][0], s[0][1], s[1][1])) for s in segments.get_segments()]
    assert spans == [(1024.0, 40.0, 44.0), (4096.0, 45.0, 45.0)]  # 42 ± 2; one trial: no spread
    assert "mean ± std of trials" in axes.get_ylabel()


def test_another_recipe_is_another_curve_not_a_trial(write_record: WriteRecord, runs: Path) -> None:
    write_record("a.result.json", sweep_record(1024, 0, 40.0))
    write_record("b.result.json", sweep_record(1024, 1, 42.0))
    write_record("c.result.json", sweep_record(1024, 0, 30.0, lr=0.3))
    (table,) = build_report([str(runs)], published=[], expected={}).tables
    rows = {row.cells[0].text: (row.cells[2].text, row.cells[3].plain()) for row in table.rows}
    tag = {lr: series_digest(sweep_record(1024, 0, 0, lr=lr)["backbone"]["pretrain"]["config"], "queue_size",
                             "moco")[:6] for lr in (0.06, 0.3)}  # type: ignore[index]
    assert rows == {f"MoCo (R18, 15 ep, embedded) recipe {tag[0.06]}": ("2", "41.0 ± 1.4"),
                    f"MoCo (R18, 15 ep, embedded) recipe {tag[0.3]}": ("1", "30.0")}


def test_one_curve_shares_its_recipe_less_the_swept_field() -> None:
    configs = {v: sweep_record(v, 0, 0)["backbone"]["pretrain"]["config"] for v in (256, 4096)}
    assert series_digest(configs[256], "queue_size", "moco") == series_digest(configs[4096], "queue_size", "moco")
    e2e = {v: sweep_record(v, 0, 0, method="end2end")["backbone"]["pretrain"]["config"] for v in (256, 1024)}
    assert series_digest(e2e[256], "queue_size", "end2end") == series_digest(e2e[1024], "queue_size", "end2end")
    assert series_digest({}, "momentum", "moco") is None


@pytest.mark.parametrize(("param", "method"), [("K", "moco"), ("K", "memory-bank"), ("K", "end2end"), ("m", "moco")])
def test_the_swept_field_is_the_one_a_sweep_changes(param: str, method: str, tmp_path: Path) -> None:
    """reports restates which config field a sweep varies (it imports no sweeps); sweeps.point_config agrees."""
    from moco_core.config import replace, to_dict
    from moco_core.pretrain_config import PretrainConfig
    from reports.pretraining import swept_field
    from sweeps.sweep import RECORD_NAMES, point_config

    cfg = replace(PretrainConfig(), method=method, data={"path": "embedded"})
    before, after = to_dict(cfg), to_dict(point_config(cfg, param, 0.5 if param == "m" else 3, tmp_path))
    changed = {(section, key) for section, values in after.items() if section != "run" and isinstance(values, dict)
               for key, value in values.items() if before[section][key] != value}
    assert changed == {swept_field(RECORD_NAMES[param], method)}


def test_the_swept_field_of_a_v3_momentum_sweep(tmp_path: Path) -> None:
    test_the_swept_field_is_the_one_a_sweep_changes("m", "mocov3", tmp_path)


def momentum_record(value: float, top1: float, method: str = "moco", seed: int = 0, arch: str = "resnet18",
                    dataset: dict | None = None) -> dict:
    """A point of ``moco sweep m``: v1/v2 keep m in model.momentum, MoCo v3 in v3.momentum."""
    if method == "mocov3":
        config = {"method": method, "model": {"arch": arch}, "v3": {"momentum": value, "momentum_cos": True}}
    else:
        config = {"method": method, "model": {"arch": arch, "queue_size": 4096, "momentum": value}}
    config |= {"optim": {"epochs": 15}, "data": {"path": "embedded"}, "run": {"seed": seed}}
    backbone = {**base_record()["backbone"], "arch": arch, "sha256": f"{int(value * 1e4):05d}{seed}{method}" * 4,
                "pretrain": {"method": method, "epochs": 15, "config": config}}
    return base_record(backbone=backbone, metrics={"top1": top1, "top5": 90.0}, config={"optim": {"epochs": 100}},
                       dataset=dataset or {"path": "embedded", "classes": 8},
                       sweep={"param": "momentum", "value": value, "method": method})


def test_a_v3_momentum_sweep_is_a_table_of_its_own(write_record: WriteRecord, runs: Path) -> None:
    for m, top1 in ((0.9, 30.0), (0.99, 40.0), (0.999, 45.0)):
        write_record(f"v1/m{m}.result.json", momentum_record(m, top1))
    for seed, (m, top1) in enumerate(((0.99, 44.0), (0.99, 46.0), (0.996, 41.0))):
        write_record(f"v3/m{m}_{seed}.result.json", momentum_record(m, top1, "mocov3", seed))
    report = build_report([str(runs)], published=load_published(), expected={})
    v1, v3 = report.tables
    assert v1.title == "Ablation: momentum m, Linear classification (the paper's protocol, 100 epochs): embedded"
    assert v3.title == ("Ablation: momentum m of MoCo v3, Linear classification (the paper's protocol, 100 epochs): "
                        "embedded")
    assert {row.cells[0].text for row in v1.rows} == {"MoCo (R18, 15 ep, embedded)"}
    # the points of one v3 recipe less v3.momentum are one curve; two seeds at 0.99: 45 ± 1.4
    assert [[c.plain() for c in row.cells[:4]] for row in v3.rows] == [
        ["MoCo v3 (R18, 15 ep, embedded)", "0.99", "2", "45.0 ± 1.4"],
        ["MoCo v3 (R18, 15 ep, embedded)", "0.996", "1", "41.0"]]
    assert v3.ablation is not None and list(v3.ablation.series) == ["MoCo v3 (R18, 15 ep, embedded)"]
    assert any(n.startswith("MoCo v3's m (v3.momentum) is the momentum at the start") for n in v3.notes)
    assert (v1.key, v3.key) == ("ablation-momentum:linear:linear:embedded:100ep",
                                "ablation-momentum-mocov3:linear:linear:embedded:100ep")
    sections = {row["section"] for row in report.tidy if row["method"] == "mocov3"}
    assert sections == {v3.key}


def test_published_v1_momentum_rows_stay_out_of_the_v3_table(write_record: WriteRecord, runs: Path) -> None:
    imagenet = {"path": "/data/imagenet", "classes": 1000}
    write_record("v1.result.json", momentum_record(0.99, 55.0, arch="resnet50", dataset=imagenet))
    write_record("v3.result.json", momentum_record(0.99, 65.0, "mocov3", arch="resnet50", dataset=imagenet))
    v1, v3 = build_report([str(runs)], published=load_published(), expected={}).tables
    assert sum(row.kind == "published" for row in v1.rows) == 4  # MoCo v1 m = 0.9 ... 0.9999 (K = 4096)
    assert [row.kind for row in v3.rows] == ["ours"]


def test_series_of_a_v3_sweep_ignore_v3_momentum_only() -> None:
    a, b = (momentum_record(m, 0, "mocov3")["backbone"]["pretrain"]["config"] for m in (0.99, 0.996))
    assert series_digest(a, "momentum", "mocov3") == series_digest(b, "momentum", "mocov3")
    other = {**a, "v3": {**a["v3"], "momentum_cos": False}}  # another recipe: constant m
    assert series_digest(other, "momentum", "mocov3") != series_digest(a, "momentum", "mocov3")
