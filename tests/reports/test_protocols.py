"""Labels that say what ran: the protocol's length against the preset's, unfinished pretrainings, chance level, and
the note on how to add a missing random-init row."""

from __future__ import annotations

from pathlib import Path

import pytest

from classification.linear import LinearOptimConfig, load_linear_config
from reports.protocols import (
    LINEAR_EPOCHS,
    PAPER_LINEAR_EPOCHS,
    SCHEDULE_ITERATIONS,
    V3_LINEAR_EPOCHS,
    V3_PRESETS,
    V3_PROTOCOL,
    eval_length,
)
from reports.published import load_published
from reports.records import load_records
from reports.report import build_report
from reports.summary import group
from transfer.detection.config import load_transfer_config
from transfer.segmentation.config import load_semseg_config

from .conftest import WriteRecord, base_record


def test_preset_lengths_are_the_presets() -> None:
    """reports cannot import the presets; it restates their lengths, and these must be theirs."""
    assert LinearOptimConfig().epochs == PAPER_LINEAR_EPOCHS
    presets = {("voc", "voc_R50_C4_24k"), ("voc", "voc_embedded"), ("coco", "coco_R50_C4_1x"),
               ("coco", "coco_R50_C4_2x"), ("coco", "coco_R50_FPN_1x"), ("coco", "coco_R50_FPN_2x"),
               ("coco", "coco_embedded"), ("keypoints", "keypoints_R50_FPN_2x"), ("keypoints", "keypoints_embedded"),
               ("lvis", "lvis_v0.5_R50_FPN_2x"), ("lvis", "lvis_embedded"), ("cityscapes", "cityscapes_R50_FPN"),
               ("cityscapes", "cityscapes_embedded"), ("densepose", "densepose_R50_FPN_s1x"),
               ("densepose", "densepose_embedded")}
    found = {}
    for task, preset in presets:
        cfg = load_transfer_config(task, preset, [], flags={"data": {"path": "embedded"}})
        found[(task, cfg.schedule)] = cfg.solver.iterations
    for preset in ("semseg_voc", "semseg_cityscapes", "semseg_embedded"):
        semseg = load_semseg_config(preset, [], {"data": {"path": "embedded"}})
        found[("semseg", semseg.schedule)] = semseg.solver.iterations
    assert found == SCHEDULE_ITERATIONS


def test_the_v3_protocol_length_and_presets_are_lincls_own() -> None:
    """The v3 protocol's length (the official moco-v3 main_lincls.py's --epochs default, 90) and the presets the
    hints name are those of classification/linear.py: each exists, runs protocol "linear-mocov3", and the embedded
    ones read the embedded data."""
    from classification.linear import MOCOV3_PRESETS, MOCOV3_PROTOCOL, protocol_name

    assert V3_PRESETS == MOCOV3_PRESETS
    assert V3_LINEAR_EPOCHS == MOCOV3_PROTOCOL.epochs == 90
    assert LINEAR_EPOCHS == {"linear": PAPER_LINEAR_EPOCHS, V3_PROTOCOL: V3_LINEAR_EPOCHS}
    for imagenet, embedded in V3_PRESETS.values():
        full = load_linear_config(imagenet, ["data.path=x"])
        assert full.optim.epochs == V3_LINEAR_EPOCHS and protocol_name(full) == V3_PROTOCOL
        small = load_linear_config(embedded, [])
        assert small.data.path == "embedded" and protocol_name(small) == V3_PROTOCOL


def test_eval_length_reads_what_the_writers_write() -> None:
    assert eval_length("linear", {"optim": {"epochs": 5}}) == 5
    assert eval_length("voc", {"model": "R18-C4", "iterations": 60, "solver": {"iterations": 60}}) == 60
    assert eval_length("coco", {"solver": {"iterations": 90000}}) == 90000
    assert eval_length("knn", {"k": 200}) is None
    for task in ("linear", "voc"):
        assert eval_length(task, {}) is None  # records before the field: still reported
    assert eval_length("linear", {"optim": {"epochs": True}}) is None


def linear(epochs: int | None, **fields: object) -> dict:
    config = {"optim": {"lr": 30.0, "epochs": epochs}} if epochs is not None else {}
    return base_record(config=config, **fields)


def titles(runs: Path) -> list[str]:
    return [t.title for t in build_report([str(runs)], published=[], expected={}).tables]


