"""Issue 57, "a comparison in every table": each row of the linear, head grid, kNN, few-shot and transfer suite
tables (the suite's few-shot one too) against a baseline row (random init, or ``--baseline``): the difference, its
standard error over trials and the test, in the Markdown and the CSV, checked against numpy and scipy here; a
one-trial row says "1 trial"; a ``--baseline`` that names no row is one line."""

from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from cli import app
from reports.comparisons import t_two_sided
from reports.linear_transfer.table import mcnemar_exact
from reports.protocols import GRID_PROTOCOL

from .conftest import WriteRecord, base_record
from .test_report_honesty import DIGITS, MOCO, RANDOM, transfer_record

runner = CliRunner()
DATA = {"path": "/data/digits", "classes": 10}  # the user's digits as 32-px PNGs
SUPERVISED = {"source": "/weights/r18.pth", "format": "torchvision", "arch": "resnet18", "sha256": "7f" * 32,
              "pretrain": {"method": "supervised"}}
RANDOM_LINEAR = {"source": "random", "format": "random", "arch": "resnet18", "sha256": None, "pretrain": {}}
# three trials a row (MoCo, random init): (task, protocol, metric) -> (MoCo's values, random init's)
VALUES = {
    ("linear", "linear", "top1"): ([44.0, 47.5, 45.1], [40.3, 42.8, 41.1]),
    ("linear", GRID_PROTOCOL, "top1"): ([51.2, 50.1, 53.3], [44.4, 47.9, 46.2]),
    ("knn", "knn", "top1"): ([38.2, 36.9, 41.7], [35.1, 33.2, 36.6]),
    ("fewshot", "fewshot", "5shot_linear_top1"): ([52.4, 55.0, 50.9], [45.2, 48.8, 46.6]),
}
TRANSFER = ([88.1, 86.7, 89.4], [84.2, 86.9, 83.8])  # the suite's digits (CIFAR-10 layout), top-1
FEWSHOT = ([58.61, 55.2, 60.3], [49.0, 52.5, 47.1])  # its 5-shot means, each over 5 tries


def _records(write_record: WriteRecord, runs: Path, *, supervised: bool = False) -> None:
    """The digits study's records: MoCo and random init, 3 trials each, of every protocol and the suite."""
    for (task, protocol, metric), (moco, random) in VALUES.items():
        for name, backbone, values in (("moco", None, moco), ("random", RANDOM_LINEAR, random)):
            for seed, value in enumerate(values):
                fields: dict[str, Any] = {"task": task, "protocol": protocol, "dataset": DATA, "config": {},
                                          "metrics": {metric: value} if task == "fewshot" else
                                          {"top1": value, "top5": 99.0}}
                if protocol == GRID_PROTOCOL:
                    fields.update(config={"optim": {"epochs": 10}}, selection={"chosen": "layer4 lr 1"})
                if backbone is not None:
                    fields["backbone"] = backbone
                write_record(f"{protocol}/{name}/s{seed}/result.json", base_record(**fields))
    if supervised:
        for seed, value in enumerate([49.0, 50.5, 48.8]):
            write_record(f"linear/supervised/s{seed}/result.json",
                         base_record(dataset=DATA, backbone=SUPERVISED, metrics={"top1": value, "top5": 99.0}))
    for name, backbone, linear, fewshot in (("moco", MOCO, *[v[0] for v in (TRANSFER, FEWSHOT)]),
                                            ("random", RANDOM, *[v[1] for v in (TRANSFER, FEWSHOT)])):
        for seed in range(3):
            path = transfer_record(runs / "suite" / f"{name}{seed}" / "cifar10" / "result.json", backbone=backbone,
                                   value=linear[seed], **DIGITS)
            _fewshot(path.with_name("fewshot.result.json"), backbone, fewshot[seed])


