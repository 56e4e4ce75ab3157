"""Momentum Contrast (He et al., arXiv 1911.05722, Algorithm 1).

A query encoder trained by SGD, a key encoder that is its momentum copy, and a FIFO queue of K keys that is
the dictionary of negatives. The loss is InfoNCE: cross-entropy over (N, 1+K) logits / T, positive first.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from moco_core import distributed
from moco_core.model.batchnorm import shuffle_batch, unshuffle_batch


def contrastive_logits(
    q: torch.Tensor, k: torch.Tensor, queue: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """InfoNCE logits and labels.

    q, k: (N, C) L2-normalised queries and their positive keys; queue: (C, K) normalised negatives.
    Returns logits (N, 1+K) = [q.k+, q.queue] / T and labels (N,) of zeros (the positive is class 0).
    """
    q = q / temperature  # scaling the (N, C) queries costs nothing next to dividing the (N, 1+K) logits
    l_pos = torch.einsum("nc,nc->n", q, k).unsqueeze(-1)  # (N, 1)
    l_neg = torch.einsum("nc,ck->nk", q, queue)  # (N, K)
    logits = torch.cat([l_pos, l_neg], dim=1)  # (N, 1+K)
    labels = torch.zeros(logits.shape[0], dtype=torch.long, device=logits.device)
    return logits, labels


class MoCo(nn.Module):
    """MoCo v1/v2 around an ``encoder`` mapping images (N, 3, H, W) to (N, dim) features.

    ``forward(im_q, im_k)`` returns (logits (N, 1+K), labels (N,), keys (N_global, dim)); the caller computes
    the loss, steps the optimizer and then calls ``enqueue(keys)``. Enqueueing after the backward pass lets
    the logits use the queue itself rather than a copy of it (the official code clones 32 MB every step).

    Attribute order (encoder, momentum_encoder, queue, queue_ptr) matches the official module's
    (encoder_q, encoder_k, queue, queue_ptr), so optimizer state indices agree between the two.
    """

    def __init__(
        self,
        encoder: nn.Module,
        *,
        dim: int = 128,
        queue_size: int = 65536,
        momentum: float = 0.999,
        temperature: float = 0.07,
        shuffle_keys: bool = True,
        queue_init: str = "random",
    ) -> None:
        super().__init__()
        self.queue_size = queue_size  # K
        self.momentum = momentum  # m
        self.temperature = temperature  # T
        self.shuffle_keys = shuffle_keys
        self.encoder = encoder  # f_q, trained by back-propagation
        # f_k starts as an exact copy of f_q and is only ever updated by the momentum rule, never by gradients.
        self.momentum_encoder = copy.deepcopy(encoder)
        for p in self.momentum_encoder.parameters():
            p.requires_grad_(False)
        # "random": unit random keys until real ones arrive (the official code). "empty": zero columns, left out
        # of the logits until a key is written there. Before the queue fills, random keys are easy negatives
        # that share nothing with the real ones: pulling every query towards the keys' common direction wins
        # against them, and in a short run the encoders collapse onto that direction before they recover.
        if queue_init not in ("random", "empty"):
            raise ValueError(f"queue_init must be 'random' or 'empty', got {queue_init!r}")
        self.mask_empty = queue_init == "empty"
        if self.mask_empty:
            queue = torch.zeros(dim, queue_size)
        else:
            queue = F.normalize(torch.randn(dim, queue_size), dim=0)
        # Keys still to enqueue before no column can be unwritten; the mask is skipped from then on (it would
        # cost a (N, 1+K) copy of the logits every step). Counted on the host, so it needs no sync; loading
        # a queue counts its unwritten (all-zero) columns again.
        self._unwritten_left = queue_size if self.mask_empty else 0
        self.register_load_state_dict_post_hook(lambda module, _keys: module._count_unwritten_again())
        self.register_buffer("queue", queue)  # (C, K)
        self.register_buffer("queue_ptr", torch.zeros(1, dtype=torch.long))  # next column to overwrite

    @torch.no_grad()
    def momentum_update(self) -> None:
        """theta_k <- m * theta_k + (1 - m) * theta_q, over all parameters, in one fused call.

        lerp(theta_k, theta_q, 1 - m) is exactly theta_k when m = 1 and exactly theta_q when m = 0. BN running
        statistics are buffers, not parameters: the key encoder tracks its own from its forward passes.
        """
        params_k = list(self.momentum_encoder.parameters())
        params_q = list(self.encoder.parameters())
        torch._foreach_lerp_(params_k, params_q, 1.0 - self.momentum)

    @torch.no_grad()
    def encode_keys(self, im_k: torch.Tensor) -> torch.Tensor:
        """Normalised keys (N, C) in the order of ``im_k``, through shuffled BN when enabled."""
        if not self.shuffle_keys:
            return F.normalize(self.momentum_encoder(im_k), dim=1)
        shuffled, unshuffle = shuffle_batch(im_k)
        k = F.normalize(self.momentum_encoder(shuffled), dim=1)
        return unshuffle_batch(k, unshuffle)

    def forward(
        self, im_q: torch.Tensor, im_k: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """im_q, im_k: two augmented views (N, 3, H, W) of the same N images.

        Returns logits (N, 1+K), labels (N,) and this step's keys from all ranks (N * world, C) to enqueue.
        """
        q = F.normalize(self.encoder(im_q), dim=1)  # (N, C)
        self.momentum_update()  # before the key forward, as in Algorithm 1
        k = self.encode_keys(im_k)  # (N, C), no gradient
        # The logits are computed in fp32 even under autocast: at T = 0.07 a bf16 dot product of unit vectors
        # would be off by up to ~0.05 in the logit.
        with torch.autocast(device_type=q.device.type, enabled=False):
            logits, labels = contrastive_logits(q.float(), k.float(), self.queue, self.temperature)
            if self._unwritten_left:  # columns never written are all zero (a written key has norm 1)
                empty = torch.cat([self.queue.new_zeros(1, dtype=torch.bool), ~self.queue.any(dim=0)])
                logits = logits.masked_fill(empty, float("-inf"))
        return logits, labels, distributed.all_gather_cat(k.float())

    @property
    def has_negatives(self) -> bool:
        """Whether the next step's logits hold any negative: with queue_init "empty", not until a key is written.
        Counted on the host (no sync)."""
        return self._unwritten_left < self.queue_size

    def _count_unwritten_again(self) -> None:
        """After loading a queue: its columns never written (all zero) are counted, once (a host sync at load)."""
        self._unwritten_left = int((~self.queue.any(dim=0)).sum()) if self.mask_empty else 0

    @torch.no_grad()
    def enqueue(self, keys: torch.Tensor) -> None:
        """Write ``keys`` (B, C) into the queue, replacing the oldest, and advance the pointer.

        Unlike the official code, K need not be a multiple of B: the write wraps around the end of the queue
        (columns ptr..K-1, then 0..). If B > K only the newest K keys can stay, exactly as if the B keys had
        been written one after another. The pointer stays on the device, so no step waits on a host sync.
        """
        total = keys.shape[0]
        self._unwritten_left = max(0, self._unwritten_left - total)
        kept = keys[-self.queue_size:] if total > self.queue_size else keys
        start = self.queue_ptr + (total - kept.shape[0])  # (1,), where the kept keys would have landed
        columns = (start + torch.arange(kept.shape[0], device=keys.device)) % self.queue_size
        self.queue.index_copy_(1, columns, kept.t().to(self.queue.dtype))
        self.queue_ptr.add_(total).remainder_(self.queue_size)
