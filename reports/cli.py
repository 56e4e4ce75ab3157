"""``moco report``: not built yet (see the comparison report issue)."""

from __future__ import annotations

import sys

import typer

PENDING = {"context_settings": {"allow_extra_args": True, "ignore_unknown_options": True}}


def report_cli() -> None:
    """Paper-style tables from evaluation records. Not built yet."""
    print("moco report is not built yet: it comes with the comparison report", file=sys.stderr)
    raise typer.Exit(2)
