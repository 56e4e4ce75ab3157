"""LARS against values worked out by hand; which optimizer each method and backbone gets."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from moco_core.model.optimizers import LARS, resolve_optimizer
from moco_core.pretrain_config import OptimConfig
from moco_core.run.train import build_optimizer


def test_lars_two_steps_by_hand() -> None:
    weight = nn.Parameter(torch.tensor([[3.0, 4.0]]))  # ||w|| = 5
    bias = nn.Parameter(torch.tensor([1.0, -2.0]))
    frozen = nn.Parameter(torch.ones(2, 2))  # no gradient: skipped, no state
    opt = LARS([weight, bias, frozen], lr=2.0, weight_decay=0.1, momentum=0.9)
    weight.grad = torch.tensor([[2.7, -0.4]])  # d = g + 0.1 w = [3.0, 0.0], ||d|| = 3
    bias.grad = torch.tensor([0.5, 0.5])
    opt.step()
    # trust ratio 0.001 * 5 / 3: the update is [0.005, 0]; mu = update; w - 2 mu
    torch.testing.assert_close(weight.detach(), torch.tensor([[2.99, 4.0]]))
    # a 1-D tensor: no weight decay, no trust ratio: b - 2 g
    torch.testing.assert_close(bias.detach(), torch.tensor([0.0, -3.0]))
    assert frozen not in opt.state and torch.equal(frozen.detach(), torch.ones(2, 2))
    opt.step()  # the same gradients again
    # d = [2.7 + 0.299, -0.4 + 0.4] = [2.999, 0]: the update is 0.001 * ||w|| along the first axis
    w_norm = math.sqrt(2.99 ** 2 + 4.0 ** 2)
    mu = 0.9 * 0.005 + 0.001 * w_norm
    torch.testing.assert_close(weight.detach(), torch.tensor([[2.99 - 2.0 * mu, 4.0]]))
    torch.testing.assert_close(bias.detach(), torch.tensor([0.0 - 2.0 * (0.9 * 0.5 + 0.5), -3.0 - 2.0 * 0.95]))
    assert set(opt.state[weight]) == {"mu"}  # the official state name: official optimizer states load


def test_lars_keeps_the_plain_update_where_a_norm_is_zero() -> None:
    zero = nn.Parameter(torch.zeros(1, 2))  # a zero-initialised layer: ||w|| = 0
    opt = LARS([zero], lr=1.0, weight_decay=0.5, momentum=0.9)
    zero.grad = torch.tensor([[1.0, -1.0]])
    opt.step()
    torch.testing.assert_close(zero.detach(), torch.tensor([[-1.0, 1.0]]))


@pytest.mark.parametrize(("name", "method", "vit", "expected"), [
    ("auto", "moco", False, "sgd"), ("auto", "end2end", False, "sgd"), ("auto", "mocov3", False, "lars"),
    ("auto", "mocov3", True, "adamw"), ("sgd", "mocov3", True, "sgd"), ("adamw", "moco", False, "adamw"),
])
def test_auto_picks_the_official_optimizer(name: str, method: str, vit: bool, expected: str) -> None:
    assert resolve_optimizer(name, method, vit) == expected


def test_built_optimizers_take_the_config() -> None:
    module = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    cfg = OptimConfig(lr=0.6, batch_size=512, momentum=0.8, weight_decay=1e-6, optimizer="lars", warmup_epochs=0)
    lars = build_optimizer(module, cfg, torch.device("cpu"), method="mocov3")
    assert isinstance(lars, LARS) and "fused" not in lars.param_groups[0]
    group = lars.param_groups[0]
    assert (group["lr"], group["momentum"], group["weight_decay"]) == (pytest.approx(1.2), 0.8, 1e-6)
    adamw = build_optimizer(module, OptimConfig(optimizer="adamw", weight_decay=0.1), torch.device("cpu"))
    assert isinstance(adamw, torch.optim.AdamW) and adamw.param_groups[0]["weight_decay"] == 0.1
    assert len(adamw.param_groups) == 1 and len(adamw.param_groups[0]["params"]) == 4  # every parameter
