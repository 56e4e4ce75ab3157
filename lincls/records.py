"""Result records: one JSON file per evaluation, read later by ``moco report`` (which imports none of this)."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from lincls.backbone import BackboneInfo
from moco_core.rundir import code_version

SCHEMA = "moco.result"
VERSION = 1


def write_record(
    path: Path, *, task: str, protocol: str, metrics: dict[str, float], backbone: BackboneInfo,
    dataset: dict[str, Any], config: dict[str, Any], history: list[dict[str, float]] | None = None,
    extra: dict[str, Any] | None = None,
) -> None:
    """Write the record atomically (temporary file, then rename): a reader never sees half a record."""
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
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
