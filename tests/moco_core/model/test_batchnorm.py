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
from moco_core.model.batchnorm import (
    CpuSyncBatchNorm,
    SplitBatchNorm2d,
    shuffle_batch,
    split_batchnorm,
    sync_batchnorm_for,
    to_plain_batchnorm,
    unshuffle_batch,
)
from moco_core.model.encoders import build_encoder
from moco_core.model.moco import MoCo


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


def _split_pair(groups: int = 4, c: int = 5) -> tuple[SplitBatchNorm2d, SplitBatchNorm2d]:
    torch.manual_seed(1)
    bn = SplitBatchNorm2d(c, groups)
    with torch.no_grad():
        bn.weight.uniform_(0.5, 2)
        bn.bias.uniform_(-1, 1)
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
    return bn, copy.deepcopy(bn)


def test_channels_last_input_takes_the_functional_path_with_the_same_result() -> None:
    """The functional path (channels_last, compiled) equals the F.batch_norm path: outputs, running statistics
    and every gradient; its output keeps the channels_last layout (no copy into NCHW)."""
    native, functional = _split_pair()
    x = (torch.randn(16, 5, 6, 7) * 2 + 0.5).requires_grad_(True)
    x_cl = x.detach().to(memory_format=torch.channels_last).requires_grad_(True)
    out, out_cl = native(x), functional(x_cl)
    assert out_cl.is_contiguous(memory_format=torch.channels_last) and not out_cl.is_contiguous()
    torch.testing.assert_close(out_cl, out, atol=1e-5, rtol=1e-5)
    grad = torch.randn_like(out)
    out.backward(grad)
    out_cl.backward(grad)
    torch.testing.assert_close(x_cl.grad, x.grad, atol=1e-5, rtol=1e-4)
    for name in ("weight", "bias"):
        torch.testing.assert_close(getattr(functional, name).grad, getattr(native, name).grad, atol=1e-4, rtol=1e-4)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        torch.testing.assert_close(getattr(functional, name), getattr(native, name), atol=1e-6, rtol=1e-6)


def test_functional_group_bn_against_statistics_worked_by_hand() -> None:
    """Two groups of two samples, one channel, 1x2 pixels: group 0 = samples 0 and 2, group 1 = samples 1, 3."""
    from moco_core.model.batchnorm import group_batch_norm

    x = torch.tensor([[1.0, 3.0], [0.0, 0.0], [5.0, 7.0], [2.0, 6.0]]).view(4, 1, 1, 2)
    running_mean, running_var = torch.zeros(1), torch.ones(1)
    out = group_batch_norm(x, 2, None, None, running_mean, running_var, 0.5, eps=0.0)
    # group 0: 1, 3, 5, 7: mean 4, biased var 5; group 1: 0, 0, 2, 6: mean 2, biased var 6
    expected = torch.tensor([[-3, -1], [-2, -2], [1, 3], [0, 4]]) / torch.tensor([5, 6, 5, 6]).sqrt().view(4, 1)
    torch.testing.assert_close(out.view(4, 2), expected.float())
    # running: 0.5 * old + 0.5 * mean over groups of (mean, unbiased var = var * 4/3): (4+2)/2 = 3, (20/3+8)/2
    torch.testing.assert_close(running_mean, torch.tensor([1.5]))
    torch.testing.assert_close(running_var, torch.tensor([0.5 + 0.5 * (20 / 3 + 8) / 2]))


def test_split_bn_encoder_compiles_without_graph_breaks() -> None:
    """torch.compile sees the functional path: the whole encoder is one graph, and its forward and backward
    (traced through AOTAutograd, no C++ compiler needed) equal eager mode's."""
    torch.manual_seed(2)
    encoder = split_batchnorm(build_encoder("resnet18", dim=8, mlp=True), 2).to(memory_format=torch.channels_last)
    x = torch.randn(8, 3, 64, 64).to(memory_format=torch.channels_last)
    explanation = torch._dynamo.explain(copy.deepcopy(encoder))(x)
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1
    eager, compiled = copy.deepcopy(encoder), copy.deepcopy(encoder)
    compiled.compile(backend="aot_eager")
    out_eager, out_compiled = eager(x), compiled(x)
    # AOTAutograd decomposes var_mean and friends into other ops: float32 rounding differs slightly
    torch.testing.assert_close(out_compiled, out_eager, atol=2e-4, rtol=1e-3)
    out_eager.square().sum().backward()
    out_compiled.square().sum().backward()
    for (name, a), (_, b) in zip(eager.named_parameters(), compiled.named_parameters(), strict=True):
        assert (b.grad - a.grad).norm() <= 1e-3 * a.grad.norm(), name
    for (name, a), (_, b) in zip(eager.named_buffers(), compiled.named_buffers(), strict=True):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-4, msg=name)


