"""``moco eval retrieval`` and ``moco eval davis``: options in, plain function calls out."""

from __future__ import annotations

from pathlib import Path
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


def retrieval_cli(
    pretrained: Pretrained,
    config: Annotated[str | None, typer.Option("--config", "-c", help="YAML file or preset "
                                               f"({preset_list('retrieval')}). Without it: DINO's 224-px images, "
                                               "one scale, Medium and Hard.")] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Override a config value, e.g. scales=[1,0.707,0.5] or queries=[cropped].")] = None,
    data: Annotated[str | None, typer.Option(help="ROOT holding roxford5k/ and rparis6k/ in revisitop's layout "
                                             "(jpg/*.jpg and gnd_<name>.pkl), or 'embedded'.")] = None,
    datasets: Annotated[str | None, typer.Option(
        help="Only these datasets, comma-separated (data.datasets), e.g. roxford5k.")] = None,
    image_size: Annotated[int | None, typer.Option(
        help="The longer side images are shrunk to (image_size; DINO's --imsize).")] = None,
    output_dir: Annotated[str | None, typer.Option(
        help="Where result.json goes (default: runs/<preset>/<weights>).")] = None,
    arch: Arch = None,
    device: Device = None,
    workers: Annotated[int | None, typer.Option(help="Image-decoding worker processes.")] = None,
    seed: Annotated[int | None, typer.Option(help="Draws the weights of 'random' (run.seed).")] = None,
    weights_format: WeightsFormat = None,
    print_config: PrintConfig = False,
) -> None:
    """Instance retrieval on revisited Oxford and Paris (revisitop): one global feature an image, cosine ranking,
    mAP on the Medium and Hard protocols, queries cropped to their box and whole. No training."""
    from probes.retrieval.config import load_retrieval_config

    names = tuple(n.strip() for n in datasets.split(",") if n.strip()) if datasets is not None else None
    flags = {"arch": arch, "image_size": image_size, "data": {"path": data, "datasets": names, "workers": workers},
             "run": {"output_dir": output_dir, "device": device, "seed": seed, "weights_format": weights_format}}
    try:
        cfg = load_retrieval_config(config, set_ or [], flags=flags)
        cfg = with_output_dir(cfg, config, "retrieval", pretrained, cfg.arch, "--arch")
    except UserError as err:
        print_error(err)
        raise typer.Exit(2) from None
    asked = invocation("eval retrieval", preset=config, overrides=set_ or [], smoke=smoke.enabled(), options={
        "data": data, "datasets": datasets, "image_size": image_size, "arch": arch, "device": device,
        "workers": workers, "seed": seed, "weights_format": weights_format})
    print_or_launch(cfg, print_config, 1, run_retrieval, cfg, pretrained, asked)


def run_retrieval(cfg: Any, pretrained: str, asked: dict[str, Any] | None = None) -> None:
    """One ``moco eval retrieval``: prints ``result: PATH``; a user error is one line, exit code 2."""
    from probes.retrieval.run import retrieval_eval

    report_result(lambda: retrieval_eval(cfg, pretrained, extra={"invocation": asked} if asked else None),
                  rerun=evaluation_rerun(asked, pretrained, str(cfg.run.output_dir)))




def davis_cli(
    pretrained: Pretrained,
    config: Annotated[str | None, typer.Option("--config", "-c", help="YAML file or preset "
                                               f"({preset_list('davis')}). Without it: DINO's protocol (480-px "
                                               "frames, 7 previous frames, top-5, radius 12, T 0.1).")] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Override a config value, e.g. propagation.topk=10.")] = None,
    data: Annotated[str | None, typer.Option(help="The folder holding DAVIS/ (DAVIS-2017 trainval as released: "
                                             "JPEGImages/480p, Annotations/480p, ImageSets/2017), or 'embedded'.")]
    = None,
    tap: Annotated[str | None, typer.Option(
        help="The patch features read: patch or patch4 (a ViT), layer1..layer4 (a ResNet; strides 4..32). "
        "Default: patch, layer4.")] = None,
    output_dir: Annotated[str | None, typer.Option(
        help="Where result.json and the predicted masks go (default: runs/<preset>/<weights>).")] = None,
    arch: Arch = None,
    device: Device = None,
    seed: Annotated[int | None, typer.Option(help="Draws the weights of 'random' (run.seed).")] = None,
    print_config: PrintConfig = False,
    weights_format: WeightsFormat = None,
) -> None:
    """Video object segmentation by label propagation (DINO's DAVIS-2017 protocol): J&F of frozen patch features,
    no training."""
    from probes.davis.config import load_davis_config

    flags = {"arch": arch, "tap": tap, "data": {"path": data},
             "run": {"output_dir": output_dir, "device": device, "seed": seed, "weights_format": weights_format}}
    try:
        cfg = load_davis_config(config, set_ or [], flags=flags)
        cfg = with_output_dir(cfg, config, "davis", pretrained, cfg.arch, "--arch")
    except UserError as err:
        print_error(err)
        raise typer.Exit(2) from None
    asked = invocation("eval davis", preset=config, overrides=set_ or [], smoke=smoke.enabled(), options={
        "data": data, "tap": tap, "arch": arch, "device": device, "seed": seed, "weights_format": weights_format})
    print_or_launch(cfg, print_config, 1, run_davis, cfg, pretrained, asked)


def run_davis(cfg: Any, pretrained: str, asked: dict[str, Any] | None = None) -> None:
    """One ``moco eval davis``: prints ``result: PATH``; a user error is one line, exit code 2."""
    from probes.davis.run import davis_eval

    report_result(lambda: davis_eval(pretrained, cfg, Path(str(cfg.run.output_dir)),
                                     extra={"invocation": asked} if asked else None)[0],
                  rerun=evaluation_rerun(asked, pretrained, str(cfg.run.output_dir)))
