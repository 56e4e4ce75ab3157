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
import math
import os
import queue
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from cluster.job import Job, LaunchError, at_least, executor
from cluster.matrix import Cell, Slurm
from moco_core.errors import UserError, one_line
from moco_core.run.preemption import Stopped, Stopper
from moco_core.run.rundir import last_checkpoint, write_text_atomic
from moco_core.user_files import read_json

STATE = "bench.json"  # in a cell's run directory: its state, for --status
RESULT = "result.json"  # in a cell's run directory: its command's record
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


def under_way(cell: Cell, *, resume: bool) -> bool:
    """The cell's state says queued or running: a process of this machine that is still alive, or a SLURM task
    (believed, but for --resume: a job that SLURM ended without a word, e.g. cancelled, left its state behind)."""
    state = read_state(cell)
    if state.get("state") not in ("queued", "running"):
        return False
    pid = state.get("pid")
    if isinstance(pid, int) and state.get("host") == socket.gethostname():
        try:
            os.kill(pid, 0)
        except (ProcessLookupError, PermissionError, OverflowError):
            return False
        return True
    return not resume


def plan(cells: Sequence[Cell], *, resume: bool) -> tuple[list[Cell], list[Cell], list[Cell]]:
    """(to run, done before or under way, waiting for --resume: an unfinished cell with a checkpoint)."""
    done = [cell for cell in cells if finished(cell) or under_way(cell, resume=resume)]
    waiting = [cell for cell in cells if cell not in done and resumable(cell) and not resume]
    return [cell for cell in cells if cell not in done and cell not in waiting], done, waiting


