"""The datasets of ``moco eval semseg``: names to (image, label map) file pairs, and the training and test samples.

A dataset in ``data.train`` / ``data.test`` is one of (relative paths under the ``data.path`` root):

* ``voc_2012_sem_seg_<split>``: ``VOC2012/ImageSets/Segmentation/<split>.txt`` (``train_aug``: the 10,582 images of
  SBD's augmented set, the DeepLab convention; ``val``: 1,449 images), each line an image id (or, as DeepLab's
  lists have it, the image and label paths relative to ``VOC2012/``); images ``VOC2012/JPEGImages/<id>.jpg``,
  labels ``VOC2012/SegmentationClassAug/<id>.png`` (or ``SegmentationClass/``, the official PNGs, when the
  augmented folder is absent): one 8-bit class index per pixel (palette or grey PNG), 0 background, 255 ignored;
* ``cityscapes_fine_sem_seg_<split>`` (detectron2's names): ``cityscapes/leftImg8bit/<split>/<city>/<city>_<seq>_
  <frame>_leftImg8bit.png`` with ``cityscapes/gtFine/<split>/<city>/<city>_<seq>_<frame>_gtFine_labelTrainIds.png``
  (cityscapesScripts' ``createTrainIdLabelImgs`` writes them); where only ``_gtFine_labelIds.png`` are there, the
  label ids are mapped to the 19 train ids with the official table (:data:`CITYSCAPES_TRAIN_IDS`);
* one's own ``IMAGE_DIR:LABEL_DIR``: every image (``.jpg``, ``.jpeg``, ``.png``) of ``IMAGE_DIR`` with the PNG of
  the same stem in ``LABEL_DIR``; the class names are ``data.classes``, label value k being ``classes[k]``.

``--data embedded`` holds ``VOC2012/`` in the first layout, generated from the detection scenes
(:mod:`transfer.segmentation.embedded`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch.utils.data import Dataset

from moco_core import smoke
from moco_core.config import ConfigError
from moco_core.data import shapes
from moco_core.data.data import DatasetError, report_undecodable, show_value
from moco_core.data.image_files import reason
from moco_core.data.pairs import Sample, skipped_warning, verify_pairs
from moco_core.user_files import LINES_LIMIT, LIST_LIMIT, all_within, inside, read_text
from transfer.engine import read_rgb

VOC_CLASSES = ("background", "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow",
               "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa", "train",
               "tvmonitor")
CITYSCAPES_CLASSES = ("road", "sidewalk", "building", "wall", "fence", "pole", "traffic light", "traffic sign",
                      "vegetation", "terrain", "sky", "person", "rider", "car", "truck", "bus", "train", "motorcycle",
                      "bicycle")
# Cityscapes label id -> train id (255: ignored), ids 0-33, from cityscapesScripts' helpers/labels.py (the
# ``labels`` table, its trainId column). Ids not listed there (license plate is -1) are ignored.
CITYSCAPES_TRAIN_IDS = (255, 255, 255, 255, 255, 255, 255, 0, 1, 255, 255, 2, 3, 4, 255, 255, 255, 5, 255, 6, 7, 8,
                        9, 10, 11, 12, 13, 14, 15, 255, 255, 16, 17, 18)
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")

_VOC = re.compile(r"voc_2012_sem_seg_(\w+)")
_CITYSCAPES = re.compile(r"cityscapes_fine_sem_seg_(\w+)")
_CUSTOM = re.compile(r"([^:]+):([^:]+)")


@dataclass
class SegmentationData:
    """The training and test samples, with what the network and the evaluation need."""

    root: Path
    name: str  # readable, for the record: "VOC12", "Cityscapes", "embedded", "custom: ..."
    train: list[Sample]
    test: list[Sample]
    class_names: tuple[str, ...]
    label_map: tuple[int, ...] | None  # label value -> class index (Cityscapes label ids -> train ids), or None
    warnings: list[str] = field(default_factory=list)  # one line per set whose unusable pairs were skipped


def dataset_root(path: str) -> Path:
    """The datasets root: ``path``, or the embedded masks generated on first use."""
    if path == "embedded":
        from transfer.segmentation.embedded import ensure_semseg

        return ensure_semseg(**(smoke.SCENES["semseg"] if smoke.enabled() else {}))
    return Path(os.path.expanduser(path)).absolute()


def load_data(path: str, train: str, test: str, classes: tuple[str, ...] = ()) -> SegmentationData:
    """The samples of the sets ``train`` and ``test`` under ``path``; DatasetError names what is missing."""
    root = dataset_root(path)
    kinds = {_kind(train), _kind(test)}
    if len(kinds) > 1:
        raise ConfigError(f"data: train {show_value(train)} and test {show_value(test)} are of different datasets")
    kind = kinds.pop()
    if kind == "custom" and not classes:
        raise ConfigError("data.classes: one's own IMAGE_DIR:LABEL_DIR needs the class names (--classes a,b,c)")
    if kind != "custom" and classes:
        raise ConfigError(f"data.classes: {kind} names its own classes; --classes is for IMAGE_DIR:LABEL_DIR")
    label_map = None
    if kind == "voc":
        names = (("background", *shapes.CLASSES) if path == "embedded" else VOC_CLASSES)
        pairs = [_voc(root, _VOC.fullmatch(n)[1]) for n in (train, test)]  # type: ignore[index]
        name = "embedded" if path == "embedded" else "VOC12"
    elif kind == "cityscapes":
        names = CITYSCAPES_CLASSES
        found = [_cityscapes(root, _CITYSCAPES.fullmatch(n)[1]) for n in (train, test)]  # type: ignore[index]
        pairs = [samples for samples, _ in found]
        if any(ids for _, ids in found):
            if not all(ids for _, ids in found):
                raise DatasetError(f"{root / 'cityscapes' / 'gtFine'}: some splits have _gtFine_labelTrainIds.png, "
                                   f"others only _labelIds.png; make them all with createTrainIdLabelImgs")
            label_map = _lookup(CITYSCAPES_TRAIN_IDS)
        name = "Cityscapes"
    else:
        names = tuple(classes)
        pairs = [_custom(root, n) for n in (train, test)]
        name = f"custom: {train}"
    checked, warnings = [], []
    for samples, which, set_name in zip(pairs, ("train", "test"), (train, test), strict=True):
        kept, skipped = verify_pairs(samples, f"{which} set {set_name}")
        checked.append(kept)
        line = skipped_warning(skipped, f"{which} set {set_name}", len(samples))
        if line:
            warnings.append(line)
    return SegmentationData(root, name, checked[0], checked[1], names, label_map, warnings)


def _kind(name: str) -> str:
    if _VOC.fullmatch(name):
        return "voc"
    if _CITYSCAPES.fullmatch(name):
        return "cityscapes"
    if _CUSTOM.fullmatch(name):
        return "custom"
    raise ConfigError(f"data: dataset {show_value(name)} is none of voc_2012_sem_seg_<split> (train_aug, val), "
                      f"cityscapes_fine_sem_seg_<split> (train, val) or IMAGE_DIR:LABEL_DIR")


def _lookup(table: tuple[int, ...]) -> tuple[int, ...]:
    """A 256-entry label value -> class index table (values past ``table`` ignored: 255)."""
    return (*table, *(255,) * (256 - len(table)))


def _voc(root: Path, split: str) -> list[Sample]:
    devkit = root / "VOC2012"
    listing = devkit / "ImageSets" / "Segmentation" / f"{split}.txt"
    if not listing.is_file():
        raise DatasetError(f"{listing}: no such split list (VOC2012 with SBD's train_aug.txt and val.txt in "
                           f"ImageSets/Segmentation/)")
    labels = devkit / "SegmentationClassAug"
    if not labels.is_dir():
        labels = devkit / "SegmentationClass"
    samples = []
    text = read_text(listing, limit=LIST_LIMIT, what="split list", error=DatasetError, lines=LINES_LIMIT)
    for number, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        here = f"{listing}:{number}:"  # every name read from the list stays in the devkit (inside)
        if len(parts) == 1:
            samples.append(Sample(inside(devkit / "JPEGImages", f"{parts[0]}.jpg", what=f"{here} image id",
                                         error=DatasetError),
                                  inside(labels, f"{parts[0]}.png", what=f"{here} image id", error=DatasetError)))
        elif len(parts) == 2:  # DeepLab's lists: "/JPEGImages/<id>.jpg /SegmentationClassAug/<id>.png"
            samples.append(Sample(*(inside(devkit, part.lstrip("/"), what=f"{here} path", error=DatasetError)
                                    for part in parts)))
        elif parts:
            raise DatasetError(f"{listing}: line {show_value(line)} is neither an image id nor an image and a label")
    return _checked(samples, str(listing), devkit, devkit)


def _cityscapes(root: Path, split: str) -> tuple[list[Sample], bool]:
    """The split's samples, and whether their labels are label ids (no _labelTrainIds.png found)."""
    images = root / "cityscapes" / "leftImg8bit" / split
    files = sorted(images.glob("*/*_leftImg8bit.png"))
    if not files:
        raise DatasetError(f"{images}: no <city>/*_leftImg8bit.png images")
    gt = root / "cityscapes" / "gtFine" / split
    stems = [(f.parent.name, f.name.removesuffix("_leftImg8bit.png")) for f in files]
    train_ids = [gt / city / f"{stem}_gtFine_labelTrainIds.png" for city, stem in stems]
    label_ids = not train_ids[0].is_file()
    labels = [gt / city / f"{stem}_gtFine_labelIds.png" for city, stem in stems] if label_ids else train_ids
    return _checked([Sample(i, la) for i, la in zip(files, labels, strict=True)], str(images), images,
                    gt), label_ids


