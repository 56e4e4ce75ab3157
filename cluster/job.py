"""One ``moco`` command as a scheduler job (submitit) that requeues itself when pre-empted or out of time.

What the job runs is the command a user would type, in each of the job's tasks, one task per GPU, wired as one
torch.distributed group from the scheduler's variables. Every start (the first, a requeue, a resubmission)
resumes from what the run directory holds, so a job never needs to be edited to continue.

SLURM sends the pre-emption signal (submitit's, SIGUSR2 unless ``SUBMITIT_PREEMPT_SIGNAL`` says otherwise) some
time before it stops a job. Pretraining treats it like SIGTERM: every rank finishes the same step and the main
process writes a checkpoint; then submitit's own handler requeues the job. Evaluations checkpoint per epoch or
per ``run.checkpoint_every`` iterations and are requeued at once, losing at most that much work. SIGTERM alone
(``scancel``) stops a pretraining cleanly with a checkpoint and does not requeue.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moco_core.commands import COMMANDS
from moco_core.config import ConfigError
from moco_core.errors import UserError
from moco_core.run import preemption
from moco_core.run.rundir import last_checkpoint
from moco_core.user_files import read_json

RECORD = "launch.json"  # in the run directory: every submission of the run, with its job id and log files;
# run.json records each start (a requeue is one) with its job id


class LaunchError(UserError):
    """A command that ``moco launch`` cannot run as a job, or a scheduler that refused it."""


@dataclass(frozen=True)
class Command:
    """``moco <name> <args...>`` with its run directory (absolute, as the job's tasks may start elsewhere)."""

    name: str
    args: tuple[str, ...]
    run_dir: Path

    @classmethod
    def parse(cls, argv: list[str], runner: str = "moco launch") -> Command:
        """The command after ``moco launch ... --`` (or ``moco trials``); it must name its ``--output-dir``: where
        the job resumes, where the trials go."""
        words = 2 if argv[:1] == ["eval"] else 1
        name = " ".join(argv[:words])
        if name not in COMMANDS:
            raise LaunchError(f"{runner} runs one of: {', '.join(COMMANDS)}; got {name or 'nothing'!r} "
                              f"(write the command after --, e.g. {runner} -- pretrain -c moco_v2_200ep ...)")
        args = list(argv[words:])
        refused = {"--nproc": "the job starts one process per GPU itself (--gpus-per-node)"} if runner == \
            "moco launch" else {}
        refused.update({"--resume": f"{runner} resumes from --output-dir by itself",
                        "--print-config": f"run it without {runner}"})
        for option, why in refused.items():
            if any(a == option or a.startswith(option + "=") for a in args):
                raise LaunchError(f"{option}: not with {runner}: {why}")
        rest: list[str] = []
        output_dir = ""
        i = 0
        while i < len(args):
            if args[i] == "--output-dir" and i + 1 < len(args):
                output_dir, i = args[i + 1], i + 2
            elif args[i].startswith("--output-dir="):
                output_dir, i = args[i].partition("=")[2], i + 1
            else:
                rest.append(args[i])
                i += 1
        if not output_dir:
            raise LaunchError(f"moco {name}: give --output-dir DIR with {runner}: its runs keep their checkpoints "
                              f"there and resume from them")
        run_dir = Path(os.path.expanduser(output_dir)).absolute()
        return cls(name, (*rest, "--output-dir", str(run_dir)), run_dir)

    def argv(self) -> list[str]:
        """What this start runs: the command, with what resumes it from its run directory when there is any."""
        return [*self.name.split(), *self.args, *self.resume_args()]

    def resume_args(self) -> list[str]:
        """``--resume`` where the run directory holds a checkpoint of this command to continue from (the run in
        --output-dir, which args name); a command without --resume starts again, or skips what is done itself."""
        return ["--resume"] if last_checkpoint(self.run_dir, self.name) is not None else []

    def finished(self) -> bool:
        """A run that wrote what says it is done (an evaluation's result) has nothing left to do; a pretraining or a
        transfer suite resumes to no work."""
        done = COMMANDS[self.name].done
        return done is not None and (self.run_dir / done).is_file()


class Job:
    """The callable submitit pickles and runs in every task; ``checkpoint()`` is its requeue hook."""

    def __init__(self, command: Command) -> None:
        self.command = command

    def __call__(self) -> int:
        """0 when the command ran to its end; 128 + a signal's number when that signal stopped it (checkpointed)."""
        import submitit

        env = submitit.JobEnvironment()
        submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)
        if self.command.finished():
            print(f"{self.command.run_dir}: finished already (result.json); nothing to do", flush=True)
            return 0
        preempt = preemption_signal()
        preemption.EXTRA_STOP_SIGNALS[:] = [preempt]
        os.register_at_fork(after_in_child=preemption.ignore_stop_signals)  # data workers never run the requeue handler
        preemption.kill_workers_at_exit()  # so an error's exit does not wait for such workers
        argv = self.command.argv()
        sys.argv = ["moco", *argv]  # run.json records the command that ran
        code = run_moco(argv)
        stopped = preemption.last_stop
        if code != 0 and not (stopped is not None and code == preemption.stop_status(stopped)):
            raise RuntimeError(f"moco {self.command.name} exited with status {code} (its error is in this task's "
                               f"log)")
        if stopped == signal.Signals(preempt).name and env.global_rank == 0:
            # stopped cleanly with a checkpoint: hand over to submitit's handler, which requeues (or gives up
            # after too many time-outs) and exits
            signal.raise_signal(preempt)
        if stopped is not None and stopped != signal.Signals(preempt).name:
            # stopped by another signal (scancel's SIGTERM), not requeued: the status tells moco launch --wait
            return 128 + signal.Signals[stopped].value
        return 0

    def checkpoint(self) -> Any:
        """Called by submitit on the pre-emption signal: the same job again (it resumes by itself)."""
        import submitit

        return submitit.helpers.DelayedSubmission(Job(self.command))


