"""Pickles read without running anything: the one unpickler of the suite for files that hold plain data.

A pickle is a program: unpickling calls whatever global it names (``os.system``, ``builtins.eval``). The data
files this suite reads as pickles hold only dicts, lists, tuples, strings, numbers and numpy arrays: CIFAR's python
batches, detectron2's ``.pkl`` weights, revisitop's ``gnd_<dataset>.pkl`` ground truth. :class:`PlainUnpickler`
builds those (the containers and scalars need no global at all) and resolves only the globals numpy's arrays and
protocol-2 bytes are written with; any other global stops the load with :class:`RefusedGlobal` before it is
imported, let alone called. Torch-free.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

import numpy as np


def _bytes(*args: Any) -> bytes:
    """``bytes(text, encoding)`` or ``bytes()``; a length (``bytes(10**12)``) is refused."""
    if any(isinstance(arg, int) for arg in args):
        raise pickle.UnpicklingError("refused: bytes of a given length")
    return bytes(*args)


def _numpy_globals() -> dict[tuple[str, str], Any]:
    """The only globals a pickle of numpy arrays needs, under the module names numpy 1 and 2 write."""
    try:
        from numpy._core import multiarray, numeric
    except ImportError:  # numpy < 2
        from numpy.core import multiarray, numeric  # type: ignore[no-redef]
    import _codecs
    import collections

    allowed: dict[tuple[str, str], Any] = {
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("_codecs", "encode"): _codecs.encode,  # protocol-2 pickles (CIFAR, old detectron2 files) store bytes so
        ("collections", "OrderedDict"): collections.OrderedDict,
        # Python 3 writes empty bytes (an empty array's data) at protocol 2 as bytes(): built here without the
        # bytes(n) form, which would allocate n bytes a file could name
        ("__builtin__", "bytes"): _bytes, ("builtins", "bytes"): _bytes,
    }
    for package in ("numpy.core", "numpy._core"):
        allowed[(f"{package}.multiarray", "_reconstruct")] = multiarray._reconstruct
        allowed[(f"{package}.multiarray", "scalar")] = multiarray.scalar
        allowed[(f"{package}.numeric", "_frombuffer")] = numeric._frombuffer
    return allowed


class RefusedGlobal(pickle.UnpicklingError):
    """The pickle names a global outside the allow-list; ``qualname`` is it (``posix.system``). Nothing was
    called: the load stopped when the name was read."""

    def __init__(self, qualname: str) -> None:
        super().__init__(f"refused: loading it would call {qualname}")
        self.qualname = qualname


class PlainUnpickler(pickle.Unpickler):
    """Builds dicts, lists, tuples, strings, numbers and numpy arrays; refuses every other global."""

    _allowed = _numpy_globals()

    def find_class(self, module: str, name: str) -> Any:
        found = self._allowed.get((module, name))
        if found is None:
            raise RefusedGlobal(f"{module}.{name}")
        return found


def load_plain(data: bytes) -> Any:
    """The object pickled in ``data`` (Python 2 strings read as latin-1, as numpy's own loader does), built by
    :class:`PlainUnpickler`. Raises :class:`RefusedGlobal` for a hostile file, and what ``pickle`` raises for a
    damaged one (``UnpicklingError``, ``EOFError``, ``ValueError`` ...): the caller words both in one line."""
    return PlainUnpickler(io.BytesIO(data), encoding="latin1").load()


# What unpickling a damaged file can raise besides RefusedGlobal (a truncated stream, a bad opcode argument, an
# array whose state does not fit its shape): the callers catch these to say "not a readable pickle".
DAMAGED = (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError,
           OverflowError, MemoryError)
