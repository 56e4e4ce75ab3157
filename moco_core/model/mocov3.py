"""MoCo v3 (Chen, Xie, He, "An Empirical Study of Training Self-Supervised Vision Transformers", arXiv 2104.02057).

No queue: the keys are the other images of the (global) batch. A base encoder (backbone + projector) followed by
a predictor gives the queries; a momentum encoder (backbone + projector, no predictor) gives the keys. Each image
gives two views, and the loss is symmetric: ``ctr(q1, k2) + ctr(q2, k1)``, where ``ctr`` is the InfoNCE
cross-entropy of ``q . k / T`` over every key of the global batch, the positive being the other view of the same
image, times ``2 T`` (the official code's scale, which makes the gradient's size independent of T).

The heads, as the official ``moco/builder.py``: linear layers without bias, BN and ReLU after each hidden layer,
and a BN without affine parameters after the last layer of the projector (SimCLR's design); the projector has
2 layers on a ResNet and 3 on a ViT, the predictor 2, with the final BN on a ViT's predictor only.
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

from moco_core import distributed


def build_mlp(num_layers: int, in_dim: int, hidden_dim: int, out_dim: int, *, last_bn: bool = True) -> nn.Sequential:
    """``num_layers`` bias-free linear layers in_dim -> hidden_dim ... -> out_dim: each hidden one followed by
    BN and ReLU, the last by a BN without affine parameters when ``last_bn``. Its indices are the official
    module's (``fc.0`` linear, ``fc.1`` BN, ``fc.2`` ReLU, ...), so checkpoints load both ways."""
    layers: list[nn.Module] = []
    for layer in range(num_layers):
        first = in_dim if layer == 0 else hidden_dim
        last = layer == num_layers - 1
        layers.append(nn.Linear(first, out_dim if last else hidden_dim, bias=False))
        if not last:
            layers += [nn.BatchNorm1d(hidden_dim), nn.ReLU(inplace=True)]
        elif last_bn:
            layers.append(nn.BatchNorm1d(out_dim, affine=False))
    return nn.Sequential(*layers)


def momentum_at(base: float, progress: float) -> float:
    """m at ``progress`` (the fraction of the run done, 0 to 1) of the half-cycle cosine from ``base`` to 1:
    ``1 - (1 + cos(pi * progress)) / 2 * (1 - base)`` (the official --moco-m-cos)."""
    return 1.0 - 0.5 * (1.0 + math.cos(math.pi * progress)) * (1.0 - base)


def contrastive_logits(q: torch.Tensor, k: torch.Tensor, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits (N, N * world) = q . k / T over the keys of every process, and labels (N,): query i's positive is
    key i of this process, column rank * N + i. q, k: (N, C), not yet normalised; k carries no gradient."""
    q = F.normalize(q.float(), dim=1)
    k = distributed.all_gather_cat(F.normalize(k.float(), dim=1))  # (N * world, C), rank order
    logits = q @ k.t() / temperature  # (N, N * world)
    labels = torch.arange(q.shape[0], device=q.device) + distributed.rank() * q.shape[0]
    return logits, labels


class MoCoV3(nn.Module):
    """MoCo v3 around a backbone ``encoder`` whose last layer is the attribute ``head_name`` (``fc`` on a ResNet,
    ``head`` on a ViT), which the projector replaces.

    ``forward(x1, x2)`` returns logits (2N, N * world) of both directions, [q1 against k2; q2 against k1], and
    their labels (2N,); ``loss_scale`` * their mean cross-entropy is the official loss ctr(q1, k2) + ctr(q2, k1)
    (each ctr is a mean over N rows times 2T, so the sum is 4T times the mean over the 2N rows).

    ``momentum`` is read at every forward: the training loop sets it each step (the cosine schedule).
    Attribute order (encoder, momentum_encoder, predictor) is the official module's (base_encoder,
    momentum_encoder, predictor), so optimizer state indices agree between the two.
    """

    def __init__(self, encoder: nn.Module, *, head_name: str, feature_dim: int, projector_layers: int,
                 predictor_last_bn: bool, dim: int = 256, mlp_dim: int = 4096, temperature: float = 1.0,
                 momentum: float = 0.99) -> None:
        super().__init__()
        self.temperature = temperature  # T
        self.momentum = momentum  # m, for the next step
        setattr(encoder, head_name, build_mlp(projector_layers, feature_dim, mlp_dim, dim))
        self.encoder = encoder  # the base encoder: backbone and projector, trained by back-propagation
        # The momentum encoder starts as an exact copy and is only ever updated by the momentum rule.
        self.momentum_encoder = copy.deepcopy(encoder)
        for p in self.momentum_encoder.parameters():
            p.requires_grad_(False)
        self.predictor = build_mlp(2, dim, mlp_dim, dim, last_bn=predictor_last_bn)

    @property
    def loss_scale(self) -> float:
        """What the mean cross-entropy over both directions' 2N rows is multiplied by: 4T (see the class)."""
        return 4.0 * self.temperature

    @torch.no_grad()
    def momentum_update(self) -> None:
        """theta_k <- m * theta_k + (1 - m) * theta_q over all parameters (frozen ones included, as the official
        code: they are equal in both encoders and stay so); BN statistics are the momentum encoder's own."""
        torch._foreach_lerp_(list(self.momentum_encoder.parameters()), list(self.encoder.parameters()),
                             1.0 - self.momentum)

    def forward(self, x1: torch.Tensor, x2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x1, x2: the two views (N, 3, H, W) of the same N images. Each view goes through each encoder alone,
        so BN statistics are those of one view's batch, as in the official code."""
        q1 = self.predictor(self.encoder(x1))  # (N, dim)
        q2 = self.predictor(self.encoder(x2))
        with torch.no_grad():
            self.momentum_update()  # with this step's m, before the keys, as the official code
            k1 = self.momentum_encoder(x1)
            k2 = self.momentum_encoder(x2)
        # fp32 logits under autocast, as MoCo v1/v2 here: at T 0.2 bf16 rounding of the dot products shows
        with torch.autocast(device_type=x1.device.type, enabled=False):
            logits1, labels = contrastive_logits(q1, k2, self.temperature)
            logits2, _ = contrastive_logits(q2, k1, self.temperature)
        return torch.cat([logits1, logits2]), torch.cat([labels, labels])  # (2N, N * world), (2N,)
