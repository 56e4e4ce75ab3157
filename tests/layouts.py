"""Small datasets and weight files in the on-disk layouts real users have, for the acceptance tests.

- :func:`imagenet_layout`: ``train/<wnid>/*.JPEG`` and ``val/<wnid>/*.JPEG`` (ILSVRC's folder names), with one
  truncated file, one grayscale and one CMYK JPEG among them, as ImageNet has.
- :func:`detection_layout`: detectron2's ``datasets/`` layout: ``VOC2007/`` and ``VOC2012/`` (``Annotations/``,
  ``JPEGImages/``, ``ImageSets/Main/{trainval,test}.txt``, objects named with VOC's class names),
  ``coco/annotations/instances_{train,val}2017.json`` with ``coco/{train,val}2017/``, and beside them COCO's
  keypoint files ``coco/annotations/person_keypoints_{train,val}2017.json`` (:func:`add_coco_keypoints`: their
  images in the same ``coco/{train,val}2017/``, 12-digit names as COCO's),
  ``lvis/lvis_v0.5_{train,val}.json`` whose images (``coco_url``) are in ``coco/{train,val}2017/`` beside COCO's,
  and ``cityscapes/leftImg8bit/{train,val}/<city>/<city>_<seq>_<frame>_leftImg8bit.png`` with
  ``cityscapes/gtFine/{train,val}/<city>/..._gtFine_{instanceIds.png,labelIds.png,polygons.json}``;
  :func:`custom_detection_layout`: one's own VOC-style devkit and COCO-format files (instances and keypoints), in
  no standard place.
- :func:`inat_layout`: iNaturalist 2018 as its competition ships it: ``train_val2018/<supercategory>/<category
  id>/<32 hex digits>.jpg`` with ``train2018.json`` and ``val2018.json`` (COCO-like, the 2018 files' fields).
- :func:`official_checkpoint`: a checkpoint as the official ``main_moco.py`` writes it (DDP's ``module.`` prefix,
  a real SGD state); :func:`torchvision_weights`: a torchvision ResNet ``state_dict`` file.
"""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import numpy as np
import torch
import torchvision
from PIL import Image

from moco_core import checkpoint
from moco_core.model.methods import build_moco
from moco_core.pretrain_config import ModelConfig
from tests.matfiles import mat_file
from transfer.detection.cityscapes import ensure_cityscapes
from transfer.detection.embedded_keypoints import ensure_keypoints
from transfer.detection.lvis import ensure_lvis
from transfer.detection.voc import VOC_CLASSES
from transfer.embedded import ensure_coco, ensure_voc

WNIDS = ("n01440764", "n01443537", "n01484850", "n01491361")  # the first four ILSVRC-2012 classes


