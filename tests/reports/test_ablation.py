"""Sweeps with trials: the records of one point of one curve (mechanism, recipe, value) that differ in their
pretraining's seed are its trials, shown as mean ± std (n) in the ablation table and as error bars in its plot."""

from __future__ import annotations

from pathlib import Path

import pytest
from matplotlib.container import ErrorbarContainer

from reports.plots import ablation_figure
from reports.pretraining import series_digest
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
    from moco_core.config import PretrainConfig, replace, to_dict
    from reports.pretraining import swept_field
    from sweeps.sweep import RECORD_NAMES, point_config

    cfg = replace(PretrainConfig(), method=method, data={"path": "embedded"})
    before, after = to_dict(cfg), to_dict(point_config(cfg, param, 0.5 if param == "m" else 3, tmp_path))
    changed = {(section, key) for section, values in after.items() if section != "run" and isinstance(values, dict)
               for key, value in values.items() if before[section][key] != value}
    assert changed == {swept_field(RECORD_NAMES[param], method)}