def test_a_shortened_linear_run_is_not_called_the_papers_protocol(write_record: WriteRecord, runs: Path) -> None:
    write_record("full.result.json", linear(100))
    write_record("short.result.json", linear(5))
    write_record("long.result.json", linear(200))
    write_record("old.result.json", linear(None))
    write_record("cached.result.json", linear(5, protocol="linear-cached"))
    assert titles(runs) == [
        "Linear classification (the paper's protocol, 100 epochs): embedded",  # the preset's length first
        "Linear classification (200 epochs; the paper's: 100): embedded",
        "Linear classification (5 of the paper's 100 epochs): embedded",
        "Linear classification (epochs not recorded): embedded",
        "Linear classification on cached features (NOT the paper's protocol; 5 epochs): embedded",
    ]


def test_runs_of_other_lengths_are_not_trials_of_one_row(write_record: WriteRecord, runs: Path) -> None:
    write_record("a.result.json", linear(100, metrics={"top1": 50.0, "top5": 90.0}))
    write_record("b.result.json", linear(5, metrics={"top1": 30.0, "top5": 80.0}))
    main, _ = group(load_records([str(runs)])[0])
    assert [(e.setting.length, e.n, e.metrics["top1"].mean) for e in main] == [(100, 1, 50.0), (5, 1, 30.0)]


def detection(schedule: str, iterations: int | None, task: str = "voc") -> dict:
    config = {"model": "R18-C4", "schedule": schedule, **({"iterations": iterations} if iterations else {})}
    metrics = {"AP50": 1.0, "AP": 1.0, "AP75": 1.0} if task == "voc" else dict.fromkeys(
        ("bbox_AP", "bbox_AP50", "bbox_AP75", "segm_AP", "segm_AP50", "segm_AP75"), 1.0)
    return base_record(task=task, protocol=task, engine="torchvision", config=config, metrics=metrics,
                       dataset={"path": "embedded", "name": "VOC2007"})


def test_a_detection_run_names_its_iterations_and_the_schedule_only_when_it_ran_it(write_record: WriteRecord,
                                                                                  runs: Path) -> None:
    write_record("a.result.json", detection("embedded", 200))
    write_record("b.result.json", detection("embedded", 60))
    write_record("c.result.json", detection("mine", 500))
    write_record("d.result.json", detection("embedded", None))
    write_record("e.result.json", detection("1x", 90000, task="coco"))
    assert titles(runs) == [
        "VOC detection (R18-C4, embedded schedule, 200 iterations, torchvision): VOC2007",
        "VOC detection (R18-C4, 60 iterations, not the embedded schedule's 200, torchvision): VOC2007",
        "VOC detection (R18-C4, embedded schedule label, iterations not recorded, torchvision): VOC2007",
        "VOC detection (R18-C4, schedule mine, 500 iterations, torchvision): VOC2007",
        "COCO detection and instance segmentation (R18-C4, 1x schedule, 90000 iterations, torchvision): VOC2007",
    ]


def test_published_rows_only_beside_the_papers_length(write_record: WriteRecord, runs: Path) -> None:
    imagenet = {"path": "/data/imagenet", "classes": 1000}
    r50 = {**base_record()["backbone"], "arch": "resnet50"}
    write_record("full.result.json", linear(100, dataset=imagenet, backbone=r50))
    write_record("short.result.json", linear(5, dataset=imagenet, backbone=r50))
    tables = build_report([str(runs)], published=load_published(), expected={}).tables
    published = {t.title: sum(r.kind in ("published", "secondary") for r in t.rows) for t in tables}
    assert published["Linear classification (the paper's protocol, 100 epochs): imagenet"] > 0
    assert published["Linear classification (5 of the paper's 100 epochs): imagenet"] == 0


@pytest.mark.parametrize(("classes", "note"), [
    (8, "Chance level: top-1 12.5%, top-5 62.5% (8 classes)."),
    (1000, "Chance level: top-1 0.1%, top-5 0.5% (1000 classes)."),
    (3, "Chance level: top-1 33.3%, top-5 100% (3 classes)."),  # 5 guesses of 3 classes always hit
    (7, "Chance level: top-1 14.3%, top-5 71.4% (7 classes)."),  # 100/7, 500/7
])
def test_chance_level_of_linear_and_knn(write_record: WriteRecord, runs: Path, classes: int, note: str) -> None:
    write_record("l.result.json", linear(100, dataset={"path": "embedded", "classes": classes}))
    write_record("k.result.json", task="knn", protocol="knn", dataset={"path": "embedded", "classes": classes})
    tables = build_report([str(runs)], published=[], expected={}).tables
    assert [note in t.notes for t in tables] == [True, True]


def test_no_chance_level_without_classes_or_for_detection(write_record: WriteRecord, runs: Path) -> None:
    write_record("l.result.json", linear(100, dataset={"path": "embedded"}))
    write_record("v.result.json", detection("embedded", 200))
    tables = build_report([str(runs)], published=[], expected={}).tables
    assert not any(n.startswith("Chance") for t in tables for n in t.notes)


