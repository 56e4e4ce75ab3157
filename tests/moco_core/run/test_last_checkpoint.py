"""Issue 56: one answer to "can this run directory resume?" (moco_core.run.rundir.last_checkpoint): the checkpoint
the pointer names (checkpoint.save_last writes it after each checkpoint, as detectron2's Checkpointer does), and
for run directories written before the pointer, the command's own checkpoint names."""

from __future__ import annotations

from pathlib import Path

import pytest

from moco_core import checkpoint
from moco_core.run.rundir import last_checkpoint


def test_a_checkpoint_saved_as_the_last_is_named_by_the_pointer(tmp_path: Path) -> None:
    assert last_checkpoint(tmp_path, "eval linear") is None  # nothing yet: a new start
    checkpoint.save_last({"epoch": 1}, tmp_path / "grid_last.pth.tar")
    assert (tmp_path / checkpoint.POINTER).read_text() == "grid_last.pth.tar"  # detectron2's form: the bare name
    assert last_checkpoint(tmp_path, "eval linear") == tmp_path / "grid_last.pth.tar"
    assert last_checkpoint(tmp_path, "eval knn") is None  # no --resume: it starts again
    checkpoint.point_to(tmp_path, tmp_path / "shapes" / "result.json")  # the transfer suite's, after a dataset
    assert last_checkpoint(tmp_path, "eval transfer") is None  # names no file there yet: none
    (tmp_path / "shapes").mkdir()
    (tmp_path / "shapes" / "result.json").write_text("{}")
    assert last_checkpoint(tmp_path, "eval transfer") == tmp_path / "shapes" / "result.json"


@pytest.mark.parametrize(("command", "names"), [
    ("pretrain", ["checkpoint_last.pth.tar"]),
    ("eval linear", ["linear_last.pth.tar", "grid_last.pth.tar"]),
    ("eval finetune", ["finetune_last.pth.tar"]),
    ("eval voc", ["checkpoint_last.pth.tar"]),
    ("eval semseg", ["checkpoint_last.pth.tar"]),
    ("eval transfer", ["dtd/result.json"]),
])
def test_run_directories_written_before_the_pointer_resume_by_their_names(command: str, names: list[str],
                                                                          tmp_path: Path) -> None:
    for name in names:
        run_dir = tmp_path / name.replace("/", "_")
        (run_dir / name).parent.mkdir(parents=True)
        (run_dir / name).write_bytes(b"")
        assert last_checkpoint(run_dir, command) == run_dir / name
        other = "eval finetune" if command != "eval finetune" else "pretrain"
        assert last_checkpoint(run_dir, other) is None  # another command's checkpoint is not one to continue


@pytest.mark.parametrize("pointer", ["/etc/passwd", "../elsewhere/checkpoint_last.pth.tar", "absent.pth.tar", "",
                                     "a\x00b", "\udcff"])
def test_a_pointer_that_names_no_checkpoint_here_counts_as_none(pointer: str, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "checkpoint_last.pth.tar").write_bytes(b"")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / checkpoint.POINTER).write_bytes(pointer.encode("utf-8", "surrogateescape"))
    assert last_checkpoint(run_dir, "pretrain") is None
    (run_dir / "linear_last.pth.tar").write_bytes(b"")
    assert last_checkpoint(run_dir, "eval linear") == run_dir / "linear_last.pth.tar"  # the names still count
