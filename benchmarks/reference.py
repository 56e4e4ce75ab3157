"""The official implementation's training-step recipe, rebuilt for side-by-side timing (not used for training).

facebookresearch/moco (commit 7397dfe, ``moco/builder.py`` and ``main_moco.py``) does per step, in fp32:
- the momentum update as a Python loop over parameter pairs, ``p_k = p_k * m + p_q * (1 - m)``, one small kernel
  pair per parameter tensor;
- the key batch shuffled and unshuffled around the key encoder (across GPUs there; here, within the process);
- ``l_neg = einsum('nc,ck->nk', q, queue.clone().detach())``: a full copy of the (C, K) queue every step;
- the enqueue with a host-side pointer (``int(self.queue_ptr)``, a device-to-host sync each step), inside the
  forward, and the requirement that K be a multiple of the batch;
- then cross-entropy, backward and SGD, with images augmented by PIL in DataLoader workers.

This module writes that recipe from its description (no code was copied). It uses the same encoder as our model
(the same torchvision ResNet with the same split/shuffled BN), so that the timing difference is the recipe, not
the network. The benchmark runs it with ``--reference``; a test checks that its loss equals ours on equal inputs,
so the comparison is between two implementations of the same computation.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn


class ReferenceMoCo(nn.Module):
    """MoCo as the official builder computes it; ``forward`` returns (logits, labels) and enqueues."""

    def __init__(self, encoder: nn.Module, *, dim: int, queue_size: int, momentum: float, temperature: float,
                 shuffle_keys: bool = True) -> None:
        super().__init__()
        self.encoder_q = encoder
        self.encoder_k = copy.deepcopy(encoder)
        for param in self.encoder_k.parameters():
            param.requires_grad = False
        self.K, self.m, self.T, self.shuffle_keys = queue_size, momentum, temperature, shuffle_keys
        self.register_buffer("queue", F.normalize(torch.randn(dim, queue_size), dim=0))
        self.register_buffer("queue_ptr", torch.zeros(1, dtype=torch.long))

    @torch.no_grad()
    def momentum_update(self) -> None:
        for p_q, p_k in zip(self.encoder_q.parameters(), self.encoder_k.parameters(), strict=True):
            p_k.data = p_k.data * self.m + p_q.data * (1.0 - self.m)

    @torch.no_grad()
    def dequeue_and_enqueue(self, keys: torch.Tensor) -> None:
        batch = keys.shape[0]
        ptr = int(self.queue_ptr)  # host sync, as the official code
        if self.K % batch:
            raise ValueError(f"the official recipe needs K ({self.K}) to be a multiple of the batch ({batch})")
        self.queue[:, ptr:ptr + batch] = keys.T
        self.queue_ptr[0] = (ptr + batch) % self.K

    def forward(self, im_q: torch.Tensor, im_k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q = F.normalize(self.encoder_q(im_q), dim=1)
        with torch.no_grad():
            self.momentum_update()
            if self.shuffle_keys:
                order = torch.randperm(im_k.shape[0], device=im_k.device)
                k = F.normalize(self.encoder_k(im_k[order]), dim=1)[torch.argsort(order)]
            else:
                k = F.normalize(self.encoder_k(im_k), dim=1)
        l_pos = torch.einsum("nc,nc->n", q, k).unsqueeze(-1)
        l_neg = torch.einsum("nc,ck->nk", q, self.queue.clone().detach())
        logits = torch.cat([l_pos, l_neg], dim=1) / self.T
        labels = torch.zeros(logits.shape[0], dtype=torch.long, device=logits.device)
        self.dequeue_and_enqueue(k)
        return logits, labels


def reference_step(model: ReferenceMoCo, optimizer: torch.optim.Optimizer, im_q: torch.Tensor,
                   im_k: torch.Tensor) -> torch.Tensor:
    """One fp32 training step of the official recipe; returns the loss (not synchronised)."""
    logits, labels = model(im_q, im_k)
    loss = F.cross_entropy(logits, labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.detach()
