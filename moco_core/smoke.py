"""``MOCO_SMOKE=1``: every command runs its whole code path, shrunk to seconds, for checking a set-up or a command
line before spending hours on it (README, "Try a command in seconds"; the acceptance test runs README's commands
this way, as typed, in one directory).

What it changes, after the preset and the command's own ``--set`` and flags are merged:

- lengths: a pretraining, linear evaluation or fine-tuning runs 1 epoch per 100 of its schedule (at least 1: the
  embedded preset's 100 epochs become 1, a 200-epoch preset 2), a detection or segmentation fine-tuning 2
  iterations; milestones, lr steps and labels follow the length as they do for ``--set optim.epochs=N``, and so do
  the snapshot and kNN intervals;
- sizes, where the command did not choose them itself: ResNet-18 at 32-pixel crops, batches of 8, a queue of 32,
  no DataLoader workers, detection at 48-64 pixels with few proposals, segmentation crops of 48 pixels;
- the embedded datasets: 4 images a class of the shapes (32 train, 32 val) and 16 + 8 detection (or
  segmentation) scenes, generated beside the full ones, never in their place; the embedded transfer suite with
  3-4 images a class (:mod:`classification.linear_transfer.embedded`);
- the transfer suite (``moco eval transfer``): 32-px views and at most 50 L-BFGS iterations a value;
- a folder of one's own images (ImageFolder's layout: pretraining, the kNN monitor, the classification
  evaluations): at most :data:`FOLDER_IMAGES` of each split, evenly spaced (:func:`bounded`; a note says so).

Runs stay real runs: their directories, checkpoints and records are written as usual, and each record,
checkpoint and ``run.json`` says ``"smoke": true``. Numbers from them mean nothing, and so do those of anything
evaluated from them: a record of weights a smoke run made says ``"smoke": true`` too, whatever mode evaluated them
(:func:`record_marker`). A run is never continued, nor its results reused, across the two modes
(:func:`refuse_other_mode`). Torch-free: the CLI reads this first.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from moco_core.errors import UserError

ENV = "MOCO_SMOKE"

SHAPES = {"train_per_class": 4, "val_per_class": 4}  # moco_core.data.shapes.ensure_shapes
SCENES = {"voc": {"trainval": 16, "test": 8}, "coco": {"train": 16, "val": 8},  # transfer.embedded
          "keypoints": {"train": 16, "val": 8}, "lvis": {"train": 16, "val": 8}, "cityscapes": {"train": 16, "val": 8},
          "densepose": {"train": 16, "val": 8},
          "semseg": {"train": 16, "val": 8},  # transfer.segmentation.embedded
          "linseg": {"train": 16, "val": 8}}  # dense.data

_DETECTION = {
    "solver.batch_size": 2, "solver.warmup_iters": 1, "solver.precise_bn_iters": 1,
    "detector.pooler_resolution": 4, "detector.roi_batch_size_per_image": 8, "detector.rpn_batch_size_per_image": 32,
    "detector.rpn_pre_nms_topk_train": 64, "detector.rpn_post_nms_topk_train": 32,
    "detector.rpn_pre_nms_topk_test": 32, "detector.rpn_post_nms_topk_test": 8, "detector.detections_per_image": 5,
    "detector.keypoint_pooler_resolution": 4, "detector.keypoint_conv_dims": [8],
    "detector.densepose_pooler_resolution": 4, "detector.densepose_num_convs": 1, "detector.densepose_conv_dim": 8,
    "detector.densepose_heatmap_size": 16,
    "input.min_size_train": [48], "input.min_size_test": 48, "input.max_size": 64, "run.test_batch_size": 4,
    "run.log_every": 1, "data.workers": 0,
}
_LINEAR = {"optim.batch_size": 8, "data.crop_size": 32, "data.resize": 36, "data.workers": 0, "run.log_every": 1}
# Sizes by config class name: set where the command did not set the key itself.
SIZES: dict[str, dict[str, Any]] = {
    "PretrainConfig": {
        "model.arch": "resnet18", "model.queue_size": 32, "model.bn_groups": 2, "optim.batch_size": 8,
        "augment.crop_size": 32, "data.workers": 0, "run.log_every": 1,
    },
    "LinearConfig": _LINEAR,
    "GridConfig": {**_LINEAR, "fewshot.max_iter": 50},
    "FinetuneConfig": _LINEAR,
    "KnnConfig": {"batch_size": 8, "k": 10, "data.crop_size": 32, "data.resize": 36, "data.workers": 0},
    "TransferConfig": _DETECTION,
    "SemsegConfig": {"solver.batch_size": 2, "input.crop_size": 48, "data.workers": 0, "run.log_every": 1},
    "LinsegConfig": {"input.size": 64, "input.batch_size": 8, "solver.max_iter": 20},
    "DavisConfig": {"data.short_side": 64, "run.batch_size": 4},
    "TransferSuiteConfig": {"data.resize": 32, "data.crop_size": 32, "data.workers": 0, "features.batch_size": 8,
                            "solver.max_iter": 50},
    "RetrievalConfig": {"image_size": 32, "data.workers": 0},
}
# A folder of one's own images, each split, at most (evenly spaced): 8 steps an epoch at the smoke batch of 8, however
# large the folder (CIFAR-10's 50,000 were an epoch of 6,250 steps, a line each)
FOLDER_IMAGES = 64
# The run's length by config class name: (key, the new length from the configured one).
LENGTHS = {
    "PretrainConfig": ("optim.epochs", lambda n: max(1, math.ceil(n / 100))),
    "LinearConfig": ("optim.epochs", lambda n: max(1, math.ceil(n / 100))),
    "GridConfig": ("optim.epochs", lambda n: max(1, math.ceil(n / 100))),
    "FinetuneConfig": ("optim.epochs", lambda n: max(1, math.ceil(n / 100))),
    "TransferConfig": ("solver.iterations", lambda n: min(n, 2)),
    "SemsegConfig": ("solver.iterations", lambda n: min(n, 2)),
}

# Intervals counted in epochs, shortened with the run (keep a snapshot every 20 epochs of 100: every epoch of 1).
INTERVALS = {"PretrainConfig": ("run.keep_every", "run.knn_every")}


def enabled() -> bool:
    """Whether ``MOCO_SMOKE`` is set to anything but empty or 0."""
    return os.environ.get(ENV, "").strip() not in ("", "0")


def marker() -> dict[str, bool]:
    """``{"smoke": True}`` for a record or ``run.json`` written by a smoke run, else nothing."""
    return {"smoke": True} if enabled() else {}


def record_marker(backbone_smoke: bool) -> dict[str, bool]:
    """The mark of a result record: ``{"smoke": True}`` when this process is a smoke run or the evaluated weights came
    from one (``backbone_smoke``), else nothing."""
    return {"smoke": True} if enabled() or backbone_smoke else {}


def command_prefix(smoke_run: bool | None = None) -> str:
    """What a suggested command (a resume hint) starts with: ``MOCO_SMOKE=1 `` for a smoke run (``smoke_run``;
    None: this process's mode), so that it continues in the same mode, else nothing."""
    return f"{ENV}=1 " if (enabled() if smoke_run is None else smoke_run) else ""


def mode(smoke: bool) -> str:
    """How an error names a mode: "a smoke run (MOCO_SMOKE=1)" or "a real run (no MOCO_SMOKE)"."""
    return f"a smoke run ({ENV}=1)" if smoke else f"a real run (no {ENV})"


def recorded(run_dir: Path) -> bool | None:
    """Whether the run in ``run_dir`` was started as a smoke run, as its ``run.json`` says (every start records
    its mode); None where there is no readable ``run.json``."""
    from moco_core.user_files import read_json

    try:
        starts = read_json(run_dir / "run.json", what="run.json").get("starts")
    except (UserError, AttributeError):
        return None
    if not isinstance(starts, list) or not starts:
        return None
    return any(isinstance(start, dict) and start.get("smoke") is True for start in starts)


def of_checkpoint(ckpt: dict[str, Any], path: Path) -> bool:
    """Whether a checkpoint (read from ``path``) was written by a smoke run: its own ``smoke`` field, or for one
    written before checkpoints carried it, the ``run.json`` beside it."""
    if isinstance(ckpt.get("smoke"), bool):
        return bool(ckpt["smoke"])
    return bool(recorded(path.parent))


class ModeMismatch(UserError):
    """A run or result of one mode (smoke or real) met by a command of the other."""


def refuse_other_mode(recorded: bool, where: str, *, fix: str) -> None:
    """A one-line :class:`ModeMismatch` when ``where`` holds a run of the other mode than this process's: a smoke
    checkpoint continued by a real run (or the reverse) would mix a shortened run with a real one, and a result of
    one reused by the other would stand for what never ran. ``fix`` says what to do instead."""
    if recorded != enabled():
        raise ModeMismatch(f"{where} holds {mode(recorded)}, and this command is {mode(enabled())}: the two are "
                           f"never mixed; {fix}")


def bounded(samples: list[Any]) -> list[Any]:
    """A smoke run's share of a folder's ``samples``: at most :data:`FOLDER_IMAGES`, evenly spaced (a list sorted
    by class keeps every class's share); all of them outside a smoke run."""
    if not enabled() or len(samples) <= FOLDER_IMAGES:
        return samples
    return [samples[i * len(samples) // FOLDER_IMAGES] for i in range(FOLDER_IMAGES)]


def length(cls_name: str, configured: int) -> tuple[str, int] | None:
    """(key, shortened length) of a smoke run of a ``cls_name`` config configured to ``configured``, or None."""
    if cls_name not in LENGTHS or not isinstance(configured, int) or isinstance(configured, bool) or configured < 1:
        return None
    key, shorten = LENGTHS[cls_name]
    return key, int(shorten(configured))


def interval(value: Any) -> Any:
    """An epoch interval of a smoke run: 1 per 100, at least 1; 0 (off) stays 0."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        return value
    return max(1, math.ceil(value / 100))


def sizes(cls_name: str, given: Callable[[str], Any], configured: Callable[[str], Any]) -> dict[str, Any]:
    """The size overrides of a smoke run: each key of :data:`SIZES` the command did not set itself (``given(key)``:
    its ``--set`` and flags, None where it set nothing; ``configured(key)``: the merged config's value). FPN
    detectors get anchors that fit the small images. MoCo v3 has no queue and heads of its own; a ViT stays a ViT
    (the smallest, whose 4-pixel patches fit 32-pixel crops)."""
    chosen = dict(SIZES.get(cls_name, {}))
    if cls_name == "TransferConfig" and configured("detector.head") == "FPN":
        chosen["detector.anchor_sizes"] = [8, 16, 32, 64, 128]
    if cls_name == "PretrainConfig" and configured("method") == "mocov3":
        del chosen["model.queue_size"], chosen["model.bn_groups"]
        chosen["v3.mlp_dim"] = 64
        if str(configured("model.arch")).startswith("vit"):
            chosen["model.arch"] = "vit_nano_p4"
    return {key: value for key, value in chosen.items() if given(key) is None}

