"""``moco eval linear``, ``finetune``, ``knn``, ``snapshots`` and ``transfer``: options in, plain function calls out."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from moco_core import smoke
from moco_core.cli import (
    Arch,
    Device,
    Pretrained,
    PrintConfig,
    WeightsFormat,
    evaluation_rerun,
    preset_list,
    print_or_launch,
    report_result,
    with_output_dir,
)
from moco_core.commands import invocation
from moco_core.config import ConfigError
from moco_core.errors import UserError, print_error

if TYPE_CHECKING:
    from classification.knn import KnnConfig



Seed = Annotated[int | None, typer.Option(
    help="The run's seed (run.seed): the weights of 'random', the head's initial weights, the order of the images.")]
Labels = Annotated[str | None, typer.Option(
    help="Train on a class-balanced fraction of train/'s labels, e.g. 1% or 10% (data.labels; drawn with "
    "data.subset_seed, 0 by default). Val stays whole.")]
SubsetFile = Annotated[str | None, typer.Option(
    help="Train on the images a file names, one per line in SimCLR's format (imagenet_subsets/1percent.txt: "
    "n01440764_10026.JPEG) (data.subset). Val stays whole.")]


def _subset_output_dir(cfg: Any, given: str | None) -> Any:
    """A run on a subset of the labels writes ``runs/<preset>_labels10pct/...`` (``_subset-<file stem>``) when no
    --output-dir is given: beside, not over, the run on every label."""
    from moco_core.config import replace

    d = cfg.data
    if given is not None or (d.labels is None and d.subset is None):
        return cfg
    suffix = f"labels{d.labels.strip().rstrip('%').strip()}pct" if d.labels else f"subset-{Path(d.subset).stem}"
    out = Path(cfg.run.output_dir)
    return replace(cfg, run={"output_dir": str(out.parent.with_name(f"{out.parent.name}_{suffix}") / out.name)})


def _fail(err: Exception) -> typer.Exit:
    print_error(err)
    return typer.Exit(2)


def linear_cli(
    pretrained: Pretrained,
    config: Annotated[str | None, typer.Option("--config", "-c", help="YAML file or preset "
                                               f"({preset_list('linear')}). Without it: the protocol of the "
                                               "weights' paper (v1/v2's; MoCo v3's for v3 weights and ViTs).")]
    = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Override a config value, e.g. optim.epochs=10 (milestones follow).")] = None,
    data: Annotated[str | None, typer.Option(help="Root with train/ and val/ (or test/) class folders, "
                                             "Flowers-102 or Pets as torchvision downloads them, or 'embedded'.")]
    = None,
    labels: Labels = None,
    subset: SubsetFile = None,
    output_dir: Annotated[str | None, typer.Option(
        help="Where config, metrics and result.json go (default: runs/<preset>/<weights>).")] = None,
    arch: Arch = None,
    device: Device = None,
    workers: Annotated[int | None, typer.Option(help="Data-loading worker processes.")] = None,
    seed: Seed = None,
    cached_features: Annotated[bool, typer.Option(
        "--cached-features", help="Train fc on features extracted once (fast; NOT the paper's protocol, and "
        "labelled so).")] = False,
    grid: Annotated[bool, typer.Option(
        "--grid", help="Train a grid of linear heads (the preset's lrs x features: lincls_grid's are DINOv2's 13, "
        "1e-5 to 0.1; lincls_grid_embedded's and lincls_grid_32px's 0.01 to 100) on one frozen pass a batch and "
        "report the one chosen on held-out train images (protocol linear-grid, NOT the paper's); presets "
        "lincls_grid, lincls_grid_embedded, lincls_grid_32px imply it.")] = False,
    robustness: Annotated[str | None, typer.Option(
        help="With --grid: a folder holding ImageNet-V2, -A, -R, -Sketch and ReaL's real.json as released; the "
        "chosen head is scored on each found (robustness.root).")] = None,
    shots: Annotated[str | None, typer.Option(
        help="Few-shot instead: k labelled images a class, e.g. 1,5,10 (fewshot.shots): linear (logistic "
        "regression on cached features, its strength chosen on held-out train images) and kNN; preset "
        "lincls_fewshot_32px implies it.")] = None,
    tries: Annotated[int | None, typer.Option(help="With --shots: draws of each k (fewshot.tries).")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the evaluation in its output directory from "
                                         "its last epoch, or extend a finished one (--set optim.epochs=N).")] = False,
    nproc: Annotated[int, typer.Option(help="Processes to launch on this machine (torch.distributed).")] = 1,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress output.")] = False,
    print_config: PrintConfig = False,
    weights_format: WeightsFormat = None,
) -> None:
    """Linear classification on frozen features (v1/v2's protocol: lr 30, 100 epochs; MoCo v3's for v3 weights and
    ViTs), BN in eval mode, with the sanity check."""
    from classification.linear import load_linear_config, protocol_preset

    try:
        if grid or robustness is not None or shots is not None or tries is not None or _is_grid(config):
            if cached_features:
                raise ConfigError("--cached-features: the grid and few-shot read the frozen backbone once a batch "
                                  "already; give --grid or --shots, or --cached-features, not both")
            ks = _shots(shots)
            asked = invocation("eval linear", preset=config, overrides=set_ or [], smoke=smoke.enabled(), options={
                "data": data, "labels": labels, "subset": subset, "arch": arch, "device": device,
                "workers": workers, "grid": grid, "robustness": robustness,
                "shots": ",".join(map(str, ks)) if ks else None, "tries": tries, "seed": seed,
                "nproc": nproc if nproc != 1 else None, "weights_format": weights_format})
            _grid_cli(pretrained, config, set_ or [], nproc, quiet, resume, print_config, output_dir, asked, flags={
                "arch": arch, "data": {"path": data, "workers": workers, "labels": labels, "subset": subset},
                "robustness": {"root": robustness}, "fewshot": {"shots": ks, "tries": tries},
                "run": {"output_dir": output_dir, "device": device, "seed": seed, "weights_format": weights_format}})
            return
        if config is None and (preset := protocol_preset(pretrained, arch, weights_format)) is not None:
            print(f"note: {pretrained} is evaluated with MoCo v3's linear protocol (-c {preset}); pass -c to choose "
                  f"another", file=sys.stderr)
            config = preset
        cfg = load_linear_config(config, set_ or [], flags={
            "arch": arch, "data": {"path": data, "workers": workers, "labels": labels, "subset": subset},
            "run": {"output_dir": output_dir, "device": device, "cached_features": cached_features or None,
                    "seed": seed, "weights_format": weights_format}})
        cfg = _subset_output_dir(with_output_dir(cfg, config, "linear", pretrained, cfg.arch, "--arch"), output_dir)
    except UserError as err:
        raise _fail(err) from None
    asked = invocation("eval linear", preset=config, overrides=set_ or [], smoke=smoke.enabled(), options={
        "data": data, "labels": labels, "subset": subset, "arch": arch, "device": device, "workers": workers,
        "cached_features": cached_features, "seed": seed, "nproc": nproc if nproc != 1 else None,
        "weights_format": weights_format})
    print_or_launch(cfg, print_config, nproc, run_linear, cfg, pretrained, quiet, resume, asked)


def _is_grid(config: str | None) -> bool:
    from classification.frozen.grid_config import is_grid_config

    return is_grid_config(config)


def _shots(text: str | None) -> tuple[int, ...] | None:
    from classification.frozen.grid_config import parse_shots

    return parse_shots(text)


def _grid_cli(pretrained: str, config: str | None, overrides: list[str], nproc: int, quiet: bool, resume: bool,
              print_config: bool, output_dir: str | None, asked: dict[str, Any], flags: dict[str, Any]) -> None:
    """``moco eval linear --grid`` (or a grid preset), or ``--shots``: its config, then one process per --nproc.
    A few-shot run writes ``runs/<preset>_fewshot/<weights>`` when no --output-dir is given: beside the grid's (a
    few-shot preset's: ``runs/<preset>/<weights>``).
    ``asked``: how it was invoked (moco_core.commands.invocation), kept in the record and in the resume hint."""
    from classification.frozen.grid_config import load_grid_config, sets_shots
    from moco_core.config import replace

    cfg = load_grid_config(config, overrides, flags=flags)
    cfg = _subset_output_dir(with_output_dir(cfg, config, "linear_grid", pretrained, cfg.arch, "--arch"), output_dir)
    if (cfg.fewshot.shots and output_dir is None and not any(o.startswith("run.output_dir") for o in overrides)
            and not sets_shots(config)):  # a few-shot preset's own folder is already not the grid's
        out = Path(cfg.run.output_dir)
        cfg = replace(cfg, run={"output_dir": str(out.parent.with_name(f"{out.parent.name}_fewshot") / out.name)})
    if cfg.fewshot.shots and nproc > 1:
        raise ConfigError("--nproc: --shots runs in one process (features are computed once, on one device)")
    print_or_launch(cfg, print_config, nproc, run_grid, cfg, pretrained, quiet, resume, asked)


def run_grid(cfg: Any, pretrained: str, quiet: bool, resume: bool = False,
             asked: dict[str, Any] | None = None) -> None:
    """One process of ``moco eval linear --grid`` (or ``--shots``): one-line user errors (rank 0), exit code 2 (1:
    diverged); a stop prints the command that continues it."""
    if cfg.fewshot.shots:
        from classification.frozen.shots import fewshot_eval as evaluate
    else:
        from classification.frozen.grid import grid_eval as evaluate
    extra = {"invocation": asked} if asked else None
    report_result(lambda: evaluate(cfg, pretrained, show_progress=not quiet, resume=resume, extra=extra),
                  rerun=evaluation_rerun(asked, pretrained, cfg.run.output_dir))


def run_linear(cfg: Any, pretrained: str, quiet: bool, resume: bool = False,
               asked: dict[str, Any] | None = None) -> None:
    """One process of ``moco eval linear``: user errors are one line (from rank 0), exit code 2 (1: diverged).
    ``asked``: how it was invoked (moco_core.commands.invocation), kept in the record and in the resume hint."""
    from classification.linear import linear_eval

    report_result(lambda: linear_eval(cfg, pretrained, show_progress=not quiet, resume=resume,
                                      extra={"invocation": asked} if asked else None),
                  rerun=evaluation_rerun(asked, pretrained, cfg.run.output_dir))


def finetune_cli(
    pretrained: Pretrained,
    config: Annotated[str | None, typer.Option("--config", "-c", help="YAML file or preset "
                                               f"({preset_list('finetune')}). Without it: the paper's ImageNet "
                                               "fine-tuning (finetune_vit for ViTs).")] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Override a config value, e.g. optim.epochs=10 (milestones follow).")] = None,
    data: Annotated[str | None, typer.Option(help="Root with train/ and val/ class folders, iNaturalist 2018's "
                                             "layout (train2018.json, val2018.json, train_val2018/), or "
                                             "'embedded'.")] = None,
    output_dir: Annotated[str | None, typer.Option(
        help="Where config, metrics, checkpoint and result.json go (default: runs/<preset>/<weights>).")] = None,
    arch: Arch = None,
    device: Device = None,
    workers: Annotated[int | None, typer.Option(help="Data-loading worker processes.")] = None,
    seed: Seed = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the fine-tuning in its output directory from "
                                         "its last epoch, or extend a finished one (--set optim.epochs=N).")] = False,
    nproc: Annotated[int, typer.Option(help="Processes to launch on this machine (torch.distributed).")] = 1,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress output.")] = False,
    labels: Labels = None,
    subset: SubsetFile = None,
    print_config: PrintConfig = False,
    weights_format: WeightsFormat = None,
) -> None:
    """Fine-tuning: the whole backbone and a new fc trained end to end, BN trained (SyncBN with several
    processes); the paper's SGD recipes, AdamW with layer-wise lr decay for ViTs."""
    from classification.finetune import finetune_preset, load_finetune_config

    try:
        if config is None and (preset := finetune_preset(pretrained, arch, weights_format)) is not None:
            print(f"note: {pretrained} is a ViT: fine-tuned with -c {preset} (AdamW, layer-wise lr decay); pass -c "
                  f"to choose another", file=sys.stderr)
            config = preset
        cfg = load_finetune_config(config, set_ or [], flags={
            "arch": arch, "data": {"path": data, "workers": workers, "labels": labels, "subset": subset},
            "run": {"output_dir": output_dir, "device": device, "seed": seed, "weights_format": weights_format}})
        cfg = _subset_output_dir(with_output_dir(cfg, config, "finetune", pretrained, cfg.arch, "--arch"), output_dir)
    except UserError as err:
        raise _fail(err) from None
    asked = invocation("eval finetune", preset=config, overrides=set_ or [], smoke=smoke.enabled(), options={
        "data": data, "labels": labels, "subset": subset, "arch": arch, "device": device, "workers": workers,
        "seed": seed, "nproc": nproc if nproc != 1 else None, "weights_format": weights_format})
    print_or_launch(cfg, print_config, nproc, run_finetune, cfg, pretrained, quiet, resume, asked)


