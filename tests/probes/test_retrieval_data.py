"""Issue 60: revisitop's layout read as released (real file names, the pickle's keys, lists or numpy arrays), and
every broken layout or hostile ground-truth file refused in one line before any model runs."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from probes.retrieval.data import RetrievalDataError, read_set
from tests.probes.layouts import GND, SETS, revisitop_layout, write_gnd


@pytest.mark.parametrize("arrays", [False, True], ids=["lists", "numpy arrays"])
@pytest.mark.parametrize("name", ["roxford5k", "rparis6k"])
def test_the_release_layout_is_read_by_its_names(tmp_path: Path, name: str, arrays: bool) -> None:
    found = read_set(revisitop_layout(tmp_path, arrays=arrays), name)
    jpg = tmp_path / name / "jpg"
    assert found.images == tuple(jpg / f"{n}.jpg" for n in SETS[name]["images"])
    assert [q.path for q in found.queries] == [jpg / f"{n}.jpg" for n in SETS[name]["queries"]]
    assert [q.box for q in found.queries] == [tuple(g["bbx"]) for g in GND]
    assert [(q.truth.easy, q.truth.hard, q.truth.junk) for q in found.queries] == [
        (tuple(g["easy"]), tuple(g["hard"]), tuple(g["junk"])) for g in GND]
    assert found.record()["ground_truth"] == f"gnd_{name}.pkl"


class _CreatesAFile:
    """Unpickled by pickle.load, this would create the file its path names: open(path, "w") or os.mkdir(path)."""

    def __init__(self, path: Path, call: Any) -> None:
        self.path, self.call = path, call

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.call, (str(self.path), "w") if self.call is open else (str(self.path),))


@pytest.mark.parametrize(("call", "named"), [(open, "io.open"), (os.mkdir, "posix.mkdir")])
@pytest.mark.parametrize("where", ["top", "inside a query"])
def test_a_hostile_ground_truth_runs_nothing(tmp_path: Path, where: str, call: Any, named: str) -> None:
    root = revisitop_layout(tmp_path / "data")
    marker = tmp_path / "payload-ran"
    payload = _CreatesAFile(marker, call)
    gnd = [dict(g) for g in GND]
    if where == "inside a query":
        gnd[1]["junk"] = payload
    obj = payload if where == "top" else {"imlist": SETS["roxford5k"]["images"],
                                          "qimlist": SETS["roxford5k"]["queries"], "gnd": gnd}
    path = write_gnd(root / "roxford5k" / "gnd_roxford5k.pkl", obj)
    with pytest.raises(RetrievalDataError) as info:
        read_set(root, "roxford5k")
    message = str(info.value)
    assert message.startswith(f"{path}: refused: loading it would call {named}") and "\n" not in message
    assert not marker.exists()


def _gnd(**changes: Any) -> dict[str, Any]:
    names = SETS["roxford5k"]
    return {"imlist": names["images"], "qimlist": names["queries"], "gnd": [dict(g) for g in GND], **changes}


def _entry(**changes: Any) -> dict[str, Any]:
    return _gnd(gnd=[{**GND[0], **changes}, *GND[1:]])


@pytest.mark.parametrize(("content", "expected"), [
    (b"", "not a readable pickle"),
    (pickle.dumps(_gnd(), protocol=2)[:-20], "not a readable pickle"),
    (pickle.dumps([1, 2, 3]), "expected revisitop's dict of 'imlist', 'qimlist' and 'gnd', found a list"),
    (pickle.dumps({"imlist": []}), "expected revisitop's dict"),
    (pickle.dumps(_gnd(imlist=[1, 2])), "'imlist' must be a list of image names"),
    (pickle.dumps(_gnd(gnd=GND[:2])), "'gnd' must be a list of one dict a query (3 in 'qimlist'), found a list of 2"),
    (pickle.dumps(_entry(easy=[0, 12])), "'gnd' entry 0: 'easy' holds index 12 or 0, outside the 12 images"),
    (pickle.dumps(_entry(junk=[-1])), "'gnd' entry 0: 'junk' holds index -1 or -1, outside the 12 images"),
    (pickle.dumps(_entry(hard=["a"])), "'gnd' entry 0: 'hard' must be a list of image indices"),
    (pickle.dumps(_entry(hard=[[1], [2, 3]])), "'gnd' entry 0: 'hard' must be a list of image indices"),
    (pickle.dumps(_entry(bbx=[1, 2, 3])), "'gnd' entry 0: 'bbx' must be 4 finite numbers x1 < x2, y1 < y2"),
    (pickle.dumps(_entry(bbx=[5, 2, 3, 9])), "'bbx' must be 4 finite numbers"),
    (pickle.dumps(_entry(bbx=[0, 0, float("nan"), 9])), "'bbx' must be 4 finite numbers"),
    (pickle.dumps(_gnd(imlist=["../../etc/passwd", *SETS["roxford5k"]["images"][1:]])), "leaves"),
    (pickle.dumps(_gnd(imlist=["all_souls_999999", *SETS["roxford5k"]["images"][1:]])),
     "all_souls_999999.jpg: missing (1 of the 15 images gnd_roxford5k.pkl names are"),
], ids=lambda v: v[:40] if isinstance(v, str) else None)
def test_a_broken_ground_truth_is_one_line(tmp_path: Path, content: bytes, expected: str) -> None:
    root = revisitop_layout(tmp_path)
    (root / "roxford5k" / "gnd_roxford5k.pkl").write_bytes(content)
    with pytest.raises(RetrievalDataError) as info:
        read_set(root, "roxford5k")
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_a_missing_folder_or_file_names_the_layout(tmp_path: Path) -> None:
    root = revisitop_layout(tmp_path)
    with pytest.raises(RetrievalDataError, match=r"roxford5k/jpg/\*\.jpg and .*gnd_roxford5k\.pkl"):
        read_set(tmp_path / "elsewhere", "roxford5k")
    (root / "rparis6k" / "gnd_rparis6k.pkl").unlink()
    with pytest.raises(RetrievalDataError, match="revisitop ground truth not found: .*gnd_rparis6k.pkl"):
        read_set(root, "rparis6k")
    with pytest.raises(RetrievalDataError, match="is not a folder name"):
        read_set(root, "../rparis6k")


def test_the_embedded_generator_writes_the_same_layout(tmp_path: Path) -> None:
    """Our generator's files read as revisitop's: every query has easy, hard and junk images, none in imlist."""
    from probes.retrieval.embedded import DATASETS, LANDMARKS, VIEWS, ensure_retrieval

    root = ensure_retrieval(tmp_path)
    for name in DATASETS:
        found = read_set(root, name)
        assert not {q.path for q in found.queries} & set(found.images)
        for q in found.queries:
            assert [len(q.truth.easy), len(q.truth.hard), len(q.truth.junk)] == list(VIEWS.values())
            x1, y1, x2, y2 = q.box
            assert 0 <= x1 < x2 <= 64 and 0 <= y1 < y2 <= 64
        assert np.unique([i for q in found.queries for i in q.truth.easy]).size == VIEWS["easy"] * LANDMARKS
