"""``moco pretrain``: options in, a plain ``pretrain(cfg)`` call out."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from moco_core import checkpoint, distributed
from moco_core.config import PretrainConfig, load_config, to_dict
from moco_core.errors import UserError, print_error


def resolve_pretrain_config(
    config: str | None, overrides: list[str], flags: dict[str, dict[str, Any]], resume: str | None
) -> PretrainConfig:
    """Defaults < the resumed checkpoint's stored config < --config < --set < explicit flags.

    A resumed run writes where the user pointed: ``--output-dir`` or ``--set run.output_dir`` when given, else the
    directory passed to ``--resume`` (or the checkpoint's own directory), never the directory recorded in the
    checkpoint, which is where the run was before it was copied or moved.
    """
    base = None
    if resume:
        stored = checkpoint.load(checkpoint.resolve(resume)).get("config")
        base = stored if isinstance(stored, dict) else None
        chosen = flags.get("run", {}).get("output_dir") is not None or any(
            o.partition("=")[0].strip() == "run.output_dir" for o in overrides)
        if not chosen:
            path = Path(resume)
            flags.setdefault("run", {})["output_dir"] = str(path if path.is_dir() else path.parent)
    return load_config(PretrainConfig, config, overrides, base=base, flags=flags)


def run_pretrain(cfg: PretrainConfig, resume: str | None, quiet: bool) -> None:
    """Run in this process; user errors become one line on stderr and a non-zero exit, never a traceback."""
    from moco_core.train import pretrain  # torch and torchvision load only when a run starts

    main = int(os.environ.get("RANK", "0")) == 0  # the process group is gone by the time we report
    try:
        run_dir = pretrain(cfg, resume=resume, show_progress=not quiet)
    except UserError as err:
        if main:  # every rank meets the same bad input: one report is enough
            print_error(err)
        sys.exit(err.exit_code)
    except RuntimeError as err:
        peer = distributed.lost_peer(err) if int(os.environ.get("WORLD_SIZE", "1")) > 1 else None
        if peer is None:
            raise
        print_error(f"rank {os.environ.get('RANK', '?')}: {peer}")  # each rank's own log
        sys.exit(1)
    if main and not quiet:
        print(f"run directory: {run_dir}")


def pretrain_cli(
    config: Annotated[str | None, typer.Option(
        "--config", "-c", help="YAML file, or a preset of configs/: embedded, moco_v1_200ep, moco_v2_200ep, "
        "moco_v2_800ep. Without it: the paper's defaults.")] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Override a config value, e.g. --set model.temperature=0.2 (repeatable).")] = None,
    data: Annotated[str | None, typer.Option(help="Dataset root (ImageFolder), or 'embedded'.")] = None,
    output_dir: Annotated[str | None, typer.Option(help="Run directory (config.yaml, metrics, checkpoints).")] = None,
    device: Annotated[str | None, typer.Option(help="auto, cpu, cuda or cuda:N.")] = None,
    seed: Annotated[int | None, typer.Option(help="Random seed.")] = None,
    workers: Annotated[int | None, typer.Option(help="Data-loading worker processes per training process.")] = None,
    resume: Annotated[str | None, typer.Option(
        help="Continue a run: its directory or a checkpoint (ours or official main_moco.py's).")] = None,
    nproc: Annotated[int, typer.Option(help="Processes to launch on this machine (torch.distributed).")] = 1,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress output.")] = False,
    print_config: Annotated[bool, typer.Option("--print-config",
                                               help="Print the resolved config as YAML and exit.")] = False,
) -> None:
    """Pretrain MoCo v1/v2 (arXiv 1911.05722) on an image folder or the embedded dataset."""
    flags = {"data": {"path": data, "workers": workers},
             "run": {"output_dir": output_dir, "device": device, "seed": seed}}
    try:
        cfg = resolve_pretrain_config(config, set_ or [], flags, resume)
        from moco_core.runtime import resolve_device
        from moco_core.train import check_run

        launched = os.environ.get("WORLD_SIZE", "1")
        world = nproc if nproc > 1 else int(launched) if launched.isdigit() and int(launched) > 0 else 1
        check_run(cfg, world, resolve_device(cfg.run.device), None)  # --print-config too: what the run would refuse
    except UserError as err:
        print_error(err)
        raise typer.Exit(2) from None
    print_or_launch(cfg, print_config, nproc, run_pretrain, cfg, resume, quiet)


def print_or_launch(cfg: Any, print_config: bool, nproc: int, fn: Callable[..., None], *args: Any) -> None:
    """``--print-config``: show the resolved config as YAML; otherwise run ``fn(*args)`` in ``nproc`` processes."""
    if print_config:
        import yaml

        print(yaml.safe_dump(to_dict(cfg), sort_keys=False), end="")
        return
    if nproc < 1:
        print_error("--nproc: must be >= 1")
        raise typer.Exit(2)
    launch(nproc, fn, *args)


def report_result(evaluate: Callable[[], Path]) -> None:
    """One process of an evaluation: rank 0 prints ``result: PATH`` of the record ``evaluate()`` wrote; a user error
    is one line, from rank 0 only (every rank meets the same bad input), and the process exits with its code."""
    main = int(os.environ.get("RANK", "0")) == 0
    try:
        record = evaluate()
    except UserError as err:
        if main:
            print_error(err)
        sys.exit(err.exit_code)
    if main:
        print(f"result: {record}")


def launch(nproc: int, fn: Callable[..., None], *args: Any) -> None:
    """Run ``fn(*args)`` here, or in ``nproc`` processes; a failed process becomes this command's exit code."""
    if nproc == 1:
        fn(*args)
        return
    import torch.multiprocessing as mp

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
