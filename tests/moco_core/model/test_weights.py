"""Reading other methods' weights (issue 47): each layout detected from its keys and shapes, the method, encoder and
normalisation it is recorded with, the strict load's one line on a damaged copy, and the features: each layout's
network computes what the original network does (an independent forward of the DINOv2-named tensors written
here), and two layouts of the same tensors compute the same features exactly."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import torchvision

from moco_core import checkpoint
from moco_core.model.backbone import load_backbone
from moco_core.model.weights.detect import read_weights
from tests import weights_layouts as layouts

pytest.importorskip("timm")

# name: (layout recorded, method, who named it, encoder, normalisation, arch)
EXPECTED = {
    "official-moco": ("official-moco", "moco", "file", "query", "imagenet", "resnet18"),
    "supervised-torchvision": ("torchvision", "supervised", "--weights-format", "backbone", "imagenet", "resnet18"),
    "dino-resnet-backbone": ("torchvision", "dino", "--weights-format", "teacher", "imagenet", "resnet18"),
    "dino-resnet-full": ("dino-full", "dino", "file", "teacher", "imagenet", "resnet18"),
    "dino-vit-backbone": ("timm-vit", "dino", "--weights-format", "teacher", "imagenet", "vit_nano_p4"),
    "dino-vit-full": ("dino-full", "dino", "file", "teacher", "imagenet", "vit_nano_p4"),
    "dinov2-hub": ("dinov2-hub", "dinov2", "file", "teacher", "imagenet", "vit_nano_p4"),
    "dinov2-hub-reg4-swiglu": ("dinov2-hub", "dinov2", "file", "teacher", "imagenet", "vit_nano_p4"),
    "dinov2-train-chunked": ("dinov2-train", "dinov2", "file", "teacher", "imagenet", "vit_nano_p4"),
    "swav": ("swav", "swav", "--weights-format", "backbone", "imagenet", "resnet18"),
    "deepcluster-v2": ("swav", "deepcluster-v2", "--weights-format", "backbone", "imagenet", "resnet18"),
    "barlowtwins-hub": ("torchvision", "barlowtwins", "--weights-format", "backbone", "imagenet", "resnet18"),
    "barlowtwins-full": ("barlowtwins-full", "barlowtwins", "file", "backbone", "imagenet", "resnet18"),
    "byol-converted": ("torchvision", "byol", "--weights-format", "online", "imagenet", "resnet18"),
    "simclr-v1-converted": ("torchvision", "simclr-v1", "--weights-format", "backbone", "none", "resnet18"),
    "simclr-v2-converted": ("simclr-v2-converted", "simclr-v2", "file", "backbone", "none", "resnet50"),
    "mae-encoder": ("timm-vit-model", "mae", "--weights-format", "encoder", "imagenet", "vit_nano_p4"),
    "mae-full": ("mae-full", "mae", "file", "encoder", "imagenet", "vit_nano_p4"),
    "solo-learn-cifar": ("solo-learn", "byol", "file", "online", "cifar", "resnet18_cifar"),
    "lightly-resnet": ("lightly", "byol", "--weights-format", "online", "imagenet", "resnet18"),
    "lightly-vit": ("lightly", "dino", "--weights-format", "teacher", "imagenet", "vit_nano_p4"),
    "timm-resnet-safetensors": ("timm-safetensors", "supervised", "--weights-format", "backbone",
                                "timm's pretrained_cfg", "resnet18"),
    "timm-vit-safetensors": ("timm-safetensors", "dino", "--weights-format", "teacher", "timm's pretrained_cfg",
                             "vit_nano_p4"),
    "transformers-vit": ("transformers-vit", "dino", "--weights-format", "teacher", "its preprocessor", "vit_nano_p4"),
    "transformers-dinov2": ("transformers-dinov2", "dinov2", "file", "teacher", "its preprocessor", "vit_nano_p4"),
    "torchvision-vit": ("torchvision-vit", "supervised", "--weights-format", "backbone", "imagenet", "vit_nano_p4"),
}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str | None]]:
    return layouts.write_all(tmp_path_factory.mktemp("layouts"))


def test_every_layout_is_built_and_expected(files: dict) -> None:
    assert set(files) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_layout_is_detected_and_recorded(files: dict, name: str) -> None:
    path, named = files[name]
    if named is not None:  # the file does not say: refused, naming the candidates and the option
        with pytest.raises(checkpoint.CheckpointError, match=rf"could be .*{named}.*--weights-format") as err:
            read_weights(path)
        assert "\n" not in str(err.value)
    model, info = load_backbone(str(path), 5, weights_format=named, crop_size=32)
    layout, method, stated_by, encoder, normalisation, arch = EXPECTED[name]
    assert (info.format, info.pretrain["method"], info.pretrain["stated_by"], info.encoder, info.arch) == (
        layout, method, stated_by, encoder, arch)
    assert info.normalisation["name"] == normalisation and len(info.sha256 or "") == 64
    head = model.head if hasattr(model, "head") else model.fc
    assert head.out_features == 5


@pytest.mark.parametrize(("name", "mean", "std"), [
    ("simclr-v1-converted", (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)),  # converted SimCLR: [0, 1] pixels
    ("solo-learn-cifar", (0.4914, 0.4822, 0.4465), (0.247, 0.243, 0.261)),  # solo-learn's CIFAR pipeline
    ("transformers-vit", (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),  # the preprocessor_config.json beside it
    ("dino-resnet-full", (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
])
def test_the_normalisation_is_the_formats(files: dict, name: str, mean: tuple, std: tuple) -> None:
    path, named = files[name]
    got = read_weights(path, named).normalisation
    assert got.mean == pytest.approx(mean, abs=1e-7) and got.std == pytest.approx(std, abs=1e-7)


def _features(model: torch.nn.Module, images: torch.Tensor) -> torch.Tensor:
    """The pooled features (a ViT's class token after its last norm), classifier bypassed."""
    name = "head" if hasattr(model, "patch_embed") else "fc"
    setattr(model, name, torch.nn.Identity())
    with torch.no_grad():
        return model.eval()(images)


def _images() -> torch.Tensor:
    return torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize("name", ["supervised-torchvision", "dino-resnet-full", "swav", "barlowtwins-full",
                                  "byol-converted", "simclr-v1-converted", "lightly-resnet",
                                  "timm-resnet-safetensors"])
def test_resnet_layouts_compute_the_original_network(files: dict, name: str) -> None:
    reference = torchvision.models.resnet18()
    reference.load_state_dict(layouts.resnet_state())
    path, named = files[name]
    model, _ = load_backbone(str(path), 5, weights_format=named)
    assert torch.equal(_features(model, _images()), _features(reference, _images()))


def test_simclr_v2_and_the_cifar_stem_compute_the_original_network(files: dict) -> None:
    reference = torchvision.models.resnet50()
    reference.load_state_dict(layouts.resnet_state("resnet50"))
    model, _ = load_backbone(str(files["simclr-v2-converted"][0]), 5)
    assert torch.equal(_features(model, _images()), _features(reference, _images()))
    cifar = torchvision.models.resnet18()
    cifar.conv1 = torch.nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    cifar.maxpool = torch.nn.Identity()
    cifar.load_state_dict(layouts.resnet_state(cifar=True))
    model, _ = load_backbone(str(files["solo-learn-cifar"][0]), 5)
    assert torch.equal(_features(model, _images()), _features(cifar, _images()))


def reference_vit(state: dict[str, torch.Tensor], images: torch.Tensor, *, heads: int, eps: float = 1e-6,
                  qkv: str = "packed") -> torch.Tensor:
    """The class token of a ViT computed from DINOv2-named tensors with plain torch ops, as DINOv2's
    ``DinoVisionTransformer`` does: cls token and patches plus the position embedding, then the registers after
    the cls token; pre-norm blocks with layer scale (where present) and a GELU or SwiGLU MLP; the last norm."""
    w = state["cls_token"].shape[-1]
    x = F.conv2d(images, state["patch_embed.proj.weight"], state["patch_embed.proj.bias"],
                 stride=state["patch_embed.proj.weight"].shape[-1]).flatten(2).transpose(1, 2)  # (N, P, w)
    x = torch.cat([state["cls_token"].expand(len(x), -1, -1), x], 1) + state["pos_embed"]
    if "register_tokens" in state:
        x = torch.cat([x[:, :1], state["register_tokens"].expand(len(x), -1, -1), x[:, 1:]], 1)
    depth = 1 + max(int(k.split(".")[1]) for k in state if k.startswith("blocks."))
    for i in range(depth):
        b = f"blocks.{i}."
        y = F.layer_norm(x, (w,), state[b + "norm1.weight"], state[b + "norm1.bias"], eps)
        q, k, v = F.linear(y, state[b + "attn.qkv.weight"], state[b + "attn.qkv.bias"]).chunk(3, dim=-1)
        q, k, v = (t.unflatten(-1, (heads, w // heads)).transpose(1, 2) for t in (q, k, v))  # (N, h, T, d)
        attn = (q @ k.transpose(-2, -1) / math.sqrt(w // heads)).softmax(-1)
        y = F.linear((attn @ v).transpose(1, 2).flatten(2), state[b + "attn.proj.weight"], state[b + "attn.proj.bias"])
        x = x + y * state.get(b + "ls1.gamma", torch.ones(w))
        y = F.layer_norm(x, (w,), state[b + "norm2.weight"], state[b + "norm2.bias"], eps)
        if b + "mlp.w12.weight" in state:
            a, g = F.linear(y, state[b + "mlp.w12.weight"], state[b + "mlp.w12.bias"]).chunk(2, dim=-1)
            y = F.linear(F.silu(a) * g, state[b + "mlp.w3.weight"], state[b + "mlp.w3.bias"])
        else:
            y = F.linear(F.gelu(F.linear(y, state[b + "mlp.fc1.weight"], state[b + "mlp.fc1.bias"])),
                         state[b + "mlp.fc2.weight"], state[b + "mlp.fc2.bias"])
        x = x + y * state.get(b + "ls2.gamma", torch.ones(w))
    return F.layer_norm(x, (w,), state["norm.weight"], state["norm.bias"], eps)[:, 0]


@pytest.mark.parametrize(("name", "state"), [
    ("dinov2-hub", lambda: layouts.dinov2_state()),
    ("dinov2-hub-reg4-swiglu", lambda: layouts.dinov2_state(1, registers=4, swiglu=True)),
    ("dino-vit-full", lambda: layouts.timm_vit_state()),
    ("mae-full", lambda: layouts.timm_vit_state()),
])
def test_vit_layouts_compute_the_reference_forward(files: dict, name: str, state: object) -> None:
    path, named = files[name]
    model, _ = load_backbone(str(path), 5, weights_format=named)
    expected = reference_vit(state(), _images(), heads=layouts.VIT["heads"])  # type: ignore[operator]
    assert torch.allclose(_features(model, _images()), expected, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(("first", "second"), [
    ("timm-vit-safetensors", "dino-vit-backbone"),  # the example: one network in two formats
    ("dino-vit-full", "dino-vit-backbone"),  # the teacher of a full checkpoint is the backbone-only file
    ("transformers-vit", "torchvision-vit"),  # q, k, v split; in_proj packed
    ("mae-encoder", "lightly-vit"),
    ("dinov2-hub", "dinov2-train-chunked"),  # blocks.C.N
    ("dinov2-hub", "transformers-dinov2"),
    ("barlowtwins-full", "barlowtwins-hub"),
    ("lightly-resnet", "timm-resnet-safetensors"),
])
def test_two_formats_of_one_network_give_identical_features(files: dict, first: str, second: str) -> None:
    # transformers' ViT has LayerNorm eps 1e-12 and torchvision's 1e-6: each as its library builds it
    eps_differ = {first, second} == {"transformers-vit", "torchvision-vit"}
    features = []
    for name in (first, second):
        path, named = files[name]
        model, _ = load_backbone(str(path), 5, weights_format=named)
        features.append(_features(model, _images()))
    if eps_differ:
        assert torch.allclose(features[0], features[1], atol=1e-5)
    else:
        assert torch.equal(features[0], features[1])


# A tensor of the backbone in each layout's names: the one a damaged copy truncates
_DAMAGE = re.compile(r"(.*layer3\.0\.conv1|.*blocks\.(\d+\.)?2\.attn\.proj"
                     r"|.*encoder\.layer\.2\.attention\.output\.dense"
                     r"|encoder\.layers\.encoder_layer_2\.self_attention\.out_proj|net\.3\.blocks\.0\.net\.0"
                     r"|backbone\.6\.0\.conv1)\.weight")


def _damage(obj: dict) -> bool:
    """Truncate the first backbone tensor :data:`_DAMAGE` names, in the teacher where there are several
    networks; whether one was found."""
    for key in sorted(obj, key=lambda k: k != "teacher"):
        value = obj[key]
        if isinstance(value, dict) and _damage(value):
            return True
        if isinstance(key, str) and _DAMAGE.fullmatch(key) and isinstance(value, torch.Tensor):
            obj[key] = value[:, :4].clone()
            return True
    return False


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_damaged_copy_names_what_differs_in_one_line(files: dict, name: str, tmp_path: Path) -> None:
    """A tensor of the wrong shape (a truncated export, another width): the strict load names it with the
    model's shape, and the keys missing and unexpected, in one line."""
    from moco_core.model.weights.files import read_file

    path, named = files[name]
    content = read_file(path)
    if content.kind == "safetensors":
        from safetensors.torch import save_file

        state = dict(content.obj)
        assert _damage(state)
        target = tmp_path / "broken" / "model.safetensors"
        target.parent.mkdir()
        for beside in ("config.json", "preprocessor_config.json"):
            if (path.parent / beside).is_file():
                (target.parent / beside).write_text((path.parent / beside).read_text())
        save_file(state, str(target))
    elif name == "barlowtwins-full":  # its optimizer names a function of Barlow Twins' main: rebuilt, not reloaded
        state = layouts.resnet_state()
        state["layer3.0.conv1.weight"] = state["layer3.0.conv1.weight"][:, :4].clone()
        target = layouts.barlow_full(tmp_path / path.name, state)
    else:
        raw = torch.load(path, weights_only=False)  # our own fixture, written above
        assert _damage(raw), name
        target = tmp_path / path.parent.name / path.name
        target.parent.mkdir()
        if (path.parent / "args.json").is_file():
            (target.parent / "args.json").write_text((path.parent / "args.json").read_text())
        torch.save(raw, target)
    with pytest.raises(checkpoint.CheckpointError, match=r"not a complete .* shapes differ: ") as err:
        load_backbone(str(target), 5, weights_format=named)
    assert "\n" not in str(err.value) and "in the checkpoint" in str(err.value)


def test_full_training_checkpoints_read_their_tensors_without_running_code(files: dict, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """DINO's and MAE's full checkpoints pickle an argparse.Namespace, Barlow Twins' the function its optimizer
    filters with: those names only are read as an inert stand-in. A file of the same layout whose args hold a
    payload is refused, and the payload never runs."""
    import argparse

    for name in ("dino-vit-full", "mae-full", "barlowtwins-full"):
        read_weights(files[name][0])  # no error: the stand-ins
    marker = tmp_path / "payload-ran"
    monkeypatch.setenv("MOCO_TEST_MARKER", str(marker))
    raw = torch.load(files["dino-vit-full"][0], weights_only=False)
    raw["args"] = argparse.Namespace(arch="vit_small", hook=_Payload())
    evil = tmp_path / "evil_full_checkpoint.pth"
    torch.save(raw, evil)
    with pytest.raises(checkpoint.CheckpointError, match=r"refused, loading it would call posix\.mkdir"):
        read_weights(evil)
    assert not marker.exists()


class _Payload:
    def __reduce__(self) -> tuple:
        return (os.mkdir, (os.environ["MOCO_TEST_MARKER"],))


def test_an_imitation_of_each_layout_with_a_payload_is_refused(files: dict, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "payload-ran"
    monkeypatch.setenv("MOCO_TEST_MARKER", str(marker))
    for name in ("swav", "simclr-v2-converted", "solo-learn-cifar", "dinov2-hub"):
        raw = torch.load(files[name][0], weights_only=False)
        raw["__evil__"] = _Payload()
        evil = tmp_path / f"{name}.pth"
        torch.save(raw, evil)
        with pytest.raises(checkpoint.CheckpointError, match="refused"):
            read_weights(evil, files[name][1])
    assert not marker.exists()


def test_ambiguous_layouts_name_their_candidates(files: dict) -> None:
    with pytest.raises(checkpoint.CheckpointError, match=r"SwAV-codebase checkpoint \(3 prototype sets\) does not "
                                                         r"say .* could be swav, deepcluster-v2, sela-v2"):
        read_weights(files["deepcluster-v2"][0])
    with pytest.raises(checkpoint.CheckpointError, match=r"that layout is written for swav, deepcluster-v2, sela-v2 "
                                                         r"only"):
        read_weights(files["swav"][0], "dino")
    with pytest.raises(checkpoint.CheckpointError, match=r"timm ViT state dict does not say .* could be supervised, "
                                                         r"mocov3, dino, dinov2, mae"):
        read_weights(files["dino-vit-backbone"][0])


def test_a_dinov2_vit_takes_crops_of_any_whole_number_of_patches(files: dict) -> None:
    """DINOv2's position embedding is resampled to the grid evaluated (timm's dynamic_img_size): 24-px crops of a
    32-px trained grid run; a crop that is no whole number of patches is refused with the option that fixes it."""
    model, _ = load_backbone(str(files["dinov2-hub"][0]), 5, crop_size=24)
    assert _features(model, torch.randn(1, 3, 24, 24)).shape == (1, layouts.VIT["width"])
    with pytest.raises(checkpoint.UserError, match=r"whole number of 4-px patches, not 30; evaluate it with "
                                                   r"--crop-size 32"):
        load_backbone(str(files["dinov2-hub"][0]), 5, crop_size=30)
    with pytest.raises(checkpoint.UserError, match=r"takes 32-px crops, not 24"):
        load_backbone(str(files["dino-vit-full"][0]), 5, crop_size=24)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_layouts_report_row_is_labelled_by_its_method(files: dict, name: str) -> None:
    """The record's backbone section as an evaluation writes it, read by moco report: the row carries the method
    the file stated or the user named, never "supervised" for a method that is not."""
    import dataclasses

    from reports.pretraining import METHOD_NAMES
    from reports.records import _pretraining

    path, named = files[name]
    _, info = load_backbone(str(path), 5, weights_format=named)
    row = _pretraining(json.loads(json.dumps(dataclasses.asdict(info), default=str)))
    method = EXPECTED[name][1]
    assert row.method == method and row.label.startswith(METHOD_NAMES[method])
    assert row.is_supervised == (method == "supervised")
    assert ("method named by --weights-format" in row.label) == (named is not None and row.kind == "released")


# name: the reader of moco_core.model.weights.readers.READERS that claims the file ("plain": the fallback's)
READER = {**{name: "plain" for name in ("supervised-torchvision", "dino-resnet-backbone", "dino-vit-backbone",
                                        "barlowtwins-hub", "byol-converted", "simclr-v1-converted",
                                        "torchvision-vit")},
          "official-moco": "moco", "dino-resnet-full": "dino", "dino-vit-full": "dino", "dinov2-hub": "dinov2",
          "dinov2-hub-reg4-swiglu": "dinov2", "dinov2-train-chunked": "dinov2", "swav": "swav",
          "deepcluster-v2": "swav", "barlowtwins-full": "barlow", "simclr-v2-converted": "simclr",
          "mae-encoder": "mae", "mae-full": "mae", "solo-learn-cifar": "lightning", "lightly-resnet": "lightning",
          "lightly-vit": "lightning", **{name: "hub" for name in ("timm-resnet-safetensors", "timm-vit-safetensors",
                                                                  "transformers-vit", "transformers-dinov2")}}


def test_each_layout_is_claimed_by_exactly_one_reader_of_the_table(files: dict) -> None:
    """Every reader of the table is asked about every layout: exactly one method's reader claims each file, or
    none does and the fallback (a library's plain names) does; each row of the table claims some layout."""
    from moco_core.model.weights import files as weights_files
    from moco_core.model.weights.detect import claims, resolve_path
    from moco_core.model.weights.readers import READERS

    assert set(READER) == set(EXPECTED)
    for name, (path, _) in files.items():
        content = weights_files.read_file(resolve_path(path))
        methods = [r.module for r in READERS if r.kind == content.kind and not r.fallback and r.read(content)]
        assert len(methods) <= 1, (name, methods)
        assert [r.module for r, _ in claims(content)] == [READER[name]], name
    assert {r.module for r in READERS} == set(READER.values())


def test_an_unknown_file_is_refused_naming_every_family_of_the_table(tmp_path: Path) -> None:
    """The refusal is written from the table: each row's files are named, in its order, on one line."""
    from moco_core.model.weights.readers import READERS

    path = tmp_path / "other.pth"
    torch.save({"model_ema": {"w": torch.zeros(1)}, "epoch": 3}, path)
    with pytest.raises(checkpoint.CheckpointError, match="not a weights file of a layout read here") as err:
        read_weights(path)
    message = str(err.value)
    assert "\n" not in message
    positions = [message.index(r.files) for r in READERS]
    assert positions == sorted(positions)
