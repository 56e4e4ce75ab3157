"""MAT-files as MATLAB writes them, for the dataset layouts that hold some (Flowers-102's labels and splits).

Apart from tests/layouts.py, which imports the transfer package (and with it pycocotools), so that moco_core's
tests collect without the transfer extras (the GPU machine has none: ``pytest -m gpu tests/moco_core`` there).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def mat_file(path: Path, arrays: dict[str, np.ndarray], *, compressed: bool = True) -> Path:
    """A level-5 MAT-file of 1xN double rows as MATLAB's ``save`` writes it (-v7: each variable zlib-compressed;
    -v6: not), names of up to 4 characters in a small element: the form of Flowers-102's ``.mat`` files."""
    import struct
    import zlib

    def element(kind: int, payload: bytes) -> bytes:
        if len(payload) <= 4:  # small data element: the count in the tag's upper half
            return struct.pack("<HH", kind, len(payload)) + payload.ljust(4, b"\0")
        return struct.pack("<II", kind, len(payload)) + payload + b"\0" * (-len(payload) % 8)

    header = b"MATLAB 5.0 MAT-file, Platform: GLNXA64, Created on: Thu Feb 19 00:00:00 2009".ljust(116)
    out = header + b"\0" * 8 + struct.pack("<H", 0x0100) + b"IM"
    for name, values in arrays.items():
        row = np.asarray(values, dtype="<f8").reshape(1, -1)
        body = (element(6, struct.pack("<II", 6, 0)) + element(5, struct.pack("<2i", *row.shape))
                + element(1, name.encode()) + element(9, row.tobytes(order="F")))
        matrix = struct.pack("<II", 14, len(body)) + body
        if compressed:
            matrix = zlib.compress(matrix)
            matrix = struct.pack("<II", 15, len(matrix)) + matrix  # miCOMPRESSED: not padded
        out += matrix
    path.write_bytes(out)
    return path
