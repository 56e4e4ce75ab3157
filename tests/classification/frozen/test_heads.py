"""classification/frozen/heads.py: the grid trains each head as a run of its own would (an independent reference:
one nn.Linear and one SGD per head), with DINOv2's lr rule and cosine, and scores every head by hand-worked
counts."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from classification.frozen.heads import (
    DINOV2_LRS,
    HeadGrid,
    HeadSpec,
    cosine_factor,
    grid_specs,
    head_hits,
    head_losses,
    scaled_lr,
    set_lr,
)


def test_dinov2s_grid_and_lr_rule() -> None:
    """13 values 1e-5 .. 0.1 (dinov2 eval/linear.py); at the global batch of 1,024 its maintainers used (dinov2 issue
    232) they train at 4x: 4e-5 .. 0.4."""
    assert len(DINOV2_LRS) == 13 and DINOV2_LRS[0] == 1e-5 and DINOV2_LRS[-1] == 0.1
    assert [scaled_lr(lr, 1024) for lr in (1e-5, 0.1)] == [4e-5, 0.4]
    assert scaled_lr(30, 256) == 30 and scaled_lr(0.1, 128) == 0.05
    specs = grid_specs(("cls", "cls4+avg"), (1e-3, 0.1))
    assert [s.name for s in specs] == ["cls lr 0.001", "cls lr 0.1", "cls4+avg lr 0.001", "cls4+avg lr 0.1"]


def test_cosine_per_iteration() -> None:
    """torch's CosineAnnealingLR(T, eta_min=0), hand-worked: 1 at 0, 1/2 at T/2, (1 + cos(pi/4))/2 at T/4, 0 at T."""
    assert cosine_factor(0, 100) == 1.0 and cosine_factor(50, 100) == pytest.approx(0.5)
    assert cosine_factor(25, 100) == pytest.approx((1 + math.sqrt(0.5)) / 2) and cosine_factor(100, 100) == 0.0
    param = nn.Parameter(torch.zeros(1))
    reference = torch.optim.SGD([param], lr=0.4)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(reference, 10, eta_min=0)
    grid = HeadGrid([HeadSpec("layer4", 0.1)], {"layer4": 2}, 3)
    optimizer = torch.optim.SGD(grid.param_groups(1024), lr=0.0)
    for step in range(10):
        set_lr(optimizer, step, 10)
        assert optimizer.param_groups[0]["lr"] == pytest.approx(reference.param_groups[0]["lr"], abs=1e-12)
        reference.step()
        scheduler.step()


def test_every_head_trains_as_alone() -> None:
    """Five steps of the grid (losses summed, one SGD with a group per head) against each head trained alone on the
    same features by its own SGD at its own lr: the same weights."""
    torch.manual_seed(0)
    specs = grid_specs(("a", "b"), (0.1, 3.0))
    dims = {"a": 6, "b": 4}
    grid = HeadGrid(specs, dims, 5)
    alone = [nn.Linear(dims[s.tap], 5) for s in specs]
    for single, head in zip(alone, grid.heads, strict=True):
        single.load_state_dict(head.state_dict())
    optimizer = torch.optim.SGD(grid.param_groups(64), lr=0.0, momentum=0.9)
    optimizers = [torch.optim.SGD(h.parameters(), lr=scaled_lr(s.lr, 64), momentum=0.9)
                  for s, h in zip(specs, alone, strict=True)]
    for step in range(5):
        features = {"a": torch.randn(8, 6), "b": torch.randn(8, 4)}
        target = torch.randint(0, 5, (8,))
        set_lr(optimizer, step, 5)
        optimizer.zero_grad()
        head_losses(grid(features), target).sum().backward()
        optimizer.step()
        for spec, single, opt in zip(specs, alone, optimizers, strict=True):
            for group in opt.param_groups:
                group["lr"] = scaled_lr(spec.lr, 64) * cosine_factor(step, 5)
            opt.zero_grad()
            F.cross_entropy(single(features[spec.tap]), target).backward()
            opt.step()
    for single, head in zip(alone, grid.heads, strict=True):
        torch.testing.assert_close(head.weight, single.weight)
        torch.testing.assert_close(head.bias, single.bias)


def test_heads_start_as_dinov2s() -> None:
    torch.manual_seed(0)
    grid = HeadGrid(grid_specs(("x",), (1.0,)), {"x": 2000}, 100)
    assert grid.heads[0].weight.std().item() == pytest.approx(0.01, rel=0.02)
    assert torch.count_nonzero(grid.heads[0].bias) == 0
    assert [g["head"] for g in grid.param_groups(256)] == ["x lr 1"]


def test_a_diverged_head_leaves_the_others_alone() -> None:
    """One head's loss is inf (its weights huge): the others' gradients are those of their own losses, and it scores
    no hits."""
    torch.manual_seed(0)
    grid = HeadGrid(grid_specs(("x",), (1.0, 2.0)), {"x": 3}, 4)
    with torch.no_grad():
        grid.heads[1].weight.fill_(float("nan"))
    features, target = {"x": torch.randn(5, 3)}, torch.tensor([0, 1, 2, 3, 0])
    losses = head_losses(grid(features), target)
    assert math.isfinite(losses[0].item()) and math.isnan(losses[1].item())
    losses.sum().backward()
    expected = torch.autograd.grad(F.cross_entropy(grid.heads[0](features["x"]), target), grid.heads[0].weight)[0]
    torch.testing.assert_close(grid.heads[0].weight.grad, expected)
    assert head_hits(grid(features).detach(), target)[1].tolist() == [0.0, 0.0]


def test_hits_hand_worked() -> None:
    """Two heads, three images of 6 classes: head 0 ranks the target first, second, sixth; head 1 first for all."""
    target = torch.tensor([0, 1, 2])
    head0 = torch.tensor([[9.0, 1, 2, 3, 4, 5], [9.0, 8, 0, 0, 0, 0], [1.0, 2, 0, 3, 4, 5]])
    head1 = torch.nn.functional.one_hot(target, 6).float()
    hits = head_hits(torch.stack([head0, head1]), target)
    assert hits.tolist() == [[1.0, 2.0], [3.0, 3.0]]
    few = head_hits(torch.tensor([[[0.0, 1.0], [2.0, 1.0]]]), torch.tensor([0, 0]))  # 2 classes: top-5 is top-2
    assert few.tolist() == [[1.0, 2.0]]


def test_losses_are_each_heads_cross_entropy() -> None:
    logits = torch.randn(3, 7, 4)
    target = torch.randint(0, 4, (7,))
    expected = torch.stack([F.cross_entropy(logits[h], target) for h in range(3)])
    torch.testing.assert_close(head_losses(logits, target), expected)
