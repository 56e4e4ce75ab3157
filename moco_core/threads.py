"""CPU threads chosen for the machine: a run takes the cores other work leaves free, shared between its processes.
Used by :func:`moco_core.run.runtime.resolve_device` and by :func:`moco_core.distributed.process_group`."""

from __future__ import annotations

import functools
import logging
import os

import torch

logger = logging.getLogger("moco.threads")


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
