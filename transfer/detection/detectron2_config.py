"""A TransferConfig as detectron2 config keys: ``{"MODEL.RESNETS.DEPTH": 50, "SOLVER.BASE_LR": 0.02, ...}``.

Plain Python, no detectron2 import: the translation is checked where detectron2 is not installed, and
:mod:`transfer.detection.detectron2_engine` writes these values over ``get_cfg()``'s defaults. With the paper
presets the result is the official MoCo detection configs (facebookresearch/moco ``detection/configs``:
``Base-RCNN-C4-BN.yaml`` under ``pascal_voc_R_50_C4_24k_moco.yaml`` and ``coco_R_50_C4_2x_moco.yaml``) and, for
FPN, detectron2's ``Base-RCNN-FPN.yaml`` with the same BN treatment. What the protocol fixes rather than the
config: FREEZE_AT 0 (every stage fine-tuned), synchronised BN, torchvision's input statistics on RGB images,
STRIDE_IN_1X1 False (torchvision's ResNets stride in the 3x3 conv), linear warm-up.

:data:`FIELDS` says for every TransferConfig field which keys it sets, or why it sets none.
"""

from __future__ import annotations

from typing import Any

from transfer.config import input_statistics
from transfer.detection.config import TransferConfig

# Our C4 ROI heads (registered by transfer.detection.detectron2_engine): res5 built for the backbone's depth, with or
# without the MoCo configs' extra norm after it. Names of our own: the official train_net.py registers
# "Res5ROIHeadsExtraNorm", and a registry refuses a name twice.
C4_ROI_HEADS = "MocoRes5ROIHeads"
C4_ROI_HEADS_EXTRA_NORM = "MocoRes5ROIHeadsExtraNorm"
DATASET_PREFIX = "moco_"  # our registered datasets: moco_voc_2007_trainval... (detectron2's builtins have none)

# arch -> (RESNETS.DEPTH, WIDTH_PER_GROUP, RES2_OUT_CHANNELS). R18/R34 need RES2_OUT_CHANNELS 64 (basic blocks);
# the wide ResNets are R50/R101 with bottlenecks twice as wide.
RESNETS: dict[str, tuple[int, int, int]] = {
    "resnet18": (18, 64, 64), "resnet34": (34, 64, 64), "resnet50": (50, 64, 256), "resnet101": (101, 64, 256),
    "resnet152": (152, 64, 256), "wide_resnet50_2": (50, 128, 256), "wide_resnet101_2": (101, 128, 256),
}
FPN_STAGES = ("res2", "res3", "res4", "res5")

_HEAD = ("MODEL.BACKBONE.NAME", "MODEL.RESNETS.OUT_FEATURES", "MODEL.RESNETS.NORM", "MODEL.FPN.IN_FEATURES",
         "MODEL.FPN.NORM", "MODEL.ANCHOR_GENERATOR.SIZES", "MODEL.RPN.IN_FEATURES", "MODEL.ROI_HEADS.NAME",
         "MODEL.ROI_HEADS.IN_FEATURES", "MODEL.ROI_BOX_HEAD.NAME", "MODEL.ROI_BOX_HEAD.NUM_FC",
         "MODEL.ROI_MASK_HEAD.NUM_CONV", "MODEL.ROI_MASK_HEAD.POOLER_RESOLUTION", "MODEL.ROI_MASK_HEAD.NORM")

