"""An optimizer's state from a checkpoint, checked against the optimizer it is loaded into before any step.

torch's ``Optimizer.load_state_dict`` checks only the number of groups and of parameters in each: another
optimizer's groups (AdamW's ``betas`` where SGD needs ``momentum``) load and fail at the first step with a
``KeyError``, a momentum buffer of another shape fails there with a broadcast error, a state that is no dict fails
in torch's own code. :func:`optimizer_problem` finds each of these first, as :func:`moco_core.checkpoint.
state_mismatch` does for weights, and :func:`load_optimizer_state` turns it into one line naming the group or
the parameter that does not fit. It serves every resume: pretraining (our checkpoints and the official v1/v2
``main_moco.py`` and v3 layouts, whose ``optimizer`` is a plain ``state_dict`` of one group over all parameters),
the linear and fine-tuning evaluations, and the transfer fine-tunings.

What fits: a dict with a list ``param_groups`` as long as the optimizer's, each listing as many parameter indices
as its group holds and every hyperparameter the optimizer's step reads (``defaults`` less the flags torch fills
in when they are absent: ``foreach``, ``fused``...), of the same kind (a number, a pair of numbers, a flag); and
a dict ``state`` whose entry for a listed parameter is a dict of numbers, ``None`` or tensors, each tensor either
a scalar (Adam's ``step``) or a floating-point tensor of the parameter's shape (``momentum_buffer``, ``mu``,
``exp_avg``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from moco_core.checkpoint import CheckpointError

# Group keys an optimizer fills with its default when a state lacks them (older torch versions wrote none of
# them), so their absence says nothing about which optimizer wrote the state.
FILLED_IN = frozenset({"foreach", "fused", "maximize", "capturable", "differentiable", "decoupled_weight_decay",
                       "nesterov", "amsgrad"})


def parameter_names(modules: Iterable[nn.Module]) -> dict[int, str]:
    """id(parameter) -> its name in the first of ``modules`` that holds it, for the messages."""
    names: dict[int, str] = {}
    for module in modules:
        for name, param in module.named_parameters():
            names.setdefault(id(param), name)
    return names


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a flag"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, tuple | list):
        return "a sequence of numbers" if all(_kind(v) == "a number" for v in value) else "a sequence"
    if isinstance(value, torch.Tensor):
        return "a number" if value.numel() == 1 else "a tensor"
    return "None" if value is None else f"a {type(value).__name__}"


def optimizer_problem(optimizer: torch.optim.Optimizer, saved: Any,
                      names: dict[int, str] | None = None) -> str | None:
    """Why ``saved`` (a checkpoint's optimizer state) does not fit ``optimizer`` (see the module docstring), naming
    the first group or parameter that does not; None when it fits. ``names``: :func:`parameter_names`."""
    names = names or {}
    if not isinstance(saved, dict):
        return f"the optimizer state is {_kind(saved)}, not a dict of param_groups and state"
    groups, state = saved.get("param_groups"), saved.get("state")
    if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
        return "the optimizer state has no list of parameter groups ('param_groups')"
    if not isinstance(state, dict):
        return "the optimizer state has no per-parameter 'state' dict"
    ours = optimizer.param_groups
    if len(groups) != len(ours):
        return f"it has {len(groups)} parameter groups, this run's {type(optimizer).__name__} has {len(ours)}"
    required = set(optimizer.defaults) - FILLED_IN
    params: dict[int, torch.Tensor] = {}  # the saved index -> the parameter it is loaded into
    for g, (theirs, group) in enumerate(zip(groups, ours, strict=True)):
        indices = theirs.get("params")
        if not isinstance(indices, list) or not all(_kind(i) == "a number" and isinstance(i, int) for i in indices):
            return f"parameter group {g}: 'params' is not a list of parameter indices"
        if len(indices) != len(group["params"]):
            return (f"parameter group {g} holds {len(indices)} parameters in the checkpoint, {len(group['params'])} "
                    f"here (another model)")
        missing = sorted(k for k in required if k not in theirs)
        if missing:
            held = sorted(k for k in theirs if k != "params")
            return (f"parameter group {g} lacks {', '.join(missing)}, which this run's {type(optimizer).__name__} "
                    f"reads: it was written by another optimizer (its keys: {', '.join(held[:8])})")
        for key in sorted(required):
            if _kind(theirs[key]) != _kind(group[key]):
                return f"parameter group {g}: {key} is {_kind(theirs[key])}, {_kind(group[key])} here"
        params.update(zip(indices, group["params"], strict=True))
    for index, entry in state.items():
        if index not in params:
            continue  # state of no listed parameter: torch keeps it aside, no step reads it
        param = params[index]
        name = names.get(id(param), f"parameter {index}")
        if not isinstance(entry, dict):
            return f"the state of {name} is {_kind(entry)}, not a dict"
        for key, value in entry.items():
            if value is None or (not isinstance(value, torch.Tensor) and _kind(value) in ("a number", "a flag")):
                continue
            if not isinstance(value, torch.Tensor):
                return f"the state of {name}: {key} is {_kind(value)}"
            if value.dim() == 0:  # a count or a scalar (Adam's step)
                continue
            if tuple(value.shape) != tuple(param.shape):
                return f"the state of {name}: {key} is {list(value.shape)}, the parameter {list(param.shape)}"
            if not value.is_floating_point():
                return f"the state of {name}: {key} holds {value.dtype} values, not floating point"
    return None


def load_optimizer_state(optimizer: torch.optim.Optimizer, saved: Any, *, source: str,
                         modules: Iterable[nn.Module] = ()) -> None:
    """``optimizer.load_state_dict(saved)`` once :func:`optimizer_problem` finds nothing; else a one-line
    CheckpointError: "``source``: its optimizer state does not fit this run's: <the first problem>".
    ``modules``: where the optimizer's parameters get their names."""
    problem = optimizer_problem(optimizer, saved, parameter_names(modules))
    if problem is None:
        try:
            optimizer.load_state_dict(saved)
            return
        except (RuntimeError, ValueError, KeyError, TypeError, IndexError) as err:  # what the checks above missed
            problem = " ".join(str(err).split())[:200] or type(err).__name__
    raise _misfit(source, problem)


def checked_trainer_load(load: Callable[[dict[str, Any]], None], optimizer: torch.optim.Optimizer, *, source: str,
                         modules: Iterable[nn.Module] = ()) -> Callable[[dict[str, Any]], None]:
    """``load`` (a trainer's ``load_state_dict``, which loads ``state["optimizer"]`` among others: detectron2's
    ``SimpleTrainer``) with the optimizer state checked first: one line, before anything of it is loaded."""
    def checked(state: dict[str, Any]) -> None:
        if not isinstance(state, dict):
            raise CheckpointError(f"{source}: its trainer state is {_kind(state)}, not a dict")
        if "optimizer" in state:
            problem = optimizer_problem(optimizer, state["optimizer"], parameter_names(modules))
            if problem is not None:
                raise _misfit(source, problem)
        load(state)

    return checked


def _misfit(source: str, problem: str) -> CheckpointError:
    return CheckpointError(f"{source}: its optimizer state does not fit this run's: {problem}")
