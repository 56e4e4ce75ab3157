"""``moco bench MATRIX.yaml``: a matrix's cells run here (one ``moco`` process a cell, across devices) or on SLURM
(one job array, through submitit), and the matrix's state as a table.

Every cell runs the command its line says (:meth:`cluster.matrix.Cell.line`) in its own run directory, which
holds the command's own files and two of the bench's: ``bench.log`` (the cell's output) and ``bench.json`` (its
state: queued, running, done or failed, with its job id or process, its log and its exit status), which
``--status`` reads while the matrix runs. A cell whose command wrote what says it is done (``result.json``; or its
state says done, for a command that finds what is left itself) is skipped; a cell with a checkpoint to continue
(:func:`moco_core.run.rundir.last_checkpoint`) runs only with ``--resume``, from that checkpoint; a failed cell
stops no other and is named at the end with its log. On SLURM each array task is a :class:`cluster.job.Job`, which
requeues itself when pre-empted and resumes from the cell's run directory, as ``moco launch`` does.
"""

from __future__ import annotations

import json
import os
import queue
import socket
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from cluster.job import LaunchError
from cluster.matrix import Cell
from moco_core.errors import UserError, one_line
from moco_core.run.rundir import last_checkpoint, write_text_atomic
from moco_core.user_files import read_json

STATE = "bench.json"  # in a cell's run directory: its state, for --status
LOG = "bench.log"  # in a cell's run directory, run here: the command's output
MOCO = (sys.executable, "-m", "cli")  # the moco command of this environment, whatever PATH holds
TAIL_BYTES = 4096  # of a log, for its last line


class BenchError(LaunchError):
    """A matrix that cannot run as asked: a device, a count, a scheduler's refusal."""


def read_state(cell: Cell) -> dict[str, Any]:
    try:
        state = read_json(cell.run_dir / STATE, what="cell state")
    except UserError:  # none yet, or not one this module wrote
        return {}
    return state if isinstance(state, dict) else {}


def write_state(cell: Cell, **fields: Any) -> None:
    cell.run_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(cell.run_dir / STATE, json.dumps({"cell": cell.name, **fields}, indent=2) + "\n")


def finished(cell: Cell) -> bool:
    """The cell's command wrote its result, or (a command without one: the transfer suite) ran to its end."""
    return cell.command().finished() or read_state(cell).get("state") == "done"


def resumable(cell: Cell) -> bool:
    return last_checkpoint(cell.run_dir, cell.evaluation.command) is not None


def plan(cells: Sequence[Cell], *, resume: bool) -> tuple[list[Cell], list[Cell], list[Cell]]:
    """(to run, done before, waiting for --resume: an unfinished cell with a checkpoint to continue)."""
    done = [cell for cell in cells if finished(cell)]
    waiting = [cell for cell in cells if cell not in done and resumable(cell) and not resume]
    return [cell for cell in cells if cell not in done and cell not in waiting], done, waiting


def say_plan(cells: Sequence[Cell], todo: list[Cell], done: list[Cell], waiting: list[Cell], where: str) -> None:
    print(f"moco bench: {len(cells)} cells: {len(done)} done before, {len(todo)} to run {where}"
          + (f", {len(waiting)} with a checkpoint to continue (add --resume: {', '.join(c.name for c in waiting)})"
             if waiting else ""), flush=True)


def devices_of(devices: str) -> list[str]:
    """``--devices``: a comma-separated list (cpu, cuda:0,cuda:1); auto: every CUDA device here, else cpu."""
    if devices == "auto":
        import torch

        count = torch.cuda.device_count()
        return [f"cuda:{i}" for i in range(count)] if count else ["cpu"]
    return [d.strip() for d in devices.split(",")]


def run_local(cells: Sequence[Cell], *, devices: list[str], jobs: int, resume: bool,
              program: Sequence[str] = MOCO) -> int:
    """Run the cells that are left, ``jobs`` at a time on each of ``devices``, each as its own ``moco`` process;
    0 when every one succeeded, else 1 once all have been tried, with each failed cell named."""
    if jobs < 1:
        raise BenchError(f"--jobs: must be >= 1, got {jobs}")
    for device in devices:
        try:
            cells[0].line(device)
        except ValueError as err:  # the suite's own check of a device (InvalidInvocation)
            raise BenchError(f"--devices: {err}") from None
    todo, done, waiting = plan(cells, resume=resume)
    slots: queue.Queue[str] = queue.Queue()
    for device in devices:
        for _ in range(jobs):
            slots.put(device)
    say_plan(cells, todo, done, waiting, f"on {', '.join(devices)} ({jobs} a device)")

    def run(cell: Cell) -> int:
        device = slots.get()
        try:
            return _run_cell(cell, device, program)
        finally:
            slots.put(device)

    with ThreadPoolExecutor(max_workers=max(1, min(len(todo), slots.qsize()))) as pool:
        codes = list(pool.map(run, todo))
    failed = [cell for cell, code in zip(todo, codes, strict=True) if code]
    for cell in failed:
        print(f"failed: {cell.name}: {cell.run_dir / LOG}: {last_line(cell.run_dir / LOG)}", file=sys.stderr)
    if failed:
        print(f"error: {len(failed)} of {len(todo)} cells failed (named above); run the same command with --resume "
              f"to run what is missing", file=sys.stderr)
        return 1
    print(f"moco bench: {len(todo)} cells run, {len(done)} done before", flush=True)
    return 0


def _run_cell(cell: Cell, device: str, program: Sequence[str]) -> int:
    """One cell on ``device``, its output in its log; its exit status."""
    command = cell.command(device)
    argv = [*program, *command.argv()]
    cell.run_dir.mkdir(parents=True, exist_ok=True)
    log = cell.run_dir / LOG
    print(f"{cell.name}: {cell.line(device)}{' --resume' if '--resume' in argv else ''} (log: {log})", flush=True)
    with open(log, "a", encoding="utf-8") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        write_state(cell, state="running", pid=process.pid, host=socket.gethostname(), device=device, log=str(log))
        code = process.wait()
    write_state(cell, state="failed" if code else "done", exit_status=code, device=device, log=str(log))
    print(f"{cell.name}: {'failed (exit status ' + str(code) + ')' if code else 'done'}", flush=True)
    return code


def last_line(path: Path) -> str:
    """The last non-empty line of a log (its error, when the command failed), escaped and bounded."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - TAIL_BYTES))
            lines = [line for line in f.read().decode("utf-8", "replace").splitlines() if line.strip()]
    except OSError as err:
        return f"(no log: {err.strerror})"
    return one_line(lines[-1])[:300] if lines else "(empty log)"