def _custom(root: Path, name: str) -> list[Sample]:
    image_dir, label_dir = (root / part for part in _CUSTOM.fullmatch(name).groups())  # type: ignore[union-attr]
    if not image_dir.is_dir():
        raise DatasetError(f"{image_dir}: no such image folder")
    files = sorted(f for f in image_dir.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES)
    return _checked([Sample(f, label_dir / f"{f.stem}.png") for f in files], name, image_dir, label_dir)


def _checked(samples: list[Sample], where: str, image_root: Path, label_root: Path) -> list[Sample]:
    """``samples``, each image and label there, and inside ``image_root`` / ``label_root`` after links
    (:func:`moco_core.user_files.all_within`: a folder of the dataset linked elsewhere is not read)."""
    if not samples:
        raise DatasetError(f"{where}: no images")
    all_within(image_root, (s.image for s in samples), what=f"{where}: image", error=DatasetError)
    all_within(label_root, (s.label for s in samples), what=f"{where}: label", error=DatasetError)
    for sample in samples:
        for path in (sample.image, sample.label):
            if not path.is_file():
                raise DatasetError(f"{where}: {path} is missing")
    return samples


def read_label(path: Path, label_map: tuple[int, ...] | None = None) -> torch.Tensor:
    """(H, W) int64 class indices of an 8-bit palette or grey PNG, through ``label_map`` when given."""
    with Image.open(path) as image:
        if image.mode not in ("P", "L"):
            raise DatasetError(f"{path}: a {image.mode} image, not a label map (8-bit palette or grey PNG of class "
                               f"indices)")
        values = np.asarray(image, dtype=np.uint8)
    if label_map is not None:
        values = np.asarray(label_map, dtype=np.uint8)[values]
    return torch.from_numpy(values.astype(np.int64))


