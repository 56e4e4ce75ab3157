"""NumPy names the official evaluators still call and NumPy has removed, put back only while they run.

The latest releases on the package index: lvis 0.5.3 (2020) casts with ``np.float`` in ``LVISEval.accumulate``
(an alias of the builtin ``float``, removed in NumPy 1.24); cityscapesscripts 2.3.0 masks void pixels with
``np.in1d`` in ``evalInstanceLevelSemanticLabeling.assignGt2Preds`` (removed in NumPy 2.4; ``np.isin`` of the
flattened array is what it returned). Each name is set only when NumPy lacks it, to what it was, and removed
afterwards, so the evaluators compute what they compute under the NumPy they were written for.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np


def _in1d(ar1: Any, ar2: Any, assume_unique: bool = False, invert: bool = False) -> np.ndarray:
    return np.isin(np.ravel(ar1), ar2, assume_unique=assume_unique, invert=invert)


REMOVED: dict[str, Any] = {"float": float, "in1d": _in1d}


@contextlib.contextmanager
def legacy_numpy(*names: str) -> Iterator[None]:
    """``np.<name>`` for each of ``names`` (keys of :data:`REMOVED`) while the block runs, where NumPy lacks it."""
    added = [name for name in names if name not in np.__dict__]
    for name in added:
        setattr(np, name, REMOVED[name])
    try:
        yield
    finally:
        for name in added:
            delattr(np, name)
