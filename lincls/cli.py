"""``moco eval linear`` and ``moco eval knn``: options in, plain function calls out."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from moco_core.cli import launch, report_result
from moco_core.config import ConfigError, seed_problem
from moco_core.errors import UserError, print_error

Pretrained = Annotated[str, typer.Argument(
    help="A checkpoint (ours, official main_moco.py's, or a torchvision ResNet state_dict), or 'random'.")]


def _fail(err: Exception) -> typer.Exit:
    print_error(err)
    return typer.Exit(2)


def linear_cli(
    pretrained: Pretrained,
    config: Annotated[str | None, typer.Option("--config", "-c", help="YAML file or preset (lincls_embedded). "
                                               "Without it: the paper's protocol.")] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Override a config value, e.g. optim.epochs=10.")] = None,
    data: Annotated[str | None, typer.Option(help="Root with train/ and val/ class folders, or 'embedded'.")] = None,
    output_dir: Annotated[str | None, typer.Option(help="Where config, metrics and result.json go.")] = None,
    arch: Annotated[str | None, typer.Option(help="Only needed for 'random' (default resnet50).")] = None,
    device: Annotated[str | None, typer.Option(help="auto, cpu, cuda or cuda:N.")] = None,
    workers: Annotated[int | None, typer.Option(help="Data-loading worker processes.")] = None,
    cached_features: Annotated[bool, typer.Option(
        "--cached-features", help="Train fc on features extracted once (fast; NOT the paper's protocol, and "
        "labelled so).")] = False,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the evaluation in --output-dir from its last "
                                         "epoch, or extend a finished one (--set optim.epochs=N).")] = False,
    nproc: Annotated[int, typer.Option(help="Processes to launch on this machine (torch.distributed).")] = 1,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress output.")] = False,
) -> None:
    """Linear classification on frozen features (lr 30, 100 epochs, BN in eval mode), with the sanity check."""
    from lincls.linear import load_linear_config

    try:
        cfg = load_linear_config(config, set_ or [], flags={
            "arch": arch, "data": {"path": data, "workers": workers},
            "run": {"output_dir": output_dir, "device": device, "cached_features": cached_features or None}})
    except UserError as err:
        raise _fail(err) from None
    if nproc < 1:
        raise _fail(ConfigError("--nproc: must be >= 1"))
    launch(nproc, run_linear, cfg, pretrained, quiet, resume)


def run_linear(cfg: object, pretrained: str, quiet: bool, resume: bool = False) -> None:
    """One process of ``moco eval linear``: user errors are one line (from rank 0), exit code 2 (1: diverged)."""
    from lincls.linear import linear_eval

    report_result(lambda: linear_eval(cfg, pretrained, show_progress=not quiet, resume=resume))  # type: ignore[arg-type]


def snapshots_cli(
    run_dir: Annotated[str, typer.Argument(help="A pretraining's run directory (snapshots: run.keep_every).")],
    config: Annotated[str | None, typer.Option("--config", "-c", help="YAML file or preset (lincls_embedded). "
                                               "Without it: the paper's protocol.")] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Override a config value, e.g. optim.epochs=10.")] = None,
    data: Annotated[str | None, typer.Option(help="Root with train/ and val/ class folders, or 'embedded'.")] = None,
    output_dir: Annotated[str | None, typer.Option(
        help="One evaluation directory per snapshot goes here (default: RUN_DIR/linear_snapshots).")] = None,
    device: Annotated[str | None, typer.Option(help="auto, cpu, cuda or cuda:N.")] = None,
    workers: Annotated[int | None, typer.Option(help="Data-loading worker processes.")] = None,
    follow: Annotated[bool, typer.Option("--follow", help="Also wait for the snapshots the run is still to write, "
                                         "evaluating each as it appears.")] = False,
    poll: Annotated[float, typer.Option(help="With --follow: seconds between looks.")] = 60.0,
    grace: Annotated[float, typer.Option(
        help="With --follow: stop (exit status 1) once no live process has held the pretraining's run directory "
        "(its .moco.lock) for this many seconds with no new snapshot; a requeued run may wait that long.")] = 3600.0,
    timeout: Annotated[float | None, typer.Option(
        help="With --follow: stop (exit status 1) after this many seconds with no new snapshot.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress output.")] = False,
) -> None:
    """The linear protocol on every snapshot of a pretraining (checkpoint_NNNN.pth.tar), for the report's curve.

    With --follow it ends with status 0 once every snapshot the run announces is evaluated, and with 1 and the
    reason when they will not come: the pretraining has finished or is not running (--grace), or --timeout.
    """
    from lincls.linear import linear_eval, load_linear_config
    from lincls.snapshots import evaluate_snapshots

    flags = {"data": {"path": data, "workers": workers}, "run": {"device": device}}

    def evaluate(snapshot: Path, out: Path, extra: dict, resume: bool) -> Path:
        cfg = load_linear_config(config, set_ or [], flags={**flags, "run": {**flags["run"], "output_dir": str(out)}})
        record = linear_eval(cfg, str(snapshot), show_progress=not quiet, extra=extra, resume=resume)
        print(f"result: {record}", flush=True)
        return record

    try:
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise ConfigError("moco eval snapshots runs in one process (with moco launch: --gpus-per-node 1)")
        for name, value, least in (("--poll", poll, 0.0), ("--grace", grace, 0.0), ("--timeout", timeout, 0.0)):
            if value is not None and not least < value < float("inf"):
                raise ConfigError(f"{name}: must be > 0 seconds, got {value}")
        load_linear_config(config, set_ or [], flags=flags)  # a bad option fails now, not at the first snapshot
        run = Path(run_dir)
        evaluate_snapshots(run, Path(output_dir) if output_dir else run / "linear_snapshots", evaluate,
                           follow=follow, poll_s=poll, grace_s=grace, timeout_s=timeout)
    except UserError as err:
        print_error(err)
        raise typer.Exit(err.exit_code) from None


def knn_cli(
    pretrained: Pretrained,
    data: Annotated[str, typer.Option(help="Root with train/ (the bank) and val/ (the queries), or 'embedded'.")],
    output_dir: Annotated[str, typer.Option(help="Where result.json goes.")] = "runs/knn",
    k: Annotated[int, typer.Option(help="Neighbours (InstDisc: 200).")] = 200,
    temperature: Annotated[float, typer.Option(help="Vote weight exp(sim / T) (InstDisc: 0.07).")] = 0.07,
    crop_size: Annotated[int, typer.Option(help="Center-crop size.")] = 224,
    resize: Annotated[int, typer.Option(help="Resize before the crop.")] = 256,
    batch_size: Annotated[int, typer.Option(help="Images per forward pass.")] = 256,
    arch: Annotated[str | None, typer.Option(help="Only needed for 'random'.")] = None,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N.")] = "auto",
    workers: Annotated[int, typer.Option(help="Data-loading worker processes.")] = 4,
    seed: Annotated[int, typer.Option(help="Draws the weights of 'random' (as eval linear's run.seed).")] = 0,
) -> None:
    """Weighted kNN accuracy (InstDisc) of frozen features: a quality signal in minutes, no training."""
    from lincls.knn import knn_eval
    from lincls.linear import LinearDataConfig

    if k < 1 or not 0 < temperature < float("inf") or resize < crop_size or crop_size < 8 or batch_size < 1:
        raise _fail(ConfigError("need --k >= 1, a finite --temperature > 0, 8 <= --crop-size <= --resize and "
                                "--batch-size >= 1"))
    if seed_problem(seed):
        raise _fail(ConfigError(f"--seed: {seed_problem(seed)}"))
    try:
        data_cfg = LinearDataConfig(path=data, crop_size=crop_size, resize=resize, workers=workers)
        record, _ = knn_eval(pretrained, data_cfg, Path(output_dir), k=k, temperature=temperature,
                             batch_size=batch_size, arch=arch, device_name=device, seed=seed)
    except UserError as err:
        raise _fail(err) from None
    print(f"result: {record}")