def _sync_bn_worker(out_dir: str) -> None:
    """Each of 2 gloo processes normalises its half of a batch with SyncBatchNorm; what each computes (outputs,
    gradients, running statistics) goes to a file for the test to compare with one BatchNorm over the whole."""
    torch.distributed.init_process_group("gloo")
    try:
        rank = distributed.rank()
        torch.manual_seed(0)
        whole = torch.randn(6, 3, 2, 2) * torch.tensor([1.0, 3.0, 0.5]).view(1, 3, 1, 1) + 2.0
        upstream = torch.randn(6, 3, 2, 2)
        converted = nn.SyncBatchNorm.convert_sync_batchnorm(nn.Sequential(nn.BatchNorm2d(3, momentum=0.3)))
        bn = sync_batchnorm_for(converted, torch.device("cpu"))[0]
        with torch.no_grad():
            bn.weight.copy_(torch.tensor([1.5, 0.5, 2.0]))
            bn.bias.copy_(torch.tensor([0.1, -0.2, 0.3]))
        half = slice(3 * rank, 3 * rank + 3)
        x = whole[half].clone().requires_grad_(True)
        y = bn(x)
        (y * upstream[half]).sum().backward()
        grads = [p.grad.clone() for p in (bn.weight, bn.bias)]
        for g in grads:  # DDP's averaging of parameter gradients
            torch.distributed.all_reduce(g)
        result = {"y": y.tolist(), "x_grad": x.grad.tolist(), "w_grad": grads[0].tolist(),
                  "b_grad": grads[1].tolist(), "mean": bn.running_mean.tolist(), "var": bn.running_var.tolist(),
                  "type": type(bn).__name__}
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        torch.distributed.destroy_process_group()


def test_sync_bn_on_cpu_processes_is_one_bn_over_the_whole_batch(tmp_path: Path) -> None:
    """torch's SyncBatchNorm refuses CPU tensors; ours sums the statistics over gloo. Two processes with 3 images
    each must compute what one BatchNorm does on all 6: outputs, input gradients (the loss being the sum of both
    processes'), the summed parameter gradients, and the running statistics (unbiased variance over 6 x 4)."""
    distributed.launch(2, _sync_bn_worker, str(tmp_path))
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    torch.manual_seed(0)
    whole = torch.randn(6, 3, 2, 2) * torch.tensor([1.0, 3.0, 0.5]).view(1, 3, 1, 1) + 2.0
    upstream = torch.randn(6, 3, 2, 2)
    x = whole.clone().requires_grad_(True)
    # the reference, written out: batch statistics over N, H, W; biased variance to normalise
    mean = x.mean(dim=(0, 2, 3), keepdim=True)
    var = ((x - mean) ** 2).mean(dim=(0, 2, 3), keepdim=True)
    weight = torch.tensor([1.5, 0.5, 2.0], requires_grad=True)
    bias = torch.tensor([0.1, -0.2, 0.3], requires_grad=True)
    y = (x - mean) / torch.sqrt(var + 1e-5) * weight.view(1, 3, 1, 1) + bias.view(1, 3, 1, 1)
    (y * upstream).sum().backward()
    got_y = torch.tensor(results[0]["y"] + results[1]["y"])
    got_grad = torch.tensor(results[0]["x_grad"] + results[1]["x_grad"])
    assert torch.allclose(got_y, y.detach(), atol=1e-5)
    assert torch.allclose(got_grad, x.grad, atol=1e-5)
    unbiased = whole.var(dim=(0, 2, 3), unbiased=True)
    for res in results:
        assert res["type"] == "CpuSyncBatchNorm"
        assert torch.allclose(torch.tensor(res["w_grad"]), weight.grad, atol=1e-5)
        assert torch.allclose(torch.tensor(res["b_grad"]), bias.grad, atol=1e-5)
        assert torch.allclose(torch.tensor(res["mean"]), 0.3 * whole.mean(dim=(0, 2, 3)), atol=1e-5)
        assert torch.allclose(torch.tensor(res["var"]), 0.7 + 0.3 * unbiased, atol=1e-5)


