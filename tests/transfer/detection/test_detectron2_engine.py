"""The detectron2 engine: the config translation against the official MoCo detection configs (no detectron2
needed), then, where detectron2 is installed, the C4 heads, weight loading and short runs through it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torchvision

from moco_core.checkpoint import CheckpointError
from moco_core.config import replace
from moco_core.data.data import DatasetError
from moco_core.data.shapes import CLASSES
from moco_core.model.weights.formats import IMAGENET
from transfer.config import with_normalisation
from transfer.detection.config import TransferConfig, load_transfer_config
from transfer.detection.detectron2_config import FIELDS, detectron2_options

VOC_SIZES = (480, 512, 544, 576, 608, 640, 672, 704, 736, 768, 800)
# What every *_moco.yaml of facebookresearch/moco detection/configs sets (with Base-RCNN-C4-BN.yaml's BN).
MOCO = {"MODEL.PIXEL_MEAN": [123.675, 116.280, 103.530], "MODEL.PIXEL_STD": [58.395, 57.120, 57.375],
        "MODEL.RESNETS.STRIDE_IN_1X1": False, "INPUT.FORMAT": "RGB", "MODEL.BACKBONE.FREEZE_AT": 0,
        "TEST.PRECISE_BN.ENABLED": True, "TEST.PRECISE_BN.NUM_ITER": 200, "SOLVER.IMS_PER_BATCH": 16,
        "SOLVER.BASE_LR": 0.02, "MODEL.META_ARCHITECTURE": "GeneralizedRCNN", "MODEL.RESNETS.DEPTH": 50,
        "SOLVER.MOMENTUM": 0.9, "SOLVER.WEIGHT_DECAY": 1e-4, "SOLVER.WEIGHT_DECAY_NORM": 0.0, "SOLVER.GAMMA": 0.1,
        "SOLVER.WARMUP_FACTOR": 0.001, "SOLVER.WARMUP_METHOD": "linear", "INPUT.MAX_SIZE_TRAIN": 1333,
        "INPUT.MAX_SIZE_TEST": 1333, "INPUT.MIN_SIZE_TEST": 800, "TEST.DETECTIONS_PER_IMAGE": 100,
        "MODEL.ANCHOR_GENERATOR.ASPECT_RATIOS": [[0.5, 1.0, 2.0]], "MODEL.RPN.BATCH_SIZE_PER_IMAGE": 256,
        "MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE": 512, "MODEL.ROI_HEADS.SCORE_THRESH_TEST": 0.05,
        "MODEL.ROI_HEADS.NMS_THRESH_TEST": 0.5, "INPUT.RANDOM_FLIP": "horizontal"}
# Base-RCNN-C4-BN.yaml on detectron2's C4 defaults; the official head is Res5ROIHeadsExtraNorm, ours has our name.
C4 = {"MODEL.RESNETS.NORM": "naiveSyncBN", "MODEL.ROI_HEADS.NAME": "MocoRes5ROIHeadsExtraNorm",
      "MODEL.BACKBONE.NAME": "build_resnet_backbone", "MODEL.RESNETS.OUT_FEATURES": ["res4"],
      "MODEL.RPN.IN_FEATURES": ["res4"], "MODEL.ROI_HEADS.IN_FEATURES": ["res4"],
      "MODEL.RPN.PRE_NMS_TOPK_TRAIN": 12000, "MODEL.RPN.POST_NMS_TOPK_TRAIN": 2000,
      "MODEL.RPN.PRE_NMS_TOPK_TEST": 6000, "MODEL.RPN.POST_NMS_TOPK_TEST": 1000,
      "MODEL.ANCHOR_GENERATOR.SIZES": [[32, 64, 128, 256, 512]], "MODEL.ROI_BOX_HEAD.POOLER_RESOLUTION": 14,
      "MODEL.FPN.NORM": "", "MODEL.ROI_MASK_HEAD.NORM": ""}
# pascal_voc_R_50_C4_24k_moco.yaml
VOC = {**MOCO, **C4, "MODEL.MASK_ON": False, "MODEL.ROI_HEADS.NUM_CLASSES": 20, "INPUT.MIN_SIZE_TRAIN": VOC_SIZES,
       "SOLVER.STEPS": (18000, 22000), "SOLVER.MAX_ITER": 24000, "SOLVER.WARMUP_ITERS": 100,
       "DATASETS.TRAIN": ("moco_voc_2007_trainval", "moco_voc_2012_trainval"), "DATASETS.TEST": ("moco_voc_2007_test",)}
COCO = {**MOCO, "MODEL.MASK_ON": True, "MODEL.ROI_HEADS.NUM_CLASSES": 80, "SOLVER.WARMUP_ITERS": 1000,
        "INPUT.MIN_SIZE_TRAIN": (640, 672, 704, 736, 768, 800), "DATASETS.TRAIN": ("moco_coco_2017_train",),
        "DATASETS.TEST": ("moco_coco_2017_val",)}
# coco_R_50_C4_2x_moco.yaml
COCO_C4_2X = {**COCO, **C4, "SOLVER.STEPS": (120000, 160000), "SOLVER.MAX_ITER": 180000}
# detectron2's Base-RCNN-FPN.yaml, 1x, with SyncBN in the backbone, FPN and mask head (its Misc/*_syncbn.yaml)
COCO_FPN_1X = {**COCO, "MODEL.BACKBONE.NAME": "build_resnet_fpn_backbone",
               "MODEL.RESNETS.OUT_FEATURES": ["res2", "res3", "res4", "res5"],
               "MODEL.FPN.IN_FEATURES": ["res2", "res3", "res4", "res5"],
               "MODEL.ANCHOR_GENERATOR.SIZES": [[32], [64], [128], [256], [512]],
               "MODEL.RPN.IN_FEATURES": ["p2", "p3", "p4", "p5", "p6"], "MODEL.RPN.PRE_NMS_TOPK_TRAIN": 2000,
               "MODEL.RPN.PRE_NMS_TOPK_TEST": 1000, "MODEL.RPN.POST_NMS_TOPK_TRAIN": 1000,
               "MODEL.RPN.POST_NMS_TOPK_TEST": 1000, "MODEL.ROI_HEADS.NAME": "StandardROIHeads",
               "MODEL.ROI_HEADS.IN_FEATURES": ["p2", "p3", "p4", "p5"], "MODEL.ROI_BOX_HEAD.NAME": "FastRCNNConvFCHead",
               "MODEL.ROI_BOX_HEAD.NUM_FC": 2, "MODEL.ROI_BOX_HEAD.POOLER_RESOLUTION": 7,
               "MODEL.ROI_MASK_HEAD.NUM_CONV": 4, "MODEL.ROI_MASK_HEAD.POOLER_RESOLUTION": 14,
               "MODEL.RESNETS.NORM": "SyncBN", "MODEL.FPN.NORM": "SyncBN", "MODEL.ROI_MASK_HEAD.NORM": "SyncBN",
               "MODEL.FPN.OUT_CHANNELS": 256,
               "SOLVER.STEPS": (60000, 80000), "SOLVER.MAX_ITER": 90000}
# detectron2's COCO-Keypoints/keypoint_rcnn_R_50_FPN_3x.yaml (Common/Base-Keypoint-RCNN-FPN.yaml, ROI_KEYPOINT_HEAD
# defaults) with the 2x schedule, BN as the FPN runs above
KEYPOINTS_2X = {**COCO_FPN_1X, "MODEL.MASK_ON": False, "MODEL.KEYPOINT_ON": True, "MODEL.ROI_HEADS.NUM_CLASSES": 1,
                "MODEL.ROI_BOX_HEAD.SMOOTH_L1_BETA": 0.5, "MODEL.RPN.POST_NMS_TOPK_TRAIN": 1500,
                "MODEL.ROI_KEYPOINT_HEAD.NUM_KEYPOINTS": 17, "MODEL.ROI_KEYPOINT_HEAD.POOLER_RESOLUTION": 14,
                "MODEL.ROI_KEYPOINT_HEAD.CONV_DIMS": (512,) * 8, "MODEL.ROI_KEYPOINT_HEAD.POOLER_TYPE": "ROIAlignV2",
                "MODEL.ROI_KEYPOINT_HEAD.MIN_KEYPOINTS_PER_IMAGE": 1,
                "MODEL.ROI_KEYPOINT_HEAD.NAME": "KRCNNConvDeconvUpsampleHead",
                "MODEL.ROI_KEYPOINT_HEAD.NORMALIZE_LOSS_BY_VISIBLE_KEYPOINTS": True,
                "INPUT.MIN_SIZE_TRAIN": (640, 672, 704, 736, 768, 800), "SOLVER.STEPS": (120000, 160000),
                "SOLVER.MAX_ITER": 180000, "DATASETS.TRAIN": ("moco_keypoints_coco_2017_train",),
                "DATASETS.TEST": ("moco_keypoints_coco_2017_val",)}

# LVISv0.5-InstanceSegmentation/mask_rcnn_R_50_FPN_1x.yaml (on Base-RCNN-FPN) with the 2x steps, SyncBN as above
LVIS_2X = {**COCO_FPN_1X, "MODEL.ROI_HEADS.NUM_CLASSES": 1230, "MODEL.ROI_HEADS.SCORE_THRESH_TEST": 0.0001,
           "TEST.DETECTIONS_PER_IMAGE": 300, "DATALOADER.SAMPLER_TRAIN": "RepeatFactorTrainingSampler",
           "DATALOADER.REPEAT_THRESHOLD": 0.001, "SOLVER.STEPS": (120000, 160000), "SOLVER.MAX_ITER": 180000,
           "DATASETS.TRAIN": ("moco_lvis_v0.5_train",), "DATASETS.TEST": ("moco_lvis_v0.5_val",)}
# Cityscapes/mask_rcnn_R_50_FPN.yaml (on Base-RCNN-FPN), SyncBN as above; its MODEL.WEIGHTS (COCO-trained) never
CITYSCAPES = {**COCO_FPN_1X, "MODEL.ROI_HEADS.NUM_CLASSES": 8,
              "INPUT.MIN_SIZE_TRAIN": (800, 832, 864, 896, 928, 960, 992, 1024), "INPUT.MIN_SIZE_TEST": 1024,
              "INPUT.MAX_SIZE_TRAIN": 2048, "INPUT.MAX_SIZE_TEST": 2048, "SOLVER.BASE_LR": 0.01,
              "SOLVER.IMS_PER_BATCH": 8, "SOLVER.STEPS": (18000,), "SOLVER.MAX_ITER": 24000,
              "DATALOADER.SAMPLER_TRAIN": "TrainingSampler",
              "DATASETS.TRAIN": ("moco_cityscapes_fine_instance_seg_train",),
              "DATASETS.TEST": ("moco_cityscapes_fine_instance_seg_val",)}


def paper(task: str, preset: str | None = None) -> TransferConfig:
    # an output directory of its own: without one it is runs/<task>, which would tie OUTPUT_DIR to the task field;
    # the input normalisation of ImageNet-trained weights (MoCo's), as a run fills it in from the weights
    cfg = load_transfer_config(task, preset, [], {"data": {"path": "/datasets"}, "run": {"output_dir": "runs/x"}})
    return with_normalisation(cfg, IMAGENET.record())


@pytest.mark.parametrize(("task", "preset", "classes", "official"), [
    ("voc", None, 20, VOC), ("coco", "coco_R50_C4_2x", 80, COCO_C4_2X), ("coco", "coco_R50_FPN_1x", 80, COCO_FPN_1X),
    ("keypoints", None, 1, KEYPOINTS_2X), ("lvis", None, 1230, LVIS_2X), ("cityscapes", None, 8, CITYSCAPES)])
def test_paper_presets_are_the_official_configs(task: str, preset: str | None, classes: int, official: dict) -> None:
    options = detectron2_options(paper(task, preset), num_classes=classes, num_keypoints=17)
    for key, value in official.items():
        approximate = isinstance(value, float) or key.startswith("MODEL.PIXEL_")  # x 255 in floating point
        assert options[key] == (pytest.approx(value) if approximate else value), key


def test_embedded_presets_run_r18_at_the_scaled_lr() -> None:
    cfg = with_normalisation(load_transfer_config("voc", "voc_embedded", []), IMAGENET.record())
    options = detectron2_options(cfg, num_classes=8)
    assert (options["MODEL.RESNETS.DEPTH"], options["MODEL.RESNETS.RES2_OUT_CHANNELS"]) == (18, 64)
    assert options["SOLVER.BASE_LR"] == pytest.approx(0.02 * cfg.solver.batch_size / 16)
    assert options["INPUT.MIN_SIZE_TRAIN"] == tuple(cfg.input.min_size_train)
    assert options["MODEL.ROI_HEADS.NAME"] == "MocoRes5ROIHeadsExtraNorm"
    wide = detectron2_options(cfg, num_classes=8, arch="wide_resnet50_2")  # the weights' arch wins
    assert (wide["MODEL.RESNETS.DEPTH"], wide["MODEL.RESNETS.WIDTH_PER_GROUP"]) == (50, 128)


def test_keypoint_sigmas_are_plain_floats() -> None:
    """The keypoint set's OKS sigmas are numpy's (transfer.detection.keypoints.oks_sigmas); detectron2's
    CfgNode.dump() is yaml.safe_dump, which refuses np.float64, so ``eval keypoints --engine detectron2`` failed
    writing detectron2_config.yaml before training."""
    import yaml

    from transfer.detection.keypoints import KeypointSet, oks_sigmas

    sigmas = tuple(oks_sigmas(KeypointSet(("top", "left_a", "right_a"))))
    options = detectron2_options(paper("keypoints"), num_classes=1, num_keypoints=3, oks_sigmas=sigmas)
    assert [type(s) for s in options["TEST.KEYPOINT_OKS_SIGMAS"]] == [float] * 3
    assert options["TEST.KEYPOINT_OKS_SIGMAS"] == pytest.approx([float(s) for s in sigmas])
    yaml.safe_dump(options["TEST.KEYPOINT_OKS_SIGMAS"])


def _leaves(cls: type, prefix: str = "") -> list[str]:
    names = []
    for f in dataclasses.fields(cls):
        kind = f.default_factory if f.default_factory is not dataclasses.MISSING else None  # type: ignore[misc]
        names += _leaves(kind, f"{prefix}{f.name}.") if dataclasses.is_dataclass(kind) else [prefix + f.name]
    return names


def test_every_field_is_mapped_or_explained() -> None:
    assert set(_leaves(TransferConfig)) == set(FIELDS)


# A different value for each field, and the preset to change it in (norm_new_layers only matters for FPN).
CHANGES: dict[str, tuple[Any, str | None]] = {
    "task": ("coco", None), "schedule": ("9x", None), "engine": ("torchvision", None),
    "detector.arch": ("resnet18", None), "detector.head": ("FPN", None), "detector.mask": (True, None),
    "detector.extra_norm": (False, None), "detector.norm_new_layers": (False, "coco_R50_FPN_1x"),
    "detector.anchor_sizes": ((16, 32, 64, 128, 256), None), "detector.aspect_ratios": ((1.0,), None),
    "detector.pooler_resolution": (8, None), "detector.rpn_pre_nms_topk_train": (100, None),
    "detector.rpn_post_nms_topk_train": (100, None), "detector.rpn_pre_nms_topk_test": (100, None),
    "detector.rpn_post_nms_topk_test": (100, None), "detector.rpn_batch_size_per_image": (128, None),
    "detector.roi_batch_size_per_image": (64, None), "detector.detections_per_image": (50, None),
    "detector.score_thresh": (0.1, None), "detector.nms_thresh": (0.6, None),
    "detector.keypoint_pooler_resolution": (7, "keypoints_R50_FPN_2x"), "detector.fpn_channels": (64, None),
    "detector.keypoint_conv_dims": ((64, 64), "keypoints_R50_FPN_2x"),
    "detector.min_keypoints_per_image": (3, "keypoints_R50_FPN_2x"),
    "detector.keypoint_oks_sigmas": ((0.1,) * 17, "keypoints_R50_FPN_2x"),
    "detector.densepose_pooler_resolution": (14, "densepose_R50_FPN_s1x"),
    "detector.densepose_num_convs": (4, "densepose_R50_FPN_s1x"),
    "detector.densepose_conv_dim": (128, "densepose_R50_FPN_s1x"),
    "detector.densepose_heatmap_size": (56, "densepose_R50_FPN_s1x"),
    "input.min_size_train": ((96,), None), "input.min_size_test": (128, None), "input.max_size": (1000, None),
    "input.flip_prob": (0.0, None), "input.mean": ((0.5, 0.5, 0.5), None), "input.std": ((0.5, 0.5, 0.5), None),
    "solver.batch_size": (8, None), "solver.lr": (0.01, None), "solver.momentum": (0.8, None),
    "solver.weight_decay": (5e-4, None), "solver.weight_decay_norm": (1e-4, None), "solver.iterations": (1000, None),
    "solver.steps": ((500,), None), "solver.gamma": (0.5, None), "solver.warmup_iters": (10, None),
    "solver.warmup_factor": (0.1, None), "solver.precise_bn_iters": (0, None), "data.path": ("/other", None),
    "data.train": (("voc_2007_trainval",), None), "data.test": ("voc_2012_val", None),
    "data.classes": (("a", "b"), None), "data.workers": (1, None), "data.repeat_threshold": (0.001, None),
    "run.output_dir": ("/elsewhere", None),
    "run.device": ("cuda", None), "run.seed": (1, None), "run.amp": (True, None), "run.log_every": (7, None),
    "run.checkpoint_every": (10, None), "run.test_batch_size": (3, None), "run.loggers": (("tensorboard",), None),
    "run.weights_format": ("dino", None),
}


@pytest.mark.parametrize("field", sorted(FIELDS))
def test_each_field_sets_exactly_its_keys(field: str) -> None:
    value, preset = CHANGES[field]
    task = preset.split("_")[0] if preset else "voc"
    base = paper(task, preset)
    section, _, name = field.rpartition(".")
    changed_cfg = replace(base, **({section: {name: value}} if section else {name: value}))
    before, after = detectron2_options(base, num_classes=20), detectron2_options(changed_cfg, num_classes=20)
    changed = {k for k in before if before[k] != after[k]}
    if isinstance(FIELDS[field], str):  # documented as having no detectron2 key
        assert not changed
    else:
        assert changed and changed <= set(FIELDS[field])


# --- with detectron2 installed ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def d2() -> Any:
    pytest.importorskip("detectron2")
    from transfer.detection import detectron2_engine

    detectron2_engine.register_roi_heads()
    return detectron2_engine


def _model(d2: Any, cfg: TransferConfig, arch: str, tmp_path: Path, weights: str = "") -> Any:
    from detectron2.modeling import build_model

    cfg = with_normalisation(cfg, IMAGENET.record())  # as a run fills in the weights' (a no-op where set)
    d2cfg = d2.build_config(cfg, num_classes=20, arch=arch, weights=weights, device=torch.device("cpu"),
                            output_dir=tmp_path)
    return build_model(d2cfg)


@pytest.mark.parametrize(("arch", "extra_norm", "blocks", "channels"), [
    ("resnet50", True, 3, 2048), ("resnet18", True, 2, 512), ("resnet18", False, 2, 512)])
def test_the_c4_head_is_res5_of_the_backbone_then_the_extra_norm(d2: Any, tmp_path: Path, arch: str,
                                                                 extra_norm: bool, blocks: int, channels: int) -> None:
    from detectron2.layers import NaiveSyncBatchNorm

    cfg = replace(paper("voc"), detector={"extra_norm": extra_norm})
    heads = _model(d2, cfg, arch, tmp_path).roi_heads
    res5 = heads.res5
    names = [name for name, _ in res5.named_children()]
    assert names == [str(k) for k in range(blocks)] + (["norm"] if extra_norm else [])
    assert heads.box_predictor.cls_score.in_features == channels
    torch.manual_seed(0)
    out = res5.train()(torch.randn(4, channels // 2, 8, 8) * 3 + 1)  # (R, C5, 4, 4)
    if extra_norm:
        assert isinstance(res5.norm, NaiveSyncBatchNorm) and res5.norm.num_features == channels
        assert torch.allclose(out.mean(dim=(0, 2, 3)), torch.zeros(channels), atol=1e-4)  # batch-normalised
        assert torch.allclose(out.var(dim=(0, 2, 3), unbiased=False), torch.ones(channels), atol=1e-2)
    else:
        assert (out >= 0).all()  # the last block's ReLU is the last layer


@pytest.mark.parametrize("head", ["C4", "FPN"])
def test_converted_weights_are_loaded_into_the_detector(d2: Any, tmp_path: Path, head: str) -> None:
    from detectron2.checkpoint import DetectionCheckpointer

    from transfer.convert import convert_file, load_detectron2_pkl

    torch.manual_seed(0)
    resnet = torchvision.models.resnet18()
    for module in resnet.modules():
        if isinstance(module, torch.nn.BatchNorm2d):  # not the defaults a fresh detector would have
            module.running_var.uniform_(0.5, 2.0)
            module.weight.data.uniform_(0.5, 2.0)
    torch.save(resnet.state_dict(), tmp_path / "r18.pth")
    convert_file(tmp_path / "r18.pth", tmp_path / "r18.pkl", weights_format="supervised")  # a file naming none
    cfg = paper("coco", "coco_R50_FPN_1x") if head == "FPN" else paper("voc")
    model = _model(d2, cfg, "resnet18", tmp_path, str(tmp_path / "r18.pkl"))
    DetectionCheckpointer(model).load(str(tmp_path / "r18.pkl"))
    body = model.backbone.bottom_up if head == "FPN" else model.backbone
    res5 = body.res5 if head == "FPN" else model.roi_heads.res5
    assert torch.equal(body.stem.conv1.weight, resnet.conv1.weight)
    assert torch.equal(body.stem.conv1.norm.running_var, resnet.bn1.running_var)
    assert torch.equal(body.res4[1].conv2.norm.weight, resnet.layer3[1].bn2.weight)
    assert torch.equal(res5[0].shortcut.weight, resnet.layer4[0].downsample[0].weight)
    converted = load_detectron2_pkl(tmp_path / "r18.pkl")["model"]
    d2._check_loaded(model, converted)
    with pytest.raises(CheckpointError, match="was not loaded into the detector"):
        d2._check_loaded(_model(d2, cfg, "resnet18", tmp_path), converted)  # never loaded: refused


def test_datasets_are_registered_under_our_names_per_directory(d2: Any) -> None:
    from detectron2.data import DatasetCatalog, MetadataCatalog
    from detectron2.structures import BoxMode

    from transfer.detection.datasets import DetectionData

    root = Path("/datasets")
    image = {"height": 10, "width": 10, "annotations": [{"bbox": [1.0, 1.0, 5.0, 5.0], "category_id": 0}]}
    train = [{**image, "file_name": str(root / f"VOC{year}/JPEGImages/{k}.jpg"), "image_id": f"{year}_{k}"}
             for year in (2007, 2012) for k in range(3)]
    test = [{**image, "file_name": str(root / "VOC2007/JPEGImages/t.jpg"), "image_id": "t"}]
    data = DetectionData(root, "VOC07+12", train, test, ["a", "b"], {0: 0, 1: 1}, None)
    names = d2.register_datasets(paper("voc"), data)
    assert names == ("moco_voc_2007_trainval", "moco_voc_2012_trainval")
    assert [d["image_id"] for d in DatasetCatalog.get(names[1])] == ["2012_0", "2012_1", "2012_2"]
    assert DatasetCatalog.get("moco_voc_2007_test")[0]["annotations"][0]["bbox_mode"] == BoxMode.XYXY_ABS
    assert MetadataCatalog.get("moco_voc_2007_test").thing_classes == ["a", "b"]
    assert "voc_2007_trainval" in DatasetCatalog.list()  # detectron2's own entry is untouched
    assert d2.register_datasets(paper("voc"), data) == names  # a second run in this process replaces them


def test_coco_outputs_become_the_torchvision_engines_results(d2: Any) -> None:
    from detectron2.structures import Boxes, Instances
    from pycocotools import mask as mask_utils

    from transfer.detection.datasets import DetectionData

    instances = Instances((6, 8))
    instances.pred_boxes = Boxes(torch.tensor([[1.0, 2.0, 5.0, 4.0]]))
    instances.scores, instances.pred_classes = torch.tensor([0.9]), torch.tensor([1])
    mask = torch.zeros(1, 6, 8, dtype=torch.bool)
    mask[0, 2:4, 1:5] = True
    instances.pred_masks = mask
    data = DetectionData(Path("/d"), "x", [], [], ["a", "b"], {0: 1, 1: 3}, None)
    cfg = paper("coco")
    [result] = d2._convert(cfg, data, 42, instances)
    assert (result["image_id"], result["category_id"], result["bbox"]) == (42, 3, [1.0, 2.0, 4.0, 2.0])
    assert result["score"] == pytest.approx(0.9)
    decoded = mask_utils.decode({"size": result["segmentation"]["size"],
                                 "counts": result["segmentation"]["counts"].encode()})
    assert np.array_equal(decoded, mask[0].numpy().astype(np.uint8))
    voc = d2._convert(paper("voc"), data, "000005", instances)
    assert voc == [(1, ("000005", pytest.approx(0.9), 1.0, 2.0, 5.0, 4.0))]


# A C4 detector small enough for seconds on a CPU (as tests/transfer/test_engine.py's TINY).
TINY = ["solver.batch_size=2", "solver.lr=0.08", "solver.warmup_iters=5", "solver.precise_bn_iters=2",
        "detector.pooler_resolution=4", "detector.roi_batch_size_per_image=16", "detector.rpn_post_nms_topk_train=64",
        "detector.rpn_post_nms_topk_test=16", "detector.detections_per_image=10",
        "detector.anchor_sizes=[8,16,32,64,128]", "input.min_size_train=[48]", "input.min_size_test=48",
        "input.max_size=64", "data.workers=0", "run.log_every=1", "run.test_batch_size=8"]


@pytest.fixture
def one_thread() -> Any:
    """One intra-op thread: OpenMP threads spin-wait, and on a busy 2-core machine two threads ran these short
    runs 15x slower than one (67 s against 4 s)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_missing_datasets_are_named_before_anything_trains(d2: Any, tmp_path: Path) -> None:
    from transfer.embedded import ensure_voc

    root = ensure_voc(tmp_path / "data", trainval=4, test=2, size=64)  # VOC2007 only
    cfg = load_transfer_config("voc", None, [*TINY, "detector.arch=resnet18"],
                               {"engine": "detectron2", "data": {"path": str(root)},
                                "run": {"output_dir": str(tmp_path / "run")}})
    with pytest.raises(DatasetError, match="VOC2012"):
        d2.evaluate(cfg, "random", show_progress=False)
    assert not (tmp_path / "run").exists()


