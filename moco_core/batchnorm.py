"""Shuffling BN (paper section 3.3): keep batch statistics from telling the query which key is its positive.

With BN computed over the whole batch, q and k+ share statistics, and the model can "cheat" the pretext task.
The paper trains on 8 GPUs, BN runs per GPU, and the key batch is shuffled across GPUs before the key encoder
and unshuffled after, so a query and its positive key see statistics of different sub-batches.

In a single process we emulate that: every BN layer of both encoders normalises ``groups`` sub-batches
separately (as ``groups`` GPUs would), and the key batch is shuffled before the key encoder.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from moco_core import distributed


class SplitBatchNorm2d(nn.BatchNorm2d):
    """BatchNorm2d whose training statistics are computed separately over ``groups`` sub-batches.

    Sub-batch j holds samples j, j + groups, j + 2*groups, ... of the (N, C, H, W) input; N must be a
    multiple of ``groups``. Running statistics are the mean over groups of what each group's BN would track
    (as rank 0's would be, roughly, on ``groups`` GPUs). In eval mode it is a plain BatchNorm2d, and its
    state_dict keys are BatchNorm2d's, so checkpoints stay torchvision-compatible.
    """

    def __init__(self, num_features: int, groups: int, **kwargs: object) -> None:
        super().__init__(num_features, **kwargs)  # type: ignore[arg-type]
        self.groups = groups

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.groups == 1:
            return super().forward(x)
        n, c, h, w = x.shape
        g = self.groups
        if n % g:
            raise ValueError(f"batch of {n} is not divisible into {g} BN groups (model.bn_groups)")
        factor = 0.0
        if self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        # (N, C, H, W) -> (N/g, g*C, H, W): sample i*g + j lands in channel block j, i.e. BN group j.
        mean = self.running_mean.repeat(g) if self.running_mean is not None else None
        var = self.running_var.repeat(g) if self.running_var is not None else None
        weight = self.weight.repeat(g) if self.weight is not None else None
        bias = self.bias.repeat(g) if self.bias is not None else None
        out = F.batch_norm(x.reshape(n // g, g * c, h, w), mean, var, weight, bias, True, factor, self.eps)
        if mean is not None and var is not None:
            with torch.no_grad():
                self.running_mean.copy_(mean.view(g, c).mean(0))
                self.running_var.copy_(var.view(g, c).mean(0))
        return out.reshape(n, c, h, w)


def split_batchnorm(module: nn.Module, groups: int) -> nn.Module:
    """Replace every BatchNorm2d in ``module`` by a SplitBatchNorm2d with the same parameters and buffers."""
    for name, child in module.named_children():
        if type(child) is nn.BatchNorm2d:
            split = SplitBatchNorm2d(
                child.num_features, groups, eps=child.eps, momentum=child.momentum, affine=child.affine,
                track_running_stats=child.track_running_stats,
            )
            split.load_state_dict(child.state_dict())
            setattr(module, name, split)
        else:
            split_batchnorm(child, groups)
    return module


def to_plain_batchnorm(module: nn.Module) -> nn.Module:
    """Undo ``split_batchnorm``: SplitBatchNorm2d layers become BatchNorm2d (for export or evaluation)."""
    for name, child in module.named_children():
        if isinstance(child, SplitBatchNorm2d):
            plain = nn.BatchNorm2d(
                child.num_features, eps=child.eps, momentum=child.momentum, affine=child.affine,
                track_running_stats=child.track_running_stats,
            )
            plain.load_state_dict(child.state_dict())
            setattr(module, name, plain)
        else:
            to_plain_batchnorm(child)
    return module


@torch.no_grad()
def shuffle_batch(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Shuffle the key batch before the key encoder. Returns (shuffled x, the index that undoes it).

    One process: a random permutation of the local batch (its BN groups then mix samples at random).
    Several processes: the global batch is gathered, permuted with rank 0's permutation and split again,
    so each rank's key encoder sees keys from all ranks (the paper's shuffling BN).
    """
    if distributed.world_size() == 1:
        perm = torch.randperm(x.shape[0], device=x.device)
        return x[perm], torch.argsort(perm)
    gathered = distributed.all_gather_cat(x)  # (world * n, ...)
    perm = distributed.broadcast_(torch.randperm(gathered.shape[0], device=x.device))
    mine = perm.view(distributed.world_size(), -1)[distributed.rank()]
    return gathered[mine], torch.argsort(perm)


@torch.no_grad()
def unshuffle_batch(x: torch.Tensor, unshuffle: torch.Tensor) -> torch.Tensor:
    """Inverse of ``shuffle_batch``: the keys come back in the order of their queries."""
    if distributed.world_size() == 1:
        return x[unshuffle]
    gathered = distributed.all_gather_cat(x)
    mine = unshuffle.view(distributed.world_size(), -1)[distributed.rank()]
    return gathered[mine]
