"""Files a user names (lists, annotation files, records, split files, configs), read the one way that cannot hang,
exhaust memory or leave the dataset.

- :func:`regular_file`: the path must be a regular file (after links): a FIFO would wait for ever, ``/dev/zero``
  would grow without end, a directory is a mistake. Checked before anything opens it.
- :func:`read_bytes` / :func:`read_text`: at most ``limit`` bytes (and for a list file at most ``lines`` lines); a
  larger file is refused, never read whole.
- :func:`parse_json` / :func:`read_json` / :func:`parse_json_lines`: JSON whose numbers fit what Python, NumPy and
  torch hold (an integer of at most 64 bits, a finite float where the text wrote a finite one): Python's own parser
  turns a 5,000-digit integer into ``ValueError: Exceeds the limit (4300 digits)`` and a 400-digit one into an int
  that overflows at the first ``float()``; nesting too deep for the parser is malformed too.
- :func:`inside`: a file name read from a file (``file_name`` of an annotation, a line of a split list) joined to
  its folder, refused when it is absolute or climbs out with ``..``.
- :func:`within` / :func:`all_within`: the same for symbolic links: a file or folder of a dataset whose real path
  leaves the dataset's root is refused, unless ``MOCO_FOLLOW_LINKS=1`` (:data:`FOLLOW_LINKS`) says to follow
  links wherever they point. The root is the folder :func:`inside` checks names against (``--data``, or each
  dataset's own folder), so a dataset linked in whole is read, a link inside it to another of its folders too.

Each raises ``error`` (a :class:`moco_core.errors.UserError` subclass; UserError itself by default) with one line
that names ``what`` was read, so every caller keeps the error class its command already reports. Nothing here
imports torch: ``reports`` reads records through it.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO, NoReturn

from moco_core.errors import UserError

MiB = 1 << 20
# Default limits by kind of file. Annotation files are large (COCO's instances_train2017.json is 448 MiB, LVIS
# v1's train about 1 GiB); lists, records, split files and configs are small.
ANNOTATION_LIMIT = 4096 * MiB
LIST_LIMIT = 256 * MiB
RECORD_LIMIT = 64 * MiB
LINES_LIMIT = 1 << 21  # lines of a list file: 2,097,152 (ImageNet's train split, the largest listed, has 1.28 M)
VALUES_LIMIT = 4 * LINES_LIMIT  # values of a JSON list file (a split file's: 3 an image, its name and label a pair)
CHUNK = MiB  # bytes read at a time where a file is scanned before it is read whole
CONFIG_LIMIT = 16 * MiB  # a YAML config (the presets are a few KiB; expanding aliases is bounded apart)
INT_BITS = 64  # an integer literal must fit a signed 64-bit integer (torch.long, numpy.int64)
FOLLOW_LINKS = "MOCO_FOLLOW_LINKS"  # "1": links in a dataset are followed out of its root (README, "Pretraining")
INT_LIMIT = 1 << (INT_BITS - 1)  # such an integer is in [-INT_LIMIT, INT_LIMIT)


def int_problem(value: int) -> str | None:
    """Why ``value`` is not an integer of at most :data:`INT_BITS` bits (the bound every record is read with, so a
    config, a list or a record holding it is refused where it enters, not when the report reads what a run wrote),
    or None."""
    if -INT_LIMIT <= value < INT_LIMIT:
        return None
    shown = str(value) if value.bit_length() < 256 else f"an integer of {value.bit_length()} bits"
    return f"{shown} is beyond {INT_BITS} bits (at most {INT_LIMIT - 1})"


def regular_file(path: str | os.PathLike[str], *, what: str = "file", error: type[UserError] = UserError) -> Path:
    """``path`` if it is a regular file (links followed); else ``error``: missing, a directory, a FIFO, a device."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise error(f"{what} not found: {path}") from None
    except OSError as err:
        raise error(f"cannot read {what} {path}: {err.strerror or err}") from None
    except ValueError:  # os.stat's "embedded null byte": no file's name holds one
        raise error(f"{what} {str(path)!r} is not a file name (it holds a NUL character)") from None
    if not stat.S_ISREG(mode):
        kind = ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else
                "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode)
                else "not a regular file")
        raise error(f"{what} {path} is {kind}, not a regular file")
    return path


