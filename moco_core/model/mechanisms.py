"""The contrast mechanisms MoCo is compared with (paper Figure 2, Figure 3, Table 3).

End-to-end (Figure 2a): the dictionary is the current mini-batch, encoded by the same network with gradients;
each query has the other N - 1 keys of the batch as negatives. Memory bank (Figure 2b, InstDisc, Wu et al.,
arXiv 1805.01978): one stored feature per training image; the positive is the image's own stored feature, K
negatives are sampled from the bank, and the bank rows of the batch are updated with momentum 0.5.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from moco_core import distributed


class EndToEnd(nn.Module):
    """Queries and keys from one ``encoder``, both with gradients; the keys of the batch are the dictionary."""

    def __init__(self, encoder: nn.Module, *, temperature: float = 0.07, shuffle_keys: bool = True) -> None:
        super().__init__()
        self.encoder = encoder
        self.temperature = temperature
        self.shuffle_keys = shuffle_keys

    def forward(self, im_q: torch.Tensor, im_k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits (N, N * world) / T with query i's positive in column rank * N + i, and those labels."""
        q = F.normalize(self.encoder(im_q), dim=1)  # (N, C)
        if self.shuffle_keys:
            # The key batch runs through BN in another order (and, in one process, other BN groups) than the
            # queries, as MoCo's shuffling BN; indexing keeps the gradient flowing back to the keys.
            perm = torch.randperm(im_k.shape[0], device=im_k.device)
            k = F.normalize(self.encoder(im_k[perm]), dim=1)[torch.argsort(perm)]
        else:
            k = F.normalize(self.encoder(im_k), dim=1)  # (N, C)
        # Several processes: the dictionary is the global batch, gathered with gradients.
        k = distributed.all_gather_with_grad(k)  # (N * world, C)
        logits = q.float() @ k.float().t() / self.temperature  # (N, N * world)
        labels = torch.arange(q.shape[0], device=q.device) + distributed.rank() * q.shape[0]
        return logits, labels


class MemoryBank(nn.Module):
    """InstDisc's memory bank around ``encoder``; needs the dataset index of every sample."""

    def __init__(self, encoder: nn.Module, *, dataset_size: int, dim: int = 128, num_negatives: int = 4096,
                 temperature: float = 0.07, bank_momentum: float = 0.5) -> None:
        super().__init__()
        self.encoder = encoder
        self.num_negatives = num_negatives  # K
        self.temperature = temperature
        self.bank_momentum = bank_momentum  # InstDisc: 0.5
        self.register_buffer("bank", F.normalize(torch.randn(dataset_size, dim), dim=1))  # (n, C)

    def sample_negatives(self, index: torch.Tensor) -> torch.Tensor:
        """K bank rows drawn uniformly (with replacement) from the rows not in this batch: no query meets its
        own positive among its negatives. One draw shared by the batch, as a (N, K, C) gather would not fit."""
        weights = torch.ones(self.bank.shape[0], device=self.bank.device)
        weights[index] = 0.0
        return torch.multinomial(weights, self.num_negatives, replacement=True)  # (K,)

    def forward(self, images: torch.Tensor, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Logits (N, 1+K) / T, labels (zeros) and the batch's features (N, C), detached, for ``update``."""
        q = F.normalize(self.encoder(images), dim=1).float()  # (N, C)
        positives = self.bank[index]  # (N, C), the stored features of these images
        negatives = self.bank[self.sample_negatives(index)]  # (K, C)
        l_pos = torch.einsum("nc,nc->n", q, positives).unsqueeze(-1)  # (N, 1)
        l_neg = q @ negatives.t()  # (N, K)
        logits = torch.cat([l_pos, l_neg], dim=1) / self.temperature
        labels = torch.zeros(q.shape[0], dtype=torch.long, device=q.device)
        return logits, labels, q.detach()

    @torch.no_grad()
    def update(self, features: torch.Tensor, index: torch.Tensor) -> None:
        """v_i <- normalise(m * v_i + (1 - m) * f_i) for the batch's rows (all ranks'), m = bank_momentum."""
        features, index = distributed.all_gather_cat(features), distributed.all_gather_cat(index)
        mixed = self.bank_momentum * self.bank[index] + (1.0 - self.bank_momentum) * features
        self.bank[index] = F.normalize(mixed, dim=1)
