"""Few-shot linear evaluation on cached features: k labelled images a class, drawn with recorded seeds, several
tries; the same logistic regression and sweep as the full protocol (:mod:`moco_core.frozen.logreg`).

A try draws k images of each class from the training features (all of a class that has fewer), with a generator
seeded by ``SeedSequence([seed, k, try])`` (the seed is recorded, so each draw can be made again); lambda is
chosen on the validation split as in the full protocol (only the training labels are few), the classifier is
fitted on the k-shot draw alone at that value and tested once. The result is the mean and the standard deviation
(n - 1) over the tries, with every try's score, seed and lambda. Multi-label data (VOC 2007) has no "k images a
class": it is not evaluated few-shot.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from moco_core.config import Check
from moco_core.frozen import logreg

# Draws of each k: ssl-transfer and the papers make 5 to 10, each a whole sweep of the L2 strengths (45 fits); a
# bound keeps a mistyped count from a run that never ends.
MAX_TRIES = 100


def fewshot_checks(shots: tuple[int, ...], tries: int, seed: int) -> list[Check]:
    """The checks of a few-shot section (``moco eval linear --shots``, ``moco eval transfer --shots``)."""
    return [(all(k >= 1 for k in shots), "fewshot.shots", f"must be >= 1, got {list(shots)}"),
            (len(set(shots)) == len(shots), "fewshot.shots", "names a value twice"),
            (tries >= 1, "fewshot.tries", f"must be >= 1, got {tries}"),
            (tries <= MAX_TRIES, "fewshot.tries", f"must be at most {MAX_TRIES} (each try is a whole sweep of the L2 "
             f"strengths; the papers make 5 to 10), got {tries}"),
            (seed >= 0, "fewshot.seed", f"must be >= 0, got {seed}")]


def shot_seed(seed: int, shots: int, attempt: int) -> int:
    """The recorded seed of one draw."""
    return int(np.random.SeedSequence([seed, shots, attempt]).generate_state(1)[0])


def draw_shots(labels: torch.Tensor, shots: int, seed: int) -> torch.Tensor:
    """Indices (sorted) of ``shots`` images of each class of ``labels`` (N,), drawn with ``seed``."""
    if shots < 1:
        raise ValueError(f"shots must be >= 1, got {shots}")
    rng = np.random.default_rng(seed)
    chosen = []
    for label in torch.unique(labels).tolist():
        index = torch.nonzero(labels == label).flatten().numpy()
        chosen += rng.choice(index, size=min(shots, len(index)), replace=False).tolist()
    return torch.tensor(sorted(chosen), dtype=torch.long)


def fewshot(train_x: torch.Tensor, train_y: torch.Tensor, val_x: torch.Tensor, val_y: torch.Tensor,
            test_x: torch.Tensor, test_y: torch.Tensor, *, shots: int, tries: int, seed: int, num_classes: int,
            score: Callable[[torch.Tensor, torch.Tensor], float], **solver: Any) -> dict[str, Any]:
    """``tries`` draws of ``shots`` a class; ``solver``: :func:`moco_core.frozen.logreg.sweep`'s options."""
    runs = []
    for attempt in range(tries):
        draw_seed = shot_seed(seed, shots, attempt)
        index = draw_shots(train_y, shots, draw_seed)
        path = logreg.sweep(train_x[index], train_y[index], val_x, val_y, num_classes=num_classes, score=score,
                            **solver)
        fit = path.fits[path.chosen]
        runs.append({"try": attempt, "seed": draw_seed, "images": len(index), "lambda": path.best_lambda,
                     "chosen_at_edge": path.at_edge, "val": path.scores[path.chosen],
                     "test": float(score(fit.scores(test_x), test_y))})
    mean, std = mean_std([r["test"] for r in runs])
    return {"shots": shots, "tries": tries, "mean": mean, "std": std, "runs": runs}


def mean_std(values: list[float]) -> tuple[float, float]:
    """The mean and the sample standard deviation (n - 1; 0 for one value) of the tries' scores."""
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
    return mean, std
