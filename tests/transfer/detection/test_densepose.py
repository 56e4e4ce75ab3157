"""``moco eval densepose``: the preset against DensePose's densepose_rcnn_R_50_FPN_s1x.yaml, DensePose's dataset
names and files, the one-line error where DensePose cannot run (no detectron2 needed); then, where detectron2's
DensePose project is installed, a short CPU run on DensePose-COCO's layout through
``transfer.detection.run.evaluate``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cli import app
from moco_core.config import ConfigError
from moco_core.model.weights.formats import IMAGENET
from tests.layouts import densepose_eval_files, densepose_layout, torchvision_weights
from transfer.config import with_normalisation
from transfer.detection.config import DENSEPOSE_NEEDED, load_transfer_config
from transfer.detection.datasets import parse_dataset
from transfer.detection.detectron2_config import detectron2_options

# DensePose's configs/densepose_rcnn_R_50_FPN_s1x.yaml on Base-DensePose-RCNN-FPN.yaml (detectron2's
# projects/DensePose), key by key; the ROI_DENSEPOSE_HEAD sizes are densepose/config.py's defaults.
DENSEPOSE_S1X = {
    "MODEL.META_ARCHITECTURE": "GeneralizedRCNN", "MODEL.BACKBONE.NAME": "build_resnet_fpn_backbone",
    "MODEL.RESNETS.DEPTH": 50, "MODEL.RESNETS.OUT_FEATURES": ["res2", "res3", "res4", "res5"],
    "MODEL.FPN.IN_FEATURES": ["res2", "res3", "res4", "res5"],
    "MODEL.ANCHOR_GENERATOR.SIZES": [[32], [64], [128], [256], [512]],
    "MODEL.ANCHOR_GENERATOR.ASPECT_RATIOS": [[0.5, 1.0, 2.0]], "MODEL.RPN.IN_FEATURES": ["p2", "p3", "p4", "p5", "p6"],
    "MODEL.RPN.PRE_NMS_TOPK_TRAIN": 2000, "MODEL.RPN.PRE_NMS_TOPK_TEST": 1000, "MODEL.RPN.POST_NMS_TOPK_TRAIN": 1000,
    "MODEL.RPN.POST_NMS_TOPK_TEST": 1000, "MODEL.DENSEPOSE_ON": True, "MODEL.ROI_HEADS.NAME": "DensePoseROIHeads",
    "MODEL.ROI_HEADS.IN_FEATURES": ["p2", "p3", "p4", "p5"], "MODEL.ROI_HEADS.NUM_CLASSES": 1,
    "MODEL.ROI_BOX_HEAD.NAME": "FastRCNNConvFCHead", "MODEL.ROI_BOX_HEAD.NUM_FC": 2,
    "MODEL.ROI_BOX_HEAD.POOLER_RESOLUTION": 7, "MODEL.ROI_BOX_HEAD.POOLER_SAMPLING_RATIO": 2,
    "MODEL.ROI_BOX_HEAD.POOLER_TYPE": "ROIAlign", "MODEL.ROI_DENSEPOSE_HEAD.NAME": "DensePoseV1ConvXHead",
    "MODEL.ROI_DENSEPOSE_HEAD.POOLER_TYPE": "ROIAlign", "MODEL.ROI_DENSEPOSE_HEAD.NUM_COARSE_SEGM_CHANNELS": 2,
    "MODEL.ROI_DENSEPOSE_HEAD.NUM_STACKED_CONVS": 8, "MODEL.ROI_DENSEPOSE_HEAD.CONV_HEAD_DIM": 512,
    "MODEL.ROI_DENSEPOSE_HEAD.POOLER_RESOLUTION": 28, "MODEL.ROI_DENSEPOSE_HEAD.HEATMAP_SIZE": 112,
    "MODEL.ROI_DENSEPOSE_HEAD.DECODER_ON": True, "MODEL.ROI_DENSEPOSE_HEAD.DECODER_NUM_CLASSES": 256,
    "MODEL.ROI_DENSEPOSE_HEAD.DECODER_CONV_DIMS": 256,
    "DATASETS.TRAIN": ("moco_densepose_coco_2014_train", "moco_densepose_coco_2014_valminusminival"),
    "DATASETS.TEST": ("moco_densepose_coco_2014_minival",), "SOLVER.IMS_PER_BATCH": 16, "SOLVER.BASE_LR": 0.01,
    "SOLVER.MAX_ITER": 130000, "SOLVER.STEPS": (100000, 120000), "SOLVER.WARMUP_FACTOR": 0.1,
    "SOLVER.WARMUP_ITERS": 1000, "INPUT.MIN_SIZE_TRAIN": (640, 672, 704, 736, 768, 800), "INPUT.MIN_SIZE_TEST": 800,
    "INPUT.MAX_SIZE_TRAIN": 1333, "INPUT.MAX_SIZE_TEST": 1333, "MODEL.MASK_ON": False,
}
# What the protocol adds, as for the other detectron2 presets: every stage and BN fine-tuned, BN synchronised.
PROTOCOL = {"MODEL.BACKBONE.FREEZE_AT": 0, "MODEL.RESNETS.NORM": "SyncBN", "MODEL.FPN.NORM": "SyncBN",
            "MODEL.ROI_DENSEPOSE_HEAD.DECODER_NORM": "SyncBN",
            "MODEL.RESNETS.STRIDE_IN_1X1": False, "INPUT.FORMAT": "RGB", "TEST.PRECISE_BN.ENABLED": True}


def paper() -> Any:
    """The paper's preset, normalised for ImageNet-trained weights (MoCo's) as a run fills it in."""
    return with_normalisation(load_transfer_config("densepose", None, [], {"data": {"path": "/datasets"},
                                                                           "run": {"output_dir": "runs/x"}}),
                              IMAGENET.record())


def test_the_preset_is_densepose_s1x_with_bn_fine_tuned() -> None:
    cfg = paper()
    assert (cfg.task, cfg.schedule, cfg.detector.head, cfg.detector.mask) == ("densepose", "s1x", "FPN", False)
    options = detectron2_options(cfg, num_classes=1)
    for key, value in {**DENSEPOSE_S1X, **PROTOCOL}.items():
        assert options[key] == (pytest.approx(value) if isinstance(value, float) else value), key


def test_densepose_dataset_names_are_its_files() -> None:
    train = parse_dataset("densepose_coco_2014_train", "densepose")
    assert (train.annotations, train.folder) == (Path("coco/annotations/densepose_train2014.json"),
                                                 Path("coco/train2014"))
    for split in ("minival", "valminusminival"):  # val2014 images
        spec = parse_dataset(f"densepose_coco_2014_{split}", "densepose")
        assert (spec.annotations, spec.folder) == (Path(f"coco/annotations/densepose_{split}2014.json"),
                                                   Path("coco/val2014"))
    small = parse_dataset("densepose_coco_2014_minival_100", "densepose")
    assert small.annotations == Path("coco/annotations/densepose_minival2014_100.json")
    custom = parse_dataset("mine.json:images", "densepose")
    assert (custom.annotations, custom.folder) == (Path("mine.json"), Path("images"))
    with pytest.raises(ConfigError, match="is a coco dataset, not a densepose one"):
        parse_dataset("coco_2017_train", "densepose")
    with pytest.raises(ConfigError, match="densepose_coco_<year>_<split>"):
        parse_dataset("people", "densepose")


def test_torchvision_engine_stops_with_one_line() -> None:
    with pytest.raises(ConfigError) as err:
        load_transfer_config("densepose", None, [], {"engine": "torchvision", "data": {"path": "/d"}})
    message = str(err.value)
    assert "\n" not in message and "projects/DensePose" in message and "pip install" in message
    result = CliRunner().invoke(app, ["eval", "densepose", "random", "--arch", "resnet18", "--engine", "torchvision",
                                      "--data", "/d"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and DENSEPOSE_NEEDED in lines[0], result.output


def test_auto_engine_without_densepose_stops_with_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import importlib.util

    from transfer.detection import run

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "densepose" else real(name, *a))
    cfg = load_transfer_config("densepose", None, [], {"data": {"path": str(tmp_path)},
                                                         "run": {"output_dir": str(tmp_path / "run")}})
    with pytest.raises(ConfigError, match="projects/DensePose"):
        run.evaluate(cfg, "random")
    assert not (tmp_path / "run").exists()  # stopped before anything was written


def test_densepose_results_follow_our_conventions() -> None:
    pytest.importorskip("densepose")
    from transfer.detection.detectron2_densepose import flatten

    found = flatten({"densepose_gps": {"AP": 12.5, "APl": -100.0}, "densepose_gpsm": {"AP": -1},
                     "densepose_segm": {"AP75": 3.0}})
    assert found["dp_gps_AP"] == 12.5 and found["dp_gpsm_AP"] == 0.0 and found["dp_segm_AP75"] == 3.0
    assert found["dp_gps_APl"] != found["dp_gps_APl"]  # NaN: null in the record


def test_the_layout_is_densepose_cocos(tmp_path: Path) -> None:
    root = densepose_layout(tmp_path, train=2, test=1)
    doc = json.loads((root / "coco/annotations/densepose_train2014.json").read_text())
    ann = doc["annotations"][0]
    assert {"dp_x", "dp_y", "dp_I", "dp_U", "dp_V", "dp_masks", "bbox"} <= ann.keys() and "keypoints" not in ann
    assert len(ann["dp_masks"]) == 14 and isinstance(ann["dp_masks"][0]["counts"], str)
    assert (root / "coco/train2014" / doc["images"][0]["file_name"]).is_file()
    assert doc["images"][0]["file_name"].startswith("COCO_train2014_0000")
    assert (root / "coco/annotations/densepose_minival2014.json").is_file() and any((root / "coco/val2014").iterdir())


# --- with detectron2's DensePose installed --------------------------------------------------------------------


@pytest.fixture
def one_thread() -> Any:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.usefixtures("one_thread")
def test_short_densepose_run_scores_ap_dp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("detectron2")
    pytest.importorskip("densepose")
    from transfer.detection.run import evaluate

    # DensePose fetches its UV transforms and SMPL files into iopath's cache: stand-ins there, no internet
    monkeypatch.setenv("FVCORE_CACHE", str(densepose_eval_files(tmp_path / "cache")))
    root = densepose_layout(tmp_path / "datasets", train=4, test=2)
    weights = torchvision_weights(tmp_path / "r18.pth", "resnet18")
    cfg = load_transfer_config(
        "densepose", None,
        ["detector.arch=resnet18", "solver.batch_size=2", "solver.iterations=3", "solver.steps=[2]",
         "solver.warmup_iters=1", "solver.precise_bn_iters=1", "detector.pooler_resolution=4",
         "detector.roi_batch_size_per_image=16", "detector.rpn_post_nms_topk_train=64",
         "detector.rpn_post_nms_topk_test=16", "detector.detections_per_image=10",
         "detector.anchor_sizes=[8,16,32,64,128]", "detector.fpn_channels=32", "detector.densepose_pooler_resolution=4",
         "detector.densepose_num_convs=1", "detector.densepose_conv_dim=8", "detector.densepose_heatmap_size=16",
         "detector.score_thresh=0.0", "input.min_size_train=[64]", "input.min_size_test=64", "input.max_size=96",
         "data.workers=0", "run.log_every=1", "data.train=[densepose_coco_2014_train]"],
        {"engine": "detectron2", "data": {"path": str(root)}, "run": {"output_dir": str(tmp_path / "run"),
                                                                      "device": "cpu", "weights_format": "supervised"}})
    record = json.loads(evaluate(cfg, str(weights), show_progress=False).read_text())
    assert record["engine"] == "detectron2" and record["task"] == "densepose"
    metrics = record["metrics"]
    assert {"dp_gps_AP", "dp_gps_AP50", "dp_gps_AP75", "dp_gpsm_AP", "dp_segm_AP", "bbox_AP"} <= set(metrics)
    assert all(metrics[k] >= 0 for k in ("dp_gps_AP", "dp_gpsm_AP", "dp_segm_AP"))  # scored, not DensePose's -1
    assert metrics["dp_gps_APl"] is None  # no large person: COCOeval's -1 (x 100) is null, as for box AP
    assert "loss_densepose_I" in record["history"][-1] and len(record["history"]) == 3
    assert "DENSEPOSE_ON: true" in (tmp_path / "run" / "detectron2_config.yaml").read_text()


@pytest.mark.usefixtures("one_thread")
def test_embedded_smoke_run_needs_no_internet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``moco eval densepose random --arch resnet18 -c densepose_embedded`` under MOCO_SMOKE: the scenes and the
    stand-ins of DensePose's fetched files are generated, and GPS is scored from them (iopath's cache untouched)."""
    pytest.importorskip("detectron2")
    pytest.importorskip("densepose")
    from moco_core import smoke
    from transfer.detection.run import evaluate

    monkeypatch.setenv("MOCO_DATA_HOME", str(tmp_path / "data_home"))
    monkeypatch.setenv(smoke.ENV, "1")
    monkeypatch.setenv("FVCORE_CACHE", str(tmp_path / "empty_cache"))  # nothing there: DensePose would download
    cfg = load_transfer_config("densepose", "densepose_embedded", [],
                               {"engine": "detectron2", "run": {"output_dir": str(tmp_path / "run"), "device": "cpu"}})
    assert (cfg.solver.iterations, cfg.input.max_size) == (2, 64)  # shrunk by MOCO_SMOKE
    record = json.loads(evaluate(cfg, "random", show_progress=False).read_text())
    assert record["task"] == "densepose" and record["dataset"]["name"] == "embedded" and record["smoke"]
    assert record["dataset"]["train_images"] == 16 and record["dataset"]["test_images"] == 8
    assert {"dp_gps_AP", "dp_gpsm_AP", "bbox_AP"} <= set(record["metrics"])
    assert not (tmp_path / "empty_cache").exists()
    assert os.environ["FVCORE_CACHE"] == str(tmp_path / "empty_cache")  # restored


