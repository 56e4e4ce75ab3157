"""The MAT-file reader against files written byte by byte here (level 5, compressed and not), Flowers-102's form."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from moco_core.data.matfile import MatFileError, read_mat
from tests.matfiles import mat_file


@pytest.mark.parametrize("compressed", [True, False])
def test_rows_of_doubles_read_back_with_their_names(tmp_path: Path, compressed: bool) -> None:
    path = mat_file(tmp_path / "setid.mat", {"trnid": [3, 1, 2], "x": [7.5], "tstid": list(range(1, 10))},
                    compressed=compressed)
    arrays = read_mat(path)
    assert sorted(arrays) == ["trnid", "tstid", "x"]
    assert arrays["trnid"].shape == (1, 3) and arrays["trnid"].tolist() == [[3.0, 1.0, 2.0]]
    assert arrays["x"].tolist() == [[7.5]]  # a one-letter name: MATLAB's small data element
    assert arrays["tstid"].reshape(-1).tolist() == list(range(1, 10))


def test_a_matrix_is_read_column_major_and_big_endian_files_too(tmp_path: Path) -> None:
    """A 2x3 uint8 matrix [[1, 2, 3], [4, 5, 6]] stored column by column (1 4 2 5 3 6), in a big-endian file,
    written here field by field from the format's description."""
    def element(kind: int, payload: bytes) -> bytes:
        return struct.pack(">II", kind, len(payload)) + payload + b"\0" * (-len(payload) % 8)

    body = (element(6, struct.pack(">II", 9, 0)) + element(5, struct.pack(">2i", 2, 3)) + element(1, b"grid")
            + element(2, bytes([1, 4, 2, 5, 3, 6])))
    data = b"MATLAB 5.0 MAT-file".ljust(116) + b"\0" * 8 + struct.pack(">H", 0x0100) + b"MI"
    path = tmp_path / "grid.mat"
    path.write_bytes(data + struct.pack(">II", 14, len(body)) + body)
    assert read_mat(path)["grid"].tolist() == [[1, 2, 3], [4, 5, 6]]


@pytest.mark.parametrize("content, expected", [
    (b"not a mat file at all" * 10, "not a MATLAB MAT-file"),
    (b"MATLAB 7.3 MAT-file, HDF5".ljust(128, b" "), "-v7.3 (HDF5)"),
    (b"MATLAB 5.0 MAT-file".ljust(126) + b"XX", "byte-order mark"),
    (b"MATLAB 5.0 MAT-file".ljust(126) + b"IM" + struct.pack("<II", 14, 400) + b"\0" * 16, "damaged"),
])
def test_what_is_not_read_says_why_in_one_line(tmp_path: Path, content: bytes, expected: str) -> None:
    path = tmp_path / "bad.mat"
    path.write_bytes(content)
    with pytest.raises(MatFileError, match="bad.mat") as err:
        read_mat(path)
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_matches_scipy_where_it_is_installed(tmp_path: Path) -> None:
    """scipy is not a dependency; where it is installed, its writer's files read the same here."""
    sio = pytest.importorskip("scipy.io")
    for compress in (True, False):
        path = tmp_path / f"labels_{compress}.mat"
        sio.savemat(path, {"labels": np.array([[1, 2, 102]], dtype=np.uint8), "w": np.eye(2)},
                    do_compression=compress)
        arrays = read_mat(path)
        assert arrays["labels"].tolist() == [[1, 2, 102]] and arrays["w"].tolist() == [[1, 0], [0, 1]]
