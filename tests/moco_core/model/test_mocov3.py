"""MoCo v3: the step against an independent reference, the heads' layout, the momentum and lr schedules."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from moco_core.config import ConfigError, load_config
from moco_core.model.methods import build_method
from moco_core.model.mocov3 import build_mlp, momentum_at
from moco_core.pretrain_config import OptimConfig, PretrainConfig
from moco_core.run import engine
from moco_core.run.train import StepSchedule, build_optimizer, learning_rate


def v3_config(arch: str, *sets: str) -> PretrainConfig:
    return load_config(PretrainConfig, "mocov3_embedded", [
        f"model.arch={arch}", "v3.dim=16", "v3.mlp_dim=32", "data.path=x", *sets])


def test_momentum_follows_the_half_cycle_cosine_from_m_to_1() -> None:
    # 1 - (1 + cos(pi t)) / 2 * (1 - m), worked by hand for m = 0.99
    assert momentum_at(0.99, 0.0) == pytest.approx(0.99)
    assert momentum_at(0.99, 0.5) == pytest.approx(0.995)  # cos(pi / 2) = 0
    assert momentum_at(0.99, 0.25) == pytest.approx(1 - 0.5 * (1 + 0.7071067811865476) * 0.01)  # 0.9914645
    assert momentum_at(0.99, 1.0) == pytest.approx(1.0)
    assert momentum_at(0.996, 0.5) == pytest.approx(0.998)


def test_lr_warms_up_then_follows_the_cosine_per_step() -> None:
    cfg = OptimConfig(lr=0.6, batch_size=4096, epochs=100, schedule="cosine", warmup_epochs=10)
    base = 0.6 * 4096 / 256  # 9.6
    assert learning_rate(cfg, 0) == 0.0
    assert learning_rate(cfg, 2.3) == pytest.approx(base * 0.23)  # 2.208: epoch 2, step 3 of 10
    assert learning_rate(cfg, 10) == pytest.approx(9.6)
    assert learning_rate(cfg, 55) == pytest.approx(4.8)  # half way through the 90 cosine epochs
    assert learning_rate(cfg, 100) == pytest.approx(0.0)
    # no warm-up: v1/v2's per-epoch values are unchanged
    assert learning_rate(OptimConfig(schedule="cosine"), 100) == pytest.approx(0.015)


class _Method:  # what StepSchedule asks of a method
    def __init__(self) -> None:
        self.progress: list[float] = []

    def schedule(self, progress: float) -> None:
        self.progress.append(progress)


def test_step_schedule_sets_lr_and_momentum_at_the_fractional_epoch() -> None:
    cfg = OptimConfig(lr=0.6, batch_size=256, epochs=4, schedule="cosine", warmup_epochs=2)
    param = nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=123.0)
    method = _Method()
    schedule = StepSchedule(cfg, method, optimizer, epoch=1, steps_per_epoch=4)  # type: ignore[arg-type]
    assert schedule(2) == pytest.approx(0.6 * 1.5 / 2)  # epoch 1.5 of a 2-epoch warm-up
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.45)
    assert method.progress == [pytest.approx(1.5 / 4)]


def test_heads_have_the_official_layout() -> None:
    net = build_mlp(2, 8, 32, 16, last_bn=True)
    assert [type(m).__name__ for m in net] == ["Linear", "BatchNorm1d", "ReLU", "Linear", "BatchNorm1d"]
    assert net[0].bias is None and net[3].bias is None  # no bias in the linear layers
    assert net[1].affine and not net[4].affine  # the last BN has no affine parameters
    method = build_method(v3_config("resnet18"), world_size=1, num_classes=0, dataset_size=0)
    keys = [k for k in method.state_dict() if not k.endswith(("running_mean", "running_var", "num_batches_tracked"))]
    # the official MoCo_ResNet: a 2-layer projector as fc, a predictor without a final BN
    assert [k for k in keys if k.startswith("module.base_encoder.fc")] == [
        "module.base_encoder.fc.0.weight", "module.base_encoder.fc.1.weight", "module.base_encoder.fc.1.bias",
        "module.base_encoder.fc.3.weight"]
    assert [k for k in keys if k.startswith("module.predictor")] == [
        "module.predictor.0.weight", "module.predictor.1.weight", "module.predictor.1.bias",
        "module.predictor.3.weight"]
    assert "module.predictor.4.running_mean" not in method.state_dict()
    assert "module.base_encoder.fc.4.running_mean" in method.state_dict()  # the projector's last BN
    assert method.state_dict()["module.base_encoder.fc.0.weight"].shape == (32, 512)
    assert not any(k.startswith("module.momentum_encoder") and "predictor" in k for k in keys)
    # zero_init_residual, as the official main_moco.py builds its ResNets
    assert method.module.encoder.layer1[0].bn2.weight.abs().sum() == 0


def test_vit_heads_have_the_official_layout() -> None:
    pytest.importorskip("timm")
    method = build_method(v3_config("vit_nano_p4"), world_size=1, num_classes=0, dataset_size=0)
    state = method.state_dict()
    keys = [k for k in state if not k.endswith(("running_mean", "running_var", "num_batches_tracked"))]
    # the official MoCo_ViT: a 3-layer projector as head, a predictor ending in a BN without affine parameters
    assert [k for k in keys if k.startswith("module.base_encoder.head")] == [
        "module.base_encoder.head.0.weight", "module.base_encoder.head.1.weight", "module.base_encoder.head.1.bias",
        "module.base_encoder.head.3.weight", "module.base_encoder.head.4.weight", "module.base_encoder.head.4.bias",
        "module.base_encoder.head.6.weight"]
    assert "module.base_encoder.head.7.running_mean" in state and "module.predictor.4.running_mean" in state
    assert state["module.base_encoder.head.0.weight"].shape == (32, 96)


def _reference_lars(params: list[nn.Parameter], state: dict[int, torch.Tensor], *, lr: float, wd: float,
                    momentum: float) -> None:
    """LARS as arXiv 1708.03888 and the official moco-v3 describe it, written out again."""
    with torch.no_grad():
        for i, p in enumerate(params):
            if p.grad is None:
                continue
            g = p.grad.clone()
            if p.dim() >= 2:
                g = g + wd * p
                wn, gn = p.norm(), g.norm()
                if wn > 0 and gn > 0:
                    g = g * (0.001 * wn / gn)
            state[i] = momentum * state.get(i, torch.zeros_like(p)) + g
            p -= lr * state[i]


def _reference_loss(base: nn.Module, momentum: nn.Module, predictor: nn.Module, x1: torch.Tensor, x2: torch.Tensor,
                    m: float, t: float) -> torch.Tensor:
    """The official step's forward: both views, the momentum update, ctr(q1, k2) + ctr(q2, k1), each times 2T."""
    q1, q2 = predictor(base(x1)), predictor(base(x2))
    with torch.no_grad():
        for pb, pm in zip(base.parameters(), momentum.parameters(), strict=True):
            pm.copy_(pm * m + pb * (1 - m))
        k1, k2 = momentum(x1), momentum(x2)

    def ctr(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        logits = torch.einsum("nc,mc->nm", F.normalize(q, dim=1), F.normalize(k, dim=1)) / t
        return F.cross_entropy(logits, torch.arange(q.shape[0])) * 2 * t

    return ctr(q1, k2) + ctr(q2, k1)


@pytest.mark.parametrize(("arch", "optimizer"), [("resnet18", "lars"), ("vit_nano_p4", "adamw"),
                                                 ("resnet18", "adamw")])
def test_steps_match_an_independent_reference(arch: str, optimizer: str) -> None:
    if arch.startswith("vit"):
        pytest.importorskip("timm")
    cfg = v3_config(arch, f"optim.optimizer={optimizer}", "optim.epochs=2", "optim.warmup_epochs=1",
                    "optim.weight_decay=0.05", "optim.lr=0.5" if optimizer == "lars" else "optim.lr=0.01",
                    "optim.batch_size=8", "v3.temperature=0.2", "v3.momentum=0.9",
                    *(["v3.stop_grad_conv1=true"] if arch.startswith("vit") else []))
    torch.manual_seed(0)
    method = build_method(cfg, world_size=1, num_classes=0, dataset_size=0)
    ours = build_optimizer(method.module, cfg.optim, torch.device("cpu"), method="mocov3", vit=arch.startswith("vit"))
    assert type(ours).__name__ == {"lars": "LARS", "adamw": "AdamW"}[optimizer]
    base = copy.deepcopy(method.module.encoder)
    momentum = copy.deepcopy(method.module.momentum_encoder)
    predictor = copy.deepcopy(method.module.predictor)
    trained = [*base.parameters(), *predictor.parameters()]
    ref_adamw = torch.optim.AdamW(trained, lr=0.0, weight_decay=0.05) if optimizer == "adamw" else None
    lars_state: dict[int, torch.Tensor] = {}
    steps_per_epoch = 2
    batches = [(torch.randn(8, 3, 32, 32), torch.randn(8, 3, 32, 32)) for _ in range(3)]
    # steps at epochs 0.5 (warm-up), 1.0 and 1.5 (cosine); m rises from 0.9 along its cosine
    for (epoch, i), (x1, x2) in zip([(0, 1), (1, 0), (1, 1)], batches, strict=True):
        lr = StepSchedule(cfg.optim, method, ours, epoch=epoch, steps_per_epoch=steps_per_epoch)(i)
        values, _ = engine.train_step(method.module, method, ((x1, x2), torch.zeros(8), torch.zeros(8)), ours,
                                      device=torch.device("cpu"), amp=False, channels_last=False)
        at = epoch + i / steps_per_epoch
        ref_lr = 0.5 * 8 / 256 * at if at < 1 else 0.5 * 8 / 256 * 0.5 * (1 + math.cos(math.pi * (at - 1) / 1))
        if optimizer == "adamw":
            ref_lr = ref_lr / 0.5 * 0.01
        assert lr == pytest.approx(ref_lr)
        m = 1 - 0.5 * (1 + math.cos(math.pi * at / 2)) * (1 - 0.9)
        loss = _reference_loss(base, momentum, predictor, x1, x2, m, 0.2)
        for p in trained:
            p.grad = None
        loss.backward()
        ours_trained = dict([*method.module.encoder.named_parameters(), *(
            (f"predictor.{k}", v) for k, v in method.module.predictor.named_parameters())])
        names = [*(k for k, _ in base.named_parameters()), *(f"predictor.{k}" for k, _ in predictor.named_parameters())]
        for name, p in zip(names, trained, strict=True):
            if p.grad is None:  # the frozen patch projection
                assert ours_trained[name].grad is None
                continue
            scale = max(1.0, p.grad.abs().max().item())  # fp32 sums in another order: ~1e-5 of the largest
            assert (ours_trained[name].grad - p.grad).abs().max().item() <= 5e-5 * scale, name
            if ref_adamw is not None:
                # Adam's first steps normalise each element of the gradient: where it is near zero (k's bias in
                # attention has an analytically zero one) float noise alone decides +-lr, so the update is
                # compared from the same gradients (just checked to agree).
                p.grad.copy_(ours_trained[name].grad)
        if ref_adamw is not None:
            ref_adamw.param_groups[0]["lr"] = ref_lr
            ref_adamw.step()
        else:
            _reference_lars(trained, lars_state, lr=ref_lr, wd=0.05, momentum=0.9)
        assert values[0].item() == pytest.approx(loss.item(), abs=1e-5)
    for name, theirs in [("encoder", base), ("momentum_encoder", momentum), ("predictor", predictor)]:
        mine = getattr(method.module, name).state_dict()
        for key, value in theirs.state_dict().items():
            torch.testing.assert_close(mine[key], value, atol=1e-5, rtol=1e-5, msg=f"{name}.{key}")


def test_the_loss_is_the_official_scale() -> None:
    # At T the official loss of uniform logits is 2 ctr's of ln(N) times 2T each: 4T ln(N).
    cfg = v3_config("resnet18", "v3.temperature=0.5")
    method = build_method(cfg, world_size=1, num_classes=0, dataset_size=0)
    logits = torch.zeros(2 * 8, 8)
    labels = torch.arange(8).repeat(2)
    assert (F.cross_entropy(logits, labels) * method.loss_scale).item() == pytest.approx(4 * 0.5 * math.log(8))


@pytest.mark.parametrize(("sets", "message"), [
    (["model.queue_size=1024"], "model.queue_size: not used by method mocov3"),
    (["model.temperature=0.2"], "use v3.temperature"),
    (["v3.stop_grad_conv1=true"], "v3.stop_grad_conv1: freezes a ViT's patch projection"),
    (["optim.warmup_epochs=30"], "optim.warmup_epochs: must be in [0, optim.epochs)"),
    (["v3.momentum=1.5"], "v3.momentum: must be in [0, 1]"),
])
def test_mocov3_config_errors_are_one_line(sets: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=None) as err:
        load_config(PretrainConfig, "mocov3_embedded", sets)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_vit_without_timm_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "timm" else find_spec(name, *a))
    with pytest.raises(ConfigError) as err:
        load_config(PretrainConfig, "mocov3_vit_small_300ep", ["data.path=x"])
    assert str(err.value) == "model.arch: vit_small needs timm: pip install 'moco[vit]' (or pip install timm)"


