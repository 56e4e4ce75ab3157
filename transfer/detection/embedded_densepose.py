"""Generated dense pose scenes in DensePose-COCO's layout (``moco eval densepose --data embedded``), written on
first use as the other embedded sets (:func:`transfer.embedded.ensure`).

Each image holds one or two synthetic "bodies": an upright rectangle whose top half and bottom half are two
body parts, each with a colour of its own (DensePose's mask labels 1 and 3, point labels I 2 and 4), on a random
textured background with a few distractor discs. Each body is annotated as DensePose-COCO annotates people: its box, 14
part masks on DensePose's 256x256 grid over the box (RLE, [] for absent parts), and a grid of points with their part
I and U, V = the point's position within its part, normalised to [0, 1].

DensePose needs files it normally fetches from its servers (:mod:`transfer.detection.detectron2_densepose`);
stand-ins are written beside the scenes: ``coco/annotations/UV_symmetry_transforms.mat`` (the identity: a flip
leaves U and V as they are; the parts here have no left and right) and, under ``coco/densepose_eval/
densepose/data/``, a tiny "body model" for GPS: per part label a 3x3 grid of vertices at (U, V), parts 10 apart, and
their distances. GPS numbers on these scenes measure the geometry of these stand-ins, not SMPL's.

The file names are DensePose's: ``coco/annotations/densepose_train2014.json`` (images in ``coco/train2014/``) and
``densepose_minival2014.json`` (``coco/val2014/``).
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from moco_core.data import shapes
from transfer.embedded import JPEG_QUALITY, ensure

DENSEPOSE_VERSION = 1  # bump whenever the files written here change
DEFAULT_TRAIN, DEFAULT_TEST, DEFAULT_SIZE = 400, 100, 128
PARTS = ((1, 2), (3, 4))  # (DensePose mask label, point label I): a body's top half and bottom half
EVAL_FILES = Path("coco", "densepose_eval")  # iopath-cache-shaped folder of the stand-ins DensePose fetches
TRANSFORMS = Path("coco", "annotations", "UV_symmetry_transforms.mat")


def densepose_annotation(rng: np.random.Generator, ann_id: int, image_id: int, box: tuple[int, int, int, int],
                         points: int = 5) -> dict[str, Any]:
    """One body's annotation as DensePose-COCO's: the box (x, y, w, h), 14 part masks (RLE on the 256x256 grid over
    the box), ``points`` x ``points`` points (``dp_x``, ``dp_y`` on that grid) with their part and U, V."""
    from pycocotools import mask as mask_utils

    x, y, w, h = box
    masks: list[Any] = [[] for _ in range(14)]
    for half, (label, _) in enumerate(PARTS):
        grid = np.zeros((256, 256), dtype=np.uint8)
        grid[half * 128:(half + 1) * 128] = 1
        rle = mask_utils.encode(np.asfortranarray(grid))
        masks[label - 1] = {"size": [int(v) for v in rle["size"]], "counts": rle["counts"].decode("ascii")}
    coords = np.clip(np.linspace(16, 240, points) + rng.uniform(-8, 8, points), 0, 255)
    dp_x, dp_y, dp_i, dp_u, dp_v = [], [], [], [], []
    for py in coords:
        for px in coords:
            half = int(py >= 128)
            dp_x.append(float(px))
            dp_y.append(float(py))
            dp_i.append(float(PARTS[half][1]))
            dp_u.append(float(px / 256))
            dp_v.append(float(min((py - 128 * half) / 128, 1.0)))
    return {"id": ann_id, "image_id": image_id, "category_id": 1, "iscrowd": 0, "bbox": [x, y, w, h],
            "area": float(w * h), "num_keypoints": 0, "dp_masks": masks, "dp_x": dp_x, "dp_y": dp_y, "dp_I": dp_i,
            "dp_U": dp_u, "dp_V": dp_v}


def _background(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    coarse = rng.integers(0, 256, (height // 8 + 1, width // 8 + 1, 3), dtype=np.uint8)
    return np.asarray(Image.fromarray(coarse).resize((width, height), Image.BICUBIC)).copy()


def scene(rng: np.random.Generator, image_id: int, first_ann: int, height: int, width: int,
          distractors: int = 2) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """One image (H, W, 3) with one or two bodies and ``distractors`` discs, and the bodies' annotations."""
    pixels = _background(rng, height, width)
    yy, xx = np.mgrid[:height, :width]
    for _ in range(distractors):
        cy, cx, r = rng.integers(0, height), rng.integers(0, width), rng.integers(4, max(5, min(height, width) // 6))
        pixels[(yy - cy) ** 2 + (xx - cx) ** 2 < r * r] = rng.integers(0, 256, 3)
    anns = []
    for k in range(int(rng.integers(1, 3))):
        w = int(rng.integers(max(8, width // 6), max(9, width // 2)))
        h = int(rng.integers(max(16, height // 4), max(17, height * 3 // 4)))
        x, y = int(rng.integers(0, width - w + 1)), int(rng.integers(0, height - h + 1))
        top, bottom = rng.integers(150, 256, 3), rng.integers(0, 100, 3)
        pixels[y:y + h // 2, x:x + w] = top
        pixels[y + h // 2:y + h, x:x + w] = bottom
        anns.append(densepose_annotation(rng, first_ann + k, image_id, (x, y, w, h)))
    return pixels, anns


def write_splits(root: Path, counts: dict[str, int], size: int | tuple[int, int], seed: int) -> None:
    """``root/coco/``: ``counts["train2014"]`` and ``counts["minival2014"]`` scenes in DensePose-COCO's files;
    ``size``: the side of every image, or a (low, high) range each side is drawn from."""
    rng = np.random.default_rng(seed)
    annotations = root / "coco" / "annotations"
    annotations.mkdir(parents=True, exist_ok=True)
    ann_id = 1
    for split, folder_name, first in (("train2014", "train2014", 1), ("minival2014", "val2014", 1_000_000)):
        folder = root / "coco" / folder_name
        folder.mkdir(parents=True, exist_ok=True)
        images, anns = [], []
        for image_id in range(first, first + counts[split]):
            low, high = (size, size) if isinstance(size, int) else size
            height, width = int(rng.integers(low, high + 1)), int(rng.integers(low, high + 1))
            pixels, found = scene(rng, image_id, ann_id, height, width)
            ann_id += len(found)
            anns += found
            name = f"COCO_{folder_name}_{image_id:012d}.jpg"
            Image.fromarray(pixels).save(folder / name, format="JPEG", quality=JPEG_QUALITY)
            images.append({"id": image_id, "file_name": name, "height": height, "width": width})
        doc = {"info": {"description": f"moco embedded dense pose scenes v{DENSEPOSE_VERSION}"}, "images": images,
               "annotations": anns, "categories": [{"id": 1, "name": "person", "supercategory": "person"}]}
        with open(annotations / f"densepose_{split}.json", "w", encoding="utf-8") as f:
            json.dump(doc, f, separators=(",", ":"))


def write_stand_ins(root: Path, vertices_per_side: int = 3) -> None:
    """The stand-ins of DensePose's fetched files under ``root`` (see the module docstring)."""
    import scipy.io  # DensePose's own dependency: these files are only needed where it runs

    grid = np.linspace(0, 1, 256)
    u_map, v_map = np.meshgrid(grid, grid)  # [v, u] -> u, v: the identity
    u_cells, v_cells = np.empty((1, 24), dtype=object), np.empty((1, 24), dtype=object)
    for i in range(24):
        u_cells[0, i], v_cells[0, i] = u_map, v_map
    (root / TRANSFORMS).parent.mkdir(parents=True, exist_ok=True)
    scipy.io.savemat(root / TRANSFORMS, {"U_transforms": u_cells, "V_transforms": v_cells})
    data = root / EVAL_FILES / "densepose" / "data"
    data.mkdir(parents=True, exist_ok=True)
    scipy.io.savemat(data / TRANSFORMS.name, {"U_transforms": u_cells, "V_transforms": v_cells})
    side = np.linspace(0, 1, vertices_per_side)
    us, vs = np.meshgrid(side, side)
    u, v = np.tile(us.ravel(), 24), np.tile(vs.ravel(), 24)
    part = np.repeat(np.arange(1, 25), vertices_per_side ** 2)
    scipy.io.savemat(data / "SMPL_subdiv.mat", {"U_subdiv": u[None], "V_subdiv": v[None],
                                                "Part_ID_subdiv": part[None]})
    count = len(u)
    scipy.io.savemat(data / "SMPL_SUBDIV_TRANSFORM.mat", {"index": np.arange(1, count + 1)[None]})
    position = np.stack([u + 10 * part, v], axis=1)
    # DensePose's getDistancesUV reads vertices a > b (0-based) at a(a-1)/2 + b
    packed = [np.linalg.norm(position[a] - position[b]) for a in range(count) for b in range(a)]
    with open(data / "Pdist_matrix.pkl", "wb") as f:
        pickle.dump({"Pdist_matrix": np.asarray(packed, dtype=np.float32)[:, None]}, f)


def write_densepose(target: Path, counts: dict[str, int], size: int, seed: int) -> None:
    """``target/coco/``: the scenes and the stand-ins (:func:`transfer.embedded.ensure`'s writer)."""
    write_splits(target, counts, size, seed)
    write_stand_ins(target)


def ensure_densepose(root: Path | None = None, *, train: int = DEFAULT_TRAIN, val: int = DEFAULT_TEST,
                     size: int = DEFAULT_SIZE, seed: int = 0) -> Path:
    """A directory holding ``coco/`` with the dense pose scenes; without ``root``:
    ``$MOCO_DATA_HOME/densepose-v{DENSEPOSE_VERSION}-seed{seed}-{size}px-{train}x{val}``."""
    if root is None:
        root = shapes.data_home() / f"densepose-v{DENSEPOSE_VERSION}-seed{seed}-{size}px-{train}x{val}"
    return ensure("coco", write_densepose, root, {"train2014": train, "minival2014": val}, size, seed,
                  version=f"dense pose scenes v{DENSEPOSE_VERSION}")


def stand_ins(root: Path) -> Path | None:
    """The folder to use as iopath's cache for DensePose's fetched files: the embedded scenes' stand-ins, else None
    (DensePose's own files)."""
    folder = root / EVAL_FILES
    return folder if (folder / "densepose" / "data" / "Pdist_matrix.pkl").is_file() else None
