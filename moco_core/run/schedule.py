"""Whether a run trains long enough for its numbers to mean anything, said before it starts.

A preset's schedule is counted in epochs; on a small dataset, or a small subset of one (``--labels 10%``), an
epoch may be a single step at the preset's batch size: ``finetune_embedded --labels 10%`` trains 200 images at
batch 128, 1 step an epoch, 5 steps in all, and reports a top-1 that measures the initialisation, not the
fine-tuning. A run of fewer than :data:`FEW_STEPS` optimiser steps, or whose warm-up is only a step or two, gets one
warning line with what would lengthen it. Smoke runs (``MOCO_SMOKE=1``) are short on purpose: no warning.
"""

from __future__ import annotations

import math

from moco_core import smoke

FEW_STEPS = 50  # optimiser steps in all: below this, a schedule (warm-up, lr drops) has no room to act
FEW_WARMUP_STEPS = 3  # a warm-up this short (in steps) jumps to the full lr at once


def short_schedule(what: str, *, steps_per_epoch: int, epochs: int, images: int, batch_size: int,
                   warmup_epochs: float = 0) -> str | None:
    """The warning for a run of ``epochs`` epochs of ``steps_per_epoch`` optimiser steps (``images`` training
    images at ``batch_size``) that is too short to mean anything, or None. ``what`` names the run."""
    if smoke.enabled():
        return None
    steps = steps_per_epoch * epochs
    warmup = round(warmup_epochs * steps_per_epoch)
    if steps >= FEW_STEPS and not 0 < warmup < FEW_WARMUP_STEPS:
        return None
    shape = (f"{epochs} epoch{'s' * (epochs != 1)} of {steps_per_epoch} step{'s' * (steps_per_epoch != 1)} "
             f"({images} images at optim.batch_size {batch_size})")
    problem = (f"trains {steps} optimiser step{'s' * (steps != 1)} in all, {shape}" if steps < FEW_STEPS else
               f"warms up over {warmup} step{'s' * (warmup != 1)} only, {shape}")
    per_epoch = math.ceil(FEW_STEPS / max(epochs, 1))
    smaller = images // per_epoch
    advice = (f"--set optim.batch_size={smaller} gives {images // smaller} steps an epoch" if 2 <= smaller < batch_size
              else f"raise optim.epochs (at least {math.ceil(FEW_STEPS / max(steps_per_epoch, 1))})")
    return (f"warning: {what} {problem}: too short for its numbers to mean much (the schedule has no room to act); "
            f"{advice}")
