"""Fixtures for the report tests: the golden fixture directory and a writer of small result records."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

GOLDEN = Path(__file__).resolve().parent / "golden"
SHA = "a1b2c3" + "0" * 58


def base_record(**overrides: Any) -> dict[str, Any]:
    """A valid linear record of a MoCo R18 checkpoint on the embedded data; keys overridden as given."""
    record: dict[str, Any] = {
        "schema": "moco.result", "version": 1, "task": "linear", "protocol": "linear",
        "metrics": {"top1": 50.0, "top5": 90.0},
        "backbone": {"source": "/runs/moco/checkpoint_last.pth.tar", "format": "moco-suite", "arch": "resnet18",
                     "sha256": SHA, "pretrain": {"method": "moco", "epochs": 15, "arch": "resnet18",
                                                 "config": {"data": {"path": "embedded"}}}},
        "dataset": {"path": "embedded", "classes": 8}, "config": {}, "history": [], "code_version": "0.1.0",
        "created": "2026-11-22T00:00:00+0000",
    }
    record.update(overrides)
    return record


WriteRecord = Callable[..., Path]


@pytest.fixture
def write_record(tmp_path: Path) -> WriteRecord:
    """write_record(relative_path, **overrides) -> the file, under tmp_path/"runs"."""

    def write(rel: str, data: Any = None, **overrides: Any) -> Path:
        path = tmp_path / "runs" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        content = data if data is not None else base_record(**overrides)
        path.write_text(content if isinstance(content, str) else json.dumps(content))
        return path

    return write


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    return tmp_path / "runs"