# Every TransferConfig field: the detectron2 keys it sets, or (a string) why it sets none.
FIELDS: dict[str, tuple[str, ...] | str] = {
    "task": "picks the dataset reader (VOC XML, COCO JSON, COCO keypoints, LVIS JSON, Cityscapes PNGs, DensePose "
    "JSON) and the metrics; MASK_ON follows detector.mask, KEYPOINT_ON the keypoints task, DENSEPOSE_ON and "
    "DensePose's ROI heads the densepose task",
    "schedule": "a label in the result record",
    "engine": "chooses this engine",
    "detector.arch": ("MODEL.RESNETS.DEPTH", "MODEL.RESNETS.WIDTH_PER_GROUP", "MODEL.RESNETS.RES2_OUT_CHANNELS"),
    "detector.head": _HEAD,
    "detector.mask": ("MODEL.MASK_ON",),
    "detector.extra_norm": ("MODEL.ROI_HEADS.NAME",),
    # FPN only (C4 adds no conv); dense pose: its decoder's convs too
    "detector.norm_new_layers": ("MODEL.FPN.NORM", "MODEL.ROI_MASK_HEAD.NORM", "MODEL.ROI_DENSEPOSE_HEAD.DECODER_NORM"),
    "detector.fpn_channels": ("MODEL.FPN.OUT_CHANNELS", "MODEL.ROI_DENSEPOSE_HEAD.DECODER_NUM_CLASSES",
                              "MODEL.ROI_DENSEPOSE_HEAD.DECODER_CONV_DIMS"),
    "detector.anchor_sizes": ("MODEL.ANCHOR_GENERATOR.SIZES",),
    "detector.aspect_ratios": ("MODEL.ANCHOR_GENERATOR.ASPECT_RATIOS",),
    "detector.pooler_resolution": ("MODEL.ROI_BOX_HEAD.POOLER_RESOLUTION", "MODEL.ROI_MASK_HEAD.POOLER_RESOLUTION"),
    "detector.rpn_pre_nms_topk_train": ("MODEL.RPN.PRE_NMS_TOPK_TRAIN",),
    "detector.rpn_post_nms_topk_train": ("MODEL.RPN.POST_NMS_TOPK_TRAIN",),
    "detector.rpn_pre_nms_topk_test": ("MODEL.RPN.PRE_NMS_TOPK_TEST",),
    "detector.rpn_post_nms_topk_test": ("MODEL.RPN.POST_NMS_TOPK_TEST",),
    "detector.rpn_batch_size_per_image": ("MODEL.RPN.BATCH_SIZE_PER_IMAGE",),
    "detector.roi_batch_size_per_image": ("MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE",),
    "detector.detections_per_image": ("TEST.DETECTIONS_PER_IMAGE",),
    "detector.score_thresh": ("MODEL.ROI_HEADS.SCORE_THRESH_TEST",),
    "detector.nms_thresh": ("MODEL.ROI_HEADS.NMS_THRESH_TEST",),
    "detector.keypoint_pooler_resolution": ("MODEL.ROI_KEYPOINT_HEAD.POOLER_RESOLUTION",),
    "detector.keypoint_conv_dims": ("MODEL.ROI_KEYPOINT_HEAD.CONV_DIMS",),
    "detector.min_keypoints_per_image": ("MODEL.ROI_KEYPOINT_HEAD.MIN_KEYPOINTS_PER_IMAGE",),
    "detector.keypoint_oks_sigmas": "resolved with the keypoint set (transfer.detection.keypoints.oks_sigmas: COCO's "
    "for COCO's person keypoints) and given as TEST.KEYPOINT_OKS_SIGMAS",
    "detector.densepose_pooler_resolution": ("MODEL.ROI_DENSEPOSE_HEAD.POOLER_RESOLUTION",),
    "detector.densepose_num_convs": ("MODEL.ROI_DENSEPOSE_HEAD.NUM_STACKED_CONVS",),
    "detector.densepose_conv_dim": ("MODEL.ROI_DENSEPOSE_HEAD.CONV_HEAD_DIM",),
    "detector.densepose_heatmap_size": ("MODEL.ROI_DENSEPOSE_HEAD.HEATMAP_SIZE",),
    "input.min_size_train": ("INPUT.MIN_SIZE_TRAIN",),
    "input.min_size_test": ("INPUT.MIN_SIZE_TEST",),
    "input.max_size": ("INPUT.MAX_SIZE_TRAIN", "INPUT.MAX_SIZE_TEST"),
    # detectron2's config only turns a flip at probability 0.5 on or off; the engine's RandomFlip takes ours.
    "input.flip_prob": ("INPUT.RANDOM_FLIP",),
    "input.mean": ("MODEL.PIXEL_MEAN",),  # x 255: detectron2 normalises 0-255 pixels
    "input.std": ("MODEL.PIXEL_STD",),
    "solver.batch_size": ("SOLVER.IMS_PER_BATCH", "SOLVER.BASE_LR"),
    "solver.lr": ("SOLVER.BASE_LR",),  # ours is per 16 images, BASE_LR is for IMS_PER_BATCH
    "solver.momentum": ("SOLVER.MOMENTUM",),
    "solver.weight_decay": ("SOLVER.WEIGHT_DECAY",),
    "solver.weight_decay_norm": ("SOLVER.WEIGHT_DECAY_NORM",),
    "solver.iterations": ("SOLVER.MAX_ITER",),
    "solver.steps": ("SOLVER.STEPS",),
    "solver.gamma": ("SOLVER.GAMMA",),
    "solver.warmup_iters": ("SOLVER.WARMUP_ITERS",),
    "solver.warmup_factor": ("SOLVER.WARMUP_FACTOR",),
    "solver.precise_bn_iters": ("TEST.PRECISE_BN.ENABLED", "TEST.PRECISE_BN.NUM_ITER"),
    "data.path": "the root our readers load (detectron2's $DETECTRON2_DATASETS layout); no config key",
    "data.train": ("DATASETS.TRAIN",),
    "data.test": ("DATASETS.TEST",),
    "data.classes": "VOC class names, read by our reader; their number is MODEL.ROI_HEADS.NUM_CLASSES",
    "data.workers": ("DATALOADER.NUM_WORKERS",),
    "data.repeat_threshold": ("DATALOADER.SAMPLER_TRAIN", "DATALOADER.REPEAT_THRESHOLD"),
    "run.output_dir": ("OUTPUT_DIR",),
    "run.device": "resolved (auto: CUDA when available) and given as MODEL.DEVICE",
    "run.seed": ("SEED",),
    "run.amp": ("SOLVER.AMP.ENABLED",),  # bf16 autocast on CUDA, as the torchvision engine; nothing on CPU
    "run.log_every": "the period of our metrics.jsonl and progress lines (a hook argument in detectron2)",
    "run.checkpoint_every": ("SOLVER.CHECKPOINT_PERIOD",),
    "run.test_batch_size": "the batch of our test loader (a loader argument in detectron2, 1 by default)",
    "run.loggers": "mirrors of our metrics.jsonl (TensorBoard, W&B), written by our logging hook, not detectron2's "
    "writers",
    "run.weights_format": "the method of weights whose file does not say: read before the conversion to "
    "MODEL.WEIGHTS, and through input.mean/std (their normalisation) into MODEL.PIXEL_MEAN/STD",
}


