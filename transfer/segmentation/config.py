"""Semantic segmentation transfer configuration (``moco eval semseg``): frozen dataclasses.

The defaults are the paper's VOC12 run (arXiv 1911.05722, appendix A.5): an FCN-style network on the ResNet with
conv5 dilated to output stride 16, two 3x3 convolutions of 256 channels with dilation 6, each with BN and ReLU, a
1x1 classifier and bilinear upsampling to the input; random scaling by 0.5-2, 513-pixel crops, batch 16, weight
decay 1e-4, lr 0.003 x0.1 at 70% and 90% of 30k iterations, on VOC12 train_aug (10,582 images), tested on VOC12 val
at full resolution. ``configs/semseg_cityscapes.yaml`` changes what differs for Cityscapes. The solver, its
schedule and the run options are the detection protocol's (:mod:`transfer.config`), shared with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from moco_core.config import ARCHS, ConfigError, Schedule, cpu_workers, load_config, require, run_checks
from moco_core.model.weights.formats import format_checks
from transfer.config import SolverConfig, TransferRunConfig, input_checks, solver_checks

TASK = "semseg"
DEFAULT_PRESET = "semseg_voc"


@dataclass(frozen=True)
class HeadConfig:
    arch: str | None = None  # the backbone ResNet; None: the weights' (random init needs it, then resnet50)
    # conv5 (res5) runs with stride 1 and dilation 2 instead of stride 2 (torchvision's replace_stride_with_dilation
    # on the last stage): the features come out at 1/16 of the input (A.5: "dilated to output stride 16").
    output_stride: Literal[16, 32] = 16
    channels: int = 256  # A.5: two 3x3 convolutions of 256 output channels
    convs: int = 2
    dilation: int = 6  # A.5: both with dilation 6
    # BN after each new convolution (A.5: "followed by BN and ReLU"); the backbone's BN is fine-tuned too.


@dataclass(frozen=True)
class SemsegInputConfig:
    crop_size: int = 513  # A.5: 513 for VOC, 769 for Cityscapes
    scale_range: tuple[float, float] = (0.5, 2.0)  # A.5: random scaling of the image by a ratio in [0.5, 2]
    # Horizontal flip in training: not named in A.5; the DeepLab training pipelines the recipe follows flip (an
    # assumption, stated here; set 0 to leave it out).
    flip_prob: float = 0.5
    # RGB input normalised as the weights' method trained (null: the weights' normalisation, as the detection
    # protocol's input.mean/std: torchvision's ImageNet statistics for most, none for SimCLR's)
    mean: tuple[float, float, float] | None = None
    std: tuple[float, float, float] | None = None


@dataclass(frozen=True)
class SemsegDataConfig:
    # A root holding VOC2012/ (JPEGImages/, SegmentationClassAug/, ImageSets/Segmentation/) and/or
    # cityscapes/ (leftImg8bit/, gtFine/), or "embedded" (class masks of the detection scenes, generated on first use)
    path: str | None = None
    # voc_2012_sem_seg_train_aug, voc_2012_sem_seg_val, cityscapes_fine_sem_seg_train, cityscapes_fine_sem_seg_val
    # (detectron2's names for Cityscapes), or one's own IMAGE_DIR:LABEL_DIR (relative paths are under `path`).
    train: str = "voc_2012_sem_seg_train_aug"
    test: str = "voc_2012_sem_seg_val"
    # One's own data: the class names in label order (label value k is classes[k]); the standard sets name theirs.
    classes: tuple[str, ...] = ()
    ignore_index: int = 255  # label value excluded from the loss and the metric (VOC's borders, Cityscapes' void)
    workers: int = field(default_factory=lambda: cpu_workers(4))  # DataLoader workers a training process


def _solver() -> SolverConfig:
    # A.5: lr 0.003 for VOC at batch 16, weight decay 1e-4, x0.1 at 70% and 90% of 30k iterations. The appendix
    # names no warm-up and no precise BN: neither runs.
    return SolverConfig(lr=0.003, iterations=30000, steps=(21000, 27000), warmup_iters=0, precise_bn_iters=0)


@dataclass(frozen=True)
class SemsegConfig:
    task: Literal["semseg"] = "semseg"
    schedule: str = "30k"  # the label results are grouped by: "30k" (VOC), "90k" (Cityscapes)
    # Our own module on torchvision's ResNets (neither detectron2 nor torchvision ships the paper's head)
    engine: Literal["torchvision"] = "torchvision"
    head: HeadConfig = field(default_factory=HeadConfig)
    input: SemsegInputConfig = field(default_factory=SemsegInputConfig)
    solver: SolverConfig = field(default_factory=_solver)
    data: SemsegDataConfig = field(default_factory=SemsegDataConfig)
    run: TransferRunConfig = field(default_factory=TransferRunConfig)

    # As the detection presets: the lr steps keep their fraction of solver.iterations when only it is changed.
    SCHEDULES: ClassVar[tuple[Schedule, ...]] = (("solver.iterations", ("solver.steps",), None, "schedule"),)



def semseg_run_dir(cfg: SemsegConfig) -> Path:
    """The run directory: ``run.output_dir``, else ``runs/semseg``."""
    return Path(cfg.run.output_dir or f"runs/{cfg.task}")


def model_name(cfg: SemsegConfig, arch: str) -> str:
    """"R50 FCN-style os16": the backbone and the output stride (the published rows' name for the network)."""
    depth = arch.removeprefix("resnet") if arch.startswith("resnet") else arch
    return f"R{depth} FCN-style os{cfg.head.output_stride}"


def validate_semseg(cfg: SemsegConfig) -> SemsegConfig:
    """Raise ConfigError on the first invalid value (one line: field, problem, what is allowed)."""
    h, i, d, r = cfg.head, cfg.input, cfg.data, cfg.run
    low, high = i.scale_range
    checks = [
        (cfg.task == TASK, "task", f"must be {TASK!r}, got {cfg.task!r}"),
        (cfg.engine == "torchvision", "engine", f"semantic segmentation runs on torchvision only, got {cfg.engine!r}"),
        (h.arch is None or h.arch in ARCHS, "head.arch", f"expected one of {list(ARCHS)} or null, got {h.arch!r}"),
        (h.output_stride in (16, 32), "head.output_stride", f"must be 16 or 32, got {h.output_stride}"),
        (h.channels >= 1 and h.convs >= 0 and h.dilation >= 1, "head.channels", "need channels >= 1, convs >= 0 "
         "and dilation >= 1"),
        (i.crop_size >= 16, "input.crop_size", f"must be >= 16, got {i.crop_size}"),
        (0 < low <= high, "input.scale_range", f"need 0 < low <= high, got {list(i.scale_range)}"),
        (0 <= i.flip_prob <= 1, "input.flip_prob", f"must be in [0, 1], got {i.flip_prob}"),
        *input_checks(i.mean, i.std),
        *format_checks(r.weights_format),
        *solver_checks(cfg.solver),
        (d.path is not None, "data.path", "not set: pass --data DIR (VOC2012/ or cityscapes/ inside) or --data "
         "embedded"),
        (bool(d.train.strip()) and bool(d.test.strip()), "data.train", "name a training and a test set"),
        (all(c.strip() for c in d.classes) and len(set(d.classes)) == len(d.classes), "data.classes",
         "need distinct, non-empty names"),
        (0 <= d.ignore_index <= 255 and d.ignore_index >= len(d.classes), "data.ignore_index", f"must be in "
         f"[number of classes, 255] (labels are 8-bit PNGs), got {d.ignore_index}"),
        (d.workers >= 0, "data.workers", f"must be >= 0, got {d.workers}"),
        *run_checks(r.device, r.seed, r.loggers),
        (min(r.log_every, r.checkpoint_every, r.test_batch_size) >= 1, "run.log_every",
         "log_every, checkpoint_every and test_batch_size must be >= 1"),
        (r.test_batch_size == 1, "run.test_batch_size", "must be 1: test images are whole and of their own sizes"),
        (bool(cfg.schedule.strip()), "schedule", "must be a non-empty label (30k, 90k...)"),
    ]
    require(checks)
    return cfg


def load_semseg_config(config: str | None, overrides: list[str] | tuple[str, ...],
                       flags: dict[str, Any] | None = None) -> SemsegConfig:
    """Defaults < the YAML preset (semseg_voc when ``config`` is None) < ``--set`` overrides < explicit flags."""
    cfg = load_config(SemsegConfig, config or DEFAULT_PRESET, overrides, flags=flags)
    if cfg.task != TASK:
        raise ConfigError(f"task: the config {config!r} is for {cfg.task}, not {TASK}")
    return validate_semseg(cfg)
