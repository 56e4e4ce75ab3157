"""``moco eval linseg``: options in, a plain function call out.

Named ``linseg`` beside ``semseg``: ``moco eval semseg`` fine-tunes the whole network (the MoCo paper's A.5),
``linseg`` reads the frozen backbone with a linear classifier a patch (DINOv2's "linear" segmentation rows), as
``eval linear`` stands beside ``eval finetune``."""

from __future__ import annotations

from typing import Annotated, Any

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
from moco_core.errors import UserError, print_error


def linseg_cli(
    pretrained: Pretrained,
    config: Annotated[str | None, typer.Option("--config", "-c", help=f"YAML file or preset "
                                               f"({preset_list('linseg')}). Without it: ADE20K's 150 classes, "
                                               "448-px views, 8 L2 strengths.")] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Override a config value, e.g. input.tap=patch4 or solver.max_patches=500000.")] = None,
    data: Annotated[str | None, typer.Option(help="A folder holding ADEChallengeData2016/ as released, or "
                                             "'embedded'.")] = None,
    output_dir: Annotated[str | None, typer.Option(
        help="Where the features, config and result.json go (default: runs/<preset>/<weights>).")] = None,
    arch: Arch = None,
    device: Device = None,
    seed: Annotated[int | None, typer.Option(
        help="The held-out train images, the patches drawn and the weights of 'random' (run.seed).")] = None,
    weights_format: WeightsFormat = None,
    print_config: PrintConfig = False,
) -> None:
    """Linear semantic segmentation on frozen patch features, fast mode: features cached once, a logistic
    regression a patch with its L2 strength chosen on held-out train images, val mIoU at full resolution."""
    from dense.config import load_linseg_config

    flags = {"arch": arch, "data": {"path": data},
             "run": {"output_dir": output_dir, "device": device, "seed": seed, "weights_format": weights_format}}
    try:
        cfg = load_linseg_config(config, set_ or [], flags=flags)
        cfg = with_output_dir(cfg, config, "linseg", pretrained, cfg.arch, "--arch")
    except UserError as err:
        print_error(err)
        raise typer.Exit(2) from None
    asked = invocation("eval linseg", preset=config, overrides=set_ or [], smoke=smoke.enabled(), options={
        "data": data, "arch": arch, "device": device, "seed": seed, "weights_format": weights_format})
    print_or_launch(cfg, print_config, 1, run_linseg, cfg, pretrained, asked)


def run_linseg(cfg: Any, pretrained: str, asked: dict[str, Any] | None = None) -> None:
    """One ``moco eval linseg``: prints ``result: PATH``; a user error is one line, exit code 2."""
    from dense.linseg import linseg

    report_result(lambda: linseg(cfg, pretrained, extra={"invocation": asked} if asked else None),
                  rerun=evaluation_rerun(asked, pretrained, str(cfg.run.output_dir)))
