"""The benchmark's reference mode rebuilds the official recipe: it must compute what our model computes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from moco_core.config import ModelConfig
from moco_core.methods import build_moco

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201 - the benchmarks folder's modules
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import pretrain_step
    import reference

    yield pretrain_step, reference
    for name in ("pretrain_step", "reference"):
        sys.modules.pop(name, None)


def test_reference_recipe_matches_our_step(bench) -> None:
    """Same weights, queue and inputs (BN without shuffling, so both are deterministic): same logits, loss,
    momentum-updated key encoder, queue after the enqueue, and weights after one SGD step."""
    _, reference = bench
    torch.manual_seed(0)
    cfg = ModelConfig(arch="resnet18", dim=16, queue_size=32, momentum=0.9, temperature=0.2, shuffle_bn="none")
    ours = build_moco(cfg, world_size=1)
    ref = reference.ReferenceMoCo(build_moco(cfg, world_size=1).encoder, dim=16, queue_size=32, momentum=0.9,
                                  temperature=0.2, shuffle_keys=False)
    ref.encoder_q.load_state_dict(ours.encoder.state_dict())
    ref.encoder_k.load_state_dict(ours.momentum_encoder.state_dict())
    with torch.no_grad():  # a key encoder different from the query one, so the momentum update matters
        for p in ours.momentum_encoder.parameters():
            p.mul_(0.5)
        for p_ref, p in zip(ref.encoder_k.parameters(), ours.momentum_encoder.parameters(), strict=True):
            p_ref.copy_(p)
    ref.queue.copy_(ours.queue)
    im_q, im_k = torch.randn(8, 3, 32, 32), torch.randn(8, 3, 32, 32)
    opt_ours = torch.optim.SGD(ours.parameters(), lr=0.1, momentum=0.9)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)

    logits, labels, keys = ours(im_q, im_k)
    loss = F.cross_entropy(logits, labels)
    opt_ours.zero_grad()
    loss.backward()
    opt_ours.step()
    ours.enqueue(keys)
    ref_loss = reference.reference_step(ref, opt_ref, im_q, im_k)

    assert ref_loss.item() == pytest.approx(loss.item(), rel=1e-5)
    for p_ref, p in zip(ref.encoder_k.parameters(), ours.momentum_encoder.parameters(), strict=True):
        torch.testing.assert_close(p_ref, p, rtol=1e-5, atol=1e-6)
    for p_ref, p in zip(ref.encoder_q.parameters(), ours.encoder.parameters(), strict=True):
        torch.testing.assert_close(p_ref, p, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(ref.queue, ours.queue, rtol=1e-4, atol=1e-5)  # lerp vs mul-add rounding
    assert int(ref.queue_ptr) == int(ours.queue_ptr) == 8


def test_reference_refuses_a_queue_that_is_not_a_multiple_of_the_batch(bench) -> None:
    _, reference = bench
    ref = reference.ReferenceMoCo(torch.nn.Linear(4, 8), dim=8, queue_size=10, momentum=0.9, temperature=0.2,
                                  shuffle_keys=False)
    with pytest.raises(ValueError, match="multiple of the batch"):
        ref(torch.randn(4, 4), torch.randn(4, 4))


def test_benchmark_prints_ours_the_reference_and_their_ratio(bench, capsys: pytest.CaptureFixture[str]) -> None:
    pretrain_step, _ = bench
    result = pretrain_step.main(["--arch", "resnet18", "--image-size", "16", "--batch", "8", "--queue-size", "64",
                                 "--bn-groups", "2", "--steps", "2", "--warmup", "1", "--reference"])
    out = capsys.readouterr().out
    assert result["reference"]["images_per_s"] > 0 and result["images_per_s"] > 0
    assert result["speedup_vs_reference"] == pytest.approx(result["images_per_s"] / result["reference"]["images_per_s"])
    assert "speed-up over the reference" in out and "data wait" in out and "peak memory" in out


def test_benchmark_on_real_images_with_the_tensor_pipeline(bench, shapes_root: Path) -> None:
    pretrain_step, _ = bench
    result = pretrain_step.main(["--arch", "resnet18", "--image-size", "16", "--batch", "8", "--queue-size", "64",
                                 "--bn-groups", "2", "--steps", "2", "--warmup", "1", "--data", str(shapes_root),
                                 "--workers", "0", "--pipeline", "tensor", "--reference"])
    assert result["pipeline"] == "tensor" and 0 <= result["data_wait_fraction"] <= 1
    assert 0 <= result["reference"]["data_wait_fraction"] <= 1
