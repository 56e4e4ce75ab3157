"""Embedded default dataset: blue geometric shapes on flat grey backgrounds, generated from a seed.

No download is needed: ``ensure_shapes()`` writes real RGB PNG files in the ImageNet folder-per-class layout
(``train/<class>/<class>_00000.png``, ``val/<class>/...``) for pretraining and linear classification, plus
``annotations/{train,val}.json`` recording every object's class, box and polygon mask. (The embedded detection
data are scenes of their own, drawn with :func:`outline` and :func:`object_colour`: ``moco_core/data/scenes.py``.)
Every shape is one simple polygon, so the stored polygon *is* the mask;
polygons are drawn with ``PIL.ImageDraw.polygon`` from exactly the stored (rounded) coordinates.

Per image: one labelled object (the folder's class; ``objects[0]``) spanning 45-75% of the image side, upright
within 15 degrees, at a random position fully inside the image, in a saturated blue far from the background; a
flat grey background of random brightness; Gaussian noise of standard deviation 4 per pixel, added last.

Only the shape, its tilt and what MoCo's augmentation changes anyway (position, size, brightness, a colour among
the blues) differ between images. Version 2 also drew any hue, gradient backgrounds in a random direction, noise
of random strength (2-8), free rotation and a small distractor of another class: cues that survive crops and
colour jitter and tell images apart more easily than their shapes. In a CPU-minutes MoCo run, instance
discrimination learned those, and its features fell below random init's under the linear protocol (README,
Evaluation). Version 1 had smaller objects (28-60%) and striped backgrounds; a ResNet trained with labels did
not learn it in CPU minutes.

Output is a pure function of the arguments: each image draws from its own ``numpy`` generator seeded by
``SeedSequence([seed, split_id, class_id, index])`` (train and val use different ``split_id``), and PIL's PNG
encoder is deterministic, so equal arguments give byte-identical files. Bump ``SHAPES_VERSION`` whenever the
output changes.
"""

from __future__ import annotations

import colorsys
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from moco_core.data.data import DatasetError
from moco_core.user_files import ANNOTATION_LIMIT, read_json

CLASSES: tuple[str, ...] = ("circle", "square", "triangle", "diamond", "pentagon", "hexagon", "star", "cross")
SHAPES_VERSION: int = 3

_SPLITS: dict[str, int] = {"train": 0, "val": 1}
_MAIN_EXTENT = (0.45, 0.75)  # the object's larger bbox side, as a fraction of the image side
_MAX_TILT = np.deg2rad(15.0)  # rotation away from upright, either way
_BACKGROUND_VALUE = (0.3, 0.7)  # grey level of the background, in [0, 1]
_OBJECT_HUE = (0.55, 0.65)  # blues
_MIN_CONTRAST = 90.0  # min RGB distance between the object's colour and the background's
_NOISE_STD = 4.0
_MARGIN = 1.0  # pixels kept free between every polygon and the image border


def _regular(k: int, phase: float = np.pi / 2, radii: tuple[float, ...] = (1.0,)) -> np.ndarray:
    """Vertices of a regular k-gon (radii alternate per vertex, which makes a star), shape (k, 2)."""
    angles = phase + 2 * np.pi * np.arange(k) / k
    r = np.resize(np.asarray(radii), k)
    return np.stack([r * np.cos(angles), r * np.sin(angles)], axis=1)


def _cross(a: float = 0.3) -> np.ndarray:
    """A plus sign with arm half-width ``a`` as one 12-vertex simple polygon."""
    quarter = [(a, 1.0), (a, a), (1.0, a)]
    pts = []
    for rot in range(4):  # rotate the quarter outline by multiples of -90 degrees
        c, s = np.cos(-rot * np.pi / 2), np.sin(-rot * np.pi / 2)
        pts += [(c * x - s * y, s * x + c * y) for x, y in quarter]
    return np.asarray(pts)


_UNIT_SHAPES: dict[str, np.ndarray] = {
    "circle": _regular(32),
    "square": _regular(4, phase=np.pi / 4),
    "triangle": _regular(3),
    "diamond": np.array([(0.0, 1.0), (0.6, 0.0), (0.0, -1.0), (-0.6, 0.0)]),
    "pentagon": _regular(5),
    "hexagon": _regular(6),
    "star": _regular(10, radii=(1.0, 0.45)),
    "cross": _cross(),
}


def _hsv(h: float, s: float, v: float) -> np.ndarray:
    """HSV in [0, 1] to an RGB float vector in [0, 255]."""
    return 255.0 * np.asarray(colorsys.hsv_to_rgb(h, s, v))


