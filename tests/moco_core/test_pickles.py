"""moco_core.pickles: the one unpickler of plain-data files (CIFAR batches, detectron2 weights, revisitop's
ground truth) builds what they hold at every protocol and calls nothing else."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from moco_core.pickles import RefusedGlobal, load_plain


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_plain_data_and_arrays_at_every_protocol(protocol: int) -> None:
    obj = {"names": ["a", "b"], "box": (1.5, 2), "ids": np.arange(3), "empty": np.array([], dtype=np.int64),
           "bytes": b"\x00\xff", "none": None}
    back = load_plain(pickle.dumps(obj, protocol=protocol))
    assert back.keys() == obj.keys() and back["names"] == obj["names"] and back["box"] == obj["box"]
    assert np.array_equal(back["ids"], obj["ids"]) and back["empty"].size == 0 and back["bytes"] == obj["bytes"]


class _Mkdir:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple:
        return (os.mkdir, (str(self.path),))


def test_any_other_global_is_refused_before_it_is_called(tmp_path: Path) -> None:
    with pytest.raises(RefusedGlobal, match=r"would call posix\.mkdir"):
        load_plain(pickle.dumps([_Mkdir(tmp_path / "ran")], protocol=2))
    assert not (tmp_path / "ran").exists()


def test_bytes_of_a_length_are_refused() -> None:
    """bytes(n) would allocate what the file names: only bytes(text, encoding) and bytes() are built."""
    evil = b"\x80\x02c__builtin__\nbytes\nJ\x00\xca\x9a;\x85R."  # bytes(10**9), protocol 2
    with pytest.raises(pickle.UnpicklingError, match="bytes of a given length"):
        load_plain(evil)
