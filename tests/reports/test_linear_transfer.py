"""reports/linear_transfer/table.py: the transfer suite's table from records (trials, mean column, published rows)
and the significance tests against values worked out by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from reports.linear_transfer.table import Result, mcnemar_exact, paired_p, sign_flip_p
from reports.render import to_markdown
from reports.report import build_report


def test_exact_mcnemar_by_hand() -> None:
    assert mcnemar_exact(5, 0) == pytest.approx(2 / 32)  # 5 discordant pairs all one way: 2 * (1/2)^5
    assert mcnemar_exact(3, 1) == pytest.approx(10 / 16)  # |k - 2| >= 1: k in {0, 1, 3, 4}: (1 + 4 + 4 + 1) / 16
    assert mcnemar_exact(8, 2) == pytest.approx(2 * (1 + 10 + 45) / 1024)  # k <= 2 or k >= 8 of 10
    assert mcnemar_exact(0, 0) == 1.0


def test_paired_permutation_applies_to_the_same_test_images_only() -> None:
    a = Result("cifar10", "top1", 80.0, [1, 1, 1, 1, 1, 0], [0, 1, 0, 1, 0, 1], "s")
    b = Result("cifar10", "top1", 30.0, [0, 0, 0, 0, 0, 0], [0, 1, 0, 1, 0, 1], "s")
    assert paired_p(a, b) == pytest.approx(2 / 32)
    assert paired_p(a, Result("cifar10", "top1", 30.0, b.correct, b.labels, "other split")) is None
    assert paired_p(Result("voc2007", "map11", 1.0), Result("voc2007", "map11", 2.0)) is None
    # mean per-class: class 0 has 4 images, class 1 one; a gets the lone class-1 image right where b does not,
    # which weighs 1/2 of the metric: under sign flips |sum| is always 1/2 -> p = 1
    pc_a = Result("pets", "mean_per_class", 0.0, [0, 0, 0, 0, 1], [0, 0, 0, 0, 1], "s")
    pc_b = Result("pets", "mean_per_class", 0.0, [0, 0, 0, 0, 0], [0, 0, 0, 0, 1], "s")
    assert paired_p(pc_a, pc_b) == pytest.approx(1.0)
    assert sign_flip_p([1.0] * 10, permutations=2000) == pytest.approx(2 / 1024, abs=0.004)


def _record(path: Path, *, dataset: str, metric: str, value: float, backbone: dict, version: str = "v9",
            correct: list[int] | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    transfer = {"metric": metric, "test": value, "lambda": 1.0}
    if correct is not None:
        transfer.update(test_correct=correct, test_labels=[0] * len(correct))
    path.write_text(json.dumps({
        "schema": "moco.result", "version": 1, "task": "transfer", "protocol": "linear-transfer",
        "metrics": {metric: value}, "backbone": backbone,
        "dataset": {"name": dataset, "path": "embedded", "version": version, "splits": {"sha256": "s"}},
        "config": {"data": {"crop_size": 32}, "solver": {"lambdas": 45}}, "transfer": transfer}))


def _moco(seed: int) -> dict:
    config = {"method": "moco", "data": {"path": "embedded"}, "optim": {"epochs": 100}, "model": {"arch": "resnet18"},
              "run": {"seed": seed}}
    return {"source": f"/ckpt/s{seed}/checkpoint_last.pth.tar", "format": "moco-suite", "arch": "resnet18",
            "sha256": f"{seed}" * 64, "pretrain": {"method": "moco", "epochs": 100, "config": config}}


RANDOM = {"source": "random", "format": "random", "arch": "resnet18", "sha256": None, "pretrain": {}}


def test_the_table_rows_are_pretrainings_and_the_mean_is_over_datasets(tmp_path: Path) -> None:
    values = {"moco": [(40, 60), (44, 62), (42, 58)], "random": [(30, 50), (32, 52), (31, 48)]}
    for name, rows in values.items():
        for seed, (shapes, digits) in enumerate(rows):
            backbone = _moco(seed) if name == "moco" else RANDOM
            for dataset, value in (("shapes", shapes), ("digits", digits)):
                _record(tmp_path / f"{name}_s{seed}" / dataset / "result.json", dataset=dataset, metric="top1",
                        value=value, backbone=backbone)
    report = build_report([str(tmp_path)])
    (table,) = [t for t in report.tables if t.key.startswith("transfer:")]
    header = [c.name for c in table.columns]
    assert header == ["pretraining", "n", "shapes", "digits", "mean of 2", "vs random init (mean of 2)"]
    cells = {row.cells[0].text.split(" (")[0]: [c.plain() for c in row.cells[1:-1]] for row in table.rows}
    # MoCo's trial means 50, 53, 50: mean 51, std sqrt(3); random's 40, 42, 39.5: mean 40.5, std 1.32
    assert cells["random init"] == ["3", "31.0 ± 1.0", "50.0 ± 2.0", "40.5 ± 1.3"]
    assert cells["MoCo"] == ["3", "42.0 ± 2.0", "60.0 ± 2.0", "51.0 ± 1.7"]
    se = math.sqrt(3 / 3 + statistics_var([40, 42, 39.5]) / 3)
    assert any(f"mean of 2 +10.5 points over 3 and 3 trials, {10.5 / se:.1f} SE" in n for n in table.notes), table.notes
    assert "Linear transfer (v9, 32-px bicubic crops)" in to_markdown(report)
    assert report.records == [] and len(report.transfer) == 6


def statistics_var(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values) / (len(values) - 1)


def test_single_trials_are_compared_over_test_images(tmp_path: Path) -> None:
    _record(tmp_path / "a" / "textures" / "result.json", dataset="textures", metric="top1", value=100.0,
            backbone=_moco(0), correct=[1] * 6)
    _record(tmp_path / "b" / "textures" / "result.json", dataset="textures", metric="top1", value=0.0,
            backbone=RANDOM, correct=[0] * 6)
    (table,) = build_report([str(tmp_path)]).tables
    assert any("paired permutation test over the test images: textures p=0.031" in n for n in table.notes)
