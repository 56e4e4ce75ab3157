"""Run directories: the resolved config, the code version and the environment, so results trace to their run."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import yaml

import moco_core
from moco_core import distributed, smoke
from moco_core.checkpoint import POINTER, write_atomic
from moco_core.commands import COMMANDS
from moco_core.config import ConfigError
from moco_core.errors import UserError, print_warning
from moco_core.user_files import RECORD_LIMIT, parse_json, read_bytes, read_text

LOCK = ".moco.lock"


def code_version() -> str:
    """``git describe`` of the source tree this code runs from (``-dirty`` when modified), else the version."""
    here = Path(moco_core.__file__).resolve().parent.parent
    try:
        out = subprocess.run(
            ["git", "-C", str(here), "describe", "--always", "--dirty", "--abbrev=12"],
            capture_output=True, text=True, timeout=10, check=True,
        )
        return f"{moco_core.__version__}+g{out.stdout.strip()}"
    except (OSError, subprocess.SubprocessError):
        return moco_core.__version__


def environment() -> dict[str, Any]:
    job = os.environ.get("SLURM_JOB_ID") or os.environ.get("SUBMITIT_LOCAL_JOB_ID")  # moco launch, or any sbatch
    return {
        "code_version": code_version(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda if torch.cuda.is_available() else None,
        "host": socket.gethostname(),
        "cpu_threads": torch.get_num_threads(),  # chosen for the machine's load (threads.cpu_threads)
        "argv": sys.argv,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **({"scheduler_job": job} if job else {}),
        **smoke.marker(),
    }


def write_run_files(run_dir: Path, config: dict[str, Any], extra: dict[str, Any]) -> None:
    """``config.yaml`` (the resolved config, reloadable with ``--config``) and ``run.json`` (provenance).

    ``run.json`` is written first: a ``config.yaml`` without a ``run.json`` of ours was not written by a run, and
    is never written over (nor is a ``run.json`` that is not ours): ``--output-dir .`` in a project folder, or an
    empty value that became the current directory, stops here in one line instead of replacing the user's files.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    history_path = run_dir / "run.json"
    history: dict[str, Any] = {"starts": []}
    if os.path.lexists(history_path):
        history = _read_history(history_path)
        if not isinstance(history, dict) or not isinstance(history.get("starts"), list):
            raise ConfigError(f"run.output_dir: {run_dir} holds a run.json that no moco run wrote; choose another "
                              f"--output-dir (nothing was written there)")
    elif (run_dir / "config.yaml").exists():
        raise ConfigError(f"run.output_dir: {run_dir} holds a config.yaml that no moco run wrote; choose another "
                          f"--output-dir (nothing was written there)")
    history["starts"].append({**environment(), **extra})  # every start and resume is kept
    write_text_atomic(history_path, json.dumps(history, indent=2) + "\n")
    write_text_atomic(run_dir / "config.yaml", yaml.safe_dump(config, sort_keys=False))


