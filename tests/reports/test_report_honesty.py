"""The report over large, malformed and look-alike records (issues 55 and 57): the transfer suite's paired tests in
numpy against independent computations, malformed transfer records skipped with one line, a user's folder never
named after the famous dataset whose layout it borrows, published rows only beside the real dataset, means over
the datasets every row has."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from cli import app
from reports.linear_transfer.table import Result, mcnemar_exact, paired_p, sign_flip_p

runner = CliRunner()

MOCO = {"source": "/ckpt/s0/checkpoint_last.pth.tar", "format": "moco-suite", "arch": "resnet18", "sha256": "0" * 64,
        "pretrain": {"method": "moco", "epochs": 100,
                     "config": {"method": "moco", "data": {"path": "/data/own"}, "optim": {"epochs": 100},
                                "model": {"arch": "resnet18"}, "run": {"seed": 0}}}}
RANDOM = {"source": "random", "format": "random", "arch": "resnet18", "sha256": None, "pretrain": {}}


def transfer_record(path: Path, *, backbone: dict[str, Any], dataset: str = "cifar10", value: float = 50.0,
                    metric: str = "top1", correct: Any = None, labels: Any = None, crop: int = 224,
                    protocol: str | None = None, **fields: Any) -> Path:
    """A transfer suite record (classification/linear_transfer/run.py's fields) of a real-datasets run at 224 px;
    ``fields`` update its ``dataset`` object (counts), ``transfer``'s outcomes are given as they should be written."""
    transfer: dict[str, Any] = {"metric": metric, "test": value, "lambda": 1.0}
    if correct is not None:
        transfer.update(test_correct=correct, test_labels=labels if labels is not None else [0] * len(correct))
    record = {"schema": "moco.result", "version": 1, "task": "transfer", "protocol": "linear-transfer",
              "metrics": {metric: value}, "backbone": backbone,
              "dataset": {"name": dataset, "path": "/data/own", "folder": f"/data/own/{dataset}",
                          "splits": {"sha256": "s"}, **fields},
              "config": {"data": {"crop_size": crop}, **({"solver": {"protocol": protocol}} if protocol else {})},
              "transfer": transfer}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return path


# ------------------------------------------------------------------------------------ issue 55: the paired tests


def _mcnemar_by_sum(plus: int, minus: int) -> float:
    """The definition, summed term by term over every k (the pure-Python computation the report ran before)."""
    n = plus + minus
    extreme = abs(plus - n / 2)
    return min(1.0, sum(math.comb(n, k) for k in range(n + 1) if abs(k - n / 2) >= extreme - 1e-9) / 2 ** n)


@pytest.mark.parametrize(("plus", "minus"), [(0, 0), (1, 0), (0, 7), (5, 0), (3, 1), (8, 2), (10, 9), (9, 10),
                                             (40, 60), (120, 80), (300, 250), (700, 640)])
def test_mcnemar_equals_the_sum_over_every_outcome(plus: int, minus: int) -> None:
    assert mcnemar_exact(plus, minus) == pytest.approx(_mcnemar_by_sum(plus, minus), rel=1e-9, abs=1e-300)


@pytest.mark.parametrize(("plus", "minus"), [(4000, 3800), (400_000, 399_000), (500_100, 499_900), (30, 2)])
def test_mcnemar_equals_scipys_exact_binomial_test_on_large_counts(plus: int, minus: int) -> None:
    stats = pytest.importorskip("scipy.stats")
    expected = stats.binomtest(min(plus, minus), plus + minus, 0.5).pvalue
    assert mcnemar_exact(plus, minus) == pytest.approx(expected, rel=1e-8)


@pytest.mark.parametrize("differences", [[1.0] * 10, [0.5, -0.25, 0.25, 0.125, -0.5, 0.5, 0.25],
                                         [0.1, 0.2, 0.3, -0.05, 0.4, 0.1, 0.1, -0.2, 0.3, 0.25, 0.15, 0.05], []])
def test_sign_flips_match_the_exact_enumeration(differences: list[float]) -> None:
    """Every one of the 2^m sign assignments, counted: the Monte Carlo p (10,000 draws) within 4 of its SEs."""
    observed = abs(sum(differences))
    flips = [abs(sum(s * d for s, d in zip(signs, differences, strict=True))) >= observed - 1e-12
             for signs in itertools.product((1, -1), repeat=len(differences))]
    exact = sum(flips) / len(flips)
    se = math.sqrt(exact * (1 - exact) / 10_000)
    assert sign_flip_p(differences) == pytest.approx(exact, abs=4 * se + 2e-4)


def test_mean_per_class_test_weighs_images_by_their_class() -> None:
    # one class: every image weighs the same, so the sign flips are McNemar's binomial (10^5 test images)
    rng = np.random.default_rng(3)
    a, b = (rng.random(100_000) < 0.6).astype(int), (rng.random(100_000) < 0.597).astype(int)
    one = np.zeros(100_000, dtype=int)
    exact = mcnemar_exact(int(((a == 1) & (b == 0)).sum()), int(((a == 0) & (b == 1)).sum()))
    got = paired_p(Result("pets", "mean_per_class", 0.0, a, one, "s"),
                   Result("pets", "mean_per_class", 0.0, b, one, "s"))
    assert got == pytest.approx(exact, abs=4 * math.sqrt(exact * (1 - exact) / 10_000) + 2e-4)
    # two classes of 4 and 1 images: a gets the lone class-1 image and one class-0 image right where b does not
    # (weights 1/2 and 1/8): the sums under flips are +-1/2 +-1/8, |sum| >= 5/8 in 2 of the 4 assignments
    pc_a = Result("pets", "mean_per_class", 0.0, [1, 0, 0, 0, 1], [0, 0, 0, 0, 1], "s")
    pc_b = Result("pets", "mean_per_class", 0.0, [0, 0, 0, 0, 0], [0, 0, 0, 0, 1], "s")
    assert paired_p(pc_a, pc_b) == pytest.approx(0.5, abs=0.02)


# ------------------------------------------------------------------ issue 55: malformed transfer records skipped


MALFORMED = {  # (correct, labels, other fields of the record) -> the reason the skipped list gives
    "outcomes as strings": (["1", "0", "1"], [0, 1, 0], {}, "'transfer.test_correct' is not a list of whole numbers"),
    "labels as lists": ([1, 0, 1], [[0], [1], [0]], {}, "'transfer.test_labels' is not a list of whole numbers"),
    "outcomes not 0 or 1": ([1, 2, 0], [0, 1, 0], {}, "'transfer.test_correct' holds numbers other than 0 and 1"),
    "lengths differ": ([1, 0, 1], [0, 1], {}, "differ in length (3 and 2 test images)"),
    "outcomes an object": ({"a": 1}, [0], {}, "'transfer.test_correct' is not a list of whole numbers (a dict)"),
    "metric a list": ([1, 0, 1], [0, 1, 0], {"metric": ["top1"]}, "'transfer.metric'"),
    "sweep bound text": ([1, 0, 1], [0, 1, 0], {"lambda_min": "tiny"}, "'config.solver.lambda_min' is not a number"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_transfer_record_is_skipped_with_one_line(tmp_path: Path, case: str) -> None:
    """Two single-trial rows, so the paired test runs over the good records: on d564f78 the strings and lists
    ended in a TypeError traceback there, the rest were read as if valid or tracebacked when formatted."""
    correct, labels, other, reason = MALFORMED[case]
    transfer_record(tmp_path / "moco" / "cifar10" / "result.json", backbone=MOCO, value=66.7, correct=[1, 1, 0],
                    labels=[0, 1, 0])
    transfer_record(tmp_path / "random" / "cifar10" / "result.json", backbone=RANDOM, value=33.3,
                    correct=[0, 1, 0], labels=[0, 1, 0])
    bad = transfer_record(tmp_path / "moco" / "pets" / "result.json", backbone=MOCO, dataset="pets", correct=correct,
                          labels=labels, metric="mean_per_class")
    data = json.loads(bad.read_text())
    if "metric" in other:
        data["transfer"]["metric"] = other["metric"]
    if "lambda_min" in other:
        data["config"]["solver"] = {"lambda_min": other["lambda_min"]}
    bad.write_text(json.dumps(data))
    result = runner.invoke(app, ["report", str(tmp_path), "--out", str(tmp_path / "rep"), "--formats", "md"])
    assert result.exit_code == 0, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    skipped = [line for line in result.output.splitlines() if line.startswith("skipped")]
    assert len(skipped) == 1 and skipped[0].startswith("skipped 1: ") and str(bad) in skipped[0], skipped
    assert reason in skipped[0], skipped[0]
    assert "Traceback" not in result.output


# ------------------------------------------------------------------------- issue 57: which dataset, which mean

DIGITS = {"classes": 10, "train_images": 1_150, "val_images": 288, "test_images": 359}  # 1,438 train + val
CIFAR10 = {"classes": 10, "train_images": 40_000, "val_images": 10_000, "test_images": 10_000}
PETS = {"classes": 37, "train_images": 2_944, "val_images": 736, "test_images": 3_669}


def _report(tmp_path: Path) -> tuple[str, str]:
    """(Markdown, CSV) of ``moco report`` over tmp_path/runs, through the command."""
    out = tmp_path / "rep"
    result = runner.invoke(app, ["report", str(tmp_path / "runs"), "--out", str(out), "--formats", "md,csv"])
    assert result.exit_code == 0, result.output
    return (out / "report.md").read_text(), (out / "report.csv").read_text()


def test_own_images_in_cifar10_layout_are_named_by_their_folder_without_published_rows(tmp_path: Path) -> None:
    """scikit-learn's digits written as cifar-10-batches-py: d564f78 showed them as "CIFAR10" under "Linear transfer
    (real datasets)" with the published supervised and DeepCluster-v2 CIFAR-10 numbers beside them."""
    for name, backbone, value in (("moco", MOCO, 88.0), ("random", RANDOM, 70.0)):
        transfer_record(tmp_path / "runs" / name / "cifar10" / "result.json", backbone=backbone, value=value,
                        **DIGITS)
    md, csv = _report(tmp_path)
    assert "own (CIFAR-10 layout)" in md and "CIFAR10" not in md
    assert "real datasets" not in md and "Linear transfer (own data in the suite's layouts, 224-px" in md
    assert "| published" not in md and "Ericsson" not in md and "91.4" not in md and "94.0" not in md
    assert "own (CIFAR-10 layout)" in csv and "Ericsson" not in csv


def test_the_released_cifar10_keeps_its_name_and_its_published_rows(tmp_path: Path) -> None:
    for name, backbone, value in (("moco", MOCO, 88.0), ("random", RANDOM, 70.0)):
        transfer_record(tmp_path / "runs" / name / "cifar10" / "result.json", backbone=backbone, value=value,
                        protocol="ssl-transfer", **CIFAR10)
    md, _ = _report(tmp_path)
    assert "Linear transfer (real datasets, 224-px" in md and "| CIFAR10" in md and "CIFAR-10 layout" not in md
    published = [line for line in md.splitlines() if line.startswith("| published")]
    assert len(published) == 14 and any("91.4" in line for line in published), published  # Ericsson et al.


def test_the_mean_is_over_the_datasets_every_row_has_and_says_how_many(tmp_path: Path) -> None:
    """MoCo has CIFAR-10 and Pets, random init CIFAR-10 only: d564f78 headed MoCo's mean of 2 datasets "mean",
    beside random init's empty one; now both rows' means are over CIFAR-10, headed "mean of 1", Pets named."""
    transfer_record(tmp_path / "runs" / "moco" / "cifar10" / "result.json", backbone=MOCO, value=80.0, **CIFAR10)
    transfer_record(tmp_path / "runs" / "moco" / "pets" / "result.json", backbone=MOCO, value=40.0,
                    dataset="pets", metric="mean_per_class", **PETS)
    transfer_record(tmp_path / "runs" / "random" / "cifar10" / "result.json", backbone=RANDOM, value=30.0,
                    **CIFAR10)
    md, _ = _report(tmp_path)
    header = next(line for line in md.splitlines() if line.startswith("| pretraining"))
    assert header.rstrip(" |").endswith("mean of 1 | vs random init (mean of 1)"), header
    rows = {line.split("|")[1].strip().split(" (")[0]: line.rstrip(" |").rsplit("|", 2)[1].strip()
            for line in md.splitlines() if line.startswith("| MoCo") or line.startswith("| random init")}
    assert rows == {"MoCo": "80.0", "random init": "30.0"}, rows
    assert "Mean of 1: over CIFAR10, the datasets every row has; Pets left out (not in every row)." in md


# ------------------------------------------------------------------------------- issue 57: headings, help text


def test_the_224_and_32_px_transfer_tables_have_distinct_headings(tmp_path: Path) -> None:
    """d564f78 headed both "Linear transfer (real datasets)", the view only in the line below."""
    for crop in (224, 32):
        for name, backbone in (("moco", MOCO), ("random", RANDOM)):
            transfer_record(tmp_path / "runs" / f"{name}{crop}" / "cifar10" / "result.json", backbone=backbone,
                            crop=crop, **CIFAR10)
    md, _ = _report(tmp_path)
    headings = [line for line in md.splitlines() if line.startswith("## Linear transfer")]
    assert headings == ["## Linear transfer (real datasets, 224-px bicubic crops)",
                        "## Linear transfer (real datasets, 32-px bicubic crops)"], headings


def test_report_help_keeps_the_smoke_mark() -> None:
    """rich read "[smoke]" in the --mix-marked help as markup and dropped it (d564f78: "marked )")."""
    result = runner.invoke(app, ["report", "--help"])
    assert result.exit_code == 0 and "marked [smoke])" in " ".join(result.output.split())


# ----------------------------------------------------------------- issue 57: the suite's few-shot records shown


def _fewshot_record(path: Path, backbone: dict[str, Any], results: Any) -> None:
    """classification/linear_transfer/run.py's ``<dataset>/fewshot.result.json`` of a real-datasets run."""
    path.write_text(json.dumps({
        "schema": "moco.result", "version": 1, "task": "transfer-fewshot", "protocol": "linear-transfer-fewshot",
        "metrics": {"5shot_top1": 1.0}, "backbone": backbone,
        "dataset": {"name": "cifar10", "path": "/data/own", "metric": "top1", **CIFAR10},
        "config": {"data": {"crop_size": 224}}, "fewshot": results}))


def test_the_suites_few_shot_records_are_a_table_with_their_spread_and_tries(tmp_path: Path) -> None:
    """d564f78 read fewshot.result.json nowhere and printed "skipped: none"."""
    for name, backbone, mean, std in (("moco", MOCO, 58.61, 8.18), ("random", RANDOM, 40.0, 2.5)):
        linear = transfer_record(tmp_path / "runs" / name / "cifar10" / "result.json", backbone=backbone, **CIFAR10)
        _fewshot_record(linear.with_name("fewshot.result.json"), backbone,
                        [{"shots": 5, "tries": 5, "mean": mean, "std": std, "runs": []}])
    bad = tmp_path / "runs" / "other" / "cifar10" / "fewshot.result.json"
    bad.parent.mkdir(parents=True)
    _fewshot_record(bad, MOCO, [{"shots": 5, "mean": "high"}])
    result = runner.invoke(app, ["report", str(tmp_path / "runs"), "--out", str(tmp_path / "rep"), "--formats",
                                 "md,csv"])
    assert result.exit_code == 0, result.output
    md, csv = (tmp_path / "rep" / "report.md").read_text(), (tmp_path / "rep" / "report.csv").read_text()
    assert "## Linear transfer (real datasets, 224-px bicubic crops), few-shot" in md
    rows = [line for line in md.splitlines() if "CIFAR10 5-shot" in line or "± 8.2" in line or "± 2.5" in line]
    assert any("58.6 ± 8.2" in line and line.rstrip(" |").endswith("5") for line in rows), rows
    assert any("40.0 ± 2.5" in line for line in rows), rows
    assert '"58.61","8.18"' in csv and "std over 5 tries" in csv
    skipped = next(line for line in result.output.splitlines() if line.startswith("skipped"))
    assert skipped.startswith("skipped 1: ") and str(bad) in skipped and "'fewshot'" in skipped, skipped


def test_one_few_shot_trial_shows_its_spread_over_the_tries(write_record: Any, runs: Path, tmp_path: Path) -> None:
    """moco eval linear --shots 5 --tries 5 records 58.61 +- 8.18; d564f78's table and CSV showed 58.6 alone."""
    runs_of = [{"seed": i, "test": 50.0 + i} for i in range(5)]
    write_record("fewshot/result.json", task="fewshot", protocol="fewshot",
                 metrics={"5shot_linear_top1": 58.61, "5shot_knn_top1": 50.0}, config={},
                 fewshot=[{"shots": 5, "linear": {"mean": 58.61, "std": 8.18, "runs": runs_of},
                           "knn": {"mean": 50.0, "std": 1.5, "runs": runs_of}}])
    result = runner.invoke(app, ["report", str(runs), "--out", str(tmp_path / "rep"), "--formats", "md,csv"])
    assert result.exit_code == 0, result.output
    md, csv = (tmp_path / "rep" / "report.md").read_text(), (tmp_path / "rep" / "report.csv").read_text()
    row = next(line for line in md.splitlines() if "58.6" in line)
    assert "58.6 ± 8.2" in row and "50.0 ± 1.5" in row and "± over 5 tries of the shots drawn" in row, row
    assert '"58.61","8.18"' in csv and "std over 5 tries" in csv
