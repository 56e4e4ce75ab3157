"""``moco eval voc|coco|keypoints|lvis|cityscapes|densepose``, ``moco eval semseg`` and ``moco convert``: options
in, plain function calls out."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from moco_core.cli import preset_list
from moco_core.model.weights.formats import WEIGHTS_FORMATS
from transfer.detection.config import DEFAULT_PRESETS

Weights = Annotated[str | None, typer.Argument(
    metavar="WEIGHTS", show_default=False,
    help="Backbone weights: a checkpoint (ours, the official MoCo ones, DINO's, SwAV's, Barlow Twins', SimCLR's "
    "converted, solo-learn's, lightly's, a timm .safetensors, torchvision weights: any ResNet read here), a "
    "pretraining's run directory (its last checkpoint), or 'random'. Not needed with --print-config.")]
WeightsFormat = Annotated[str | None, typer.Option(
    help=f"The method that trained WEIGHTS, where the file does not say (run.weights_format): "
    f"{', '.join(WEIGHTS_FORMATS)}. It sets the input normalisation (input.mean/std, when left null).")]
OldWeights = Annotated[str | None, typer.Option("--weights", hidden=True, help="The old form of WEIGHTS.")]
Arch = Annotated[str | None, typer.Option(help="The ResNet of 'random' (detector.arch; a file names its own).")]


def _config(task: str) -> Any:
    return typer.Option("--config", "-c", help=f"YAML file or preset ({preset_list(task)}). Without it: the paper's "
                        f"setting ({DEFAULT_PRESETS[task]}).")


VocConfig = Annotated[str | None, _config("voc")]
CocoConfig = Annotated[str | None, _config("coco")]
KeypointsConfig = Annotated[str | None, _config("keypoints")]
LvisConfig = Annotated[str | None, _config("lvis")]
CityscapesConfig = Annotated[str | None, _config("cityscapes")]
DenseposeConfig = Annotated[str | None, _config("densepose")]
Sets = Annotated[list[str] | None, typer.Option("--set", help="Override a config value, e.g. solver.iterations=100.")]
Engine = Annotated[str | None, typer.Option(help="detectron2 or torchvision (default: detectron2 when installed).")]
Data = Annotated[str | None, typer.Option(help="Datasets root in detectron2's layout (VOC2007/, VOC2012/, coco/, "
                                          "lvis/, cityscapes/), or 'embedded'.")]
Train = Annotated[list[str] | None, typer.Option(
    "--train", help="A training set (repeat for several): voc_2007_trainval, coco_2017_train, "
    "keypoints_coco_2017_train..., or one's own: DEVKIT/ImageSets/Main/SPLIT.txt (VOC-style), "
    "ANNOTATIONS.json:IMAGE_DIR (COCO format, keypoint files for eval keypoints); relative to --data.")]
Test = Annotated[str | None, typer.Option(help="The test set, in the forms --train takes.")]
Classes = Annotated[str | None, typer.Option(
    help="A VOC-style devkit's class names in label order, comma-separated (default: VOC's 20 for the standard "
    "sets, else every name its XML files use, sorted).")]
OutputDir = Annotated[str | None, typer.Option(help="Run directory (config, metrics, checkpoint, result.json; "
                                               "default: runs/<preset>/<weights>).")]
Device = Annotated[str | None, typer.Option(help="auto, cpu, cuda or cuda:N.")]
Seed = Annotated[int | None, typer.Option(help="Random seed.")]
Workers = Annotated[int | None, typer.Option(help="Data-loading worker processes per training process.")]
Resume = Annotated[bool, typer.Option("--resume", help="Continue the run in its output directory from its last "
                                      "checkpoint.")]
Nproc = Annotated[int, typer.Option(help="Processes to launch on this machine (torch.distributed).")]
Quiet = Annotated[bool, typer.Option("--quiet", help="No progress output.")]
PrintConfig = Annotated[bool, typer.Option("--print-config", help="Print the resolved config as YAML and exit.")]


def _transfer(task: str, weights: str | None, old_weights: str | None, config: str | None, overrides: list[str],
              flags: dict[str, Any], resume: bool, nproc: int, quiet: bool, print_config: bool) -> None:
    """Resolve the config (bad input: one line, exit 2), then run here or in ``nproc`` processes."""
    from moco_core.cli import print_or_launch, with_output_dir
    from moco_core.config import ConfigError
    from moco_core.errors import UserError, print_error
    try:
        if old_weights is not None:
            if weights is not None and weights != old_weights:
                raise ConfigError(f"two weights given: {weights!r} and --weights {old_weights!r}")
            print(f"note: --weights is the old form; give the weights first: moco eval {task} WEIGHTS ...",
                  file=sys.stderr)
            weights = old_weights
        if weights is None and not print_config:
            raise ConfigError(f"no weights: moco eval {task} WEIGHTS, where WEIGHTS is a checkpoint, a run directory, "
                              f"or 'random'")
        cfg, preset, arch = _load(task, config, overrides, flags)
        if weights is not None:
            cfg = with_output_dir(cfg, preset, task, weights, arch, "--arch")
    except UserError as err:
        print_error(err)
        raise typer.Exit(2) from None
    print_or_launch(cfg, print_config, nproc, run_task, cfg, weights, resume, quiet,
                    _invocation(task, config, overrides, flags, nproc))


def _invocation(task: str, config: str | None, overrides: list[str], flags: dict[str, Any],
                nproc: int) -> dict[str, Any]:
    """How the evaluation was asked for (moco_core.commands.invocation), from the flags it was given."""
    from moco_core import smoke
    from moco_core.commands import invocation

    data, run = flags.get("data", {}), flags.get("run", {})
    classes = data.get("classes")
    arch = flags.get("head", flags.get("detector", {})).get("arch")
    options = {"engine": flags.get("engine"), "data": data.get("path"), "train": data.get("train"),
               "test": data.get("test"), "classes": ",".join(classes) if classes is not None else None,
               "ignore_index": data.get("ignore_index"), "workers": data.get("workers"), "arch": arch,
               "device": run.get("device"), "seed": run.get("seed"), "nproc": nproc if nproc != 1 else None,
               "weights_format": run.get("weights_format")}
    return invocation(f"eval {task}", preset=config, overrides=overrides, options=options, smoke=smoke.enabled())


def _load(task: str, config: str | None, overrides: list[str], flags: dict[str, Any]) -> tuple[Any, str, str | None]:
    """The task's resolved config, the preset it names (for the default run directory) and its backbone arch."""
    if task == "semseg":
        from transfer.segmentation.config import DEFAULT_PRESET, load_semseg_config

        cfg = load_semseg_config(config, overrides, flags)
        return cfg, config or DEFAULT_PRESET, cfg.head.arch
    from transfer.detection.config import load_transfer_config

    cfg = load_transfer_config(task, config, overrides, flags)
    return cfg, config or DEFAULT_PRESETS[task], cfg.detector.arch


