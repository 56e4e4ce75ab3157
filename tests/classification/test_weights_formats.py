"""Other methods' weights through the evaluations (issue 47): the images normalised as the weights' method trained,
the record naming the method, encoder and normalisation, the refusal of a file that does not say what it is (one
line, exit 2) until --weights-format names it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import classification.knn
import classification.linear
from classification.knn import knn_eval
from classification.linear import load_linear_config
from classification.splits import LinearDataConfig, load_splits
from cli import app
from moco_core.model.weights.formats import IMAGENET, UNNORMALISED
from tests import weights_layouts as layouts

pytest.importorskip("timm")


@pytest.fixture(scope="module")
def weights(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("weights")
    r18 = layouts.resnet_state()
    return {"simclr": layouts.simclr_v1(root / "simclr.pth", r18),
            "plain": layouts.torchvision_file(root / "resnet18.pth", layouts.without(r18, "fc.")),
            "dino-vit": layouts.dino_full(root / "dino_full_checkpoint.pth", layouts.timm_vit_state(), vit=True)}


def _normalize(transform: object) -> tuple[list[float], list[float]]:
    step = transform.transforms[-1]  # type: ignore[attr-defined]
    return list(step.mean), list(step.std)


def test_the_splits_take_the_weights_normalisation(shapes_root: Path) -> None:
    data = LinearDataConfig(path=str(shapes_root), crop_size=32, resize=32, workers=0)
    for normalisation in (IMAGENET, UNNORMALISED):
        splits = load_splits(data, augment=True, normalisation=normalisation)
        for transform in (splits.train.transform, splits.val.transform):
            assert _normalize(transform) == (list(normalisation.mean), list(normalisation.std))


def test_knn_feeds_simclr_weights_unnormalised_pixels(weights: dict[str, Path], shapes_root: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    real = classification.knn.load_splits

    def spy(*args: object, **kwargs: object) -> object:
        splits = real(*args, **kwargs)  # type: ignore[arg-type]
        seen.append(_normalize(splits.val.transform))
        return splits

    monkeypatch.setattr(classification.knn, "load_splits", spy)
    data = LinearDataConfig(path=str(shapes_root), crop_size=32, resize=32, workers=0)
    record, _ = knn_eval(str(weights["simclr"]), data, tmp_path / "knn", k=5, device_name="cpu",
                         weights_format="simclr-v1")
    assert seen == [([0.0, 0.0, 0.0], [1.0, 1.0, 1.0])]
    backbone = json.loads(record.read_text())["backbone"]
    assert (backbone["pretrain"]["method"], backbone["pretrain"]["stated_by"]) == ("simclr-v1", "--weights-format")
    assert backbone["normalisation"] == UNNORMALISED.record() and backbone["format"] == "torchvision"


def test_linear_on_a_dino_full_checkpoint_passes_the_sanity_check(weights: dict[str, Path], shapes_root: Path,
                                                                  tmp_path: Path) -> None:
    """The teacher of a full checkpoint is read, evaluated with the ViT's class token, and the sanity check (the
    frozen tensors re-read from the file) holds."""
    cfg = load_linear_config("lincls_embedded", ["optim.epochs=1", "optim.batch_size=16", "data.workers=0"],
                             flags={"data": {"path": str(shapes_root), "crop_size": 32, "resize": 32},
                                    "run": {"output_dir": str(tmp_path / "linear"), "device": "cpu"}})
    record = json.loads(classification.linear.linear_eval(cfg, str(weights["dino-vit"]), show_progress=False)
                        .read_text())
    assert record["sanity_check"] == "passed"
    assert (record["backbone"]["format"], record["backbone"]["encoder"], record["backbone"]["arch"]) == (
        "dino-full", "teacher", "vit_nano_p4")
    assert record["backbone"]["model"]["num_heads"] == 3 and record["backbone"]["pretrain"]["stated_by"] == "file"


def test_the_cli_refuses_an_unnamed_plain_resnet_and_records_the_named_method(weights: dict[str, Path],
                                                                                shapes_root: Path,
                                                                                tmp_path: Path) -> None:
    """``moco eval knn resnet18.pth``: one line naming the candidates, exit 2, no record; ``--weights-format byol``:
    the record says BYOL, its online network, ImageNet's statistics; a name that is no format is one line too."""
    runner = CliRunner()
    small = ["--data", str(shapes_root), "--crop-size", "32", "--resize", "32", "--workers", "0", "--k", "5",
             "--device", "cpu"]
    res = runner.invoke(app, ["eval", "knn", str(weights["plain"]), *small, "--output-dir", str(tmp_path / "a")])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
    assert "could be supervised, moco, mocov3, dino, swav, deepcluster-v2, sela-v2, barlowtwins, byol, simclr-v1, " \
        "simclr-v2; say which with --weights-format" in res.output and not (tmp_path / "a" / "result.json").exists()
    res = runner.invoke(app, ["eval", "knn", str(weights["plain"]), *small, "--weights-format", "dinov3",
                              "--output-dir", str(tmp_path / "b")])
    assert res.exit_code == 2 and "run.weights_format: 'dinov3' is no weights format" in res.output
    res = runner.invoke(app, ["eval", "knn", str(weights["plain"]), *small, "--weights-format", "byol",
                              "--output-dir", str(tmp_path / "c")])
    assert res.exit_code == 0, res.output
    backbone = json.loads((tmp_path / "c" / "result.json").read_text())["backbone"]
    assert (backbone["pretrain"]["method"], backbone["encoder"], backbone["normalisation"]["name"]) == (
        "byol", "online", "imagenet")
    assert torch.load(weights["plain"], weights_only=True).keys() == {k for k in layouts.resnet_state()
                                                                       if not k.startswith("fc.")}


def test_finetune_takes_the_option_and_the_normalisation(weights: dict[str, Path], shapes_root: Path,
                                                         tmp_path: Path) -> None:
    """``moco eval finetune FILE --weights-format simclr-v1``: the record names SimCLR v1 and its [0, 1] inputs."""
    res = CliRunner().invoke(app, ["eval", "finetune", str(weights["simclr"]), "-c", "finetune_embedded",
                                   "--weights-format", "simclr-v1", "--data", str(shapes_root), "--set",
                                   "optim.epochs=1", "--set", "optim.batch_size=16", "--set", "data.crop_size=32",
                                   "--set", "data.resize=32", "--workers", "0", "--device", "cpu", "--quiet",
                                   "--output-dir", str(tmp_path / "ft")])
    assert res.exit_code == 0, res.output
    record = json.loads((tmp_path / "ft" / "result.json").read_text())
    assert record["config"]["run"]["weights_format"] == "simclr-v1"
    assert (record["backbone"]["pretrain"]["method"], record["backbone"]["normalisation"]["name"]) == (
        "simclr-v1", "none")