def test_vits_are_for_mocov3_and_warm_up_for_v3_only() -> None:
    with pytest.raises(ConfigError, match="model.arch: vit_small is for method mocov3"):
        load_config(PretrainConfig, "embedded", ["model.arch=vit_small"])
    with pytest.raises(ConfigError, match="optim.warmup_epochs: only mocov3 warms up"):
        load_config(PretrainConfig, "embedded", ["optim.warmup_epochs=2"])


@pytest.mark.parametrize("key", ["dim=128", "mlp_dim=1024", "temperature=0.2", "momentum=0.996", "momentum_cos=false"])
def test_the_other_methods_refuse_v3_settings(key: str) -> None:
    """Symmetric to mocov3 refusing model.queue_size: a v3 value under another method would be silently unused."""
    with pytest.raises(ConfigError) as err:
        load_config(PretrainConfig, "embedded", [f"v3.{key}"])
    name = key.split("=")[0]
    assert str(err.value) == (f"v3.{name}: not used by method moco (the v3 section is MoCo v3's: set method: mocov3, "
                              "or model.* for v1/v2)")
    for method in ("end2end", "supervised"):
        with pytest.raises(ConfigError, match=f"v3.{name}: not used by method {method}"):
            load_config(PretrainConfig, "embedded", [f"v3.{key}", f"method={method}"])
    assert load_config(PretrainConfig, "mocov3_embedded", [f"v3.{key}"]).method == "mocov3"


def test_warmup_follows_a_shorter_run() -> None:
    cfg = load_config(PretrainConfig, "mocov3_r50_300ep", ["optim.epochs=30", "data.path=x"])
    assert cfg.optim.warmup_epochs == 1  # 10 of 300 -> round(1.0)
    cfg = load_config(PretrainConfig, "mocov3_r50_100ep", ["optim.epochs=30", "data.path=x"])
    assert cfg.optim.warmup_epochs == 3
