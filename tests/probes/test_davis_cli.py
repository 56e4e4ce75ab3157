"""``moco eval davis`` end to end: the embedded videos through typer's CliRunner, ViTs of a file (DINO's, any grid)
and at random init (a fixed grid, read at any frame size), and a broken layout met mid-run in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

from cli import app
from moco_core.model.backbone import load_backbone
from moco_core.model.taps import DenseTaps
from moco_core.model.weights.formats import IMAGENET
from probes.davis.config import load_davis_config
from probes.davis.run import FrameFeatures, davis_eval
from tests.probes.davis_layouts import FRAMES, VIDEOS, davis_layout
from tests.weights_layouts import dino_full, timm_vit_state


def test_the_embedded_videos_through_the_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOCO_DATA_HOME", str(tmp_path / "home"))
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["eval", "davis", "random", "--arch", "resnet18", "-c", "davis_embedded",
                                      "--set", "data.short_side=64", "--output-dir", str(out)])
    assert result.exit_code == 0, result.output
    record = json.loads((out / "result.json").read_text())
    assert record["task"] == "davis" and record["protocol"] == "label-propagation"
    assert set(record["metrics"]) == {"J&F_mean", "J_mean", "F_mean"}
    assert all(0 <= v <= 100 for v in record["metrics"].values())
    assert record["metrics"]["J&F_mean"] == pytest.approx((record["metrics"]["J_mean"] + record["metrics"]["F_mean"])
                                                          / 2)
    assert record["config"]["tap"] == "layer4" and record["config"]["stride"] == 32
    assert record["config"]["context"] == 7 and record["config"]["topk"] == 5 and record["config"]["radius"] == 12
    assert record["dataset"]["videos"] == 3 and record["dataset"]["version"].startswith("davis videos")
    assert record["invocation"]["command"] == "eval davis" and record["backbone"]["source"] == "random"
    frames = sorted((tmp_path / "home").glob("davis-*/DAVIS/JPEGImages/480p/shapes-00/*.jpg"))
    masks = sorted((out / "masks" / "shapes-00").glob("*.png"))
    assert [p.stem for p in masks] == [p.stem for p in frames] and len(frames) == 10
    with Image.open(masks[0]) as first:  # the first frame's annotation, as given, in DAVIS's palette
        assert first.mode == "P"


def _cfg(root: Path, **sets: object) -> object:
    return load_davis_config(None, [f"{k}={v}" for k, v in sets.items()], flags={"data": {"path": str(root)}})


def test_a_dino_vit_reads_its_patch_tokens_on_the_release_layout(tmp_path: Path) -> None:
    root = davis_layout(tmp_path / "data")
    weights = dino_full(tmp_path / "dino.pth", timm_vit_state(), vit=True)
    _, metrics = davis_eval(str(weights), _cfg(root, **{"data.short_side": 24}), tmp_path / "out")
    record = json.loads((tmp_path / "out" / "result.json").read_text())
    assert record["backbone"]["pretrain"]["method"] == "dino" and record["config"] == {
        **record["config"], "tap": "patch", "stride": 4}
    assert len(record["per_object"]) == sum(VIDEOS.values()) == 3
    assert [p.name for p in sorted((tmp_path / "out" / "masks" / "blackswan").iterdir())] == [
        f"{t:05d}.png" for t in range(FRAMES)]
    assert 0 <= metrics["J&F_mean"] <= 100


def test_a_fixed_grid_vit_reads_frames_of_any_size_and_its_own_unchanged() -> None:
    """A ViT built for 32-px crops (MoCo v3's fixed grid) reads a 24 x 40 frame on a 6 x 10 grid, its position
    embedding resampled; at its own crop, its features are those of the model as built."""
    torch.manual_seed(0)
    model, _ = load_backbone(None, 1, arch="vit_nano_p4", crop_size=32)
    model.eval()
    image = torch.rand(1, 3, 32, 32)
    with torch.no_grad():
        before = DenseTaps(model, ("patch",))(image)["patch"]
    reader = FrameFeatures(model, "patch", IMAGENET, torch.device("cpu"), 32, 8)
    with torch.no_grad():
        after = reader.taps(image)["patch"]
        wide = reader.taps(torch.rand(1, 3, 24, 40))["patch"]
    assert torch.allclose(before, after, atol=1e-6) and wide.shape == (1, 96, 6, 10)


def test_a_frame_of_another_size_than_its_annotation_is_one_line(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    root = davis_layout(tmp_path / "data")
    Image.new("RGB", (20, 12)).save(root / "DAVIS" / "JPEGImages" / "480p" / "blackswan" / "00002.jpg")
    result = CliRunner().invoke(app, ["eval", "davis", "random", "--arch", "resnet18", "--data", str(root),
                                      "--output-dir", str(tmp_path / "out"), "--set", "data.short_side=32"])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert "00002.jpg: 20 x 12 pixels, the video's first annotation 40 x 24" in lines[0]


def test_a_cifar_stem_resnet_is_one_line(tmp_path: Path) -> None:
    """Its stages' strides are not those the patch grid is read at (DenseTaps': the ImageNet stem's)."""
    root = davis_layout(tmp_path / "data")
    result = CliRunner().invoke(app, ["eval", "davis", "random", "--arch", "resnet18_cifar", "--data", str(root),
                                      "--output-dir", str(tmp_path / "out"), "--set", "data.short_side=32"])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "a CIFAR-stem ResNet (resnet18_cifar" in lines[0], lines
