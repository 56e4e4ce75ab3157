"""torchvision detection models built from our ResNet backbones: Faster/Mask R-CNN with a C4 or an FPN head, and
Keypoint R-CNN on FPN.

R-C4 (the paper's VOC detector and one of its COCO detectors): the ResNet's stem and res2-res4 make one stride-16
feature map; the RPN and a 14x14 RoIAlign work on it; the box head is res5 (its first block has stride 2, so RoIs
come out 7x7) followed by an extra BN (the MoCo configs' ``Res5ROIHeadsExtraNorm``) and global average pooling.
The C4 mask head reads the same res5 features: a 2x deconvolution and a 1x1 conv per class (14x14 masks).

R-FPN: torchvision's ``BackboneWithFPN`` on res2-res5, 2-fc box head, 4-conv mask head.

BN is ordinary, trainable ``nn.BatchNorm2d`` everywhere (never FrozenBatchNorm2d): the paper fine-tunes BN
(SyncBN across GPUs; ``nn.SyncBatchNorm.convert_sync_batchnorm`` is applied by the caller when several CUDA
processes run). Every backbone stage is trainable (detectron2's FREEZE_AT 0).
"""

from __future__ import annotations

from collections import OrderedDict

import torch
import torchvision
from torch import nn
from torchvision.models.detection.anchor_utils import AnchorGenerator
from torchvision.models.detection.backbone_utils import BackboneWithFPN
from torchvision.models.detection.faster_rcnn import FastRCNNPredictor, TwoMLPHead
from torchvision.models.detection.generalized_rcnn import GeneralizedRCNN
from torchvision.models.detection.keypoint_rcnn import KeypointRCNNHeads, KeypointRCNNPredictor
from torchvision.models.detection.mask_rcnn import MaskRCNNHeads, MaskRCNNPredictor
from torchvision.models.detection.roi_heads import RoIHeads, fastrcnn_loss, maskrcnn_inference, maskrcnn_loss
from torchvision.models.detection.rpn import RegionProposalNetwork, RPNHead
from torchvision.models.detection.transform import GeneralizedRCNNTransform
from torchvision.ops import MultiScaleRoIAlign, roi_align

from moco_core.model import backbone
from moco_core.model.backbone import BackboneInfo
from transfer.config import input_statistics
from transfer.detection.config import TransferConfig

FPN_LEVELS = ("0", "1", "2", "3")  # res2-res5; the RPN also sees "pool" (a max-pooled res5 level, P6)


def load_resnet(weights: str, arch: str | None = None,
                weights_format: str | None = None) -> tuple[torchvision.models.ResNet, BackboneInfo]:
    """:func:`moco_core.model.backbone.load_resnet` for a detector: ``arch`` is ``detector.arch``,
    ``weights_format`` ``run.weights_format``."""
    return backbone.load_resnet(weights, arch=arch, arch_option="detector.arch", weights_format=weights_format)


def stage_channels(stage: nn.Sequential) -> int:
    """Output channels of a ResNet stage (BasicBlock or Bottleneck)."""
    last = stage[-1]
    return (last.bn3 if hasattr(last, "bn3") else last.bn2).num_features


class C4Backbone(nn.Sequential):
    """Stem and res2-res4 of a ResNet: (N, 3, H, W) -> (N, C4, H/16, W/16). Module names are the ResNet's."""

    def __init__(self, resnet: torchvision.models.ResNet) -> None:
        names = ("conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3")
        super().__init__(OrderedDict((name, getattr(resnet, name)) for name in names))
        self.out_channels = stage_channels(resnet.layer3)


class Res5Head(nn.Module):
    """res5 then the extra BN: (R, C4, P, P) pooled RoIs -> (R, C5, P/2, P/2) features for the box and mask heads."""

    def __init__(self, res5: nn.Sequential, *, extra_norm: bool) -> None:
        super().__init__()
        self.res5 = res5
        self.out_channels = stage_channels(res5)
        # The MoCo detection configs add this BN after res5 (Res5ROIHeadsExtraNorm); it is newly initialised.
        self.norm = nn.BatchNorm2d(self.out_channels) if extra_norm else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.res5(x))


