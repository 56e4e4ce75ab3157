"""Where a run runs: the device (``run.device``), the dataset root (``data.path``), mixed precision. Shared by
pretraining, the evaluations and detection transfer."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from pathlib import Path

import torch

from moco_core import smoke
from moco_core.config import ConfigError, device_problem
from moco_core.shapes import ensure_shapes

logger = logging.getLogger("moco.runtime")


def cpu_threads(cores: int, load: float, processes: int) -> int:
    """Threads for each of ``processes`` CPU processes of a run on ``cores`` cores whose 1-minute load average was
    ``load`` before it started: the cores left free by other work, shared between the processes (at least 1).

    PyTorch's default, every core, collapses when another job shares them: on 2 cores with another job running,
    2 threads gave 7-50 images/s where 1 gave 75-240 (``benchmarks/cpu_threads.py``, figures in
    ``benchmarks/README.md``); on an idle machine every core is used.
    """
    free = max(cores - max(load, 0.0), 0.0)
    return max(1, min(cores // max(processes, 1), round(free / max(processes, 1))))


def use_cpu_threads() -> int:
    """Set torch's threads for a CPU run by :func:`cpu_threads`, unless ``OMP_NUM_THREADS`` chose them; a note
    says so when the machine's load leaves fewer than the run's share. Returns the count in use."""
    if "OMP_NUM_THREADS" in os.environ:
        return torch.get_num_threads()
    cores = os.cpu_count() or 1
    processes = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")) or 1)
    try:
        load = os.getloadavg()[0]
    except OSError:  # not available here: assume the machine is ours
        load = 0.0
    threads = cpu_threads(cores, load, processes)
    share = max(1, cores // max(processes, 1))
    if threads < share and int(os.environ.get("RANK", "0")) == 0:
        logger.warning("note: %d CPU thread%s a process, not %d: the load average is %.1f on %d cores (other work); "
                       "set OMP_NUM_THREADS to choose", threads, "s" * (threads > 1), share, load, cores)
    torch.set_num_threads(threads)
    return threads


@functools.cache
def threads_once() -> int:
    return use_cpu_threads()  # once a process: the CLI resolves the device before the run does


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