def test_a_table_without_random_init_says_how_to_add_it(write_record: WriteRecord, runs: Path) -> None:
    write_record("short.result.json", linear(5, dataset={"path": "/data/my set", "classes": 8}))
    write_record("knn.result.json", task="knn", protocol="knn")
    write_record("v.result.json", detection("embedded", 60))
    write_record("rand.result.json", task="knn", protocol="knn", backbone={
        "source": "random", "format": "random", "arch": "resnet18", "sha256": None,
        "pretrain": {"method": "random init"}})
    hints = {t.title: [n for n in t.notes if n.startswith("No random-init row")]
             for t in build_report([str(runs)], published=[], expected={}).tables}
    assert hints["kNN classification (weighted kNN): embedded"] == []  # it has one
    (linear_hint,) = hints["Linear classification (5 of the paper's 100 epochs): my set"]
    assert linear_hint.endswith(": moco eval linear random --arch resnet18 --data '/data/my set' "
                                f"--set optim.epochs=5 --output-dir {runs}/random_resnet18")
    (voc_hint,) = hints["VOC detection (R18-C4, 60 iterations, not the embedded schedule's 200, torchvision): "
                        "VOC2007"]
    # the preset its schedule label names (embedded: voc_embedded), shortened as its records were
    assert voc_hint.endswith(": moco eval voc random --arch resnet18 -c voc_embedded --data embedded "
                             f"--set solver.iterations=60 --output-dir {runs}/random_resnet18")


def test_the_curves_name_the_linear_evaluations_by_their_length(write_record: WriteRecord, runs: Path,
                                                                 tmp_path: Path) -> None:
    run = tmp_path / "pretrain"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 5, "epoch": 0, "loss": 6.0, "accuracy": 10.0}\n')
    backbone = {**base_record()["backbone"], "source": str(run / "checkpoint_last.pth.tar")}
    write_record("short.result.json", linear(5, backbone=backbone, metrics={"top1": 20.0, "top5": 70.0}))
    (curve,) = build_report([str(runs)], published=[], expected={}).curves
    assert (curve.linear, curve.linear_label) == (((15, 20.0),), "linear, 5 ep (the paper's: 100)")
    write_record("full.result.json", linear(100, backbone=backbone, metrics={"top1": 30.0, "top5": 80.0}))
    (curve,) = build_report([str(runs)], published=[], expected={}).curves
    assert (curve.linear, curve.linear_label) == (((15, 30.0),), "linear protocol (100 ep)")  # the paper's first


def test_keypoint_rows_and_the_papers_beside_a_matching_run(write_record: WriteRecord, runs: Path) -> None:
    """AP^kp columns; the paper's Table 6 rows beside a detectron2 R50-FPN 2x run on COCO, not beside others."""
    metrics = {"keypoints_AP": 60.0, "keypoints_AP50": 80.0, "keypoints_AP75": 65.0, "bbox_AP": 50.0}
    r50 = {**base_record()["backbone"], "arch": "resnet50"}
    coco = {"path": "/datasets", "name": "COCO train2017"}
    for name, engine, schedule in (("full", "detectron2", "2x"), ("tv", "torchvision", "2x"),
                                   ("short", "detectron2", "1x")):
        iterations = 180000 if schedule == "2x" else 90000
        write_record(f"{name}.result.json", base_record(
            task="keypoints", protocol="keypoints", engine=engine, backbone=r50, metrics=metrics, dataset=coco,
            config={"model": "R50-FPN", "schedule": schedule, "iterations": iterations}))
    tables = build_report([str(runs)], published=load_published(), expected={}).tables
    by_title = {t.title: t for t in tables}
    full = by_title["COCO keypoint detection (R50-FPN, 2x schedule, 180000 iterations, detectron2): COCO train2017"]
    assert [c.name for c in full.columns if c.numeric][:4] == ["n", "APkp", "APkp50", "APkp75"]
    published = [r for r in full.rows if r.kind in ("published", "secondary")]
    assert len(published) == 3  # supervised IN-1M 65.8, MoCo IN-1M 66.8 (+1.0), MoCo IG-1B 66.9
    others = [t for title, t in by_title.items() if t is not full]
    assert len(others) == 2 and not any(r.kind in ("published", "secondary") for t in others for r in t.rows)
    (moco,) = [r for r in load_published() if r.task == "coco_keypoints" and r.pretrain == "MoCo v1 200ep"]
    assert moco.values == {"keypoints_AP": 66.8} and moco.deltas["keypoints_AP"] == pytest.approx(1.0)
