"""torch.distributed helpers that degrade to no-ops in a single process.

``rank()`` is 0, ``world_size()`` is 1 and gathers return their input when no process group is running, so
every code path runs unchanged in one CPU process.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import socket
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from moco_core.terminal import guard_process_output
from moco_core.threads import threads_once


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def is_main() -> bool:
    return rank() == 0


@torch.no_grad()
def all_gather_cat(x: torch.Tensor) -> torch.Tensor:
    """Concatenate ``x`` (n, ...) from all ranks along dim 0 -> (world * n, ...), in rank order. No gradient."""
    if world_size() == 1:
        return x
    parts = [torch.empty_like(x) for _ in range(world_size())]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts)


class _GatherWithGrad(torch.autograd.Function):
    """all_gather whose backward sums each rank's gradient for every slice and returns this rank's slice."""

    @staticmethod
    def forward(ctx: object, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        parts = [torch.empty_like(x) for _ in range(world_size())]
        dist.all_gather(parts, x.contiguous())
        return torch.cat(parts)

    @staticmethod
    def backward(ctx: object, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        grad = grad.contiguous().clone()
        dist.all_reduce(grad)  # d(sum of all ranks' losses) / d(every gathered row)
        n = grad.shape[0] // world_size()
        return grad[rank() * n:(rank() + 1) * n]


def all_gather_with_grad(x: torch.Tensor) -> torch.Tensor:
    """Concatenate ``x`` (n, ...) from all ranks -> (world * n, ...), keeping the gradient to this rank's part."""
    return x if world_size() == 1 else _GatherWithGrad.apply(x)


def broadcast_(x: torch.Tensor, src: int = 0) -> torch.Tensor:
    """In place: every rank ends with rank ``src``'s ``x``."""
    if world_size() > 1:
        dist.broadcast(x, src)
    return x


def barrier() -> None:
    if world_size() > 1:
        dist.barrier()


def all_reduce_mean(x: torch.Tensor) -> torch.Tensor:
    if world_size() == 1:
        return x
    x = x.clone()
    dist.all_reduce(x)
    return x / world_size()


def all_reduce_max(x: torch.Tensor) -> torch.Tensor:
    if world_size() == 1:
        return x
    x = x.clone()
    dist.all_reduce(x, op=dist.ReduceOp.MAX)
    return x


def all_gather_objects(obj: Any) -> list[Any]:
    """Every process's ``obj`` (picklable), in rank order; ``[obj]`` in one process."""
    if world_size() == 1:
        return [obj]
    gathered: list[Any] = [None] * world_size()
    dist.all_gather_object(gathered, obj)
    return gathered


def init_from_env(device: torch.device, timeout_s: float = 600.0) -> bool:
    """Join the process group described by torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR...).

    Returns whether a group of more than one process was started. NCCL on CUDA, gloo on CPU. A collective
    that waits longer than ``timeout_s`` (another process died) raises instead of hanging; NCCL needs its
    asynchronous error handling for that, which is on unless the environment turned it off.
    """
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or is_distributed():
        return is_distributed()
    if device.type == "cpu":  # each process takes its share of the free cores (threads.cpu_threads): N processes
        # with all cores' threads each oversubscribe the CPU, and gloo's collectives then slow training down by
        # 10-100x (measured: 12 vs 230 img/s with 2 processes on 2 cores)
        threads_once()  # as resolve_device did already, where it ran first
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))
    return True


def lost_peer(err: BaseException) -> str | None:
    """One line saying that another process of the group died or hung, if that is what ``err`` means.

    torch raises DistError subclasses for NCCL and the store; gloo raises a RuntimeError naming its transport.
    """
    dist_error = getattr(dist, "DistError", None)
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    if not (dist_error and isinstance(err, dist_error)) and "gloo" not in text and "NCCL" not in text:
        return None
    cause = "waited too long for it" if "Timed out" in text or "timeout" in text.lower() else "lost the connection"
    return (f"another process of the run died or hung ({cause}): {text[:240]}; the last checkpoint is intact, "
            f"resume when all processes can run")


def shutdown() -> None:
    if is_distributed():
        dist.destroy_process_group()


@contextlib.contextmanager
def process_group(device: torch.device, timeout_s: float = 600.0) -> Iterator[None]:
    """Join the launcher's process group (if any) for the duration of a run, and leave it however it ends."""
    init_from_env(device, timeout_s)
    try:
        yield
    finally:
        shutdown()


@contextlib.contextmanager
def unsynced_buffers_accepted() -> Iterator[None]:
    """Around building a DDP model with ``broadcast_buffers=False`` (each rank keeps its own BN statistics and
    queue): PyTorch 2.14 calls the argument deprecated and itself advises keeping it until its replacement can
    skip the sync at initialisation; its warning, printed by every rank of every run, is silenced."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="`broadcast_buffers` is deprecated", category=FutureWarning)
        yield


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawned(local_rank: int, nproc: int, port: int, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    guard_process_output()  # a new interpreter: the parent's guard on stdout and stderr is not inherited
    os.environ.update(
        RANK=str(local_rank), LOCAL_RANK=str(local_rank), WORLD_SIZE=str(nproc),
        LOCAL_WORLD_SIZE=str(nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
    )
    fn(*args)


def launch(nproc: int, fn: Callable[..., Any], *args: Any) -> None:
    """Run ``fn(*args)`` in ``nproc`` local processes wired as one torch.distributed group (like torchrun)."""
    if nproc <= 1:
        fn(*args)
        return
    mp.start_processes(_spawned, args=(nproc, free_port(), fn, args), nprocs=nproc, start_method="spawn")


class _AllReduceSum(torch.autograd.Function):
    """all_reduce (sum) whose backward is the all_reduce of the gradients: d(sum of all ranks' losses) / d(x)."""

    @staticmethod
    def forward(ctx: object, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        x = x.clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx: object, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        grad = grad.contiguous().clone()
        dist.all_reduce(grad)
        return grad


def all_reduce_sum_with_grad(x: torch.Tensor) -> torch.Tensor:
    """The sum of ``x`` over all ranks, keeping the gradient (each rank's loss reaches every rank's ``x``)."""
    return x if world_size() == 1 else _AllReduceSum.apply(x)
