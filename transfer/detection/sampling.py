"""Repeat-factor sampling (LVIS, arXiv 1908.03195 appendix B.2; detectron2's ``RepeatFactorTrainingSampler``).

A category c seen in a fraction f_c of the training images has the repeat factor r_c = max(1, sqrt(t / f_c))
(t: ``data.repeat_threshold``, 0.001 in detectron2's LVIS configs); an image's factor is the largest of its
categories' (1 for an image without annotations). Each pass over the data, an image with factor r appears
floor(r) times, plus once more with probability r - floor(r) (stochastic rounding: r times on average).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from moco_core.run.preemption import ResumableSampler


def repeat_factors(dicts: Sequence[dict[str, Any]], threshold: float) -> torch.Tensor:
    """(N,) float repeat factors of the images ``dicts`` (dataset dicts with ``annotations``), as detectron2's
    ``repeat_factors_from_category_frequency`` with ``sqrt=True`` computes them."""
    per_image = [{a["category_id"] for a in d["annotations"]} for d in dicts]
    images_with = Counter(c for cats in per_image for c in cats)  # category -> images containing it
    category_factor = {c: max(1.0, math.sqrt(threshold / (n / len(dicts)))) for c, n in images_with.items()}
    return torch.tensor([max((category_factor[c] for c in cats), default=1.0) for cats in per_image],
                        dtype=torch.float64)


class RepeatFactorSampler(ResumableSampler):
    """A pass is every image index repeated as its factor says (stochastic rounding drawn anew each pass), shuffled;
    process ``rank`` takes every ``num_replicas``-th index of the pass cut to a multiple of ``num_replicas``.

    The pass is a function of (seed, epoch) only, so a resumed run sees what an uninterrupted one would; its length
    varies from pass to pass (``len`` is the current epoch's, after ``set_epoch``).
    Deviation from detectron2: its sampler is one endless stream seeded once and split among processes by
    position; ours is made of passes, as our other training samplers are.
    """

    def __init__(self, factors: torch.Tensor, *, num_replicas: int = 1, rank: int = 0, seed: int = 0) -> None:
        super().__init__(range(len(factors)), num_replicas=num_replicas, rank=rank, shuffle=True, seed=seed,
                         drop_last=True)
        self.whole = torch.floor(factors)
        self.fraction = factors - self.whole
        self._cached: tuple[int, list[int]] | None = None

    def indices(self, epoch: int) -> list[int]:
        """This process's share of pass ``epoch``."""
        if self._cached is None or self._cached[0] != epoch:
            generator = torch.Generator().manual_seed(self.seed + epoch)
            rounded = self.whole + (torch.rand(len(self.fraction), generator=generator, dtype=torch.float64)
                                    < self.fraction)
            repeated = torch.repeat_interleave(torch.arange(len(rounded)), rounded.long())
            shuffled = repeated[torch.randperm(len(repeated), generator=generator)]
            usable = len(shuffled) // self.num_replicas * self.num_replicas
            self._cached = (epoch, shuffled[self.rank:usable:self.num_replicas].tolist())
        return self._cached[1]

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices(self.epoch)[self.start:])

    def __len__(self) -> int:
        return len(self.indices(self.epoch)) - self.start
