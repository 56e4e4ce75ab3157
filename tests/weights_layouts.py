"""Weight files in the layouts other codebases release, with small random tensors of the real shapes (issue 47).

Released weights cannot be downloaded here: each builder writes the exact key names and nesting of one layout
(moco_core/model/weights/ and ../shared/reference/ssl_evaluation.md section 3 say whose), for a ResNet-18 (SimCLR v2's
converter has bottleneck ResNets only: a ResNet-50) or a small ViT (4-pixel patches, width 96, 6 blocks, 3 heads: the
shape of our ``vit_nano_p4``, for the embedded data's 32-pixel crops). The same tensors go into every layout of a
family, so that two formats of one network can be compared.

``python -m tests.weights_layouts DIR`` writes one file (or Hugging Face folder) of each layout into DIR.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torchvision
from torch import nn

VIT = {"patch": 4, "width": 96, "depth": 6, "heads": 3, "grid": 8}  # vit_nano_p4's shape at 32-pixel crops


def resnet_state(arch: str = "resnet18", seed: int = 0, *, cifar: bool = False) -> dict[str, torch.Tensor]:
    """A torchvision ResNet's state dict with fc, random weights and BN statistics (so that a buffer left at its
    default would show); ``cifar``: a 3x3 conv1 of stride 1 (its max-pool has no tensors)."""
    torch.manual_seed(seed)
    model = getattr(torchvision.models, arch)()
    if cifar:
        model.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.2, 0.2)
                module.running_mean.uniform_(-0.1, 0.1)
                module.running_var.uniform_(0.5, 1.5)
    return {k: v.clone() for k, v in model.state_dict().items()}


def without(state: dict[str, torch.Tensor], *prefixes: str) -> dict[str, torch.Tensor]:
    return {k: v for k, v in state.items() if not k.startswith(prefixes)}


def prefixed(prefix: str, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {prefix + k: v for k, v in state.items()}


# ------------------------------------------------------------------------------------------------------- ViTs


def dinov2_state(seed: int = 0, *, registers: int = 0, swiglu: bool = False) -> dict[str, torch.Tensor]:
    """A DINOv2 ``DinoVisionTransformer``'s backbone under its own names (the hub files'): ``cls_token``,
    ``pos_embed`` (class token and patches), ``mask_token``, ``register_tokens``, ``patch_embed.proj``,
    ``blocks.N.{norm1, attn.qkv, attn.proj, ls1.gamma, norm2, mlp.fc1/fc2 (SwiGLU: mlp.w12/w3), ls2.gamma}``,
    ``norm``. Layer scale and the norms are drawn away from 1 and 0, so that every tensor matters."""
    g = torch.Generator().manual_seed(seed)
    w, p, n = VIT["width"], VIT["patch"], VIT["grid"] ** 2

    def rand(*shape: int, scale: float = 0.05) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * scale

    state = {"cls_token": rand(1, 1, w, scale=0.5), "pos_embed": rand(1, 1 + n, w, scale=0.5),
             "mask_token": rand(1, w), "patch_embed.proj.weight": rand(w, 3, p, p, scale=0.2),
             "patch_embed.proj.bias": rand(w)}
    if registers:
        state["register_tokens"] = rand(1, registers, w, scale=0.5)
    hidden = 4 * w
    for i in range(VIT["depth"]):
        b = f"blocks.{i}."
        state.update({b + "norm1.weight": 1 + rand(w), b + "norm1.bias": rand(w),
                      b + "attn.qkv.weight": rand(3 * w, w, scale=0.1), b + "attn.qkv.bias": rand(3 * w),
                      b + "attn.proj.weight": rand(w, w, scale=0.1), b + "attn.proj.bias": rand(w),
                      b + "ls1.gamma": 0.5 + rand(w, scale=0.2), b + "norm2.weight": 1 + rand(w),
                      b + "norm2.bias": rand(w), b + "ls2.gamma": 0.5 + rand(w, scale=0.2)})
        if swiglu:  # DINOv2's SwiGLUFFNFused: w12 packs both halves
            state.update({b + "mlp.w12.weight": rand(2 * hidden, w, scale=0.1), b + "mlp.w12.bias": rand(2 * hidden),
                          b + "mlp.w3.weight": rand(w, hidden, scale=0.1), b + "mlp.w3.bias": rand(w)})
        else:
            state.update({b + "mlp.fc1.weight": rand(hidden, w, scale=0.1), b + "mlp.fc1.bias": rand(hidden),
                          b + "mlp.fc2.weight": rand(w, hidden, scale=0.1), b + "mlp.fc2.bias": rand(w)})
    state.update({"norm.weight": 1 + rand(w), "norm.bias": rand(w)})
    return state


def timm_vit_state(seed: int = 0) -> dict[str, torch.Tensor]:
    """A plain timm ViT backbone (DINO's, MAE's, timm's names): DINOv2's tensors less its mask token and layer
    scale."""
    return {k: v for k, v in dinov2_state(seed).items() if k != "mask_token" and ".ls" not in k}


def chunked(state: dict[str, torch.Tensor], chunks: int = 2) -> dict[str, torch.Tensor]:
    """DINOv2's ``block_chunks``: ``blocks.C.N.*``, N the block's global index."""
    per = VIT["depth"] // chunks
    out = {}
    for key, value in state.items():
        if key.startswith("blocks."):
            i = int(key.split(".")[1])
            key = f"blocks.{i // per}.{i}." + key.split(".", 2)[2]
        out[key] = value
    return out


def to_transformers(state: dict[str, torch.Tensor], dinov2: bool) -> dict[str, torch.Tensor]:
    """timm/DINOv2 names to transformers' ``ViTModel`` (``dinov2`` False) or ``Dinov2Model`` names, written here
    from transformers' module names (modeling_vit.py, modeling_dinov2.py): q, k, v split, a pooler for ViTModel."""
    w = VIT["width"]
    out = {"embeddings.cls_token": state["cls_token"], "embeddings.position_embeddings": state["pos_embed"],
           "embeddings.patch_embeddings.projection.weight": state["patch_embed.proj.weight"],
           "embeddings.patch_embeddings.projection.bias": state["patch_embed.proj.bias"],
           "layernorm.weight": state["norm.weight"], "layernorm.bias": state["norm.bias"]}
    if dinov2:
        out["embeddings.mask_token"] = state["mask_token"]
        if "register_tokens" in state:
            out["embeddings.register_tokens"] = state["register_tokens"]
    for i in range(VIT["depth"]):
        b, h = f"blocks.{i}.", f"encoder.layer.{i}."
        for kind in ("weight", "bias"):
            q, k, v = state[b + f"attn.qkv.{kind}"].split(w)
            out.update({h + f"attention.attention.query.{kind}": q, h + f"attention.attention.key.{kind}": k,
                        h + f"attention.attention.value.{kind}": v,
                        h + f"attention.output.dense.{kind}": state[b + f"attn.proj.{kind}"]})
            if dinov2:
                out.update({h + f"norm1.{kind}": state[b + f"norm1.{kind}"],
                            h + f"norm2.{kind}": state[b + f"norm2.{kind}"],
                            h + f"mlp.fc1.{kind}": state[b + f"mlp.fc1.{kind}"],
                            h + f"mlp.fc2.{kind}": state[b + f"mlp.fc2.{kind}"]})
            else:
                out.update({h + f"layernorm_before.{kind}": state[b + f"norm1.{kind}"],
                            h + f"layernorm_after.{kind}": state[b + f"norm2.{kind}"],
                            h + f"intermediate.dense.{kind}": state[b + f"mlp.fc1.{kind}"],
                            h + f"output.dense.{kind}": state[b + f"mlp.fc2.{kind}"]})
        if dinov2:
            out[h + "layer_scale1.lambda1"] = state[b + "ls1.gamma"]
            out[h + "layer_scale2.lambda1"] = state[b + "ls2.gamma"]
    if not dinov2:
        out.update({"pooler.dense.weight": torch.zeros(w, w), "pooler.dense.bias": torch.zeros(w)})
    return out


def to_torchvision_vit(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """timm names to torchvision's VisionTransformer (vision_transformer.py), with its ``heads.head``."""
    out = {"class_token": state["cls_token"], "conv_proj.weight": state["patch_embed.proj.weight"],
           "conv_proj.bias": state["patch_embed.proj.bias"], "encoder.pos_embedding": state["pos_embed"],
           "encoder.ln.weight": state["norm.weight"], "encoder.ln.bias": state["norm.bias"],
           "heads.head.weight": torch.zeros(10, VIT["width"]), "heads.head.bias": torch.zeros(10)}
    names = {"norm1": "ln_1", "norm2": "ln_2", "attn.qkv": "self_attention.in_proj", "attn.proj":
             "self_attention.out_proj", "mlp.fc1": "mlp.0", "mlp.fc2": "mlp.3"}
    for i in range(VIT["depth"]):
        for ours, theirs in names.items():
            for kind in ("weight", "bias"):
                key = f"encoder.layers.encoder_layer_{i}.{theirs}"
                key = f"{key}_{kind}" if theirs == "self_attention.in_proj" else f"{key}.{kind}"
                out[key] = state[f"blocks.{i}.{ours}.{kind}"]
    return out


# ------------------------------------------------------------------------------------------------------ files


def _save(obj: object, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(obj, path)
    return path


def exclude_bias_and_norm(p: torch.Tensor) -> bool:
    """Barlow Twins' LARS filter, which its optimizer state pickles by name (``__main__.exclude_bias_and_norm``)."""
    return p.ndim == 1


def _save_main(obj: object, path: Path) -> Path:
    """torch.save with ``exclude_bias_and_norm`` pickled as Barlow Twins' main.py, run as a script, names it."""
    main, fn = sys.modules["__main__"], exclude_bias_and_norm
    before, module = getattr(main, "exclude_bias_and_norm", None), fn.__module__
    fn.__module__ = "__main__"
    main.exclude_bias_and_norm = fn  # type: ignore[attr-defined]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(obj, path)
    finally:
        fn.__module__ = module
        if before is None:
            del main.exclude_bias_and_norm  # type: ignore[attr-defined]
    return path


def _safetensors(folder: Path, state: dict[str, torch.Tensor], config: dict, preprocessor: dict | None = None) -> Path:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "model.safetensors"),
              metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(config))
    if preprocessor is not None:
        (folder / "preprocessor_config.json").write_text(json.dumps(preprocessor))
    return folder / "model.safetensors"


def torchvision_file(path: Path, state: dict[str, torch.Tensor]) -> Path:
    """torchvision's own weights, DINO's and Barlow Twins' backbone-only ResNets, BYOL converted (no fc): flat."""
    return _save(state, path)


def dino_full(path: Path, backbone: dict[str, torch.Tensor], *, vit: bool) -> Path:
    """DINO's ``*_full_checkpoint.pth``: the teacher's backbone is ``backbone``; the student's differs (it is the
    network that was being trained, not the one to evaluate)."""
    student = {k: v + 1.0 if v.is_floating_point() else v for k, v in backbone.items()}
    head = {"head.mlp.0.weight": torch.randn(32, 8), "head.last_layer.weight_g": torch.ones(64, 1)}
    teacher_prefix = "backbone." if vit else "module.backbone."  # the ViT teacher is not DDP-wrapped
    teacher = {**prefixed(teacher_prefix, backbone), **prefixed("module." if not vit else "", head)}
    return _save({"student": {**prefixed("module.backbone.", student), **prefixed("module.", head)},
                  "teacher": teacher, "optimizer": {"state": {}, "param_groups": [{"lr": 0.0, "params": [0]}]},
                  "epoch": 100, "args": argparse.Namespace(arch="vit_small" if vit else "resnet50", patch_size=16,
                                                  out_dim=65536, teacher_temp=0.04),
                  "dino_loss": {"center": torch.zeros(1, 64)}, "fp16_scaler": None}, path)


def swav_file(path: Path, backbone: dict[str, torch.Tensor], prototype_sets: int = 1) -> Path:
    """``swav_800ep_pretrain.pth.tar``: the DDP model's flat state dict; DeepCluster-v2's has several prototype
    sets."""
    extra = {"module.projection_head.0.weight": torch.randn(64, 512), "module.projection_head.0.bias": torch.zeros(64)}
    if prototype_sets == 1:
        extra["module.prototypes.weight"] = torch.randn(30, 64)
    else:
        extra.update({f"module.prototypes.prototypes{i}.weight": torch.randn(30, 64) for i in range(prototype_sets)})
    return _save({**prefixed("module.", without(backbone, "fc.")), **extra}, path)


def barlow_full(path: Path, backbone: dict[str, torch.Tensor]) -> Path:
    """Barlow Twins' ``checkpoint.pth``: epoch, the DDP model (backbone, projector, the affine-free bn) and the
    LARS optimizer whose param groups hold its filter function."""
    model = {**prefixed("module.backbone.", without(backbone, "fc.")),
             "module.projector.0.weight": torch.randn(64, 512), "module.projector.1.weight": torch.ones(64),
             "module.projector.1.bias": torch.zeros(64), "module.projector.1.running_mean": torch.zeros(64),
             "module.projector.1.running_var": torch.ones(64),
             "module.projector.1.num_batches_tracked": torch.tensor(0),
             "module.projector.3.weight": torch.randn(64, 64),
             "module.bn.running_mean": torch.zeros(64), "module.bn.running_var": torch.ones(64),
             "module.bn.num_batches_tracked": torch.tensor(0)}
    group = {"lr": 0.0, "weight_decay": 1e-6, "momentum": 0.9, "eta": 0.001, "params": [0],
             "weight_decay_filter": exclude_bias_and_norm, "lars_adaptation_filter": exclude_bias_and_norm}
    return _save_main({"epoch": 1000, "model": model, "optimizer": {"state": {}, "param_groups": [group]}}, path)


def simclr_v1(path: Path, state: dict[str, torch.Tensor]) -> Path:
    """tonylins/simclr-converter: ``{'state_dict': ResNet with its supervised fc}``."""
    return _save({"state_dict": state}, path)


_V2_BLOCK = {"conv1.": "net.0.", "bn1.": "net.1.0.", "conv2.": "net.2.", "bn2.": "net.3.0.", "conv3.": "net.4.",
             "bn3.": "net.5.0.", "downsample.0.": "projection.shortcut.", "downsample.1.": "projection.bn.0."}


def simclr_v2(path: Path, state: dict[str, torch.Tensor]) -> Path:
    """Separius/SimCLRv2-Pytorch's ``r50_1x_sk0.pth``: ``{'resnet', 'head'}``, its ResNet-50 under its own names
    (resnet.py: ``net.0`` the stem, ``net.1-4.blocks.N`` the bottlenecks, BatchNormRelu wrapping each BN)."""
    resnet = {}
    for key, value in state.items():
        if key.startswith("conv1."):
            new = "net.0.0." + key[len("conv1."):]
        elif key.startswith("bn1."):
            new = "net.0.1.0." + key[len("bn1."):]
        elif key.startswith("fc."):
            new = key
        else:
            stage, block, rest = key.split(".", 2)
            ours, theirs = next((o, t) for o, t in _V2_BLOCK.items() if rest.startswith(o))
            new = f"net.{stage[len('layer'):]}.blocks.{block}.{theirs}{rest[len(ours):]}"
        resnet[new] = value
    head = {"layers.0.weight": torch.randn(64, 2048), "layers.1.weight": torch.ones(64)}
    return _save({"resnet": resnet, "head": head}, path)


def solo_learn(path: Path, backbone: dict[str, torch.Tensor], method: str | None = "byol") -> Path:
    """solo-learn's Lightning checkpoint, with the ``args.json`` its Checkpointer writes beside it."""
    state = {**prefixed("backbone.", without(backbone, "fc.")),
             **prefixed("momentum_backbone.", {k: v + 1.0 if v.is_floating_point() else v
                                               for k, v in without(backbone, "fc.").items()}),
             "projector.0.weight": torch.randn(64, 512), "predictor.0.weight": torch.randn(64, 64)}
    path.parent.mkdir(parents=True, exist_ok=True)
    if method is not None:
        (path.parent / "args.json").write_text(json.dumps({"name": "run", "method": method, "backbone": "resnet18"}))
    return _save({"epoch": 399, "global_step": 1000, "pytorch-lightning_version": "1.9.5", "state_dict": state,
                  "loops": {}, "callbacks": {}, "lr_schedulers": []}, path)


_CHILDREN = {"conv1": "0", "bn1": "1", "layer1": "4", "layer2": "5", "layer3": "6", "layer4": "7"}


def lightly_resnet(path: Path, backbone: dict[str, torch.Tensor]) -> Path:
    """lightly's example: ``backbone = nn.Sequential(*list(resnet.children())[:-1])`` in a LightningModule."""
    seq = {f"backbone.{_CHILDREN[k.split('.')[0]]}.{k.split('.', 1)[1]}": v
           for k, v in without(backbone, "fc.").items()}
    return _save({"epoch": 9, "global_step": 90, "pytorch-lightning_version": "2.1.0",
                  "state_dict": {**seq, "projection_head.layers.0.weight": torch.randn(64, 512)}}, path)


def lightly_vit(path: Path, vit: dict[str, torch.Tensor]) -> Path:
    """lightly's ViT methods: timm's ViT wrapped as ``backbone.vit`` (MaskedVisionTransformerTIMM)."""
    return _save({"epoch": 9, "global_step": 90, "pytorch-lightning_version": "2.1.0",
                  "state_dict": {**prefixed("backbone.vit.", vit), "projection_head.layers.0.weight":
                                 torch.randn(64, VIT["width"])}}, path)


def mae_file(path: Path, vit: dict[str, torch.Tensor], *, full: bool) -> Path:
    """MAE's ``mae_pretrain_vit_*.pth`` (``{'model'}``, the encoder) or its training checkpoint (the decoder too,
    with the optimizer, scaler, epoch and ``args``)."""
    if not full:
        return _save({"model": vit}, path)
    decoder = {"mask_token": torch.randn(1, 1, 64), "decoder_embed.weight": torch.randn(64, VIT["width"]),
               "decoder_pos_embed": torch.randn(1, 65, 64), "decoder_blocks.0.norm1.weight": torch.ones(64),
               "decoder_norm.weight": torch.ones(64), "decoder_pred.weight": torch.randn(48, 64)}
    return _save({"model": {**vit, **decoder}, "optimizer": {"state": {}, "param_groups": []}, "epoch": 799,
                  "scaler": {"scale": 65536.0},
                  "args": argparse.Namespace(model="mae_vit_base_patch16", norm_pix_loss=True)}, path)


def timm_safetensors(folder: Path, state: dict[str, torch.Tensor], architecture: str) -> Path:
    """A timm model on the Hugging Face hub: ``model.safetensors`` (a ViT with its ``head``) and timm's
    ``config.json`` (architecture, pretrained_cfg with the input statistics)."""
    if "cls_token" in state:
        state = {**state, "head.weight": torch.zeros(10, VIT["width"]), "head.bias": torch.zeros(10)}
    config = {"architecture": architecture, "num_classes": 10, "pretrained_cfg": {
        "tag": "test", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225], "input_size": [3, 32, 32]}}
    return _safetensors(folder, state, config)