class C4RoIAlign(nn.Module):
    """RoIAlign on the single stride-16 map, pixel-aligned (detectron2's ROIAlignV2), adaptive sampling."""

    def __init__(self, *, output_size: int, spatial_scale: float = 1 / 16) -> None:
        super().__init__()
        self.output_size = output_size
        self.spatial_scale = spatial_scale

    def forward(self, features: dict[str, torch.Tensor], boxes: list[torch.Tensor],
                image_shapes: list[tuple[int, int]]) -> torch.Tensor:
        """(N, C, H, W) map and per-image (n_i, 4) boxes -> (sum n_i, C, P, P)."""
        return roi_align(features["0"], boxes, self.output_size, spatial_scale=self.spatial_scale,
                         sampling_ratio=0, aligned=True)


class C4RoIHeads(RoIHeads):
    """RoI heads on res5 features, computed once per RoI and shared by the box and mask branches.

    Training: the sampled RoIs go through res5 + extra norm once; the foreground ones feed the mask branch
    (as detectron2's Res5ROIHeads; torchvision's RoIHeads would run the mask branch's own head again).
    Test: boxes are predicted first, then res5 runs again on the kept detections for their masks.
    The mask branch has no pooler or head of its own, only ``mask_predictor``.
    """

    def has_mask(self) -> bool:
        return self.mask_predictor is not None

    def forward(self, features: dict[str, torch.Tensor], proposals: list[torch.Tensor],
                image_shapes: list[tuple[int, int]], targets: list[dict[str, torch.Tensor]] | None = None,
                ) -> tuple[list[dict[str, torch.Tensor]], dict[str, torch.Tensor]]:
        if self.training:
            proposals, matched_idxs, labels, regression_targets = self.select_training_samples(proposals, targets)
        res5 = self.box_head(self.box_roi_pool(features, proposals, image_shapes))  # (R, C5, 7, 7)
        class_logits, box_regression = self.box_predictor(res5.mean(dim=(2, 3)))  # (R, K+1), (R, 4(K+1))
        if self.training:
            loss_classifier, loss_box_reg = fastrcnn_loss(class_logits, box_regression, labels, regression_targets)
            losses = {"loss_classifier": loss_classifier, "loss_box_reg": loss_box_reg}
            if self.has_mask():
                foreground = [label > 0 for label in labels]
                mask_logits = self.mask_predictor(res5[torch.cat(foreground)])  # (F, K+1, 14, 14)
                losses["loss_mask"] = maskrcnn_loss(
                    mask_logits, [p[f] for p, f in zip(proposals, foreground, strict=True)],
                    [t["masks"] for t in targets], [t["labels"] for t in targets],
                    [m[f] for m, f in zip(matched_idxs, foreground, strict=True)])
            return [], losses
        boxes, scores, classes = self.postprocess_detections(class_logits, box_regression, proposals, image_shapes)
        result = [{"boxes": b, "labels": c, "scores": s} for b, c, s in zip(boxes, classes, scores, strict=True)]
        if self.has_mask():
            kept = self.box_head(self.box_roi_pool(features, boxes, image_shapes))
            probabilities = maskrcnn_inference(self.mask_predictor(kept), classes)
            for r, m in zip(result, probabilities, strict=True):
                r["masks"] = m  # (n, 1, 14, 14), pasted into the image by the transform's postprocess
        return result, {}


class DetectionTransform(GeneralizedRCNNTransform):
    """torchvision's resize-and-normalise with a test size of its own.

    torchvision tests at the largest training size; detectron2 (and the paper's configs) have MIN_SIZE_TEST.
    """

    def __init__(self, *, min_size_train: tuple[int, ...], min_size_test: int, max_size: int,
                 mean: tuple[float, ...], std: tuple[float, ...]) -> None:
        super().__init__(min_size_train, max_size, list(mean), list(std))
        self.min_size_train = tuple(min_size_train)
        self.min_size_test = min_size_test

    def train(self, mode: bool = True) -> DetectionTransform:
        self.min_size = self.min_size_train if mode else (self.min_size_test,)
        return super().train(mode)


