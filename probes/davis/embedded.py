"""Embedded videos in DAVIS-2017's release layout: coloured shapes moving over a textured background.

``ensure_davis()`` writes ``<root>/DAVIS/`` with ``JPEGImages/480p/<video>/00000.jpg, ...``,
``Annotations/480p/<video>/00000.png, ...`` (palette PNGs, DAVIS's palette, ids 1..n of the objects, each object
seen in the first frame) and ``ImageSets/2017/val.txt``, so that the real reader (:mod:`.layout`) and the whole
protocol run on CPU in seconds. The layout's folder is named 480p as the release's is, whatever the frames' size.

Each video holds 2-3 objects (ellipses, boxes and triangles of distinct colours) that move in straight lines and
grow or shrink a little, later ones drawn over earlier ones (occlusion: the masks are the visible pixels), on a
background of soft blobs with noise. Output is a pure function of the arguments: video ``i`` draws from its own
generator seeded by ``SeedSequence([seed, _STREAM, i])``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from moco_core.data import shapes
from moco_core.data.generated import write_once

VERSION = 1  # bump whenever the files written here change
DEFAULT_VIDEOS = 3
DEFAULT_FRAMES = 10
DEFAULT_SIZE = (192, 320)  # (height, width): 3:5, about DAVIS's 480 x 854, the width a multiple of 64
JPEG_QUALITY = 95
_STREAM = 60  # keeps these generators apart from the other embedded datasets'
_KINDS = ("ellipse", "box", "triangle")
_OBJECTS = (2, 3)  # both ends included
_EXTENT = (0.18, 0.32)  # an object's size as a fraction of the frame's height
_SPEED = 0.025  # at most this fraction of the frame's width a frame, either way
_BLOBS = 12


def palette() -> list[int]:
    """DAVIS's (and PASCAL VOC's) 256-colour palette, flat RGB: index bits spread over the channels' high bits."""
    colours = []
    for index in range(256):
        r = g = b = 0
        value = index
        for shift in range(7, -1, -1):
            r |= (value & 1) << shift
            g |= ((value >> 1) & 1) << shift
            b |= ((value >> 2) & 1) << shift
            value >>= 3
        colours += [r, g, b]
    return colours


def _background(rng: np.random.Generator, height: int, width: int) -> Image.Image:
    base = rng.uniform(70, 180, size=3)
    image = Image.new("RGB", (width, height), tuple(int(v) for v in base))
    draw = ImageDraw.Draw(image)
    for _ in range(_BLOBS):
        x, y, r = rng.uniform(0, width), rng.uniform(0, height), rng.uniform(0.05, 0.2) * height
        draw.ellipse([x - r, y - r, x + r, y + r], fill=tuple(int(v) for v in np.clip(base + rng.normal(0, 30, 3),
                                                                                       0, 255)))
    return image.filter(ImageFilter.GaussianBlur(radius=height / 40))


def _outline(kind: str, cx: float, cy: float, size: float) -> list[float]:
    if kind == "triangle":
        return [cx, cy - size / 2, cx + size / 2, cy + size / 2, cx - size / 2, cy + size / 2]
    return [cx - size / 2, cy - size / 2 * (0.7 if kind == "box" else 1.0),
            cx + size / 2, cy + size / 2 * (0.7 if kind == "box" else 1.0)]


def _draw(draw: ImageDraw.ImageDraw, kind: str, points: list[float], fill: int | tuple[int, ...]) -> None:
    if kind == "ellipse":
        draw.ellipse(points, fill=fill)
    elif kind == "box":
        draw.rectangle(points, fill=fill)
    else:
        draw.polygon(points, fill=fill)


def video(rng: np.random.Generator, frames: int, height: int, width: int) -> list[tuple[Image.Image, np.ndarray]]:
    """``frames`` (RGB frame, (H, W) uint8 ids) pairs of one generated video."""
    background = _background(rng, height, width)
    count = int(rng.integers(_OBJECTS[0], _OBJECTS[1] + 1))
    columns = rng.permutation(count)  # objects start in different thirds of the frame: all seen at first
    objects = []
    for n in range(count):
        size = rng.uniform(*_EXTENT) * height
        start = ((columns[n] + 0.5) / count * width, rng.uniform(0.3, 0.7) * height)
        objects.append({"kind": _KINDS[int(rng.integers(len(_KINDS)))], "size": size, "start": start,
                        "speed": rng.uniform(-_SPEED, _SPEED, size=2) * width, "growth": rng.uniform(-0.02, 0.02),
                        "colour": tuple(int(v) for v in rng.integers(0, 256, size=3))})
    out = []
    for t in range(frames):
        image, ids = background.copy(), Image.new("L", (width, height), 0)
        for n, obj in enumerate(objects, 1):
            cx, cy = obj["start"][0] + t * obj["speed"][0], obj["start"][1] + t * obj["speed"][1]
            points = _outline(obj["kind"], cx, cy, obj["size"] * (1 + obj["growth"]) ** t)
            _draw(ImageDraw.Draw(image), obj["kind"], points, obj["colour"])
            _draw(ImageDraw.Draw(ids), obj["kind"], points, n)
        noisy = np.asarray(image, dtype=np.float32) + rng.normal(0, 4.0, size=(height, width, 3))
        out.append((Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8)), np.asarray(ids, dtype=np.uint8)))
    return out


def _write(target: Path, videos: int, frames: int, size: tuple[int, int], seed: int) -> None:
    root = target / "DAVIS"
    names = [f"shapes-{i:02d}" for i in range(videos)]
    colours = palette()
    for i, name in enumerate(names):
        rng = np.random.default_rng(np.random.SeedSequence([seed, _STREAM, i]))
        (root / "JPEGImages" / "480p" / name).mkdir(parents=True)
        (root / "Annotations" / "480p" / name).mkdir(parents=True)
        for t, (image, ids) in enumerate(video(rng, frames, *size)):
            image.save(root / "JPEGImages" / "480p" / name / f"{t:05d}.jpg", format="JPEG", quality=JPEG_QUALITY)
            mask = Image.fromarray(ids).convert("P")
            mask.putpalette(colours)
            mask.save(root / "Annotations" / "480p" / name / f"{t:05d}.png")
    (root / "ImageSets" / "2017").mkdir(parents=True)
    (root / "ImageSets" / "2017" / "val.txt").write_text("".join(n + "\n" for n in names), encoding="utf-8")


def dataset_version() -> str:
    """The version the record names (part of the evaluation's recipe)."""
    return f"davis videos v{VERSION}"


def ensure_davis(root: Path | None = None, *, videos: int = DEFAULT_VIDEOS, frames: int = DEFAULT_FRAMES,
                 size: tuple[int, int] = DEFAULT_SIZE, seed: int = 0) -> Path:
    """A directory holding ``DAVIS/`` of generated videos; without ``root``:
    ``$MOCO_DATA_HOME/davis-v{VERSION}-seed{seed}-{H}x{W}-{videos}x{frames}``."""
    if root is None:
        root = shapes.data_home() / f"davis-v{VERSION}-seed{seed}-{size[0]}x{size[1]}-{videos}x{frames}"
    stamp = json.dumps({"version": VERSION, "seed": seed, "size": list(size), "videos": videos, "frames": frames},
                       sort_keys=True) + "\n"
    return write_once(Path(root), "DAVIS", stamp, lambda tmp: _write(tmp, videos, frames, size, seed))
