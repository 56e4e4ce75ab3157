"""ViT backbones: the fixed sin-cos embedding by hand, fused attention, timm's names, the frozen patch projection."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from moco_core.config import load_config
from moco_core.model.methods import build_method
from moco_core.pretrain_config import PretrainConfig
from moco_core.run import engine
from moco_core.run.train import build_optimizer

timm = pytest.importorskip("timm")

from moco_core.model.vit import build_vit, sincos_position_embedding  # noqa: E402


def test_sincos_embedding_by_hand() -> None:
    # 2 x 2 patches, width 8: D/4 = 2 frequencies, w = 1 and 1/100; patch (row i, column j) is
    # [sin(i), sin(i/100), cos(i), cos(i/100), sin(j), sin(j/100), cos(j), cos(j/100)]
    s1, s01, c1, c01 = math.sin(1), math.sin(0.01), math.cos(1), math.cos(0.01)
    expected = torch.tensor([
        [0, 0, 1, 1, 0, 0, 1, 1],  # row 0, column 0
        [0, 0, 1, 1, s1, s01, c1, c01],  # row 0, column 1
        [s1, s01, c1, c01, 0, 0, 1, 1],  # row 1, column 0
        [s1, s01, c1, c01, s1, s01, c1, c01],  # row 1, column 1
    ])
    torch.testing.assert_close(sincos_position_embedding((2, 2), 8), expected)


def test_the_vit_holds_the_fixed_embedding_with_a_zero_class_token() -> None:
    model = build_vit("vit_nano_p4", img_size=32)
    assert model.pos_embed.shape == (1, 1 + 64, 96) and not model.pos_embed.requires_grad
    assert torch.equal(model.pos_embed[0, 0], torch.zeros(96))
    torch.testing.assert_close(model.pos_embed[0, 1:], sincos_position_embedding((8, 8), 96))
    # patch 9 is row 1, column 1: its first frequency's terms are sin(1), cos(1) for the row and for the column
    assert model.pos_embed[0, 1 + 9, 0].item() == pytest.approx(math.sin(1))
    assert model.pos_embed[0, 1 + 9, 48].item() == pytest.approx(math.sin(1))


def test_attention_runs_through_scaled_dot_product_attention(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    original = F.scaled_dot_product_attention

    def counting(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append(args[0].shape)
        return original(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", counting)
    model = build_vit("vit_nano_p4", img_size=32)
    model(torch.randn(2, 3, 32, 32))
    assert len(calls) == 6  # one per block
    assert calls[0] == (2, 3, 65, 32)  # (batch, heads, 1 + 8 x 8 tokens, 96 / 3)


def test_timm_loads_our_backbones_with_only_the_head_missing() -> None:
    ours = build_vit("vit_tiny_p4", img_size=32, num_classes=10).state_dict()
    theirs = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=4, num_classes=5)
    state = {k: v for k, v in ours.items() if not k.startswith("head.")}
    result = theirs.load_state_dict(state, strict=False)
    assert set(result.missing_keys) == {"head.weight", "head.bias"} and not result.unexpected_keys
    # ViT-S/16 (12 heads in v3; the parameters are those of timm's 6-head vit_small_patch16_224): the same names
    # and shapes, the attention's heads a constructor argument
    small = build_vit("vit_small", img_size=224).state_dict()
    reference = timm.create_model("vit_small_patch16_224", pretrained=False, num_heads=12).state_dict()
    assert {k: tuple(v.shape) for k, v in small.items() if not k.startswith("head")} == \
        {k: tuple(v.shape) for k, v in reference.items() if not k.startswith("head")}


@pytest.mark.parametrize("frozen", [True, False])
def test_the_patch_projection_stays_frozen(frozen: bool) -> None:
    cfg = load_config(PretrainConfig, "mocov3_vit_embedded", [
        "v3.dim=16", "v3.mlp_dim=32", "data.path=x", f"v3.stop_grad_conv1={str(frozen).lower()}",
        "optim.weight_decay=0.1", "optim.lr=0.1"])
    method = build_method(cfg, world_size=1, num_classes=0, dataset_size=0)
    optimizer = build_optimizer(method.module, cfg.optim, torch.device("cpu"), method="mocov3", vit=True)
    for group in optimizer.param_groups:
        group["lr"] = 1e-3
    encoders = (method.module.encoder, method.module.momentum_encoder)
    before = [(e.patch_embed.proj.weight.clone(), e.patch_embed.proj.bias.clone(), e.pos_embed.clone(),
               e.blocks[0].attn.qkv.weight.clone()) for e in encoders]
    method.module.momentum = 0.5  # the momentum encoder moves a lot towards what the base encoder became
    for _ in range(2):
        images = (torch.randn(4, 3, 32, 32), torch.randn(4, 3, 32, 32))
        engine.train_step(method.module, method, (images, torch.zeros(4), torch.zeros(4)), optimizer,
                          device=torch.device("cpu"), amp=False, channels_last=False)
    for encoder, (weight, bias, pos, qkv) in zip(encoders, before, strict=True):
        assert torch.equal(encoder.patch_embed.proj.weight, weight) == frozen
        assert torch.equal(encoder.patch_embed.proj.bias, bias) == frozen
        assert torch.equal(encoder.pos_embed, pos)  # fixed in every case
        assert not torch.equal(encoder.blocks[0].attn.qkv.weight, qkv)  # the rest trains
