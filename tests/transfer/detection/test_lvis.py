"""LVIS: the repeat-factor rule against hand-computed factors, the sampler's passes and resume, the official LVIS API
called on toy cases whose AP is worked out by hand (federated neg / not-exhaustive lists included), the reader in
detectron2's layout and the embedded long-tailed set."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from moco_core.config import ConfigError
from moco_core.data.data import DatasetError
from transfer import engine
from transfer.detection.lvis import ensure_lvis, lvis_evaluate, parse_lvis, parse_name
from transfer.detection.sampling import RepeatFactorSampler, repeat_factors


def _image(*categories: int) -> dict[str, Any]:
    return {"annotations": [{"category_id": c} for c in categories]}


def test_repeat_factors_match_the_hand_computed_rule() -> None:
    # 5 images, t = 0.5. Category 0 is in 3 of 5 images: sqrt(0.5 / 0.6) < 1 -> 1. Category 1 (twice in image 1,
    # counted once) and 2 are in 1 of 5: sqrt(0.5 / 0.2) = sqrt(2.5). An image takes its rarest category's
    # factor; the empty image 4 gets 1.
    dicts = [_image(0), _image(0, 1, 1), _image(0), _image(2), _image()]
    factors = repeat_factors(dicts, 0.5)
    assert factors.tolist() == pytest.approx([1.0, math.sqrt(2.5), 1.0, math.sqrt(2.5), 1.0])
    assert repeat_factors(dicts, 0.001).tolist() == [1.0] * 5  # LVIS's t: nothing is that rare here


def test_sampler_rounds_stochastically_per_pass_and_is_reproducible() -> None:
    factors = torch.tensor([1.0, 2.25, 1.5, 3.0])
    sampler = RepeatFactorSampler(factors, seed=3)
    totals = Counter()
    for epoch in range(200):
        sampler.set_epoch(epoch)
        counts = Counter(sampler)
        assert counts[0] == 1 and counts[1] in (2, 3) and counts[2] in (1, 2) and counts[3] == 3
        assert len(sampler) == sum(counts.values())
        totals.update(counts)
    assert [totals[i] / 200 for i in range(4)] == pytest.approx([1.0, 2.25, 1.5, 3.0], abs=0.1)
    sampler.set_epoch(7)
    again = RepeatFactorSampler(factors, seed=3)
    again.set_epoch(7)
    assert list(sampler) == list(again)


def test_sampler_splits_each_pass_among_processes() -> None:
    factors = torch.tensor([1.0, 2.5, 1.5, 3.0, 1.2])
    ranks = [RepeatFactorSampler(factors, num_replicas=2, rank=r, seed=0) for r in range(2)]
    whole = RepeatFactorSampler(factors, seed=0)
    for epoch in (0, 1):
        for sampler in (*ranks, whole):
            sampler.set_epoch(epoch)
        parts = [list(s) for s in ranks]
        assert len(parts[0]) == len(parts[1])
        full = list(whole)
        assert sorted(parts[0] + parts[1]) == sorted(full[: len(full) // 2 * 2])


def test_endless_resumes_mid_run_across_passes_of_different_lengths() -> None:
    factors = torch.tensor([1.0, 2.5, 1.5, 3.5, 1.7, 1.0])
    batches = []
    for start in (0, 9):
        sampler = RepeatFactorSampler(factors, seed=1)
        loader = DataLoader(list(range(6)), batch_size=2, sampler=sampler, drop_last=True)
        stream = engine.endless(loader, sampler, start)
        batches.append([next(stream).tolist() for _ in range(30 - start)])
    lengths = []
    for epoch in range(6):
        sampler.set_epoch(epoch)
        lengths.append(len(sampler) // 2)
    assert len(set(lengths)) > 1  # the passes do differ in length: the resume crosses them
    assert batches[1] == batches[0][9:]


# ---- the LVIS API on toy cases ----

SIZE = 40


def _rect_rle(x0: int, y0: int, x1: int, y1: int) -> dict[str, Any]:
    from pycocotools import mask as mask_utils

    mask = np.zeros((SIZE, SIZE), dtype=np.uint8)
    mask[y0:y1, x0:x1] = 1
    rle = mask_utils.encode(np.asfortranarray(mask))
    return {"size": [SIZE, SIZE], "counts": rle["counts"].decode("ascii")}


def _polygon(x0: int, y0: int, x1: int, y1: int) -> list[list[float]]:
    return [[x0, y0, x1, y0, x1, y1, x0, y1]]


def _gt(tmp_path: Path, *, neg1: list[int], not_exhaustive1: list[int]) -> Path:
    """Image 1: category 1 at (0,0)-(20,20). Image 2: category 2 at (0,0)-(30,20), category 3 at (20,20)-(40,40)."""
    doc = {
        "images": [{"id": 1, "width": SIZE, "height": SIZE, "coco_url": "http://x/val2017/000000000001.jpg",
                    "neg_category_ids": neg1, "not_exhaustive_category_ids": not_exhaustive1},
                   {"id": 2, "width": SIZE, "height": SIZE, "coco_url": "http://x/val2017/000000000002.jpg",
                    "neg_category_ids": [], "not_exhaustive_category_ids": []}],
        "categories": [{"id": 1, "name": "a", "frequency": "f"}, {"id": 2, "name": "b", "frequency": "c"},
                       {"id": 3, "name": "c", "frequency": "r"}],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 20, 20], "area": 400,
             "segmentation": _polygon(0, 0, 20, 20)},
            {"id": 2, "image_id": 2, "category_id": 2, "bbox": [0, 0, 30, 20], "area": 600,
             "segmentation": _polygon(0, 0, 30, 20)},
            {"id": 3, "image_id": 2, "category_id": 3, "bbox": [20, 20, 20, 20], "area": 400,
             "segmentation": _polygon(20, 20, 40, 40)}],
    }
    path = tmp_path / "lvis_toy.json"
    path.write_text(json.dumps(doc))
    return path


def _result(image_id: int, category_id: int, box: tuple[int, int, int, int], score: float) -> dict[str, Any]:
    x0, y0, x1, y1 = box
    return {"image_id": image_id, "category_id": category_id, "bbox": [x0, y0, x1 - x0, y1 - y0], "score": score,
            "segmentation": _rect_rle(*box)}


# Category 1 found exactly (AP 1); category 2's box (0,0)-(20,20) covers 400 of its 600 pixels: IoU 2/3, a true
# positive at the thresholds 0.50-0.65 (4 of 10), so AP 0.4, AP50 1, AP75 0; category 3 found exactly (AP 1).
BASE = [_result(1, 1, (0, 0, 20, 20), 0.9), _result(2, 2, (0, 0, 20, 20), 0.9), _result(2, 3, (20, 20, 40, 40), 0.8)]


@pytest.mark.parametrize(("extra", "neg1", "not_exhaustive1", "expected_ap3", "expected_ap1"), [
    ([], [], [], 1.0, 1.0),
    # A category-3 detection on image 1, scored above the true one: image 1 says nothing about category 3 (neither
    # annotated nor in its neg list): not scored.
    ([_result(1, 3, (20, 20, 40, 40), 0.95)], [], [], 1.0, 1.0),
    # ... listed as absent from image 1: a false positive ranked first, precision 1/2 at every recall: AP 0.5.
    ([_result(1, 3, (20, 20, 40, 40), 0.95)], [3], [], 0.5, 1.0),
    # A second category-1 detection on image 1 away from its object, scored first: a false positive (AP 0.5)...
    ([_result(1, 1, (20, 20, 40, 40), 0.95)], [], [], 1.0, 0.5),
    # ... but not where category 1 is not exhaustively annotated in image 1: unmatched detections are ignored.
    ([_result(1, 1, (20, 20, 40, 40), 0.95)], [], [1], 1.0, 1.0),
])
def test_lvis_api_scores_toy_cases_as_worked_out_by_hand(tmp_path: Path, extra: list, neg1: list[int],
                                                         not_exhaustive1: list[int], expected_ap3: float,
                                                         expected_ap1: float) -> None:
    pytest.importorskip("lvis")
    metrics = lvis_evaluate(BASE + extra, _gt(tmp_path, neg1=neg1, not_exhaustive1=not_exhaustive1),
                            iou_types=("segm",))
    ap1, ap2, ap3 = expected_ap1, 0.4, expected_ap3
    assert metrics["segm_AP"] == pytest.approx(100 * (ap1 + ap2 + ap3) / 3, abs=1e-6)
    assert metrics["segm_AP50"] == pytest.approx(100 * (ap1 + 1.0 + ap3) / 3, abs=1e-6)
    assert metrics["segm_AP75"] == pytest.approx(100 * (ap1 + 0.0 + ap3) / 3, abs=1e-6)
    # frequency groups: category 1 is frequent, 2 common, 3 rare
    assert (metrics["segm_APf"], metrics["segm_APc"], metrics["segm_APr"]) == pytest.approx(
        (100 * ap1, 100 * ap2, 100 * ap3), abs=1e-6)


def test_lvis_api_keeps_300_detections_per_image_and_scores_boxes(tmp_path: Path) -> None:
    pytest.importorskip("lvis")
    gt = _gt(tmp_path, neg1=[], not_exhaustive1=[])
    # 300 better-scored false positives of category 1 on image 1 push the true detection out of the 300 kept
    clutter = [_result(1, 1, (30, 30, 38, 38), 0.99) for _ in range(300)]
    assert lvis_evaluate(BASE + clutter, gt, iou_types=("segm",))["segm_APf"] == 0.0
    assert lvis_evaluate(BASE + clutter, gt, iou_types=("segm",), max_detections=301)["segm_APf"] > 0
    boxes = lvis_evaluate(BASE, gt, iou_types=("bbox",))
    assert boxes["bbox_AP"] == pytest.approx(100 * (1 + 0.4 + 1) / 3, abs=1e-6)  # the same boxes as the masks
    assert lvis_evaluate([], gt, iou_types=("segm",))["segm_AP"] == 0.0


# ---- the reader ----

def test_parse_name_takes_detectron2s_names_and_ones_own_files() -> None:
    spec = parse_name("lvis_v0.5_train")
    assert (spec.annotations, spec.folder) == (Path("lvis/lvis_v0.5_train.json"), Path("coco"))
    custom = parse_name("ann/mine.json:pictures")
    assert (custom.annotations, custom.folder, custom.year) == (Path("ann/mine.json"), Path("pictures"), None)
    with pytest.raises(ConfigError, match="lvis_v0.5_<split>"):
        parse_name("lvis_v2_train")


def test_parse_lvis_takes_the_file_from_coco_url_and_checks_the_federated_fields(tmp_path: Path) -> None:
    doc = json.loads(_gt(tmp_path, neg1=[3], not_exhaustive1=[1]).read_text())
    dicts, names, mapping = parse_lvis(doc, tmp_path / "coco", where="toy.json")
    assert dicts[0]["file_name"] == str((tmp_path / "coco" / "val2017" / "000000000001.jpg").absolute())
    assert (dicts[0]["neg_category_ids"], dicts[0]["not_exhaustive_category_ids"]) == ([3], [1])
    assert names == ["a", "b", "c"] and mapping == {0: 1, 1: 2, 2: 3}
    assert [a["category_id"] for a in dicts[1]["annotations"]] == [1, 2]  # LVIS id - 1
    del doc["images"][1]["neg_category_ids"]
    with pytest.raises(DatasetError, match="image 2: 'neg_category_ids' must be a list"):
        parse_lvis(doc, tmp_path, where="toy.json")
    doc = json.loads(_gt(tmp_path, neg1=[], not_exhaustive1=[]).read_text())
    doc["categories"][0]["frequency"] = "x"
    with pytest.raises(DatasetError, match=r"categories\[0\] needs a 'frequency' of r, c or f"):
        parse_lvis(doc, tmp_path, where="toy.json")


def test_embedded_set_is_long_tailed_in_the_real_layout(tmp_path: Path) -> None:
    root = ensure_lvis(tmp_path / "lvis_root", train=60, val=10, size=48)
    train = json.loads((root / "lvis" / "lvis_v0.5_train.json").read_text())
    assert (root / "coco" / "train2017" / train["images"][0]["coco_url"].split("/")[-1]).is_file()
    counts = Counter(a["category_id"] for a in train["annotations"])
    assert len(train["categories"]) == 16
    head, tail = sum(counts[c] for c in (1, 2, 3)), sum(counts[c] for c in range(9, 17))
    assert head > 2 * tail  # the 3 most likely classes hold more objects than the 8 least likely, twice over
    images_with = Counter(c for _, c in {(a["image_id"], a["category_id"]) for a in train["annotations"]})
    for cat in train["categories"]:
        n = images_with.get(cat["id"], 0)
        assert cat["frequency"] == ("r" if n <= 10 else "c" if n <= 100 else "f")
    for image in train["images"]:
        present = {a["category_id"] for a in train["annotations"] if a["image_id"] == image["id"]}
        assert not present & set(image["neg_category_ids"])
    assert ensure_lvis(tmp_path / "lvis_root", train=60, val=10, size=48) == root  # DONE: not rewritten


def test_the_real_layout_fixture_loads_through_the_configured_names(tmp_path: Path) -> None:
    from tests.layouts import detection_layout
    from transfer.detection.config import load_transfer_config
    from transfer.detection.datasets import load_data

    root = detection_layout(tmp_path / "datasets", train=6, test=3)
    cfg = load_transfer_config("lvis", None, [], {"data": {"path": str(root)}})  # the paper's preset, real names
    data = load_data(cfg)
    assert data.name == "LVIS v0.5_train" and len(data.test) == 3 and len(data.class_names) == 16
    assert all(Path(d["file_name"]).parent == root / "coco" / "val2017" for d in data.test)
    assert data.coco_gt == root / "lvis" / "lvis_v0.5_val.json"
    (root / "lvis" / "lvis_v0.5_train.json").rename(root / "lvis_v0.5_train.json")
    with pytest.raises(DatasetError, match="lvis_v0.5_train.json not found .expected detectron2's layout"):
        load_data(cfg)


def test_embedded_classes_differ_by_shape_and_window_never_by_colour() -> None:
    """Each of the 8 shapes comes solid and as a ring; every object is blue, and a ring's centre shows the scene's
    grey where a solid object's shows its blue (lvis scenes v1 told classes apart by colour, which MoCo's
    augmentation teaches a backbone to ignore)."""
    from moco_core.data import shapes
    from transfer import embedded
    from transfer.detection import lvis

    names, kinds = lvis.embedded_kinds()
    assert sorted(names) == sorted(f"{s}_{style}" for s in shapes.CLASSES for style in ("solid", "ring"))
    assert all(name.endswith("_ring") == (window > 0) for name, window in zip(names, kinds.windows, strict=True))
    seen = {False: 0, True: 0}
    for image, objects in embedded.scenes("train", 40, size=128, kinds=kinds, stream=lvis._STREAM):
        pixels = np.asarray(image, dtype=np.float64)
        for obj in objects:
            window = kinds.windows[obj["category_id"]]
            x, y = np.round(obj["outline"].mean(axis=0)).astype(int)
            extent = np.ptp(obj["outline"], axis=0).max()
            centre = obj["label"][y - 1:y + 2, x - 1:x + 2]
            if extent < 24 or not (centre == obj["index"]).all():  # too small to hold a window, or covered
                continue
            r, g, b = pixels[y - 1:y + 2, x - 1:x + 2].reshape(-1, 3).mean(axis=0)
            assert (b - max(r, g) > 40) != (window > 0), (names[obj["category_id"]], (r, g, b))
            seen[window > 0] += 1
    assert min(seen.values()) >= 5, seen
