"""One pretraining epoch: the method's forward, cross-entropy, backward, SGD, the method's after-step."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from moco_core import checkpoint, distributed
from moco_core.errors import NonFiniteLossError
from moco_core.model.methods import Method
from moco_core.run.progress import MetricsWriter, Progress, SlowdownWatch
from moco_core.run.runtime import autocast

logger = logging.getLogger("moco.engine")


@dataclass
class EpochState:
    """How far an epoch got: what a mid-epoch checkpoint records and a resumed epoch starts from."""

    batches: int = 0  # batches of this epoch already trained (on each process)
    loss_sum: float = 0.0  # sums over those batches that had negatives, for the epoch's mean
    accuracy_sum: float = 0.0
    counted: int = 0  # the batches in those sums (a step with no negative has no loss or accuracy to speak of)
    rng: dict[str, Any] | None = field(default=None, repr=False)  # RNG states to continue from, if resumed


class StepCheckpoints(Protocol):
    """What the epoch loop asks of its caller between steps."""

    every: int  # steps between mid-epoch checkpoints (0: none)

    def save(self, step: int, state: EpochState) -> None: ...

    def stop_requested(self, step: int) -> bool: ...


@dataclass(frozen=True)
class EpochStats:
    step: int  # global step count after the epoch
    loss: float | None  # None: no step of the epoch had a negative (an empty queue's first step)
    accuracy: float | None  # instance-discrimination top-1, in %
    images_per_s: float
    data_wait: float  # fraction of the epoch spent waiting for the data loader
    stopped: bool = False  # a stop was requested (SIGTERM)
    complete: bool = True  # every batch was trained; False when a stop ended the epoch early, after a checkpoint


def train_one_epoch(
    model: nn.Module,
    method: Method,
    loader: Iterable[tuple[Any, torch.Tensor, torch.Tensor]],
    optimizer: torch.optim.Optimizer,
    *,
    epoch: int,
    epochs: int,
    step: int,
    lr: float,
    device: torch.device,
    amp: bool,
    log_every: int,
    progress: Progress,
    metrics: MetricsWriter,
    resume: EpochState | None = None,
    checkpoints: StepCheckpoints | None = None,
    channels_last: bool = False,
    watch: SlowdownWatch | None = None,
    before_step: Callable[[int], float] | None = None,
) -> EpochStats:
    """Train ``model`` (``method.module``, possibly wrapped in DDP) for one pass over ``loader``.

    Accuracy is top-1 of the logits against the labels: instance discrimination for MoCo, the class for the
    supervised baseline.

    The loss is checked for NaN/inf every ``log_every`` steps, at the end of the epoch and before every
    mid-epoch checkpoint (checking every step would make each CUDA step wait for the host).

    ``resume`` continues an epoch a checkpoint left part-way: ``loader`` must then yield only the batches not yet
    seen, and the RNG states are restored after the loader's iterator exists (creating it draws a seed), so on
    CPU with ``data.workers`` 0 the rest of the epoch is bit-identical to an uninterrupted run's.
    ``channels_last`` puts the images in the layout the encoders were given (``run.channels_last``).
    ``watch`` (CPU runs) is shown each logged window's images/s and warns once when they collapse.
    ``checkpoints`` is asked after every step whether to save (every ``checkpoints.every`` steps, never on the
    epoch's last batch: the caller's epoch checkpoint follows) and whether to stop (SIGTERM); a stop saves first.
    ``before_step`` (MoCo v3) is called with the batch's index in the epoch before each step; it sets the lr (and
    whatever else changes every step) and returns the lr, which the log lines then show.
    """
    model.train()
    world = distributed.world_size()
    so_far = resume or EpochState()
    window = _LogWindow(device, metrics, lr, watch)
    epoch_images, wait, epoch_start, resumed_batches = 0, 0.0, time.perf_counter(), so_far.batches
    remaining = len(loader) if hasattr(loader, "__len__") else None  # type: ignore[arg-type]
    loader_iter = iter(loader)
    if so_far.rng is not None:
        checkpoint.set_rng_state(so_far.rng)
    stopped = last_batch = False
    while True:
        fetch_start = time.perf_counter()
        try:
            batch = next(loader_iter)
        except StopIteration:
            break
        waited = time.perf_counter() - fetch_start
        wait += waited
        window.wait += waited
        counted = method.has_negatives()  # before the step: MoCo's queue is written after it
        if before_step is not None:
            window.lr = before_step(so_far.batches)
        values, size = train_step(model, method, batch, optimizer, device=device, amp=amp,
                                  channels_last=channels_last)
        step += 1
        so_far.batches += 1
        window.add(values, size * world, counted=counted)
        epoch_images += size * world
        last_batch = remaining is not None and so_far.batches - resumed_batches == remaining
        stopping = checkpoints is not None and checkpoints.stop_requested(step)
        saving = stopping or (checkpoints is not None and checkpoints.every > 0 and step % checkpoints.every == 0
                              and not last_batch)
        if step % log_every == 0 or (saving and window.steps):  # a checkpoint closes the window: nothing unlogged
            window.log(so_far, epoch, step)
        progress.update(step, epoch, epochs, **window.shown)
        if saving and not last_batch:
            checkpoints.save(step, so_far)  # type: ignore[union-attr]
        if stopping:
            stopped = True
            break
    window.close(so_far, epoch, step)
    elapsed = time.perf_counter() - epoch_start
    n = so_far.counted
    return EpochStats(step=step, loss=so_far.loss_sum / n if n else None,
                      accuracy=so_far.accuracy_sum / n if n else None,
                      images_per_s=epoch_images / elapsed if elapsed > 0 else 0.0,
                      data_wait=wait / elapsed if elapsed > 0 else 0.0, stopped=stopped,
                      complete=not stopped or last_batch)


def train_step(model: nn.Module, method: Method, batch: tuple[Any, torch.Tensor, torch.Tensor],
               optimizer: torch.optim.Optimizer, *, device: torch.device, amp: bool,
               channels_last: bool) -> tuple[torch.Tensor, int]:
    """One SGD step on ``batch`` (images or a tuple of views, targets, dataset indices): the method's forward,
    cross-entropy, backward, the optimizer, the method's after-step. Returns (loss, top-1) as a float64 tensor on
    the device (read only when a log line is due) and the batch size of this process."""
    images, target, index = batch
    if isinstance(images, (tuple, list)):
        images = tuple(_to_device(view, device, channels_last) for view in images)
        size = images[0].shape[0]
    else:
        images = _to_device(images, device, channels_last)
        size = images.shape[0]
    with autocast(device, amp):
        logits, labels, state = method.forward(model, images, target.to(device, non_blocking=True),
                                               index.to(device, non_blocking=True))
    loss = F.cross_entropy(logits.float(), labels)
    if method.loss_scale != 1.0:
        loss = loss * method.loss_scale  # MoCo v3: its official loss, 4T times the mean over both directions
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    method.after_step(state)
    return torch.stack([loss.detach(), top1(logits.detach(), labels)]).double(), size


class _LogWindow:
    """Loss and accuracy summed on the device over the steps since the last log line: one host sync per line.
    Each line also gives the window's images/s and its data wait (the fraction of its time spent waiting for the
    loader), so that a window after compilation reads apart from the epoch's first.

    Steps with no negative (MoCo's first step on an empty queue) are left out of the sums: their loss is 0 and
    their accuracy 100% by construction. A window of such steps alone logs null for both, not a perfect score.
    """

    def __init__(self, device: torch.device, metrics: MetricsWriter, lr: float,
                 watch: SlowdownWatch | None = None) -> None:
        self.sums = torch.zeros(2, dtype=torch.float64, device=device)
        self.metrics, self.lr, self.watch = metrics, lr, watch
        self.steps, self.counted, self.images, self.start = 0, 0, 0, time.perf_counter()
        self.wait = 0.0  # seconds spent waiting for the loader since the window started
        # What the progress line shows: None ("-") until the first window is logged, so that a run's first
        # log_every steps (or a whole short epoch) do not read "loss nan"; a real NaN stops the run at its log.
        self.shown: dict[str, float | None] = {"loss": None, "acc": None, "img/s": None}

    def add(self, values: torch.Tensor, images: int, *, counted: bool = True) -> None:
        if counted:
            self.sums += values
            self.counted += 1
        self.steps += 1
        self.images += images

    def log(self, state: EpochState, epoch: int, step: int) -> None:
        """A metrics line for the window (its mean loss and accuracy, images/s), which then starts again."""
        loss_v, acc_v = self.close(state, epoch, step)
        now = time.perf_counter()
        rate, waited = self.images / (now - self.start), self.wait / (now - self.start)
        self.metrics.write(step=step, epoch=epoch, loss=loss_v, accuracy=acc_v, lr=self.lr, images_per_s=rate,
                           data_wait=waited)
        self.shown.update({"loss": loss_v, "acc": acc_v, "img/s": rate})
        warning = self.watch.observe(rate) if self.watch is not None else None
        if warning is not None and distributed.is_main():
            logger.warning("%s", warning)
        self.images, self.start, self.wait = 0, now, 0.0

    def close(self, state: EpochState, epoch: int, step: int) -> tuple[float | None, float | None]:
        """Mean loss and accuracy of the window, added to the epoch's sums; stops on NaN/inf. (nan, nan) if empty;
        (None, None) if no step of it had a negative."""
        if not self.steps:
            return math.nan, math.nan
        if not self.counted:
            self.steps = 0
            return None, None
        loss_v, acc_v = (self.sums / self.counted).tolist()
        if not math.isfinite(loss_v):
            raise NonFiniteLossError(
                f"loss became {loss_v} at epoch {epoch + 1}, step {step}; stopping (lower optim.lr?). "
                f"The last good checkpoint is untouched."
            )
        state.loss_sum += loss_v * self.counted
        state.accuracy_sum += acc_v * self.counted
        state.counted += self.counted
        self.sums.zero_()
        self.steps = self.counted = 0
        return loss_v, acc_v


def _to_device(images: torch.Tensor, device: torch.device, channels_last: bool) -> torch.Tensor:
    """The batch on ``device`` (asynchronously from pinned memory), then in channels_last if asked (on the device:
    a copy between layouts across devices would go through an unpinned host buffer)."""
    images = images.to(device, non_blocking=True)
    return images.contiguous(memory_format=torch.channels_last) if channels_last else images


def top1(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Top-1 accuracy in % (for MoCo, the instance-discrimination accuracy: labels are all 0).

    A row counts only when its label's logit is strictly above every other logit. ``argmax`` would break ties
    towards index 0, so a collapsed encoder (all logits equal) would score 100% on MoCo's positive-first logits.
    """
    target = logits.gather(1, labels[:, None])
    at_least_as_high = (logits >= target).sum(dim=1)  # the label's own logit counts once
    return (at_least_as_high == 1).float().mean() * 100.0