class SegmentationDataset(Dataset):
    """Samples -> (image (3, H, W) in [0, 1], {"mask": (H, W) int64}, index), the fine-tuning engine's items.

    Training (A.5): the image is scaled by a random ratio in ``scale_range`` (labels by nearest neighbour), padded
    to ``crop_size`` with the mean colour (0 once normalised) and ``ignore_index``, cropped at a random place to
    ``crop_size`` square and flipped with ``flip_prob``. Test: the whole image at its own size. With
    ``num_classes``, a label value that is neither a class nor ``ignore_index`` is a DatasetError.

    The pairs passed the header check (:mod:`moco_core.data.pairs`); one that still fails to decode (a file
    cut short after its header) is warned of once per process and, in training, replaced by the next pair; in the
    test it is an empty item (a (3, 0, 0) image, a (0, 0) mask) whose ``"unreadable"`` says why, which the test
    leaves out of the score and counts.
    """

    def __init__(self, samples: list[Sample], *, train: bool, label_map: tuple[int, ...] | None = None,
                 crop_size: int = 513, scale_range: tuple[float, float] = (0.5, 2.0), flip_prob: float = 0.5,
                 mean: tuple[float, ...] = (0.485, 0.456, 0.406), ignore_index: int = 255,
                 num_classes: int | None = None) -> None:
        self.samples, self.train, self.label_map, self.num_classes = samples, train, label_map, num_classes
        self.crop_size, self.scale_range, self.flip_prob = crop_size, scale_range, flip_prob
        self.mean, self.ignore_index = mean, ignore_index

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, dict[str, torch.Tensor], int]:
        for step in range(len(self.samples) if self.train else 1):
            position = (index + step) % len(self.samples)
            sample = self.samples[position]
            path = sample.image  # the file being read, named if it fails
            try:
                image = read_rgb(str(path))
                path = sample.label
                label = self._label(sample, image)
            except DatasetError:
                raise
            except Exception as err:  # a corrupt file can fail to decode in many ways
                why = reason(err)
                report_undecodable(str(path), "the next pair" if self.train else "nothing (left out of the score)",
                                   why)
                if not self.train:
                    return (torch.zeros(3, 0, 0), {"mask": torch.zeros(0, 0, dtype=torch.int64),
                                                   "unreadable": f"{path.name} ({why})"}, index)  # type: ignore
                continue
            if self.train:
                image, label = self.augment(image, label)
            return image, {"mask": label}, index
        raise DatasetError(f"none of the {len(self.samples)} training pairs could be decoded")

    def _label(self, sample: Sample, image: torch.Tensor) -> torch.Tensor:
        """The (H, W) label of a pair whose (3, H, W) image is read, its size and values checked."""
        label = read_label(sample.label, self.label_map)
        if image.shape[1:] != label.shape:
            raise DatasetError(f"{sample.label}: {tuple(label.shape)} pixels, its image {sample.image} "
                               f"{tuple(image.shape[1:])}")
        if self.num_classes is not None:
            wrong = label[(label >= self.num_classes) & (label != self.ignore_index)]
            if wrong.numel():
                raise DatasetError(f"{sample.label}: label value {int(wrong.max())} is neither a class (0-"
                                   f"{self.num_classes - 1}) nor the ignore index {self.ignore_index}")
        return label

    def augment(self, image: torch.Tensor, label: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Random scale, pad, crop and flip: (3, H, W), (H, W) -> (3, C, C), (C, C)."""
        low, high = self.scale_range
        ratio = low + (high - low) * float(torch.rand(()))
        size = [max(1, round(s * ratio)) for s in label.shape]
        image = F.interpolate(image[None], size=size, mode="bilinear", align_corners=False)[0]
        label = F.interpolate(label[None, None].float(), size=size, mode="nearest")[0, 0].long()
        crop = self.crop_size
        pad_h, pad_w = max(crop - size[0], 0), max(crop - size[1], 0)
        if pad_h or pad_w:
            fill = torch.tensor(self.mean).view(3, 1, 1)
            padded = fill.expand(3, size[0] + pad_h, size[1] + pad_w).clone()
            padded[:, : size[0], : size[1]] = image
            image = padded
            label = F.pad(label, (0, pad_w, 0, pad_h), value=self.ignore_index)
        top = int(torch.randint(label.shape[0] - crop + 1, ()))
        left = int(torch.randint(label.shape[1] - crop + 1, ()))
        image, label = image[:, top:top + crop, left:left + crop], label[top:top + crop, left:left + crop]
        if float(torch.rand(())) < self.flip_prob:
            image, label = image.flip(-1), label.flip(-1)
        return image.contiguous(), label.contiguous()