def run_task(cfg: Any, weights: str, resume: bool, quiet: bool, asked: dict[str, Any] | None = None) -> None:
    """One process of ``moco eval voc|coco|keypoints|semseg``: user errors are one line (from rank 0), exit code 2;
    a NaN loss 1. ``asked``: how it was invoked, kept in the record and in the resume hint."""
    from moco_core.cli import evaluation_rerun, report_result

    if cfg.task == "semseg":
        from transfer.segmentation.config import semseg_run_dir as run_dir
        from transfer.segmentation.run import evaluate
    else:
        from transfer.detection.config import transfer_run_dir as run_dir
        from transfer.detection.run import evaluate
    report_result(lambda: evaluate(cfg, weights, show_progress=not quiet, resume=resume,
                                   extra={"invocation": asked} if asked else None),
                  rerun=evaluation_rerun(asked, weights, str(run_dir(cfg))))


def _flags(engine: str | None, data: str | None, train: list[str] | None, test: str | None, output_dir: str | None,
           device: str | None, seed: int | None, workers: int | None, arch: str | None, weights_format: str | None,
           classes: str | None = None) -> dict[str, Any]:
    names = None if classes is None else [c.strip() for c in classes.split(",")]
    return {"engine": engine, "detector": {"arch": arch},
            "data": {"path": data, "train": train or None, "test": test, "classes": names, "workers": workers},
            "run": {"output_dir": output_dir, "device": device, "seed": seed, "weights_format": weights_format}}


def voc_cli(weights: Weights = None, config: VocConfig = None, set_: Sets = None, engine: Engine = None,
            data: Data = None, train: Train = None, test: Test = None, classes: Classes = None,
            output_dir: OutputDir = None, arch: Arch = None, device: Device = None, seed: Seed = None,
            workers: Workers = None, resume: Resume = False, nproc: Nproc = 1, quiet: Quiet = False,
            print_config: PrintConfig = False, old_weights: OldWeights = None,
            weights_format: WeightsFormat = None) -> None:
    """Faster R-CNN (R50-C4, the paper's VOC detector) fine-tuned from a backbone on VOC07+12, tested on VOC07."""
    flags = _flags(engine, data, train, test, output_dir, device, seed, workers, arch, weights_format, classes)
    _transfer("voc", weights, old_weights, config, set_ or [], flags, resume, nproc, quiet, print_config)