def _init_predictor(predictor: FastRCNNPredictor) -> FastRCNNPredictor:
    """detectron2's initialisation of the box predictor: N(0, 0.01) scores, N(0, 0.001) deltas, zero biases."""
    nn.init.normal_(predictor.cls_score.weight, std=0.01)
    nn.init.normal_(predictor.bbox_pred.weight, std=0.001)
    nn.init.zeros_(predictor.cls_score.bias)
    nn.init.zeros_(predictor.bbox_pred.bias)
    return predictor


def _mask_predictor(in_channels: int, num_classes: int) -> MaskRCNNPredictor:
    """A 2x deconvolution to 256 channels and a 1x1 conv per class (background included, torchvision's layout);
    the logits start at N(0, 0.001) as detectron2's, so the mask loss starts near ln 2."""
    predictor = MaskRCNNPredictor(in_channels, 256, num_classes + 1)
    nn.init.normal_(predictor.mask_fcn_logits.weight, std=0.001)
    nn.init.zeros_(predictor.mask_fcn_logits.bias)
    return predictor


def c4_heads(resnet: torchvision.models.ResNet, *, num_classes: int, mask: bool, extra_norm: bool,
             pooler_resolution: int, roi_kwargs: dict) -> C4RoIHeads:
    """Box (and mask) heads of R-C4 around ``resnet.layer4``; ``num_classes`` excludes the background."""
    head = Res5Head(resnet.layer4, extra_norm=extra_norm)
    heads = C4RoIHeads(C4RoIAlign(output_size=pooler_resolution), head,
                       _init_predictor(FastRCNNPredictor(head.out_channels, num_classes + 1)), **roi_kwargs)
    if mask:  # the pooler and res5 are the box branch's; only the predictor is new
        heads.mask_predictor = _mask_predictor(head.out_channels, num_classes)
    return heads


def fpn_heads(*, num_classes: int, mask: bool, norm_new_layers: bool, pooler_resolution: int,
              roi_kwargs: dict, channels: int = 256) -> RoIHeads:
    """torchvision's FPN box head (2 fc of 1024) and mask head (4 convs of 256, 2x deconv)."""
    # Deviation from the official code: torchvision's FPN RoIAlign (not pixel-aligned, 2 samples per bin);
    # detectron2's FPN configs use the aligned ROIAlignV2 with adaptive sampling.
    pool = MultiScaleRoIAlign(list(FPN_LEVELS), pooler_resolution, sampling_ratio=2)
    heads = RoIHeads(pool, TwoMLPHead(channels * pooler_resolution ** 2, 1024),
                     _init_predictor(FastRCNNPredictor(1024, num_classes + 1)), **roi_kwargs)
    if mask:
        heads.mask_roi_pool = MultiScaleRoIAlign(list(FPN_LEVELS), 2 * pooler_resolution, sampling_ratio=2)
        norm = nn.BatchNorm2d if norm_new_layers else None
        heads.mask_head = MaskRCNNHeads(channels, [channels] * 4, 1, norm_layer=norm)
        heads.mask_predictor = _mask_predictor(channels, num_classes)
    return heads


def add_keypoint_head(heads: RoIHeads, *, num_keypoints: int, pooler_resolution: int, conv_dims: tuple[int, ...],
                      channels: int = 256) -> RoIHeads:
    """Keypoint R-CNN's branch on the FPN RoI heads: RoIAlign at ``pooler_resolution`` (14), 3x3 convs of
    ``conv_dims`` channels (8 of 512) with ReLU, a 2x deconvolution to K heatmaps and a 2x bilinear upsampling
    (56x56 at 14), as detectron2's KRCNNConvDeconvUpsampleHead; no BN (detectron2's head has none). The loss is
    the spatial cross-entropy of each visible keypoint, averaged over the visible keypoints of the batch."""
    heads.keypoint_roi_pool = MultiScaleRoIAlign(list(FPN_LEVELS), pooler_resolution, sampling_ratio=2)
    heads.keypoint_head = KeypointRCNNHeads(channels, list(conv_dims))
    heads.keypoint_predictor = KeypointRCNNPredictor(conv_dims[-1], num_keypoints)
    return heads


