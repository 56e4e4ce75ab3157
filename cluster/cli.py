"""``moco launch [options] -- COMMAND``: submit a pretraining or an evaluation as a job (submitit); ``moco trials``;
``moco bench MATRIX.yaml``: many checkpoints under many evaluations."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from moco_core.commands import COMMANDS
from moco_core.errors import UserError, print_error

CLUSTERS = ("slurm", "local")


def launch_cli(
    ctx: typer.Context,
    cluster: Annotated[str, typer.Option(help="slurm (sbatch), or local: this machine, the same job (to try it).")]
    = "slurm",
    nodes: Annotated[int, typer.Option(help="Machines.")] = 1,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs per machine; one process each.")] = 8,
    tasks_per_node: Annotated[int | None, typer.Option(
        help="Processes per machine (default: one per GPU; set it for CPU jobs).")] = None,
    cpus_per_task: Annotated[int | None, typer.Option(help="CPU cores per process (data loading).")] = None,
    mem_gb: Annotated[int | None, typer.Option(help="Memory per machine, GiB.")] = None,
    time_min: Annotated[int, typer.Option("--time", help="Time limit per start, minutes; the job checkpoints "
                                          "and requeues itself before it.")] = 4320,
    partition: Annotated[str | None, typer.Option(help="SLURM partition.")] = None,
    account: Annotated[str | None, typer.Option(help="SLURM account.")] = None,
    constraint: Annotated[str | None, typer.Option(help="SLURM constraint (e.g. a GPU type).")] = None,
    signal_delay: Annotated[int, typer.Option(help="Seconds before the time limit when the job is told to stop "
                                              "(it finishes its step and checkpoints).")] = 120,
    max_timeouts: Annotated[int, typer.Option(help="Requeues after hitting the time limit (pre-emptions are not "
                                              "counted).")] = 20,
    folder: Annotated[str | None, typer.Option(help="Job scripts and logs (default: RUN_DIR/jobs).")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the job to end; exit with its status (128 + N "
                                       "when signal N stopped the job, or this wait, which stops the job).")] = False,
) -> None:
    """Run COMMAND (pretrain or any moco eval command; after --) as a job that requeues itself.

    Example: moco launch --nodes 2 --gpus-per-node 8 --partition learn -- pretrain -c moco_v2_200ep
    --data /data/imagenet --output-dir /checkpoints/v2_200ep
    """
    try:
        job, record = submit(list(ctx.args), cluster=cluster, nodes=nodes, gpus_per_node=gpus_per_node,
                             tasks_per_node=tasks_per_node, cpus_per_task=cpus_per_task, mem_gb=mem_gb,
                             time_min=time_min, partition=partition, account=account, constraint=constraint,
                             signal_delay=signal_delay, max_timeouts=max_timeouts, folder=folder)
    except UserError as err:
        print_error(err)
        raise typer.Exit(err.exit_code) from None
    print(f"submitted job {record['job_id']} ({cluster}, {record['tasks']} processes); run directory: "
          f"{record['run_dir']}; logs: {record['logs']}")
    if wait:
        from moco_core.run.preemption import Stopped, report_stop

        try:
            code = wait_for(job, cluster)
        except Stopped as stop:
            raise typer.Exit(report_stop(stop, ctx)) from None
        raise typer.Exit(code)


def trials_cli(
    ctx: typer.Context,
    trials: Annotated[int, typer.Argument(help="How many trials (seeds --seed, --seed + 1, ...).")],
    seed: Annotated[int, typer.Option(help="The first trial's seed.")] = 0,
) -> None:
    """Run COMMAND (pretrain or any moco eval command but snapshots; after --) with N seeds, each into
    OUTPUT_DIR/seed_<s>.

    Example: moco trials 3 -- eval linear runs/moco/seed_{seed}/checkpoint_last.pth.tar -c lincls_embedded
    --output-dir runs/linear ({seed} becomes each trial's seed). Run again, it continues where it stopped; SIGTERM
    or SIGINT stops it as a whole (exit status 128 + the signal's number) with the command that continues.
    """
    from cluster.trials import run_trials
    from moco_core.config import seed_problem
    from moco_core.run.preemption import Stopped, report_stop

    problem = seed_problem(seed) or (seed_problem(seed + trials - 1) if trials > 0 else None)
    if problem:
        print_error(f"--seed: {problem}")
        raise typer.Exit(2)
    try:
        code = run_trials(list(ctx.args), trials, seed)
    except UserError as err:
        print_error(err)
        raise typer.Exit(err.exit_code) from None
    except Stopped as stop:
        raise typer.Exit(report_stop(stop, ctx)) from None
    raise typer.Exit(code)


def submit(argv: list[str], *, cluster: str, nodes: int, gpus_per_node: int, tasks_per_node: int | None,
           cpus_per_task: int | None, mem_gb: int | None, time_min: int, partition: str | None,
           account: str | None, constraint: str | None, signal_delay: int, max_timeouts: int,
           folder: str | None) -> tuple[Any, dict[str, Any]]:
    """Check the command, submit it, and add the submission to the run directory's ``launch.json``."""
    from cluster.job import Command, Job, LaunchError, at_least, executor, read_record, run_moco, write_record

    if cluster not in CLUSTERS:
        raise LaunchError(f"--cluster: expected one of {', '.join(CLUSTERS)}, got {cluster!r}")
    at_least((("--nodes", nodes, 1), ("--gpus-per-node", gpus_per_node, 0), ("--time", time_min, 1),
              ("--tasks-per-node", tasks_per_node, 1), ("--signal-delay", signal_delay, 0),
              ("--max-timeouts", max_timeouts, 0), ("--cpus-per-task", cpus_per_task, 1), ("--mem-gb", mem_gb, 1)))
    if cluster == "local" and nodes > 1:
        raise LaunchError("--nodes: the local cluster is this one machine")
    try:
        import submitit  # noqa: F401 - only whether it is there
    except ImportError:
        raise LaunchError("moco launch needs submitit: pip install 'moco[slurm]' (or pip install submitit)") from None
    command = Command.parse(argv)
    # what the run would refuse: refused before queueing
    if COMMANDS[command.name].precheck:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = run_moco([*command.name.split(), *command.args, "--print-config"])
        if code:
            raise LaunchError(f"moco {command.name}: " + (err.getvalue().strip().removeprefix("error: ") or
                                                          f"exit status {code}"))
    tasks = tasks_per_node or max(gpus_per_node, 1)
    jobs = Path(os.path.expanduser(folder)).absolute() if folder else command.run_dir / "jobs"
    try:
        job = executor(cluster, jobs, nodes=nodes, tasks=tasks, gpus_per_node=gpus_per_node, time_min=time_min,
                        signal_delay=signal_delay, max_timeouts=max_timeouts, job_name=f"moco-{command.name}",
                        slurm={"partition": partition, "account": account, "constraint": constraint,
                               "mem": f"{mem_gb}GB" if mem_gb else None, "cpus_per_task": cpus_per_task},
                        ).submit(Job(command))
    except Exception as err:  # no sbatch, or the scheduler refused: what it said, on one line
        raise LaunchError(f"submitting to {cluster} failed: {err}") from None
    logs = str(job.paths.stdout).replace(f"_{job.paths.task_id}_", "_<rank>_") if hasattr(job, "paths") else ""
    entry = {"job_id": str(job.job_id), "cluster": cluster, "tasks": nodes * tasks, "nodes": nodes,
             "gpus_per_node": gpus_per_node, "time_min": time_min, "argv": ["moco", *argv], "folder": str(jobs),
             "logs": logs, "submitted": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    if cluster == "slurm":
        entry["script"] = str(jobs / f"{job.job_id}_submission.sh")
    record = read_record(command.run_dir)
    record.setdefault("submissions", []).append(entry)
    write_record(command.run_dir, record)
    return job, {**entry, "run_dir": str(command.run_dir)}


def wait_for(job: Any, cluster: str) -> int:
    """Block until ``job`` ends: 0 when it succeeded, else 1 with the error its command printed (or raised).

    :class:`moco_core.run.preemption.Stopped` when a signal stopped the job's command (its tasks say so by their
    status), or this process: the job is then told to stop too, so that submitting the same command again
    continues it rather than meeting it still running.
    """
    from moco_core.run.preemption import Stopped, Stopper

    with Stopper() as stopper:
        stopper.doing = f"the wait for job {job.job_id}"
        try:
            statuses = job.results()  # one per task
        except Stopped as stop:
            stop_job(job, cluster)
            raise Stopped(stop.signal_name, f"{stopper.doing} (the job was told to stop too)") from None
        except Exception as err:  # submitit re-raises a failed task with its traceback as text
            print_error(f"job {job.job_id} failed: {_cause(job, err)} (log: {job.paths.stderr})")
            return 1
    stopped = max((s for s in statuses if isinstance(s, int)), default=0)
    if stopped > 128:
        raise Stopped(signal.Signals(stopped - 128).name, f"job {job.job_id} (its checkpoint is written)")
    return 0


STOP_WAIT_S = 60.0  # what schedulers leave between their stop and SIGKILL (SLURM's KillWait: 30 s), and more


def stop_job(job: Any, cluster: str) -> None:
    """SIGTERM to ``job``'s tasks, as ``scancel`` sends it, so a pretraining writes its checkpoint; then wait for
    the job to end, ``STOP_WAIT_S`` at most. On this machine the signal goes to submitit's controller, which
    forwards it (its own cancel sends SIGINT, then SIGKILL a second later: no time for a checkpoint)."""
    if cluster == "local":
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(job.job_id), signal.SIGTERM)  # a local job's id is its controller's pid
    else:
        with contextlib.suppress(OSError):  # no scancel on this machine: the job ends at its time limit
            job.cancel(check=False)
    deadline = time.monotonic() + STOP_WAIT_S
    while not job.done() and time.monotonic() < deadline:
        time.sleep(0.2)


def _cause(job: Any, err: Exception) -> str:
    try:
        log = job.stderr() or ""
    except Exception:  # a log that cannot be read: the exception says enough
        log = ""
    said = [line.removeprefix("error: ") for line in log.splitlines() if line.startswith("error: ")]
    raised = [line.strip() for line in str(err).splitlines() if line[:1].isalpha() and "Error" in line.split(":")[0]]
    return (said or raised or [type(err).__name__])[-1]


def bench_cli(
    ctx: typer.Context,
    matrix: Annotated[str, typer.Argument(help="The matrix: a YAML file naming checkpoints and evaluations, or one "
                                          "of configs/matrices/ (embedded).", show_default=False)],
    output_dir: Annotated[str | None, typer.Option(help="Where the cells' run directories go, "
                                                   "OUTPUT_DIR/<checkpoint>/<evaluation> (default: the matrix's "
                                                   "output_dir).")] = None,
    devices: Annotated[str, typer.Option(help="Where cells run here: cpu, or cuda:0,cuda:1 (auto: every GPU, else "
                                         "cpu); one cell a device at a time, or --jobs.")] = "auto",
    jobs: Annotated[int, typer.Option(help="Cells at a time on each device (CPU processes, or small fits sharing "
                                      "a GPU).")] = 1,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the cells that stopped with a checkpoint "
                                         "(without it they wait; finished cells are always skipped).")] = False,
    slurm: Annotated[bool, typer.Option("--slurm", help="Submit the cells left as one SLURM job array (submitit); "
                                        "each task requeues itself when pre-empted and resumes.")] = False,
    partition: Annotated[str | None, typer.Option(help="SLURM partition (else the matrix's slurm.partition).")]
    = None,
    account: Annotated[str | None, typer.Option(help="SLURM account.")] = None,
    constraint: Annotated[str | None, typer.Option(help="SLURM constraint (e.g. a GPU type).")] = None,
    time_min: Annotated[int | None, typer.Option("--time", help="Minutes a start of a cell (default 240).")] = None,
    gpus_per_task: Annotated[int | None, typer.Option(help="GPUs of each cell (default 1).")] = None,
    cpus_per_task: Annotated[int | None, typer.Option(help="CPU cores of each cell.")] = None,
    mem_gb: Annotated[int | None, typer.Option(help="Memory of each cell, GiB.")] = None,
    array_parallelism: Annotated[int | None, typer.Option(help="Cells running at once (default 32).")] = None,
    folder: Annotated[str | None, typer.Option(help="Job scripts and logs (default: OUTPUT_DIR/jobs).")] = None,
    show_status: Annotated[bool, typer.Option("--status", help="Print the matrix's cells (done, running with its "
                                              "job, queued, failed with its log's last line) and run nothing.")]
    = False,
) -> None:
    """Evaluate every checkpoint of MATRIX with every evaluation, each cell in its own run directory, here or on
    SLURM (--slurm).

    Example: moco bench embedded --devices cpu --jobs 2 (configs/matrices/embedded.yaml)
    """
    import dataclasses

    from cluster.bench import devices_of, run_local, status, submit_slurm
    from cluster.matrix import JOBS, cells_of, read_matrix
    from moco_core.run.preemption import Stopped, report_stop

    try:
        read = read_matrix(matrix)
        cells = cells_of(read, output_dir)
        if show_status:
            print(status(cells))
            return
        if not slurm:
            raise typer.Exit(run_local(cells, devices=devices_of(devices), jobs=jobs, resume=resume))
        given = {"partition": partition, "account": account, "constraint": constraint, "time": time_min,
                 "gpus_per_task": gpus_per_task, "cpus_per_task": cpus_per_task, "mem_gb": mem_gb,
                 "array_parallelism": array_parallelism}
        options = dataclasses.replace(read.slurm, **{k: v for k, v in given.items() if v is not None})
        root = cells[0].run_dir.parent.parent
        submit_slurm(cells, slurm=options, resume=resume,
                     folder=Path(os.path.expanduser(folder)).absolute() if folder else root.absolute() / JOBS)
    except UserError as err:
        print_error(err)
        raise typer.Exit(err.exit_code) from None
    except Stopped as stop:
        raise typer.Exit(report_stop(stop, ctx)) from None
