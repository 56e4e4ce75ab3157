"""SyncBN in multi-process transfer runs on CPU: the detector's BN layers (backbone, FPN, the new heads' norms) share
their batch statistics across gloo processes, as torch's SyncBatchNorm does across GPUs (the paper's SyncBN)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torchvision

from moco_core import distributed
from moco_core.model.weights.formats import IMAGENET
from transfer.config import with_normalisation
from transfer.detection.config import load_transfer_config
from transfer.detection.run import build_model

# Mask R-CNN R18-FPN with BN in the FPN and the mask head, small enough for seconds: 64-px images, 8 RoIs.
_SMALL = ["detector.head=FPN", "detector.norm_new_layers=true", "detector.fpn_channels=16",
          "detector.pooler_resolution=4", "detector.roi_batch_size_per_image=8", "detector.rpn_post_nms_topk_train=32",
          "detector.anchor_sizes=[8,16,32,64,128]", "input.min_size_train=[64]", "input.min_size_test=64",
          "input.max_size=64"]


def _targets(rank: int) -> list[dict[str, torch.Tensor]]:
    """Rank 0: one object; rank 1: three: the processes' RoI heads see different numbers of foreground RoIs."""
    boxes = [[4.0, 4.0, 30.0, 30.0], [34.0, 6.0, 60.0, 28.0], [10.0, 36.0, 40.0, 60.0]][: 1 + 2 * rank]
    masks = torch.zeros(len(boxes), 64, 64, dtype=torch.uint8)
    for k, (x0, y0, x1, y1) in enumerate(boxes):
        masks[k, int(y0):int(y1), int(x0):int(x1)] = 1
    return [{"boxes": torch.tensor(boxes), "labels": torch.ones(len(boxes), dtype=torch.int64), "masks": masks}]


def _worker(out_dir: str) -> None:
    torch.distributed.init_process_group("gloo")
    try:
        rank = distributed.rank()
        cfg = with_normalisation(load_transfer_config("coco", "coco_embedded", _SMALL, {"engine": "torchvision"}),
                                 IMAGENET.record())  # as a run fills in the weights' normalisation
        torch.manual_seed(0)  # the same initial weights on both ranks, as DDP's broadcast makes them
        model = build_model(cfg, torchvision.models.resnet18(), 2, torch.device("cpu"))
        model.train()
        torch.manual_seed(1 + rank)  # each process its own images
        losses = model([torch.rand(3, 64, 64)], _targets(rank))
        sum(losses.values()).backward()
        norms = {name: type(m).__name__ for name, m in model.named_modules()
                 if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)}
        stats = {name: m.running_mean.tolist() + m.running_var.tolist() for name, m in model.named_modules()
                 if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)}
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps({"norms": norms, "stats": stats}))
    finally:
        torch.distributed.destroy_process_group()


def test_a_two_process_cpu_detector_shares_its_bn_statistics(tmp_path: Path) -> None:
    """Before, CPU processes kept per-process BN (torch's SyncBatchNorm refuses CPU tensors): each rank's running
    statistics followed its own images. Now every BN layer (backbone, FPN, mask head) is CpuSyncBatchNorm, and after
    a training step with different images and different numbers of objects per rank both ranks hold the same
    statistics."""
    distributed.launch(2, _worker, str(tmp_path))
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    norms = ranks[0]["norms"]
    assert any(name.startswith("backbone.body.") for name in norms)
    assert any(name.startswith("backbone.fpn.") for name in norms)
    assert any(name.startswith("roi_heads.mask_head") for name in norms)
    assert set(norms.values()) == {"CpuSyncBatchNorm"}
    for name, values in ranks[0]["stats"].items():
        torch.testing.assert_close(torch.tensor(ranks[1]["stats"][name]), torch.tensor(values), atol=1e-5,
                                   rtol=1e-5, msg=name)
