"""Checkpoint format: the official layout both ways, weights_only loading, atomic writes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torchvision

from moco_core import checkpoint
from moco_core.model.methods import MocoMethod, build_moco
from moco_core.pretrain_config import ModelConfig
from moco_core.run.train import checkpoint_dict


def official_lincls_load(path: Path, arch: str) -> set[str]:
    """What facebookresearch/moco main_lincls.py does with --pretrained, restated: keep the
    module.encoder_q.* weights except fc, strip the prefix, load non-strictly into a fresh torchvision model,
    and require that exactly fc.weight and fc.bias are missing."""
    state = torch.load(path, map_location="cpu")["state_dict"]
    prefix = "module.encoder_q."
    backbone = {k[len(prefix):]: v for k, v in state.items()
                if k.startswith(prefix) and not k.startswith(prefix + "fc")}
    model = getattr(torchvision.models, arch)()
    result = model.load_state_dict(backbone, strict=False)
    assert not result.unexpected_keys
    return set(result.missing_keys)


def official_detectron2_names(path: Path) -> dict[str, tuple[int, ...]]:
    """The renaming of facebookresearch/moco detection/convert-pretrain-to-detectron2.py, restated."""
    state = torch.load(path, map_location="cpu")["state_dict"]
    out = {}
    for key, value in state.items():
        if not key.startswith("module.encoder_q."):
            continue
        name = key.replace("module.encoder_q.", "")
        if "layer" not in name:
            name = "stem." + name
        for i in range(1, 5):
            name = name.replace(f"layer{i}", f"res{i + 1}")
        for i in range(1, 4):
            name = name.replace(f"bn{i}", f"conv{i}.norm")
        name = name.replace("downsample.0", "shortcut").replace("downsample.1", "shortcut.norm")
        out[name] = tuple(value.numpy().shape)
    return out


@pytest.fixture(params=[False, True], ids=["v1", "v2"])
def saved(request: pytest.FixtureRequest, tmp_path: Path, make_config) -> Path:  # noqa: ANN001
    cfg = make_config(tmp_path, tmp_path, model={"mlp": request.param})
    method = MocoMethod(cfg.model, world_size=1, num_classes=0, dataset_size=0)
    opt = torch.optim.SGD(method.module.parameters(), lr=0.1, momentum=0.9)
    path = tmp_path / "ckpt.pth.tar"
    checkpoint.save_atomic(checkpoint_dict(cfg, method, opt, epoch=3, step=30), path)
    return path


def test_official_layout_and_weights_only(saved: Path) -> None:
    ckpt = torch.load(saved, map_location="cpu", weights_only=True)
    assert {"epoch", "arch", "state_dict", "optimizer"} <= set(ckpt)
    assert ckpt["epoch"] == 3 and ckpt["arch"] == "resnet18"
    keys = list(ckpt["state_dict"])
    # nn.Module.state_dict lists a module's own buffers before its children: the official order too.
    assert keys[:3] == ["module.queue", "module.queue_ptr", "module.encoder_q.conv1.weight"]
    assert {k.split(".")[1] for k in keys if k.startswith("module.encoder")} == {"encoder_q", "encoder_k"}
    q = [k.replace("encoder_q", "X") for k in keys if "encoder_q" in k]
    assert q == [k.replace("encoder_k", "X") for k in keys if "encoder_k" in k]
    assert ckpt["state_dict"]["module.queue"].shape == (128, 40)
    assert ckpt["state_dict"]["module.queue_ptr"].dtype == torch.long
    assert ckpt["queue_ptr"] == 0 and ckpt["global_step"] == 30 and ckpt["config"]["model"]["queue_size"] == 40


def test_official_main_lincls_accepts_our_checkpoint(saved: Path) -> None:
    assert official_lincls_load(saved, "resnet18") == {"fc.weight", "fc.bias"}


def test_official_detectron2_conversion_names(saved: Path) -> None:
    names = official_detectron2_names(saved)
    assert names["stem.conv1.weight"] == (64, 3, 7, 7)
    assert names["stem.conv1.norm.weight"] == (64,)
    assert names["res2.0.conv1.weight"] == (64, 64, 3, 3)
    assert names["res3.0.shortcut.weight"] == (128, 64, 1, 1)
    assert names["res5.1.conv2.norm.running_var"] == (512,)


def test_round_trip_through_official_names() -> None:
    moco = build_moco(ModelConfig(arch="resnet18", queue_size=16, bn_groups=2), world_size=1)
    state = moco.state_dict()
    official = checkpoint.to_official(state)
    assert list(checkpoint.from_official(official)) == list(state)
    # A single-GPU official save has no "module." prefix; it is read too.
    bare = {k[len("module."):]: v for k, v in official.items()}
    assert list(checkpoint.from_official(bare)) == list(state)
    with pytest.raises(checkpoint.CheckpointError, match="not a MoCo pretraining checkpoint"):
        checkpoint.from_official({"conv1.weight": torch.zeros(1)})


class _Payload:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.mkdir, (self.marker,))  # would run at unpickling time


def test_pickles_carrying_code_are_refused_without_running(tmp_path: Path) -> None:
    marker = tmp_path / "code-ran"
    evil = tmp_path / "evil.pth.tar"
    torch.save({"state_dict": {}, "payload": _Payload(str(marker))}, evil)
    with pytest.raises(checkpoint.CheckpointError, match="refused"):
        checkpoint.load(evil)
    assert not marker.exists()


@pytest.mark.parametrize(("number", "says"), [
    (10 ** 700, "refused, it holds an integer of over 600 digits (pickle's LONG4)"),  # LONG4: torch's "operand 139"
    (2 ** (8 * 255 - 1) - 1, None),  # the largest LONG1 (255 bytes, 614 digits): read
], ids=["LONG4", "largest-LONG1"])
def test_integers_past_the_safe_loaders_reach_are_refused_saying_so(number: int, says: str | None,
                                                                   tmp_path: Path) -> None:
    path = tmp_path / "big.pth.tar"
    torch.save({"state_dict": {}, "epoch": number}, path)
    if says is None:
        assert checkpoint.load(path)["epoch"] == number
        return
    with pytest.raises(checkpoint.CheckpointError) as err:
        checkpoint.load(path)
    message = str(err.value)
    assert message.startswith(f"{path}: {says}") and "cannot name" not in message and "\n" not in message, message


def test_truncated_and_missing_files(tmp_path: Path, saved: Path) -> None:
    data = saved.read_bytes()
    cut = tmp_path / "cut.pth.tar"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(checkpoint.CheckpointError, match="truncated or corrupt") as err:
        checkpoint.load(cut)
    assert "\n" not in str(err.value)
    with pytest.raises(checkpoint.CheckpointError, match="not found"):
        checkpoint.load(tmp_path / "nope.pth.tar")


@pytest.mark.parametrize(("content", "says"), [
    (b"version https://git-lfs.github.com/spec/v1\noid sha256:4d7a21\nsize 138176813\n",
     "it is a git-LFS pointer, the file itself was never fetched: run git lfs pull"),
    (b"<!DOCTYPE html>\n<html><body>Sign in</body></html>\n", "it is an HTML page"),
    (b"  \n<HTML>\n", "it is an HTML page"),
    (b"hello world\nsecond line\n", "it is a text file (it starts with 'hello world second line')"),
    (b"", "the file is empty"),
])
def test_files_that_are_plainly_not_checkpoints_are_named_for_what_they_are(tmp_path: Path, content: bytes,
                                                                           says: str) -> None:
    """Not a security alarm (at 5671961 "hello world" ended in a KeyError traceback from the unpickler)."""
    path = tmp_path / "model.pth.tar"
    path.write_bytes(content)
    with pytest.raises(checkpoint.CheckpointError) as caught:
        checkpoint.load(path)
    assert str(caught.value) == f"{path}: not a checkpoint: {says}" or says in str(caught.value)
    assert "refused" not in str(caught.value) and "\n" not in str(caught.value)


def test_binary_junk_is_a_one_line_error(tmp_path: Path) -> None:
    rng = torch.Generator().manual_seed(0)
    for trial in range(20):
        path = tmp_path / f"junk{trial}.pth"
        junk = torch.randint(0, 256, (int(torch.randint(1, 400, (1,), generator=rng)),), generator=rng)
        path.write_bytes(bytes([0x80, *junk.to(torch.uint8).tolist()]))  # looks like a pickle: the loader decides
        with pytest.raises(checkpoint.CheckpointError):
            checkpoint.load(path)


def test_atomic_save_keeps_previous_file_on_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.pth.tar"
    checkpoint.save_atomic({"epoch": 1, "w": torch.ones(3)}, path)

    def fail(obj: object, f: object) -> None:
        f.write(b"partial")  # type: ignore[attr-defined]
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", fail)
    with pytest.raises(checkpoint.CheckpointError,
                       match=r"cannot write checkpoint .*c.pth.tar: No space left on device; the previous checkpoint "
                             r"is intact$"):
        checkpoint.save_atomic({"epoch": 2}, path)
    with pytest.raises(checkpoint.CheckpointError, match="No space left on device; no checkpoint was written"):
        checkpoint.save_atomic({"epoch": 2}, tmp_path / "new.pth.tar")
    monkeypatch.undo()
    assert checkpoint.load(path)["epoch"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["c.pth.tar"]  # no temporary file left behind
    assert oct(path.stat().st_mode & 0o777) != oct(0o600)


def test_rng_state_round_trip() -> None:
    import random

    import numpy as np

    state = checkpoint.rng_state()
    a = (torch.rand(3), random.random(), np.random.rand())
    checkpoint.set_rng_state(state)
    b = (torch.rand(3), random.random(), np.random.rand())
    assert torch.equal(a[0], b[0]) and a[1] == b[1] and a[2] == b[2]


def test_state_mismatch_names_shapes_missing_and_unexpected_keys() -> None:
    expected = {"a.weight": torch.zeros(4, 3), "a.bias": torch.zeros(4), "b.weight": torch.zeros(2)}
    given = {"a.weight": torch.zeros(5, 3), "a.bias": torch.zeros(4), "c.weight": torch.zeros(1)}
    assert checkpoint.state_mismatch(expected, given) == (
        "1 shapes differ: a.weight [5, 3] in the checkpoint, [4, 3] here; 1 of the model's 3 keys are not in the "
        "checkpoint: b.weight; 1 keys of the checkpoint are not in the model: c.weight")
    assert checkpoint.state_mismatch(expected, dict(expected)) is None
    many = {f"k{i}": torch.zeros(1) for i in range(10)}
    assert checkpoint.state_mismatch(many, {}) == ("10 of the model's 10 keys are not in the checkpoint: k0, k1, k2 "
                                                   "and 7 more")


@pytest.mark.parametrize(("saved", "asked", "says"), [
    ({"arch": "resnet34"}, {"arch": "resnet18"}, "it holds resnet34, the config asks for resnet18"),
    ({"arch": "resnet18", "dim": 64}, {"arch": "resnet18"}, "shapes differ: queue [64, 16] in the checkpoint, "
                                                            "[128, 16] here"),
])
def test_resuming_against_another_model_names_the_arch_and_keys(saved: dict, asked: dict, says: str,
                                                               tmp_path: Path) -> None:
    from moco_core.run.train import restore

    def method(**model: object) -> MocoMethod:
        return MocoMethod(ModelConfig(queue_size=16, **model), world_size=1, num_classes=0, dataset_size=0)

    writer = method(**saved)
    path = tmp_path / "checkpoint_last.pth.tar"
    torch.save({"epoch": 1, "arch": saved["arch"], "state_dict": writer.state_dict()}, path)  # official layout
    reader = method(**asked)
    optimizer = torch.optim.SGD(reader.module.parameters(), lr=0.1)
    with pytest.raises(checkpoint.CheckpointError) as err:
        restore(path, reader, optimizer, 10, asked["arch"])
    message = str(err.value)
    assert says in message and "\n" not in message and "Error(s) in loading" not in message, message
    assert message.startswith(f"{path}: does not match the configured model (")