def background_colour(rng: np.random.Generator) -> np.ndarray:
    """A grey of random brightness, as an RGB float vector in [0, 255]."""
    return _hsv(0.0, 0.0, rng.uniform(*_BACKGROUND_VALUE))


def object_colour(rng: np.random.Generator, background: np.ndarray) -> tuple[int, int, int]:
    """A saturated blue far from the background; the most distant of 32 tries if none passes the check."""
    best, best_dist = None, -1.0
    for _ in range(32):
        c = _hsv(rng.uniform(*_OBJECT_HUE), rng.uniform(0.7, 1.0), rng.uniform(0.6, 1.0))
        dist = float(np.linalg.norm(c - background))
        if dist > best_dist:
            best, best_dist = c, dist
        if dist >= _MIN_CONTRAST:
            break
    r, g, b = (int(round(x)) for x in best)
    return r, g, b


def outline(rng: np.random.Generator, cls: str, extent: float) -> np.ndarray:
    """The class's shape tilted at random (within 15 degrees), its larger bbox side ``extent`` px, bbox at 0.

    The unit shapes are drawn with y up; image rows go down, so y is flipped first (a triangle points up).
    """
    theta = rng.uniform(-_MAX_TILT, _MAX_TILT)
    rot = np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]])
    pts = (_UNIT_SHAPES[cls] * np.array([1.0, -1.0])) @ rot.T
    pts -= pts.min(axis=0)
    return pts * (extent / pts.max())


def _place(rng: np.random.Generator, cls: str, extent: float, size: int) -> np.ndarray:
    """:func:`outline` at a random position fully inside the image."""
    pts = outline(rng, cls, extent)
    w, h = pts.max(axis=0)
    offset = [rng.uniform(_MARGIN, size - _MARGIN - w), rng.uniform(_MARGIN, size - _MARGIN - h)]
    return np.round(pts + offset, 2)


def _object_record(class_id: int, poly: np.ndarray, size: int) -> dict[str, Any]:
    """The JSON record of one object: category, tight clipped bbox [x0, y0, x1, y1], flat polygon."""
    clipped = np.clip(poly, 0.0, float(size))
    (x0, y0), (x1, y1) = clipped.min(axis=0), clipped.max(axis=0)
    return {
        "category": CLASSES[class_id],
        "category_id": class_id,
        "bbox": [float(x0), float(y0), float(x1), float(y1)],
        "polygon": [float(v) for v in clipped.reshape(-1)],
    }


def _render(rng: np.random.Generator, class_id: int, size: int) -> tuple[Image.Image, list[dict[str, Any]]]:
    """Draw one image; returns it with its object records (one object)."""
    background = background_colour(rng)
    image = Image.new("RGB", (size, size), tuple(int(round(x)) for x in background))
    polygon = _place(rng, CLASSES[class_id], rng.uniform(*_MAIN_EXTENT) * size, size)
    record = _object_record(class_id, polygon, size)
    ImageDraw.Draw(image).polygon(record["polygon"], fill=object_colour(rng, background))
    noisy = np.asarray(image, dtype=np.float64) + rng.normal(0.0, _NOISE_STD, (size, size, 3))
    return Image.fromarray(np.clip(np.round(noisy), 0, 255).astype(np.uint8), "RGB"), [record]


def _write_split(root: Path, split: str, seed: int, size: int, per_class: int) -> None:
    """Write one split's PNGs and its annotation file."""
    images = []
    for class_id, cls in enumerate(CLASSES):
        (root / split / cls).mkdir(parents=True, exist_ok=True)
        for index in range(per_class):
            rng = np.random.default_rng(np.random.SeedSequence([seed, _SPLITS[split], class_id, index]))
            image, objects = _render(rng, class_id, size)
            rel = f"{split}/{cls}/{cls}_{index:05d}.png"
            image.save(root / rel, format="PNG")
            images.append({"file": rel, "width": size, "height": size, "label": class_id, "objects": objects})
    meta = {"version": SHAPES_VERSION, "seed": seed, "image_size": size, "classes": list(CLASSES)}
    with open(root / "annotations" / f"{split}.json", "w", encoding="utf-8") as f:
        json.dump({**meta, "images": images}, f, separators=(",", ":"))


