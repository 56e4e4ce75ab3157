"""The torchvision detectors built from our backbones: C4 head layout, exact weight loading, trainable BN."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torchvision
from torch import nn
from torchvision.ops import FrozenBatchNorm2d

from moco_core import checkpoint
from moco_core.config import replace
from moco_core.model.methods import build_moco
from moco_core.model.weights.formats import IMAGENET
from moco_core.pretrain_config import ModelConfig
from transfer.config import with_normalisation
from transfer.detection.config import TransferConfig, model_name
from transfer.detection.models import Res5Head, build_detector, load_resnet, resnet_tensors

NUM_CLASSES = 3


def tiny_config(head: str = "C4", mask: bool = False, **detector: object) -> TransferConfig:
    """A small detector's config, its input normalised as ImageNet-trained weights expect (as a run fills in)."""
    cfg = TransferConfig()
    cfg = replace(cfg, task="coco" if mask else "voc", detector={
        "head": head, "mask": mask, "pooler_resolution": 4 if head == "C4" else 3,
        "anchor_sizes": (8, 16, 32, 64, 128), "roi_batch_size_per_image": 8, "rpn_post_nms_topk_train": 32,
        "rpn_post_nms_topk_test": 16, "detections_per_image": 5, **detector})
    cfg = with_normalisation(cfg, IMAGENET.record())
    return replace(cfg, input={"min_size_train": (48,), "min_size_test": 48, "max_size": 64})


