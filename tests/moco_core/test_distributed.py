"""Collectives in 2 gloo processes: the gather that keeps gradients, and the no-op fallbacks in one process."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from moco_core import distributed


def test_single_process_fallbacks() -> None:
    x = torch.randn(3, 2, requires_grad=True)
    assert distributed.world_size() == 1 and distributed.rank() == 0
    assert distributed.all_gather_cat(x) is x
    assert distributed.all_gather_with_grad(x) is x


def _worker(out_dir: str) -> None:
    torch.distributed.init_process_group("gloo")
    try:
        rank, world = distributed.rank(), distributed.world_size()
        x = torch.full((2, 3), float(rank + 1), requires_grad=True)
        gathered = distributed.all_gather_with_grad(x)  # (4, 3): rank 0's rows, then rank 1's
        weights = torch.arange(12.0).view(4, 3)  # the same on every rank
        (gathered * weights).sum().backward()
        Path(out_dir, f"{rank}.json").write_text(json.dumps({
            "gathered": gathered.tolist(), "grad": x.grad.tolist(), "world": world}))
    finally:
        torch.distributed.destroy_process_group()


def test_gather_with_grad_in_two_processes(tmp_path: Path) -> None:
    distributed.launch(2, _worker, str(tmp_path))
    weights = torch.arange(12.0).view(4, 3)
    for rank in range(2):
        res = json.loads((tmp_path / f"{rank}.json").read_text())
        assert res["gathered"] == [[1.0] * 3] * 2 + [[2.0] * 3] * 2
        # Both ranks' losses use this rank's rows with the same weights: the gradient is their sum, 2 * w.
        assert res["grad"] == (2 * weights[2 * rank: 2 * rank + 2]).tolist()
