"""The pretraining config (``moco pretrain``): frozen dataclasses whose defaults are the paper's values, and the
checks that refuse impossible ones. Loading, ``_base_`` chains, ``--set`` overrides and the one-line ConfigError
are :mod:`moco_core.config`'s, which reads a config class's ``SCHEDULES``, ``FOLLOWERS``, ``check`` and
``unused_keys`` where it has them.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from moco_core.config import (
    ARCHS,
    MAX_QUEUE,
    VIT_ARCHS,
    Check,
    Schedule,
    cpu_workers,
    did_you_mean,
    divisor_check,
    extra_problem,
    require,
    run_checks,
    step_schedule,
)
from moco_core.errors import show


@dataclass(frozen=True)
class ModelConfig:
    arch: str = "resnet50"  # paper: ResNet-50 (R50)
    dim: int = 128  # feature dimension of q and k (paper: 128)
    mlp: bool = False  # MoCo v2's 2-layer MLP head (arXiv 2003.04297); v1 has a single fc
    queue_size: int = 65536  # K, the number of negatives in the dictionary (paper: 65536)
    # The queue before K keys have been written: "random" unit vectors (the official code) or "empty" (unwritten
    # slots are not negatives; see moco_core/model/moco.py). Matters only in the first K / batch steps.
    queue_init: Literal["random", "empty"] = "random"
    momentum: float = 0.999  # m, key-encoder momentum (paper: 0.999)
    temperature: float = 0.07  # T in InfoNCE (paper v1: 0.07; v2: 0.2)
    # How batch statistics are kept from leaking the positive (paper section 3.3):
    # "shuffle": several processes shuffle the key batch across ranks; one process splits every BN layer of
    #   both encoders into `bn_groups` groups and feeds the key encoder a shuffled batch (emulates bn_groups GPUs).
    # "sync": SyncBatchNorm over all ranks (no shuffling); "none": plain per-process BN, no shuffling
    # (not "off": YAML reads a bare off as false).
    shuffle_bn: Literal["shuffle", "sync", "none"] = "shuffle"
    bn_groups: int = 8  # single-process emulation of the paper's 8 GPUs (32 images a group at batch 256)
    bank_momentum: float = 0.5  # memory-bank method: bank rows <- m * row + (1 - m) * feature (InstDisc: 0.5)


@dataclass(frozen=True)
class AugmentConfig:
    """Two independent crops of each image. Defaults are MoCo v1's augmentation (official main_moco.py)."""

    crop_size: int = 224
    crop_scale: tuple[float, float] = (0.2, 1.0)  # RandomResizedCrop scale range (official: 0.2-1)
    color_jitter: tuple[float, float, float, float] = (0.4, 0.4, 0.4, 0.4)  # brightness, contrast, sat., hue
    color_jitter_prob: float = 1.0  # v1 always jitters; v2 with p 0.8
    grayscale_prob: float = 0.2
    grayscale_before_jitter: bool = True  # v1 order: grayscale, then jitter; v2: jitter, then grayscale
    blur_prob: float = 0.0  # v2: Gaussian blur with p 0.5
    blur_sigma: tuple[float, float] = (0.1, 2.0)  # v2: sigma (PIL radius) uniform in 0.1-2
    # MoCo v3 (BYOL's asymmetric views, arXiv 2006.07733): the second view blurs with p 0.1 (the first: 1.0) and
    # solarizes with p 0.2 (the first: never). null: as the first view (v1, v2: both views alike).
    blur_prob_view2: float | None = None
    solarize_prob: float = 0.0  # PIL's ImageOps.solarize (pixels >= 128 inverted), after blur
    solarize_prob_view2: float | None = None
    flip_prob: float = 0.5
    mean: tuple[float, float, float] = (0.485, 0.456, 0.406)  # ImageNet statistics, as torchvision
    std: tuple[float, float, float] = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class OptimConfig:
    lr: float = 0.03  # per 256 images; the effective lr is lr * global_batch / 256 (paper: 0.03 at 256)
    batch_size: int = 256  # global batch over all processes (paper: 256 on 8 GPUs)
    momentum: float = 0.9
    weight_decay: float = 1e-4
    epochs: int = 200
    schedule: Literal["step", "cosine"] = "step"  # v1: step; v2: cosine (applied per epoch, as official)
    milestones: tuple[int, ...] = (120, 160)  # step schedule: lr x0.1 at these epochs
    # "auto": SGD for v1/v2 and the other methods; for mocov3 LARS on a ResNet and AdamW on a ViT, as the official
    # v3 reference setups (LARS leaves biases and norms, every tensor of 1 dim or less, out of its weight decay and
    # trust ratio, as the official moco/optimizer.py).
    optimizer: Literal["auto", "sgd", "lars", "adamw"] = "auto"
    # Linear warm-up from 0 over this many epochs, then the schedule over the rest (mocov3 only, whose lr is set
    # every step; official v3: 10, the ViT setups 40; v1/v2 have none).
    warmup_epochs: int = 0