@pytest.fixture(scope="module")
def weight_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A MoCo checkpoint of ours (resnet18) and a torchvision resnet18 state_dict with non-default BN buffers."""
    root = tmp_path_factory.mktemp("weights")
    torch.manual_seed(0)
    moco = build_moco(ModelConfig(arch="resnet18", queue_size=16, bn_groups=2), world_size=1)
    ours = root / "moco.pth.tar"
    torch.save({"epoch": 3, "arch": "resnet18", "state_dict": checkpoint.to_official(moco.state_dict()),
                "format": "moco-suite", "method": "moco", "config": {"data": {"path": "embedded"}}}, ours)
    resnet = torchvision.models.resnet18()
    with torch.no_grad():
        for module in resnet.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.running_mean.uniform_(-1, 1)
                module.running_var.uniform_(0.5, 2)
    tv = root / "resnet18.pth"
    torch.save(resnet.state_dict(), tv)
    return {"ours": ours, "torchvision": tv}


def test_c4_box_head_is_res5_then_an_extra_bn() -> None:
    resnet, _ = load_resnet("random", "resnet18")
    detector = build_detector(tiny_config(), resnet, NUM_CLASSES)
    head = detector.roi_heads.box_head
    assert isinstance(head, Res5Head)
    assert head.res5 is resnet.layer4  # the ResNet's own res5, not a copy
    assert isinstance(head.norm, nn.BatchNorm2d) and head.norm.num_features == 512
    # the stride-16 backbone ends at res4: stem, res2, res3, res4 and nothing else
    assert list(dict(detector.backbone.named_children())) == ["conv1", "bn1", "relu", "maxpool", "layer1",
                                                               "layer2", "layer3"]
    rois = torch.randn(6, 256, 4, 4)  # (R, C4, P, P) pooled RoIs
    head.eval()
    expected = head.norm(resnet.layer4(rois))
    assert torch.equal(head(rois), expected) and expected.shape == (6, 512, 2, 2)  # res5 halves P
    assert detector.roi_heads.box_predictor.cls_score.in_features == 512
    assert detector.roi_heads.box_predictor.cls_score.out_features == NUM_CLASSES + 1  # + background
    plain = build_detector(tiny_config(extra_norm=False), load_resnet("random", "resnet18")[0], NUM_CLASSES)
    assert isinstance(plain.roi_heads.box_head.norm, nn.Identity)
    assert model_name(tiny_config(), "resnet18") == "R18-C4"
    assert model_name(tiny_config("FPN"), "resnet50") == "R50-FPN"


@pytest.mark.parametrize("head", ["C4", "FPN"])
@pytest.mark.parametrize("source", ["ours", "torchvision"])
def test_backbone_weights_load_exactly(weight_files: dict[str, Path], head: str, source: str) -> None:
    resnet, info = load_resnet(str(weight_files[source]), None, None if source == "ours" else "supervised")
    assert (info.arch, info.format) == ("resnet18", "moco-suite" if source == "ours" else "torchvision")
    assert info.sha256 and len(info.sha256) == 64
    detector = build_detector(tiny_config(head, mask=head == "FPN"), resnet, NUM_CLASSES)
    state = torch.load(weight_files[source], weights_only=True)
    if source == "ours":
        prefix = "module.encoder_q."
        state = {k[len(prefix):]: v for k, v in state["state_dict"].items() if k.startswith(prefix)}
    expected = {k: v for k, v in state.items() if not k.startswith("fc.")}
    loaded = resnet_tensors(detector)
    assert loaded.keys() == expected.keys()
    assert all(torch.equal(loaded[k], expected[k]) for k in expected)
    if head == "C4":  # spot checks on the modules themselves: stem in the backbone, res5 in the box head
        assert torch.equal(detector.backbone.conv1.weight, expected["conv1.weight"])
        assert torch.equal(detector.roi_heads.box_head.res5[1].bn2.running_var, expected["layer4.1.bn2.running_var"])


@pytest.mark.parametrize(("head", "mask"), [("C4", False), ("C4", True), ("FPN", True)])
def test_every_bn_is_trainable_batchnorm(head: str, mask: bool) -> None:
    detector = build_detector(tiny_config(head, mask), load_resnet("random", "resnet18")[0], NUM_CLASSES)
    modules = list(detector.modules())
    assert not any(isinstance(m, FrozenBatchNorm2d) for m in modules)
    norms = [m for m in modules if isinstance(m, nn.BatchNorm2d)]
    assert len(norms) >= 20 + (head == "C4")  # resnet18 has 20 BN layers; C4 adds the extra norm
    assert all(p.requires_grad for p in detector.parameters())  # FREEZE_AT 0: every stage trains
    if head == "FPN":  # the new FPN layers are normalised too
        assert any(isinstance(m, nn.BatchNorm2d) for m in detector.backbone.fpn.modules())


def test_random_init_and_bad_files(tmp_path: Path, weight_files: dict[str, Path]) -> None:
    with pytest.raises(checkpoint.CheckpointError, match=r"'random' needs the ResNet to initialise: pass --arch"):
        load_resnet("random", None)  # it drew a resnet50, whatever the other rows were
    resnet, info = load_resnet("random", "resnet50")
    assert (info.source, info.format, info.arch, info.sha256) == ("random", "random", "resnet50", None)
    assert isinstance(resnet, torchvision.models.ResNet)
    with pytest.raises(checkpoint.CheckpointError,
                       match="holds resnet18 weights, but detector.arch resnet50 was asked for"):
        load_resnet(str(weight_files["torchvision"]), "resnet50", "supervised")
    state = torch.load(weight_files["torchvision"], weights_only=True)
    del state["layer4.1.conv2.weight"]
    partial = tmp_path / "partial.pth"
    torch.save(state, partial)
    with pytest.raises(checkpoint.CheckpointError, match=r"keys are not in the checkpoint: layer4.1.conv2.weight") \
            as err:
        load_resnet(str(partial), None, "supervised")
    assert "\n" not in str(err.value)
    garbage = tmp_path / "garbage.pth"
    garbage.write_bytes(b"not a checkpoint")
    with pytest.raises(checkpoint.CheckpointError, match="garbage.pth") as err:
        load_resnet(str(garbage), None)
    assert "\n" not in str(err.value)


def test_c4_mask_branch_shares_res5_and_test_size_is_its_own() -> None:
    torch.manual_seed(0)
    detector = build_detector(tiny_config("C4", mask=True), load_resnet("random", "resnet18")[0], NUM_CLASSES)
    assert not any(".mask_head." in k or ".mask_roi_pool." in k for k in detector.state_dict())
    images = [torch.rand(3, 40, 40), torch.rand(3, 40, 48)]
    masks = torch.zeros(1, 40, 40, dtype=torch.uint8)
    masks[0, 5:30, 8:25] = 1
    targets = [{"boxes": torch.tensor([[8.0, 5.0, 25.0, 30.0]]), "labels": torch.tensor([2]), "masks": masks},
               {"boxes": torch.tensor([[1.0, 2.0, 20.0, 22.0]]), "labels": torch.tensor([1]),
                "masks": torch.ones(1, 40, 48, dtype=torch.uint8)}]
    detector.train()
    assert detector.transform.min_size == (48,)
    losses = detector(images, targets)
    assert set(losses) == {"loss_classifier", "loss_box_reg", "loss_mask", "loss_objectness", "loss_rpn_box_reg"}
    assert 0.5 < losses["loss_mask"].item() < 0.9  # BCE near ln 2: the mask predictor starts near 0
    detector.transform.min_size_test = 32
    detector.eval()
    assert detector.transform.min_size == (32,)  # eval() switched to the test size
    with torch.no_grad():
        out = detector(images)
    assert out[1]["masks"].shape[1:] == (1, 40, 48)  # pasted into the original image
    assert len(out[0]["boxes"]) <= 5
