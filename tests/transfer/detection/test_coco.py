"""The COCO reader: id mapping, boxes, segmentations, empty images and one-line errors."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from moco_core.data.data import DatasetError
from transfer.detection.coco import (
    decode_rle_string,
    encode_rle_string,
    filter_empty,
    load_coco,
    parse_coco,
    require_annotations,
)


def coco_doc() -> dict[str, Any]:
    """Three images (one without annotations, one with only a crowd), categories 7 and 2 (unsorted)."""
    return {
        "images": [{"id": 30, "file_name": "c.jpg", "width": 40, "height": 20},
                   {"id": 10, "file_name": "a.jpg", "width": 100, "height": 80},
                   {"id": 20, "file_name": "b.jpg", "width": 50, "height": 50}],
        "categories": [{"id": 7, "name": "dog"}, {"id": 2, "name": "cat"}],
        "annotations": [
            {"id": 1, "image_id": 10, "category_id": 7, "bbox": [10, 20, 30, 40], "iscrowd": 0, "area": 1,
             "segmentation": [[10, 20, 40, 20, 40, 60], [1, 2, 3, 4]]},  # the 2-point polygon is dropped
            {"id": 2, "image_id": 10, "category_id": 2, "bbox": [90.5, 70, 20, 20], "iscrowd": 0},  # clipped
            {"id": 3, "image_id": 30, "category_id": 2, "bbox": [0, 0, 40, 20], "iscrowd": 1,
             "segmentation": {"size": [20, 40], "counts": [100, 700]}},
            {"id": 4, "image_id": 10, "category_id": 2, "bbox": [1, 1, 2, 2], "segmentation": [[1, 1, 2, 2]]},
        ],
    }


def test_parse_maps_ids_orders_images_and_converts_boxes(tmp_path: Path) -> None:
    dicts, names, mapping = parse_coco(coco_doc(), tmp_path)
    assert names == ["cat", "dog"] and mapping == {0: 2, 1: 7}
    assert [d["image_id"] for d in dicts] == [10, 20, 30]
    a, b, c = dicts
    assert a["file_name"] == str(tmp_path.absolute() / "a.jpg") and (a["height"], a["width"]) == (80, 100)
    assert a["annotations"] == [  # annotation 4 had only an invalid polygon: dropped, as detectron2 does
        {"bbox": [10.0, 20.0, 40.0, 60.0], "category_id": 1, "iscrowd": 0, "difficult": False,
         "segmentation": [[10.0, 20.0, 40.0, 20.0, 40.0, 60.0]]},
        {"bbox": [90.5, 70.0, 100.0, 80.0], "category_id": 0, "iscrowd": 0, "difficult": False},
    ]
    assert b["annotations"] == []
    [crowd] = c["annotations"]
    assert crowd["iscrowd"] == 1 and crowd["segmentation"]["size"] == [20, 40]
    assert decode_rle_string(crowd["segmentation"]["counts"]) == [100, 700]


def test_rle_strings_round_trip() -> None:
    # 100 is 3 * 32 + 4: low 5 bits 4 with the continuation bit (4 + 32 + 48 = "T"), then 3 ("3")
    assert encode_rle_string([100]) == "T3"
    rng = np.random.default_rng(0)
    for _ in range(200):
        runs = [int(v) for v in rng.integers(0, 5000, size=int(rng.integers(1, 12)))]
        assert decode_rle_string(encode_rle_string(runs)) == runs  # deltas from two runs back may be negative


@pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")  # inside pycocotools' decode
def test_rle_strings_agree_with_pycocotools() -> None:
    mask_util = pytest.importorskip("pycocotools.mask")
    rng = np.random.default_rng(0)
    for _ in range(20):
        h, w = (int(v) for v in rng.integers(1, 40, size=2))
        mask = np.asfortranarray((rng.random((h, w)) < rng.random()).astype(np.uint8))
        counts = mask_util.encode(mask)["counts"].decode()
        runs = decode_rle_string(counts)
        assert sum(runs) == h * w and encode_rle_string(runs) == counts
        flat = np.repeat(np.arange(len(runs)) % 2, runs).astype(np.uint8)  # runs alternate 0, 1, column-major
        np.testing.assert_array_equal(flat.reshape(w, h).T, mask)
        decoded = mask_util.decode({"size": [h, w], "counts": encode_rle_string(runs).encode()})
        np.testing.assert_array_equal(decoded, mask)


def test_filter_empty_and_require_annotations(tmp_path: Path) -> None:
    dicts, _, _ = parse_coco(coco_doc(), tmp_path)
    kept = filter_empty(dicts)
    assert [d["image_id"] for d in kept] == [10]  # 20 has nothing, 30 only a crowd region
    require_annotations(dicts, "train2017")
    with pytest.raises(DatasetError, match=r"^train2017: no annotated object in 2 images"):
        require_annotations(dicts[1:], "train2017")


def mutate(path: str, value: Any) -> dict[str, Any]:
    """coco_doc() with the entry at ``path`` ("annotations.0.bbox") replaced, or deleted when value is ...."""
    doc = coco_doc()
    *parents, last = path.split(".")
    node: Any = doc
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    key = int(last) if isinstance(node, list) else last
    if value is ...:
        del node[key]
    else:
        node[key] = copy.deepcopy(value)
    return doc


@pytest.mark.parametrize(("path", "value", "message"), [
    ("images", ..., "'images' must be a list, found missing"),
    ("annotations", {"a": 1}, "'annotations' must be a list, found a dict"),
    ("categories", [], "'categories' is empty"),
    ("categories.0", 7, "categories[0] is a int, expected an object"),
    ("categories.1.id", 7, "category id 7 appears twice"),
    ("categories.0.name", None, "categories[0] needs an integer 'id' and a non-empty 'name'"),
    ("images.1.id", 30, "image id 30 appears twice"),
    ("images.1.id", "10", "images[1] needs an integer 'id'"),
    ("images.0.width", 0, "image 30: width and height must be positive integers, got 0 x 20"),
    ("annotations.0.image_id", 99, "annotations[0] (id 1): image_id 99 is not in 'images'"),
    ("annotations.0.category_id", 1, "annotations[0] (id 1): category_id 1 is not in 'categories'"),
    ("annotations.1.bbox", [1, 2, 3], "'bbox' must be 4 finite numbers"),
    ("annotations.1.bbox", [1, 2, float("inf"), 3], "'bbox' must be 4 finite numbers"),
    ("annotations.1.bbox", [1, 2, "3", 4], "'bbox' must be 4 finite numbers"),
    ("annotations.1.bbox", [1, 2, 0, 4], "degenerate bbox [1, 2, 0, 4] (w and h must be > 0)"),
    ("annotations.1.bbox", [1, 2, 5, -4], "degenerate bbox"),
    ("annotations.1.bbox", [100, 2, 5, 4], "lies outside the 100x80 image"),
    ("annotations.1.bbox", [-9, 2, 5, 4], "lies outside the 100x80 image"),
    ("annotations.1.iscrowd", 2, "iscrowd must be 0 or 1, got 2"),
    ("annotations.0.segmentation", [[1, "a", 3, 4, 5, 6]], "'segmentation' must be a list of polygons"),
    ("annotations.0.segmentation", "poly", "'segmentation' must be a list of polygons"),
    ("annotations.2.segmentation.size", [40, 20], "RLE 'size' [40, 20] is not the image's [height, width] [20, 40]"),
    ("annotations.2.segmentation.counts", [100, 600], "RLE run lengths must be >= 0 and add up to height*width"),
    ("annotations.2.segmentation.counts", [900, -100], "RLE run lengths must be >= 0"),
    ("annotations.2.segmentation.counts", "\x7f\x7f", "malformed compressed RLE"),
    ("annotations.2.segmentation.counts", "o", "malformed compressed RLE (truncated)"),
    ("annotations.2.segmentation.counts", "1", "add up to height*width"),
    ("annotations.2.segmentation.counts", 5, "RLE 'counts' must be a string or a list of integers"),
])
def test_bad_documents_are_one_line_errors(tmp_path: Path, path: str, value: Any, message: str) -> None:
    with pytest.raises(DatasetError) as info:
        parse_coco(mutate(path, value), tmp_path, where="instances_x.json")
    text = str(info.value)
    assert text.startswith("instances_x.json") and message in text and "\n" not in text, text


def test_load_coco_reads_files_and_checks_images(tmp_path: Path) -> None:
    path = tmp_path / "instances_val2017.json"
    path.write_text(json.dumps(coco_doc()))
    images = tmp_path / "val2017"
    with pytest.raises(DatasetError, match="COCO image directory not found"):
        load_coco(path, images)
    images.mkdir()
    (images / "a.jpg").write_bytes(b"")
    with pytest.raises(DatasetError, match=r"2 of 3 images of instances_val2017.json are missing \(first: .*b.jpg\)"):
        load_coco(path, images)
    dicts, names, _ = load_coco(path, images, check_files=False)
    assert len(dicts) == 3 and names == ["cat", "dog"]
    for name in ("b.jpg", "c.jpg"):
        (images / name).write_bytes(b"")
    assert load_coco(path, images)[0] == dicts


@pytest.mark.parametrize(("content", "message"), [
    (b'{"images": [', "malformed JSON"), (b"\xff\xfe", "malformed JSON"), (b"[1, 2]", "expected a JSON object"),
])
def test_unreadable_json_is_a_one_line_error(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "x.json"
    path.write_bytes(content)
    with pytest.raises(DatasetError, match=message) as info:
        load_coco(path, tmp_path, check_files=False)
    assert "\n" not in str(info.value)
    with pytest.raises(DatasetError, match="COCO annotation file not found"):
        load_coco(tmp_path / "absent.json", tmp_path)