def say_plan(cells: Sequence[Cell], todo: list[Cell], done: list[Cell], waiting: list[Cell], where: str) -> None:
    print(f"moco bench: {len(cells)} cells: {len(done)} done or under way, {len(todo)} to run {where}"
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
    0 when every one succeeded, else 1 once all have been tried, with each failed cell named.

    SIGTERM or SIGINT stops the whole: no further cell starts, the running ones get SIGTERM (an evaluation
    checkpoints and stops), and :class:`moco_core.run.preemption.Stopped` is raised once they have ended."""
    at_least((("--jobs", jobs, 1),))
    for device in devices:
        try:
            cells[0].line(device)
        except ValueError as err:  # the suite's own check of a device (InvalidInvocation)
            raise BenchError(f"--devices: {err}") from None
    todo, done, waiting = plan(cells, resume=resume)
    say_plan(cells, todo, done, waiting, f"on {', '.join(devices)} ({jobs} a device)")
    runner = _Runner([device for device in devices for _ in range(jobs)], program)
    with Stopper() as stopper, ThreadPoolExecutor(max_workers=max(1, min(len(todo), jobs * len(devices)))) as pool:
        stopper.doing = "moco bench (stopped cells continue with --resume)"
        try:
            codes = list(pool.map(runner.run, todo))
        except Stopped:
            runner.stop()
            raise
    failed = [cell for cell, code in zip(todo, codes, strict=True) if code]
    for cell in failed:
        print(f"failed: {cell.name}: {cell.run_dir / LOG}: {last_line(cell.run_dir / LOG)}", file=sys.stderr)
    if failed:
        print(f"error: {len(failed)} of {len(todo)} cells failed (named above); run the same command with --resume "
              f"to run what is missing", file=sys.stderr)
        return 1
    print(f"moco bench: {len(todo)} cells run, {len(done)} done or under way before", flush=True)
    return 0


class _Runner:
    """The device slots of a local run and the cells' processes running in them (threads take a slot each)."""

    def __init__(self, slots: list[str], program: Sequence[str]) -> None:
        self.slots: queue.Queue[str] = queue.Queue()
        for device in slots:
            self.slots.put(device)
        self.program = program
        self.running: set[subprocess.Popen[bytes]] = set()
        self.lock = threading.Lock()
        self.stopping = False

    def run(self, cell: Cell) -> int:
        device = self.slots.get()
        try:
            return self._run(cell, device)
        finally:
            self.slots.put(device)

    def stop(self) -> None:
        """No cell starts from now on; the running ones are told to stop (they end before the pool does)."""
        with self.lock:
            self.stopping = True
            for process in self.running:
                process.terminate()

    def _run(self, cell: Cell, device: str) -> int:
        """One cell on ``device``, its output in its log; its exit status."""
        command = cell.command(device)
        argv = [*self.program, *command.argv()]
        log = cell.run_dir / LOG
        with self.lock:
            if self.stopping:
                return 0  # never started: the stop's line says what continues it
            print(f"{cell.name}: {cell.line(device)}{' --resume' if '--resume' in argv else ''} (log: {log})",
                  flush=True)
            cell.run_dir.mkdir(parents=True, exist_ok=True)
            with open(log, "a", encoding="utf-8") as out:  # the process keeps its own copy
                process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            self.running.add(process)
        write_state(cell, state="running", pid=process.pid, host=socket.gethostname(), device=device, log=str(log))
        code = process.wait()
        with self.lock:
            self.running.discard(process)
        write_state(cell, state="failed" if code else "done", exit_status=code, device=device, log=str(log))
        print(f"{cell.name}: {'failed (exit status ' + str(code) + ')' if code else 'done'}", flush=True)
        return code


def last_line(path: Path) -> str:
    """The last ``error:`` line of a log's tail (the command's own one-line error), else its last non-empty line
    (a traceback's last line, a job's last word), escaped and bounded."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - TAIL_BYTES))
            lines = [line for line in f.read().decode("utf-8", "replace").splitlines() if line.strip()]
    except OSError as err:
        return f"(no log: {err.strerror})"
    said = [line for line in lines if line.startswith("error: ")]
    return one_line((said or lines or ["(empty log)"])[-1])[:300]


def cell_status(cell: Cell) -> tuple[str, str | None]:
    """What the matrix's table shows of a cell (done, running + its job id or process, queued + its job id,
    failed, stopped, checkpoint, or - for not started) and, for a failed or stopped cell, its log."""
    state = read_state(cell)
    said = state.get("state")
    if cell.command().finished() or said == "done":
        return f"done{headline(cell)}", None
    where = f"job {state['job_id']}" if state.get("job_id") else f"pid {state.get('pid')}"
    if said in ("queued", "running"):
        if under_way(cell, resume=False):
            return f"{said} {where}", None
        return "stopped", str(state.get("log"))  # its process ended without a word (killed)
    if said == "failed":
        return "failed", str(state.get("log"))
    return ("checkpoint (--resume)" if resumable(cell) else "-"), None


def headline(cell: Cell) -> str:
    """`` <metric> <value>``: the first metric of the cell's record (top1, AP, mIoU...), or nothing where its
    record holds none (a transfer suite's record lists its datasets' records)."""
    try:
        record = read_json(cell.run_dir / RESULT, what="result")
    except UserError:
        return ""
    metrics = record.get("metrics") if isinstance(record, dict) else None
    if not isinstance(metrics, dict) or not metrics:
        return ""
    name, value = next(iter(metrics.items()))
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return f" {one_line(name)[:20]} {value:.1f}" if ok else ""


def status(cells: Sequence[Cell]) -> str:
    """The matrix as a table (checkpoints as rows, evaluations as columns), then each failed cell with the last
    line of its log; read from the cells' run directories, so it can be printed while they run."""
    rows = list(dict.fromkeys(cell.checkpoint.label for cell in cells))
    columns = list(dict.fromkeys(cell.evaluation.label for cell in cells))
    shown = {cell.name: cell_status(cell) for cell in cells}
    table = [["", *columns], *([row, *(shown[f"{row}/{column}"][0] for column in columns)] for row in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    lines = ["  ".join(text.ljust(width) for text, width in zip(line, widths, strict=True)).rstrip()
             for line in table]
    counts = [f"{sum(s.split()[0] == word for s, _ in shown.values())} {word}"
              for word in ("done", "running", "queued", "failed", "stopped")]
    lines.append(f"{len(cells)} cells: {', '.join(counts)}")
    for name, (said, log) in shown.items():
        if log is not None:
            lines.append(f"{said}: {name}: {log}: {last_line(Path(log))}")
    return "\n".join(lines)


class CellJob(Job):
    """A cell as one task of the matrix's job array: its command as ``moco launch`` runs one (requeued when
    pre-empted, resumed from the cell's run directory), its state kept for ``--status``."""

    def __init__(self, cell: Cell) -> None:
        super().__init__(cell.command())
        self.cell = cell

    def __call__(self) -> int:
        import submitit

        known = read_state(self.cell)
        fields = {"job_id": submitit.JobEnvironment().job_id, "log": known.get("log"), "host": socket.gethostname()}
        write_state(self.cell, state="running", **fields)
        try:
            code = super().__call__()
        except Exception:
            write_state(self.cell, state="failed", **fields)
            raise
        write_state(self.cell, state="failed" if code else "done", exit_status=code, **fields)
        return code

    def checkpoint(self) -> Any:
        """The requeued task: the same cell again, which resumes from what its run directory holds."""
        import submitit

        return submitit.helpers.DelayedSubmission(CellJob(self.cell))


def submit_slurm(cells: Sequence[Cell], *, slurm: Slurm, folder: Path, resume: bool) -> list[Any]:
    """One job array for the cells that are left (submitit's ``executor.batch()``: one ``sbatch``), at most
    ``slurm.array_parallelism`` running at once, each with ``slurm.gpus_per_task`` GPUs; the submitted jobs."""
    at_least((("--time", slurm.time, 1), ("--gpus-per-task", slurm.gpus_per_task, 0),
              ("--array-parallelism", slurm.array_parallelism, 1), ("--cpus-per-task", slurm.cpus_per_task, 1),
              ("--mem-gb", slurm.mem_gb, 1), ("--signal-delay", slurm.signal_delay, 0),
              ("--max-timeouts", slurm.max_timeouts, 0)), where=" (or slurm: in the matrix)")
    todo, done, waiting = plan(cells, resume=resume)
    say_plan(cells, todo, done, waiting, "as one SLURM job array")
    if not todo:
        return []
    try:
        import submitit  # noqa: F401 - only whether it is there
    except ImportError:
        raise BenchError("moco bench --slurm needs submitit: pip install 'moco[slurm]' (or pip install "
                         "submitit)") from None
    made = executor("slurm", folder, nodes=1, tasks=1, gpus_per_node=slurm.gpus_per_task, time_min=slurm.time,
                    signal_delay=slurm.signal_delay, max_timeouts=slurm.max_timeouts, job_name="moco-bench",
                    slurm={"partition": slurm.partition, "account": slurm.account, "constraint": slurm.constraint,
                           "mem": f"{slurm.mem_gb}GB" if slurm.mem_gb else None, "cpus_per_task": slurm.cpus_per_task,
                           "array_parallelism": slurm.array_parallelism})
    try:
        with made.batch():
            jobs = [made.submit(CellJob(cell)) for cell in todo]
    except Exception as err:  # no sbatch, or the scheduler refused: what it said, on one line
        raise BenchError(f"submitting to slurm failed: {err}") from None
    for cell, job in zip(todo, jobs, strict=True):
        write_state(cell, state="queued", job_id=str(job.job_id), log=str(job.paths.stderr))  # where errors go
    print(f"submitted job array {str(jobs[0].job_id).split('_')[0]} ({len(jobs)} cells, at most "
          f"{slurm.array_parallelism} at once); logs: {folder}; moco bench MATRIX --status shows them", flush=True)
    return jobs