def dataset_name(name: str) -> str:
    """Our registered name of a dataset: "voc_2007_test" -> "moco_voc_2007_test"."""
    return DATASET_PREFIX + name


def norm_name(cfg: TransferConfig) -> str:
    """The BN of the backbone and the new layers: fine-tuned and synchronised across GPUs (the paper's SyncBN)."""
    # Base-RCNN-C4-BN.yaml uses detectron2's naiveSyncBN ("SyncBN seems to cause larger variance"); the FPN
    # configs with BN (detectron2's Misc/*_syncbn.yaml) use torch's SyncBN. One process: both are plain BN.
    return "naiveSyncBN" if cfg.detector.head == "C4" else "SyncBN"


def detectron2_options(cfg: TransferConfig, *, num_classes: int, arch: str | None = None, weights: str = "",
                       device: str = "cpu", num_keypoints: int = 0, oks_sigmas: tuple[float, ...] = ()
                       ) -> dict[str, Any]:
    """detectron2 config keys and values for ``cfg`` (everything else stays at ``get_cfg()``'s defaults).

    ``num_classes``: the dataset's (VOC 20, COCO 80, COCO keypoints 1, LVIS v0.5 1230, Cityscapes 8); ``arch``: the
    weights' ResNet (default ``detector.arch``, then resnet50); ``weights``: the converted ``.pkl`` or "" (random
    init); ``device``: already resolved; ``num_keypoints`` and ``oks_sigmas``: the keypoint set's (task keypoints).
    """
    d, i, s = cfg.detector, cfg.input, cfg.solver
    depth, width, res2 = RESNETS[arch or d.arch or "resnet50"]
    norm = norm_name(cfg)
    c4 = d.head == "C4"
    new_norm = norm if d.norm_new_layers and not c4 else ""
    mean, std = input_statistics(cfg)
    options: dict[str, Any] = {
        "MODEL.META_ARCHITECTURE": "GeneralizedRCNN",
        "MODEL.MASK_ON": d.mask,
        "MODEL.WEIGHTS": weights,
        "MODEL.DEVICE": device,
        # RGB in 0-255 normalised as torchvision's pretraining (the *_moco.yaml PIXEL_MEAN/STD, INPUT.FORMAT)
        "MODEL.PIXEL_MEAN": [round(m * 255, 3) for m in mean],
        "MODEL.PIXEL_STD": [round(v * 255, 3) for v in std],
        "INPUT.FORMAT": "RGB",
        "MODEL.BACKBONE.NAME": "build_resnet_backbone" if c4 else "build_resnet_fpn_backbone",
        "MODEL.BACKBONE.FREEZE_AT": 0,  # every stage is fine-tuned, the stem included
        "MODEL.RESNETS.DEPTH": depth,
        "MODEL.RESNETS.WIDTH_PER_GROUP": width,
        "MODEL.RESNETS.RES2_OUT_CHANNELS": res2,
        "MODEL.RESNETS.NUM_GROUPS": 1,
        "MODEL.RESNETS.NORM": norm,
        "MODEL.RESNETS.STRIDE_IN_1X1": False,  # torchvision's ResNets (and MoCo's) stride in the 3x3 conv
        "MODEL.RESNETS.OUT_FEATURES": ["res4"] if c4 else list(FPN_STAGES),
        "MODEL.FPN.IN_FEATURES": [] if c4 else list(FPN_STAGES),
        "MODEL.FPN.NORM": new_norm,
        "MODEL.FPN.OUT_CHANNELS": d.fpn_channels,
        "MODEL.ANCHOR_GENERATOR.SIZES": [list(d.anchor_sizes)] if c4 else [[a] for a in d.anchor_sizes],
        "MODEL.ANCHOR_GENERATOR.ASPECT_RATIOS": [list(d.aspect_ratios)],
        "MODEL.RPN.IN_FEATURES": ["res4"] if c4 else ["p2", "p3", "p4", "p5", "p6"],
        "MODEL.RPN.PRE_NMS_TOPK_TRAIN": d.rpn_pre_nms_topk_train,
        "MODEL.RPN.POST_NMS_TOPK_TRAIN": d.rpn_post_nms_topk_train,
        "MODEL.RPN.PRE_NMS_TOPK_TEST": d.rpn_pre_nms_topk_test,
        "MODEL.RPN.POST_NMS_TOPK_TEST": d.rpn_post_nms_topk_test,
        "MODEL.RPN.BATCH_SIZE_PER_IMAGE": d.rpn_batch_size_per_image,
        "MODEL.ROI_HEADS.NAME": (C4_ROI_HEADS_EXTRA_NORM if d.extra_norm else C4_ROI_HEADS) if c4
        else "StandardROIHeads",
        "MODEL.ROI_HEADS.IN_FEATURES": ["res4"] if c4 else ["p2", "p3", "p4", "p5"],
        "MODEL.ROI_HEADS.NUM_CLASSES": num_classes,
        "MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE": d.roi_batch_size_per_image,
        "MODEL.ROI_HEADS.SCORE_THRESH_TEST": d.score_thresh,
        "MODEL.ROI_HEADS.NMS_THRESH_TEST": d.nms_thresh,
        "MODEL.ROI_BOX_HEAD.NAME": "" if c4 else "FastRCNNConvFCHead",  # C4: res5 is the box head
        "MODEL.ROI_BOX_HEAD.NUM_FC": 0 if c4 else 2,
        "MODEL.ROI_BOX_HEAD.POOLER_RESOLUTION": d.pooler_resolution,
        # C4's mask head reads the box branch's res5 features; FPN pools twice the box resolution (14 for 7)
        "MODEL.ROI_MASK_HEAD.NUM_CONV": 0 if c4 else 4,
        "MODEL.ROI_MASK_HEAD.POOLER_RESOLUTION": 14 if c4 else 2 * d.pooler_resolution,
        "MODEL.ROI_MASK_HEAD.NORM": new_norm,
        "TEST.DETECTIONS_PER_IMAGE": d.detections_per_image,
        "INPUT.MIN_SIZE_TRAIN": tuple(i.min_size_train),
        "INPUT.MIN_SIZE_TRAIN_SAMPLING": "choice",
        "INPUT.MAX_SIZE_TRAIN": i.max_size,
        "INPUT.MIN_SIZE_TEST": i.min_size_test,
        "INPUT.MAX_SIZE_TEST": i.max_size,
        "INPUT.RANDOM_FLIP": "horizontal" if i.flip_prob > 0 else "none",
        "SOLVER.IMS_PER_BATCH": s.batch_size,
        "SOLVER.BASE_LR": s.lr * s.batch_size / 16,
        "SOLVER.MOMENTUM": s.momentum,
        "SOLVER.WEIGHT_DECAY": s.weight_decay,
        "SOLVER.WEIGHT_DECAY_NORM": s.weight_decay_norm,
        "SOLVER.MAX_ITER": s.iterations,
        "SOLVER.STEPS": tuple(s.steps),
        "SOLVER.GAMMA": s.gamma,
        "SOLVER.WARMUP_METHOD": "linear",
        "SOLVER.WARMUP_ITERS": s.warmup_iters,
        "SOLVER.WARMUP_FACTOR": s.warmup_factor,
        "SOLVER.CHECKPOINT_PERIOD": cfg.run.checkpoint_every,
        "SOLVER.AMP.ENABLED": cfg.run.amp,
        # BN statistics recomputed before testing (Base-RCNN-C4-BN.yaml: TEST.PRECISE_BN.ENABLED, 200 iterations)
        "TEST.PRECISE_BN.ENABLED": s.precise_bn_iters > 0,
        "TEST.PRECISE_BN.NUM_ITER": s.precise_bn_iters or 200,
        "TEST.EVAL_PERIOD": 0,  # tested once, after training
        "DATASETS.TRAIN": tuple(dataset_name(n) for n in cfg.data.train),
        "DATASETS.TEST": (dataset_name(cfg.data.test),),
        "DATALOADER.NUM_WORKERS": cfg.data.workers,
        # LVIS: repeat-factor sampling (LVISv0.5-InstanceSegmentation/*.yaml); the other tasks: every image once
        "DATALOADER.SAMPLER_TRAIN": "RepeatFactorTrainingSampler" if cfg.data.repeat_threshold > 0
        else "TrainingSampler",
        "DATALOADER.REPEAT_THRESHOLD": cfg.data.repeat_threshold,
        "SEED": cfg.run.seed,
        "OUTPUT_DIR": cfg.run.output_dir or f"runs/{cfg.task}",
    }
    if cfg.task == "keypoints":
        options.update(keypoint_options(cfg, num_keypoints=num_keypoints, oks_sigmas=oks_sigmas))
    if cfg.task == "densepose":
        options.update(densepose_options(cfg, new_norm))
    return options