def _read_history(path: Path) -> Any:
    """run.json's content, read through :mod:`moco_core.user_files`: None for what no moco run wrote (not a regular
    file, too large, not JSON); a torn one of ours (written by a version without atomic writes, then killed
    mid-write: it starts as ours do, or one holding a number past 64 bits) is started again, saying what was lost,
    in the file and in one warning line on stderr."""
    try:
        data = read_bytes(path, limit=RECORD_LIMIT, what="run.json")
    except UserError:
        return None
    try:
        return parse_json(data, what="")
    except UserError as err:
        if data.startswith(b'{\n  "starts": ['):
            print_warning(f"{path}: the history of this run's earlier starts is lost, begun again with this one "
                          f"({err}); run.json says so (\"lost\")")
            return {"starts": [], "lost": "run.json was unreadable at a later start"}
        return None


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` through :func:`moco_core.checkpoint.write_atomic`: a kill leaves the old file or the new one,
    a full disk a one-line error and no temporary file."""
    data = text.encode("utf-8")
    write_atomic(path, lambda f: f.write(data), what=path.name)


def require_writable(directory: Path, what: str = "--output-dir") -> None:
    """Create ``directory`` if needed and check a file can be made in it, before any work that writes there at
    its end (``moco eval knn`` extracts every feature first): a read-only place fails now, in one line."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as err:
        raise ConfigError(f"{what}: cannot write in {directory}: {err.strerror or err}") from None


def require_fresh(run_dir: Path, markers: tuple[str, ...], what: str, hint: str) -> None:
    """A one-line ConfigError when ``run_dir`` already holds one of ``markers`` (the files of ``what``): a new run
    there would overwrite that run's checkpoint, config and metrics."""
    found = [m for m in markers if (run_dir / m).exists()]
    if found:
        raise ConfigError(f"run.output_dir: {run_dir} already holds {what} ({found[0]}); {hint}")


def check_epoch_run(run_dir: Path, resume: bool, last: str, *, finished: str, unfinished: str, hint: str) -> None:
    """Before an evaluation that checkpoints its epochs (in ``last``) starts: without ``--resume``, ``run_dir`` may
    hold neither a finished run (``finished``) nor an unfinished one (``unfinished``; :func:`require_fresh`); with
    it, the run there must be of this process's mode (:func:`require_same_mode`)."""
    if not resume:
        require_fresh(run_dir, ("result.json",), finished, hint)
        require_fresh(run_dir, (last,), unfinished, hint)
    else:
        require_same_mode(run_dir)


def last_checkpoint(run_dir: Path, command: str) -> Path | None:
    """The one answer to "can this run directory resume?": the newest checkpoint of ``command``'s run in
    ``run_dir`` (a row of :data:`moco_core.commands.COMMANDS`), which its ``--resume`` continues from, or None
    (nothing to continue: a new start; always for a command without ``--resume``).

    The checkpoint is the file the run directory's pointer names (:func:`moco_core.checkpoint.save_last`; detectron2
    writes its own), or, in a run directory written before the pointer, the first of the command's checkpoints
    (:attr:`moco_core.commands.Command.checkpoints`) there. A pointer that is not a name of a file in ``run_dir``
    (a file anyone can edit) counts as none."""
    patterns = COMMANDS[command].checkpoints.values()
    if not patterns:
        return None
    try:
        name = read_text(run_dir / POINTER, limit=4096, what=POINTER).strip()
    except UserError:
        name = ""
    named = run_dir / name
    if name and not Path(name).is_absolute() and ".." not in Path(name).parts and named.is_file():
        return named
    return next((path for pattern in patterns for path in sorted(run_dir.glob(pattern)) if path.is_file()), None)


def require_same_mode(run_dir: Path) -> None:
    """Before ``--resume`` continues the run in ``run_dir``: a one-line error when it was started in the other mode
    (smoke or real: its run.json says which) than this process runs in (:func:`moco_core.smoke.refuse_other_mode`)."""
    recorded = smoke.recorded(run_dir)
    if recorded is not None:
        how = "with MOCO_SMOKE=1" if recorded else "without MOCO_SMOKE"
        smoke.refuse_other_mode(recorded, str(run_dir), fix=f"continue it {how}, or run this one in another "
                                f"--output-dir")


class RunDirBusy(ConfigError):
    """Another live process holds the run directory."""


def _holder(fd: int) -> str:
    """Who holds a lock file, as its holder wrote it: "pid 123 on host h since ... (moco pretrain ...)"."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        info = parse_json(os.read(fd, 4096).decode("utf-8", "replace"), what="")
        command = " ".join(str(a) for a in info.get("argv", []))[:120]
        return f"pid {info['pid']} on host {info['host']} since {info['started']} ({command})"
    except (UserError, OSError, ValueError, KeyError, TypeError, AttributeError):
        return "another process"


def acquire_run_dir(run_dir: Path) -> int | None:
    """Lock ``run_dir`` (created if needed) for this process: a ``.moco.lock`` file, flock-ed, holding our host and
    pid. Returns its descriptor (None on a filesystem without locks: a warning, then no lock). A second process is
    refused with :class:`RunDirBusy` naming the holder; a dead holder's lock is released by the kernel, so its
    file is simply taken over."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"run.output_dir: cannot create {run_dir}: {err.strerror or err}") from None
    path = run_dir / LOCK
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise ConfigError(f"run.output_dir: cannot write in {run_dir}: {err.strerror or err}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise RunDirBusy(f"run.output_dir: {run_dir} is in use by {holder}; wait for it to end, or choose "
                             f"another --output-dir") from None
        except OSError as err:
            os.close(fd)
            if err.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                raise
            print_warning(f"{run_dir}: the filesystem has no file locks; nothing stops a second process from "
                          f"writing here")
            return None
        try:  # the file we locked may have been removed by a holder ending meanwhile: then lock the new one
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    info = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "argv": sys.argv}
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
    except OSError as err:
        release_run_dir(run_dir, fd)
        raise ConfigError(f"run.output_dir: cannot write in {run_dir}: {err.strerror or err}") from None
    return fd


def release_run_dir(run_dir: Path, fd: int | None) -> None:
    """Remove the lock file (while still holding it), then let it go."""
    if fd is None:
        return
    with contextlib.suppress(OSError):
        os.unlink(run_dir / LOCK)
    os.close(fd)


@contextlib.contextmanager
def run_dir_lock(run_dir: Path, device: torch.device) -> Iterator[None]:
    """``run_dir`` locked by the main process for the duration of a run (:func:`acquire_run_dir`). In a process
    group every process raises when the directory is busy, not only the main one. A directory made here and left
    empty (the run stopped before writing anything) is removed."""
    error: ConfigError | None = None
    fd, created = None, not run_dir.exists()
    if distributed.is_main():
        try:
            fd = acquire_run_dir(run_dir)
        except ConfigError as err:
            error = err
    if distributed.is_distributed():
        busy = distributed.all_reduce_max(torch.tensor([float(error is not None)], device=device))
        if busy.item() and error is None:
            raise ConfigError(f"run.output_dir: {run_dir} cannot be used (the main process says why)")
    if error is not None:
        raise error
    try:
        yield
    finally:
        if fd is not None:
            release_run_dir(run_dir, fd)
        if created and distributed.is_main():  # a run that stopped before writing anything leaves no directory
            with contextlib.suppress(OSError):
                run_dir.rmdir()
