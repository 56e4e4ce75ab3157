"""Run directories: the resolved config, the code version and the environment, so results trace to their run."""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
import yaml

import moco_core


def code_version() -> str:
    """``git describe`` of the source tree this code runs from (``-dirty`` when modified), else the version."""
    here = Path(moco_core.__file__).resolve().parent.parent
    try:
        out = subprocess.run(
            ["git", "-C", str(here), "describe", "--always", "--dirty", "--abbrev=12"],
            capture_output=True, text=True, timeout=10, check=True,
        )
        return f"{moco_core.__version__}+g{out.stdout.strip()}"
    except (OSError, subprocess.SubprocessError):
        return moco_core.__version__


def environment() -> dict[str, Any]:
    return {
        "code_version": code_version(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda if torch.cuda.is_available() else None,
        "host": socket.gethostname(),
        "argv": sys.argv,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def write_run_files(run_dir: Path, config: dict[str, Any], extra: dict[str, Any]) -> None:
    """``config.yaml`` (the resolved config, reloadable with ``--config``) and ``run.json`` (provenance)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(run_dir / "config.yaml", yaml.safe_dump(config, sort_keys=False))
    info = {**environment(), **extra}
    history_path = run_dir / "run.json"
    history = {"starts": []}
    if history_path.exists():
        try:
            history = json.loads(history_path.read_text())
        except json.JSONDecodeError:  # written by a version without atomic writes, then killed mid-write
            history = {"starts": [], "lost": "run.json was unreadable at a later start"}
    history["starts"].append(info)  # every start and resume is kept
    write_text_atomic(history_path, json.dumps(history, indent=2) + "\n")


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it over: a kill leaves old or new."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