def read_bytes(path: str | os.PathLike[str], *, limit: int, what: str = "file",
               error: type[UserError] = UserError, lines: int | None = None) -> bytes:
    """The whole of a regular file of at most ``limit`` bytes (:func:`regular_file`); a larger one is refused
    after reading ``limit + 1`` bytes, never more (its size on disk may lie: a file that grows as it is read).

    ``lines``: a list file's bound on its lines (LINES_LIMIT): a longer one is refused after counting them a chunk
    at a time, before it is read whole, since every line a reader splits off costs it some 60 bytes more than the
    file's own (a 10^7-line list took 3.45 GB)."""
    path = regular_file(path, what=what, error=error)
    try:
        with path.open("rb") as f:
            counted = _count_lines(f, limit, lines) if lines is not None else 0
            data = f.read(limit + 1) if lines is None or counted <= lines else b""
    except OSError as err:
        raise error(f"cannot read {what} {path}: {err.strerror or err}") from None
    if len(data) > limit:
        raise error(f"{what} {path} is larger than {_size(limit)}: not read (is it the file you meant?)")
    if lines is not None and max(counted, data.count(b"\n")) > lines:  # counted again: the file may have grown
        raise error(f"{what} {path} has more than {lines:,} lines: not read (a list file holds at most {lines:,} "
                    f"names; is it the file you meant?)")
    return data


def _count_lines(f: BinaryIO, limit: int, lines: int) -> int:
    """Line breaks in the first ``limit + 1`` bytes of ``f``, counted until there are more than ``lines``; ``f``
    rewound. Memory: one chunk."""
    counted = size = 0
    while counted <= lines and size <= limit and (chunk := f.read(min(CHUNK, limit + 1 - size))):
        counted += chunk.count(b"\n")
        size += len(chunk)
    f.seek(0)
    return counted


def read_text(path: str | os.PathLike[str], *, limit: int, what: str = "file",
              error: type[UserError] = UserError, lines: int | None = None) -> str:
    """:func:`read_bytes` decoded as UTF-8 (a byte-order mark allowed); undecodable bytes are ``error``."""
    data = read_bytes(path, limit=limit, what=what, error=error, lines=lines)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise error(f"{what} {path} is not UTF-8 text (byte {err.start}: {data[err.start:err.start + 1]!r})") \
            from None


class _NumberError(ValueError):
    pass


def _parse_int(text: str) -> int:
    # Digits are counted before int() converts: Python's own limit (4300 digits) raises deep in the parser, and a
    # long integer under it overflows later, at the first float() of it.
    if len(text.lstrip("-")) > 20:
        raise _NumberError(f"integer {text[:24]}... ({len(text)} characters) beyond {INT_BITS} bits")
    value = int(text)
    if int_problem(value) is not None:
        raise _NumberError(f"integer {text} beyond {INT_BITS} bits")
    return value


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # a finite literal too large for a double, not the NaN/Infinity constants
        raise _NumberError(f"number {text[:24]}{'...' if len(text) > 24 else ''} beyond the range of a float")
    return value


# Text whose digit runs are all at most 18 long and whose exponents have at most 2 digits holds no number beyond the
# limits (its integers are below 10^18 < 2^63, its floats below 10^117): it is parsed without the checks above,
# which cost a Python call a number (a report reads 10^7 numbers of per-image outcomes; issue 55).
_WIDE_NUMBER = re.compile(r"[0-9]{19}|[eE][+-]?[0-9]{3}")


def parse_json(text: str | bytes, *, what: str = "JSON", error: type[UserError] = UserError) -> Any:
    """JSON ``text`` parsed, its numbers checked (see the module docstring); malformed text is ``error``, whose
    message is ``"{what}: malformed JSON (why)"`` (``"malformed JSON (why)"`` when ``what`` is empty)."""
    said = f"{what}: malformed JSON" if what else "malformed JSON"
    try:
        if isinstance(text, bytes):  # decoded as json.loads decodes bytes (UTF-8, -16 or -32), to be searched
            text = text.decode(json.detect_encoding(text), "surrogatepass")
        if _WIDE_NUMBER.search(text) is None:
            return json.loads(text)
        return json.loads(text, parse_int=_parse_int, parse_float=_parse_float)
    except _NumberError as err:
        raise error(f"{said} ({err})") from None
    except json.JSONDecodeError as err:
        raise error(f"{said} ({err.msg}: line {err.lineno} column {err.colno})") from None
    except UnicodeDecodeError as err:
        raise error(f"{said} (not UTF-8 at byte {err.start})") from None
    except RecursionError:
        raise error(f"{said} (nested too deep)") from None
    except ValueError as err:  # anything else the parser or int() refuses
        raise error(f"{said} ({err})") from None