def _photo(rng: np.random.Generator, height: int, width: int) -> Image.Image:
    coarse = rng.integers(0, 256, (height // 8 + 1, width // 8 + 1, 3), dtype=np.uint8)
    return Image.fromarray(coarse).resize((width, height), Image.BICUBIC)


def imagenet_layout(root: Path, train_per_class: int = 5, val_per_class: int = 2, seed: int = 0, *,
                    ilsvrc_val_names: bool = False) -> Path:
    """A 4-class ImageNet-layout folder of 40-60 px photograph-like JPEGs; returns ``root``. ``ilsvrc_val_names``:
    val images named as ILSVRC-2012's are (``ILSVRC2012_val_00000001.JPEG`` ...), numbered 1 .. N across the
    classes in a shuffled order, as the released val archive numbers its 50,000 (ReaL's labels follow them)."""
    rng = np.random.default_rng(seed)
    numbers = iter(np.random.default_rng([seed, 1]).permutation(len(WNIDS) * val_per_class) + 1)  # own stream
    for split, count in (("train", train_per_class), ("val", val_per_class)):
        for c, wnid in enumerate(WNIDS):
            folder = root / split / wnid
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                image = _photo(rng, int(rng.integers(40, 60)), int(rng.integers(40, 60)))
                name = f"ILSVRC2012_val_{next(numbers):08d}.JPEG" if split == "val" and ilsvrc_val_names else \
                    f"{wnid}_{i}.JPEG"
                image.save(folder / name, quality=90)
            if split == "train" and c == 1:
                _photo(rng, 48, 52).convert("L").save(folder / f"{wnid}_gray.JPEG", quality=90)
            if split == "train" and c == 2:
                _photo(rng, 50, 44).convert("CMYK").save(folder / f"{wnid}_cmyk.JPEG", quality=90)
    buffer = io.BytesIO()
    _photo(rng, 48, 48).save(buffer, format="JPEG", quality=90)
    (root / "train" / WNIDS[0] / f"{WNIDS[0]}_truncated.JPEG").write_bytes(buffer.getvalue()[:200])
    return root


# ImageNet-A's and -R's file names as their archives hold them (the classification/robustness.py docstring)
A_NAMES = ("0.000116_digital clock _ digital clock_0.865662.jpg", "0.003001_balloon _ balloon_0.4695473.jpg")
R_NAMES = ("art_0.jpg", "cartoon_12.jpg", "sketch_3.jpg")
A_CLASSES, R_CLASSES = (WNIDS[1], WNIDS[3]), (WNIDS[0], WNIDS[2], WNIDS[3])  # the 200-class sets: a subset each


def robustness_layout(root: Path, imagenet: Path, seed: int = 0) -> Path:
    """ImageNet's robustness sets under ``root`` as their archives extract, for the 4 classes of
    :func:`imagenet_layout` (the first four of ImageNet-1k, so their indices are 0 .. 3 there too); returns
    ``root``:

    - ``imagenetv2-matched-frequency-format-val/<0..3>/<40 hex digits>.jpeg``, 3 a class;
    - ``imagenet-a/README.txt`` and ``imagenet-a/<wnid>/`` for :data:`A_CLASSES`, named as :data:`A_NAMES`;
    - ``imagenet-r/README.txt`` and ``imagenet-r/<wnid>/`` for :data:`R_CLASSES`, named as :data:`R_NAMES`;
    - ``sketch/<wnid>/sketch_<n>.JPEG`` for all four classes, 2 a class;
    - ``real.json``: 50,000 label lists (ReaL's length); for the val images of ``imagenet`` (named as ILSVRC's:
      ``imagenet_layout(..., ilsvrc_val_names=True)``) their class, a second label on every third, and an empty
      list (no label fits) on the first.
    """
    rng = np.random.default_rng(seed)
    v2 = root / "imagenetv2-matched-frequency-format-val"
    for index in range(len(WNIDS)):
        (v2 / str(index)).mkdir(parents=True, exist_ok=True)
        for _ in range(3):
            name = "".join(f"{b:02x}" for b in rng.integers(0, 256, 20))
            _photo(rng, 48, 56).save(v2 / str(index) / f"{name}.jpeg", quality=90)
    for folder, classes, names, readme in (
            ("imagenet-a", A_CLASSES, A_NAMES, "ImageNet-A: 7,500 natural adversarial examples, 200 classes\n"),
            ("imagenet-r", R_CLASSES, R_NAMES, "ImageNet-R: 30,000 renditions of 200 ImageNet classes\n")):
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / folder / "README.txt").write_text(readme)
        for wnid in classes:
            (root / folder / wnid).mkdir(exist_ok=True)
            for name in names:
                _photo(rng, 44, 52).save(root / folder / wnid / name, quality=90)
    for wnid in WNIDS:
        (root / "sketch" / wnid).mkdir(parents=True, exist_ok=True)
        for n in range(2):
            _photo(rng, 52, 52).convert("L").convert("RGB").save(root / "sketch" / wnid / f"sketch_{n}.JPEG")
    labels: list[list[int]] = [[i % 1000] for i in range(50000)]
    val = sorted((imagenet / "val").glob("*/ILSVRC2012_val_*.JPEG"), key=lambda p: p.name)
    for k, path in enumerate(val):
        number, cls = int(path.stem.rsplit("_", 1)[1]), WNIDS.index(path.parent.name)
        labels[number - 1] = [] if k == 0 else [cls, (cls + 1) % len(WNIDS)] if k % 3 == 0 else [cls]
    (root / "real.json").write_text(json.dumps(labels))
    return root


def detection_layout(root: Path, train: int = 12, test: int = 6) -> Path:
    """VOC2007, VOC2012 and coco under ``root`` (detectron2's datasets/ layout), of 64-px embedded scenes; the
    VOC objects carry VOC class names (shape class k becomes VOC class k)."""
    ensure_voc(root, trainval=train, test=test, size=64)
    ensure_coco(root, train=train, val=test, size=64)
    voc = root / "VOC2007"
    names = sorted({m for xml in (voc / "Annotations").glob("*.xml")
                    for m in re.findall(r"<name>([^<]+)</name>", xml.read_text())})
    rename = {name: VOC_CLASSES[k] for k, name in enumerate(names)}
    for xml in (voc / "Annotations").glob("*.xml"):
        text = re.sub(r"<name>([^<]+)</name>", lambda m: f"<name>{rename[m.group(1)]}</name>", xml.read_text())
        xml.write_text(text)
    if not (root / "VOC2012").exists():
        shutil.copytree(voc, root / "VOC2012")
    add_coco_keypoints(root / "coco", train=train, test=test)
    lvis_layout(root, train=train, val=test)
    ensure_cityscapes(root, train=train, val=test, size=64)
    return root


def lvis_layout(root: Path, train: int = 12, val: int = 6) -> Path:
    """``lvis/lvis_v0.5_{train,val}.json`` under ``root``, their images added to ``coco/{train,val}2017/`` (LVIS
    uses COCO's images: ours are renamed to ids of their own, 100000 on, so they sit beside the COCO fixture's)."""
    made = ensure_lvis(root / ".lvis_made", train=train, val=val, size=64)
    (root / "lvis").mkdir(exist_ok=True)
    for split in ("train", "val"):
        doc = json.loads((made / "lvis" / f"lvis_v0.5_{split}.json").read_text())
        for image in doc["images"]:
            url = image["coco_url"]
            old = url.rsplit("/", 1)[1]
            image["file_name"] = f"{image['id'] + 100000:012d}.jpg"
            image["coco_url"] = url.replace(old, image["file_name"])
            (root / "coco" / f"{split}2017").mkdir(parents=True, exist_ok=True)
            shutil.copy(made / "coco" / f"{split}2017" / old, root / "coco" / f"{split}2017" / image["file_name"])
        (root / "lvis" / f"lvis_v0.5_{split}.json").write_text(json.dumps(doc))
    shutil.rmtree(made)
    return root


KEYPOINT_IMAGE_IDS = 500000  # the keypoint scenes' image ids (and file names) start here, after the instance ones


def add_coco_keypoints(coco: Path, train: int = 12, test: int = 6, *, prefix: str = "") -> None:
    """Keypoint scenes of 64 px added to the COCO folder ``coco``: ``annotations/person_keypoints_{train,val}2017.json``
    (or ``annotations/<prefix>{train,val}.json`` with images in ``images/<split>/`` for ``prefix``, one's own
    files) whose images go beside the instance images, named as COCO's by image id."""
    made = coco.parent / ".keypoints_made"
    ensure_keypoints(made, train=train, val=test, size=64)
    (coco / "annotations").mkdir(parents=True, exist_ok=True)
    for split in ("train2017", "val2017"):
        doc = json.loads((made / "coco" / "annotations" / f"person_keypoints_{split}.json").read_text())
        ours = split.removesuffix("2017")
        folder = coco / "images" / ours if prefix else coco / split
        folder.mkdir(parents=True, exist_ok=True)
        for image in doc["images"]:
            source = made / "coco" / split / image["file_name"]
            image["id"] += KEYPOINT_IMAGE_IDS
            image["file_name"] = f"{image['id']:012d}.jpg"
            shutil.copyfile(source, folder / image["file_name"])
            if prefix:
                image["file_name"] = f"{ours}/{image['file_name']}"
        for ann in doc["annotations"]:
            ann["image_id"] += KEYPOINT_IMAGE_IDS
        name = f"{prefix}{ours}.json" if prefix else f"person_keypoints_{split}.json"
        (coco / "annotations" / name).write_text(json.dumps(doc))
    shutil.rmtree(made)


def custom_detection_layout(root: Path, train: int = 12, test: int = 6) -> Path:
    """Detection data of one's own under ``root``, as README's custom-dataset commands name it: a VOC-style devkit
    ``MyDevkit/`` whose objects keep the shapes' class names, with splits ``train`` and ``val``; and COCO-format
    ``annotations/{train,val}.json`` whose ``file_name`` entries are ``train/<name>``, ``val/<name>`` under
    ``images/``, and keypoint files ``annotations/keypoints_{train,val}.json`` of the same form."""
    made = root / "made"
    ensure_voc(made, trainval=train, test=test, size=64)
    ensure_coco(made, train=train, val=test, size=64)
    devkit = root / "MyDevkit"
    shutil.copytree(made / "VOC2007", devkit)
    splits = devkit / "ImageSets" / "Main"
    (splits / "trainval.txt").rename(splits / "train.txt")
    (splits / "test.txt").rename(splits / "val.txt")
    (root / "annotations").mkdir()
    for ours, theirs in (("train", "train2017"), ("val", "val2017")):
        doc = json.loads((made / "coco" / "annotations" / f"instances_{theirs}.json").read_text())
        for image in doc["images"]:
            image["file_name"] = f"{ours}/{image['file_name']}"
        (root / "annotations" / f"{ours}.json").write_text(json.dumps(doc))
        shutil.copytree(made / "coco" / theirs, root / "images" / ours)
    shutil.rmtree(made)
    add_coco_keypoints(root, train=train, test=test, prefix="keypoints_")
    return root


def official_checkpoint(path: Path, arch: str = "resnet18") -> Path:
    """What ``main_moco.py`` saves: epoch, arch, the DDP-wrapped model's state_dict, the SGD state after a step."""
    torch.manual_seed(0)
    model = build_moco(ModelConfig(arch=arch, queue_size=64, shuffle_bn="none"), world_size=1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.03, momentum=0.9, weight_decay=1e-4)
    logits, labels, _ = model(torch.randn(4, 3, 32, 32), torch.randn(4, 3, 32, 32))
    torch.nn.functional.cross_entropy(logits, labels).backward()
    optimizer.step()
    state = checkpoint.to_official(model.state_dict())
    assert {k.split(".")[1] for k in state} == {"encoder_q", "encoder_k", "queue", "queue_ptr"}
    torch.save({"epoch": 200, "arch": arch, "state_dict": state, "optimizer": optimizer.state_dict()}, path)
    return path


def torchvision_weights(path: Path, arch: str = "resnet18") -> Path:
    torch.save(getattr(torchvision.models, arch)().state_dict(), path)
    return path


# (category id, supercategory, name): ids as the 2018 files number them (0..8141), a few of their kingdoms
INAT_CATEGORIES = ((0, "Plantae", "Aa calceata"), (1, "Plantae", "Abies alba"), (2, "Insecta", "Abaeis nicippe"),
                   (3, "Aves", "Abeillia abeillei"))


def inat_layout(root: Path, train_per_class: int = 5, val_per_class: int = 2, seed: int = 0) -> Path:
    """iNaturalist 2018's layout under ``root`` (4 categories of 40-60 px JPEGs): the images of both splits in
    ``train_val2018/<supercategory>/<id>/<hash>.jpg``, each split's ``images`` / ``annotations`` / ``categories``
    in ``train2018.json`` and ``val2018.json``, whose ``file_name`` is relative to ``root``; returns ``root``."""
    rng = np.random.default_rng(seed)
    categories = [{"id": i, "name": name, "supercategory": sup, "kingdom": "Animalia" if sup != "Plantae" else
                   sup} for i, sup, name in INAT_CATEGORIES]
    image_id = 0
    for split, count in (("train2018", train_per_class), ("val2018", val_per_class)):
        images, annotations = [], []
        for category_id, sup, _ in INAT_CATEGORIES:
            folder = root / "train_val2018" / sup / str(category_id)
            folder.mkdir(parents=True, exist_ok=True)
            for _ in range(count):
                name = "".join(f"{b:02x}" for b in rng.integers(0, 256, 16))
                height, width = int(rng.integers(40, 60)), int(rng.integers(40, 60))
                _photo(rng, height, width).save(folder / f"{name}.jpg", quality=90)
                images.append({"id": image_id, "file_name": f"train_val2018/{sup}/{category_id}/{name}.jpg",
                               "width": width, "height": height, "license": 3, "rights_holder": "someone"})
                annotations.append({"id": image_id, "image_id": image_id, "category_id": category_id})
                image_id += 1
        doc = {"info": {"year": 2018, "version": "1.0", "description": "iNaturalist 2018 (test fixture)"},
               "images": images, "annotations": annotations, "categories": categories,
               "licenses": [{"id": 3, "name": "Attribution-NonCommercial License"}]}
        (root / f"{split}.json").write_text(json.dumps(doc))
    return root


def simclr_subset_file(path: Path, names: list[str]) -> Path:
    """A subset list in SimCLR's published format (google-research/simclr ``imagenet_subsets/1percent.txt``): one
    ``<wnid>_<n>.JPEG`` a line, classes mixed, a newline after the last."""
    path.write_text("".join(f"{name}\n" for name in names))
    return path


CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


def cifar_folder_layout(root: Path, classes: int = 3, train_per_class: int = 4, test_per_class: int = 2) -> Path:
    """torchvision's CIFAR-10 exported to folders: ``train/<class>/<n>.png`` and ``test/<class>/<n>.png`` (no
    ``val/``), 32-px RGB PNGs named by their index in the split."""
    rng = np.random.default_rng(1)
    for split, count in (("train", train_per_class), ("test", test_per_class)):
        index = 0
        for name in CIFAR10_CLASSES[:classes]:
            (root / split / name).mkdir(parents=True, exist_ok=True)
            for _ in range(count):
                _photo(rng, 32, 32).save(root / split / name / f"{index:05d}.png")
                index += 1
    return root


def flowers_layout(root: Path, labels: tuple[int, ...] = (1, 1, 2, 3, 2, 3, 1, 2, 3, 1, 2, 3),
                   trnid: tuple[int, ...] = (1, 3, 4), valid: tuple[int, ...] = (2, 5, 6),
                   tstid: tuple[int, ...] = (7, 8, 9, 10, 11, 12)) -> Path:
    """Oxford Flowers-102 as torchvision's ``Flowers102(root, download=True)`` leaves it, shrunk: ``root/flowers-102/
    jpg/image_00001.jpg`` ..., ``imagelabels.mat`` (``labels``, classes from 1) and ``setid.mat`` (``trnid``,
    ``valid``, ``tstid``, image numbers from 1); returns ``root``."""
    base = root / "flowers-102"
    (base / "jpg").mkdir(parents=True)
    rng = np.random.default_rng(2)
    for i in range(1, len(labels) + 1):
        _photo(rng, int(rng.integers(40, 60)), int(rng.integers(40, 60))).save(base / "jpg" / f"image_{i:05d}.jpg")
    mat_file(base / "imagelabels.mat", {"labels": np.array(labels)})
    mat_file(base / "setid.mat", {"trnid": np.array(trnid), "valid": np.array(valid), "tstid": np.array(tstid)})
    return root


PETS = (("Abyssinian", 1, 1, 1), ("american_bulldog", 2, 2, 1), ("Bengal", 3, 1, 2))  # name, class, species, breed


def pets_layout(root: Path, trainval: int = 3, test: int = 2) -> Path:
    """Oxford-IIIT Pets as torchvision's ``OxfordIIITPet(root, download=True)`` leaves it, shrunk:
    ``root/oxford-iiit-pet/images/<Breed>_<n>.jpg`` (and a stray ``.mat`` among them, as the real archive has),
    ``annotations/trainval.txt`` and ``test.txt`` (``<image> <class> <species> <breed>``), ``annotations/list.txt``
    with its ``#`` header; returns ``root``."""
    base = root / "oxford-iiit-pet"
    (base / "images").mkdir(parents=True)
    (base / "annotations").mkdir()
    rng = np.random.default_rng(3)
    lines: dict[str, list[str]] = {"trainval": [], "test": []}
    for name, cls, species, breed in PETS:
        for n in range(1, trainval + test + 1):
            _photo(rng, 48, 40).save(base / "images" / f"{name}_{n}.jpg", quality=90)
            lines["trainval" if n <= trainval else "test"].append(f"{name}_{n} {cls} {species} {breed}")
    (base / "images" / f"{PETS[0][0]}_{trainval + test + 1}.mat").write_bytes(b"MATLAB 5.0 MAT-file")
    for split, rows in lines.items():
        (base / "annotations" / f"{split}.txt").write_text("\n".join(rows) + "\n")
    header = "#Image CLASS-ID SPECIES BREED ID\n#ID: 1:37 Class ids\n"
    (base / "annotations" / "list.txt").write_text(header + "\n".join(lines["trainval"] + lines["test"]) + "\n")
    return root



def densepose_layout(root: Path, train: int = 6, test: int = 3, seed: int = 0) -> Path:
    """DensePose-COCO in detectron2's datasets/ layout as DensePose names it: ``coco/annotations/
    densepose_train2014.json`` and ``densepose_minival2014.json`` (dp_x, dp_y, dp_I, dp_U, dp_V, dp_masks as RLE,
    boxes; keypoints absent, no instance segmentation) with their images in ``coco/train2014/`` and
    ``coco/val2014/`` (COCO 2014's ``COCO_<folder>_<12 digits>.jpg`` names), 64-96 px, one or two bodies each
    (:mod:`transfer.detection.embedded_densepose`'s scenes)."""
    from transfer.detection.embedded_densepose import write_splits

    write_splits(root, {"train2014": train, "minival2014": test}, (64, 96), seed)
    return root


def densepose_eval_files(root: Path) -> Path:
    """Stand-ins for the files DensePose fetches into iopath's cache, for runs without internet; returns the folder
    to give as ``$FVCORE_CACHE`` (:func:`transfer.detection.embedded_densepose.write_stand_ins`)."""
    from transfer.detection.embedded_densepose import EVAL_FILES, write_stand_ins

    write_stand_ins(root)
    return root / EVAL_FILES
