"""Property tests: the VOC and COCO readers return dicts that satisfy the interface, or a one-line DatasetError.

Valid documents (boxes possibly sticking out of the image) must always be read; mutated ones (fields
dropped, values replaced by random JSON or text, random bytes) may be refused, but only with a one-line
``DatasetError``, never another exception.
"""

from __future__ import annotations

import json
import math
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moco_core.data.data import DatasetError
from transfer.detection.coco import load_coco, parse_coco
from transfer.detection.voc import read_voc_xml

CLASSES = ("circle", "square", "star")
# Examples per property (the closing note of the transfer work quotes these numbers).
VALID_VOC_EXAMPLES = 150
MUTATED_VOC_EXAMPLES = 300
RANDOM_BYTES_EXAMPLES = 100
VALID_COCO_EXAMPLES = 150
MUTATED_COCO_EXAMPLES = 300

FUZZ = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow], "derandomize": True}


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as directory:
        yield Path(directory)


def check_dicts(dicts: list[dict[str, Any]], num_classes: int) -> None:
    """The dataset-dict interface: finite boxes inside the image, x0 < x1, y0 < y1, category in range."""
    for d in dicts:
        assert isinstance(d["height"], int) and isinstance(d["width"], int) and d["height"] > 0 and d["width"] > 0
        for ann in d["annotations"]:
            x0, y0, x1, y1 = ann["bbox"]
            assert all(isinstance(v, float) and math.isfinite(v) for v in ann["bbox"])
            assert 0 <= x0 < x1 <= d["width"] and 0 <= y0 < y1 <= d["height"]
            assert 0 <= ann["category_id"] < num_classes
            assert ann["iscrowd"] in (0, 1) and isinstance(ann["difficult"], bool)
            segm = ann.get("segmentation")
            if isinstance(segm, dict):
                assert segm["size"] == [d["height"], d["width"]] and isinstance(segm["counts"], str)
            elif segm is not None:
                assert segm and all(len(p) >= 6 and len(p) % 2 == 0 for p in segm)


def one_line(err: DatasetError) -> None:
    text = str(err)
    assert text and "\n" not in text and "\r" not in text, text


# ---------------------------------------------------------------- VOC

junk = st.one_of(st.text(max_size=8), st.sampled_from(["", " ", "nan", "-inf", "1e400", "0x10", "1,5", "3.5e1"]))


@st.composite
def valid_voc(draw: st.DrawFn) -> tuple[dict[str, Any], list[list[float]]]:
    """A valid annotation spec and the boxes expected back (1-based boxes, possibly a few px outside)."""
    width, height = draw(st.integers(1, 300)), draw(st.integers(1, 300))
    objects, expected = [], []
    for _ in range(draw(st.integers(0, 4))):
        xmin, ymin = draw(st.integers(1, width)), draw(st.integers(1, height))
        xmax, ymax = draw(st.integers(xmin, width)), draw(st.integers(ymin, height))
        out = draw(st.tuples(*[st.integers(0, 3)] * 4))  # push edges outward: clipped back
        box = [xmin - out[0], ymin - out[1], xmax + out[2], ymax + out[3]]
        objects.append({"name": draw(st.sampled_from(CLASSES)), "difficult": draw(st.sampled_from(["0", "1", None])),
                        "box": [str(v) for v in box]})
        expected.append([max(box[0] - 1.0, 0.0), max(box[1] - 1.0, 0.0), min(float(box[2]), width),
                         min(float(box[3]), height)])
    return {"width": str(width), "height": str(height), "objects": objects}, expected


def voc_xml(spec: dict[str, Any]) -> bytes:
    """Serialise a spec; a None value leaves its element out."""
    root = ET.Element(spec.get("root", "annotation"))
    ET.SubElement(root, "filename").text = "x.jpg"
    if spec.get("size", True):
        size = ET.SubElement(root, "size")
        for tag in ("width", "height"):
            if spec[tag] is not None:
                ET.SubElement(size, tag).text = spec[tag]
    for obj in spec["objects"]:
        node = ET.SubElement(root, "object")
        if obj["name"] is not None:
            ET.SubElement(node, "name").text = obj["name"]
        if obj["difficult"] is not None:
            ET.SubElement(node, "difficult").text = obj["difficult"]
        if obj["box"] is not None:
            box = ET.SubElement(node, "bndbox")
            for tag, value in zip(("xmin", "ymin", "xmax", "ymax"), obj["box"], strict=True):
                if value is not None:
                    ET.SubElement(box, tag).text = value
    return ET.tostring(root, encoding="utf-8")