def build_detector(cfg: TransferConfig, resnet: torchvision.models.ResNet, num_classes: int, *,
                   num_keypoints: int = 0) -> GeneralizedRCNN:
    """The configured detector around ``resnet`` (whose weights it shares, not copies); fc is left out.
    ``num_keypoints``: the keypoint set's size (task keypoints: Keypoint R-CNN)."""
    d, i = cfg.detector, cfg.input
    # Matching, sampling and box coding as detectron2's defaults (IoU 0.5 for RoIs, 0.7/0.3 for anchors; 25% / 50%
    # positives; weights 10, 10, 5, 5). Deviation from the official code: torchvision's losses (smooth L1 with
    # beta 1/9 for box deltas where detectron2 uses L1) and predictors with a background column.
    roi_kwargs = dict(fg_iou_thresh=0.5, bg_iou_thresh=0.5, batch_size_per_image=d.roi_batch_size_per_image,
                      positive_fraction=0.25, bbox_reg_weights=(10.0, 10.0, 5.0, 5.0), score_thresh=d.score_thresh,
                      nms_thresh=d.nms_thresh, detections_per_img=d.detections_per_image)
    if d.head == "C4":
        backbone: nn.Module = C4Backbone(resnet)
        anchors = AnchorGenerator((tuple(d.anchor_sizes),), (tuple(d.aspect_ratios),))
        heads: RoIHeads = c4_heads(resnet, num_classes=num_classes, mask=d.mask, extra_norm=d.extra_norm,
                                   pooler_resolution=d.pooler_resolution, roi_kwargs=roi_kwargs)
    else:
        norm = nn.BatchNorm2d if d.norm_new_layers else None
        channels = [stage_channels(getattr(resnet, f"layer{k}")) for k in range(1, 5)]
        backbone = BackboneWithFPN(resnet, {f"layer{k + 1}": name for k, name in enumerate(FPN_LEVELS)}, channels,
                                   d.fpn_channels, norm_layer=norm)
        anchors = AnchorGenerator(tuple((s,) for s in d.anchor_sizes), (tuple(d.aspect_ratios),) * 5)
        heads = fpn_heads(num_classes=num_classes, mask=d.mask, norm_new_layers=d.norm_new_layers,
                          pooler_resolution=d.pooler_resolution, roi_kwargs=roi_kwargs, channels=d.fpn_channels)
        if cfg.task == "keypoints":
            add_keypoint_head(heads, num_keypoints=num_keypoints, pooler_resolution=d.keypoint_pooler_resolution,
                              conv_dims=d.keypoint_conv_dims, channels=d.fpn_channels)
    rpn = RegionProposalNetwork(
        anchors, RPNHead(backbone.out_channels, anchors.num_anchors_per_location()[0]),
        fg_iou_thresh=0.7, bg_iou_thresh=0.3, batch_size_per_image=d.rpn_batch_size_per_image, positive_fraction=0.5,
        pre_nms_top_n={"training": d.rpn_pre_nms_topk_train, "testing": d.rpn_pre_nms_topk_test},
        post_nms_top_n={"training": d.rpn_post_nms_topk_train, "testing": d.rpn_post_nms_topk_test},
        nms_thresh=0.7)
    mean, std = input_statistics(cfg)
    transform = DetectionTransform(min_size_train=i.min_size_train, min_size_test=i.min_size_test,
                                   max_size=i.max_size, mean=mean, std=std)
    return GeneralizedRCNN(backbone, rpn, heads, transform)


def resnet_tensors(detector: GeneralizedRCNN) -> dict[str, torch.Tensor]:
    """The detector's backbone tensors under the ResNet's own names (``layer4.0.conv1.weight``...)."""
    state = detector.state_dict()
    if isinstance(detector.backbone, C4Backbone):
        out = {k.removeprefix("backbone."): v for k, v in state.items() if k.startswith("backbone.")}
        res5 = "roi_heads.box_head.res5."
        return {**out, **{"layer4." + k.removeprefix(res5): v for k, v in state.items() if k.startswith(res5)}}
    body = "backbone.body."
    return {k.removeprefix(body): v for k, v in state.items() if k.startswith(body)}
