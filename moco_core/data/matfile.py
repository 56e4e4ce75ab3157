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
from moco_core.user_files import LIST_LIMIT, MiB, read_bytes

MI_MATRIX, MI_COMPRESSED = 14, 15
NUMERIC = {1: "i1", 2: "u1", 3: "i2", 4: "u2", 5: "i4", 6: "u4", 7: "f4", 9: "f8", 12: "i8", 13: "u8"}
NUMERIC_CLASSES = set(range(6, 16))  # mxDOUBLE_CLASS .. mxUINT64_CLASS
COMPLEX_FLAG = 0x0800


class MatFileError(UserError):
    """A file that is not a level-5 MAT-file this reader understands."""


INFLATE_LIMIT = 64 * MiB  # bytes a file's compressed elements may inflate to, together (Flowers-102's: 70 KB)


def read_mat(path: Path) -> dict[str, np.ndarray]:
    """Every real numeric array of ``path`` by its name, shaped as MATLAB stores it (column-major)."""
    return parse_mat(read_bytes(path, limit=LIST_LIMIT, what="MAT-file", error=MatFileError), path)


def parse_mat(data: bytes, path: Path) -> dict[str, np.ndarray]:
    """:func:`read_mat` of a file's ``data``, already read. A reader that hands the file to scipy calls it first:
    what scipy would inflate is then bounded (:func:`_inflate`), as it is here."""
    if len(data) < 128 or data[:6] != b"MATLAB":
        raise MatFileError(f"{path}: not a MATLAB MAT-file")
    if b"MATLAB 7.3" in data[:116]:
        raise MatFileError(f"{path}: a MATLAB -v7.3 (HDF5) file; save it with -v7 to read it here")
    order = {b"IM": "<", b"MI": ">"}.get(data[126:128])
    if order is None:
        raise MatFileError(f"{path}: not a level-5 MAT-file (byte-order mark {data[126:128]!r})")
    try:
        return _elements(memoryview(data), order, path)
    except (struct.error, zlib.error, ValueError, IndexError) as err:
        raise MatFileError(f"{path}: damaged MAT-file ({err})") from None


def _tag(data: memoryview, pos: int, order: str) -> tuple[int, int, int]:
    """(type, byte count, where the data starts) of the element at ``pos``."""
    first, second = struct.unpack_from(order + "II", data, pos)
    if first >> 16:  # small element: count in the upper half, data in the tag's second word
        return first & 0xFFFF, first >> 16, pos + 4
    return first, second, pos + 8


def _elements(data: memoryview, order: str, path: Path) -> dict[str, np.ndarray]:
    """The arrays of the elements from byte 128 on. Walked with a stack, not by recursion: a compressed element may
    hold another, thousands deep (Python's recursion limit), and every level's inflated bytes count against one
    budget, INFLATE_LIMIT, so nesting cannot multiply it."""
    arrays: dict[str, np.ndarray] = {}
    stack, room = [(data, 128)], INFLATE_LIMIT
    while stack:
        buffer, pos = stack.pop()
        if pos + 8 > len(buffer):
            continue
        kind, count, start = _tag(buffer, pos, order)
        body = buffer[start:start + count]
        if len(body) < count:
            raise ValueError(f"an element of {count} bytes runs past the end")
        if kind == MI_COMPRESSED:
            inner = _inflate(body, order, room, path)
            room -= len(inner)
            stack += [(buffer, start + count), (memoryview(inner), 0)]  # compressed elements are not padded
            continue
        if kind == MI_MATRIX:
            named = _matrix(body, order)
            if named is not None:
                arrays[named[0]] = named[1]
        end = start + count
        stack.append((buffer, end + -end % 8))  # every other element ends on an 8-byte boundary
    return arrays


def _inflate(body: memoryview, order: str, room: int, path: Path) -> bytes:
    """The element an miCOMPRESSED ``body`` holds: its tag inflated first, then no more than the byte count the
    tag declares, which must fit ``room`` (what is left of INFLATE_LIMIT). A refusal names the file, the size
    claimed and the limit; zlib stream bytes past the declared element are not inflated."""
    stream = zlib.decompressobj()
    head = stream.decompress(body, 8)
    if len(head) < 8:
        raise ValueError("a compressed element holds no element")
    kind, count, start = _tag(memoryview(head), 0, order)
    size = start + count
    if size > room:
        raise MatFileError(f"{path}: a compressed element of {len(body)} bytes claims {size} bytes inflated (type "
                           f"{kind}), beyond what is left of the {INFLATE_LIMIT // MiB} MiB a MAT-file may inflate "
                           f"to (Flowers-102's inflate to 70 KB)")
    rest = stream.decompress(stream.unconsumed_tail, size - 8) if size > 8 else b""
    if len(head) + len(rest) < size:
        raise ValueError(f"a compressed element declares {size} bytes but inflates to {len(head) + len(rest)}")
    return head + rest


def _matrix(body: memoryview, order: str) -> tuple[str, np.ndarray] | None:
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
    return bytes(name).decode("ascii", "replace"), values.reshape(shape, order="F")
