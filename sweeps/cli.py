"""``moco sweep``: the K and m ablations, each point pretrained and then evaluated (kNN or linear)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from moco_core.config import ConfigError
from moco_core.errors import UserError, print_error


def sweep_cli(
    ctx: typer.Context,
    param: Annotated[str, typer.Argument(help="K (dictionary size; the batch size for end2end) or m (momentum).")],
    values: Annotated[str, typer.Argument(help="Comma-separated values, e.g. 256,1024,4096 or 0,0.9,0.99,0.999.")],
    config: Annotated[str | None, typer.Option(
        "--config", "-c", help="Pretraining YAML file or preset (embedded, moco_v2_200ep, ...).")] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Override a pretraining config value, e.g. method=memory-bank (repeatable).")] = None,
    evaluation: Annotated[str, typer.Option(
        "--eval", help="knn (minutes; the default) or linear (the paper's protocol).")] = "knn",
    eval_config: Annotated[str | None, typer.Option(
        help="Linear-evaluation YAML file or preset (lincls_embedded), for --eval linear (default: the "
        "method's protocol, lincls_embedded or lincls_mocov3[_vit]_embedded where the pretraining crops are the "
        "embedded presets' 32 px, else the paper's, lincls_mocov3 or lincls_mocov3_vit).")] = None,
    eval_data: Annotated[str | None, typer.Option(
        help="Labelled root (train/, val/) to evaluate on; default data.knn_path, else data.path.")] = None,
    output_dir: Annotated[str, typer.Option(help="One folder per value goes here.")] = "runs/sweep",
    trials: Annotated[int, typer.Option(help="Run the sweep this many times, with seeds --seed, --seed + 1, ..., "
                                        "each into OUTPUT_DIR/seed_<s>: each point's mean ± std.")] = 1,
    seed: Annotated[int | None, typer.Option(help="Seed of the (first) trial's pretrainings and evaluations "
                                             "(default: the config's run.seed).")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bars.")] = False,
) -> None:
    """The paper's ablations (Figure 3, the momentum table): pretrain once per value, evaluate each.

    Every point's record says whether its pretraining trained; `moco report` plots accuracy against the value.
    Rerunning skips finished points; SIGTERM or SIGINT stops the sweep as a whole (exit status 128 + the signal's
    number) with the command that continues.
    """
    from moco_core.config import load_config, seed_problem
    from moco_core.pretrain_config import PretrainConfig
    from moco_core.run.preemption import Stopped, report_stop
    from sweeps.sweep import linear_preset, parse_values, run_sweep, summary

    if evaluation not in ("knn", "linear"):
        print_error(f"--eval: expected knn or linear, got {evaluation!r}")
        raise typer.Exit(2)
    try:
        swept = parse_values(param, values)
        cfg = load_config(PretrainConfig, config, set_ or [])
        first = cfg.run.seed if seed is None else seed
        if trials < 1:
            raise ConfigError(f"--trials: must be >= 1, got {trials}")
        if seed_problem(first) or seed_problem(first + trials - 1):
            raise ConfigError(f"--seed: {seed_problem(first) or seed_problem(first + trials - 1)}")
        root = eval_data or cfg.data.knn_path or cfg.data.path
        if not root:
            raise ConfigError("--eval-data: no labelled dataset to evaluate on (nor data.knn_path, data.path)")
        evaluate = _evaluator(evaluation, eval_config or linear_preset(cfg), root, cfg.augment.crop_size,
                              cfg.data.workers, quiet)
        points = run_sweep(cfg, param, swept, Path(output_dir), evaluate, eval_name=evaluation,
                           show_progress=not quiet, trials=trials, seed=first)
    except UserError as err:
        print_error(err)
        raise typer.Exit(2) from None
    except Stopped as stop:
        raise typer.Exit(report_stop(stop, ctx)) from None
    print(summary(points, param))


def _evaluator(kind: str, eval_config: str | None, root: str, crop: int, workers: int, quiet: bool) -> Any:
    """evaluate(checkpoint, out_dir, extra, seed) -> (record path, metrics) for the chosen evaluation."""
    from classification.knn import knn_eval
    from classification.linear import LinearDataConfig, linear_eval, load_linear_config
    from moco_core.config import replace
    from moco_core.data.augment import eval_resize
    from moco_core.run.rundir import last_checkpoint
    from moco_core.user_files import read_json

    def knn(ckpt: Path, out: Path, extra: dict[str, Any], seed: int) -> tuple[Path, dict[str, float]]:
        # center crops at the pretraining scale, as the pretraining's kNN monitor takes them
        data = LinearDataConfig(path=root, crop_size=crop, resize=eval_resize(crop), workers=workers)
        return knn_eval(str(ckpt), data, out, extra=extra, seed=seed, show_progress=not quiet)

    # Read now, with the data root (a preset or file may name none): one that does not load is one line before the
    # first pretraining, not after it.
    protocol = load_linear_config(eval_config, [], flags={"data": {"path": root}}) if kind == "linear" else None

    def linear(ckpt: Path, out: Path, extra: dict[str, Any], seed: int) -> tuple[Path, dict[str, float]]:
        cfg = replace(protocol, run={"output_dir": str(out), "seed": seed})
        resume = last_checkpoint(out, "eval linear") is not None  # an evaluation an interrupted sweep left part-way
        record = linear_eval(cfg, str(ckpt), show_progress=not quiet, extra=extra, resume=resume)
        return record, read_json(record, what="record")["metrics"]

    return knn if kind == "knn" else linear