@dataclass(frozen=True)
class DataConfig:
    path: str | None = None  # an ImageFolder root (train/ inside, or a folder of images), or "embedded"
    workers: int = field(default_factory=lambda: cpu_workers(8))  # DataLoader workers a training process
    verify_images: bool = True  # open every image's header at start-up and skip unreadable ones
    knn_path: str | None = None  # labelled root (train/, val/ class folders) for the kNN monitor; "embedded"
    # "pil": PIL decoding and augmentation in DataLoader workers (the official way); "tensor": workers only read
    # bytes, the training device decodes (JPEG on the GPU under CUDA) and augments in batches
    # (moco_core/data/device_data.py); "auto": tensor under CUDA (several times faster there), pil on CPU and for
    # the supervised baseline.
    pipeline: Literal["auto", "pil", "tensor"] = "auto"


@dataclass(frozen=True)
class RunConfig:
    output_dir: str | None = None  # None: runs/<preset> from `moco pretrain -c PRESET`, else runs/pretrain
    device: str = "auto"  # "auto": CUDA when available, else CPU
    seed: int = 0
    amp: bool = True  # bf16 autocast on CUDA; always fp32 on CPU
    # Speed on GPUs (null: on under CUDA, off on CPU). channels_last: both encoders and the images in NHWC layout
    # (the tensor cores' own); compile: torch.compile of each encoder (minutes of compiling at the start, then
    # a faster step; shuffled BN is written so that it compiles into the graph).
    channels_last: bool | None = None
    compile: bool | None = None
    log_every: int = 10  # steps between metrics.jsonl lines
    checkpoint_every: int = 1  # epochs between writes of checkpoint_last.pth.tar (the end always writes one)
    # Also write it every this many steps inside an epoch (0: epoch ends only), so a pre-empted ImageNet epoch
    # (5004 steps at batch 256) loses at most this many steps; resume continues with the samples not yet seen.
    checkpoint_steps: int = 1000
    keep_every: int = 0  # also keep checkpoint_<epoch>.pth.tar every this many epochs (0: keep only the last)
    knn_every: int = 0  # kNN monitor (k 200, T 0.07) on data.knn_path every this many epochs (0: off)
    # Several processes: a collective that waits longer than this (another process died or hangs) fails the run
    # instead of hanging until the scheduler's wall-clock limit.
    dist_timeout_s: float = 600.0
    loggers: tuple[str, ...] = ()  # mirrors of metrics.jsonl: "tensorboard", "wandb" (optional extras; README)


@dataclass(frozen=True)
class MocoV3Config:
    """MoCo v3 (Chen, Xie, He, arXiv 2104.02057), method ``mocov3``. Defaults: the official main_moco.py's, with
    the cosine momentum schedule that every reference setup of its CONFIG.md turns on (--moco-m-cos)."""

    dim: int = 256  # output of the projector and the predictor (--moco-dim)
    mlp_dim: int = 4096  # hidden width of the projector and the predictor (--moco-mlp-dim)
    temperature: float = 1.0  # T (--moco-t: 1.0, the ResNet setups; the ViT setups 0.2); the loss is scaled by 2T
    momentum: float = 0.99  # m at the start (--moco-m; the 1000-epoch ResNet setup 0.996)
    # m rises from `momentum` to 1 along a half-cycle cosine, set every step (--moco-m-cos); false: constant m
    momentum_cos: bool = True
    # ViT only: the patch projection stays at its random init (--stop-grad-conv1; the ViT setups turn it on)
    stop_grad_conv1: bool = False


