"""The embedded transfer suite: small generated datasets in the real on-disk layouts of four of the suite's
datasets (and scikit-learn's digits in a fifth), read by the suite's own readers, so ``moco eval transfer CKPT
--data embedded`` runs the whole protocol in minutes on a CPU with no download.

Each kind of label the real suite has, one dataset each (64-px JPEGs; the features are read at the embedded
pretraining's 32-px scale, preset ``transfer_embedded``):
- ``shapes`` (Caltech-101's layout, ``caltech101/101_ObjectCategories/<class>/image_0001.jpg``): object category.
  One of the 8 shapes of the pretraining data, in any colour, tilted up to 15 degrees, 30-70% of the image, on a
  grey gradient with clutter (lines and blobs); plus ``BACKGROUND_Google``, clutter alone. 60 images a class; the
  30-a-class split is drawn, as Caltech-101's. Mean per-class accuracy.
- ``textures`` (DTD's layout, ``dtd/dtd/images/<class>/<class>_0001.jpg``, ``labels/{train,val,test}1.txt``):
  texture. 8 periodic or random patterns (stripes, checks, dots, grid, zigzag, rings, crosshatch, blotches) at a
  random scale, phase, orientation and pair of colours, the whole image. 30 a class in each split. Top-1.
- ``variants`` (FGVC Aircraft's layout, ``fgvc-aircraft-2013b/data/images/<7 digits>.jpg``,
  ``images_variant_{train,val,test}.txt``, ``variants.txt``): fine-grained variants of one shape: stars of 4 to 7
  points, thin or stout arms, drawn as the shapes dataset draws its objects (a blue on grey). 30 a class in each
  split. Mean per-class accuracy.
- ``scenes`` (VOC 2007's layout, ``VOCdevkit/VOC2007/{JPEGImages,Annotations,ImageSets/Main}``): multi-label.
  1-3 shapes of the 8 classes a scene on clutter; an object smaller than 20% of the image is marked difficult (as
  VOC marks hard instances): a class present only through such objects is 0 in its list. 150 train, 150 val, 250
  test scenes. 11-point mAP.
- ``digits`` (Food-101's layout, ``food-101/images/<class>/<id>.jpg``, ``meta/{train,test}.json``): the 1,797 8x8
  handwritten digits scikit-learn ships (real data no one here made: UCI's optical digits), scaled to 32 px
  (nearest), a seeded 75% / 25% split; only where scikit-learn is installed. Top-1.

Output is a pure function of the seed: image ``i`` of a dataset draws from ``SeedSequence([seed, stream, i])``.
Each dataset is written into a temporary folder renamed into place, its ``DONE`` (the version and parameters)
last; a folder whose ``DONE`` differs is made again. Bump :data:`SUITE_VERSION` when the files change.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from classification.linear_transfer.catalog import BY_NAME, Spec
from moco_core import smoke
from moco_core.data import shapes
from moco_core.data.data import DatasetError

SUITE_VERSION = 1
SIZE = 64
JPEG_QUALITY = 95
LAYOUTS = {"shapes": "caltech101", "textures": "dtd", "variants": "aircraft", "scenes": "voc2007",
           "digits": "food101"}
COUNTS = {"shapes": 60, "textures": 30, "variants": 30, "scenes": (150, 150, 250)}  # a class (a split)
SMOKE_COUNTS = {"shapes": 4, "textures": 3, "variants": 3, "scenes": (12, 12, 12)}
TEXTURES = ("stripes", "checks", "dots", "grid", "zigzag", "rings", "crosshatch", "blotches")
STARS = tuple((points, arms) for points in (4, 5, 6, 7) for arms in ("thin", "stout"))
_INNER = {"thin": 0.38, "stout": 0.62}  # inner radius of a star, of its outer


def _rng(seed: int, stream: int, index: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, stream, index]))


def _save(image: Image.Image, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, format="JPEG", quality=JPEG_QUALITY)


def _scene_base(rng: np.random.Generator, size: int) -> tuple[Image.Image, np.ndarray]:
    """A grey with a gentle gradient and 2-5 unlabelled lines or blobs: the image and its mean grey."""
    grey = shapes.background_colour(rng)
    ramp = np.linspace(-0.5, 0.5, size)
    angle = rng.uniform(0, 2 * np.pi)
    gradient = np.cos(angle) * ramp[None, :] + np.sin(angle) * ramp[:, None]
    pixels = grey[None, None, :] + 255.0 * rng.uniform(0, 0.15) * gradient[:, :, None]
    image = Image.fromarray(np.clip(np.round(pixels), 0, 255).astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(image)
    for _ in range(rng.integers(2, 6)):
        level = int(255 * rng.uniform(0.1, 0.9))
        colour = (level, level, level) if rng.random() < 0.5 else shapes.object_colour(rng, grey)
        if rng.random() < 0.5:
            draw.line([float(v) for v in rng.uniform(0, size, 4)], fill=colour, width=int(rng.integers(1, 3)))
        else:
            centre, radius = rng.uniform(0, size, 2), rng.uniform(0.03, 0.1) * size
            angles = np.sort(rng.uniform(0, 2 * np.pi, 6))
            points = centre + radius * rng.uniform(0.4, 1, (6, 1)) * np.stack([np.cos(angles), np.sin(angles)], 1)
            draw.polygon([float(v) for v in points.reshape(-1)], fill=colour)
    return image, grey


def _noisy(image: Image.Image, rng: np.random.Generator) -> Image.Image:
    pixels = np.asarray(image, dtype=np.float64) + rng.normal(0.0, 4.0, (*image.size[::-1], 3))
    return Image.fromarray(np.clip(np.round(pixels), 0, 255).astype(np.uint8), "RGB")


def _any_colour(rng: np.random.Generator, grey: np.ndarray) -> tuple[int, int, int]:
    """A saturated colour of any hue, far from the background (the pretraining's objects are all blue)."""
    import colorsys

    for _ in range(32):
        rgb = 255 * np.asarray(colorsys.hsv_to_rgb(rng.uniform(0, 1), rng.uniform(0.6, 1), rng.uniform(0.5, 1)))
        if np.linalg.norm(rgb - grey) > 90:
            break
    r, g, b = (int(round(v)) for v in rgb)
    return r, g, b


def _tilted(points: np.ndarray, rng: np.random.Generator, extent: float, size: int, tilt: float) -> np.ndarray:
    """Unit ``points`` (y up) tilted up to ``tilt`` radians, scaled to ``extent`` px, placed inside the image."""
    theta = rng.uniform(-tilt, tilt)
    rot = np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]])
    pts = (points * np.array([1.0, -1.0])) @ rot.T
    pts -= pts.min(0)
    pts *= extent / pts.max()
    w, h = pts.max(0)
    return pts + rng.uniform(1, [size - 1 - w, size - 1 - h])


