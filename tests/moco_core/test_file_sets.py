"""moco_core/file_sets.py: a set of files written all or none (issue 46, class 6), failing at every step."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

import moco_core.file_sets
from moco_core.file_sets import write_set

OLD = {"report.md": b"old md", "report.csv": b"old csv", "report.html": b"old html"}
NEW = {"report.md": b"new md " * 100, "report.csv": b"new csv", "report.tex": b"new tex"}


def folder(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    out.mkdir()
    for name, data in OLD.items():
        (out / name).write_bytes(data)
    return out


def contents(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in out.iterdir()}


def test_the_set_replaces_the_old_one_and_removes_what_it_names(tmp_path: Path) -> None:
    out = folder(tmp_path)
    write_set(out, NEW, remove=["report.html", "report.pdf"])
    assert contents(out) == NEW


@pytest.mark.parametrize(("step", "fail_at"), [("write", n) for n in range(len(NEW))] +
                         [("rename", n) for n in range(len(NEW))] + [("remove", 0)])
def test_a_failure_at_any_step_leaves_the_old_set(step: str, fail_at: int, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """ENOSPC while writing the n-th temporary file, or a failed n-th rename, or a failed removal: OSError raised
    again, the old files byte for byte, no temporary or kept-aside file left."""
    out = folder(tmp_path)
    calls: list[str] = []

    def failing(real):  # noqa: ANN001, ANN202 - wraps the os function of the step
        def call(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            calls.append(str(args[0]))
            if len(calls) == fail_at + 1:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real(*args, **kwargs)
        return call

    if step == "write":
        monkeypatch.setattr(moco_core.file_sets, "_written", failing(moco_core.file_sets._written))
    elif step == "rename":
        monkeypatch.setattr(moco_core.file_sets.os, "replace", failing(os.replace))
    else:
        monkeypatch.setattr(Path, "unlink", failing(Path.unlink))
    with pytest.raises(OSError, match="No space left on device"):
        write_set(out, NEW, remove=["report.html"])
    assert contents(out) == OLD


def test_without_hard_links_the_old_files_are_moved_aside_and_back(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    out = folder(tmp_path)

    def no_links(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EPERM, "no hard links here")

    monkeypatch.setattr(moco_core.file_sets.os, "link", no_links)
    real, renames = os.replace, []

    def second_fails(src: str, dst: str) -> None:
        renames.append(dst)
        if len([d for d in renames if not str(d).endswith(".previous")]) == 2:
            raise OSError(errno.EIO, "I/O error")
        real(src, dst)

    monkeypatch.setattr(moco_core.file_sets.os, "replace", second_fails)
    with pytest.raises(OSError, match="I/O error"):
        write_set(out, NEW)
    monkeypatch.setattr(moco_core.file_sets.os, "replace", real)
    assert contents(out) == OLD
    write_set(out, NEW)
    assert contents(out) == {**OLD, **NEW}
