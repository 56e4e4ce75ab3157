"""Sets of files written together, all or none: a report's report.md, .csv, .tex and .html.

:func:`write_set` writes every file of the set to a temporary name beside its target and syncs it; only when all
are written does it rename them over their targets. A failed write (a full disk, a quota, a file-size limit)
deletes the temporary files and leaves every target as it was, so a reader never meets a truncated file or a
new report.md beside an old report.csv. The renames themselves need no space; should one still fail, the
renames done are undone from hard links of the previous files taken before the first one.

A checkpoint is one file and has :func:`moco_core.checkpoint.write_atomic`, which fills its temporary file
with :func:`fill_synced`, as :func:`write_set` does; this module imports no torch (``reports`` uses it).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import BinaryIO


def write_set(directory: Path, files: Mapping[str, bytes], *, remove: Iterable[str] = ()) -> None:
    """Write ``files`` (name in ``directory`` -> content) and delete the files named in ``remove``, as one change:
    after an OSError (raised again) the directory holds what it held before, but for any folder made for it."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    temporary: dict[str, Path] = {}
    try:
        for name, data in files.items():
            temporary[name] = _written(directory, name, data)
    except BaseException:
        for path in temporary.values():
            path.unlink(missing_ok=True)
        raise
    _commit(directory, temporary, [n for n in remove if n not in files])


def _written(directory: Path, name: str, data: bytes) -> Path:
    """``data`` in a synced temporary file beside ``directory / name``, with an ordinary file's mode."""
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
    try:
        fill_synced(fd, tmp, lambda f: f.write(data))
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def fill_synced(fd: int, tmp: str, write: Callable[[BinaryIO], object]) -> None:
    """A temporary file ``mkstemp`` made (``fd``, ``tmp``) given an ordinary file's mode (mkstemp makes it
    private), ``write`` into it, and flushed to disk: what goes before the rename of an atomic write."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    with os.fdopen(fd, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())


def _commit(directory: Path, temporary: dict[str, Path], remove: list[str]) -> None:
    """Rename each temporary file over its target and delete ``remove``; undone as a whole if any step fails."""
    token = secrets.token_hex(4)
    kept: dict[str, Path] = {}  # name -> the previous file, linked (or, where links fail, moved) aside
    changed: list[str] = []
    try:
        for name in [*temporary, *remove]:
            target = directory / name
            if not os.path.lexists(target):
                continue
            kept[name] = directory / f".{name}.{token}.previous"
            try:
                os.link(target, kept[name], follow_symlinks=False)
            except OSError:  # no hard links on this file system: moved aside, put back on failure
                os.replace(target, kept[name])
        for name, tmp in temporary.items():
            os.replace(tmp, directory / name)
            changed.append(name)
        for name in remove:
            (directory / name).unlink(missing_ok=True)
            changed.append(name)
    except BaseException:
        for name in changed:  # put back what was changed
            if name in kept:
                os.replace(kept.pop(name), directory / name)
            else:
                (directory / name).unlink(missing_ok=True)
        for name in list(kept):  # moved aside (no hard links) and not changed yet: moved back
            if not os.path.lexists(directory / name):
                os.replace(kept.pop(name), directory / name)
        raise
    finally:
        for path in [*temporary.values(), *kept.values()]:
            with contextlib.suppress(OSError):  # a leftover costs space, not the set: never an error of its own
                path.unlink(missing_ok=True)
    _sync(directory)


def _sync(directory: Path) -> None:
    """The renames made durable (a directory's fsync; skipped where the system has none)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
