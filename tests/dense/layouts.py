"""ADE20K's release layout, shrunk: ``ADEChallengeData2016/`` as the zip unpacks, down to the file names
(``images/training/ADE_train_00000001.jpg``, ``annotations/training/ADE_train_00000001.png``, the validation
split's ``ADE_val_*``, and the two text files the release ships beside them), with tiny pictures and label maps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

SPLITS = {"training": "ADE_train_", "validation": "ADE_val_"}


def write_ade(root: Path, *, train: int = 3, val: int = 2, size: int = 32, seed: int = 0) -> Path:
    """``root/ADEChallengeData2016`` with ``train`` and ``val`` pairs of random pictures and label maps (values
    0-3: 0 ignored, 1-3 classes); returns ``root``."""
    rng = np.random.default_rng(seed)
    base = root / "ADEChallengeData2016"
    for split, prefix in SPLITS.items():
        (base / "images" / split).mkdir(parents=True)
        (base / "annotations" / split).mkdir(parents=True)
        for n in range(1, (train if split == "training" else val) + 1):
            stem = f"{prefix}{n:08d}"
            picture = rng.integers(0, 256, (size, size + 8, 3), dtype=np.uint8)
            Image.fromarray(picture).save(base / "images" / split / f"{stem}.jpg", quality=90)
            label = rng.integers(0, 4, (size, size + 8), dtype=np.uint8)
            Image.fromarray(label).save(base / "annotations" / split / f"{stem}.png")
    (base / "objectInfo150.txt").write_text("Idx\tRatio\tTrain\tVal\tName\n1\t0.1576\t11664\t1172\twall\n")
    (base / "sceneCategories.txt").write_text("ADE_train_00000001 airport_terminal\n")
    return root
