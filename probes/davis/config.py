"""``moco eval davis``'s config: DINO's ``eval_video_segmentation.py`` defaults (arXiv 2104.14294)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from moco_core.config import divisor_check, load_config, require, run_checks
from moco_core.model.weights.formats import format_checks


@dataclass(frozen=True)
class DavisDataConfig:
    path: str | None = None  # a folder holding DAVIS/ (or DAVIS/ itself), or "embedded"
    split: str = "val"  # the videos of ImageSets/2017/<split>.txt (DINO: val)
    short_side: int = 480  # frames read with this shorter side, the longer a multiple of 64 (DINO's read_frame)


@dataclass(frozen=True)
class PropagationConfig:
    context: int = 7  # previous frames whose predicted labels vote, besides the first frame's (DINO: n_last_frames)
    topk: int = 5  # source patches a target patch takes its label from (DINO: topk)
    temperature: float = 0.1  # vote weight exp(cosine / T) (DINO: 0.1, fixed in its code)
    radius: int = 12  # sources within this many patches in both directions; 0: anywhere (size_mask_neighborhood)


@dataclass(frozen=True)
class DavisRunConfig:
    output_dir: str | None = None  # None: runs/<preset>/<weights> (moco_core/run/naming.py)
    device: str = "auto"
    seed: int = 0  # draws the weights of "random"
    weights_format: str | None = None  # the method of weights whose file does not say (--weights-format)
    batch_size: int = 8  # frames per forward pass (DINO's bs: 6; the labels propagate one frame at a time anyway)
    save_masks: bool = True  # write the predicted palette PNGs under <output_dir>/masks/<video>/, as DINO does


@dataclass(frozen=True)
class DavisConfig:
    """``moco eval davis``: DINO's label propagation on DAVIS-2017 val, J&F as davis2017-evaluation."""

    arch: str | None = None  # None: read from the weights ("random" needs it)
    # the patch features read (moco_core.model.taps.DenseTaps): a ViT's patch (last block; DINO's) or patch4, a
    # ResNet's layer1..layer4 (strides 4..32); None: patch for a ViT, layer4 for a ResNet
    tap: str | None = None
    data: DavisDataConfig = field(default_factory=DavisDataConfig)
    propagation: PropagationConfig = field(default_factory=PropagationConfig)
    run: DavisRunConfig = field(default_factory=DavisRunConfig)


SPLITS = ("train", "val")  # DAVIS-2017's annotated splits (ImageSets/2017/{train,val}.txt)
SHORT_SIDE_LIMIT = 2160  # a frame's shorter side, at most: DAVIS's full resolution (Full-Resolution/ is 4K)


def load_davis_config(config: str | None, overrides: list[str], flags: dict[str, Any] | None = None) -> DavisConfig:
    """Defaults < YAML < ``--set`` < explicit flags, validated: one-line errors naming the key."""
    cfg: DavisConfig = load_config(DavisConfig, config, overrides, flags=flags)
    d, p = cfg.data, cfg.propagation
    require([
        (d.path is not None, "data.path", "not set: pass --data DIR (holding DAVIS/) or --data embedded"),
        (d.split in SPLITS, "data.split", f"expected one of {', '.join(SPLITS)}, got {d.split!r}"),
        (8 <= d.short_side <= SHORT_SIDE_LIMIT, "data.short_side",
         f"must be in [8, {SHORT_SIDE_LIMIT}], got {d.short_side}"),
        (p.context >= 0, "propagation.context", f"must be >= 0 (0: the first frame only), got {p.context}"),
        (p.topk >= 1, "propagation.topk", f"must be >= 1, got {p.topk}"),
        (0 < p.temperature < math.inf, "propagation.temperature", f"must be finite and > 0, got {p.temperature}"),
        divisor_check("propagation.temperature", p.temperature),
        (p.radius >= 0, "propagation.radius", f"must be >= 0 (0: no window), got {p.radius}"),
        (cfg.run.batch_size >= 1, "run.batch_size", f"must be >= 1, got {cfg.run.batch_size}"),
        *run_checks(cfg.run.device, cfg.run.seed),
        *format_checks(cfg.run.weights_format),
    ])
    return cfg
