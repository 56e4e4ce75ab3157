"""The pretraining optimizers: SGD (MoCo v1/v2), LARS and AdamW (MoCo v3), one parameter group each.

Every parameter of the module goes into the one group, the momentum encoder's too, as in the official code: they
never get a gradient, so each optimizer skips them, and optimizer state indices match official checkpoints.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

TRUST_COEFFICIENT = 0.001  # LARS's eta (You et al., arXiv 1708.03888; the official moco-v3 optimizer.py)


class LARS(torch.optim.Optimizer):
    """SGD with momentum whose update of each weight matrix or kernel is rescaled to ``eta * ||w|| / ||g + wd w||``
    of its own norm (layer-wise adaptive rate scaling, arXiv 1708.03888), as MoCo v3's ResNet setups use it.

    For a parameter ``w`` of 2 or more dimensions with gradient ``g``: ``d = g + wd * w``, then
    ``d <- d * eta * ||w|| / ||d||`` when both norms are positive (else ``d`` is kept). Parameters of 1 dimension or
    less (biases, BN weights) take ``d = g``: no weight decay and no rescaling, as the official optimizer.py.
    Then ``mu <- momentum * mu + d`` (``mu`` starting at 0) and ``w <- w - lr * mu``. The state of each parameter
    is ``mu``, under the official name, so official checkpoints' optimizer state loads.
    """

    def __init__(self, params: Iterable[nn.Parameter], lr: float = 0.0, weight_decay: float = 0.0,
                 momentum: float = 0.9, trust_coefficient: float = TRUST_COEFFICIENT) -> None:
        defaults = {"lr": lr, "weight_decay": weight_decay, "momentum": momentum,
                    "trust_coefficient": trust_coefficient}
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: None = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                update = p.grad
                if p.ndim > 1:
                    update = update.add(p, alpha=group["weight_decay"])
                    w_norm, u_norm = torch.linalg.vector_norm(p), torch.linalg.vector_norm(update)
                    ratio = group["trust_coefficient"] * w_norm / u_norm
                    # a zero norm (a fresh zero-initialised layer, a zero gradient) keeps the plain update
                    update = update * torch.where((w_norm > 0) & (u_norm > 0), ratio, torch.ones_like(ratio))
                state = self.state[p]
                if "mu" not in state:
                    state["mu"] = torch.zeros_like(p)
                state["mu"].mul_(group["momentum"]).add_(update)
                p.add_(state["mu"], alpha=-group["lr"])


def resolve_optimizer(name: str, method: str, vit: bool) -> str:
    """``optim.optimizer`` with "auto" resolved: SGD for MoCo v1/v2 and the other methods; for mocov3 LARS on a
    ResNet and AdamW on a ViT (the official v3 reference setups)."""
    if name != "auto":
        return name
    if method != "mocov3":
        return "sgd"
    return "adamw" if vit else "lars"


def make_optimizer(module: nn.Module, name: str, *, lr: float, momentum: float,
                   weight_decay: float) -> torch.optim.Optimizer:
    """``name`` ("sgd", "lars" or "adamw"; not "auto") over all of ``module``'s parameters in one group.

    AdamW takes torch's defaults (betas 0.9 and 0.999, eps 1e-8) and decays every parameter, as the official
    v3 code; ``momentum`` is SGD's and LARS's only."""
    params = module.parameters()
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    if name == "lars":
        return LARS(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    raise ValueError(f"unknown optimizer {name!r}; expected sgd, lars or adamw")
