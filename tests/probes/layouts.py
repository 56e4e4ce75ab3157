"""Revisited Oxford and Paris in revisitop's release layout, shrunk: ``<root>/roxford5k/jpg/<name>.jpg`` and
``gnd_roxford5k.pkl`` (the same for ``rparis6k``), with the real file names (the landmark-prefixed six-digit names
of the Oxford Buildings and Paris sets, real query names), a pickle of revisitop's keys written at protocol 2 with
plain lists and floats, or with numpy arrays (``arrays``), small JPEGs."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
from PIL import Image

OXFORD = {
    "images": ["all_souls_000000", "ashmolean_000000", "balliol_000000", "bodleian_000000", "christ_church_000000",
               "cornmarket_000000", "hertford_000000", "keble_000000", "magdalen_000000", "pitt_rivers_000000",
               "radcliffe_camera_000000", "oxford_000000"],
    "queries": ["all_souls_000013", "radcliffe_camera_000519", "oxford_002904"],
}
PARIS = {
    "images": ["paris_defense_000000", "paris_eiffel_000000", "paris_general_000000", "paris_invalides_000000",
               "paris_louvre_000000", "paris_moulinrouge_000000", "paris_museedorsay_000000",
               "paris_notredame_000000", "paris_pantheon_000000", "paris_pompidou_000000",
               "paris_sacrecoeur_000000", "paris_triomphe_000000"],
    "queries": ["paris_defense_000605", "paris_eiffel_000266", "paris_invalides_000490"],
}
SETS = {"roxford5k": OXFORD, "rparis6k": PARIS}
SIZE = (48, 40)  # width, height: landscape, as most of the photographs
# each query: its box and its easy / hard / junk database indices (every kind of ground truth, one empty hard list)
GND = [
    {"bbx": [4.5, 3.2, 40.5, 36.7], "easy": [0, 5], "hard": [10], "junk": [3]},
    {"bbx": [0.0, 0.0, 48.0, 40.0], "easy": [10], "hard": [1, 2], "junk": []},
    {"bbx": [10.0, 8.0, 30.0, 20.0], "easy": [11], "hard": [], "junk": [4, 7]},
]


def revisitop_layout(root: Path, *, arrays: bool = False) -> Path:
    """``root`` holding both datasets; returns ``root``."""
    rng = np.random.default_rng(0)
    for name, names in SETS.items():
        jpg = root / name / "jpg"
        jpg.mkdir(parents=True)
        for stem in names["images"] + names["queries"]:
            pixels = rng.integers(0, 256, size=(SIZE[1], SIZE[0], 3), dtype=np.uint8)
            Image.fromarray(pixels).save(jpg / f"{stem}.jpg", quality=90)
        gnd = [{key: np.array(value, dtype=np.float64 if key == "bbx" else np.int64) if arrays else list(value)
                for key, value in entry.items()} for entry in GND]
        write_gnd(root / name / f"gnd_{name}.pkl", {"imlist": names["images"], "qimlist": names["queries"],
                                                   "gnd": gnd})
    return root


def write_gnd(path: Path, obj: object) -> Path:
    path.write_bytes(pickle.dumps(obj, protocol=2))
    return path
