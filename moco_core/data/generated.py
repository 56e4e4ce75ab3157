"""Generated datasets written once: a folder made in a temporary sibling and renamed into place with a ``DONE``
stamp saying what made it, so a crash never leaves a complete-looking half, a changed generator (another stamp)
writes again, and two processes generating at once both end with one whole copy. Used by every embedded dataset
whose writer makes a folder of its own (transfer's scenes, retrieval's scenes)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from moco_core.data.data import DatasetError


def stamp_of(folder: Path) -> str | None:
    """The ``DONE`` stamp of ``folder``, None where there is none (not written, or not whole)."""
    try:
        return (folder / "DONE").read_text(encoding="utf-8")
    except OSError:
        return None


def write_once(root: Path, name: str, stamp: str, write: Callable[[Path], None]) -> Path:
    """``root/name`` as ``write(tmp)`` writes it (into ``tmp/name``), unless its ``DONE`` already says ``stamp``;
    returns ``root``. A folder that cannot be written is one line naming it and the way out."""
    target = root / name
    if stamp_of(target) == stamp:
        return root
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".tmp", dir=root))
        try:
            write(tmp)
            (tmp / name / "DONE").write_text(stamp, encoding="utf-8")
            if stamp_of(target) == stamp:  # another process finished first
                return root
            if target.exists():  # stale version or other parameters
                shutil.rmtree(target)
            os.replace(tmp / name, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError as err:
        raise DatasetError(f"cannot write the embedded {name} dataset in {root}: {err.strerror or err} (set "
                           f"MOCO_DATA_HOME to a writable folder)") from None
    return root
