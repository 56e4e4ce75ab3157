"""Where a run runs: the device (``run.device``), the dataset root (``data.path``), mixed precision. Shared by
pretraining, the evaluations and detection transfer."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import torch

from moco_core import smoke
from moco_core.config import ConfigError, device_problem
from moco_core.data.shapes import ensure_shapes
from moco_core.threads import threads_once


def resolve_device(name: str) -> torch.device:
    """"auto" is CUDA when available, else CPU; several CUDA processes use their LOCAL_RANK's GPU."""
    problem = device_problem(name)
    if problem:
        raise ConfigError(f"run.device: {problem}")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    if device.type == "cpu":
        threads_once()
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError("run.device: CUDA was asked for but is not available")
        if device.index is None:
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = True  # fixed shapes: let cuDNN pick its fastest kernels (as main_moco.py)
    return device


def resolve_data(path: str) -> Path:
    """The dataset root; "embedded" generates (once) the shapes dataset in the data cache."""
    if path == "embedded":  # MOCO_SMOKE=1: a small set of its own, beside the full one
        return ensure_shapes(**smoke.SHAPES) if smoke.enabled() else ensure_shapes()
    return Path(os.path.expanduser(path))


def autocast(device: torch.device, amp: bool) -> contextlib.AbstractContextManager[object]:
    """bf16 autocast on CUDA when ``amp``; fp32 (no autocast) on CPU."""
    if amp and device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()
