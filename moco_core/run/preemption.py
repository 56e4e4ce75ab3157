"""Surviving pre-emption: resuming part-way through an epoch, and stopping cleanly on SIGTERM.

Cluster schedulers send SIGTERM some time before they kill a job. The run then finishes its step, writes a
checkpoint that records how far into the epoch it got, and exits with status 128 + the signal's number (143 for
SIGTERM, :func:`stop_status`), as a shell reports a process that signal ended, so that a chain such as ``moco
pretrain ... && moco eval ...`` stops there; ``--resume`` continues with the samples of that epoch not yet seen
(:class:`ResumableSampler`). An evaluation stops at once (it checkpoints per epoch or per
``run.checkpoint_every`` iterations) with the same status and the command that continues it.

The commands that run others in their process (``moco trials``, ``moco demo``, ``moco sweep``; ``moco launch
--wait`` waits for a job) stop as a whole instead (:class:`Stopper`): they start nothing more and exit with
128 + the signal's number (143 for SIGTERM, 130 for SIGINT), printing the command that continues.
"""

from __future__ import annotations

import multiprocessing
import os
import shlex
import signal
import sys
import threading
import time
from collections.abc import Iterator
from multiprocessing.util import Finalize
from types import FrameType
from typing import Any

import torch
from torch.utils.data import DistributedSampler

from moco_core import distributed


class ResumableSampler(DistributedSampler):
    """``DistributedSampler`` whose next pass can start ``start`` samples in (the ones a killed run already saw).

    The order is the parent's, a function of (seed, epoch) only, so the resumed pass is the tail of the pass the
    killed run was making. ``start`` applies to passes begun while it is set; the caller resets it to 0.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.start = 0

    def __iter__(self) -> Iterator[int]:
        return iter(list(super().__iter__())[self.start:])

    def __len__(self) -> int:
        return self.num_samples - self.start


EXTRA_STOP_SIGNALS: list[int] = []  # more signals that stop a run cleanly (``moco launch``: the pre-emption one)
last_stop: str | None = None  # the signal that stopped this process's last run (None: it was not stopped)


def stop_status(signal_name: str) -> int:
    """The exit status of a command a signal stopped: 128 + its number (143 for SIGTERM, 130 for SIGINT)."""
    return 128 + signal.Signals[signal_name].value


def stop_signals() -> tuple[int, ...]:
    return (signal.SIGTERM, *EXTRA_STOP_SIGNALS)


def ignore_stop_signals() -> None:
    """In a process that must outlive the stop signals (a data worker): they are ignored."""
    for sig in stop_signals():
        signal.signal(sig, signal.SIG_IGN)


def ignore_sigterm(worker_id: int) -> None:
    """DataLoader ``worker_init_fn``: a scheduler signals every process of the job, and a worker killed by it
    would fail the step the main process is finishing; the workers stop when the main process lets them go.
    The same holds for the other stop signals. The process that starts such workers calls
    :func:`kill_workers_at_exit`."""
    ignore_stop_signals()


_kill_registered_in: int | None = None  # the process that registered the exit hook (a forked child has none)


def kill_workers_at_exit() -> None:
    """In a process whose daemonic children (data workers) ignore the stop signals: make sure they die when it
    exits, whatever way it exits. Call it before starting them; once per process is enough.

    multiprocessing ends a process by sending its daemonic children SIGTERM and then joining every child with no
    time limit. Workers that ignore SIGTERM are normally let go by the DataLoader's iterator before that; but a
    process that ends on an uncaught exception (a CUDA out-of-memory, a bug), or a rank spawned by ``--nproc``
    that ends on any error, still holds the iterator through the exception's traceback, and would wait for its
    workers forever: a failed run that never exits and keeps its GPUs. The hook runs first: SIGTERM, then, for
    those still there a second later, SIGKILL.
    """
    global _kill_registered_in
    if _kill_registered_in != os.getpid():
        Finalize(None, _kill_daemonic_children, exitpriority=0)  # a hook of multiprocessing's exit, before its join
        _kill_registered_in = os.getpid()


def _kill_daemonic_children() -> None:
    children = [child for child in multiprocessing.active_children() if child.daemon]
    if not children:  # the normal case: the iterators have let their workers go
        return
    if threading.current_thread() is threading.main_thread():
        # the DataLoader's SIGCHLD handler would report each as a worker that failed, over the real error
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for child in children:
        child.terminate()  # what multiprocessing does next: enough for those that do not ignore it
    deadline = time.monotonic() + 1.0
    for child in children:
        child.join(timeout=max(0.0, deadline - time.monotonic()))
    for child in children:
        if child.is_alive():
            child.kill()
            child.join(timeout=10)


class StopSignal:
    """Records SIGTERM (and the other :func:`stop_signals`) while installed; ``requested(step)`` says when to stop.

    With several processes every rank must stop after the same step, or the others would wait in a collective
    forever: the flag is combined across ranks (a max all-reduce) every ``every`` steps, so a stop happens at
    most ``every`` steps after the first rank got the signal. One process checks every step.
    A second signal restores the default action, so a stuck run can still be killed.
    """

    def __init__(self, device: torch.device, *, every: int, signals: tuple[int, ...] | None = None) -> None:
        self.device = device
        self.every = every
        self.signals = stop_signals() if signals is None else signals
        self.received: str | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignal:
        global last_stop
        last_stop = None
        if threading.current_thread() is threading.main_thread():  # signal handlers can only live there
            for sig in self.signals:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        global last_stop
        self.received = last_stop = signal.Signals(signum).name
        signal.signal(signum, self._previous.get(signum, signal.SIG_DFL))
        print(f"\n{self.received} received: stopping after this step with a checkpoint "
              f"(send it again to stop at once)", file=sys.stderr, flush=True)

    def requested(self, step: int) -> bool:
        """Whether to stop after ``step``. With several processes the ranks exchange the number of the signal one
        got (the largest, 0 for none): a rank that got none stops too, and its :data:`last_stop` names that
        signal, so that every rank exits with the same status."""
        global last_stop
        if distributed.world_size() == 1:
            return self.received is not None
        if step % self.every:
            return False
        number = float(signal.Signals[self.received].value) if self.received else 0.0
        agreed = int(distributed.all_reduce_max(torch.tensor([number], device=self.device)).item())
        if agreed and last_stop is None:
            last_stop = signal.Signals(agreed).name
        return agreed > 0


WRAPPER_SIGNALS = (signal.SIGTERM, signal.SIGINT)  # a scheduler's stop, and Ctrl-C


class Stopped(BaseException):
    """A command that runs others (trials, demo, sweep, launch --wait) was stopped by a signal during ``during``.

    A BaseException, as KeyboardInterrupt is: the ``except Exception`` of the run it interrupts must not take it
    for that run's own failure, nor click for a usage error.
    """

    def __init__(self, signal_name: str, during: str) -> None:
        super().__init__(f"stopped by {signal_name} during {during}")
        self.signal_name = signal_name

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, what a shell reports for a process that signal ended: a script or a
        scheduler tells a stop (rerun to continue) from a failure (1) or refused input (2)."""
        return stop_status(self.signal_name)

    def line(self, rerun: str) -> str:
        return f"{self}; nothing more was started; continue with: {rerun}"


