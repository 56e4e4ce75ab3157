"""``moco eval retrieval``: read the datasets, extract the features once, rank by cosine, score each query variant
under each protocol, write one record."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import torch

from moco_core.config import ConfigError
from moco_core.model import backbone
from moco_core.model.backbone import load_backbone
from moco_core.model.taps import default_tap
from moco_core.run.progress import Progress
from moco_core.run.records import write_record
from moco_core.run.rundir import require_writable
from moco_core.run.runtime import resolve_device
from probes.retrieval import embedded
from probes.retrieval.config import RetrievalConfig
from probes.retrieval.data import RetrievalSet, read_set
from probes.retrieval.features import global_features, shape_of
from probes.retrieval.metric import evaluate


def datasets(cfg: RetrievalConfig) -> list[RetrievalSet]:
    """Every dataset asked for, read and checked before any model runs; the embedded ones generated first."""
    root = embedded.ensure_retrieval() if cfg.data.path == "embedded" else Path(str(cfg.data.path))
    return [read_set(root, name) for name in cfg.data.datasets]


def retrieval_eval(cfg: RetrievalConfig, pretrained: str, *, extra: dict[str, Any] | None = None,
                   show_progress: bool | str = True) -> Path:
    """mAP and mP@k of ``pretrained``'s global features on each dataset, query variant and protocol (percent),
    as metrics ``<dataset>/<cropped|full>/<protocol>/map`` (and ``mp@k``); returns the record's path."""
    output_dir = Path(str(cfg.run.output_dir))
    require_writable(output_dir)  # before the features: the record is written at the end
    sets = datasets(cfg)
    device = resolve_device(cfg.run.device)
    weights = backbone.read(pretrained, cfg.run.weights_format)
    torch.manual_seed(cfg.run.seed)
    model, info = load_backbone(weights, 1, arch=cfg.arch, crop_size=cfg.image_size if weights is None else None)
    model = model.to(device).eval()
    fixed = shape_of(model).fixed
    if fixed is not None and tuple(cfg.scales) != (1.0,):
        raise ConfigError(f"scales: this ViT ({info.arch}) has a fixed grid of position embeddings and reads only "
                          f"its {fixed}-px square; use scales [1.0]")
    normalisation = backbone.input_normalisation(weights)
    total = sum(len(s.images) + len(s.queries) * len(cfg.queries) for s in sets)
    progress = Progress(total, label="features", enabled=show_progress) if show_progress else None
    metrics: dict[str, float] = {}

    def features(items: list[tuple[Path, Any]], done: int) -> torch.Tensor:
        return global_features(model, items, image_size=cfg.image_size, scales=cfg.scales,
                               normalisation=normalisation, device=device, workers=cfg.data.workers,
                               progress=progress, done=done)

    done = 0
    for found in sets:
        bank = features([(path, None) for path in found.images], done)  # (N, D)
        done += len(found.images)
        for mode in cfg.queries:
            queries = features([(q.path, q.box if mode == "cropped" else None) for q in found.queries], done)
            done += len(found.queries)
            ranks = torch.argsort(queries @ bank.T, dim=1, descending=True, stable=True).cpu().numpy()  # (Q, N)
            for protocol in cfg.protocols:
                scores = evaluate(ranks, [q.truth for q in found.queries], protocol, cfg.kappas)
                metrics.update({f"{found.name}/{mode}/{protocol}/{name}": value for name, value in scores.items()
                                if not math.isnan(value)})  # NaN: no query has a positive under the protocol
    record = write_record(
        output_dir / "result.json", task="retrieval", protocol="revisitop", metrics=metrics, backbone=info,
        dataset={"path": cfg.data.path, "datasets": [s.record() for s in sets],
                 **({"version": f"retrieval scenes v{embedded.EMBEDDED_VERSION}"} if cfg.data.path == "embedded"
                    else {})},
        config={"image_size": cfg.image_size, "scales": list(cfg.scales), "queries": list(cfg.queries),
                "protocols": list(cfg.protocols), "kappas": list(cfg.kappas), "feature": default_tap(model),
                "similarity": "cosine", "seed": cfg.run.seed},
        extra={"query_variants": {"cropped": "the query cropped to its bbx (revisitop's protocol)",
                                  "full": "the whole query image (DINOv2's)"}, **(extra or {})})
    for key in sorted(k for k in metrics if k.endswith("/map")):
        print(f"retrieval {key.removesuffix('/map')}: mAP {metrics[key]:.2f}", file=sys.stderr)
    return record
