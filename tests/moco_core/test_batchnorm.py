"""Shuffling BN: split BN equals per-group BN; shuffled keys come back aligned, in one and in two processes."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from moco_core import distributed
from moco_core.batchnorm import SplitBatchNorm2d, shuffle_batch, split_batchnorm, to_plain_batchnorm, unshuffle_batch
from moco_core.encoders import build_encoder
from moco_core.moco import MoCo


def test_split_bn_equals_separate_bn_per_group() -> None:
    torch.manual_seed(0)
    groups, n, c = 4, 12, 3
    x = torch.randn(n, c, 5, 5) * 3 + 1
    split = SplitBatchNorm2d(c, groups)
    with torch.no_grad():
        split.weight.uniform_(0.5, 2)
        split.bias.uniform_(-1, 1)
    reference = [nn.BatchNorm2d(c) for _ in range(groups)]
    for bn in reference:
        bn.load_state_dict({k: v for k, v in split.state_dict().items()})
    out = split(x)
    for j, bn in enumerate(reference):
        # group j = samples j, j + groups, ... (documented layout)
        assert torch.allclose(out[j::groups], bn(x[j::groups]), atol=1e-5)
    mean_running = torch.stack([bn.running_mean for bn in reference]).mean(0)
    var_running = torch.stack([bn.running_var for bn in reference]).mean(0)
    assert torch.allclose(split.running_mean, mean_running, atol=1e-6)
    assert torch.allclose(split.running_var, var_running, atol=1e-6)
    assert int(split.num_batches_tracked) == 1
    # Each group is normalised on its own statistics: not the same as BN over the whole batch.
    whole = nn.BatchNorm2d(c)
    whole.load_state_dict(split.state_dict())
    assert not torch.allclose(out, whole.train()(x), atol=1e-3)


def test_split_bn_in_eval_mode_is_plain_bn_and_keys_are_unchanged() -> None:
    net = build_encoder("resnet18", dim=8, mlp=False)
    plain_keys = list(net.state_dict())
    split = split_batchnorm(copy.deepcopy(net), 4)
    assert list(split.state_dict()) == plain_keys
    assert sum(isinstance(m, SplitBatchNorm2d) for m in split.modules()) == 20
    x = torch.randn(2, 3, 32, 32)
    assert torch.allclose(net.eval()(x), split.eval()(x), atol=1e-5)
    back = to_plain_batchnorm(split)
    assert not any(isinstance(m, SplitBatchNorm2d) for m in back.modules())
    with pytest.raises(ValueError, match="bn_groups"):
        split_batchnorm(nn.Sequential(nn.BatchNorm2d(3)), 4).train()(torch.randn(6, 3, 2, 2))


def test_single_process_shuffle_round_trip() -> None:
    torch.manual_seed(0)
    x = torch.arange(16.0).view(16, 1)
    shuffled, unshuffle = shuffle_batch(x)
    assert not torch.equal(shuffled, x)
    assert sorted(shuffled.view(-1).tolist()) == x.view(-1).tolist()
    assert torch.equal(unshuffle_batch(shuffled * 10, unshuffle), x * 10)


def test_queries_and_keys_line_up_through_shuffled_split_bn() -> None:
    """Same views for q and k, f_k == f_q at init: with aligned keys each l_pos is 1/T up to BN noise."""
    torch.manual_seed(0)
    encoder = nn.Sequential(nn.Flatten(), nn.Linear(3 * 4 * 4, 16))  # no BN: exact alignment check
    moco = MoCo(encoder, dim=16, queue_size=8, temperature=0.5, shuffle_keys=True)
    x = torch.randn(8, 3, 4, 4)
    logits, _, keys = moco(x, x.clone())
    assert torch.allclose(logits[:, 0], torch.full((8,), 2.0), atol=1e-5)
    assert torch.allclose(keys, F.normalize(encoder(x), dim=1), atol=1e-6)


def _two_process_worker(out_dir: str) -> None:
    """Run in each of 2 gloo processes (spawned by distributed.launch)."""
    torch.distributed.init_process_group("gloo")
    try:
        rank = distributed.rank()
        torch.manual_seed(100 + rank)  # different local data per rank; shuffles come from rank 0
        ids = torch.arange(4.0).view(4, 1) + 4 * rank  # global ids 0..3 on rank 0, 4..7 on rank 1
        seen = []
        for _ in range(5):
            shuffled, unshuffle = shuffle_batch(ids)
            seen.append(shuffled.view(-1).tolist())
            back = unshuffle_batch(shuffled * 10, unshuffle)
            assert torch.equal(back, ids * 10), (back, ids)
        torch.manual_seed(0)  # same weights on both ranks
        encoder = nn.Sequential(nn.Flatten(), nn.Linear(3 * 4 * 4, 16))
        moco = MoCo(encoder, dim=16, queue_size=16, temperature=0.5, shuffle_keys=True)
        torch.manual_seed(7 + rank)
        x = torch.randn(4, 3, 4, 4)
        logits, _, keys = moco(x, x.clone())
        result = {
            "seen": seen,
            "l_pos": logits[:, 0].tolist(),
            "keys_shape": list(keys.shape),
            "own_keys_match": torch.allclose(keys[4 * rank: 4 * rank + 4], F.normalize(encoder(x), dim=1), atol=1e-6),
        }
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        torch.distributed.destroy_process_group()


def test_two_process_gloo_shuffle(tmp_path: Path) -> None:
    distributed.launch(2, _two_process_worker, str(tmp_path))
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for res in results:
        assert res["l_pos"] == pytest.approx([2.0] * 4, abs=1e-5)  # each query met its own key
        assert res["keys_shape"] == [8, 16]  # keys gathered from both ranks
        assert res["own_keys_match"]
    # The shuffle sends samples across ranks: across 5 shuffles rank 0 saw some of rank 1's ids.
    mixed = [any(i >= 4 for i in batch) for batch in results[0]["seen"]]
    assert any(mixed)
    for a, b in zip(results[0]["seen"], results[1]["seen"], strict=True):
        assert sorted(a + b) == list(range(8))  # a permutation of the global batch, split between ranks
