"""The result record of ``moco eval voc|coco|lvis|cityscapes``, the same for every engine."""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Any

from moco_core.config import to_dict
from moco_core.model.backbone import BackboneInfo
from moco_core.run.progress import format_duration
from moco_core.run.records import write_record
from transfer.detection.config import TransferConfig, model_name
from transfer.detection.datasets import DetectionData
from transfer.embedded import EMBEDDED_VERSION


def embedded_version(cfg: TransferConfig) -> dict[str, str]:
    """``{"version": "scenes v2"}`` for the embedded data (part of the evaluation's recipe; the keypoint scenes:
    "keypoint scenes v1, scenes v2"), else nothing."""
    if cfg.data.path != "embedded":
        return {}
    if cfg.task == "keypoints":
        from transfer.detection.embedded_keypoints import KEYPOINTS_VERSION

        return {"version": f"keypoint scenes v{KEYPOINTS_VERSION}, scenes v{EMBEDDED_VERSION}"}
    if cfg.task == "densepose":
        from transfer.detection.embedded_densepose import DENSEPOSE_VERSION

        return {"version": f"dense pose scenes v{DENSEPOSE_VERSION}"}
    if cfg.task == "lvis":
        from transfer.detection.lvis import embedded_version as lvis_version

        return {"version": lvis_version()}
    return {"version": f"scenes v{EMBEDDED_VERSION}"}


def recipe_fields(cfg: Any, model: str) -> dict[str, Any]:
    """What a transfer record's ``config`` leads with, for any task's config (``schedule`` and ``solver``): the
    model's name, schedule, iterations, batch and the lr at that batch (linear scaling from 16 images)."""
    s = cfg.solver
    return {"model": model, "schedule": cfg.schedule, "iterations": s.iterations, "batch_size": s.batch_size,
            "lr": s.lr * s.batch_size / 16}


def null_nan(results: dict[str, Any]) -> dict[str, Any]:
    """``results`` with NaN (a metric with nothing to score, e.g. COCOeval's -1) as None: valid JSON, null."""
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in results.items()}


def record_config(cfg: TransferConfig, arch: str) -> dict[str, Any]:
    """The record's ``config``: the detector's name, schedule, iterations, batch and lr, then the whole config."""
    return {**recipe_fields(cfg, model_name(cfg, arch)), **to_dict(cfg)}


def write_transfer_record(run_dir: Path, cfg: TransferConfig, data: DetectionData, info: BackboneInfo,
                          results: dict[str, Any], history: list[dict[str, float]], *, engine: str,
                          details: dict[str, Any], started: float, train_time: float,
                          extra: dict[str, Any]) -> Path:
    """The result record of a VOC/COCO run, the same for every engine (main process only); prints a summary.

    ``details``: the engine's own top-level fields (processes, device, version); ``extra``: the caller's.
    """
    results = null_nan(results)  # an area range without ground truth scores NaN (COCOeval's -1)
    record = write_record(
        run_dir / "result.json", task=cfg.task, protocol=cfg.task, metrics=results, backbone=info,
        dataset={"path": cfg.data.path, "name": data.name, "root": str(data.root),
                 "train_split": "+".join(cfg.data.train), "test_split": cfg.data.test,
                 "train_images": len(data.train), "test_images": len(data.test), "classes": len(data.class_names),
                 "class_names": list(data.class_names), **embedded_version(cfg)},
        config=record_config(cfg, info.arch),
        history=history,
        extra={"engine": engine, **details, "wall_time_s": time.perf_counter() - started, "train_time_s": train_time,
               **extra})
    summary = " ".join(f"{k} {v:.2f}" for k, v in results.items() if isinstance(v, float))
    print(f"{cfg.task} ({model_name(cfg, info.arch)}, {engine}): {summary} in "
          f"{format_duration(time.perf_counter() - started)}", file=sys.stderr)
    return record
