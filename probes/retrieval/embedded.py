"""Embedded retrieval data: generated scenes in revisitop's layout, written by our own generator.

Each dataset has a few "landmarks": a flat facade of coloured shapes on a base (the same drawing every time it
appears). A database image shows one landmark under a viewpoint change (an affine warp: rotation, anisotropic
scale, shear, a shift) on cluttered background, or clutter alone (a distractor). The change decides its label,
as revisitop's annotators did with real photographs: a near-frontal, whole view is ``easy``; a strong warp or a
partial view is ``hard``; a view with most of the landmark outside the frame is ``junk``. A query is the
landmark frontal in clutter, its ``bbx`` the landmark's box, written as ``qimlist`` images that are not in the
database (as in rOxford5k and rParis6k). The ground truth is ``gnd_<name>.pkl`` with plain lists and floats.
"""

from __future__ import annotations

import json
import math
import pickle
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from moco_core.data import shapes
from moco_core.data.generated import write_once

EMBEDDED_VERSION = 1
DATASETS = ("rscenes1", "rscenes2")  # two generated sets, as the protocol has Oxford and Paris
SIZE = 64  # image side, pixels
LANDMARK = 40  # a landmark's side before the warp, pixels
# per landmark: database views by label, and queries
VIEWS = {"easy": 3, "hard": 2, "junk": 1}
QUERIES = 2
LANDMARKS = 4
DISTRACTORS = 6


def _landmark(rng: np.random.Generator) -> Image.Image:
    """An RGBA facade: an opaque base with 4 to 6 shapes on it; the alpha marks the landmark."""
    img = Image.new("RGBA", (LANDMARK, LANDMARK), (0, 0, 0, 0))
    draw = ImageDraw.Draw(img)
    base = tuple(int(v) for v in rng.integers(40, 216, size=3))
    draw.rectangle((0, 0, LANDMARK - 1, LANDMARK - 1), fill=(*base, 255))
    for _ in range(int(rng.integers(4, 7))):
        colour = (*(int(v) for v in rng.integers(0, 256, size=3)), 255)
        x, y = rng.integers(0, LANDMARK - 8, size=2)
        w, h = rng.integers(6, 18, size=2)
        box = (int(x), int(y), int(min(x + w, LANDMARK - 1)), int(min(y + h, LANDMARK - 1)))
        [draw.rectangle, draw.ellipse][int(rng.integers(0, 2))](box, fill=colour)
    return img


def _clutter(rng: np.random.Generator) -> Image.Image:
    """Background: a colour and a dozen small random shapes (never a landmark)."""
    img = Image.new("RGB", (SIZE, SIZE), tuple(int(v) for v in shapes.background_colour(rng)))
    draw = ImageDraw.Draw(img)
    for _ in range(12):
        x, y = rng.integers(0, SIZE, size=2)
        r = int(rng.integers(2, 6))
        draw.ellipse((int(x) - r, int(y) - r, int(x) + r, int(y) + r),
                     fill=tuple(int(v) for v in rng.integers(0, 256, size=3)))
    return img


def _warp(label: str, rng: np.random.Generator) -> np.ndarray:
    """The 2x3 affine map of a view (landmark pixels -> image pixels) for its label."""
    angle, scale, shear = {
        "query": (rng.uniform(-3, 3), rng.uniform(0.95, 1.05), 0.0),
        "easy": (rng.uniform(-10, 10), rng.uniform(0.85, 1.1), rng.uniform(-0.05, 0.05)),
        "hard": (rng.choice([-1, 1]) * rng.uniform(25, 40), rng.uniform(0.55, 0.75), rng.uniform(-0.3, 0.3)),
        "junk": (rng.uniform(-10, 10), rng.uniform(0.9, 1.1), 0.0),
    }[label]
    a = math.radians(angle)
    linear = np.array([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]]) @ np.array(
        [[scale, shear], [0.0, scale * rng.uniform(0.85, 1.15)]])
    centre = np.full(2, SIZE / 2) + (rng.uniform(-5, 5, size=2) if label != "junk" else
                                     rng.choice([-1, 1], size=2) * rng.uniform(0.55, 0.65, size=2) * SIZE)
    shift = centre - linear @ np.full(2, LANDMARK / 2)
    return np.hstack([linear, shift[:, None]])


def _render(landmark: Image.Image | None, label: str, rng: np.random.Generator) -> tuple[Image.Image, list[float]]:
    """A view of ``landmark`` (None: clutter alone) and its landmark's box (x1, y1, x2, y2)."""
    img = _clutter(rng)
    if landmark is None:
        return img, []
    forward = _warp(label, rng)
    inverse = np.linalg.inv(np.vstack([forward, [0, 0, 1]]))[:2]  # PIL maps image pixels back to the landmark's
    warped = landmark.transform((SIZE, SIZE), Image.Transform.AFFINE, tuple(inverse.ravel()),
                                resample=Image.Resampling.BILINEAR)
    img.paste(warped, (0, 0), warped)
    ys, xs = np.nonzero(np.asarray(warped)[..., 3] > 127)
    box = [float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1)] if len(xs) else []
    return img, box


def _write_set(folder: Path, name: str, seed: int) -> None:
    """One dataset in revisitop's layout under ``folder/name``."""
    rng = np.random.default_rng(seed)
    jpg = folder / name / "jpg"
    jpg.mkdir(parents=True)
    landmarks = [_landmark(rng) for _ in range(LANDMARKS)]
    views = [(k, label) for k in range(LANDMARKS) for label, n in VIEWS.items() for _ in range(n)]
    views += [(None, "negative")] * DISTRACTORS
    order = rng.permutation(len(views))  # the database is not grouped by landmark
    imlist, labels = [], []
    for i, index in enumerate(order):
        k, label = views[index]
        img, _ = _render(None if k is None else landmarks[k], label, rng)
        imlist.append(f"{name}_{i:06d}")
        img.save(jpg / f"{imlist[-1]}.jpg", quality=95)
        labels.append((k, label))
    qimlist, gnd = [], []
    for k in range(LANDMARKS):
        for q in range(QUERIES):
            img, box = _render(landmarks[k], "query", rng)
            qimlist.append(f"{name}_query_{k}_{q}")
            img.save(jpg / f"{qimlist[-1]}.jpg", quality=95)
            gnd.append({"bbx": box, **{label: [i for i, (m, lab) in enumerate(labels) if m == k and lab == label]
                                       for label in VIEWS}})
    with open(folder / name / f"gnd_{name}.pkl", "wb") as f:
        pickle.dump({"imlist": imlist, "qimlist": qimlist, "gnd": gnd}, f, protocol=2)


def ensure_retrieval(root: Path | None = None, *, seed: int = 0) -> Path:
    """A folder holding :data:`DATASETS` in revisitop's layout, generated once (``$MOCO_DATA_HOME``)."""
    root = Path(root) if root is not None else shapes.data_home() / f"retrieval-v{EMBEDDED_VERSION}-seed{seed}"
    stamp = json.dumps({"version": EMBEDDED_VERSION, "seed": seed}) + "\n"
    for i, name in enumerate(DATASETS):
        write_once(root, name, stamp, lambda tmp, name=name, i=i: _write_set(tmp, name, seed * 100 + i))
    return root
