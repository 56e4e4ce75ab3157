"""End-to-end and memory-bank mechanisms: gradients, negatives, the InstDisc update; real short runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from moco_core import checkpoint
from moco_core.config import replace
from moco_core.model.backbone import load_backbone
from moco_core.model.mechanisms import EndToEnd, MemoryBank
from moco_core.pretrain_config import PretrainConfig
from moco_core.run.train import pretrain


def tiny_encoder() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 4 * 4, 16), nn.ReLU(), nn.Linear(16, 8))


def test_end_to_end_uses_exactly_the_batch_and_trains_both_branches() -> None:
    model = EndToEnd(tiny_encoder(), temperature=0.5, shuffle_keys=False)
    im_q = torch.randn(6, 3, 4, 4, requires_grad=True)
    im_k = torch.randn(6, 3, 4, 4, requires_grad=True)
    logits, labels = model(im_q, im_k)
    q = F.normalize(model.encoder(im_q), dim=1)
    k = F.normalize(model.encoder(im_k), dim=1)
    assert logits.shape == (6, 6)  # K = N - 1 negatives per query, plus its positive
    assert torch.allclose(logits, q @ k.t() / 0.5, atol=1e-6)
    assert labels.tolist() == list(range(6))  # positives on the diagonal
    F.cross_entropy(logits, labels).backward()
    assert im_q.grad is not None and im_q.grad.abs().sum() > 0
    assert im_k.grad is not None and im_k.grad.abs().sum() > 0  # the key branch gets gradients too


def test_end_to_end_shuffled_keys_stay_aligned() -> None:
    model = EndToEnd(tiny_encoder(), temperature=1.0, shuffle_keys=True)
    x = torch.randn(8, 3, 4, 4, requires_grad=True)
    logits, labels = model(x, x)
    assert torch.allclose(logits.diagonal(), torch.ones(8), atol=1e-6)  # same view: each positive is 1/T
    logits.sum().backward()
    assert x.grad is not None


def test_memory_bank_update_is_instdisc_and_touches_only_the_batch() -> None:
    bank = MemoryBank(tiny_encoder(), dataset_size=10, dim=8, num_negatives=5, bank_momentum=0.5)
    before = bank.bank.clone()
    index = torch.tensor([2, 7])
    features = F.normalize(torch.randn(2, 8), dim=1)
    bank.update(features, index)
    expected = F.normalize(0.5 * before[index] + 0.5 * features, dim=1)
    assert torch.allclose(bank.bank[index], expected, atol=1e-6)
    others = [i for i in range(10) if i not in (2, 7)]
    assert torch.equal(bank.bank[others], before[others])
    assert torch.allclose(bank.bank.norm(dim=1), torch.ones(10), atol=1e-6)


def test_memory_bank_negatives_exclude_the_positives_and_logits_use_the_bank() -> None:
    torch.manual_seed(0)
    bank = MemoryBank(tiny_encoder(), dataset_size=12, dim=8, num_negatives=50, temperature=0.1)
    index = torch.tensor([0, 3, 11])
    for _ in range(20):
        negatives = bank.sample_negatives(index)
        assert negatives.shape == (50,) and not set(negatives.tolist()) & {0, 3, 11}
    images = torch.randn(3, 3, 4, 4)
    logits, labels, features = bank(images, index)
    q = F.normalize(bank.encoder(images), dim=1)
    assert logits.shape == (3, 51) and labels.tolist() == [0, 0, 0]
    assert torch.allclose(logits[:, 0], (q * bank.bank[index]).sum(1) / 0.1, atol=1e-5)
    assert torch.allclose(features, q, atol=1e-6) and not features.requires_grad


@pytest.mark.parametrize("method", ["end2end", "memory-bank"])
def test_short_runs_and_evaluation(method: str, tiny_cfg: PretrainConfig) -> None:
    run_dir = pretrain(replace(tiny_cfg, method=method), show_progress=False)
    ckpt = checkpoint.load(run_dir / checkpoint.LAST)
    assert ckpt["method"] == method
    assert ("module.bank" in ckpt["state_dict"]) == (method == "memory-bank")
    if method == "memory-bank":
        assert ckpt["state_dict"]["module.bank"].shape == (32, 128)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert all(torch.isfinite(torch.tensor(r["loss"])) for r in records if "loss" in r)
    _, info = load_backbone(str(run_dir / checkpoint.LAST), 8)  # read like a MoCo checkpoint
    assert (info.format, info.pretrain["method"]) == ("moco-suite", method)
    resumed = pretrain(replace(tiny_cfg, method=method, optim={"epochs": 3}), resume=run_dir, show_progress=False)
    assert checkpoint.load(Path(resumed) / checkpoint.LAST)["epoch"] == 3