def _fewshot(path: Path, backbone: dict[str, Any], mean: float) -> None:
    """classification/linear_transfer/run.py's ``<dataset>/fewshot.result.json`` of the digits in CIFAR-10's layout."""
    path.write_text(json.dumps({
        "schema": "moco.result", "version": 1, "task": "transfer-fewshot", "protocol": "linear-transfer-fewshot",
        "metrics": {"5shot_top1": mean}, "backbone": backbone,
        "dataset": {"name": "cifar10", "path": "/data/own", "metric": "top1", **DIGITS},
        "config": {"data": {"crop_size": 224}}, "fewshot": [{"shots": 5, "tries": 5, "mean": mean, "std": 8.18}]}))


def _report(runs: Path, out: Path, *options: str) -> tuple[str, list[dict[str, str]]]:
    result = runner.invoke(app, ["report", str(runs), "--out", str(out), "--formats", "md,csv", *options])
    assert result.exit_code == 0, result.output
    return (out / "report.md").read_text(), list(csv.DictReader(io.StringIO((out / "report.csv").read_text())))


def _welch(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """(difference, its standard error, Welch's p), worked out with numpy and scipy.stats."""
    stats = pytest.importorskip("scipy.stats")
    x, y = np.array(a), np.array(b)
    se = math.sqrt(x.var(ddof=1) / len(x) + y.var(ddof=1) / len(y))
    return float(x.mean() - y.mean()), se, float(stats.ttest_ind(x, y, equal_var=False).pvalue)


def _shown(diff: float, se: float, p: float) -> str:
    """The Markdown cell, as a reader expects it: direction and size, SE, p, the test and the trials."""
    return f"{diff:+.1f} ± {se:.1f}, p={p:.2g} (Welch, 3 v 3 trials)"


def _tables(md: str, heading: str) -> list[str]:
    """The Markdown's tables whose heading starts with ``heading`` (## or, with several studies, ###)."""
    return [s for s in re.split(r"\n#+ ", md) if s.startswith(heading)]


def _section(md: str, heading: str) -> str:
    return _tables(md, heading)[0]


def _row(section: str, label: str) -> str:
    return next(line for line in section.splitlines() if line.startswith(f"| {label}"))


HEADINGS = {  # the Markdown heading of each table, and the CSV's (section part, metric) of its compared row
    ("linear", "linear", "top1"): ("Linear classification", ("linear:linear:", "top1")),
    ("linear", GRID_PROTOCOL, "top1"): ("Linear head grid", (f"linear:{GRID_PROTOCOL}:", "top1")),
    ("knn", "knn", "top1"): ("kNN", ("knn:knn:", "top1")),
    ("fewshot", "fewshot", "5shot_linear_top1"): ("Few-shot", ("fewshot:fewshot:", "5shot_linear_top1")),
}


def test_every_table_compares_each_row_with_random_init(write_record: WriteRecord, runs: Path,
                                                        tmp_path: Path) -> None:
    """d564f78's linear, grid, kNN and few-shot tables gave means only, the suite's bare p-values, its few-shot
    table a row a suite run; now each table's MoCo row says how far it is from random init, how sure, by which
    test, and report.csv says the same in its columns."""
    _records(write_record, runs)
    md, rows = _report(runs, tmp_path / "rep")
    cases = [(*HEADINGS[key], VALUES[key]) for key in VALUES]
    cases += [("Linear transfer (own data", ("transfer:", "mean"), TRANSFER),
              ("Linear transfer (own data", ("transfer:", "top1"), TRANSFER),
              ("Linear transfer (own data", ("|fewshot", "5-shot"), FEWSHOT)]
    for heading, (section_part, metric), (moco, random) in cases:
        diff, se, p = _welch(moco, random)
        if metric != "top1" or not section_part.startswith("transfer"):  # the suite's per-dataset test: CSV only
            table = _tables(md, heading)[-1 if section_part == "|fewshot" else 0]
            header = next(line for line in table.splitlines() if line.startswith("| pretraining") or
                          line.startswith("| Pretraining"))
            assert any(cell.strip().startswith("vs random init (") for cell in header.split("|")), header
            assert _shown(diff, se, p) in _row(table, "MoCo"), (heading, _row(table, "MoCo"), diff, se, p)
            assert "baseline" in _row(table, "random init")
        (row,) = [r for r in rows if section_part in r["section"] and r["metric"] == metric
                  and r["pretraining"].startswith("MoCo") and r["difference"]]
        assert float(row["difference"]) == pytest.approx(diff, abs=1e-6), (heading, row)
        assert float(row["difference_se"]) == pytest.approx(se, abs=1e-6)
        assert float(row["p_value"]) == pytest.approx(p, rel=1e-5)
        assert (row["test"], row["baseline"], row["n"], row["baseline_n"]) == ("Welch", "random init (R18)", "3",
                                                                               "3"), row


def test_baseline_supervised_and_a_bad_baseline(write_record: WriteRecord, runs: Path, tmp_path: Path) -> None:
    _records(write_record, runs, supervised=True)
    md, rows = _report(runs, tmp_path / "rep", "--baseline", "supervised")
    linear = _section(md, "Linear classification")
    assert "vs supervised (top-1)" in linear and "baseline" in _row(linear, "supervised")
    diff, se, p = _welch(VALUES["linear", "linear", "top1"][0], [49.0, 50.5, 48.8])
    assert _shown(diff, se, p) in _row(linear, "MoCo"), _row(linear, "MoCo")
    diff, se, p = _welch(VALUES["linear", "linear", "top1"][1], [49.0, 50.5, 48.8])
    assert _shown(diff, se, p) in _row(linear, "random init"), _row(linear, "random init")
    (row,) = [r for r in rows if r["section"].startswith("linear:linear:") and r["metric"] == "top1"
              and r["pretraining"].startswith("random init")]
    assert row["baseline"].startswith("supervised") and float(row["difference"]) == pytest.approx(diff, abs=1e-6)
    assert not re.search(r"\|\s*vs random init \(", md)  # tables without a supervised row compare nothing
    result = runner.invoke(app, ["report", str(runs), "--out", str(tmp_path / "bad"), "--baseline", "DINO"])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --baseline: no row is 'DINO'"), result.output
    assert "'random init (R18)'" in lines[0] and "'MoCo (R18, 15 ep, embedded) a1b2c3'" in lines[0]
    assert not (tmp_path / "bad").exists()


def test_a_row_of_one_trial_says_so_and_the_suites_single_trials_are_paired(write_record: WriteRecord, runs: Path,
                                                                             tmp_path: Path) -> None:
    """One trial has no spread: "1 trial", never "± 0.0"; the suite's one-trial rows keep their paired test over
    the test images, now with the difference beside it."""
    write_record("moco/result.json", base_record(dataset=DATA, metrics={"top1": 47.0, "top5": 99.0}))
    write_record("random/result.json", base_record(dataset=DATA, backbone=RANDOM_LINEAR,
                                                   metrics={"top1": 41.0, "top5": 99.0}))
    moco = [1] * 9 + [0] * 3
    random = [0] * 5 + [1] * 4 + [0, 1, 0]
    for name, backbone, correct in (("moco", MOCO, moco), ("random", RANDOM, random)):
        transfer_record(runs / "suite" / name / "cifar10" / "result.json", backbone=backbone,
                        value=100 * sum(correct) / 12, correct=correct, **DIGITS)
    md, rows = _report(runs, tmp_path / "rep")
    assert "+6.0 (1 trial)" in _row(_section(md, "Linear classification"), "MoCo")
    assert "± 0.0" not in md
    plus, minus = 5, 1  # images MoCo gets right and random init wrong, and the other way round
    (row,) = [r for r in rows if r["section"].startswith("transfer:") and r["metric"] == "top1" and r["status"] ==
              "row" and r["pretraining"].startswith("MoCo")]
    assert float(row["difference"]) == pytest.approx(100 * (9 - 5) / 12, abs=1e-5)
    assert row["difference_se"] == "" and row["test"] == "exact McNemar over the test images"
    assert float(row["p_value"]) == pytest.approx(mcnemar_exact(plus, minus), rel=1e-5)
    assert float(row["p_value"]) == pytest.approx(2 * (1 + 6) / 2 ** 6, rel=1e-5)  # k <= 1 or k >= 5 of 6
    suite = _section(md, "Linear transfer")
    assert f"p={2 * 7 / 64:.2g} (+33.3 points)" in suite, suite


@pytest.mark.parametrize(("t", "df"), [(0.0, 3.0), (0.5, 1.0), (2.0, 1.0), (12.7, 1.0), (1.0, 2.0), (4.3, 2.0),
                                       (30.0, 2.0), (2.5, 2.7), (1.7, 9.3), (3.1, 40.0), (0.2, 200.0)])
def test_the_t_tail_against_closed_forms_and_scipy(t: float, df: float) -> None:
    """df 1: 1 - 2 atan(t) / pi; df 2: 1 - t / sqrt(2 + t^2) (the t distribution's closed forms); others scipy."""
    if df == 1.0:
        expected = 1 - 2 * math.atan(t) / math.pi
    elif df == 2.0:
        expected = 1 - t / math.sqrt(2 + t * t)
    else:
        expected = 2 * float(pytest.importorskip("scipy.stats").t.sf(t, df))
    assert t_two_sided(t, df) == pytest.approx(expected, rel=1e-9, abs=1e-15)


def test_one_few_shot_trial_is_compared_over_its_tries(write_record: WriteRecord, runs: Path, tmp_path: Path) -> None:
    """A few-shot record of one trial holds its mean and std over the tries of the shots drawn: the rows are
    compared over those (Welch from the two means, stds and tries), in the grid's table and the suite's."""
    stats = pytest.importorskip("scipy.stats")
    for name, backbone, mean, std in (("moco", None, 58.61, 8.18), ("random", RANDOM_LINEAR, 40.0, 2.5)):
        runs_of = [{"seed": i, "test": 50.0} for i in range(5)]
        write_record(f"fewshot/{name}/result.json", base_record(
            task="fewshot", protocol="fewshot", dataset=DATA, config={}, metrics={"5shot_linear_top1": mean},
            fewshot=[{"shots": 5, "linear": {"mean": mean, "std": std, "runs": runs_of}}],
            **({"backbone": backbone} if backbone else {})))
        suite = MOCO if backbone is None else RANDOM
        path = transfer_record(runs / "suite" / name / "cifar10" / "result.json", backbone=suite, **DIGITS)
        _fewshot(path.with_name("fewshot.result.json"), suite, mean)
    _, p = stats.ttest_ind_from_stats(58.61, 8.18, 5, 40.0, 2.5, 5, equal_var=False)
    se = math.sqrt(8.18 ** 2 / 5 + 2.5 ** 2 / 5)
    expected = f"+18.6 ± {se:.1f}, p={p:.2g} (Welch over tries, 5 v 5 tries)"
    md, rows = _report(runs, tmp_path / "rep")
    assert expected in _row(_section(md, "Few-shot"), "MoCo"), _row(_section(md, "Few-shot"), "MoCo")
    suite_std = math.sqrt(2 * 8.18 ** 2 / 5)  # the suite's records here: std 8.18 over 5 tries on both rows
    _, suite_p = stats.ttest_ind_from_stats(58.61, 8.18, 5, 40.0, 8.18, 5, equal_var=False)
    assert f"+18.6 ± {suite_std:.1f}, p={suite_p:.2g} (Welch over tries, 5 v 5 tries)" in _row(
        _tables(md, "Linear transfer")[-1], "MoCo")
    (row,) = [r for r in rows if r["metric"] == "5shot_linear_top1" and r["pretraining"].startswith("MoCo")]
    assert float(row["difference_se"]) == pytest.approx(se, abs=1e-6) and row["test"] == "Welch over tries"
    assert float(row["p_value"]) == pytest.approx(p, rel=1e-5)