def coco_cli(weights: Weights = None, config: CocoConfig = None, set_: Sets = None, engine: Engine = None,
             data: Data = None, train: Train = None, test: Test = None, output_dir: OutputDir = None,
             arch: Arch = None, device: Device = None, seed: Seed = None, workers: Workers = None,
             resume: Resume = False, nproc: Nproc = 1, quiet: Quiet = False, print_config: PrintConfig = False,
             old_weights: OldWeights = None, weights_format: WeightsFormat = None) -> None:
    """Mask R-CNN (R50-C4 or R50-FPN, 1x or 2x) fine-tuned from a backbone on COCO train2017, tested on val2017."""
    flags = _flags(engine, data, train, test, output_dir, device, seed, workers, arch, weights_format)
    _transfer("coco", weights, old_weights, config, set_ or [], flags, resume, nproc, quiet, print_config)


def keypoints_cli(weights: Weights = None, config: KeypointsConfig = None, set_: Sets = None, engine: Engine = None,
                  data: Data = None, train: Train = None, test: Test = None, output_dir: OutputDir = None,
                  arch: Arch = None, device: Device = None, seed: Seed = None, workers: Workers = None,
                  resume: Resume = False, nproc: Nproc = 1, quiet: Quiet = False, print_config: PrintConfig = False,
                  old_weights: OldWeights = None, weights_format: WeightsFormat = None) -> None:
    """Keypoint R-CNN (R50-FPN, 2x) fine-tuned from a backbone on COCO keypoints train2017, tested on val2017
    (AP^kp)."""
    flags = _flags(engine, data, train, test, output_dir, device, seed, workers, arch, weights_format)
    _transfer("keypoints", weights, old_weights, config, set_ or [], flags, resume, nproc, quiet, print_config)


def lvis_cli(weights: Weights = None, config: LvisConfig = None, set_: Sets = None, engine: Engine = None,
             data: Data = None, train: Train = None, test: Test = None, output_dir: OutputDir = None,
             arch: Arch = None, device: Device = None, seed: Seed = None, workers: Workers = None,
             resume: Resume = False, nproc: Nproc = 1, quiet: Quiet = False, print_config: PrintConfig = False,
             old_weights: OldWeights = None, weights_format: WeightsFormat = None) -> None:
    """Mask R-CNN R50-FPN (2x, repeat-factor sampling) fine-tuned from a backbone on LVIS v0.5 train, tested on its
    val by the LVIS API (arXiv 1911.05722 appendix A.4). --train/--test: lvis_v0.5_train, lvis_v0.5_val, or
    ANNOTATIONS.json:IMAGE_DIR in LVIS's format."""
    flags = _flags(engine, data, train, test, output_dir, device, seed, workers, arch, weights_format)
    _transfer("lvis", weights, old_weights, config, set_ or [], flags, resume, nproc, quiet, print_config)


def cityscapes_cli(weights: Weights = None, config: CityscapesConfig = None, set_: Sets = None,
                   engine: Engine = None, data: Data = None, train: Train = None, test: Test = None,
                   output_dir: OutputDir = None, arch: Arch = None, device: Device = None, seed: Seed = None,
                   workers: Workers = None, resume: Resume = False, nproc: Nproc = 1, quiet: Quiet = False,
                   print_config: PrintConfig = False, old_weights: OldWeights = None,
                   weights_format: WeightsFormat = None) -> None:
    """Mask R-CNN R50-FPN fine-tuned from a backbone on Cityscapes train_fine (8 instance classes), tested on val
    by cityscapesscripts (instance-level AP, AP50). --train/--test: cityscapes_fine_instance_seg_train or _val."""
    flags = _flags(engine, data, train, test, output_dir, device, seed, workers, arch, weights_format)
    _transfer("cityscapes", weights, old_weights, config, set_ or [], flags, resume, nproc, quiet, print_config)


def densepose_cli(weights: Weights = None, config: DenseposeConfig = None, set_: Sets = None, engine: Engine = None,
                  data: Data = None, train: Train = None, test: Test = None, output_dir: OutputDir = None,
                  arch: Arch = None, device: Device = None, seed: Seed = None, workers: Workers = None,
                  resume: Resume = False, nproc: Nproc = 1, quiet: Quiet = False, print_config: PrintConfig = False,
                  old_weights: OldWeights = None, weights_format: WeightsFormat = None) -> None:
    """DensePose R-CNN (R50-FPN, s1x) fine-tuned from a backbone on DensePose-COCO train2014 + valminusminival2014,
    tested on minival2014 (AP^dp, GPS and GPSm, and box AP; arXiv 1911.05722 appendix A.3). detectron2 with its
    DensePose project only. --train/--test: densepose_coco_2014_train, densepose_coco_2014_minival..., or
    ANNOTATIONS.json:IMAGE_DIR in DensePose's format."""
    flags = _flags(engine, data, train, test, output_dir, device, seed, workers, arch, weights_format)
    _transfer("densepose", weights, old_weights, config, set_ or [], flags, resume, nproc, quiet, print_config)


