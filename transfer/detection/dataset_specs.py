"""What the dataset readers share: where a configured set's files are (:class:`DatasetSpec`), what loading gives
(:class:`DetectionData`), and the helpers every task's reader uses. Kept apart from :mod:`transfer.detection.datasets`
so that the LVIS and Cityscapes readers, which it dispatches to, do not import it back."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moco_core.data.data import DatasetError
from moco_core.user_files import within


@dataclass(frozen=True)
class DatasetSpec:
    """Where one configured dataset's files are (paths relative to the datasets root unless absolute)."""

    name: str  # as configured
    folder: Path  # VOC: the devkit (year) directory; COCO: the image directory
    split: str  # VOC: the split file's stem; COCO: "<split><year>" or the annotation file's stem
    annotations: Path | None = None  # COCO: the annotation file
    year: str | None = None  # standard sets only


@dataclass
class DetectionData:
    """The training and test dataset dicts with what evaluation needs."""

    root: Path
    name: str  # readable, for the record
    train: list[dict[str, Any]]
    test: list[dict[str, Any]]
    class_names: list[str]
    contiguous_to_original: dict[int, int]  # COCO: our 0..K-1 -> the annotation file's category ids
    coco_gt: Any  # COCO: the test annotation file; keypoints: the validated test set as a pycocotools COCO
    keypoints: Any = None  # keypoints: the KeypointSet (transfer.detection.keypoints)
    oks_sigmas: Any = None  # keypoints: (K,) OKS sigmas for COCOeval


def readable_name(cfg: Any, specs: list[DatasetSpec], standard: str) -> str:
    """"embedded", the paper's name of standard sets ("VOC07+12", "COCO train2017"), else the custom sets'."""
    if cfg.data.path == "embedded":
        return "embedded"
    if all(s.year for s in specs):
        return standard
    def short(spec: DatasetSpec) -> str:
        return spec.annotations.name if spec.annotations else f"{spec.folder.name}/{spec.split}"

    return "custom: " + "+".join(short(s) for s in specs[:-1]) + " -> " + short(specs[-1])


def found_elsewhere(root: Path, spec: DatasetSpec, path: Path | None = None) -> str:
    """A hint for a standard set's folder (or ``path`` in it) not found under ``root``, when it is one level off:
    under VOCdevkit/ (as VOC's archives unpack), beside ``root`` (--data named the dataset's own folder), or
    inside ``root`` without its first folder (the same, under another name); else ''."""
    if not spec.year:  # one's own set: its paths are the user's
        return ""
    relative = str((path or root / spec.folder).relative_to(root))
    for holder in (root / "VOCdevkit", root.parent):
        if (holder / relative).exists():
            return f"; it is under {holder}: pass --data {holder}"
    first, _, rest = relative.partition("/")
    if rest and (root / rest).exists():
        return (f"; {root} looks like the {first}/ folder itself: --data takes the folder that holds it, as "
                f"{first}/ (a symbolic link of that name will do)")
    return ""


def annotations_within(root: Path, spec: DatasetSpec, path: Path) -> None:
    """A standard set's annotation file stays in its dataset's folder (``coco/``, ``lvis/`` under ``root``) after
    links (:func:`moco_core.user_files.within`); one's own file is named by the user, wherever it is."""
    if spec.year and spec.annotations is not None and not spec.annotations.is_absolute():
        within(root / spec.annotations.parts[0], path, what=f"{spec.name}: annotation file", error=DatasetError)


def trainable(record: dict[str, Any]) -> bool:
    return any(not a.get("iscrowd") for a in record["annotations"])  # difficult ones train, as in detectron2
