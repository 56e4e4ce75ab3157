"""moco_core/optimizer_state.py: what fits an optimizer, over a table of states that do not (issue 46, class 2)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch import nn

from moco_core.checkpoint import CheckpointError
from moco_core.model.optimizers import LARS
from moco_core.optimizer_state import checked_trainer_load, load_optimizer_state, optimizer_problem


def stepped(make: Any) -> tuple[nn.Module, torch.optim.Optimizer]:
    """A small model and ``make(parameters)`` after two steps (its state filled)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.Linear(3, 2))
    optimizer = make(model.parameters())
    for _ in range(2):
        optimizer.zero_grad()
        model(torch.randn(5, 4)).square().sum().backward()
        optimizer.step()
    return model, optimizer


def sgd(params: Any) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-4)


def changed(state: dict[str, Any], change: Any) -> dict[str, Any]:
    state = copy.deepcopy(state)
    change(state)
    return state


CASES: list[tuple[str, Any, str]] = [
    ("a list", lambda s: [s], "the optimizer state is a sequence, not a dict"),
    ("None", lambda s: None, "the optimizer state is None, not a dict"),
    ("groups a dict", lambda s: {**s, "param_groups": {"0": 1}}, "no list of parameter groups"),
    ("no state", lambda s: {"param_groups": s["param_groups"]}, "no per-parameter 'state' dict"),
    ("two groups", lambda s: changed(s, lambda t: t["param_groups"].append({**t["param_groups"][0], "params": []})),
     "it has 2 parameter groups, this run's SGD has 1"),
    ("a parameter less", lambda s: changed(s, lambda t: t["param_groups"][0]["params"].pop()),
     "parameter group 0 holds 5 parameters in the checkpoint, 6 here"),
    ("indices not ints", lambda s: changed(s, lambda t: t["param_groups"][0].update(params=["a"] * 6)),
     "'params' is not a list of parameter indices"),
    ("AdamW's group", lambda s: changed(s, lambda t: t["param_groups"][0].update(
        betas=(0.9, 0.999), eps=1e-8, momentum=None) or t["param_groups"][0].pop("momentum")),
     "parameter group 0 lacks momentum, which this run's SGD reads"),
    ("momentum a string", lambda s: changed(s, lambda t: t["param_groups"][0].update(momentum="0.9")),
     "parameter group 0: momentum is a str, a number here"),
    ("buffer shape", lambda s: changed(s, lambda t: t["state"][0].update(momentum_buffer=torch.zeros(3, 5))),
     "the state of 0.weight: momentum_buffer is [3, 5], the parameter [3, 4]"),
    ("buffer of one", lambda s: changed(s, lambda t: t["state"][0].update(momentum_buffer=torch.zeros(1))),
     "the state of 0.weight: momentum_buffer is [1], the parameter [3, 4]"),
    ("buffer ints", lambda s: changed(s, lambda t: t["state"][2].update(momentum_buffer=torch.zeros(3).long())),
     "the state of 1.weight: momentum_buffer holds torch.int64 values"),
    ("entry a list", lambda s: changed(s, lambda t: t["state"].update({1: [1.0]})),
     "the state of 0.bias is a sequence of numbers, not a dict"),
    ("buffer a string", lambda s: changed(s, lambda t: t["state"][0].update(momentum_buffer="x")),
     "the state of 0.weight: momentum_buffer is a str"),
]


@pytest.mark.parametrize(("name", "make", "said"), CASES, ids=[c[0] for c in CASES])
def test_states_that_do_not_fit_are_named_in_one_line(name: str, make: Any, said: str) -> None:
    model, optimizer = stepped(sgd)
    state = make(optimizer.state_dict())
    with pytest.raises(CheckpointError) as caught:
        load_optimizer_state(optimizer, state, source="ckpt.pth.tar", modules=[model])
    message = str(caught.value)
    assert message.startswith("ckpt.pth.tar: its optimizer state does not fit this run's: ") and said in message
    assert "\n" not in message


@pytest.mark.parametrize("make", [sgd, lambda p: torch.optim.SGD(p, lr=0.1), lambda p: torch.optim.AdamW(p),
                                  lambda p: LARS(p, lr=0.1)], ids=["sgd", "sgd-no-momentum", "adamw", "lars"])
def test_what_an_optimizer_writes_fits_a_fresh_one_and_loads(make: Any) -> None:
    """The neighbours: what each optimizer writes after steps (a scalar step, buffers of the parameters' shapes),
    with a state stored aside for an index no group lists, fits a fresh optimizer of its kind and loads."""
    model, optimizer = stepped(make)
    saved = copy.deepcopy(optimizer.state_dict())
    saved["state"][99] = {"anything": "kept aside"}
    fresh = make(model.parameters())
    assert optimizer_problem(fresh, saved) is None
    load_optimizer_state(fresh, saved, source="x")
    assert fresh.state_dict()["param_groups"] == optimizer.state_dict()["param_groups"]


def test_another_optimizers_state_is_another_optimizers() -> None:
    _, adamw = stepped(lambda p: torch.optim.AdamW(p))
    model, lars = stepped(lambda p: LARS(p, lr=0.1))
    for optimizer, other, missing in ((lars, adamw, "momentum, trust_coefficient"), (adamw, lars, "betas, eps")):
        problem = optimizer_problem(optimizer, other.state_dict())
        assert problem is not None and f"lacks {missing}" in problem, problem


def test_a_trainer_load_is_checked_before_it_loads_anything() -> None:
    """detectron2's trainer.load_state_dict, wrapped: the optimizer state checked first, then the trainer's own
    load called with the whole state (not run with detectron2 here: a stand-in trainer)."""
    model, optimizer = stepped(sgd)
    loaded: list[dict] = []
    load = checked_trainer_load(loaded.append, optimizer, source="run/last_checkpoint", modules=[model])
    good = {"iteration": 7, "optimizer": optimizer.state_dict()}
    load(good)
    assert loaded == [good]
    bad = {"iteration": 7, "optimizer": changed(optimizer.state_dict(), lambda t: t["param_groups"].append({}))}
    with pytest.raises(CheckpointError, match="run/last_checkpoint: its optimizer state does not fit this run's: "
                                              "it has 2 parameter groups"):
        load(bad)
    with pytest.raises(CheckpointError, match="its trainer state is a str, not a dict"):
        load("x")  # type: ignore[arg-type]
    assert loaded == [good]
