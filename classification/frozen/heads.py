"""A grid of linear heads trained together on the features of one frozen forward pass.

DINOv2's linear evaluation (facebookresearch/dinov2 ``eval/linear.py``, arXiv 2304.07193) runs the frozen backbone
once per batch and feeds every head of a grid: each an ``nn.Linear`` on one feature (a tap of
:mod:`moco_core.model.taps`) at one learning rate, initialised N(0, 0.01) with bias 0, in its own parameter
group of one SGD (momentum 0.9, weight decay 0), the losses summed, the lr on a cosine from its start to 0 over
every iteration of the run. Heads share nothing but the features, so their gradients are those of separate runs:
the grid costs one backbone pass a batch however many heads it holds.

Learning rates are per 256 images and scaled by the global batch: lr x batch / 256. This is DINOv2's own rule
(its ``scale_lr``: lr x per-GPU batch x world size / 256), so its grid of 13 values (:data:`DINOV2_LRS`) means the
same here at any batch; its maintainers ran it at a global batch of 1,024 (dinov2 issue 232), where the grid
spans 4e-5 .. 0.4.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

# dinov2/eval/linear.py's default --learning-rates, per 256 images
DINOV2_LRS = (1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 0.1)
LR_SCALING = "lr x global batch / 256 (DINOv2's scale_lr)"


@dataclass(frozen=True)
class HeadSpec:
    """One head of the grid: the feature it reads and its learning rate per 256 images."""

    tap: str
    lr: float

    @property
    def name(self) -> str:
        """"layer4 lr 0.001", "cls4+avg lr 2e-05": how records and tables name the head."""
        return f"{self.tap} lr {self.lr:g}"


def grid_specs(taps: tuple[str, ...], lrs: tuple[float, ...]) -> list[HeadSpec]:
    """Every (tap, lr) pair, taps outermost, each in the order given."""
    return [HeadSpec(tap, lr) for tap in taps for lr in lrs]


def scaled_lr(lr: float, global_batch: int) -> float:
    """The lr a head trains at: ``lr`` per 256 images times the global batch / 256 (DINOv2's ``scale_lr``)."""
    return lr * global_batch / 256


def cosine_factor(step: int, total: int) -> float:
    """The fraction of its start lr a head has after ``step`` of ``total`` iterations: (1 + cos(pi step / total)) / 2
    (torch's CosineAnnealingLR with eta_min 0, stepped every iteration, as DINOv2's)."""
    return 0.5 * (1.0 + math.cos(math.pi * min(step, total) / total))


class HeadGrid(nn.Module):
    """Linear heads, one per :class:`HeadSpec`: {tap: (N, D_tap)} -> logits (H, N, C), heads in spec order."""

    def __init__(self, specs: list[HeadSpec], dims: dict[str, int], num_classes: int) -> None:
        super().__init__()
        if not specs:
            raise ValueError("a head grid needs at least one head")
        self.specs = tuple(specs)
        self.heads = nn.ModuleList(nn.Linear(dims[spec.tap], num_classes) for spec in self.specs)
        for head in self.heads:  # DINOv2's LinearClassifier and the paper's main_lincls.py alike
            nn.init.normal_(head.weight, mean=0.0, std=0.01)
            nn.init.zeros_(head.bias)

    def forward(self, features: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.stack([head(features[spec.tap]) for spec, head in zip(self.specs, self.heads, strict=True)])

    def param_groups(self, global_batch: int) -> list[dict[str, object]]:
        """One SGD parameter group per head at its scaled lr; ``start_lr`` keeps it for the cosine schedule."""
        return [{"params": list(head.parameters()), "lr": scaled_lr(spec.lr, global_batch),
                 "start_lr": scaled_lr(spec.lr, global_batch), "head": spec.name}
                for spec, head in zip(self.specs, self.heads, strict=True)]


def head_optimizer(grid: HeadGrid, global_batch: int, *, momentum: float = 0.9,
                   weight_decay: float = 0.0) -> torch.optim.SGD:
    """DINOv2's SGD over the grid, a group per head. Fused (one kernel a tensor) on CPU and CUDA: the update of 13
    heads of 1000 x 2048 took 234 ms fused against 774 ms unfused on a shared 2-core CPU (2026-11-27), where it
    is the largest part of what the heads add to a step; the arithmetic is SGD's."""
    device = next(grid.parameters()).device
    return torch.optim.SGD(grid.param_groups(global_batch), lr=0.0, momentum=momentum, weight_decay=weight_decay,
                           fused=device.type in ("cpu", "cuda"))


def set_lr(optimizer: torch.optim.Optimizer, step: int, total: int) -> float:
    """Every group's lr at ``step`` of ``total`` iterations; returns the cosine factor applied."""
    factor = cosine_factor(step, total)
    for group in optimizer.param_groups:
        group["lr"] = group["start_lr"] * factor
    return factor


def head_losses(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Each head's mean cross-entropy: logits (H, N, C), target (N,) -> (H,). Their sum is what is minimised: the
    gradient of a sum reaches each head as that head's own loss's gradient, so a head that diverges (a non-finite
    loss at too high an lr) leaves the others' updates as they were."""
    heads, n, classes = logits.shape
    per_image = F.cross_entropy(logits.float().reshape(heads * n, classes), target.repeat(heads), reduction="none")
    return per_image.reshape(heads, n).mean(1)


@torch.no_grad()
def head_hits(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Top-1 and top-5 hits of every head: logits (H, N, C), target (N,) -> (H, 2) counts (top-5 is top-C below 5
    classes). A head whose logits are not finite scores no hits: NaN would otherwise rank first."""
    k = min(5, logits.shape[2])
    finite = torch.isfinite(logits).all(dim=2)  # (H, N)
    ranked = logits.topk(k, dim=2).indices  # (H, N, k)
    hits = (ranked == target.view(1, -1, 1)) & finite.unsqueeze(2)
    return torch.stack([hits[:, :, 0].sum(1), hits.any(dim=2).sum(1)], dim=1).to(torch.float64)