def _placed(rng: np.random.Generator, cls: str, extent: float, size: int) -> np.ndarray:
    """The shape class's outline as the pretraining data draws it (tilted up to 15 degrees, its larger side
    ``extent`` px), at a random position inside the image."""
    pts = shapes.outline(rng, cls, extent)
    w, h = pts.max(0)
    return pts + rng.uniform(1, [size - 1 - w, size - 1 - h])


def _shapes_image(rng: np.random.Generator, cls: str | None) -> Image.Image:
    image, grey = _scene_base(rng, SIZE)
    if cls is not None:
        points = _placed(rng, cls, rng.uniform(0.3, 0.7) * SIZE, SIZE)
        ImageDraw.Draw(image).polygon([float(v) for v in points.reshape(-1)], fill=_any_colour(rng, grey))
    return _noisy(image, rng)


def _write_shapes(target: Path, per_class: int, seed: int) -> None:
    base = target / "caltech101" / "101_ObjectCategories"
    for c, cls in enumerate((*shapes.CLASSES, "BACKGROUND_Google")):
        for i in range(per_class):
            rng = _rng(seed, 101, c * 100_000 + i)
            image = _shapes_image(rng, None if cls == "BACKGROUND_Google" else cls)
            _save(image, base / cls / f"image_{i + 1:04d}.jpg")


