"""The readers of weights files, in the order they are tried: one row a family of files (torch-free).

Each row names the module under :mod:`moco_core.model.weights` whose ``read(WeightsFile) -> Found | None``
recognises that family's files (None: not one of them), the kind of file it reads, and how messages and ``--help``
name the files. :func:`moco_core.model.weights.detect.find` asks every method's reader of the file's kind; a file two
of them claim is refused (which network it holds would be the order of the rows); the fallback row (a library's
plain names, any method's) reads only what no method's reader claimed. Adding a family is one module and one row
here: the refusal of an unknown file and the help of ``WEIGHTS`` are written from this table.

The modules are imported when a file is read, not when this table is: the command line's help stays torch-free.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from moco_core.model.weights.files import WeightsFile
    from moco_core.model.weights.layout import Found

PICKLE, SAFETENSORS = "pickle", "safetensors"  # WeightsFile.kind


@dataclass(frozen=True)
class Reader:
    module: str  # moco_core.model.weights.<module>.read
    files: str  # the files it reads, as messages name them
    kind: str = PICKLE
    fallback: bool = False  # read only where no other reader of the kind claims the file

    def read(self, weights: WeightsFile) -> Found | None:
        return importlib.import_module(f"moco_core.model.weights.{self.module}").read(weights)


READERS: tuple[Reader, ...] = (
    Reader("moco", "ours, the official MoCo v1/v2/v3 ones"),
    Reader("dino", "DINO's full checkpoints"),
    Reader("dinov2", "DINOv2's"),
    Reader("barlow", "Barlow Twins' checkpoint.pth"),
    Reader("simclr", "SimCLR v2's converted"),
    Reader("swav", "SwAV's (DeepCluster-v2's, SeLa-v2's)"),
    Reader("mae", "MAE's"),
    Reader("lightning", "solo-learn's and lightly's"),
    Reader("hub", "timm and transformers .safetensors", kind=SAFETENSORS),
    Reader("plain", "torchvision and timm state dicts", fallback=True),
)


def files_read() -> str:
    """The families of files read, in the table's order, for messages and help."""
    return ", ".join(reader.files for reader in READERS)