def transformers_vit(folder: Path, vit: dict[str, torch.Tensor], *, dinov2: bool) -> Path:
    """transformers' ViTModel (google/vit-*: LayerNorm eps 1e-12, preprocessor mean and std 0.5) or Dinov2Model
    (facebook/dinov2-*: eps 1e-6, ImageNet's statistics) saved with save_pretrained: model.safetensors,
    config.json, preprocessor_config.json."""
    registers = vit["register_tokens"].shape[1] if "register_tokens" in vit else 0
    model_type = ("dinov2_with_registers" if registers else "dinov2") if dinov2 else "vit"
    config = {"model_type": model_type, "hidden_size": VIT["width"], "num_hidden_layers": VIT["depth"],
              "num_attention_heads": VIT["heads"], "patch_size": VIT["patch"], "image_size": 32,
              "layer_norm_eps": 1e-6 if dinov2 else 1e-12, "qkv_bias": True,
              **({"num_register_tokens": registers} if registers else {})}
    stats = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]) if dinov2 else ([0.5] * 3, [0.5] * 3)
    return _safetensors(folder, to_transformers(vit, dinov2), config, {"image_mean": stats[0], "image_std": stats[1]})


# ----------------------------------------------------------------------------------------------- every layout


def write_all(root: Path) -> dict[str, tuple[Path, str | None]]:
    """One file of each layout under ``root``: name -> (the path to evaluate, the --weights-format it needs or None
    where the file says what it is)."""
    root.mkdir(parents=True, exist_ok=True)
    r18, vit, dv2 = resnet_state(), timm_vit_state(), dinov2_state()
    from tests.layouts import official_checkpoint

    files: dict[str, tuple[Callable[[], Path], str | None]] = {
        "official-moco": (lambda: official_checkpoint(root / "moco_v2_200ep_pretrain.pth.tar"), None),
        "supervised-torchvision": (lambda: torchvision_file(root / "resnet18-f37072fd.pth", r18), "supervised"),
        "dino-resnet-backbone": (lambda: torchvision_file(root / "dino_resnet18_pretrain.pth",
                                                          without(r18, "fc.")), "dino"),
        "dino-resnet-full": (lambda: dino_full(root / "dino_resnet18_full_checkpoint.pth",
                                               without(r18, "fc."), vit=False), None),
        "dino-vit-backbone": (lambda: torchvision_file(root / "dino_vitnano4_pretrain.pth", vit), "dino"),
        "dino-vit-full": (lambda: dino_full(root / "dino_vitnano4_full_checkpoint.pth", vit, vit=True), None),
        "dinov2-hub": (lambda: _save(dv2, root / "dinov2_vitn4_pretrain.pth"), None),
        "dinov2-hub-reg4-swiglu": (lambda: _save(dinov2_state(1, registers=4, swiglu=True),
                                                 root / "dinov2_vitn4_reg4_pretrain.pth"), None),
        "dinov2-train-chunked": (lambda: _save({"teacher": {**prefixed("backbone.", chunked(dv2)),
                                                            "dino_head.mlp.0.weight": torch.randn(8, 96),
                                                            "ibot_head.mlp.0.weight": torch.randn(8, 96)}},
                                               root / "teacher_checkpoint.pth"), None),
        "swav": (lambda: swav_file(root / "swav_800ep_pretrain.pth.tar", r18), "swav"),
        "deepcluster-v2": (lambda: swav_file(root / "deepclusterv2_800ep_pretrain.pth.tar", r18, 3),
                           "deepcluster-v2"),
        "barlowtwins-hub": (lambda: torchvision_file(root / "barlow_resnet18.pth", without(r18, "fc.")),
                            "barlowtwins"),
        "barlowtwins-full": (lambda: barlow_full(root / "barlow_checkpoint.pth", r18), None),
        "byol-converted": (lambda: torchvision_file(root / "byol_resnet18.pth", without(r18, "fc.")), "byol"),
        "simclr-v1-converted": (lambda: simclr_v1(root / "simclr_resnet18-1x.pth", r18), "simclr-v1"),
        "simclr-v2-converted": (lambda: simclr_v2(root / "r50_1x_sk0.pth", resnet_state("resnet50")), None),
        "mae-encoder": (lambda: mae_file(root / "mae_pretrain_vit_nano.pth", vit, full=False), "mae"),
        "mae-full": (lambda: mae_file(root / "mae_checkpoint-799.pth", vit, full=True), None),
        "solo-learn-cifar": (lambda: solo_learn(root / "solo" / "byol-cifar-ep=399.ckpt",
                                                resnet_state(cifar=True)), None),
        "lightly-resnet": (lambda: lightly_resnet(root / "lightly_byol.ckpt", r18), "byol"),
        "lightly-vit": (lambda: lightly_vit(root / "lightly_dino_vit.ckpt", vit), "dino"),
        "timm-resnet-safetensors": (lambda: timm_safetensors(root / "timm_resnet18", r18, "resnet18"),
                                    "supervised"),
        "timm-vit-safetensors": (lambda: timm_safetensors(root / "timm_vit", vit, "vit_nano_patch4"), "dino"),
        "transformers-vit": (lambda: transformers_vit(root / "hf_vit", vit, dinov2=False), "dino"),
        "transformers-dinov2": (lambda: transformers_vit(root / "hf_dinov2", dv2, dinov2=True), None),
        "torchvision-vit": (lambda: torchvision_file(root / "vit_nano_torchvision.pth", to_torchvision_vit(vit)),
                            "supervised"),
    }
    return {name: (make(), named) for name, (make, named) in files.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    args = parser.parse_args()
    for name, (path, named) in write_all(args.root).items():
        print(f"{name}\t{path}\t{named or ''}")


if __name__ == "__main__":
    main()
