"""Detection transfer configuration (``moco eval voc|coco|keypoints|lvis|cityscapes``): frozen dataclasses.

The defaults are the paper's VOC run (arXiv 1911.05722, section 4.2; the official
``detection/configs/pascal_voc_R_50_C4_24k_moco.yaml`` on detectron2's defaults): Faster R-CNN R50-C4 with BN
fine-tuned everywhere and an extra BN after res5, trained on VOC07+12 trainval for 24k iterations of 16 images and
tested on VOC07 test. The COCO presets (``configs/coco_*.yaml``) and the keypoint ones (``configs/keypoints_*.yaml``)
change what differs. Loading, ``_base_`` chains,
``--set`` overrides and the one-line ConfigError are moco_core.config's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from moco_core.config import ARCHS, ConfigError, Schedule, cpu_workers, extra_problem, load_config, require, run_checks
from moco_core.model.weights.formats import format_checks
from transfer.config import SolverConfig, TransferRunConfig, input_checks, solver_checks

TASKS = ("voc", "coco", "keypoints", "lvis", "cityscapes", "densepose")
MASK_TASKS = ("coco", "lvis", "cityscapes")  # Mask R-CNN: box and mask AP
ENGINES = ("auto", "detectron2", "torchvision")
# The preset each command runs when no --config is given: the paper's settings.
DEFAULT_PRESETS = {"voc": "voc_R50_C4_24k", "coco": "coco_R50_C4_1x", "keypoints": "keypoints_R50_FPN_2x",
                   "lvis": "lvis_v0.5_R50_FPN_2x", "cityscapes": "cityscapes_R50_FPN",
                   "densepose": "densepose_R50_FPN_s1x"}
# Why task densepose cannot run on torchvision (or without DensePose installed): one line.
DENSEPOSE_NEEDED = ("dense pose needs detectron2's DensePose project (projects/DensePose; torchvision has no dense "
                    "pose): install detectron2 from its source, then pip install --no-build-isolation -e "
                    "detectron2/projects/DensePose, and use --engine detectron2")
# The packages a task's evaluator imports at test time beyond the base install: (module, pip extra, its pip name).
# Checked with the config (validate_transfer), for every engine: the schedule is hours of GPUs before the test.
TASK_EXTRAS = {"lvis": ("lvis", "lvis", "lvis"), "cityscapes": ("cityscapesscripts", "cityscapes", "cityscapesScripts")}
_VOC_SIZES = (480, 512, 544, 576, 608, 640, 672, 704, 736, 768, 800)


@dataclass(frozen=True)
class DetectorConfig:
    arch: str | None = None  # the backbone ResNet; None: the weights' (random init needs it, then resnet50)
    # "C4": RPN and RoIAlign on res4 (stride 16), res5 as the box head (Faster R-CNN's ResNet design);
    # "FPN": a feature pyramid on res2-res5 with a 2-fc box head (detectron2's R50-FPN).
    head: Literal["C4", "FPN"] = "C4"
    mask: bool = False  # Mask R-CNN (the paper's COCO runs); Faster R-CNN otherwise (VOC)
    # C4: a BN after res5 (the MoCo configs' Res5ROIHeadsExtraNorm). Fine-tuned features have a different scale
    # from supervised ones; the extra norm puts the new head's input on a common footing.
    extra_norm: bool = True
    # FPN: BN in the new FPN and mask-head convs too (the paper normalises the newly initialised layers).
    norm_new_layers: bool = True
    fpn_channels: int = 256  # FPN: the pyramid's channels (detectron2's FPN.OUT_CHANNELS)
    anchor_sizes: tuple[int, ...] = (32, 64, 128, 256, 512)  # detectron2's; C4: all on res4, FPN: one per level
    aspect_ratios: tuple[float, ...] = (0.5, 1.0, 2.0)
    pooler_resolution: int = 14  # RoIAlign output of the box branch: C4 14 (res5 halves it to 7), FPN 7
    rpn_pre_nms_topk_train: int = 12000  # detectron2's C4 defaults; FPN presets: 2000 per level
    rpn_post_nms_topk_train: int = 2000
    rpn_pre_nms_topk_test: int = 6000  # Base-RCNN-C4-BN.yaml of the MoCo configs
    rpn_post_nms_topk_test: int = 1000
    rpn_batch_size_per_image: int = 256  # anchors sampled per image for the RPN loss, half positive
    roi_batch_size_per_image: int = 512  # RoIs sampled per image for the box head, a quarter positive
    detections_per_image: int = 100
    score_thresh: float = 0.05  # test: boxes scoring less are dropped before per-class NMS
    nms_thresh: float = 0.5
    # Keypoint R-CNN (task keypoints; transfer/detection/keypoints.py), detectron2's ROI_KEYPOINT_HEAD defaults:
    # a 14x14 RoIAlign, 8 convs of 512 channels, a 2x deconvolution and a 2x upsampling to 56x56 heatmaps.
    keypoint_pooler_resolution: int = 14
    keypoint_conv_dims: tuple[int, ...] = (512,) * 8  # ROI_KEYPOINT_HEAD.CONV_DIMS
    # Training images with fewer visible keypoints than this are left out (MIN_KEYPOINTS_PER_IMAGE: 1).
    min_keypoints_per_image: int = 1
    # OKS sigmas per keypoint (TEST.KEYPOINT_OKS_SIGMAS). Empty: COCO's 17 person sigmas for COCO's person
    # keypoints, else every keypoint the mean of COCO's (transfer.detection.keypoints.oks_sigmas).
    keypoint_oks_sigmas: tuple[float, ...] = ()
    # DensePose R-CNN (task densepose, detectron2's projects/DensePose only): its ROI_DENSEPOSE_HEAD defaults,
    # DensePoseV1ConvXHead: 8 convs of 512 channels on a 28x28 RoIAlign, a 2x deconvolution and a 2x upsampling
    # to 112x112 part, U and V heatmaps.
    densepose_pooler_resolution: int = 28
    densepose_num_convs: int = 8
    densepose_conv_dim: int = 512
    densepose_heatmap_size: int = 112


@dataclass(frozen=True)
class InputConfig:
    min_size_train: tuple[int, ...] = _VOC_SIZES  # shorter side, one drawn per image (VOC: 480-800 by 32)
    min_size_test: int = 800
    max_size: int = 1333  # longer-side cap, train and test
    flip_prob: float = 0.5  # horizontal flip in training (detectron2's default)
    # RGB input (pixels in [0, 1]) normalised as the weights' method trained: null takes the weights'
    # normalisation (moco_core/model/weights/formats.py: torchvision's ImageNet statistics, the MoCo configs'
    # PIXEL_MEAN/STD, for most; none for SimCLR's converted weights), resolved when the run starts
    mean: tuple[float, float, float] | None = None
    std: tuple[float, float, float] | None = None


@dataclass(frozen=True)
class TransferDataConfig:
    # A root in detectron2's datasets/ layout (VOC2007/, VOC2012/, coco/annotations/, coco/train2017/...), or
    # "embedded" (the shapes dataset converted to VOC and COCO layouts, generated on first use).
    path: str | None = None
    # detectron2's dataset names: voc_<year>_<split> (VOC<year>/ImageSets/Main/<split>.txt) and
    # coco_<year>_<split> (coco/annotations/instances_<split><year>.json with images in coco/<split><year>/);
    # or one's own: a VOC-style split file DEVKIT/ImageSets/Main/<split>.txt, a COCO-format
    # ANNOTATIONS.json:IMAGE_DIR (relative paths are under `path`; transfer/detection/datasets.py).
    train: tuple[str, ...] = ("voc_2007_trainval", "voc_2012_trainval")
    test: str = "voc_2007_test"
    # VOC layout only: the class names of the XML files, in label order. Empty: VOC's 20 classes for the standard
    # sets, the shapes classes for "embedded", every name a custom devkit's XML files use, sorted (COCO files name
    # their own categories).
    classes: tuple[str, ...] = ()
    workers: int = field(default_factory=lambda: cpu_workers(4))  # DataLoader workers a training process
    # Repeat-factor sampling (detectron2's RepeatFactorTrainingSampler, LVIS's configs: 0.001): an image is seen
    # max over its categories c of max(1, sqrt(t / f_c)) times an epoch, f_c the fraction of training images with
    # c. 0: every image once an epoch.
    repeat_threshold: float = 0.0


@dataclass(frozen=True)
class TransferConfig:
    task: Literal["voc", "coco", "keypoints", "lvis", "cityscapes", "densepose"] = "voc"
    schedule: str = "24k"  # the label results are grouped by: "24k" (VOC), "1x", "2x" (COCO)
    # "auto": detectron2 when it is installed, else torchvision's detection models (same protocol)
    engine: Literal["auto", "detectron2", "torchvision"] = "auto"
    detector: DetectorConfig = field(default_factory=DetectorConfig)
    input: InputConfig = field(default_factory=InputConfig)
    solver: SolverConfig = field(default_factory=SolverConfig)
    data: TransferDataConfig = field(default_factory=TransferDataConfig)
    run: TransferRunConfig = field(default_factory=TransferRunConfig)

    # The lr steps keep their fraction of solver.iterations when only it is changed; the schedule label then says
    # so ("embedded, 60 it"), so that the run is not reported or matched as the preset's schedule. The warm-up is a
    # number of iterations whatever the length (detectron2's 2x configs keep the 1x's 1000).
    SCHEDULES: ClassVar[tuple[Schedule, ...]] = (("solver.iterations", ("solver.steps",), None, "schedule"),)



def transfer_run_dir(cfg: TransferConfig) -> Path:
    """The run directory: ``run.output_dir``, else ``runs/<task>``."""
    return Path(cfg.run.output_dir or f"runs/{cfg.task}")


def model_name(cfg: TransferConfig, arch: str) -> str:
    """The detector as the paper names it: "R50-C4", "R18-FPN"... (the mask head is implied by the task)."""
    depth = arch.removeprefix("wide_").removeprefix("resnet").replace("_2", "w2")
    return f"R{depth}-{cfg.detector.head}"


def validate_transfer(cfg: TransferConfig) -> TransferConfig:
    """Reject impossible values with a one-line error naming the key."""
    from transfer.detection.datasets import parse_dataset  # here: it loads torch, which `moco eval voc --help` must not

    d, i, s, r = cfg.detector, cfg.input, cfg.solver, cfg.run
    names = (*cfg.data.train, cfg.data.test)
    missing = extra_problem(f"the {cfg.task} evaluation", *TASK_EXTRAS[cfg.task]) if cfg.task in TASK_EXTRAS else None
    checks = [
        (missing is None, "task", missing),
        (cfg.engine in ENGINES, "engine", f"expected one of {list(ENGINES)}, got {cfg.engine!r}"),
        (d.arch is None or d.arch in ARCHS, "detector.arch", f"expected one of {list(ARCHS)} or null, got {d.arch!r}"),
        (len(d.anchor_sizes) >= 1 and min(d.anchor_sizes) > 0, "detector.anchor_sizes", "need positive sizes"),
        (d.head != "FPN" or len(d.anchor_sizes) == 5, "detector.anchor_sizes", "FPN needs one size per level (5)"),
        (len(d.aspect_ratios) >= 1 and min(d.aspect_ratios) > 0, "detector.aspect_ratios", "need positive ratios"),
        (d.pooler_resolution >= 2 and (d.head != "C4" or d.pooler_resolution % 2 == 0), "detector.pooler_resolution",
         f"must be >= 2 (and even for C4, whose res5 halves it), got {d.pooler_resolution}"),
        (min(d.rpn_pre_nms_topk_train, d.rpn_post_nms_topk_train, d.rpn_pre_nms_topk_test,
             d.rpn_post_nms_topk_test) >= 1, "detector.rpn_*_nms_topk_*", "must be >= 1"),
        (d.rpn_batch_size_per_image >= 1 and d.roi_batch_size_per_image >= 1, "detector.*_batch_size_per_image",
         "must be >= 1"),
        (d.detections_per_image >= 1, "detector.detections_per_image", f"must be >= 1, got {d.detections_per_image}"),
        (0 <= d.score_thresh < 1 and 0 < d.nms_thresh <= 1, "detector.score_thresh",
         "need 0 <= score_thresh < 1 and 0 < nms_thresh <= 1"),
        (len(i.min_size_train) >= 1 and min(i.min_size_train) >= 16, "input.min_size_train", "need sizes >= 16"),
        (16 <= i.min_size_test <= i.max_size, "input.min_size_test", "need 16 <= min_size_test <= max_size"),
        (0 <= i.flip_prob <= 1, "input.flip_prob", f"must be in [0, 1], got {i.flip_prob}"),
        *input_checks(i.mean, i.std),
        *solver_checks(s),
        (cfg.data.path is not None, "data.path", "not set: pass --data DIR (detectron2's datasets/ layout) or "
         "--data embedded"),
        (len(cfg.data.train) >= 1, "data.train", "name at least one training set"),
        (cfg.task == "voc" or not cfg.data.classes, "data.classes", "VOC-style devkits only: a COCO annotation file "
         "names its own categories"),
        (all(c.strip() for c in cfg.data.classes) and len(set(cfg.data.classes)) == len(cfg.data.classes),
         "data.classes", "need distinct, non-empty names"),
        (cfg.data.workers >= 0, "data.workers", f"must be >= 0, got {cfg.data.workers}"),
        (0 <= cfg.data.repeat_threshold < 1, "data.repeat_threshold",
         f"must be in [0, 1) (0: off), got {cfg.data.repeat_threshold}"),
        *run_checks(r.device, r.seed, r.loggers),
        *format_checks(r.weights_format),
        (min(r.log_every, r.checkpoint_every, r.test_batch_size) >= 1, "run.log_every",
         "log_every, checkpoint_every and test_batch_size must be >= 1"),
        (cfg.task != "keypoints" or d.head == "FPN", "detector.head", "Keypoint R-CNN is built on FPN (the "
         "paper's R50-FPN): set detector.head FPN"),
        (cfg.task != "densepose" or d.head == "FPN", "detector.head", "DensePose R-CNN is built on FPN (the "
         "paper's R50-FPN): set detector.head FPN"),
        (cfg.task != "densepose" or cfg.engine != "torchvision", "engine", DENSEPOSE_NEEDED),
        (min(d.densepose_pooler_resolution, d.densepose_num_convs, d.densepose_conv_dim,
             d.densepose_heatmap_size) >= 1, "detector.densepose_*", "must be >= 1"),
        (d.fpn_channels >= 1, "detector.fpn_channels", f"must be >= 1, got {d.fpn_channels}"),
        (d.keypoint_pooler_resolution >= 2 and d.min_keypoints_per_image >= 0, "detector.keypoint_pooler_resolution",
         "need keypoint_pooler_resolution >= 2 and min_keypoints_per_image >= 0"),
        (len(d.keypoint_conv_dims) >= 1 and min(d.keypoint_conv_dims) >= 1, "detector.keypoint_conv_dims",
         f"need at least one conv of >= 1 channels, got {list(d.keypoint_conv_dims)}"),
        (all(math.isfinite(v) and v > 0 for v in d.keypoint_oks_sigmas), "detector.keypoint_oks_sigmas",
         f"need positive numbers, got {list(d.keypoint_oks_sigmas)}"),
        (d.mask == (cfg.task in MASK_TASKS), "detector.mask", "the paper's VOC detector is Faster R-CNN (false), its "
         "COCO, LVIS and Cityscapes detector Mask R-CNN (true): box and mask AP are both reported; Keypoint R-CNN has "
         "no mask head (false)"),
        (bool(cfg.schedule.strip()), "schedule", "must be a non-empty label (24k, 1x, 2x...)"),
    ]
    require(checks)
    for name in names:
        parse_dataset(name, cfg.task)  # a ConfigError naming the accepted forms
    return cfg


def load_transfer_config(task: str, config: str | None, overrides: list[str] | tuple[str, ...],
                         flags: dict[str, Any] | None = None) -> TransferConfig:
    """Defaults < the YAML preset (the task's paper preset when ``config`` is None) < ``--set`` overrides <
    explicit flags (``{"engine": ..., "data": {"path": ...}}``; None values are not given).

    The preset must be for ``task``: ``moco eval voc -c coco_R50_FPN_1x`` is an error, not a VOC run.
    """
    cfg = load_config(TransferConfig, config or DEFAULT_PRESETS[task], overrides, flags=flags)
    if cfg.task != task:
        raise ConfigError(f"task: the config {config!r} is for {cfg.task}, not {task} (use moco eval {cfg.task})")
    return validate_transfer(cfg)
