"""Generated scenes of the shapes classes with their label maps: the images every embedded detection and
segmentation set is made of (VOC and COCO layouts in :mod:`transfer.embedded`, the class masks of ``moco eval
semseg``, the ADE20K layout of the dense probes in :mod:`dense.embedded`), and :func:`ensure`, which writes a
dataset of them once. Here, in moco_core, so that every evaluation package reads them without importing another.

A scene (``size`` px square, 128 by default) is drawn for detection to be hard the way real photographs are, so
that the backbone a detector starts from matters (issue #17: with one large shape per image, shapes version 3
converted, every backbone, random init included, scored 91-94 AP50):
- **several objects** (2-6), of classes drawn independently, so an image's class says nothing of its objects;
- **varied sizes, small ones included**: the larger bbox side is log-uniform in 10-55% of the image (13-70 px at
  128); by visible area, 79% of the objects are COCO-small (under 32x32 px), as 41% of COCO's own are;
- **partial occlusion**: objects are drawn in turn, each on top of the earlier ones, and a placement is kept only
  while every earlier object stays at least half visible; boxes and masks are of the *visible* pixels (the
  masks, exact as drawn, are COCO RLE);
- **clutter**: unlabelled lines and irregular blobs, drawn first, in the objects' blues or in greys, on a grey
  background with a gentle gradient in a random direction;
- **shape, not colour, tells the classes apart**: every object takes a blue of the pretraining data's range
  (:func:`moco_core.data.shapes.object_colour`), whatever its class, upright within 15 degrees
  (:func:`moco_core.data.shapes.outline`); Gaussian noise of standard deviation 4 is added last.

Output is a pure function of the arguments: scene ``i`` of a split draws from its own generator seeded by
``SeedSequence([seed, _STREAM, split_id, i])``. Each dataset directory is written into a temporary sibling and
renamed into place; its ``DONE`` file (written last) holds the version and parameters, and a directory whose
``DONE`` differs is regenerated.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from moco_core.data import shapes
from moco_core.data.generated import write_once

EMBEDDED_VERSION = 2  # bump whenever the files written here change (1: shapes images converted, one object each)
JPEG_QUALITY = 95
DEFAULT_TRAIN = 400  # trainval / train2017 images
DEFAULT_TEST = 100  # test / val2017 images
DEFAULT_SIZE = 128

_STREAM = 17  # keeps the scenes' random streams apart from the shapes dataset's
_SPLITS = {"train": 0, "test": 1}
_OBJECTS = (2, 6)  # objects per scene, both ends included
_EXTENT = (0.1, 0.55)  # an object's larger bbox side as a fraction of the image side, log-uniform
_MIN_VISIBLE = 0.5  # every object keeps at least this fraction of its pixels in view
_PLACEMENT_TRIES = 30  # an object that cannot be placed in this many tries is left out
_CLUTTER = (3, 8)  # unlabelled lines and blobs per scene, both ends included
_GRADIENT = 0.15  # the background's brightness changes by up to this much (of 255) across the image
_NOISE_STD = 4.0


def _polygon_mask(points: np.ndarray, size: int) -> np.ndarray:
    """The pixels PIL fills for the polygon, as a (size, size) bool array."""
    canvas = Image.new("L", (size, size), 0)
    ImageDraw.Draw(canvas).polygon([float(v) for v in points.reshape(-1)], fill=1)
    return np.asarray(canvas, dtype=bool)


def _rgb(values: np.ndarray) -> Image.Image:
    """A (size, size, 3) float array in [0, 255], rounded and clipped, as an RGB image."""
    return Image.fromarray(np.clip(np.round(values), 0, 255).astype(np.uint8), "RGB")


def _background(rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
    """A grey with a linear gradient in a random direction: the (size, size, 3) image and its mean colour."""
    grey = shapes.background_colour(rng)
    angle = rng.uniform(0.0, 2 * np.pi)
    ramp = np.linspace(-0.5, 0.5, size)
    gradient = np.cos(angle) * ramp[None, :] + np.sin(angle) * ramp[:, None]
    image = grey[None, None, :] + 255.0 * rng.uniform(0.0, _GRADIENT) * gradient[:, :, None]
    return image, grey


def _clutter(rng: np.random.Generator, draw: ImageDraw.ImageDraw, grey: np.ndarray, size: int) -> None:
    """Unlabelled lines and irregular blobs, in the objects' blues or in greys."""
    for _ in range(rng.integers(_CLUTTER[0], _CLUTTER[1] + 1)):
        if rng.random() < 0.5:
            colour = shapes.object_colour(rng, grey)
        else:
            grey_level = int(round(255 * rng.uniform(0.1, 0.9)))
            colour = (grey_level, grey_level, grey_level)
        if rng.random() < 0.5:
            ends = rng.uniform(0, size, (2, 2))
            draw.line([float(v) for v in ends.reshape(-1)], fill=colour, width=int(rng.integers(1, 4)))
        else:
            k = int(rng.integers(5, 10))
            angles = np.sort(rng.uniform(0.0, 2 * np.pi, k))
            radii = rng.uniform(0.4, 1.0, k) * rng.uniform(0.03, 0.12) * size
            centre = rng.uniform(0, size, 2)
            points = centre + np.stack([radii * np.cos(angles), radii * np.sin(angles)], axis=1)
            draw.polygon([float(v) for v in points.reshape(-1)], fill=colour)


