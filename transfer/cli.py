"""``moco convert``; ``moco eval voc`` and ``moco eval coco``: not built yet (see the transfer issue)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

PENDING = {"context_settings": {"allow_extra_args": True, "ignore_unknown_options": True}}


def _not_built(command: str) -> None:
    print(f"{command} is not built yet: it comes with detection and segmentation transfer", file=sys.stderr)
    raise typer.Exit(2)


def voc_cli() -> None:
    """Faster R-CNN R50-C4 on VOC07+12, fine-tuned from a backbone. Not built yet."""
    _not_built("moco eval voc")


def coco_cli() -> None:
    """Mask R-CNN on COCO, fine-tuned from a backbone. Not built yet."""
    _not_built("moco eval coco")


def convert_cli(
    src: Annotated[Path, typer.Argument(help="A checkpoint (ours, official main_moco.py's) or a torchvision "
                                        "ResNet state_dict.")],
    dst: Annotated[Path, typer.Argument(help="The detectron2 .pkl to write.")],
) -> None:
    """Convert a backbone to detectron2's format (the official convert-pretrain-to-detectron2.py mapping)."""
    from moco_core.checkpoint import CheckpointError
    from transfer.convert import convert_file

    try:
        summary = convert_file(src, dst)
    except CheckpointError as err:
        print(f"error: {err}", file=sys.stderr)
        raise typer.Exit(2) from None
    for key, value in summary.items():
        print(f"{key}: {value}")
