"""MAT-files as MATLAB writes them, for the dataset layouts that hold some (Flowers-102's labels and splits).

Apart from tests/layouts.py, which imports the transfer package (and with it pycocotools), so that moco_core's
tests collect without the transfer extras (the GPU machine has none: ``pytest -m gpu tests/moco_core`` there).
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np


def mat_file(path: Path, arrays: dict[str, np.ndarray], *, compressed: bool = True) -> Path:
    """A level-5 MAT-file of 1xN double rows as MATLAB's ``save`` writes it (-v7: each variable zlib-compressed;
    -v6: not), names of up to 4 characters in a small element: the form of Flowers-102's ``.mat`` files."""
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


def _header() -> bytes:
    return b"MATLAB 5.0 MAT-file, Platform: GLNXA64".ljust(116) + b"\0" * 8 + struct.pack("<H", 0x0100) + b"IM"


def _compressed(stream: bytes) -> bytes:
    return struct.pack("<II", 15, len(stream)) + stream  # miCOMPRESSED: not padded


def _zlib_of_zeros(prefix: bytes, zeros: int) -> bytes:
    """A zlib stream of ``prefix`` then ``zeros`` zero bytes (a multiple of 1 MiB), made without compressing them:
    after a full flush a compressor starts afresh, so every MiB of zeros deflates to the same block, repeated."""
    chunk = bytes(1 << 20)
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)  # raw deflate: the zlib header and checksum are added here
    head = deflate.compress(prefix) + deflate.flush(zlib.Z_FULL_FLUSH)
    block = deflate.compress(chunk) + deflate.flush(zlib.Z_FULL_FLUSH)
    checksum = zlib.adler32(prefix)
    for _ in range(zeros // len(chunk)):
        checksum = zlib.adler32(chunk, checksum)
    return b"\x78\xda" + head + block * (zeros // len(chunk)) + deflate.flush() + struct.pack(">I", checksum)


def mat_bomb(path: Path, name: str, inflated: int) -> Path:
    """A MAT-file whose one variable, a 1 x N double row of zeros, inflates to about ``inflated`` bytes (a
    multiple of 1 MiB): an miCOMPRESSED element holding another one (compressing the first level again is what
    makes a few KB of file claim gigabytes, the issue's 2.1 KB for 2.87 GB)."""
    count = inflated // 8
    body = (struct.pack("<II", 6, 8) + struct.pack("<II", 6, 0) + struct.pack("<II", 5, 8)
            + struct.pack("<2i", 1, count) + struct.pack("<II", 1, len(name)) + name.encode().ljust(8, b"\0")
            + struct.pack("<II", 9, 8 * count))  # a name of 5 to 8 characters
    matrix_tag = struct.pack("<II", 14, len(body) + 8 * count)
    inner = _compressed(_zlib_of_zeros(matrix_tag + body, 8 * count))
    path.write_bytes(_header() + _compressed(zlib.compress(inner, 9)))
    return path


def mat_nested(path: Path, name: str, depth: int) -> Path:
    """A MAT-file whose one small variable is wrapped in ``depth`` miCOMPRESSED elements, each holding the next
    (MATLAB writes one level; a reader that recurses per level runs out of stack)."""
    mat_file(path, {name: [1.0, 2.0]}, compressed=False)
    element = path.read_bytes()[128:]
    for _ in range(depth):
        element = _compressed(zlib.compress(element, 1))
    path.write_bytes(_header() + element)
    return path