def test_embedded_scenes_are_densepose_cocos(tmp_path: Path) -> None:
    pytest.importorskip("scipy")  # the stand-ins are .mat files (DensePose's own dependency)
    from transfer.detection.embedded_densepose import ensure_densepose

    root = ensure_densepose(tmp_path, train=3, val=2, size=64)
    doc = json.loads((root / "coco/annotations/densepose_minival2014.json").read_text())
    assert len(doc["images"]) == 2 and all(1 <= len([a for a in doc["annotations"] if a["image_id"] == i["id"]]) <= 2
                                           for i in doc["images"])
    ann = doc["annotations"][0]
    assert set(ann["dp_I"]) <= {2.0, 4.0} and 0 <= min(ann["dp_U"]) and max(ann["dp_V"]) <= 1
    assert ensure_densepose(tmp_path, train=3, val=2, size=64) == root  # made once


def test_missing_densepose_files_stop_before_anything_trains(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """DensePose fetches its UV transforms and SMPL files on first use; nothing here downloads at run time, so a run
    whose cache lacks them stops in one line naming them and the folder, before training."""
    pytest.importorskip("detectron2")
    pytest.importorskip("densepose")
    from moco_core.data.data import DatasetError
    from transfer.detection.run import evaluate

    monkeypatch.setenv("FVCORE_CACHE", str(tmp_path / "empty_cache"))
    root = densepose_layout(tmp_path / "datasets", train=4, test=2)
    cfg = load_transfer_config("densepose", None, ["detector.arch=resnet18", "data.workers=0", "solver.batch_size=2",
                                                   "data.train=[densepose_coco_2014_train]"],
                               {"engine": "detectron2", "data": {"path": str(root)},
                                "run": {"output_dir": str(tmp_path / "run"), "device": "cpu"}})
    with pytest.raises(DatasetError, match=r"SMPL_subdiv\.mat.*empty_cache.*downloads nothing") as err:
        evaluate(cfg, "random", show_progress=False)
    assert "\n" not in str(err.value) and not (tmp_path / "run" / "model_final.pth").exists()