_stoppers = 0  # Stoppers installed in this process now (moco trials running an evaluation in it: 2)


def stopper_installed() -> bool:
    """Whether a :class:`Stopper` is installed in this process: a command run inside another (an evaluation under
    ``moco trials``) leaves the stop to it, whose line names the command that continues the whole."""
    return _stoppers > 0


class Stopper:
    """While installed, SIGTERM and SIGINT stop the command that runs others in this process as a whole.

    What runs when the signal comes ends: a pretraining finishes its step and writes its checkpoint (SIGINT, like
    SIGTERM, is one of its stop signals meanwhile), then :meth:`check` raises :class:`Stopped`; anything else
    (an evaluation, which checkpoints per epoch) is interrupted at once by the :class:`Stopped` the handler
    raises. ``doing`` names the step under way, for the message. A second signal in a pretraining stops it at once.
    """

    def __init__(self) -> None:
        self.doing = "start-up"
        self.received: str | None = None
        self._previous: dict[int, Any] = {}
        self._added: list[int] = []

    def __enter__(self) -> Stopper:
        global last_stop, _stoppers
        last_stop = None
        _stoppers += 1
        self._added = [sig for sig in WRAPPER_SIGNALS if sig not in stop_signals()]
        EXTRA_STOP_SIGNALS.extend(self._added)
        if threading.current_thread() is threading.main_thread():  # signal handlers can only live there
            for sig in WRAPPER_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        global _stoppers
        _stoppers -= 1
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        for sig in self._added:
            EXTRA_STOP_SIGNALS.remove(sig)
        if exc is not None and self.received and not isinstance(exc, Stopped):
            # the signal reached the run's own processes too (loader workers), whose end became the run's error
            raise Stopped(self.received, self.doing) from None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        global last_stop
        # last_stop too: a Stopper around this one (moco trials running an evaluation in its process) then stops
        self.received = last_stop = signal.Signals(signum).name
        # The signal most often reached the step's loader workers too (a scheduler signals the whole job): the
        # DataLoader's SIGCHLD handler would report each end as a failure, over the stop's one line, when the
        # abandoned iterator is let go. The command ends with this stop, so no child's end is news: a handler that
        # does nothing (not SIG_DFL, under which a SIGCHLD already pending prints a warning of its own).
        signal.signal(signal.SIGCHLD, _child_ended)
        raise Stopped(self.received, self.doing)

    def check(self) -> None:
        """After a run that returned: raise :class:`Stopped` if a stop signal came meanwhile (a pretraining takes
        it, checkpoints and returns: ``last_stop``)."""
        stop = self.received or last_stop
        if stop is not None:
            raise Stopped(stop, self.doing)


def _child_ended(signum: int, frame: FrameType | None) -> None:
    """SIGCHLD once a command is stopping: its children's ends are expected."""


def rerun_command(ctx: Any) -> str:
    """The command a click context ran, written back from its parsed values (shell-quoted), to run again.

    Rebuilt rather than read from ``sys.argv``, which is another program's under ``CliRunner`` and a job's under
    ``moco launch``. Options at their defaults are left out; what came after ``--`` (``ctx.args``) is kept.
    """
    arguments, options = [], []
    for param in ctx.command.params:
        value = ctx.params.get(param.name)
        if param.param_type_name == "argument":
            arguments.append(str(value))
        elif value is None or value == param.default or (param.multiple and not value):
            continue
        elif param.is_flag:
            options.append(param.opts[0] if value else param.secondary_opts[0])
        else:
            options += [a for v in (value if param.multiple else [value]) for a in (param.opts[0], str(v))]
    if any(a.startswith("-") for a in arguments):  # would read as an option: after "--", with all that follows
        return shlex.join(["moco", ctx.info_name, *options, "--", *arguments, *ctx.args])
    return shlex.join(["moco", ctx.info_name, *arguments, *options, *(["--", *ctx.args] if ctx.args else [])])


def report_stop(stop: Stopped, ctx: Any) -> int:
    """Print the one line that says what stopped and what continues (stderr); the exit status."""
    print(stop.line(rerun_command(ctx)), file=sys.stderr, flush=True)
    return stop.exit_code
