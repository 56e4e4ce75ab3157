"""``moco demo``: options in, ``run_demo`` out; the report's Markdown printed at the end."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from moco_core.config import seed_problem
from moco_core.errors import UserError, print_error


def demo_cli(
    ctx: typer.Context,
    output_dir: Annotated[str, typer.Option(help="Every step's run directory, and report/, go here.")] = "runs/demo",
    tasks: Annotated[str, typer.Option(
        help="Comma-separated evaluations: some of linear,voc,coco (the default) and keypoints,lvis,cityscapes,"
        "densepose,semseg (the rest of the paper's Table 6; densepose needs detectron2's DensePose project), "
        "finetune: opt-in.")] = "linear,voc,coco",
    engine: Annotated[str, typer.Option(
        help="Detection engine: auto (detectron2 when installed, else torchvision), detectron2 or torchvision.")] =
        "auto",
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N.")] = "auto",
    progress: Annotated[bool, typer.Option("--progress", help="Show each step's progress and epoch summaries, on "
                                           "a terminal and in a log (without it: a terminal's line alone).")] = False,
    trials: Annotated[int, typer.Option(help="Run the protocol this many times, with seeds --seed, --seed + 1, ...; "
                                        "the report shows each row's mean ± std.")] = 1,
    seed: Annotated[int, typer.Option(help="Seed of the (first) trial: pretrainings, evaluations, random init.")] = 0,
) -> None:
    """The whole protocol on the embedded data: pretrain MoCo and the supervised baseline, evaluate them and random
    init (linear, VOC, COCO), write the report. Rerunning continues where an interrupted demo stopped; SIGTERM or
    SIGINT stops it as a whole (exit status 128 + the signal's number) with the command that continues."""
    from moco_core.run.preemption import Stopped, report_stop
    from moco_demo.run import TASKS, run_demo

    chosen = tuple(t.strip() for t in tasks.split(",") if t.strip())
    if not chosen or set(chosen) - set(TASKS):
        print_error(f"--tasks: expected some of {','.join(TASKS)}, got {tasks!r}")
        raise typer.Exit(2)
    out = Path(output_dir)
    if trials < 1 or seed_problem(seed) or seed_problem(seed + trials - 1):
        print_error(f"--trials: must be >= 1, got {trials}" if trials < 1 else
                    f"--seed: {seed_problem(seed) or seed_problem(seed + trials - 1)}")
        raise typer.Exit(2)
    try:
        report_dir = run_demo(out, device=device, engine=engine, tasks=chosen, show_progress=progress, trials=trials,
                              seed=seed)
    except UserError as err:
        print_error(err)
        raise typer.Exit(2) from None
    except Stopped as stop:  # the step under way stopped (a pretraining with its checkpoint); nothing more ran
        raise typer.Exit(report_stop(stop, ctx)) from None
    print((report_dir / "report.md").read_text(encoding="utf-8"))  # written by the demo's last step
    print(f"report: {report_dir} (report.md, report.html, report.csv, report.tex); step times: {out / 'demo.json'}",
          file=sys.stderr)