@dataclass(frozen=True)
class PretrainConfig:
    # "moco"; the paper's comparisons: "end2end" (the batch is the dictionary), "memory-bank" (InstDisc, K =
    # model.queue_size sampled negatives); "supervised": the labelled baseline on the same data; "mocov3": MoCo v3
    # (no queue; its settings are under v3, the backbone is model.arch: a ResNet or a ViT).
    method: Literal["moco", "end2end", "memory-bank", "supervised", "mocov3"] = "moco"
    model: ModelConfig = field(default_factory=ModelConfig)
    v3: MocoV3Config = field(default_factory=MocoV3Config)
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    data: DataConfig = field(default_factory=DataConfig)
    run: RunConfig = field(default_factory=RunConfig)

    # The step schedule's milestones follow optim.epochs (a cosine schedule has none to move); the warm-up too.
    SCHEDULES: ClassVar[tuple[Schedule, ...]] = (("optim.epochs", ("optim.milestones",), step_schedule, None),
                                                 ("optim.epochs", ("optim.warmup_epochs",), None, None))
    # The paths that move with data.path when the command does not set them itself (the kNN monitor's data).
    FOLLOWERS: ClassVar[tuple[str, ...]] = ("data.knn_path",)

    def check(self) -> None:
        """The one-line ConfigError of the first impossible value (:func:`validate_pretrain`)."""
        validate_pretrain(self)

    def unused_keys(self) -> tuple[str, ...]:
        """The settings its method does not use (:func:`unused_keys`), left out of a printed config."""
        return unused_keys(self)


def validate_pretrain(cfg: PretrainConfig) -> None:
    """Reject impossible values with a one-line error naming the key."""
    m, o, a, d, r = cfg.model, cfg.optim, cfg.augment, cfg.data, cfg.run
    archs = ARCHS + VIT_ARCHS
    checks = [
        (m.arch in archs, "model.arch", f"expected one of {list(archs)}, got {show(m.arch)}"
         f"{did_you_mean(m.arch, archs)}"),
        *mocov3_checks(cfg),
        (1 <= m.queue_size <= MAX_QUEUE, "model.queue_size", f"must be in [1, {MAX_QUEUE}] (the paper: 65536), got "
         f"{m.queue_size}"),
        (1 <= m.dim <= 65536, "model.dim", f"must be in [1, 65536] (the paper: 128), got {m.dim}"),
        *run_checks(r.device, r.seed, r.loggers),
        (0.0 <= m.momentum <= 1.0, "model.momentum", f"must be in [0, 1], got {m.momentum}"),
        (0 < m.temperature < math.inf, "model.temperature", f"must be finite and > 0, got {m.temperature}"),
        divisor_check("model.temperature", m.temperature),
        (m.bn_groups >= 1, "model.bn_groups", f"must be >= 1, got {m.bn_groups}"),
        (0.0 <= m.bank_momentum <= 1.0, "model.bank_momentum", f"must be in [0, 1], got {m.bank_momentum}"),
        (0 < o.lr < math.inf, "optim.lr", f"must be finite and > 0, got {o.lr}"),
        (o.batch_size >= 1, "optim.batch_size", f"must be >= 1, got {o.batch_size}"),
        (0 <= o.momentum < math.inf, "optim.momentum", f"must be finite and >= 0, got {o.momentum}"),
        (0 <= o.weight_decay < math.inf, "optim.weight_decay", f"must be finite and >= 0, got {o.weight_decay}"),
        (o.epochs >= 1, "optim.epochs", f"must be >= 1, got {o.epochs}"),
        (o.schedule != "step" or all(m < o.epochs for m in o.milestones), "optim.milestones",
         f"{list(o.milestones)} fall outside a {o.epochs}-epoch run (the lr would never drop there): set them below "
         f"optim.epochs, or leave them out to scale the preset's"),
        (a.crop_size >= 8, "augment.crop_size", f"must be >= 8, got {a.crop_size}"),
        (0 < a.crop_scale[0] <= a.crop_scale[1] <= 1, "augment.crop_scale", f"need 0 < min <= max <= 1, got "
         f"{list(a.crop_scale)}"),
        (0 < a.blur_sigma[0] <= a.blur_sigma[1], "augment.blur_sigma", f"need 0 < min <= max, got "
         f"{list(a.blur_sigma)}"),
        (d.path is not None, "data.path", "not set: pass --data DIR (an ImageFolder root) or --data embedded"),
        (d.workers >= 0, "data.workers", f"must be >= 0, got {d.workers}"),
        (r.log_every >= 1, "run.log_every", f"must be >= 1, got {r.log_every}"),
        (r.checkpoint_every >= 1, "run.checkpoint_every", f"must be >= 1, got {r.checkpoint_every}"),
        (r.checkpoint_steps >= 0, "run.checkpoint_steps", f"must be >= 0, got {r.checkpoint_steps}"),
        (r.keep_every >= 0, "run.keep_every", f"must be >= 0, got {r.keep_every}"),
        (r.dist_timeout_s > 0, "run.dist_timeout_s", f"must be > 0, got {r.dist_timeout_s}"),
        (r.knn_every >= 0, "run.knn_every", f"must be >= 0, got {r.knn_every}"),
        (r.knn_every == 0 or d.knn_path is not None, "data.knn_path", "not set, but run.knn_every asks for the "
         "kNN monitor: give a labelled root with train/ and val/ (or embedded)"),
        (all(math.isfinite(v) for v in a.mean), "augment.mean", f"must be finite, got {list(a.mean)}"),
        divisor_check("augment.std", a.std),
        (min(a.color_jitter) >= 0 and a.color_jitter[3] <= 0.5, "augment.color_jitter",
         f"need values >= 0 and hue <= 0.5, got {list(a.color_jitter)}"),
    ]
    for name in ("color_jitter_prob", "grayscale_prob", "blur_prob", "blur_prob_view2", "solarize_prob",
                 "solarize_prob_view2", "flip_prob"):
        value = getattr(a, name)
        checks.append((value is None or 0.0 <= value <= 1.0, f"augment.{name}", f"must be in [0, 1], got {value}"))
    require(checks)


