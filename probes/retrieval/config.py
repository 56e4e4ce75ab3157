"""``moco eval retrieval``'s config: the reference's defaults (facebookresearch/dino ``eval_image_retrieval.py``
with revisitop's protocol), each with its source."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from moco_core.config import cpu_workers, load_config, require, run_checks
from moco_core.model.weights.formats import format_checks
from probes.retrieval.data import DATASETS, NAME
from probes.retrieval.embedded import DATASETS as EMBEDDED
from probes.retrieval.metric import PROTOCOLS

QUERY_MODES = ("cropped", "full")  # revisitop's query cropped to its bbx; DINOv2's whole query image


@dataclass(frozen=True)
class RetrievalDataConfig:
    path: str | None = None  # a folder holding <name>/jpg and <name>/gnd_<name>.pkl (revisitop's), or "embedded"
    datasets: tuple[str, ...] = DATASETS  # revisitop's rOxford5k and rParis6k
    workers: int = field(default_factory=lambda: cpu_workers(4))  # image-decoding processes


@dataclass(frozen=True)
class RetrievalRunConfig:
    output_dir: str | None = None  # None: runs/<preset>/<weights> (moco_core/run/naming.py)
    device: str = "auto"
    seed: int = 0  # draws the weights of "random" (as eval linear's run.seed)
    weights_format: str | None = None  # the method of weights whose file does not say (--weights-format)


@dataclass(frozen=True)
class RetrievalConfig:
    """``moco eval retrieval``: one global feature an image (the backbone's default tap, L2-normalised), cosine
    ranking, revisitop's mAP and mP@k (arXiv 1803.11285)."""

    arch: str | None = None  # None: read from the weights ("random" needs it)
    # the longer side an image is shrunk to, aspect kept (DINO's eval_image_retrieval.py: --imsize 224, PIL's
    # thumbnail, never enlarged)
    image_size: int = 224
    # each image's feature is the sum over these scales of the image resized by them, then L2-normalised
    # (DINO's --multiscale: 1, 1/sqrt(2), 1/2); one scale by default, as DINO's default
    scales: tuple[float, ...] = (1.0,)
    queries: tuple[str, ...] = QUERY_MODES  # both query variants, each labelled in the record
    protocols: tuple[str, ...] = ("medium", "hard")  # revisitop's; "easy" too where asked
    kappas: tuple[int, ...] = (1, 5, 10)  # mP@k (revisitop's example_evaluate.py)
    data: RetrievalDataConfig = field(default_factory=RetrievalDataConfig)
    run: RetrievalRunConfig = field(default_factory=RetrievalRunConfig)


def load_retrieval_config(config: str | None, overrides: list[str],
                          flags: dict[str, Any] | None = None) -> RetrievalConfig:
    """Defaults < YAML < ``--set`` < explicit flags, validated: one-line errors naming the key."""
    cfg: RetrievalConfig = load_config(RetrievalConfig, config, overrides, flags=flags)
    d = cfg.data
    require([
        (16 <= cfg.image_size <= 4096, "image_size", f"must be 16 to 4096 pixels, got {cfg.image_size}"),
        (bool(cfg.scales) and all(0.1 <= s <= 4 and math.isfinite(s) for s in cfg.scales), "scales",
         f"need 1 or more scales in [0.1, 4], got {list(cfg.scales)}"),
        (bool(cfg.queries) and set(cfg.queries) <= set(QUERY_MODES), "queries",
         f"expected some of {', '.join(QUERY_MODES)}, got {list(cfg.queries)}"),
        (bool(cfg.protocols) and set(cfg.protocols) <= set(PROTOCOLS), "protocols",
         f"expected some of {', '.join(PROTOCOLS)}, got {list(cfg.protocols)}"),
        (all(1 <= k <= 10_000 for k in cfg.kappas), "kappas", f"each k must be 1 to 10000, got {list(cfg.kappas)}"),
        (d.path is not None, "data.path", "not set: pass --data ROOT (holding roxford5k/ and rparis6k/ in "
                                          "revisitop's layout) or --data embedded"),
        (bool(d.datasets) and all(NAME.fullmatch(n) for n in d.datasets), "data.datasets",
         f"expected folder names such as roxford5k,rparis6k, got {list(d.datasets)}"),
        (d.path != "embedded" or set(d.datasets) <= set(EMBEDDED), "data.datasets",
         f"the embedded data holds {', '.join(EMBEDDED)} (the preset retrieval_embedded names them), not "
         f"{', '.join(d.datasets)}"),
        (d.workers >= 0, "data.workers", f"must be >= 0, got {d.workers}"),
        *run_checks(cfg.run.device, cfg.run.seed),
        *format_checks(cfg.run.weights_format),
    ])
    return cfg
