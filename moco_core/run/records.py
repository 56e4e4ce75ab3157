"""Result records: one JSON file per evaluation, read later by ``moco report`` (which imports none of this)."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from moco_core import smoke
from moco_core.model.backbone import BackboneInfo
from moco_core.run.rundir import code_version

SCHEMA = "moco.result"
VERSION = 1


def write_record(
    path: Path, *, task: str, protocol: str, metrics: dict[str, float], backbone: BackboneInfo,
    dataset: dict[str, Any], config: dict[str, Any], history: list[dict[str, float]] | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write the record atomically and never over another one; returns the path written.

    The JSON goes to a temporary file, which is then hard-linked to ``path``: a reader never sees half a record,
    and the link fails if ``path`` exists. Then ``<stem>.1.result.json``, ``.2``, ... are tried, so evaluations
    writing into one directory at the same time, or an evaluation run again, all keep their records (``moco
    report`` reads ``result.json`` and ``*.result.json`` and counts each as a trial).
    """
    record = {
        "schema": SCHEMA,
        "version": VERSION,
        "task": task,  # "linear" or "knn"
        "protocol": protocol,  # "linear" (the paper's), "linear-cached" (not the paper's), "knn"
        "metrics": metrics,
        "backbone": dataclasses.asdict(backbone),
        "dataset": dataset,
        "config": config,
        "history": history or [],
        **(extra or {}),
        # MOCO_SMOKE=1, or weights a smoke run made: numbers that mean nothing (moco_core/smoke.py)
        **smoke.record_marker(backbone.pretrain.get("smoke") is True),
        "code_version": code_version(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(record, f, indent=2, default=str)
            f.write("\n")
        os.chmod(tmp, 0o644)
        return _link_unused(Path(tmp), path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def _link_unused(tmp: Path, path: Path) -> Path:
    """Hard-link ``tmp`` to ``path`` or, if taken, to the first free ``<stem>.<n>.result.json`` beside it."""
    stem = path.name.removesuffix(".result.json").removesuffix(".json")
    for n in range(100_000):
        target = path if n == 0 else path.with_name(f"{stem}.{n}.result.json")
        try:
            os.link(tmp, target)
            return target
        except FileExistsError:
            continue
        except OSError:  # no hard links here: reserve the name exclusively, then rename over the placeholder
            try:
                os.close(os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            except FileExistsError:
                continue
            os.replace(tmp, target)
            return target
    raise FileExistsError(f"no free record name beside {path}")