def _texture(rng: np.random.Generator, kind: str) -> Image.Image:
    """The whole image a pattern of two colours: a field f(x, y) thresholded, at a random scale and angle."""
    n = SIZE
    yy, xx = np.mgrid[0:n, 0:n].astype(np.float64)
    angle = rng.uniform(0, np.pi)
    u = np.cos(angle) * xx + np.sin(angle) * yy
    v = -np.sin(angle) * xx + np.cos(angle) * yy
    period = rng.uniform(6, 14)
    phase = rng.uniform(0, period, 2)
    a, b = (u + phase[0]) / period, (v + phase[1]) / period
    if kind == "stripes":
        mask = (a % 1) < 0.5
    elif kind == "checks":
        mask = ((np.floor(a) + np.floor(b)) % 2) == 0
    elif kind == "dots":
        mask = np.hypot(a % 1 - 0.5, b % 1 - 0.5) < 0.25
    elif kind == "grid":
        mask = ((a % 1) < 0.2) | ((b % 1) < 0.2)
    elif kind == "zigzag":
        mask = ((a + 0.5 * np.abs((b % 1) - 0.5)) % 1) < 0.5
    elif kind == "rings":
        centre = rng.uniform(0, n, 2)
        mask = (np.hypot(xx - centre[0], yy - centre[1]) / period % 1) < 0.5
    elif kind == "crosshatch":
        mask = (((a + b) % 1) < 0.2) | (((a - b) % 1) < 0.2)
    else:  # blotches: smooth noise thresholded at its median
        coarse = rng.normal(size=(n // 8 + 2, n // 8 + 2))
        field = np.asarray(Image.fromarray(coarse.astype(np.float32), "F").resize((n, n), Image.BICUBIC))
        mask = field > np.median(field)
    grey = shapes.background_colour(rng)
    first, second = np.asarray(_any_colour(rng, grey), float), grey
    pixels = np.where(mask[:, :, None], first[None, None, :], second[None, None, :])
    return _noisy(Image.fromarray(np.clip(np.round(pixels), 0, 255).astype(np.uint8), "RGB"), rng)


def _write_textures(target: Path, per_split: int, seed: int) -> None:
    base = target / "dtd" / "dtd"
    lists: dict[str, list[str]] = {"train": [], "val": [], "test": []}
    for c, kind in enumerate(TEXTURES):
        for s, split in enumerate(lists):
            for i in range(per_split):
                number = s * per_split + i + 1
                name = f"{kind}/{kind}_{number:04d}.jpg"
                _save(_texture(_rng(seed, 47, c * 100_000 + number), kind), base / "images" / name)
                lists[split].append(name)
    for split, names in lists.items():
        (base / "labels").mkdir(parents=True, exist_ok=True)
        (base / "labels" / f"{split}1.txt").write_text("".join(f"{n}\n" for n in names), encoding="utf-8")


def _star(points: int, arms: str) -> np.ndarray:
    angles = np.pi / 2 + np.pi * np.arange(2 * points) / points
    radii = np.where(np.arange(2 * points) % 2 == 0, 1.0, _INNER[arms])
    return np.stack([radii * np.cos(angles), radii * np.sin(angles)], 1)


def _write_variants(target: Path, per_split: int, seed: int) -> None:
    base = target / "fgvc-aircraft-2013b" / "data"
    names = [f"star-{p}-{arms}" for p, arms in STARS]
    lists: dict[str, list[str]] = {"train": [], "val": [], "test": []}
    number = 1_000_000
    for c, (points, arms) in enumerate(STARS):
        for split in lists:
            for _ in range(per_split):
                number += 1
                rng = _rng(seed, 100, number)
                grey = shapes.background_colour(rng)
                image = Image.new("RGB", (SIZE, SIZE), tuple(int(round(v)) for v in grey))
                outline = _tilted(_star(points, arms), rng, rng.uniform(0.45, 0.75) * SIZE, SIZE, np.pi)
                ImageDraw.Draw(image).polygon([float(v) for v in outline.reshape(-1)],
                                              fill=shapes.object_colour(rng, grey))
                _save(_noisy(image, rng), base / "images" / f"{number}.jpg")
                lists[split].append(f"{number} {names[c]}")
    for split, rows in lists.items():
        (base / f"images_variant_{split}.txt").write_text("".join(f"{r}\n" for r in rows), encoding="utf-8")
    (base / "variants.txt").write_text("".join(f"{n}\n" for n in names), encoding="utf-8")


def _voc_xml(image_id: str, objects: list[tuple[str, list[int], bool]]) -> bytes:
    root = ET.Element("annotation")
    ET.SubElement(root, "folder").text = "VOC2007"
    ET.SubElement(root, "filename").text = f"{image_id}.jpg"
    size = ET.SubElement(root, "size")
    for tag, value in (("width", SIZE), ("height", SIZE), ("depth", 3)):
        ET.SubElement(size, tag).text = str(value)
    for name, box, difficult in objects:
        node = ET.SubElement(root, "object")
        ET.SubElement(node, "name").text = name
        ET.SubElement(node, "difficult").text = str(int(difficult))
        bndbox = ET.SubElement(node, "bndbox")
        for tag, value in zip(("xmin", "ymin", "xmax", "ymax"), box, strict=True):
            ET.SubElement(bndbox, tag).text = str(value)
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8")


def _write_scenes(target: Path, counts: tuple[int, int, int], seed: int) -> None:
    base = target / "VOCdevkit" / "VOC2007"
    main = base / "ImageSets" / "Main"
    main.mkdir(parents=True)
    (base / "Annotations").mkdir()
    ids: dict[str, list[str]] = {"train": [], "val": [], "test": []}
    labels: dict[str, dict[str, list[int]]] = {s: {c: [] for c in shapes.CLASSES} for s in ids}
    number = 0
    for split, count in zip(ids, counts, strict=True):
        for _ in range(count):
            number += 1
            image_id = f"{number:06d}"
            rng = _rng(seed, 2007, number)
            image, grey = _scene_base(rng, SIZE)
            draw, objects = ImageDraw.Draw(image), []
            for _ in range(rng.integers(1, 4)):
                cls = shapes.CLASSES[int(rng.integers(len(shapes.CLASSES)))]
                extent = rng.uniform(0.15, 0.45)
                points = _placed(rng, cls, extent * SIZE, SIZE)
                draw.polygon([float(v) for v in points.reshape(-1)], fill=shapes.object_colour(rng, grey))
                x0, y0 = np.floor(points.min(0)).astype(int) + 1
                x1, y1 = np.ceil(points.max(0)).astype(int)
                objects.append((cls, [int(x0), int(y0), int(x1), int(y1)], extent < 0.2))
            _save(_noisy(image, rng), base / "JPEGImages" / f"{image_id}.jpg")
            (base / "Annotations" / f"{image_id}.xml").write_bytes(_voc_xml(image_id, objects))
            ids[split].append(image_id)
            for cls in shapes.CLASSES:
                seen = [difficult for name, _, difficult in objects if name == cls]
                labels[split][cls].append(-1 if not seen else 1 if not all(seen) else 0)
    ids["trainval"] = ids["train"] + ids["val"]
    labels["trainval"] = {c: labels["train"][c] + labels["val"][c] for c in shapes.CLASSES}
    for split, names in ids.items():
        (main / f"{split}.txt").write_text("".join(f"{i}\n" for i in names), encoding="utf-8")
        for cls in shapes.CLASSES:
            rows = "".join(f"{i} {v:2d}\n" for i, v in zip(names, labels[split][cls], strict=True))
            (main / f"{cls}_{split}.txt").write_text(rows, encoding="utf-8")


def _write_digits(target: Path, _count: object, seed: int) -> None:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    base = target / "food-101"
    order = np.random.default_rng(np.random.SeedSequence([seed, 8])).permutation(len(y))
    test = set(order[: len(y) // 4].tolist())
    meta: dict[str, dict[str, list[str]]] = {"train": {}, "test": {}}
    for i in range(len(y)):
        cls = f"digit_{int(y[i])}"
        pixels = np.repeat(np.repeat(255 - x[i].reshape(8, 8) * 255 / 16, 4, 0), 4, 1)
        grey = Image.fromarray(np.round(pixels).astype(np.uint8), "L").convert("RGB")
        _save(grey, base / "images" / cls / f"{i:05d}.jpg")
        meta["test" if i in test else "train"].setdefault(cls, []).append(f"{cls}/{i:05d}")
    (base / "meta").mkdir(parents=True, exist_ok=True)
    for split, content in meta.items():
        (base / "meta" / f"{split}.json").write_text(json.dumps(dict(sorted(content.items()))), encoding="utf-8")


WRITERS: dict[str, Callable[[Path, object, int], None]] = {
    "shapes": _write_shapes, "textures": _write_textures, "variants": _write_variants,  # type: ignore[dict-item]
    "scenes": _write_scenes, "digits": _write_digits}  # type: ignore[dict-item]


def unmade() -> dict[str, str]:
    """The embedded datasets this installation cannot make, and why (digits: scikit-learn ships its images)."""
    from moco_core.config import extra_problem

    why = extra_problem("the embedded suite's digits (scikit-learn's scans)", "sklearn", "sklearn", "scikit-learn")
    return {"digits": why} if why else {}


def available() -> tuple[str, ...]:
    """The embedded datasets this installation makes (digits: where scikit-learn is installed)."""
    return tuple(n for n in LAYOUTS if n not in unmade())


def ensure_suite(root: Path | None = None, *, seed: int = 0) -> Path:
    """A folder holding each embedded dataset in ``<name>/`` (MOCO_SMOKE=1: a smaller one beside the full)."""
    counts = SMOKE_COUNTS if smoke.enabled() else COUNTS
    if root is None:
        root = shapes.data_home() / f"transfer-suite-v{SUITE_VERSION}-seed{seed}{'-smoke' if smoke.enabled() else ''}"
    for name in available():
        stamp = json.dumps({"version": SUITE_VERSION, "seed": seed, "count": counts.get(name)}) + "\n"
        target = Path(root) / name
        if _read(target / "DONE") == stamp:
            continue
        try:
            _write_into(target, lambda tmp, n=name: WRITERS[n](tmp, counts.get(n), seed), stamp)
        except OSError as err:
            raise DatasetError(f"cannot write the embedded transfer suite in {root}: {err.strerror or err} (set "
                               f"MOCO_DATA_HOME to a writable folder)") from None
    return Path(root)


def _write_into(target: Path, write: Callable[[Path], None], stamp: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        write(tmp)
        (tmp / "DONE").write_text(stamp, encoding="utf-8")
        if _read(target / "DONE") == stamp:  # another process finished first
            return
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


def specs(root: Path) -> list[Spec]:
    """The embedded datasets under ``root`` as suite specs: each read by its layout's reader from ``root/<name>``."""
    out = []
    for name in available():
        layout = BY_NAME[LAYOUTS[name]]
        out.append(replace(layout, name=name, title=f"{name} ({layout.title}'s layout)",
                           marker=f"{name}/{layout.marker}", layout=f"{name}/{layout.layout}",
                           read=lambda r, n=name, read=layout.read: read(r / n)))
    return out


def version_of(path: str | None, name: str) -> dict[str, str]:
    """The record's ``version`` for an embedded dataset (values measured on one version never judge another)."""
    return {"version": f"transfer suite v{SUITE_VERSION}", "layout": LAYOUTS[name]} if path == "embedded" else {}