def read_voc(scratch: Path, data: bytes) -> list[dict[str, Any]] | None:
    path = scratch / "000001.xml"
    path.write_bytes(data)
    try:
        width, height, annotations, _ = read_voc_xml(path, CLASSES)
    except DatasetError as err:
        one_line(err)
        return None
    dicts = [{"height": height, "width": width, "annotations": annotations}]
    check_dicts(dicts, len(CLASSES))
    return dicts


@settings(max_examples=VALID_VOC_EXAMPLES, **FUZZ)
@given(case=valid_voc())
def test_valid_voc_files_are_read(scratch: Path, case: tuple[dict, list]) -> None:
    spec, expected = case
    dicts = read_voc(scratch, voc_xml(spec))
    assert dicts is not None
    assert [a["bbox"] for a in dicts[0]["annotations"]] == expected


coordinate = st.one_of(st.integers(-30, 330).map(str), st.floats(-400, 400).map(lambda v: f"{v:.2f}"), junk,
                       st.none())
mutated_object = st.fixed_dictionaries({
    "name": st.one_of(st.sampled_from(CLASSES), st.text(max_size=6), st.none()),
    "difficult": st.one_of(st.sampled_from(["0", "1"]), junk, st.none()),
    "box": st.one_of(st.lists(coordinate, min_size=4, max_size=4), st.none()),
})
mutated_voc = st.fixed_dictionaries({
    "root": st.sampled_from(["annotation", "annotation", "annotation", "voc"]),
    "size": st.booleans(),
    "width": st.one_of(st.integers(-2, 300).map(str), junk, st.none()),
    "height": st.one_of(st.integers(-2, 300).map(str), junk, st.none()),
    "objects": st.lists(mutated_object, max_size=4),
})


@st.composite
def one_change(draw: st.DrawFn) -> dict[str, Any]:
    """A valid spec with one or two fields dropped or replaced (by junk, a number, or a box moved out)."""
    spec, _ = draw(valid_voc())
    for _ in range(draw(st.integers(1, 2))):
        target = draw(st.sampled_from(["width", "height", "size", "root"] + ["object"] * 6))
        if target in ("width", "height"):
            spec[target] = draw(st.one_of(st.integers(-2, 300).map(str), junk, st.none()))
        elif target == "size":
            spec["size"] = False
        elif target == "root":
            spec["root"] = draw(st.sampled_from(["voc", "Annotation", "annotations"]))
        elif spec["objects"]:
            obj = draw(st.sampled_from(spec["objects"]))
            field = draw(st.sampled_from(["name", "difficult", "box", "shift", "shift"] + ["coordinate"] * 5))
            if field == "name":
                obj["name"] = draw(st.one_of(st.sampled_from(["unicorn", "Circle", " star"]), st.text(max_size=6),
                                             st.none()))
            elif field == "shift" and obj["box"] is not None:  # the whole box off the image, or straddling an edge
                dx, dy = draw(st.sampled_from([-400, -20, 0, 20, 400])), draw(st.sampled_from([-400, 0, 400]))
                obj["box"] = [str(int(v) + d) if v is not None and v.lstrip("-").isdigit() else v
                              for v, d in zip(obj["box"], (dx, dy, dx, dy), strict=True)]
            elif field == "difficult":
                obj["difficult"] = draw(junk)
            elif field == "box":
                obj["box"] = None
            elif obj["box"] is not None:  # mostly numbers: degenerate boxes, boxes outside the image
                obj["box"][draw(st.integers(0, 3))] = draw(st.one_of(st.integers(-30, 330).map(str), coordinate))
    return spec


@settings(max_examples=MUTATED_VOC_EXAMPLES, **FUZZ)
@given(spec=st.one_of(mutated_voc, one_change(), one_change()))
def test_mutated_voc_files_are_read_or_refused_in_one_line(scratch: Path, spec: dict[str, Any]) -> None:
    read_voc(scratch, voc_xml(spec))


@settings(max_examples=RANDOM_BYTES_EXAMPLES, **FUZZ)
@given(data=st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode),
                      valid_voc().map(lambda case: voc_xml(case[0])).flatmap(
                          lambda xml: st.integers(0, len(xml)).map(lambda n: xml[:n]))))  # truncated files
def test_random_and_truncated_voc_bytes_are_refused_in_one_line(scratch: Path, data: bytes) -> None:
    read_voc(scratch, data)


# ---------------------------------------------------------------- COCO