def keypoint_options(cfg: TransferConfig, *, num_keypoints: int, oks_sigmas: tuple[float, ...]) -> dict[str, Any]:
    """Keypoint R-CNN's keys: detectron2's Common/Base-Keypoint-RCNN-FPN.yaml (KEYPOINT_ON, the box regression's
    SMOOTH_L1_BETA 0.5) and ROI_KEYPOINT_HEAD defaults (KRCNNConvDeconvUpsampleHead on ROIAlignV2, loss normalised
    by the visible keypoints), with the head's sizes and the OKS sigmas of the config and the keypoint set."""
    d = cfg.detector
    return {
        "MODEL.KEYPOINT_ON": True,
        "MODEL.ROI_BOX_HEAD.SMOOTH_L1_BETA": 0.5,  # the keypoint config's: keypoint AP degrades with plain L1
        "MODEL.ROI_KEYPOINT_HEAD.NAME": "KRCNNConvDeconvUpsampleHead",
        "MODEL.ROI_KEYPOINT_HEAD.NUM_KEYPOINTS": num_keypoints,
        "MODEL.ROI_KEYPOINT_HEAD.POOLER_RESOLUTION": d.keypoint_pooler_resolution,
        "MODEL.ROI_KEYPOINT_HEAD.POOLER_TYPE": "ROIAlignV2",
        "MODEL.ROI_KEYPOINT_HEAD.POOLER_SAMPLING_RATIO": 0,
        "MODEL.ROI_KEYPOINT_HEAD.CONV_DIMS": tuple(d.keypoint_conv_dims),
        "MODEL.ROI_KEYPOINT_HEAD.MIN_KEYPOINTS_PER_IMAGE": d.min_keypoints_per_image,
        "MODEL.ROI_KEYPOINT_HEAD.NORMALIZE_LOSS_BY_VISIBLE_KEYPOINTS": True,
        # plain floats: the keypoint set's sigmas are numpy's, which CfgNode.dump() (yaml.safe_dump) refuses
        "TEST.KEYPOINT_OKS_SIGMAS": [float(s) for s in oks_sigmas],
    }