# What MoCo v1/v2 configure in model.* and MoCo v3 does not use (its own settings are under v3.*).
_V3_UNUSED = {"queue_size": "it has no queue", "queue_init": "it has no queue", "dim": "use v3.dim",
              "mlp": "its heads are v3.mlp_dim wide", "momentum": "use v3.momentum",
              "temperature": "use v3.temperature", "bank_momentum": "it has no memory bank"}


def mocov3_checks(cfg: PretrainConfig) -> list[Check]:
    """What method and backbone must agree on: ViTs are for mocov3 and need timm; mocov3 refuses the v1/v2
    settings it would ignore, and the other methods the v3 ones, so that a value set there is never silently
    unused."""
    m, v, o = cfg.model, cfg.v3, cfg.optim
    vit = m.arch in VIT_ARCHS
    if cfg.method != "mocov3":
        v3_set = [f.name for f in dataclasses.fields(v) if getattr(v, f.name) != getattr(MocoV3Config(), f.name)]
        return [(not vit, "model.arch", f"{m.arch} is for method mocov3 (v1/v2 and the other methods use ResNets)"),
                (o.warmup_epochs == 0, "optim.warmup_epochs", f"only mocov3 warms up (its lr is set every step); "
                 f"method {cfg.method} sets the lr once per epoch, as the official v1/v2 code, got {o.warmup_epochs}"),
                (not v3_set, f"v3.{v3_set[0] if v3_set else ''}", f"not used by method {cfg.method} (the v3 section "
                 "is MoCo v3's: set method: mocov3, or model.* for v1/v2)")]
    defaults = ModelConfig()
    unused = [(name, why) for name, why in _V3_UNUSED.items() if getattr(m, name) != getattr(defaults, name)]
    return [
        (not unused, f"model.{unused[0][0] if unused else ''}", f"not used by method mocov3 ({unused[0][1]})"
         if unused else None),
        (not vit or extra_problem(m.arch, "timm", "vit") is None, "model.arch", extra_problem(m.arch, "timm", "vit")),
        (1 <= v.dim <= 65536, "v3.dim", f"must be in [1, 65536] (official: 256), got {v.dim}"),
        (1 <= v.mlp_dim <= 65536, "v3.mlp_dim", f"must be in [1, 65536] (official: 4096), got {v.mlp_dim}"),
        (0 < v.temperature < math.inf, "v3.temperature", f"must be finite and > 0, got {v.temperature}"),
        divisor_check("v3.temperature", v.temperature),
        (0.0 <= v.momentum <= 1.0, "v3.momentum", f"must be in [0, 1], got {v.momentum}"),
        (vit or not v.stop_grad_conv1, "v3.stop_grad_conv1", f"freezes a ViT's patch projection; {m.arch} has none"),
        (0 <= o.warmup_epochs < o.epochs, "optim.warmup_epochs", f"must be in [0, optim.epochs) (a warm-up as long "
         f"as the run never reaches the lr), got {o.warmup_epochs} for {o.epochs} epochs"),
    ]


def unused_keys(cfg: PretrainConfig) -> tuple[str, ...]:
    """The settings ``cfg.method`` does not use, dotted: each is refused at any value but its default (above),
    so leaving them out of a printed config loses nothing."""
    if cfg.method == "mocov3":
        return tuple(f"model.{name}" for name in _V3_UNUSED)
    return ("v3", "optim.warmup_epochs")