def parse_json_lines(text: str | bytes) -> tuple[list[Any], int]:
    """The values of a JSON-lines text (``metrics.jsonl``: one JSON value a line; blank lines skipped), and how
    many lines were malformed (:func:`parse_json`) and left out: a log a killed run cut mid-line, or one edited by
    hand, is read for what it holds. Bytes are decoded as UTF-8, an undecodable byte spoiling its line only."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    values, malformed = [], 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            values.append(parse_json(line, what=""))
        except UserError:
            malformed += 1
    return values, malformed


def read_json(path: str | os.PathLike[str], *, limit: int = RECORD_LIMIT, what: str = "JSON file",
              error: type[UserError] = UserError, values: int | None = None) -> Any:
    """A JSON file (:func:`read_bytes`, then :func:`parse_json`), the error naming the path. ``values``: a JSON
    list file's bound on the values it holds (VALUES_LIMIT), checked before parsing by its commas (one fewer than
    its values, or more: a comma in a string counts too), since parsed values cost 15 times their text."""
    data = read_bytes(path, limit=limit, what=what, error=error)
    if values is not None and data.count(b",") >= values:
        raise error(f"{what} {path} holds more than {values:,} values: not parsed (a list file holds at most "
                    f"{LINES_LIMIT:,} names; is it the file you meant?)")
    return parse_json(data, what=f"{path}", error=error)


def inside(root: str | os.PathLike[str], name: str, *, what: str = "file name",
           error: type[UserError] = UserError) -> Path:
    """``root / name`` for a relative ``name`` that stays under ``root``; an absolute name, one that climbs out
    with ``..``, or one holding a NUL byte is ``error``. Only the name is checked: where links take it is
    :func:`within`'s and :func:`all_within`'s."""
    if not isinstance(name, str) or not name or "\x00" in name:
        raise error(f"{what} {name!r} is not a file name")
    normal = os.path.normpath(name)
    if os.path.isabs(name) or normal == ".." or normal.startswith(".." + os.sep):
        raise error(f"{what} {name!r} leaves {root} (names are relative to it)")
    return Path(root) / normal


def follow_links() -> bool:
    """Whether ``MOCO_FOLLOW_LINKS`` is set (not empty, not 0): links out of a dataset's root are followed."""
    return os.environ.get(FOLLOW_LINKS, "").strip() not in ("", "0")


def within(root: str | os.PathLike[str], path: str | os.PathLike[str], *, what: str = "dataset file",
           error: type[UserError] = UserError) -> None:
    """``error`` when the real path of ``path`` (a file or folder of the dataset at ``root``) leaves ``root``'s
    real path, naming the link that takes it out (:func:`follow_links` lifts it). One ``realpath``: for a path
    known to be a link, or a folder; many files are :func:`all_within`'s."""
    if not follow_links():
        real_root = os.path.realpath(root)
        if _leaves(real_root, os.path.realpath(path)):
            _refuse(root, real_root, path, what, error)


def all_within(root: str | os.PathLike[str], paths: Iterable[str | os.PathLike[str]], *,
               what: str = "dataset file", error: type[UserError] = UserError) -> None:
    """:func:`within` for every path of ``paths``, at the cost of one ``realpath`` and one listing a folder they
    are in (ImageNet's 1.28M files: 1,000 of each), a file's own ``realpath`` only where the listing says it is a
    link: a folder inside the root holds, besides its links, only what is inside."""
    if follow_links():
        return
    real_root = os.path.realpath(root)
    links: dict[str, frozenset[str]] = {}  # folder -> the names of its entries that are links
    for path in paths:
        folder, name = os.path.split(os.fspath(path))
        if folder not in links:
            if _leaves(real_root, os.path.realpath(folder)):
                _refuse(root, real_root, path, what, error)
            links[folder] = _links_in(folder)
        if name in links[folder] and _leaves(real_root, os.path.realpath(path)):
            _refuse(root, real_root, path, what, error)


def _links_in(folder: str) -> frozenset[str]:
    try:
        with os.scandir(folder or ".") as entries:
            return frozenset(e.name for e in entries if e.is_symlink())
    except OSError:  # missing or unreadable: the reader says so where it opens the files
        return frozenset()


def _leaves(real_root: str, real: str) -> bool:
    return real != real_root and not real.startswith(real_root.rstrip(os.sep) + os.sep)


def _refuse(root: str | os.PathLike[str], real_root: str, path: str | os.PathLike[str], what: str,
            error: type[UserError]) -> NoReturn:
    """``error`` naming the first link below ``root`` on ``path`` that leads out, and where it points."""
    link, target = os.fspath(path), os.path.realpath(path)
    parts = Path(os.path.relpath(path, root)).parts
    for depth in range(1, len(parts) + 1):  # the link that takes it out: none above root (that is the user's)
        prefix = os.path.join(root, *parts[:depth])
        if ".." not in parts[:depth] and os.path.islink(prefix) and _leaves(real_root, os.path.realpath(prefix)):
            link, target = prefix, os.path.realpath(prefix)
            break
    named = f"{what} {link}" if link == os.fspath(path) else f"{what} {os.fspath(path)}: {link}"
    raise error(f"{named} is a link to {target}, outside the dataset's root {root}: not read (links out of a "
                f"dataset are followed with {FOLLOW_LINKS}=1)")


def _size(limit: int) -> str:
    return f"{limit // MiB} MiB" if limit >= MiB else f"{limit} bytes"