def generate_shapes(
    root: Path, *, seed: int = 0, image_size: int = 64, train_per_class: int = 250, val_per_class: int = 50
) -> None:
    """Write the shapes dataset into ``root`` (created if needed); ``root/DONE`` holding the version is last.

    ``seed`` must be a non-negative integer. Existing files of the same names are overwritten; a stale
    ``DONE`` is removed first so an interrupted run never looks complete.
    """
    if seed < 0 or image_size < 16 or train_per_class < 0 or val_per_class < 0:
        raise ValueError(
            f"generate_shapes needs seed >= 0, image_size >= 16 and non-negative counts; got seed={seed}, "
            f"image_size={image_size}, train_per_class={train_per_class}, val_per_class={val_per_class}"
        )
    root = Path(root)
    (root / "DONE").unlink(missing_ok=True)
    (root / "annotations").mkdir(parents=True, exist_ok=True)
    _write_split(root, "train", seed, image_size, train_per_class)
    _write_split(root, "val", seed, image_size, val_per_class)
    (root / "DONE").write_text(f"{SHAPES_VERSION}\n", encoding="utf-8")


_DEFAULTS: dict[str, int] = dict(generate_shapes.__kwdefaults__)


def _is_complete(root: Path) -> bool:
    """Whether ``root/DONE`` exists and names the current ``SHAPES_VERSION``."""
    try:
        return (root / "DONE").read_text(encoding="utf-8").strip() == str(SHAPES_VERSION)
    except OSError:
        return False


def shapes_version(path: str) -> dict[str, str]:
    """``{"version": "shapes v3"}`` for the embedded data (``path`` "embedded"; part of an evaluation's recipe in
    its record, so that values measured on one version never judge a run on another), else nothing."""
    return {"version": f"shapes v{SHAPES_VERSION}"} if path == "embedded" else {}


def data_home() -> Path:
    """Where generated datasets live: ``$MOCO_DATA_HOME``, by default ``~/.cache/moco``."""
    return Path(os.path.expanduser(os.environ.get("MOCO_DATA_HOME") or Path.home() / ".cache" / "moco"))


def ensure_shapes(root: Path | None = None, **kwargs: int) -> Path:
    """Return a complete shapes dataset directory, generating it first if needed.

    ``kwargs`` are ``generate_shapes``'s keyword arguments. Without ``root`` the directory is
    ``$MOCO_DATA_HOME/shapes-v{SHAPES_VERSION}-seed{seed}-{image_size}px-{train}x{val}`` (``MOCO_DATA_HOME``
    defaults to ``~/.cache/moco``). An explicit ``root`` is used as-is and trusted once its ``DONE`` names the
    current version (its parameters are not re-checked). Generation goes to a unique temporary sibling that is
    renamed into place, so a crash never leaves a complete-looking partial dataset, and a concurrent process
    finishing first is tolerated.
    """
    params = dict(_DEFAULTS)
    unknown = set(kwargs) - set(params)
    if unknown:
        raise TypeError(f"ensure_shapes got unknown arguments {sorted(unknown)}; expected {sorted(params)}")
    params.update(kwargs)
    if root is None:
        home = data_home()
        name = (f"shapes-v{SHAPES_VERSION}-seed{params['seed']}-{params['image_size']}px-"
                f"{params['train_per_class']}x{params['val_per_class']}")
        root = home / name
    root = Path(root)
    if _is_complete(root):
        return root
    try:
        return _generate_into(root, params)
    except OSError as err:
        raise DatasetError(f"cannot write the embedded dataset in {root.parent}: {err.strerror or err} (set "
                           f"MOCO_DATA_HOME to a writable folder)") from None


def _generate_into(root: Path, params: dict[str, int]) -> Path:
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.", suffix=".tmp", dir=root.parent))
    try:
        generate_shapes(tmp, **params)
        if _is_complete(root):  # another process finished first
            shutil.rmtree(tmp)
            return root
        if root.exists():  # stale or incomplete leftover
            shutil.rmtree(root, ignore_errors=True)
        try:
            os.replace(tmp, root)
        except OSError:
            if not _is_complete(root):
                raise
            shutil.rmtree(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return root


def load_annotations(root: Path, split: str) -> dict[str, Any]:
    """Read ``root/annotations/{split}.json`` (split ``"train"`` or ``"val"``) back as a dict."""
    if split not in _SPLITS:
        raise ValueError(f"split must be one of {sorted(_SPLITS)}, got {split!r}")
    path = Path(root) / "annotations" / f"{split}.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"no shapes annotations at {path}; create the dataset with ensure_shapes() or generate_shapes()"
        )
    return read_json(path, limit=ANNOTATION_LIMIT, what="shapes annotations")