def preemption_signal() -> int:
    import submitit

    name = "SIG" + submitit.JobEnvironment.USR_SIG
    if not hasattr(signal, name):
        raise ConfigError(f"SUBMITIT_PREEMPT_SIGNAL: {submitit.JobEnvironment.USR_SIG!r} is not a signal")
    return int(getattr(signal, name))


def run_moco(argv: list[str]) -> int:
    """``moco ARGV`` in this process; its exit status."""
    from cli import app

    try:
        app(args=argv, prog_name="moco")
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    return 0


def at_least(values: tuple[tuple[str, int | None, int], ...], where: str = "") -> None:
    """Each (option, value, least) given: a :class:`LaunchError` for the first value under its least."""
    for name, value, least in values:
        if value is not None and value < least:
            raise LaunchError(f"{name}{where}: must be >= {least}, got {value}")


def read_record(run_dir: Path) -> dict[str, Any]:
    try:
        record = read_json(run_dir / RECORD, what="job record")
    except UserError:  # none yet, or not one this module wrote: no state to resume from
        return {}
    return record if isinstance(record, dict) else {}


def write_record(run_dir: Path, record: dict[str, Any]) -> None:
    from moco_core.run.rundir import write_text_atomic

    run_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(run_dir / RECORD, json.dumps(record, indent=2) + "\n")


def executor(cluster: str, folder: Path, *, nodes: int, tasks: int, gpus_per_node: int, time_min: int,
             signal_delay: int, max_timeouts: int, job_name: str, slurm: dict[str, Any]) -> Any:
    """submitit's executor of ``cluster`` (slurm or local), its jobs' scripts and logs in ``folder``; ``slurm``:
    SLURM's own parameters where set (partition, account, array_parallelism...)."""
    import submitit

    if cluster == "local":
        made = submitit.LocalExecutor(folder=folder, max_num_timeout=max_timeouts)
        made.update_parameters(tasks_per_node=tasks, gpus_per_node=gpus_per_node, timeout_min=time_min,
                               signal_delay_s=signal_delay)
        return made
    made = submitit.SlurmExecutor(folder=folder, max_num_timeout=max_timeouts)
    made.update_parameters(nodes=nodes, ntasks_per_node=tasks, gpus_per_node=gpus_per_node or None,
                           time=time_min, signal_delay_s=signal_delay, job_name=job_name.replace(" ", "-"),
                           **{k: v for k, v in slurm.items() if v is not None})
    return made
