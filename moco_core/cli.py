"""``moco pretrain``: options in, a plain ``pretrain(cfg)`` call out.

Nothing here imports torch at module level: ``moco --help`` and a bad option answer before it loads.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from moco_core.config import ConfigError, config_yaml, data_sources, load_config, presets_for, replace
from moco_core.errors import UserError, print_error, show
from moco_core.model.weights.formats import WEIGHTS_FORMATS
from moco_core.model.weights.readers import files_read
from moco_core.pretrain_config import PretrainConfig
from moco_core.run.naming import evaluation_dir, pretrain_dir

# The arguments every evaluation's command line shares, worded once (classification, the dense probes, the
# training-free probes): WEIGHTS and --weights-format.
Pretrained = Annotated[str, typer.Argument(
    metavar="WEIGHTS", help=f"A checkpoint ({files_read()}), a pretraining's run directory (its last checkpoint), "
    f"or 'random' (with --arch).")]
WeightsFormat = Annotated[str | None, typer.Option(
    help=f"The method that trained WEIGHTS, where the file does not say (run.weights_format): "
    f"{', '.join(WEIGHTS_FORMATS)}. It sets the encoder read and the input normalisation; a file that says what "
    f"it is needs none.")]
Arch = Annotated[str | None, typer.Option(
    help="The arch of 'random': a ResNet, or a ViT such as vit_small (a file names its own).")]
Device = Annotated[str | None, typer.Option(help="auto, cpu, cuda or cuda:N.")]
PrintConfig = Annotated[bool, typer.Option("--print-config", help="Print the resolved config as YAML and exit.")]


def resolve_pretrain_config(
    config: str | None, overrides: list[str], flags: dict[str, dict[str, Any]], resume: str | None,
    base: dict[str, Any] | None
) -> PretrainConfig:
    """Defaults < the resumed checkpoint's stored config (``base``: :func:`stored_config` of ``resume``) < --config
    < --set < explicit flags.

    A resumed run writes where the user pointed: ``--output-dir`` or ``--set run.output_dir`` when given, else the
    directory passed to ``--resume-from`` (or the checkpoint's own directory), never the directory recorded in the
    checkpoint, which is where the run was before it was copied or moved.
    """
    if resume:
        chosen = flags.get("run", {}).get("output_dir") is not None or any(
            o.partition("=")[0].strip() == "run.output_dir" for o in overrides)
        if not chosen:
            path = Path(resume)
            flags.setdefault("run", {})["output_dir"] = str(path if path.is_dir() else path.parent)
    return load_config(PretrainConfig, config, overrides, base=base, flags=flags)


def stored_config(resume: str) -> dict[str, Any] | None:
    """The config a checkpoint to resume (a file or a run directory) keeps, None where it keeps none."""
    from moco_core import checkpoint

    stored = checkpoint.load(checkpoint.resolve(resume)).get("config")
    return stored if isinstance(stored, dict) else None


def old_forms(argv: list[str]) -> list[str]:
    """The command line as the commands parse it: ``pretrain --resume PATH`` (the old form, when --resume took a
    path) becomes ``--resume-from PATH``, with a note; a ``--set`` whose value has no '=' is a UserError saying so
    (the parser would report the value after it as an unexpected extra argument). Arguments after ``--`` belong
    to a wrapped command (trials, launch), which is parsed on its own."""
    head, sep, tail = (argv[: argv.index("--")], ["--"], argv[argv.index("--") + 1:]) if "--" in argv else (
        argv, [], [])
    out: list[str] = []
    i = 0
    while i < len(head):
        arg = head[i]
        value = head[i + 1] if i + 1 < len(head) else None
        if arg == "--set" and value is not None and "=" not in value:
            extra = f" {head[i + 2]}" if i + 2 < len(head) and not head[i + 2].startswith("-") else ""
            raise ConfigError(f"--set {show(value)}{extra}: expected key=value, e.g. --set "
                              f"{value or 'optim.lr'}={head[i + 2] if extra else '0.1'}")
        if arg.startswith("--set=") and "=" not in arg[len("--set="):]:
            raise ConfigError(f"{show(arg)}: expected --set key=value, e.g. --set optim.lr=0.1")
        if head[:1] == ["pretrain"] and (arg == "--resume" and value is not None and not value.startswith("-")
                                         or arg.startswith("--resume=")):
            path = arg.partition("=")[2] if arg.startswith("--resume=") else value
            print(f"note: --resume PATH is the old form; now --resume-from {path} (or --resume alone: the run in "
                  f"--output-dir)", file=sys.stderr)
            out += ["--resume-from", str(path)]
            i += 1 if arg.startswith("--resume=") else 2
            continue
        out.append(arg)
        i += 1
    return out + sep + tail


def preset_list(command: str) -> str:
    """The presets of ``configs/`` a command takes, for its --help (``embedded, moco_v1_200ep, ...``)."""
    return ", ".join(presets_for(command))


def with_output_dir(cfg: Any, preset: str | None, task: str, weights: str, arch: str | None,
                    arch_option: str) -> Any:
    """``cfg`` with ``run.output_dir`` set: as given, else ``runs/<preset>[_<data>]/<weights>``
    (:mod:`moco_core.run.naming`).

    Also where 'random' without an arch stops, before any data is read: which ResNet to draw is not guessed."""
    if weights == "random" and not arch:
        raise ConfigError(f"'random' needs the ResNet to initialise: pass {arch_option} (resnet50 for the paper's "
                          f"protocol, resnet18 for the embedded presets)")
    if cfg.run.output_dir is not None:
        return cfg
    return replace(cfg, run={"output_dir": evaluation_dir(preset, task, weights, arch, cfg.data.path)})


def run_pretrain(cfg: PretrainConfig, resume: str | None, quiet: bool) -> None:
    """Run in this process; user errors become one line on stderr and a non-zero exit, never a traceback. A run a
    signal stopped (with its checkpoint) exits with 128 + the signal's number (143 for SIGTERM), as a process that
    signal ended: ``moco pretrain ... && moco eval ...`` never evaluates a half-trained checkpoint."""
    from moco_core.run import preemption
    from moco_core.run.train import pretrain  # torch and torchvision load only when a run starts

    main = int(os.environ.get("RANK", "0")) == 0  # the process group is gone by the time we report
    try:
        run_dir = pretrain(cfg, resume=resume, show_progress=not quiet)
    except UserError as err:
        if main:  # every rank meets the same bad input: one report is enough
            print_error(err)
        sys.exit(err.exit_code)
    except RuntimeError as err:
        from moco_core import distributed

        peer = distributed.lost_peer(err) if int(os.environ.get("WORLD_SIZE", "1")) > 1 else None
        if peer is None:
            raise
        print_error(f"rank {os.environ.get('RANK', '?')}: {peer}")  # each rank's own log
        sys.exit(1)
    if main and not quiet:
        print(f"run directory: {run_dir}")
    if preemption.last_stop is not None:
        sys.exit(preemption.stop_status(preemption.last_stop))


def pretrain_cli(
    config: Annotated[str | None, typer.Option(
        "--config", "-c", help=f"YAML file, or a preset of configs/: {preset_list('pretrain')}. Without it: the "
        "paper's defaults.")] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Override a config value, e.g. --set model.temperature=0.2 (repeatable).")] = None,
    data: Annotated[str | None, typer.Option(help="Dataset root (ImageFolder), or 'embedded'.")] = None,
    output_dir: Annotated[str | None, typer.Option(help="Run directory (config.yaml, metrics, checkpoints).")] = None,
    device: Annotated[str | None, typer.Option(help="auto, cpu, cuda or cuda:N.")] = None,
    seed: Annotated[int | None, typer.Option(help="Random seed.")] = None,
    workers: Annotated[int | None, typer.Option(help="Data-loading worker processes per training process.")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the run in its output directory (--output-dir, "
                                         "else the preset's), or extend it (--set optim.epochs=N).")] = False,
    resume_from: Annotated[str | None, typer.Option(
        help="Continue from a checkpoint elsewhere (ours, official main_moco.py's) or a run directory, writing to "
        "--output-dir (default: that directory).")] = None,
    nproc: Annotated[int, typer.Option(help="Processes to launch on this machine (torch.distributed).")] = 1,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress output.")] = False,
    print_config: Annotated[bool, typer.Option("--print-config",
                                               help="Print the resolved config as YAML and exit.")] = False,
) -> None:
    """Pretrain MoCo v1, v2 or v3 (arXiv 1911.05722, 2003.04297, 2104.02057; ResNets and ViTs) on an image folder
    or the embedded dataset."""
    flags = {"data": {"path": data, "workers": workers},
             "run": {"output_dir": output_dir, "device": device, "seed": seed}}
    try:
        if resume and resume_from:
            raise ConfigError("--resume continues the run in --output-dir; --resume-from names another checkpoint: "
                              "give one of them")
        if resume:  # where the run is: --output-dir or --set run.output_dir, else the preset's (or default) one
            resume_from = load_config(PretrainConfig, config, set_ or [], flags=flags,
                                      check=False).run.output_dir or pretrain_dir(config)
        base = stored_config(resume_from) if resume_from else None
        cfg = resolve_pretrain_config(config, set_ or [], flags, resume_from, base)
        if cfg.run.output_dir is None:
            cfg = replace(cfg, run={"output_dir": pretrain_dir(config)})
        from moco_core.run.runtime import resolve_device
        from moco_core.run.train import check_run

        launched = os.environ.get("WORLD_SIZE", "1")
        world = nproc if nproc > 1 else int(launched) if launched.isdigit() and int(launched) > 0 else 1
        check_run(cfg, world, resolve_device(cfg.run.device), None)  # --print-config too: what the run would refuse
        sources = data_sources(PretrainConfig, config, set_ or [], base, flags) if print_config else None
    except UserError as err:
        print_error(err)
        raise typer.Exit(2) from None
    print_or_launch(cfg, print_config, nproc, run_pretrain, cfg, resume_from, quiet, sources=sources)


def print_or_launch(cfg: Any, print_config: bool, nproc: int, fn: Callable[..., None], *args: Any,
                    sources: dict[str, str] | None = None) -> None:
    """``--print-config``: show the resolved config as YAML (``sources``: where its data paths come from, in a
    comment); otherwise run ``fn(*args)`` in ``nproc`` processes."""
    if print_config:
        print(config_yaml(cfg, sources), end="")
        return
    if nproc < 1:
        print_error("--nproc: must be >= 1")
        raise typer.Exit(2)
    cpus, gpus = os.cpu_count() or 1, _gpus()
    if nproc > max(cpus, gpus):  # a process a GPU, or a CPU core: beyond that, a typo (23 digits: a traceback)
        print_error(f"--nproc: {nproc} processes on a machine of {cpus} CPU cores and {gpus} GPUs; at most "
                    f"{max(cpus, gpus)}")
        raise typer.Exit(2)
    launch(nproc, fn, *args)


def _gpus() -> int:
    import torch

    return torch.cuda.device_count()


def report_result(evaluate: Callable[[], Path], *, rerun: Callable[[], str] | None = None) -> None:
    """One process of an evaluation: rank 0 prints ``result: PATH`` of the record ``evaluate()`` wrote; a user error
    is one line, from rank 0 only (every rank meets the same bad input), and the process exits with its code.

    SIGTERM or SIGINT stops the evaluation wherever it is (training, testing, scoring): one line says so with the
    command that continues it (``rerun()``, see :func:`evaluation_rerun`), and the process exits with 128 + the
    signal's number, so that ``moco eval ... && moco report`` stops there."""
    from moco_core.run.preemption import Stopped, Stopper, stopper_installed

    main = int(os.environ.get("RANK", "0")) == 0
    outer = stopper_installed()  # run by a command that runs others (moco trials): the stop is that command's
    try:
        if outer:
            record = evaluate()
        else:
            with Stopper() as stopper:
                stopper.doing = "the evaluation"
                record = evaluate()
    except UserError as err:
        if main:
            print_error(err)
        sys.exit(err.exit_code)
    except Stopped as stop:
        if outer:
            raise
        if main:
            print(f"{stop}; continue with: {rerun()}" if rerun is not None else str(stop), file=sys.stderr,
                  flush=True)
        sys.exit(stop.exit_code)
    if main:
        print(f"result: {record}")


def evaluation_rerun(recorded: dict[str, Any] | None, weights: str, output_dir: str) -> Callable[[], str] | None:
    """The command that continues an evaluation stopped part-way, built when it stops from how it was asked for
    (:func:`moco_core.commands.invocation`): the same preset, overrides, options and mode, its run directory, and
    ``--resume`` where that directory holds a checkpoint to continue from (else it starts again). None where the
    invocation was not recorded."""
    if not recorded:
        return None

    def rerun() -> str:
        from moco_core.commands import InvalidInvocation, command_line
        from moco_core.run.rundir import last_checkpoint  # torch: only when a command stops

        resume = last_checkpoint(Path(output_dir), recorded["command"]) is not None
        try:
            return command_line(recorded, weights=weights, output_dir=output_dir, resume=resume)
        except InvalidInvocation as err:  # our own options: would be a bug, said rather than hidden
            return f"(no command: {err})"

    return rerun


def launch(nproc: int, fn: Callable[..., None], *args: Any) -> None:
    """Run ``fn(*args)`` here, or in ``nproc`` processes; a failed process becomes this command's exit code."""
    if nproc == 1:
        fn(*args)
        return
    import torch.multiprocessing as mp

    from moco_core import distributed

    try:
        distributed.launch(nproc, fn, *args)
    except mp.ProcessExitedException as err:
        if err.signal_name:  # killed from outside (the OOM killer, a user): nobody has reported it yet
            print_error(f"process {err.error_index} was killed by {err.signal_name}; the others were stopped; the "
                        f"last checkpoint is intact")
            raise typer.Exit(1) from None
        raise typer.Exit(err.exit_code or 1) from None  # a user error, already reported by that process
    except mp.ProcessRaisedException as err:  # a crash: that process printed its traceback
        last = str(err).strip().splitlines()[-1]
        print_error(f"process {err.error_index} failed: {last}")
        raise typer.Exit(1) from None