def densepose_options(cfg: TransferConfig, new_norm: str) -> dict[str, Any]:
    """DensePose R-CNN's keys (their config node is DensePose's ``add_densepose_config``): its
    Base-DensePose-RCNN-FPN.yaml (DENSEPOSE_ON, DensePoseROIHeads, the box branch's 7x7 ROIAlign with sampling ratio
    2, DensePoseV1ConvXHead on ROIAlign with 2 coarse segmentation channels) with the head's sizes of the config;
    the rest at DensePose's defaults (the decoder merging P2-P5 at stride 4 on, DENSEPOSE_EVALUATION.TYPE iou,
    MIN_IOU_THRESHOLD 0.5). The decoder's output feeds a head built for the FPN's channels, so its channels are
    the FPN's (256 = DensePose's DECODER_NUM_CLASSES and DECODER_CONV_DIMS in the paper's preset). Deviation from
    DensePose's config, as for the FPN and the mask head of the other presets: the decoder's new convs are
    normalised (``detector.norm_new_layers``: SyncBN; DensePose's DECODER_NORM is none)."""
    d = cfg.detector
    return {
        "MODEL.DENSEPOSE_ON": True,
        "MODEL.ROI_HEADS.NAME": "DensePoseROIHeads",
        "MODEL.ROI_BOX_HEAD.POOLER_SAMPLING_RATIO": 2,
        "MODEL.ROI_BOX_HEAD.POOLER_TYPE": "ROIAlign",
        "MODEL.ROI_DENSEPOSE_HEAD.NAME": "DensePoseV1ConvXHead",
        "MODEL.ROI_DENSEPOSE_HEAD.POOLER_TYPE": "ROIAlign",
        "MODEL.ROI_DENSEPOSE_HEAD.NUM_COARSE_SEGM_CHANNELS": 2,
        "MODEL.ROI_DENSEPOSE_HEAD.POOLER_RESOLUTION": d.densepose_pooler_resolution,
        "MODEL.ROI_DENSEPOSE_HEAD.NUM_STACKED_CONVS": d.densepose_num_convs,
        "MODEL.ROI_DENSEPOSE_HEAD.CONV_HEAD_DIM": d.densepose_conv_dim,
        "MODEL.ROI_DENSEPOSE_HEAD.HEATMAP_SIZE": d.densepose_heatmap_size,
        "MODEL.ROI_DENSEPOSE_HEAD.DECODER_ON": True,
        "MODEL.ROI_DENSEPOSE_HEAD.DECODER_NUM_CLASSES": d.fpn_channels,
        "MODEL.ROI_DENSEPOSE_HEAD.DECODER_CONV_DIMS": d.fpn_channels,
        "MODEL.ROI_DENSEPOSE_HEAD.DECODER_NORM": new_norm,
    }
