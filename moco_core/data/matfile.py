"""Numeric arrays of a MATLAB level-5 MAT-file (what ``save`` writes up to -v7, compressed or not), read without
scipy: enough for the label and split files datasets ship (Oxford Flowers-102's ``imagelabels.mat``, ``setid.mat``).

The format (MathWorks, "MAT-File Format", level 5): a 128-byte header whose last two bytes, "IM" or "MI", give the
byte order; then data elements, each an 8-byte tag (type, byte count) or a "small" 4-byte tag (count in the upper 16
bits) and its data, padded to 8 bytes. ``miCOMPRESSED`` (15) wraps one zlib-compressed element; ``miMATRIX`` (14)
holds the array flags, the dimensions, the name and the real part. Cell arrays, structs, sparse and complex arrays
are not read: :func:`read_mat` names them as skipped. -v7.3 files are HDF5, which this does not read.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np

from moco_core.errors import UserError
from moco_core.user_files import LIST_LIMIT, read_bytes

MI_MATRIX, MI_COMPRESSED = 14, 15
NUMERIC = {1: "i1", 2: "u1", 3: "i2", 4: "u2", 5: "i4", 6: "u4", 7: "f4", 9: "f8", 12: "i8", 13: "u8"}
NUMERIC_CLASSES = set(range(6, 16))  # mxDOUBLE_CLASS .. mxUINT64_CLASS
COMPLEX_FLAG = 0x0800


class MatFileError(UserError):
    """A file that is not a level-5 MAT-file this reader understands."""


def read_mat(path: Path) -> dict[str, np.ndarray]:
    """Every real numeric array of ``path`` by its name, shaped as MATLAB stores it (column-major)."""
    data = read_bytes(path, limit=LIST_LIMIT, what="MAT-file", error=MatFileError)
    if len(data) < 128 or data[:6] != b"MATLAB":
        raise MatFileError(f"{path}: not a MATLAB MAT-file")
    if b"MATLAB 7.3" in data[:116]:
        raise MatFileError(f"{path}: a MATLAB -v7.3 (HDF5) file; save it with -v7 to read it here")
    order = {b"IM": "<", b"MI": ">"}.get(data[126:128])
    if order is None:
        raise MatFileError(f"{path}: not a level-5 MAT-file (byte-order mark {data[126:128]!r})")
    arrays: dict[str, np.ndarray] = {}
    try:
        _elements(data, 128, order, arrays)
    except (struct.error, zlib.error, ValueError, IndexError) as err:
        raise MatFileError(f"{path}: damaged MAT-file ({err})") from None
    return arrays


def _tag(data: bytes, pos: int, order: str) -> tuple[int, int, int]:
    """(type, byte count, where the data starts) of the element at ``pos``."""
    first, second = struct.unpack_from(order + "II", data, pos)
    if first >> 16:  # small element: count in the upper half, data in the tag's second word
        return first & 0xFFFF, first >> 16, pos + 4
    return first, second, pos + 8


def _elements(data: bytes, pos: int, order: str, arrays: dict[str, np.ndarray]) -> None:
    while pos + 8 <= len(data):
        kind, count, start = _tag(data, pos, order)
        body = data[start:start + count]
        if len(body) < count:
            raise ValueError(f"an element of {count} bytes runs past the end")
        if kind == MI_COMPRESSED:
            _elements(zlib.decompress(body), 0, order, arrays)
            pos = start + count  # compressed elements are not padded
            continue
        if kind == MI_MATRIX:
            named = _matrix(body, order)
            if named is not None:
                arrays[named[0]] = named[1]
        pos = start + count
        pos += -pos % 8  # every other element ends on an 8-byte boundary


def _matrix(body: bytes, order: str) -> tuple[str, np.ndarray] | None:
    """(name, array) of an miMATRIX element's contents; None for what is not a real numeric array."""
    parts = []
    pos = 0
    while pos + 8 <= len(body) and len(parts) < 4:
        kind, count, start = _tag(body, pos, order)
        parts.append((kind, body[start:start + count]))
        pos = start + count
        pos += -pos % 8
    if len(parts) < 4:
        return None
    (_, flags), (_, dims), (_, name), (kind, real) = parts
    flag_word = struct.unpack_from(order + "I", flags)[0]
    if flag_word & 0xFF not in NUMERIC_CLASSES or flag_word & COMPLEX_FLAG or kind not in NUMERIC:
        return None
    shape = struct.unpack(order + f"{len(dims) // 4}i", dims)
    values = np.frombuffer(real, dtype=np.dtype(order + NUMERIC[kind]))
    return name.decode("ascii", "replace"), values.reshape(shape, order="F")