def run_finetune(cfg: Any, pretrained: str, quiet: bool, resume: bool = False,
                 asked: dict[str, Any] | None = None) -> None:
    """One process of ``moco eval finetune``: user errors are one line (from rank 0), exit code 2 (1: diverged)."""
    from classification.finetune import finetune

    report_result(lambda: finetune(cfg, pretrained, show_progress=not quiet, resume=resume,
                                   extra={"invocation": asked} if asked else None),
                  rerun=evaluation_rerun(asked, pretrained, cfg.run.output_dir))


def snapshots_cli(
    run_dir: Annotated[str, typer.Argument(help="A pretraining's run directory (snapshots: run.keep_every).")],
    config: Annotated[str | None, typer.Option("--config", "-c", help="YAML file or preset "
                                               f"({preset_list('linear')}). Without it: the protocol of the "
                                               "weights' paper (v1/v2's; MoCo v3's for v3 runs).")] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Override a config value, e.g. optim.epochs=10.")] = None,
    data: Annotated[str | None, typer.Option(help="Root with train/ and val/ class folders, or 'embedded'.")] = None,
    output_dir: Annotated[str | None, typer.Option(
        help="One evaluation directory per snapshot goes here (default: RUN_DIR/linear_snapshots).")] = None,
    device: Device = None,
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
    weights_format: WeightsFormat = None,
) -> None:
    """The linear protocol on every snapshot of a pretraining (checkpoint_NNNN.pth.tar), for the report's curve.

    With --follow it ends with status 0 once every snapshot the run announces is evaluated, and with 1 and the
    reason when they will not come: the pretraining has finished or is not running (--grace), or --timeout.
    """
    from classification.linear import linear_eval, load_linear_config, protocol_preset
    from classification.snapshots import evaluate_snapshots

    flags = {"data": {"path": data, "workers": workers}, "run": {"device": device, "weights_format": weights_format}}

    def evaluate(snapshot: Path, out: Path, extra: dict, resume: bool) -> Path:
        chosen = config or protocol_preset(str(snapshot), None, weights_format)  # MoCo v3's snapshots: its protocol
        cfg = load_linear_config(chosen, set_ or [], flags={**flags, "run": {**flags["run"], "output_dir": str(out)}})
        asked = invocation("eval linear", preset=chosen, overrides=set_ or [], smoke=smoke.enabled(),
                           options={"data": data, "device": device, "workers": workers,
                                    "weights_format": weights_format})
        record = linear_eval(cfg, str(snapshot), show_progress=not quiet, extra={**extra, "invocation": asked},
                             resume=resume)
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
    config: Annotated[str | None, typer.Option("--config", "-c", help="YAML file or preset "
                                               f"({preset_list('knn')}). Without it: InstDisc's k 200, T 0.07 "
                                               "on 224-px center crops.")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override a config value, e.g. k=20.")] = None,
    data: Annotated[str | None, typer.Option(help="Root with train/ (the bank) and val/ or test/ (the queries), "
                                             "Flowers-102 or Pets as torchvision downloads them, or 'embedded'.")]
    = None,
    labels: Labels = None,
    subset: SubsetFile = None,
    output_dir: Annotated[str | None, typer.Option(
        help="Where result.json goes (default: runs/<preset>/<weights>).")] = None,
    k: Annotated[int | None, typer.Option(help="Neighbours (k in the config).")] = None,
    temperature: Annotated[float | None, typer.Option(help="Vote weight exp(sim / T).")] = None,
    crop_size: Annotated[int | None, typer.Option(help="Center-crop size (data.crop_size).")] = None,
    resize: Annotated[int | None, typer.Option(help="Resize before the crop (data.resize).")] = None,
    batch_size: Annotated[int | None, typer.Option(help="Images per forward pass.")] = None,
    arch: Arch = None,
    device: Device = None,
    workers: Annotated[int | None, typer.Option(help="Data-loading worker processes.")] = None,
    seed: Annotated[int | None, typer.Option(help="Draws the weights of 'random' (as eval linear's run.seed).")]
    = None,
    print_config: PrintConfig = False,
    weights_format: WeightsFormat = None,
) -> None:
    """Weighted kNN accuracy (InstDisc) of frozen features: a quality signal in minutes, no training."""
    from classification.knn import load_knn_config

    flags = {"arch": arch, "k": k, "temperature": temperature, "batch_size": batch_size,
             "data": {"path": data, "crop_size": crop_size, "resize": resize, "workers": workers, "labels": labels,
                      "subset": subset},
             "run": {"output_dir": output_dir, "device": device, "seed": seed, "weights_format": weights_format}}
    try:
        cfg = load_knn_config(config, set_ or [], flags=flags)
        cfg = _subset_output_dir(with_output_dir(cfg, config, "knn", pretrained, cfg.arch, "--arch"), output_dir)
    except UserError as err:
        raise _fail(err) from None
    asked = invocation("eval knn", preset=config, overrides=set_ or [], smoke=smoke.enabled(), options={
        "data": data, "labels": labels, "subset": subset, "arch": arch, "device": device, "workers": workers,
        "k": k, "temperature": temperature, "crop_size": crop_size, "resize": resize, "batch_size": batch_size,
        "seed": seed, "weights_format": weights_format})
    print_or_launch(cfg, print_config, 1, run_knn, cfg, pretrained, asked)