SemsegConfigOption = Annotated[str | None, typer.Option(
    "--config", "-c", help=f"YAML file or preset ({preset_list('semseg')}). Without it: the paper's VOC12 setting "
    f"(semseg_voc).")]
SemsegData = Annotated[str | None, typer.Option(
    help="Datasets root holding VOC2012/ (JPEGImages/, SegmentationClassAug/, ImageSets/Segmentation/train_aug.txt) "
    "or cityscapes/ (leftImg8bit/, gtFine/), or 'embedded'.")]
SemsegTrain = Annotated[str | None, typer.Option(
    help="The training set: voc_2012_sem_seg_train_aug, cityscapes_fine_sem_seg_train, or one's own "
    "IMAGE_DIR:LABEL_DIR (PNG label maps of the images' stems; relative to --data).")]
SemsegTest = Annotated[str | None, typer.Option(help="The test set, in the forms --train takes (voc_2012_sem_seg_val, "
                                                "cityscapes_fine_sem_seg_val).")]
SemsegClasses = Annotated[str | None, typer.Option(
    help="One's own IMAGE_DIR:LABEL_DIR: the class names in label order (label value k is the k-th), comma-separated.")]
SemsegArch = Annotated[str | None, typer.Option("--arch", help="The ResNet of 'random' (head.arch; a file names its "
                                                "own). A ViT is refused: the A.5 network dilates a ResNet's conv5.")]
IgnoreIndex = Annotated[int | None, typer.Option(help="The label value left out of the loss and the metric (255).")]


def semseg_cli(weights: Weights = None, config: SemsegConfigOption = None, set_: Sets = None,
               data: SemsegData = None, train: SemsegTrain = None, test: SemsegTest = None,
               classes: SemsegClasses = None, ignore_index: IgnoreIndex = None, output_dir: OutputDir = None,
               arch: SemsegArch = None, device: Device = None, seed: Seed = None, workers: Workers = None,
               resume: Resume = False, nproc: Nproc = 1, quiet: Quiet = False, print_config: PrintConfig = False,
               old_weights: OldWeights = None, weights_format: WeightsFormat = None) -> None:
    """Semantic segmentation (the paper's A.5 network: conv5 dilated to stride 16, two 3x3 convs with dilation 6)
    fine-tuned from a ResNet on VOC12 train_aug or Cityscapes train_fine, mIoU on val at full resolution."""
    names = None if classes is None else [c.strip() for c in classes.split(",")]
    flags = {"head": {"arch": arch},
             "data": {"path": data, "train": train, "test": test, "classes": names, "ignore_index": ignore_index,
                      "workers": workers},
             "run": {"output_dir": output_dir, "device": device, "seed": seed, "weights_format": weights_format}}
    _transfer("semseg", weights, old_weights, config, set_ or [], flags, resume, nproc, quiet, print_config)


def convert_cli(
    src: Annotated[Path, typer.Argument(help="A checkpoint (ours, official main_moco.py's of v1/v2 or v3), a "
                                        "pretraining's run directory (its last checkpoint) or a torchvision ResNet "
                                        "state_dict.")],
    dst: Annotated[str, typer.Argument(help="The file to write, or a folder to write it in (named after SRC).")],
    to: Annotated[str, typer.Option(help="detectron2 (its .pkl, for moco eval voc|coco and detectron2's tools), "
                                    "torchvision (a ResNet state_dict without fc, for torchvision.models) or timm "
                                    "(a MoCo v3 ViT's state_dict without head, for timm's ViTs and DeiT).")]
    = "detectron2",
    force: Annotated[bool, typer.Option("--force", help="Replace DST if it exists (never SRC itself).")] = False,
    weights_format: WeightsFormat = None,
) -> None:
    """Convert a backbone to detectron2's format (the official convert-pretrain-to-detectron2.py mapping), to a
    plain torchvision ResNet state_dict, or (MoCo v3 ViTs) to a timm ViT state_dict."""
    from moco_core.errors import UserError, print_error
    from transfer.convert import convert_file

    try:
        summary = convert_file(src, dst, overwrite=force, to=to, weights_format=weights_format)
    except UserError as err:
        print_error(err)
        raise typer.Exit(2) from None
    for key, value in summary.items():
        print(f"{key}: {value}")
    if to in ("torchvision", "timm") and not str(summary["destination"]).endswith(".safetensors"):
        import sys

        method = summary["method"]  # one of moco_core.model.weights.formats' names: nothing of the file's own
        print(f"note: a state_dict file keeps the weights, not their method ({method}): read it back with "
              f"--weights-format {method}, or convert to a .safetensors destination, which keeps it", file=sys.stderr)
