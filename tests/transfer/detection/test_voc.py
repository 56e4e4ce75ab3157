"""The VOC reader: coordinates, difficult objects, the clipping policy, layout checks and one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from moco_core.data.data import DatasetError
from transfer.detection.voc import VOC_CLASSES, check_voc_layout, load_voc, read_voc_xml


def obj_xml(name: str, box: tuple, difficult: str | None = "0") -> str:
    tags = "".join(f"<{t}>{v}</{t}>" for t, v in zip(("xmin", "ymin", "xmax", "ymax"), box, strict=True))
    diff = "" if difficult is None else f"<difficult>{difficult}</difficult>"
    return f"<object><name>{name}</name><pose>Left</pose><truncated>0</truncated>{diff}<bndbox>{tags}</bndbox></object>"


def annotation_xml(objects: list[str], width: int = 500, height: int = 375) -> str:
    return (f"<annotation><folder>VOC2007</folder><filename>x.jpg</filename><size><width>{width}</width>"
            f"<height>{height}</height><depth>3</depth></size>{''.join(objects)}</annotation>")


def make_voc(root: Path, images: dict[str, str], splits: dict[str, list[str]], jpegs: bool = True) -> Path:
    """A VOC year directory with the given XML texts (by id) and split lists; JPEGs are empty files."""
    for sub in ("Annotations", "JPEGImages", "ImageSets/Main"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for image_id, xml in images.items():
        (root / "Annotations" / f"{image_id}.xml").write_text(xml)
        if jpegs:
            (root / "JPEGImages" / f"{image_id}.jpg").write_bytes(b"")
    for split, ids in splits.items():
        (root / "ImageSets" / "Main" / f"{split}.txt").write_text("".join(i + "\n" for i in ids))
    return root


def test_classes_are_the_twenty_in_standard_order() -> None:
    assert len(VOC_CLASSES) == 20 and VOC_CLASSES[0] == "aeroplane" and VOC_CLASSES[-1] == "tvmonitor"
    assert VOC_CLASSES.index("person") == 14


def test_load_voc_shifts_xmin_ymin_keeps_difficult_and_follows_the_split_order(tmp_path: Path) -> None:
    images = {
        "000005": annotation_xml([obj_xml("chair", (263, 211, 324, 339)),
                                  obj_xml("chair", (5, 244, 67, 374), difficult="1")]),
        "000007": annotation_xml([obj_xml("car", (141, 50, 500, 330), difficult=None)], width=500, height=333),
    }
    root = make_voc(tmp_path / "VOC2007", images, {"test": ["000007", "000005"]})
    dicts = load_voc(root, "test")
    assert [d["image_id"] for d in dicts] == ["000007", "000005"]
    car, chairs = dicts
    assert car["file_name"] == str(root.absolute() / "JPEGImages" / "000007.jpg")
    assert (car["width"], car["height"]) == (500, 333)
    assert car["annotations"] == [{"bbox": [140.0, 49.0, 500.0, 330.0], "category_id": 6, "iscrowd": 0,
                                   "difficult": False}]  # no <difficult> tag: not difficult
    assert [a["bbox"] for a in chairs["annotations"]] == [[262.0, 210.0, 324.0, 339.0], [4.0, 243.0, 67.0, 374.0]]
    assert [a["difficult"] for a in chairs["annotations"]] == [False, True]
    assert {a["category_id"] for a in chairs["annotations"]} == {VOC_CLASSES.index("chair")}


def test_custom_class_names_and_a_one_pixel_box(tmp_path: Path) -> None:
    xml = annotation_xml([obj_xml("star", (7, 7, 7, 9))], width=10, height=10)
    root = make_voc(tmp_path, {"a": xml}, {"trainval": ["a"]})
    [d] = load_voc(root, "trainval", class_names=("circle", "star"))
    assert d["annotations"][0]["bbox"] == [6.0, 6.0, 7.0, 9.0]  # 1 px wide, 3 px high
    assert d["annotations"][0]["category_id"] == 1


def write(tmp_path: Path, xml: str) -> Path:
    path = tmp_path / "000001.xml"
    path.write_text(xml)
    return path


def test_boxes_sticking_out_are_clipped(tmp_path: Path) -> None:
    # xmin=0 is pixel -1 in 1-based numbering; xmax=103 and ymax=60 are past a 100x50 image
    width, height, annotations, clipped = read_voc_xml(
        write(tmp_path, annotation_xml([obj_xml("dog", (0, 1, 103, 60)), obj_xml("cat", (2, 2, 9, 9))], 100, 50)))
    assert (width, height, clipped) == (100, 50, 1)
    assert annotations[0]["bbox"] == [0.0, 0.0, 100.0, 50.0]
    assert annotations[1]["bbox"] == [1.0, 1.0, 9.0, 9.0]


@pytest.mark.parametrize(("xml", "message"), [
    ("<annotation><size><width>5", "unparseable XML"),
    (annotation_xml([]).replace("annotation>", "voc>"), "root element is 'voc', expected 'annotation'"),
    ("<annotation><object/></annotation>", "missing <size>"),
    (annotation_xml([]).replace("<width>500</width>", ""), "<size>: missing <width>"),
    (annotation_xml([], width=0), "<size> must be positive integers, got width=0"),
    (annotation_xml([obj_xml("", (1, 1, 5, 5))]), "object 0: missing <name>"),
    (annotation_xml([obj_xml("dog", (1, 1, 5, 5)), obj_xml("unicorn", (1, 1, 5, 5))]),
     "object 1 ('unicorn'): unknown class name; expected one of 20 classes"),
    (annotation_xml([obj_xml("dog", (1, 1, 5, 5)).replace("<bndbox>", "<box>").replace("</bndbox>", "</box>")]),
     "object 0 ('dog'): missing <bndbox>"),
    (annotation_xml([obj_xml("dog", (1, 1, "", 5))]), "<bndbox>: missing <xmax>"),
    (annotation_xml([obj_xml("dog", (1, "one", 5, 5))]), "<ymin> is not a number: 'one'"),
    (annotation_xml([obj_xml("dog", (1, 1, "nan", 5))]), "<xmax> is not finite"),
    (annotation_xml([obj_xml("dog", (1, 1, 5, 5), difficult="yes")]), "<difficult> must be 0 or 1"),
    (annotation_xml([obj_xml("dog", (6, 1, 4, 5))]), "degenerate box xmin=6 ymin=1 xmax=4 ymax=5"),
    (annotation_xml([obj_xml("dog", (1, 9, 5, 7))]), "degenerate box"),
    (annotation_xml([obj_xml("dog", (501, 1, 520, 5))]), "lies outside the 500x375 image"),
    (annotation_xml([obj_xml("dog", (1, -20, 5, 0))]), "lies outside the 500x375 image"),
    ('<!DOCTYPE a [<!ENTITY x "y">]><annotation/>', "DTD or entity declarations"),
])
def test_bad_annotations_are_one_line_errors_naming_the_file(tmp_path: Path, xml: str, message: str) -> None:
    path = write(tmp_path, xml)
    with pytest.raises(DatasetError, match=None) as info:
        read_voc_xml(path)
    text = str(info.value)
    assert message in text and str(path) in text and "\n" not in text, text


def test_layout_check_names_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="VOC directory not found"):
        check_voc_layout(tmp_path / "VOC2007", ["trainval"])
    (tmp_path / "VOC2007" / "Annotations").mkdir(parents=True)
    with pytest.raises(DatasetError, match=r"not a VOC year directory: missing JPEGImages/, ImageSets/Main/$"):
        check_voc_layout(tmp_path / "VOC2007", ["trainval"])
    xml = annotation_xml([obj_xml("dog", (1, 1, 5, 5))])
    root = make_voc(tmp_path / "VOC2007", {"a": xml, "b": xml, "c": xml}, {"trainval": ["a", "b", "c", "d", "e"],
                                                                              "empty": []})
    (root / "JPEGImages" / "b.jpg").unlink()
    with pytest.raises(DatasetError) as info:
        check_voc_layout(root, ["trainval", "test", "empty"])
    assert str(info.value) == (
        f"{root}: 2 of 5 images of split trainval have no Annotations/<id>.xml (first: Annotations/d.xml); "
        "3 of 5 images of split trainval have no JPEGImages/<id>.jpg (first: JPEGImages/b.jpg); "
        "split file ImageSets/Main/test.txt is missing; split empty lists no image")
    check_voc_layout(root, [])  # nothing asked, nothing missing
    with pytest.raises(DatasetError, match="no JPEGImages"):
        load_voc(root, "trainval")


def test_split_file_with_two_fields_a_line_is_rejected(tmp_path: Path) -> None:
    root = make_voc(tmp_path, {"a": annotation_xml([])}, {"dog_trainval": []})
    (root / "ImageSets" / "Main" / "dog_trainval.txt").write_text("a  1\n")
    with pytest.raises(DatasetError, match=r"dog_trainval.txt:1: expected one image id per line, found 'a  1'"):
        load_voc(root, "dog_trainval")
