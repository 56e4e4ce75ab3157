"""The MoCo v3 GPU stage (benchmarks/mocov3_gpu_step.py), on the CPU: the rebuilt official recipe computes what
our step computes, and the stage's script runs its dry-run command line to the end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from moco_core.config import load_config
from moco_core.model.methods import build_method
from moco_core.model.optimizers import LARS
from moco_core.pretrain_config import PretrainConfig
from moco_core.run.engine import train_step
from moco_core.run.train import build_optimizer

pytest.importorskip("timm")
ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"


@pytest.fixture
def reference_v3(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201 - the benchmarks folder's module
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import reference_v3

    yield reference_v3
    sys.modules.pop("reference_v3", None)


def tiny_vit() -> PretrainConfig:
    return load_config(PretrainConfig, "mocov3_vit_base_300ep", [
        "model.arch=vit_nano_p4", "augment.crop_size=16", "optim.batch_size=8", "v3.mlp_dim=32", "v3.dim=16",
        "data.path=x", "model.shuffle_bn=none", "v3.stop_grad_conv1=false"])


def test_the_official_recipe_computes_our_step(reference_v3) -> None:
    """Same weights and views, in fp32: the same loss, momentum encoder after the update, and weights after one
    AdamW step; the reference's attention is the written-out one (timm 0.4.9's), ours the fused one."""
    cfg = tiny_vit()
    torch.manual_seed(0)
    method = build_method(cfg, world_size=1, num_classes=0, dataset_size=0)
    torch.manual_seed(0)
    built = build_method(cfg, world_size=1, num_classes=0, dataset_size=0).module
    ref = reference_v3.ReferenceMoCoV3(built.encoder, built.momentum_encoder, built.predictor, temperature=0.2)
    with torch.no_grad():  # a momentum encoder different from the base one, so the update matters
        for p_ours, p_ref in zip(method.module.momentum_encoder.parameters(), ref.momentum_encoder.parameters(),
                                 strict=True):
            p_ours.mul_(0.5)
            p_ref.mul_(0.5)
    assert reference_v3.unfused_attention(ref) == 12  # 6 blocks in each encoder
    assert all(m.fused_attn for m in method.module.modules() if hasattr(m, "fused_attn"))
    x1, x2 = torch.randn(8, 3, 16, 16), torch.randn(8, 3, 16, 16)
    lr, m = 1e-3, 0.9
    ours_opt = build_optimizer(method.module, cfg.optim, torch.device("cpu"), method="mocov3", vit=True)
    for group in ours_opt.param_groups:
        group["lr"] = lr
    ref_opt = torch.optim.AdamW(ref.parameters(), lr, weight_decay=cfg.optim.weight_decay)
    # The keys' part of each qkv bias gets a gradient of ~0 (softmax ignores a shift shared by a row), whose
    # rounding noise Adam at eps 1e-8 turns into steps of +-lr: compared at an eps that keeps them small.
    for group in (*ours_opt.param_groups, *ref_opt.param_groups):
        group["eps"] = 1e-3
    method.module.momentum = m
    stats, _ = train_step(method.module, method, ((x1, x2), torch.zeros(8), torch.zeros(8)), ours_opt,
                          device=torch.device("cpu"), amp=False, channels_last=False)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    ref_loss = reference_v3.reference_step(ref, ref_opt, scaler, x1, x2, lr=lr, m=m)
    assert stats[0].item() == pytest.approx(ref_loss, rel=1e-5)
    for name, mine, theirs in [("encoder", method.module.encoder, ref.base_encoder),
                               ("momentum_encoder", method.module.momentum_encoder, ref.momentum_encoder),
                               ("predictor", method.module.predictor, ref.predictor)]:
        for (key, a), b in zip(mine.state_dict().items(), theirs.state_dict().values(), strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5, msg=f"{name}.{key}")


def test_the_official_resnet_recipe_computes_our_step(reference_v3) -> None:
    """The ResNet setup (mocov3_r50_100ep's, on a ResNet-18): the same loss, momentum encoder and weights after one
    LARS step (the official optimizer's loop is ours: tests/moco_core/model/test_optimizers.py works it by hand;
    weight decay raised so that it shows)."""
    cfg = load_config(PretrainConfig, "mocov3_r50_100ep", [
        "model.arch=resnet18", "augment.crop_size=16", "optim.batch_size=8", "v3.mlp_dim=32", "v3.dim=16",
        "data.path=x", "model.shuffle_bn=none", "optim.weight_decay=0.01"])
    torch.manual_seed(0)
    method = build_method(cfg, world_size=1, num_classes=0, dataset_size=0)
    torch.manual_seed(0)
    built = build_method(cfg, world_size=1, num_classes=0, dataset_size=0).module
    ref = reference_v3.ReferenceMoCoV3(built.encoder, built.momentum_encoder, built.predictor, temperature=1.0)
    with torch.no_grad():
        for p_ours, p_ref in zip(method.module.momentum_encoder.parameters(), ref.momentum_encoder.parameters(),
                                 strict=True):
            p_ours.mul_(0.5)
            p_ref.mul_(0.5)
    x1, x2 = torch.randn(8, 3, 16, 16), torch.randn(8, 3, 16, 16)
    lr, m = 0.3, 0.9
    ours_opt = build_optimizer(method.module, cfg.optim, torch.device("cpu"), method="mocov3", vit=False)
    for group in ours_opt.param_groups:
        group["lr"] = lr
    ref_opt = LARS(ref.parameters(), lr, weight_decay=0.01, momentum=0.9)
    method.module.momentum = m
    before = [p.detach().clone() for p in method.module.encoder.parameters()]
    stats, _ = train_step(method.module, method, ((x1, x2), torch.zeros(8), torch.zeros(8)), ours_opt,
                          device=torch.device("cpu"), amp=False, channels_last=False)
    moved = [not torch.equal(a, b) for a, b in zip(method.module.encoder.parameters(), before, strict=True)]
    assert sum(moved) > len(moved) / 2  # (zero-init residual BN: each block's bn1 gets no gradient at first)
    ref_loss = reference_v3.reference_step(ref, ref_opt, torch.amp.GradScaler("cpu", enabled=False), x1, x2, lr=lr,
                                           m=m)
    assert stats[0].item() == pytest.approx(ref_loss, rel=1e-5)
    for mine, theirs in [(method.module.encoder, ref.base_encoder), (method.module.predictor, ref.predictor),
                         (method.module.momentum_encoder, ref.momentum_encoder)]:
        for (key, a), b in zip(mine.state_dict().items(), theirs.state_dict().values(), strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5, msg=key)


def test_the_reference_momentum_update_is_the_official_rule(reference_v3) -> None:
    """p_m <- m p_m + (1 - m) p_b, worked by hand on one parameter."""
    base, momentum = torch.nn.Linear(1, 1, bias=False), torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        base.weight.fill_(2.0)
        momentum.weight.fill_(1.0)
    ref = reference_v3.ReferenceMoCoV3(base, momentum, torch.nn.Identity(), temperature=1.0)
    ref.update_momentum_encoder(0.75)
    assert momentum.weight.item() == pytest.approx(0.75 * 1.0 + 0.25 * 2.0)  # 1.25


DRY_RUN = ["--arch", "vit_nano_p4", "--image-size", "32", "--batch", "8", "--steps", "2", "--warmup", "1",
           "--mlp-dim", "64", "--device", "cpu", "--no-compile", "--json"]


def test_the_stage_script_dry_run_on_cpu() -> None:
    """The command line gpu_report.sh's mocov3_vit stage runs, shrunk: both steps timed, and their ratio."""
    res = subprocess.run([sys.executable, "benchmarks/mocov3_gpu_step.py", *DRY_RUN], cwd=ROOT, capture_output=True,
                         text=True, timeout=300, env={"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
                                                      "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr[-2000:]
    result = json.loads(res.stdout.strip().splitlines()[-1])
    ours, ref = result["ours"], result["reference"]
    assert ours["images_per_s"] > 0 and ref["images_per_s"] > 0
    assert result["ratio"] == pytest.approx(ours["images_per_s"] / ref["images_per_s"])
    assert (ours["precision"], ours["compiled"], ref["precision"]) == ("fp32", False, "fp32")  # CPU: no autocast
    assert ours["sdpa_blocks"] == 12 and ref["unfused_attention_blocks"] == 12
    assert "ours / official" in res.stdout


def test_the_resnet_stage_dry_run_on_cpu() -> None:
    """The mocov3_r50 stage's command line, shrunk to a ResNet-18: LARS both sides, no attention."""
    res = subprocess.run([sys.executable, "benchmarks/mocov3_gpu_step.py", *DRY_RUN, "--arch", "resnet18"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300,
                         env={"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr[-2000:]
    result = json.loads(res.stdout.strip().splitlines()[-1])
    assert result["arch"] == "resnet18" and result["ours"]["attention"] is None
    assert result["ours"]["images_per_s"] > 0 and result["reference"]["images_per_s"] > 0
