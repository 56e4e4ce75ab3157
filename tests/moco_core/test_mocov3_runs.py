"""MoCo v3 runs: checkpoints in the official moco-v3 layout both ways, resume, the CLI end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torchvision
from torch import nn

from moco_core import checkpoint
from moco_core.config import load_config, replace
from moco_core.model.backbone import load_backbone, read_backbone_state
from moco_core.model.methods import build_method
from moco_core.model.optimizers import LARS
from moco_core.pretrain_config import PretrainConfig
from moco_core.run.preemption import StopSignal
from moco_core.run.train import build_optimizer, pretrain, restore


def v3_cfg(data: Path, out: Path, preset: str = "mocov3_embedded", *sets: str) -> PretrainConfig:
    cfg = load_config(PretrainConfig, preset, [
        "v3.dim=16", "v3.mlp_dim=32", "optim.batch_size=8", "optim.epochs=2", "optim.warmup_epochs=1",
        "data.workers=0", "run.log_every=1", "run.knn_every=0", *sets])
    return replace(cfg, data={"path": str(data)}, run={"output_dir": str(out)})


def official_lincls_state(ckpt_path: Path, linear_keyword: str) -> dict[str, torch.Tensor]:
    """The key handling of the official moco-v3 main_lincls.py, written out: keep module.base_encoder.* less its
    linear layer (fc or head), strip the prefix, drop everything else."""
    state = torch.load(ckpt_path, map_location="cpu", weights_only=True)["state_dict"]
    prefix = "module.base_encoder."
    return {k[len(prefix):]: v for k, v in state.items()
            if k.startswith(prefix) and not k.startswith(prefix + linear_keyword)}


def test_our_resnet_checkpoint_is_in_the_official_layout(shapes_root: Path, tmp_path: Path) -> None:
    run = pretrain(v3_cfg(shapes_root, tmp_path / "run", "mocov3_embedded", "optim.epochs=1",
                          "optim.warmup_epochs=0"), show_progress=False)
    ckpt = checkpoint.load(run / checkpoint.LAST)
    assert {"epoch", "arch", "state_dict", "optimizer", "scaler"} <= set(ckpt)
    assert (ckpt["epoch"], ckpt["arch"], ckpt["method"]) == (1, "resnet18", "mocov3")
    assert ckpt["scaler"]["scale"] == 65536.0  # what the official main_moco.py's GradScaler resumes from
    prefixes = {k.split(".")[1] for k in ckpt["state_dict"]}
    assert prefixes == {"base_encoder", "momentum_encoder", "predictor"}
    model = torchvision.models.resnet18()
    result = model.load_state_dict(official_lincls_state(run / checkpoint.LAST, "fc"), strict=False)
    assert set(result.missing_keys) == {"fc.weight", "fc.bias"} and not result.unexpected_keys
    # our own readers: the evaluations get the same backbone
    state, fmt, facts = read_backbone_state(run / checkpoint.LAST)
    assert fmt == "moco-suite" and facts["method"] == "mocov3"
    loaded, info = load_backbone(str(run), num_classes=8)
    assert info.arch == "resnet18"
    for key, value in official_lincls_state(run / checkpoint.LAST, "fc").items():
        assert torch.equal(loaded.state_dict()[key], value), key


def test_our_vit_checkpoint_is_in_the_official_layout(shapes_root: Path, tmp_path: Path) -> None:
    timm = pytest.importorskip("timm")
    run = pretrain(v3_cfg(shapes_root, tmp_path / "run", "mocov3_vit_embedded", "optim.epochs=1",
                          "optim.warmup_epochs=0"), show_progress=False)
    model = timm.models.vision_transformer.VisionTransformer(img_size=32, patch_size=4, embed_dim=96, depth=6,
                                                             num_heads=3, num_classes=8)
    result = model.load_state_dict(official_lincls_state(run / checkpoint.LAST, "head"), strict=False)
    assert set(result.missing_keys) == {"head.weight", "head.bias"} and not result.unexpected_keys
    loaded, info = load_backbone(str(run), num_classes=8)  # eval linear and eval knn read it
    assert info.arch == "vit_nano_p4" and loaded(torch.randn(2, 3, 32, 32)).shape == (2, 8)


class OfficialResNetMoCo(nn.Module):
    """The official moco-v3 MoCo_ResNet's layout, built here without our code: base_encoder (a torchvision ResNet
    whose fc is the projector), momentum_encoder, predictor."""

    def __init__(self, dim: int = 16, mlp_dim: int = 32) -> None:
        super().__init__()

        def mlp(layers: int, first: int, last_bn: bool) -> nn.Sequential:
            out: list[nn.Module] = []
            for i in range(layers):
                out.append(nn.Linear(first if i == 0 else mlp_dim, dim if i == layers - 1 else mlp_dim, bias=False))
                if i < layers - 1:
                    out += [nn.BatchNorm1d(mlp_dim), nn.ReLU()]
                elif last_bn:
                    out.append(nn.BatchNorm1d(dim, affine=False))
            return nn.Sequential(*out)

        self.base_encoder = torchvision.models.resnet18()
        self.momentum_encoder = torchvision.models.resnet18()
        self.base_encoder.fc, self.momentum_encoder.fc = mlp(2, 512, True), mlp(2, 512, True)
        self.predictor = mlp(2, dim, False)


def test_an_official_checkpoint_resumes(shapes_root: Path, tmp_path: Path) -> None:
    torch.manual_seed(1)
    official = OfficialResNetMoCo()
    optimizer = LARS(official.parameters(), lr=0.1, weight_decay=1e-6)
    for p in official.base_encoder.parameters():
        p.grad = torch.randn_like(p)
    optimizer.step()
    path = tmp_path / "checkpoint_0000.pth.tar"
    state = {f"module.{k}": v for k, v in official.state_dict().items()}
    torch.save({"epoch": 1, "arch": "resnet18", "state_dict": state, "optimizer": optimizer.state_dict(),
                "scaler": dict(checkpoint.FRESH_SCALER)}, path)
    assert checkpoint.checkpoint_method(checkpoint.load(path)) == "mocov3"
    cfg = v3_cfg(shapes_root, tmp_path / "run")
    method = build_method(cfg, world_size=1, num_classes=0, dataset_size=0)
    ours = build_optimizer(method.module, cfg.optim, torch.device("cpu"), method="mocov3")
    start = restore(path, method, ours, steps_per_epoch=4, model_arch="resnet18")
    assert (start.epoch, start.step) == (1, 4)
    for key, value in official.base_encoder.state_dict().items():
        assert torch.equal(method.module.encoder.state_dict()[key], value), key
    for key, value in official.predictor.state_dict().items():
        assert torch.equal(method.module.predictor.state_dict()[key], value), key
    mine, theirs = ours.state_dict()["state"], optimizer.state_dict()["state"]
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[i]["mu"], theirs[i]["mu"]) for i in mine)
    # eval linear, eval knn and detection read its base encoder as a ResNet
    loaded, info = load_backbone(str(path), num_classes=8)
    assert info.format == "official-mocov3" and info.arch == "resnet18"
    assert torch.equal(loaded.layer1[0].conv1.weight, official.base_encoder.layer1[0].conv1.weight)
    # a v1/v2 run does not take it
    v2 = build_method(load_config(PretrainConfig, "embedded", ["data.path=x"]), world_size=1, num_classes=0,
                      dataset_size=0)
    with pytest.raises(checkpoint.CheckpointError, match="was written by method 'mocov3', not 'moco'"):
        restore(path, v2, build_optimizer(v2.module, cfg.optim, torch.device("cpu")), 4, "resnet18")


def test_a_stopped_run_resumes_exactly(shapes_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # lr and m are set every step from the step's place in the run: a run stopped mid-epoch goes on with them
    cfg = v3_cfg(shapes_root, tmp_path / "straight", "mocov3_embedded", "optim.epochs=3", "run.checkpoint_steps=0")
    straight = pretrain(cfg, show_progress=False)
    monkeypatch.setattr(StopSignal, "requested", lambda self, step: step == 5)  # as if SIGTERM came in step 5
    stopped = pretrain(replace(cfg, run={"output_dir": str(tmp_path / "run")}), show_progress=False)
    assert checkpoint.load(stopped / checkpoint.LAST)["global_step"] == 5
    monkeypatch.undo()
    resumed = pretrain(replace(cfg, run={"output_dir": str(stopped)}), resume=stopped, show_progress=False)
    a = checkpoint.load(straight / checkpoint.LAST)["state_dict"]
    b = checkpoint.load(resumed / checkpoint.LAST)["state_dict"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    lrs = [json.loads(line).get("lr") for line in (resumed / "metrics.jsonl").read_text().splitlines()]
    assert lrs[0] == 0.0 and max(x for x in lrs if x is not None) > 0  # the warm-up starts at 0, per step


def moco(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, text=True, env=env, timeout=600)


def test_the_embedded_preset_runs_and_resumes_through_the_cli(shapes_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    tiny = ["--set", "optim.batch_size=16", "--set", "v3.mlp_dim=64", "--set", "run.knn_every=0", "--workers", "0",
            "--data", str(shapes_root), "--output-dir", str(out), "--quiet"]
    first = moco("pretrain", "-c", "mocov3_embedded", "--set", "optim.epochs=1", "--set", "optim.warmup_epochs=0",
                 *tiny)
    assert first.returncode == 0, first.stderr
    assert checkpoint.load(out / checkpoint.LAST)["epoch"] == 1
    again = moco("pretrain", "--resume", "--set", "optim.epochs=2", *tiny)
    assert again.returncode == 0, again.stderr
    ckpt = checkpoint.load(out / checkpoint.LAST)
    assert (ckpt["epoch"], ckpt["global_step"], ckpt["config"]["method"]) == (2, 4, "mocov3")
    bad = moco("pretrain", "-c", "mocov3_embedded", "--set", "model.queue_size=16", "--data", str(shapes_root),
               "--output-dir", str(tmp_path / "bad"))
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "error: model.queue_size: not used by method mocov3 (it has no queue)"]


@pytest.mark.parametrize("preset", ["mocov3_r50_100ep", "mocov3_r50_300ep", "mocov3_r50_1000ep", "mocov3_embedded",
                                    "mocov3_vit_small_300ep", "mocov3_vit_base_300ep", "mocov3_vit_embedded"])
def test_smoke_runs_of_the_v3_presets_stay_v3(monkeypatch: pytest.MonkeyPatch, preset: str) -> None:
    if "vit" in preset:
        pytest.importorskip("timm")
    monkeypatch.setenv("MOCO_SMOKE", "1")
    cfg = load_config(PretrainConfig, preset, ["data.path=x"])  # validated: no queue set, a ViT stays a ViT
    assert cfg.method == "mocov3" and cfg.model.arch == ("vit_nano_p4" if "vit" in preset else "resnet18")
    assert cfg.optim.warmup_epochs < cfg.optim.epochs and cfg.v3.mlp_dim == 64


def test_a_smoke_run_of_the_vit_small_preset(shapes_root: Path, tmp_path: Path) -> None:
    pytest.importorskip("timm")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "MOCO_SMOKE": "1"}
    out = tmp_path / "vit_s"
    result = subprocess.run([sys.executable, "-m", "cli", "pretrain", "-c", "mocov3_vit_small_300ep", "--data",
                             str(shapes_root), "--output-dir", str(out), "--quiet"], capture_output=True, text=True,
                            env=env, timeout=600)
    assert result.returncode == 0, result.stderr
    ckpt = checkpoint.load(out / checkpoint.LAST)
    assert (ckpt["epoch"], ckpt["arch"], ckpt["config"]["optim"]["optimizer"]) == (3, "vit_nano_p4", "adamw")


def test_eval_knn_reads_a_vit_at_its_crop_size(shapes_root: Path, tmp_path: Path) -> None:
    pytest.importorskip("timm")
    run = pretrain(v3_cfg(shapes_root, tmp_path / "run", "mocov3_vit_embedded", "optim.epochs=1",
                          "optim.warmup_epochs=0"), show_progress=False)
    common = ["eval", "knn", str(run), "--data", str(shapes_root), "--resize", "48", "--workers", "0"]
    ok = moco(*common, "--crop-size", "32", "--output-dir", str(tmp_path / "knn"))
    assert ok.returncode == 0, ok.stderr
    assert json.loads((tmp_path / "knn" / "result.json").read_text())["backbone"]["arch"] == "vit_nano_p4"
    bad = moco(*common, "--crop-size", "40", "--output-dir", str(tmp_path / "knn40"))
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1] == \
        f"error: {run}: its ViT (vit_nano_p4) takes 32-px crops, not 40; evaluate it with --crop-size 32"