def run_knn(cfg: KnnConfig, pretrained: str, asked: dict[str, Any] | None = None) -> None:
    """One ``moco eval knn``: prints ``result: PATH``; a user error is one line, exit code 2."""
    from classification.knn import knn_eval

    report_result(lambda: knn_eval(pretrained, cfg.data, Path(str(cfg.run.output_dir)), k=cfg.k,
                                   temperature=cfg.temperature, batch_size=cfg.batch_size, arch=cfg.arch,
                                   device_name=cfg.run.device, seed=cfg.run.seed,
                                   weights_format=cfg.run.weights_format,
                                   extra={"invocation": asked} if asked else None)[0],
                  rerun=evaluation_rerun(asked, pretrained, str(cfg.run.output_dir)))


def transfer_cli(
    pretrained: Pretrained,
    data: Annotated[str | None, typer.Option(help="ROOT holding the datasets as torchvision's classes download them "
                                             "(ROOT/food-101, ROOT/dtd/dtd, ROOT/VOCdevkit/VOC2007, ...), or "
                                             "'embedded'.")] = None,
    config: Annotated[str | None, typer.Option("--config", "-c", help="YAML file or preset "
                                               f"({preset_list('transfer')}). Without it: the protocol (224-px "
                                               "bicubic centre crops, 45 L2 values from 1e-6 to 1e5).")] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Override a config value, e.g. solver.max_iter=500.")] = None,
    datasets: Annotated[str | None, typer.Option(
        help="Only these datasets, comma-separated (data.datasets), e.g. dtd,pets,flowers.")] = None,
    solver: Annotated[str | None, typer.Option(
        help="torch (L-BFGS in torch, on the GPU when there is one) or sklearn (scikit-learn's LogisticRegression)."
    )] = None,
    shots: Annotated[str | None, typer.Option(
        help="Few-shot too: k labelled images a class, e.g. 1,5,10,25 (fewshot.shots).")] = None,
    tries: Annotated[int | None, typer.Option(help="Few-shot draws for each k (fewshot.tries).")] = None,
    output_dir: Annotated[str | None, typer.Option(
        help="Where the splits, features and one record a dataset go (default: runs/<preset>/<weights>).")] = None,
    arch: Arch = None,
    device: Device = None,
    workers: Annotated[int | None, typer.Option(help="Data-loading worker processes.")] = None,
    seed: Annotated[int | None, typer.Option(help="Draws the weights of 'random' (run.seed).")] = None,
    weights_format: WeightsFormat = None,
    resume: Annotated[bool, typer.Option("--resume", help="Carry on with the datasets a stopped suite has not done "
                                         "(those with a record are kept).")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress output.")] = False,
    print_config: PrintConfig = False,
) -> None:
    """Linear transfer to 12 datasets (Kornblith et al.; SimCLR's Table 8): frozen features, L2 logistic regression
    by L-BFGS with its strength swept over 45 values on val, refit on train + val, each dataset's metric once."""
    from classification.frozen.grid_config import parse_shots
    from classification.linear_transfer.config import load_suite_config, parse_names

    try:
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise ConfigError("moco eval transfer runs in one process: features are computed once, on one device")
        flags = {"arch": arch, "data": {"path": data, "datasets": parse_names(datasets), "workers": workers},
                 "solver": {"name": solver}, "fewshot": {"shots": parse_shots(shots), "tries": tries},
                 "run": {"output_dir": output_dir, "device": device, "seed": seed,
                         "weights_format": weights_format}}
        cfg = load_suite_config(config, set_ or [], flags=flags)
        cfg = with_output_dir(cfg, config, "transfer", pretrained, cfg.arch, "--arch")
    except UserError as err:
        raise _fail(err) from None
    asked = invocation("eval transfer", preset=config, overrides=set_ or [], smoke=smoke.enabled(), options={
        "data": data, "datasets": datasets, "solver": solver, "shots": shots, "tries": tries, "arch": arch,
        "device": device, "workers": workers, "seed": seed, "weights_format": weights_format})
    print_or_launch(cfg, print_config, 1, run_linear_transfer, cfg, pretrained, quiet, resume, asked)


def run_linear_transfer(cfg: Any, pretrained: str, quiet: bool, resume: bool = False,
                 asked: dict[str, Any] | None = None) -> None:
    """One ``moco eval transfer``: prints ``result: RUN_DIR/suite.json``; a user error is one line, exit code 2;
    a stop, the command that carries on with the datasets not done."""
    from classification.linear_transfer.run import run_suite

    report_result(lambda: run_suite(cfg, pretrained, show_progress=not quiet, resume=resume),
                  rerun=evaluation_rerun(asked, pretrained, str(cfg.run.output_dir)))
