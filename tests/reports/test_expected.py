"""Expected ranges: written from trials by benchmarks/expected_ranges.py, applied only to runs of the same recipes,
and a run outside flagged in its row's note."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path
from typing import Any

from reports.expected import EXPECTED_CSV, FLOOR, Expected, load_expected
from reports.records import parse_record
from reports.render import to_markdown
from reports.report import build_report
from tests.reports.conftest import WriteRecord, base_record

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
PRETRAIN = {"model": {"queue_size": 1024, "temperature": 0.2}, "data": {"path": "embedded"}}
LINEAR = {"optim": {"epochs": 30, "lr": 30.0}, "data": {"path": "embedded"}}


def trial(seed: int, top1: float, *, eval_config: dict[str, Any] | None = None,
          pretrain: dict[str, Any] | None = None) -> dict[str, Any]:
    """A linear record of a MoCo pretraining of one recipe with ``seed`` (its own weights and run directory)."""
    config = {**(pretrain or PRETRAIN), "run": {"seed": seed, "output_dir": f"/r/seed_{seed}"}}
    backbone = {**base_record()["backbone"], "sha256": f"{seed:02d}" * 32, "source": f"/r/seed_{seed}/c.pth.tar",
                "pretrain": {"method": "moco", "epochs": 60, "config": config}}
    evaluation = {**(eval_config or LINEAR), "run": {"seed": seed, "output_dir": f"/r/seed_{seed}/linear"}}
    return base_record(backbone=backbone, config=evaluation, metrics={"top1": top1, "top5": 95.0})


def measure(write_record: WriteRecord, tmp_path: Path) -> Path:
    """expected.csv from three trials (top-1 41, 42, 43: mean 42, std 1), through the script as a user runs it."""
    for seed, top1 in ((0, 41.0), (1, 42.0), (2, 43.0)):
        write_record(f"trials/seed_{seed}/linear/moco/result.json", trial(seed, top1))
    out = tmp_path / "expected.csv"
    done = subprocess.run([sys.executable, str(BENCHMARKS / "expected_ranges.py"), str(tmp_path / "runs" / "trials"),
                           "--measured", "3 trials, test", "--out", str(out)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return out


def test_the_script_writes_mean_std_and_n_of_each_checkable_row(write_record: WriteRecord, tmp_path: Path) -> None:
    rows = list(csv.DictReader(measure(write_record, tmp_path).open()))
    top1 = next(r for r in rows if r["metric"] == "top1")
    assert (top1["backbone"], top1["task"], float(top1["mean"]), float(top1["std"]), top1["n"]) == \
        ("moco", "linear", 42.0, 1.0, "3")
    assert top1["measured"] == "3 trials, test" and len(top1["pretrain_recipe"]) == 64


def test_a_run_outside_the_range_is_flagged_and_one_inside_is_not(write_record: WriteRecord, tmp_path: Path) -> None:
    expected = load_expected(measure(write_record, tmp_path))
    (rows,) = expected.values()
    assert rows["top1"] == Expected(42.0, 1.0, 3, "3 trials, test") and rows["top1"].tolerance == 3.0
    cases = {"inside": trial(7, 44.9), "outside": trial(8, 38.5),
             "other_eval": trial(9, 10.0, eval_config={**LINEAR, "optim": {"epochs": 1, "lr": 30.0}}),
             "other_pretrain": trial(10, 10.0, pretrain={**PRETRAIN, "model": {"queue_size": 16}})}
    for name, record in cases.items():
        write_record(f"{name}/result.json", record)
    notes = {}
    for name in cases:
        report = build_report([str(tmp_path / "runs" / name)], published=[], expected=expected)
        notes[name] = to_markdown(report)
    assert "outside the expected" not in notes["inside"] and "Expected ranges of these presets" in notes["inside"]
    assert "top1 38.5 is outside the expected 42.0 ± 3.0 (3 trials, test): is the install working?" in \
        notes["outside"]
    for other in ("other_eval", "other_pretrain"):  # another recipe: the expected values do not apply
        assert "outside the expected" not in notes[other] and "Expected ranges" not in notes[other]


def test_the_tolerance_has_a_floor() -> None:
    assert Expected(42.0, 0.0, 3, "x").tolerance == FLOOR and Expected(42.0, 0.0, 3, "x").holds(42.0 + FLOOR)


def test_the_shipped_file_loads() -> None:
    table = load_expected(EXPECTED_CSV)
    assert all(rows for rows in table.values())


def test_the_shipped_rows_are_the_presets_as_moco_demo_runs_them() -> None:
    """The recipes in expected.csv are those of the embedded presets today (pretraining and evaluation, as moco demo
    resolves them): a change to a preset must come with a new measurement (benchmarks/expected_ranges.py)."""
    from classification.linear import load_linear_config
    from moco_core.config import load_config, replace, to_dict
    from moco_core.data.shapes import shapes_version
    from moco_core.model.weights.formats import IMAGENET
    from moco_core.pretrain_config import PretrainConfig
    from moco_demo.run import RANDOM_ARCH
    from reports.pretraining import recipe_digest
    from reports.records import eval_recipe
    from transfer.config import with_normalisation
    from transfer.detection.config import load_transfer_config
    from transfer.records import embedded_version, record_config

    rows = list(csv.DictReader(EXPECTED_CSV.open(encoding="utf-8")))
    linear = load_linear_config("lincls_embedded", [])
    shapes = shapes_version(linear.data.path)["version"]  # the linear records name the shapes' version

    def linear_recipe(cfg: Any) -> str | None:
        return eval_recipe(to_dict(cfg), shapes)

    recipes = {
        "moco": (recipe_digest(to_dict(load_config(PretrainConfig, "embedded", []))), linear_recipe(linear)),
        "supervised": (recipe_digest(to_dict(load_config(PretrainConfig, "supervised_embedded", []))),
                       linear_recipe(linear)),
        "random": ("", linear_recipe(replace(linear, arch=RANDOM_ARCH))),
    }
    # the 10%-labels version of the shapes data: the same preset with --labels 10% (README, moco trials)
    tenth = {name: (pretrain, linear_recipe(replace(linear, arch=linear.arch if name != "random" else RANDOM_ARCH,
                                                    data={"labels": "10%"})))
             for name, (pretrain, _) in recipes.items()}
    linear_rows = [r for r in rows if r["task"] == "linear"]
    assert {r["backbone"] for r in linear_rows if (r["pretrain_recipe"], r["eval_recipe"]) == recipes[
        r["backbone"]]} == set(recipes)
    for row in linear_rows:
        assert (row["pretrain_recipe"], row["eval_recipe"]) in (recipes[row["backbone"]], tenth[row["backbone"]]), \
            row["backbone"]
        assert int(row["n"]) >= 3 and row["dataset"] == "embedded"
    from classification.finetune import load_finetune_config

    finetune = load_finetune_config("finetune_embedded", [])  # as docs/finetune.md's moco trials run it
    finetune_recipes = {"moco": eval_recipe(to_dict(finetune), shapes), "supervised": eval_recipe(to_dict(finetune),
                                                                                                  shapes),
                        "random": eval_recipe(to_dict(replace(finetune, arch=RANDOM_ARCH)), shapes)}
    # and fine-tuning on the 10%-labels version (the semi-supervised protocol: --labels 10%)
    finetune_tenth = {name: eval_recipe(to_dict(replace(finetune, arch=finetune.arch if name != "random" else
                                                        RANDOM_ARCH, data={"labels": "10%"})), shapes)
                      for name in recipes}
    finetune_rows = [r for r in rows if r["task"] == "finetune"]
    assert {r["backbone"] for r in finetune_rows} >= {"random", "supervised"}
    for row in finetune_rows:
        assert (row["pretrain_recipe"], row["eval_recipe"]) in (
            (recipes[row["backbone"]][0], finetune_recipes[row["backbone"]]),
            (recipes[row["backbone"]][0], finetune_tenth[row["backbone"]])), row["backbone"]
        assert int(row["n"]) >= 2 and (row["dataset"], row["protocol"]) == ("embedded", "finetune")
    for task in ("voc", "coco"):  # as moco demo runs them where detectron2 is missing (auto: torchvision)
        detection = load_transfer_config(task, f"{task}_embedded", [], {"engine": "torchvision"})
        detection = with_normalisation(detection, IMAGENET.record())  # as a run fills it in for these weights
        digest = eval_recipe(record_config(detection, RANDOM_ARCH), embedded_version(detection)["version"])
        task_rows = [r for r in rows if r["task"] == task]
        assert {r["backbone"] for r in task_rows} == set(recipes), task
        for row in task_rows:
            assert (row["pretrain_recipe"], row["eval_recipe"]) == (recipes[row["backbone"]][0], digest), row
            assert int(row["n"]) >= 3 and (row["engine"], row["schedule"]) == ("torchvision", "embedded")


def test_the_version_of_generated_data_is_part_of_the_evaluation_recipe() -> None:
    """The embedded detection scenes changed (v1: one shape, v2: scenes) under the same configs: a record names
    its version, and expected values measured on one never judge a run on the other."""
    def recipe(version: str | None) -> str | None:
        dataset = {"path": "embedded", "classes": 8, **({"version": version} if version else {})}
        return parse_record(base_record(config=LINEAR, dataset=dataset), "r").eval_recipe

    assert len({recipe(None), recipe("scenes v1"), recipe("scenes v2")}) == 3
    assert recipe("scenes v2") == recipe("scenes v2") and recipe(None) is not None


def test_the_semseg_rows_are_the_embedded_preset() -> None:
    """expected.csv's semantic segmentation rows were measured with semseg_embedded as it is today (its record's
    config and the version of the scenes' masks): a change to the preset must come with a new measurement."""
    from moco_core.model.weights.formats import IMAGENET
    from moco_demo.run import RANDOM_ARCH
    from reports.records import eval_recipe
    from transfer.config import with_normalisation
    from transfer.segmentation.config import load_semseg_config
    from transfer.segmentation.embedded import dataset_version
    from transfer.segmentation.run import record_config

    rows = [r for r in csv.DictReader(EXPECTED_CSV.open(encoding="utf-8")) if r["task"] == "semseg"]
    cfg = with_normalisation(load_semseg_config("semseg_embedded", []), IMAGENET.record())  # as a run fills it in
    digest = eval_recipe(record_config(cfg, RANDOM_ARCH), dataset_version())
    assert rows and {r["eval_recipe"] for r in rows} == {digest}
    assert {(r["metric"], r["engine"], r["schedule"], r["model"]) for r in rows} >= {
        ("mIoU", "torchvision", "embedded", "R18 FCN-style os16")}
    assert all(int(r["n"]) >= 3 for r in rows)
