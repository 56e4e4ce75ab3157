"""The official MoCo v3 training-step recipe, rebuilt for side-by-side timing (not used for training).

facebookresearch/moco-v3 (``main_moco.py`` and ``moco/builder.py``, at c349e6e) does per step, on one GPU:
- the lr of every param group and the momentum m set in Python at the step's fractional epoch;
- under ``torch.cuda.amp.autocast`` (fp16): queries ``predictor(base_encoder(x))`` of both views, then, without
  gradients, the momentum update as a Python loop over parameter pairs (``p_m = p_m * m + p_b * (1 - m)``, two
  small kernels a tensor), the keys of both views, and the loss ``ctr(q1, k2) + ctr(q2, k1)``, each ``ctr`` the
  cross-entropy of the normalised ``q . k / T`` (an einsum) times 2T;
- ``loss.item()`` for its meters (a device-to-host sync every step);
- ``scaler.scale(loss).backward()``, ``scaler.step(optimizer)``, ``scaler.update()`` (a ``GradScaler``), with
  ``torch.optim.AdamW`` (torch's default implementation) for a ViT and its own LARS for a ResNet (a Python loop
  over the parameters: the one ``moco_core.model.optimizers.LARS`` is, kernel for kernel, so the timing uses
  that); nothing compiled, NCHW.
Its ViTs are timm 0.4.9's ``VisionTransformer`` (the version its README names), whose attention is written out:
``softmax(q k^T * scale) v`` as three kernels with the (heads, tokens, tokens) matrix in memory.

This module writes that recipe from its description (no code was copied). It takes the same network as ours
(``moco_core.model.methods.build_mocov3``: the same ViT, projector and predictor), with timm's fused attention turned
off to match 0.4.9's, so that the timing difference is the recipe; a test checks that its loss and momentum
update equal ours on equal inputs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def unfused_attention(module: nn.Module) -> int:
    """Turn off timm's ``F.scaled_dot_product_attention`` in every attention block of ``module`` (timm 0.4.9's
    written-out attention instead); returns how many blocks were changed."""
    blocks = [m for m in module.modules() if hasattr(m, "fused_attn")]
    for block in blocks:
        block.fused_attn = False
    return len(blocks)


class ReferenceMoCoV3(nn.Module):
    """MoCo v3 as the official builder computes it: ``forward(x1, x2, m)`` updates the momentum encoder with ``m``
    and returns the loss. ``base_encoder`` is the backbone with its projector, ``predictor`` the query head."""

    def __init__(self, base_encoder: nn.Module, momentum_encoder: nn.Module, predictor: nn.Module, *,
                 temperature: float) -> None:
        super().__init__()
        self.base_encoder, self.momentum_encoder, self.predictor = base_encoder, momentum_encoder, predictor
        self.T = temperature
        for param in self.momentum_encoder.parameters():
            param.requires_grad = False

    @torch.no_grad()
    def update_momentum_encoder(self, m: float) -> None:
        for p_b, p_m in zip(self.base_encoder.parameters(), self.momentum_encoder.parameters(), strict=True):
            p_m.data = p_m.data * m + p_b.data * (1.0 - m)

    def ctr(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        q, k = F.normalize(q, dim=1), F.normalize(k, dim=1)
        logits = torch.einsum("nc,mc->nm", q, k) / self.T  # (N, N): one process, so its labels are 0..N-1
        labels = torch.arange(logits.shape[0], dtype=torch.long, device=logits.device)
        return F.cross_entropy(logits, labels) * (2 * self.T)

    def forward(self, x1: torch.Tensor, x2: torch.Tensor, m: float) -> torch.Tensor:
        q1 = self.predictor(self.base_encoder(x1))
        q2 = self.predictor(self.base_encoder(x2))
        with torch.no_grad():
            self.update_momentum_encoder(m)
            k1 = self.momentum_encoder(x1)
            k2 = self.momentum_encoder(x2)
        return self.ctr(q1, k2) + self.ctr(q2, k1)


def reference_step(model: ReferenceMoCoV3, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
                   x1: torch.Tensor, x2: torch.Tensor, *, lr: float, m: float) -> float:
    """One step of the official recipe (fp16 autocast on CUDA, fp32 elsewhere); returns the loss, read on the
    host as the official meters read it."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    with torch.autocast(x1.device.type, dtype=torch.float16, enabled=x1.device.type == "cuda"):
        loss = model(x1, x2, m)
    value = loss.item()
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return value
