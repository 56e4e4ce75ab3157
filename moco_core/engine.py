"""One pretraining epoch: the method's forward, cross-entropy, backward, SGD, the method's after-step."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from moco_core import distributed
from moco_core.methods import Method
from moco_core.progress import MetricsWriter, Progress


class NonFiniteLossError(RuntimeError):
    """The loss became NaN or infinite; the run stops before anything else is written."""


@dataclass(frozen=True)
class EpochStats:
    step: int  # global step count after the epoch
    loss: float
    accuracy: float  # instance-discrimination top-1, in %
    images_per_s: float
    data_wait: float  # fraction of the epoch spent waiting for the data loader


def autocast(device: torch.device, amp: bool) -> contextlib.AbstractContextManager[object]:
    """bf16 autocast on CUDA when ``amp``; fp32 (no autocast) on CPU."""
    if amp and device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


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
) -> EpochStats:
    """Train ``model`` (``method.module``, possibly wrapped in DDP) for one pass over ``loader``.

    Accuracy is top-1 of the logits against the labels: instance discrimination for MoCo, the class for the
    supervised baseline.

    The loss is checked for NaN/inf every ``log_every`` steps and at the end of the epoch (checking every step
    would make each CUDA step wait for the host); the caller writes a checkpoint only after a clean epoch.
    """
    model.train()
    world = distributed.world_size()
    sums = torch.zeros(2, dtype=torch.float64, device=device)  # loss, accuracy over the log window
    window_steps, window_images, window_start = 0, 0, time.perf_counter()
    totals = [0.0, 0.0]  # loss and accuracy summed over the epoch's steps
    shown = {"loss": math.nan, "acc": math.nan, "img/s": math.nan}
    epoch_steps, epoch_images, wait, epoch_start = 0, 0, 0.0, time.perf_counter()
    loader_iter = iter(loader)
    while True:
        fetch_start = time.perf_counter()
        try:
            images, target, index = next(loader_iter)
        except StopIteration:
            break
        wait += time.perf_counter() - fetch_start
        if isinstance(images, (tuple, list)):
            images = tuple(view.to(device, non_blocking=True) for view in images)
            batch = images[0].shape[0]
        else:
            images = images.to(device, non_blocking=True)
            batch = images.shape[0]
        with autocast(device, amp):
            logits, labels, state = method.forward(model, images, target.to(device, non_blocking=True),
                                                   index.to(device, non_blocking=True))
        loss = F.cross_entropy(logits.float(), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        method.after_step(state)
        sums += torch.stack([loss.detach(), top1(logits.detach(), labels)]).double()
        step += 1
        window_steps += 1
        epoch_steps += 1
        window_images += batch * world
        epoch_images += batch * world
        if step % log_every == 0:
            loss_v, acc_v = _close_window(sums, window_steps, totals, epoch, step)
            now = time.perf_counter()
            rate = window_images / (now - window_start)
            metrics.write(step=step, epoch=epoch, loss=loss_v, accuracy=acc_v, lr=lr, images_per_s=rate)
            shown.update({"loss": loss_v, "acc": acc_v, "img/s": rate})
            window_steps, window_images, window_start = 0, 0, now
        progress.update(step, epoch, epochs, **shown)
    if window_steps:
        _close_window(sums, window_steps, totals, epoch, step)
    elapsed = time.perf_counter() - epoch_start
    n = max(epoch_steps, 1)
    return EpochStats(step=step, loss=totals[0] / n, accuracy=totals[1] / n,
                      images_per_s=epoch_images / elapsed if elapsed > 0 else 0.0,
                      data_wait=wait / elapsed if elapsed > 0 else 0.0)


def _close_window(sums: torch.Tensor, steps: int, totals: list[float], epoch: int, step: int) -> tuple[float, float]:
    """Mean loss and accuracy of the window (one host sync), added to ``totals``; stops on NaN/inf."""
    loss_v, acc_v = (sums / steps).tolist()
    if not math.isfinite(loss_v):
        raise NonFiniteLossError(
            f"loss became {loss_v} at epoch {epoch + 1}, step {step}; stopping (lower optim.lr?). "
            f"The last good checkpoint is untouched."
        )
    totals[0] += loss_v * steps
    totals[1] += acc_v * steps
    sums.zero_()
    return loss_v, acc_v


def top1(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Top-1 accuracy in % (for MoCo, the instance-discrimination accuracy: labels are all 0).

    A row counts only when its label's logit is strictly above every other logit. ``argmax`` would break ties
    towards index 0, so a collapsed encoder (all logits equal) would score 100% on MoCo's positive-first logits.
    """
    target = logits.gather(1, labels[:, None])
    at_least_as_high = (logits >= target).sum(dim=1)  # the label's own logit counts once
    return (at_least_as_high == 1).float().mean() * 100.0