@st.composite
def valid_coco(draw: st.DrawFn) -> dict[str, Any]:
    cat_ids = draw(st.lists(st.integers(0, 1000), min_size=1, max_size=4, unique=True))
    image_ids = draw(st.lists(st.integers(0, 10**6), min_size=1, max_size=4, unique=True))
    images = [{"id": i, "file_name": f"{i}.jpg", "width": draw(st.integers(1, 200)),
               "height": draw(st.integers(1, 200))} for i in image_ids]
    annotations = []
    for _ in range(draw(st.integers(0, 6))):
        img = draw(st.sampled_from(images))
        w, h = img["width"], img["height"]
        x0 = draw(st.floats(0, w, exclude_max=True)) - draw(st.sampled_from([0.0, 0.0, 2.5]))
        y0 = draw(st.floats(0, h, exclude_max=True)) - draw(st.sampled_from([0.0, 0.0, 2.5]))
        bw = draw(st.floats(max(0.01, -x0 + 0.01), w + 5))
        bh = draw(st.floats(max(0.01, -y0 + 0.01), h + 5))
        ann = {"id": len(annotations) + 1, "image_id": img["id"], "category_id": draw(st.sampled_from(cat_ids)),
               "bbox": [x0, y0, bw, bh], "iscrowd": 0, "area": bw * bh}
        kind = draw(st.sampled_from(["polygon", "rle", "none", "empty"]))
        if kind == "polygon":
            ann["segmentation"] = [[x0, y0, x0 + bw, y0, x0 + bw, y0 + bh]]
        elif kind == "rle":
            ann["iscrowd"] = 1
            ann["segmentation"] = {"size": [h, w], "counts": [w * h // 2, w * h - w * h // 2]}
        elif kind == "empty":
            ann["segmentation"] = []
        annotations.append(ann)
    return {"images": images, "categories": [{"id": c, "name": f"c{c}"} for c in cat_ids],
            "annotations": annotations}


def parse(doc: Any) -> list[dict[str, Any]] | None:
    try:
        dicts, names, mapping = parse_coco(doc, Path("/images"), where="instances.json")
    except DatasetError as err:
        one_line(err)
        return None
    assert sorted(mapping) == list(range(len(names)))
    check_dicts(dicts, len(names))
    return dicts


@settings(max_examples=VALID_COCO_EXAMPLES, **FUZZ)
@given(doc=valid_coco())
def test_valid_coco_documents_are_read(doc: dict[str, Any]) -> None:
    dicts = parse(json.loads(json.dumps(doc)))
    assert dicts is not None
    assert sum(len(d["annotations"]) for d in dicts) == len(doc["annotations"])
    assert [d["image_id"] for d in dicts] == sorted(img["id"] for img in doc["images"])


json_value = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=6),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=6,
)


def nodes(value: Any, path: tuple = ()) -> list[tuple]:
    """Every path into a JSON value (the root is ())."""
    found = [path]
    if isinstance(value, dict):
        for key, child in value.items():
            found += nodes(child, (*path, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += nodes(child, (*path, index))
    return found


def value_at(doc: Any, path: tuple) -> Any:
    for key in path:
        doc = doc[key]
    return doc


replacement = st.one_of(
    json_value, st.integers(-5, 1100), st.floats(-50, 300), st.just([]),  # wrong types, unknown ids, empty lists
    st.lists(st.floats(-300, 300), min_size=4, max_size=4),  # boxes anywhere, degenerate or outside the image
)


@settings(max_examples=MUTATED_COCO_EXAMPLES, **FUZZ)
@given(doc=valid_coco(), data=st.data())
def test_mutated_coco_documents_are_read_or_refused_in_one_line(doc: dict[str, Any], data: st.DataObject) -> None:
    for _ in range(data.draw(st.integers(1, 2))):
        paths = nodes(doc)[1:]  # the whole document replaced: see the test below
        leaves = [p for p in paths if not isinstance(value_at(doc, p), (dict, list))]
        if not paths:
            break
        # leaves twice as often as any node: ids, sizes and coordinates more than whole entries
        path = data.draw(st.sampled_from(paths) | st.sampled_from(leaves or paths) | st.sampled_from(leaves or paths))
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        if isinstance(parent, dict) and data.draw(st.booleans()):
            del parent[path[-1]]  # a missing field
        else:
            parent[path[-1]] = data.draw(replacement)
    parse(doc)


@settings(max_examples=RANDOM_BYTES_EXAMPLES, **FUZZ)
@given(data=st.one_of(st.binary(max_size=200), json_value.map(lambda v: json.dumps(v).encode())))
def test_random_coco_files_are_refused_in_one_line(scratch: Path, data: bytes) -> None:
    path = scratch / "instances.json"
    path.write_bytes(data)
    try:
        dicts, names, _ = load_coco(path, scratch, check_files=False)
    except DatasetError as err:
        one_line(err)
    else:
        check_dicts(dicts, len(names))

