"""DAVIS-2017 as released, down to the file names, shrunk: ``DAVIS/JPEGImages/480p/<video>/00000.jpg``,
``DAVIS/Annotations/480p/<video>/00000.png`` (palette PNGs with DAVIS's palette, object ids 1..n),
``DAVIS/ImageSets/2017/{train,val}.txt``; two of val's real video names, 4 frames each at 24 x 40 px."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from probes.davis.embedded import palette

VIDEOS = {"bike-packing": 2, "blackswan": 1}  # val's names, with their object counts here
FRAMES = 4
SIZE = (24, 40)  # (height, width)


def ids_of(objects: int, t: int) -> np.ndarray:
    """(H, W) uint8: object k a 6 x 6 square in row band k, moving right a pixel a frame."""
    ids = np.zeros(SIZE, dtype=np.uint8)
    for k in range(1, objects + 1):
        ids[6 * k - 3:6 * k + 3, 4 + t + 10 * k:10 + t + 10 * k] = k
    return ids


def save_mask(ids: np.ndarray, path: Path) -> None:
    mask = Image.fromarray(ids).convert("P")
    mask.putpalette(palette())
    mask.save(path)


def davis_layout(root: Path) -> Path:
    """``root`` holding ``DAVIS/``; returns ``root``."""
    davis = root / "DAVIS"
    for name, objects in VIDEOS.items():
        frames, masks = davis / "JPEGImages" / "480p" / name, davis / "Annotations" / "480p" / name
        frames.mkdir(parents=True)
        masks.mkdir(parents=True)
        for t in range(FRAMES):
            ids = ids_of(objects, t)
            rgb = np.stack([ids * 80, 255 - ids * 60, np.full(SIZE, 90)], -1).astype(np.uint8)
            Image.fromarray(rgb).save(frames / f"{t:05d}.jpg", quality=95)
            save_mask(ids, masks / f"{t:05d}.png")
    (davis / "ImageSets" / "2017").mkdir(parents=True)
    (davis / "ImageSets" / "2017" / "val.txt").write_text("".join(f"{n}\n" for n in VIDEOS), encoding="utf-8")
    (davis / "ImageSets" / "2017" / "train.txt").write_text("bear\n", encoding="utf-8")
    return root
