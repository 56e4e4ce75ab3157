"""MoCo v3's linear protocol (facebookresearch/moco-v3 main_lincls.py): lr per 256 images, cosine per epoch,
the class token of a ViT, chosen by default for v3 weights; the sanity check on a ViT."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from classification.linear import (
    MOCOV3_PROTOCOL,
    LinearOptimConfig,
    classifier,
    linear_eval,
    linear_lr,
    load_linear_config,
    protocol_name,
    protocol_note,
)
from moco_core import checkpoint
from moco_core.config import ConfigError, load_config, replace
from moco_core.model.backbone import load_backbone
from moco_core.pretrain_config import PretrainConfig
from moco_core.run.train import pretrain


def test_the_cosine_schedule_against_hand_worked_values() -> None:
    """lr 0.1 per 256 at batch 1024 starts at 0.4; cos(pi/3) = 1/2 gives 0.3 at epoch 30 of 90, cos(pi/2) = 0
    gives 0.2 at 45, cos(2 pi/3) = -1/2 gives 0.1 at 60."""
    v3 = MOCOV3_PROTOCOL
    assert [linear_lr(v3, e) for e in (0, 30, 45, 60)] == pytest.approx([0.4, 0.3, 0.2, 0.1])
    assert linear_lr(replace(v3, scale_lr=False), 30) == pytest.approx(0.075)
    # v1/v2's: not scaled by the batch, x0.1 at 60 and 80
    paper = LinearOptimConfig()
    assert [linear_lr(paper, e) for e in (0, 59, 60, 80)] == pytest.approx([30.0, 30.0, 3.0, 0.3])


def test_the_presets_are_the_official_protocol() -> None:
    resnet = load_linear_config("lincls_mocov3", ["data.path=x"])
    vit = load_linear_config("lincls_mocov3_vit", ["data.path=x"])
    assert resnet.optim == MOCOV3_PROTOCOL and vit.optim == replace(MOCOV3_PROTOCOL, lr=3.0)
    assert protocol_name(resnet) == "linear-mocov3" and protocol_name(load_linear_config(None, ["data.path=x"])) \
        == "linear"
    assert protocol_note(resnet, "resnet50") == "the MoCo v3 protocol"
    assert protocol_note(vit, "vit_small") == "the MoCo v3 protocol"
    assert protocol_note(resnet, "vit_small") == "the MoCo v3 linear protocol with lr 0.1 (MoCo v3's: 3.0)"
    short = load_linear_config("lincls_mocov3_vit_embedded", [])
    assert protocol_note(short, "vit_nano_p4") == ("the MoCo v3 linear protocol with epochs 30 (MoCo v3's: 90), "
                                                   "batch_size 128 (MoCo v3's: 1024), crop_size 32 (MoCo v3's: "
                                                   "224), resize 32 (MoCo v3's: 256)")


def test_a_cosine_schedule_takes_no_milestones_and_keeps_none_when_shortened() -> None:
    with pytest.raises(ConfigError, match=r"optim.milestones: \[60, 80\]: not used by the cosine schedule"):
        load_linear_config(None, ["data.path=x", "optim.schedule=cosine"])
    assert load_linear_config("lincls_mocov3", ["data.path=x", "optim.epochs=9"]).optim.milestones == ()


def _tiny(*sets: str) -> list[str]:
    return ["optim.epochs=2", "optim.batch_size=16", "data.workers=0", "run.log_every=1", *sets]


@pytest.fixture(scope="module")
def vit_run(shapes_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("timm")
    cfg = load_config(PretrainConfig, "mocov3_vit_embedded", [
        "v3.dim=16", "v3.mlp_dim=32", "optim.batch_size=8", "optim.epochs=1", "optim.warmup_epochs=0",
        "data.workers=0", "run.knn_every=0"])
    out = tmp_path_factory.mktemp("vit") / "run"
    return pretrain(replace(cfg, data={"path": str(shapes_root)}, run={"output_dir": str(out)}), show_progress=False)


def test_a_vit_trains_its_head_on_the_class_token_and_nothing_else(vit_run: Path, shapes_root: Path,
                                                                     tmp_path: Path) -> None:
    cfg = load_linear_config("lincls_mocov3_vit_embedded", _tiny())
    cfg = replace(cfg, data={"path": str(shapes_root)}, run={"output_dir": str(tmp_path / "lin")})
    record = json.loads(linear_eval(cfg, str(vit_run), show_progress=False).read_text())
    assert (record["protocol"], record["backbone"]["arch"], record["sanity_check"]) == \
        ("linear-mocov3", "vit_nano_p4", "passed")
    final = checkpoint.load(tmp_path / "lin" / "linear_final.pth.tar")["state_dict"]
    loaded, _ = load_backbone(str(vit_run), 8)
    assert {k for k, v in loaded.state_dict().items() if not torch.equal(v, final[k])} == {"head.weight", "head.bias"}
    # the lr of each epoch: 3 x 16 / 256 = 0.1875 at epoch 0, then (1 + cos(pi / 2)) / 2 of it
    lrs = [json.loads(line)["lr"] for line in (tmp_path / "lin" / "metrics.jsonl").read_text().splitlines()
           if "lr" in json.loads(line) and "top1" in json.loads(line)]
    assert lrs == pytest.approx([0.1875, 0.1875 * 0.5 * (1 + math.cos(math.pi / 2))])
    # what is classified is the class token after the last norm (timm's forward_features ends with it)
    model, _ = load_backbone(str(vit_run), 8)
    model.eval()
    images = torch.randn(2, 3, 32, 32)
    seen = {}
    classifier(model).register_forward_hook(lambda m, inp, out: seen.setdefault("x", inp[0]))
    model(images)
    assert torch.allclose(seen["x"], model.forward_features(images)[:, 0], atol=1e-6)  # timm's: normed tokens


def test_a_random_vit_is_evaluated_at_the_crop_size(shapes_root: Path, tmp_path: Path) -> None:
    pytest.importorskip("timm")
    cfg = load_linear_config("lincls_mocov3_vit_embedded", _tiny("optim.epochs=1"))
    cfg = replace(cfg, arch="vit_nano_p4", data={"path": str(shapes_root)}, run={"output_dir": str(tmp_path / "r")})
    record = json.loads(linear_eval(cfg, "random", show_progress=False).read_text())
    assert (record["backbone"]["format"], record["backbone"]["arch"], record["sanity_check"]) == \
        ("random", "vit_nano_p4", "passed")


def moco(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, text=True, env=env, timeout=600)


def test_v3_weights_get_v3_protocol_by_default_and_a_wrong_crop_is_one_line(vit_run: Path, shapes_root: Path,
                                                                            tmp_path: Path) -> None:
    sets = [a for s in _tiny("optim.epochs=1") for a in ("--set", s)]
    common = ["eval", "linear", str(vit_run), "--data", str(shapes_root), "--quiet", *sets]
    ok = moco(*common, "--set", "data.crop_size=32", "--set", "data.resize=32", "--output-dir", str(tmp_path / "ok"))
    assert ok.returncode == 0, ok.stderr
    assert f"note: {vit_run} is evaluated with MoCo v3's linear protocol (-c lincls_mocov3_vit)" in ok.stderr
    record = json.loads((tmp_path / "ok" / "result.json").read_text())
    assert record["protocol"] == "linear-mocov3" and record["config"]["optim"]["lr"] == 3.0
    bad = moco(*common, "--output-dir", str(tmp_path / "bad"))  # the preset's 224-px crops
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1] == (
        f"error: {vit_run}: its ViT (vit_nano_p4) takes 32-px crops, not 224; evaluate it with --set "
        f"data.crop_size=32 --set data.resize=32")
