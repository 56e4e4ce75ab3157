"""Result records: atomic, and never written over another record, even by concurrent evaluations."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import pytest

from moco_core.model.backbone import BackboneInfo
from moco_core.run import records

INFO = BackboneInfo(source="random", format="random", arch="resnet18", sha256=None, pretrain={"method": "random init"})


def _write(path: str, trial: int) -> str:
    return str(records.write_record(Path(path), task="knn", protocol="knn", metrics={"top1": float(trial)},
                                    backbone=INFO, dataset={"path": "x"}, config={"trial": trial}))


def test_records_are_never_overwritten(tmp_path: Path) -> None:
    first = _write(str(tmp_path / "result.json"), 1)
    second = _write(str(tmp_path / "result.json"), 2)
    third = _write(str(tmp_path / "x.result.json"), 3)
    assert [Path(p).name for p in (first, second, third)] == ["result.json", "result.1.result.json", "x.result.json"]
    assert [json.loads(Path(p).read_text())["config"]["trial"] for p in (first, second, third)] == [1, 2, 3]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.1.result.json", "result.json", "x.result.json"]


def test_concurrent_evaluations_into_one_directory_lose_nothing(tmp_path: Path) -> None:
    n = 12
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        written = pool.starmap(_write, [(str(tmp_path / "result.json"), t) for t in range(n)])
    assert len(set(written)) == n
    trials = sorted(json.loads(Path(p).read_text())["config"]["trial"] for p in written)
    assert trials == list(range(n))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_without_hard_links_the_name_is_reserved_exclusively(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_links(src: str, dst: str) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    paths = [_write(str(tmp_path / "result.json"), t) for t in range(3)]
    assert [Path(p).name for p in paths] == ["result.json", "result.1.result.json", "result.2.result.json"]
    assert [json.loads(Path(p).read_text())["config"]["trial"] for p in paths] == [0, 1, 2]
