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

    Two ways to compute the same thing. A contiguous NCHW input in eager mode goes through one ``F.batch_norm``
    over the free view (N/g, g*C, H, W) (the native kernels, fastest eagerly). A channels_last input, or one
    under ``torch.compile``, goes through :func:`group_batch_norm`, written in plain tensor ops on the view
    (N/g, g, C, H, W), which is free in both memory layouts: the (N/g, g*C) view of a channels_last tensor would
    need a copy (2.5x slower steps, measured on an H100), and the compiler fuses the plain ops into its own
    reduction and pointwise kernels with no graph break.
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
        tracking = self.track_running_stats and self.num_batches_tracked is not None
        if torch.compiler.is_compiling() or not x.is_contiguous():
            if not tracking:
                return group_batch_norm(x, g, self.weight, self.bias, None, None, 0.0, self.eps)
            self.num_batches_tracked.add_(1)
            factor = self.momentum if self.momentum is not None else 1.0 / self.num_batches_tracked
            return group_batch_norm(x, g, self.weight, self.bias, self.running_mean, self.running_var, factor,
                                    self.eps)
        factor = 0.0
        if tracking:
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


def group_batch_norm(x: torch.Tensor, groups: int, weight: torch.Tensor | None, bias: torch.Tensor | None,
                     running_mean: torch.Tensor | None, running_var: torch.Tensor | None,
                     factor: float | torch.Tensor, eps: float) -> torch.Tensor:
    """Training-mode BN of (N, C, H, W) ``x`` with separate statistics for sample groups ``i*groups + j``.

    Statistics in float32 whatever ``x``'s dtype (as cuDNN's BN under autocast); the output has ``x``'s dtype
    and memory layout. Running statistics, when given, move by ``factor`` towards the mean over groups of each
    group's batch mean and unbiased variance (in place, outside autograd).
    """
    n, c, h, w = x.shape
    xg = x.unflatten(0, (n // groups, groups)).float()  # (N/g, g, C, H, W): a view in NCHW and channels_last
    var, mean = torch.var_mean(xg, dim=(0, 3, 4), correction=0, keepdim=True)  # (1, g, C, 1, 1)
    scale = torch.rsqrt(var + eps)
    if weight is not None:
        scale = scale * weight.view(1, 1, c, 1, 1)
    shift = -mean * scale
    if bias is not None:
        shift = shift + bias.view(1, 1, c, 1, 1)
    out = (xg * scale + shift).to(x.dtype).flatten(0, 1)
    if running_mean is not None and running_var is not None:
        count = (n // groups) * h * w
        with torch.no_grad():
            unbiased = var.detach().view(groups, c) * (count / max(count - 1, 1))
            running_mean.lerp_(mean.detach().view(groups, c).mean(0), factor)
            running_var.lerp_(unbiased.mean(0), factor)
    return out


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



class CpuSyncBatchNorm(nn.modules.batchnorm._BatchNorm):
    """SyncBatchNorm for processes without CUDA (gloo), where torch's refuses to run (and DDP refuses it): the
    batch statistics of every process, summed with :func:`distributed.all_reduce_sum_with_grad` in two passes
    (the mean, then the squared deviations from it); the gradient reaches every process's inputs as torch's
    does. Processes may hold different numbers of rows (detection's RoI batches; none at all): every row weighs
    the same, and where no process has one, the statistics stay as they were (plain BatchNorm's rule). In eval
    mode or in one process it is plain BatchNorm. Its state_dict keys are BatchNorm's, so the
    checkpoints are those of a CUDA run. :func:`sync_batchnorm_for` puts it in place of torch's on CPU.
    """

    def _check_input_dim(self, x: torch.Tensor) -> None:
        if x.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {x.dim()}D input)")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or distributed.world_size() == 1:
            return super().forward(x)
        self._check_input_dim(x)
        dims = [0, *range(2, x.dim())]
        shape = [1, -1] + [1] * (x.dim() - 2)
        count = torch.tensor([x.numel() // x.shape[1]], dtype=x.dtype, device=x.device)
        totals = distributed.all_reduce_sum_with_grad(torch.cat([x.sum(dims), count]))
        n = totals[-1]
        if n.item() == 0:  # every process's input is empty (no RoI of a kind anywhere): plain BN's answer,
            if self.track_running_stats and self.num_batches_tracked is not None:  # the statistics unchanged
                self.num_batches_tracked.add_(1)
            return x * 1.0 if not self.affine else x * self.weight.view(shape) + self.bias.view(shape)
        mean = totals[:-1] / n
        centred = x - mean.view(shape)
        var = distributed.all_reduce_sum_with_grad((centred * centred).sum(dims)) / n
        y = centred * torch.rsqrt(var + self.eps).view(shape)
        if self.affine:
            y = y * self.weight.view(shape) + self.bias.view(shape)
        if self.track_running_stats and self.running_mean is not None and self.running_var is not None:
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
                factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
                self.running_mean.lerp_(mean, factor)
                self.running_var.lerp_(var * n / (n - 1), factor)  # unbiased, as torch's
        return y


def sync_batchnorm_for(module: nn.Module, device: torch.device) -> nn.Module:
    """``module`` ready to run on ``device``: off CUDA, each of torch's SyncBatchNorm layers is replaced (in
    place, among its parent's children) by a :class:`CpuSyncBatchNorm` holding the same parameters and buffers,
    so that several CPU processes (a laptop, the README's commands) run ``model.shuffle_bn: sync`` as GPUs do."""
    if device.type == "cuda":
        return module
    for name, child in module.named_children():
        if isinstance(child, nn.SyncBatchNorm):
            synced = CpuSyncBatchNorm(child.num_features, child.eps, child.momentum, child.affine,
                                      child.track_running_stats, device=device)
            if child.affine:
                synced.weight, synced.bias = child.weight, child.bias
            synced.running_mean, synced.running_var = child.running_mean, child.running_var
            synced.num_batches_tracked = child.num_batches_tracked
            synced.train(child.training)
            module.add_module(name, synced)
        else:
            sync_batchnorm_for(child, device)
    return module
