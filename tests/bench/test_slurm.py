"""``moco bench --slurm``: a matrix of N cells is ONE job array (one ``sbatch``, through a stand-in: no SLURM
here) with the parallelism and resources asked, each cell's state queued with its task's job id; a task requeued
after a pre-emption runs the same cell again, resuming from its own run directory."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app

pytest.importorskip("submitit")

MATRIX = """\
output_dir: out
checkpoints:
  - {label: r18, path: random, arch: resnet18}
  - {label: r34, path: random, arch: resnet34}
evaluations:
  - {label: knn, command: eval knn, preset: knn_embedded}
  - {label: lin, command: eval linear, preset: lincls_embedded}
slurm: {partition: learn, time: 60, gpus_per_task: 2}
"""


@pytest.fixture
def sbatch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in ``sbatch`` on PATH: keeps each script it was given, answers as SLURM does."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(f"#!/bin/sh\ncat \"$1\" >> {tmp_path}/submitted.sh\necho call >> "
                                    f"{tmp_path}/calls\necho Submitted batch job 4242\n")
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 1\n")  # submitit looks for it; nothing runs here
    for name in ("sbatch", "srun"):
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.yaml").write_text(MATRIX)
    return tmp_path


def test_n_cells_are_one_array_with_the_parallelism_and_resources_asked(sbatch: Path) -> None:
    done = CliRunner().invoke(app, ["bench", "m.yaml", "--slurm", "--array-parallelism", "3", "--cpus-per-task", "6",
                                    "--gpus-per-task", "4"])  # over the matrix's 2
    assert done.exit_code == 0, done.output
    assert "submitted job array 4242 (4 cells, at most 3 at once)" in done.output
    assert (sbatch / "calls").read_text() == "call\n"  # one submission
    script = (sbatch / "submitted.sh").read_text()
    for line in ("#SBATCH --array=0-3%3", "#SBATCH --partition=learn", "#SBATCH --time=60", "#SBATCH --nodes=1",
                 "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=4", "#SBATCH --cpus-per-task=6",
                 "#SBATCH --job-name=moco-bench", "#SBATCH --signal=USR2@120"):
        assert line in script, line
    states = {p.parent.relative_to(sbatch / "out").as_posix(): json.loads(p.read_text())
              for p in (sbatch / "out").glob("*/*/bench.json")}
    assert {name: (s["state"], s["job_id"]) for name, s in states.items()} == {
        "r18/knn": ("queued", "4242_0"), "r18/lin": ("queued", "4242_1"), "r34/knn": ("queued", "4242_2"),
        "r34/lin": ("queued", "4242_3")}
    again = CliRunner().invoke(app, ["bench", "m.yaml", "--slurm"])  # queued cells are not submitted twice
    assert again.exit_code == 0 and "4 done or under way, 0 to run" in again.output, again.output
    assert (sbatch / "calls").read_text() == "call\n"
    shown = CliRunner().invoke(app, ["bench", "m.yaml", "--status"]).output.splitlines()
    assert "queued job 4242_3" in shown[2] and shown[3] == "4 cells: 0 done, 0 running, 4 queued, 0 failed, 0 stopped"


def test_a_requeued_cell_resumes_its_own_run_directory(sbatch: Path) -> None:
    assert CliRunner().invoke(app, ["bench", "m.yaml", "--slurm"]).exit_code == 0
    # what the array's task 1 runs: the job submitit pickled for it
    with open(sbatch / "out" / "jobs" / "4242_1_submitted.pkl", "rb") as f:
        task = pickle.load(f).function
    run_dir = (sbatch / "out" / "r18" / "lin").absolute()
    assert task.cell.name == "r18/lin" and task.command.run_dir == run_dir
    assert "--resume" not in task.command.argv()
    (run_dir / "linear_last.pth.tar").write_bytes(b"")  # pre-empted after an epoch's checkpoint
    requeued = task.checkpoint()  # submitit's hook on the pre-emption signal
    assert requeued.function.cell == task.cell
    assert requeued.function.command.argv()[-3:] == ["--output-dir", str(run_dir), "--resume"]


@pytest.mark.parametrize(("args", "message"), [
    (["--array-parallelism", "0"], "error: --array-parallelism (or slurm: in the matrix): must be >= 1, got 0\n"),
    (["--time", "0"], "error: --time (or slurm: in the matrix): must be >= 1, got 0\n"),
])
def test_bad_resources_are_one_line(args: list[str], message: str, sbatch: Path) -> None:
    done = CliRunner().invoke(app, ["bench", "m.yaml", "--slurm", *args])
    assert (done.exit_code, done.output) == (2, message)
    assert not (sbatch / "calls").exists()
