"""``moco eval linear`` and ``moco eval knn``: not built yet (see the linear classification issue)."""

from __future__ import annotations

import sys

import typer

PENDING = {"context_settings": {"allow_extra_args": True, "ignore_unknown_options": True}}


def _not_built(command: str) -> None:
    print(f"{command} is not built yet: it comes with the linear classification protocol", file=sys.stderr)
    raise typer.Exit(2)


def linear_cli() -> None:
    """Linear classification on frozen features (lr 30, 100 epochs, BN in eval mode). Not built yet."""
    _not_built("moco eval linear")


def knn_cli() -> None:
    """Weighted kNN monitor on L2-normalised features (k 200, T 0.07). Not built yet."""
    _not_built("moco eval knn")