def _objects(rng: np.random.Generator, size: int, kinds: Kinds | None = None, *,
             extent_range: tuple[float, float] = _EXTENT) -> tuple[list[tuple[int, np.ndarray]], np.ndarray]:
    """(class id, polygon) of each object, in drawing order, every one at least half visible at the end; and the
    label map: 1 + the index of the object seen at each pixel, 0 where none is. Classes are the shapes, drawn
    uniformly, unless ``kinds`` gives others; ``extent_range``: as ``_EXTENT``."""
    placed: list[tuple[int, np.ndarray]] = []
    areas: list[int] = []  # each placed object's whole area, in pixels
    label = np.zeros((size, size), dtype=np.int16)
    for _ in range(rng.integers(_OBJECTS[0], _OBJECTS[1] + 1)):
        for _ in range(_PLACEMENT_TRIES):
            if kinds is not None:
                class_id = int(rng.choice(len(kinds.weights), p=kinds.weights))
                shape = kinds.shapes[class_id]
            else:
                class_id = int(rng.integers(len(shapes.CLASSES)))
                shape = shapes.CLASSES[class_id]
            extent = size * float(np.exp(rng.uniform(np.log(extent_range[0]), np.log(extent_range[1]))))
            points = shapes.outline(rng, shape, extent)
            w, h = points.max(axis=0)
            points = np.round(points + rng.uniform(0.0, [size - 1 - w, size - 1 - h]), 2)
            mask = _polygon_mask(points, size)
            covered = label * ~mask
            if all((covered == k + 1).sum() >= _MIN_VISIBLE * area for k, area in enumerate(areas)):
                label = np.where(mask, len(areas) + 1, label).astype(np.int16)
                placed.append((class_id, points))
                areas.append(int(mask.sum()))
                break
    return placed, label


def _scene(rng: np.random.Generator, size: int, kinds: Kinds | None = None, **placement: Any
           ) -> tuple[Image.Image, list[dict[str, Any]]]:
    """One scene and its objects: ``category_id``, whole ``outline`` ((k, 2) polygon), visible ``mask`` (bool),
    its ``bbox`` [x0, y0, x1, y1] and the ``label`` map of the scene; ``kinds`` and ``placement``:
    :func:`_objects`' options."""
    background, grey = _background(rng, size)
    image = _rgb(background)
    draw = ImageDraw.Draw(image)
    _clutter(rng, draw, grey, size)
    objects, label = _objects(rng, size, kinds, **placement)
    for class_id, points in objects:  # in placement order: each on top of the earlier ones, as the label map has
        draw.polygon([float(v) for v in points.reshape(-1)], fill=shapes.object_colour(rng, grey))
        if kinds is not None and kinds.windows[class_id] > 0:  # the window: the outline shrunk about its centre
            centre = points.mean(axis=0)
            window = centre + kinds.windows[class_id] * (points - centre)
            draw.polygon([float(v) for v in window.reshape(-1)], fill=tuple(int(round(v)) for v in grey))
    noisy = np.asarray(image, dtype=np.float64) + rng.normal(0.0, _NOISE_STD, (size, size, 3))
    records = []
    for k, (class_id, points) in enumerate(objects):
        mask = label == k + 1
        rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
        bbox = [float(cols[0]), float(rows[0]), float(cols[-1] + 1), float(rows[-1] + 1)]
        records.append({"category_id": class_id, "outline": points, "mask": mask, "bbox": bbox, "label": label,
                        "index": k + 1})
    return _rgb(noisy), records


@dataclass(frozen=True)
class Kinds:
    """Object classes other than the 8 shapes (the LVIS-like set): class k is ``shapes[k]``, solid in the blue every
    object takes, or with a window (``windows[k]`` > 0): the outline shrunk by that factor about its centre, painted
    in the scene's background grey, inside it; drawn with probability ``weights[k]``. The object's mask is its
    whole outline, window included."""

    shapes: tuple[str, ...]
    windows: tuple[float, ...]
    weights: tuple[float, ...]


def scenes(split: str, count: int, *, size: int = DEFAULT_SIZE, seed: int = 0, kinds: Kinds | None = None,
           stream: int = _STREAM, **placement: Any) -> Iterator[tuple[Image.Image, list[dict[str, Any]]]]:
    """The first ``count`` scenes of ``split`` ("train" or "test"), as :func:`_scene` gives them (``stream``: the
    random streams of a derived set, kept apart from these; ``kinds``, ``placement``: :func:`_objects`' options)."""
    for index in range(count):
        rng = np.random.default_rng(np.random.SeedSequence([seed, stream, _SPLITS[split], index]))
        yield _scene(rng, size, kinds, **placement)


def class_mask(objects: list[dict], size: int) -> np.ndarray:
    """(size, size) uint8: 0 background, 1 + category_id on each object's visible pixels (disjoint masks): the
    scenes' class masks, as :mod:`transfer.segmentation.embedded` and :mod:`dense.data` write them."""
    label = np.zeros((size, size), dtype=np.uint8)
    for obj in objects:
        label[obj["mask"]] = obj["category_id"] + 1
    return label


def ensure(name: str, write: Callable[[Path, dict[str, int], int, int], None], root: Path | None,
           counts: dict[str, int], size: int, seed: int, version: int | str = EMBEDDED_VERSION) -> Path:
    """Make ``root/name`` with ``write`` unless its ``DONE`` already matches; returns ``root``."""
    if min(counts.values()) < 1 or size < 32 or seed < 0:
        raise ValueError(f"image counts must be >= 1, size >= 32 and seed >= 0, got {counts}, size={size}, "
                         f"seed={seed}")
    if root is None:
        sizes = "x".join(str(v) for v in counts.values())
        root = shapes.data_home() / f"scenes-v{EMBEDDED_VERSION}-seed{seed}-{size}px-{sizes}"
    root = Path(root)
    stamp = json.dumps({"version": version, "seed": seed, "size": size, **counts}, sort_keys=True) + "\n"
    return write_once(root, name, stamp, lambda tmp: write(tmp, counts, size, seed))