def test_sync_bn_on_cpu_keeps_the_state_and_is_plain_bn_in_one_process() -> None:
    torch.manual_seed(0)
    plain = nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.BatchNorm1d(16))
    before = copy.deepcopy(plain.state_dict())
    reference = copy.deepcopy(plain)
    synced = nn.SyncBatchNorm.convert_sync_batchnorm(plain)
    assert sync_batchnorm_for(synced, torch.device("cuda")) is synced and isinstance(synced[1], nn.SyncBatchNorm)
    synced = sync_batchnorm_for(synced, torch.device("cpu"))
    assert [type(m).__name__ for m in synced] == ["Conv2d", "CpuSyncBatchNorm", "ReLU", "Flatten", "CpuSyncBatchNorm"]
    assert isinstance(synced[1], CpuSyncBatchNorm) and not isinstance(synced[1], nn.SyncBatchNorm)  # DDP takes it
    assert synced.state_dict().keys() == before.keys()
    assert all(torch.equal(synced.state_dict()[k], v) for k, v in before.items())
    x = torch.randn(5, 3, 2, 2)
    assert torch.allclose(synced(x), reference(x), atol=1e-6)  # one process: plain BN, statistics included
    assert torch.allclose(synced[1].running_mean, reference[1].running_mean)


# Rows each of 2 processes holds at each of 3 steps: uneven (detection's RoI batches), one process empty, both empty.
_UNEVEN_ROWS = ((2, 5), (0, 4), (0, 0))


def _uneven_sync_bn_worker(out_dir: str) -> None:
    torch.distributed.init_process_group("gloo")
    try:
        rank = distributed.rank()
        converted = nn.SyncBatchNorm.convert_sync_batchnorm(nn.Sequential(nn.BatchNorm2d(2, momentum=0.5)))
        bn = sync_batchnorm_for(converted, torch.device("cpu"))[0]
        steps = []
        for step, rows in enumerate(_UNEVEN_ROWS):
            torch.manual_seed(step)
            whole = torch.randn(sum(rows), 2, 3, 3) * 2.0 + 1.0
            mine = whole[sum(rows[:rank]):sum(rows[:rank + 1])].clone().requires_grad_(True)
            y = bn(mine)
            y.sum().backward()  # every process, as DDP's: an empty batch's backward still joins the all-reduce
            steps.append({"y": y.tolist(), "shape": list(y.shape), "mean": bn.running_mean.tolist(),
                          "var": bn.running_var.tolist(), "tracked": int(bn.num_batches_tracked)})
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(steps))
    finally:
        torch.distributed.destroy_process_group()


def test_sync_bn_on_cpu_processes_with_uneven_and_empty_batches(tmp_path: Path) -> None:
    """Detection's RoI heads give processes different numbers of rows, or none: every row weighs the same (the
    outputs and running statistics are one BatchNorm's over the rows of both), and a step in which no process has
    a row leaves the statistics as they were (plain BatchNorm's rule on an empty batch), never NaN."""
    distributed.launch(2, _uneven_sync_bn_worker, str(tmp_path))
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    reference = nn.BatchNorm2d(2, momentum=0.5)
    for step, rows in enumerate(_UNEVEN_ROWS):
        torch.manual_seed(step)
        whole = torch.randn(sum(rows), 2, 3, 3) * 2.0 + 1.0
        expected = reference(whole).detach()
        for rank in range(2):
            got = results[rank][step]
            assert got["shape"] == [rows[rank], 2, 3, 3]
            mine = expected[sum(rows[:rank]):sum(rows[:rank + 1])]
            if rows[rank]:
                torch.testing.assert_close(torch.tensor(got["y"]), mine, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(torch.tensor(got["mean"]), reference.running_mean, atol=1e-6, rtol=1e-6)
            torch.testing.assert_close(torch.tensor(got["var"]), reference.running_var, atol=1e-5, rtol=1e-5)
            assert got["tracked"] == int(reference.num_batches_tracked) == step + 1
    assert torch.isfinite(torch.tensor(results[0][-1]["mean"] + results[0][-1]["var"])).all()