@pytest.fixture(scope="module")
def tiny_voc(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """24 trainval and 8 test embedded scenes of 64 px in the VOC layout."""
    from transfer.embedded import ensure_voc

    return ensure_voc(tmp_path_factory.mktemp("voc"), trainval=24, test=8, size=64)


def tiny_voc_config(root: Path, output_dir: Path, *overrides: str) -> TransferConfig:
    return load_transfer_config("voc", "voc_embedded", [*TINY, f"data.classes={list(CLASSES)}", *overrides],
                                {"engine": "detectron2", "data": {"path": str(root)},
                                 "run": {"output_dir": str(output_dir)}})


@pytest.mark.usefixtures("one_thread")
def test_short_voc_run_learns_and_writes_a_detectron2_record(d2: Any, tiny_voc: Path, tmp_path: Path) -> None:
    from reports.records import load_records
    from transfer.detection.run import evaluate

    cfg = tiny_voc_config(tiny_voc, tmp_path / "run", "solver.iterations=30", "solver.steps=[24]")
    record = json.loads(evaluate(cfg, "random", show_progress=False).read_text())
    losses = [h["loss"] for h in record["history"]]
    assert len(losses) == 30 and record["history"][-1]["iteration"] == 30
    assert np.mean(losses[-5:]) < 0.85 * np.mean(losses[:5])  # the detector learns
    assert record["engine"] == "detectron2" and record["task"] == record["protocol"] == "voc"
    assert record["config"]["model"] == "R18-C4" and record["config"]["engine"] == "detectron2"
    assert record["backbone"]["format"] == "random" and set(record["metrics"]["per_class_AP50"]) == set(CLASSES)
    assert record["dataset"]["train_images"] == 24 and record["dataset"]["test_images"] == 8
    run = tmp_path / "run"
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 30 and {"loss", "loss_cls", "loss_rpn_cls", "lr"} <= set(lines[-1])
    assert (run / "model_final.pth").is_file() and (run / "detectron2_config.yaml").is_file()
    records, skipped = load_records([str(tmp_path)])
    assert not skipped and (records[0].engine, records[0].model) == ("detectron2", "R18-C4")
    longer = replace(cfg, solver={"iterations": 32})  # resume: detectron2's last checkpoint, then 2 more
    again = json.loads(evaluate(longer, "random", show_progress=False, resume=True).read_text())
    assert [h["iteration"] for h in again["history"]] == [31, 32]
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 32


@pytest.mark.usefixtures("one_thread")
def test_short_coco_run_scores_boxes_and_masks(d2: Any, tmp_path: Path) -> None:
    from transfer.detection.run import evaluate
    from transfer.embedded import ensure_coco

    root = ensure_coco(tmp_path / "data", train=8, val=4, size=64)
    cfg = load_transfer_config("coco", "coco_embedded", [*TINY, "solver.iterations=3", "solver.steps=[2]",
                                                            "solver.warmup_iters=1"],
                               {"engine": "detectron2", "data": {"path": str(root)},
                                "run": {"output_dir": str(tmp_path / "run")}})
    text = evaluate(cfg, "random", show_progress=False).read_text()
    record = json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in result.json"))  # strict JSON
    assert record["engine"] == "detectron2" and record["config"]["schedule"] == "embedded, 3 it"
    assert {"bbox_AP", "segm_AP", "segm_AP50"} <= set(record["metrics"]) and "loss_mask" in record["history"][-1]


@pytest.mark.usefixtures("one_thread")
def test_short_keypoints_run_scores_keypoints(d2: Any, tmp_path: Path) -> None:
    from transfer.detection.embedded_keypoints import ensure_keypoints
    from transfer.detection.run import evaluate

    root = ensure_keypoints(tmp_path / "data", train=8, val=4, size=64)
    cfg = load_transfer_config("keypoints", "keypoints_embedded",
                               [*TINY, "solver.iterations=3", "solver.steps=[2]", "solver.warmup_iters=1",
                                "detector.keypoint_pooler_resolution=4", "detector.keypoint_conv_dims=[8]"],
                               {"engine": "detectron2", "data": {"path": str(root)},
                                "run": {"output_dir": str(tmp_path / "run")}})
    record = json.loads(evaluate(cfg, "random", show_progress=False).read_text())
    assert record["engine"] == "detectron2" and record["task"] == "keypoints"
    assert {"keypoints_AP", "bbox_AP"} <= set(record["metrics"]) and "loss_keypoint" in record["history"][-1]
    assert "KEYPOINT_OKS_SIGMAS" in (tmp_path / "run" / "detectron2_config.yaml").read_text()


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("task", ["lvis", "cityscapes"])
def test_short_lvis_and_cityscapes_runs_score_masks_by_the_official_evaluators(d2: Any, tmp_path: Path,
                                                                               task: str) -> None:
    pytest.importorskip("lvis" if task == "lvis" else "cityscapesscripts")
    from transfer.detection.cityscapes import ensure_cityscapes
    from transfer.detection.lvis import ensure_lvis
    from transfer.detection.run import evaluate

    root = (ensure_lvis if task == "lvis" else ensure_cityscapes)(tmp_path / "data", train=8, val=4, size=64)
    cfg = load_transfer_config(task, f"{task}_embedded", [*TINY, "solver.iterations=3", "solver.steps=[2]",
                                                          "solver.warmup_iters=1"],
                               {"engine": "detectron2", "data": {"path": str(root)},
                                "run": {"output_dir": str(tmp_path / "run")}})
    record = json.loads(evaluate(cfg, "random", show_progress=False).read_text())
    assert record["engine"] == "detectron2" and record["task"] == task
    assert {"segm_AP", "segm_AP50"} <= set(record["metrics"]) and "loss_mask" in record["history"][-1]


def test_two_processes_through_detectron2s_launcher(d2: Any, tiny_voc: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # for the spawned processes (see one_thread)
    cfg = tiny_voc_config(tiny_voc, tmp_path / "run", "solver.batch_size=4", "solver.iterations=2",
                          "solver.steps=[1]", "solver.warmup_iters=1")
    d2.launch(cfg, "random", num_processes=2, show_progress=False)  # gloo on CPU, NCCL on GPUs
    record = json.loads((tmp_path / "run" / "result.json").read_text())
    assert record["world_size"] == 2 and record["engine"] == "detectron2"
    assert [h["iteration"] for h in record["history"]] == [1, 2] and record["dataset"]["test_images"] == 8


def test_keypoint_outputs_and_metadata(d2: Any) -> None:
    """Keypoints are registered at pixel centres (+0.5) with their flip map, and come back as COCO's indices."""
    from detectron2.data import DatasetCatalog, MetadataCatalog
    from detectron2.structures import Boxes, Instances

    from transfer.detection.datasets import DetectionData
    from transfer.detection.keypoints import KeypointSet

    points = KeypointSet(("top", "left_a", "right_a"))
    ann = {"bbox": [1.0, 1.0, 5.0, 5.0], "category_id": 0, "keypoints": [2.0, 3.0, 2, 0, 0, 0, 4.0, 4.0, 1],
           "num_keypoints": 2}
    record = {"file_name": "/datasets/coco/val2017/1.jpg", "image_id": 1, "height": 10, "width": 10,
              "annotations": [ann]}
    data = DetectionData(Path("/datasets"), "x", [record], [record], ["star"], {0: 1}, None, points, None)
    d2.register_datasets(paper("keypoints"), data)
    registered = DatasetCatalog.get("moco_keypoints_coco_2017_val")[0]["annotations"][0]["keypoints"]
    assert registered == [2.5, 3.5, 2, 0.5, 0.5, 0, 4.5, 4.5, 1]
    assert MetadataCatalog.get("moco_keypoints_coco_2017_val").keypoint_flip_map == [("left_a", "right_a")]
    instances = Instances((10, 10))
    instances.pred_boxes = Boxes(torch.tensor([[1.0, 2.0, 5.0, 4.0]]))
    instances.scores, instances.pred_classes = torch.tensor([0.9]), torch.tensor([0])
    instances.pred_keypoints = torch.tensor([[[2.5, 3.5, 0.7], [1.0, 1.0, 0.1], [4.5, 4.5, 0.3]]])
    [result] = d2._convert(paper("keypoints"), data, 1, instances)
    assert result["category_id"] == 1
    assert result["keypoints"] == pytest.approx([2.0, 3.0, 0.7, 0.5, 0.5, 0.1, 4.0, 4.0, 0.3])
