"""Backbone -> detectron2 conversion: the name mapping, the round trip, the .pkl and its restricted reader, the CLI."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from typer.testing import CliRunner

from cli import app
from moco_core import checkpoint
from moco_core.checkpoint import CheckpointError
from transfer.convert import convert_file, from_detectron2, load_detectron2_pkl, to_detectron2

runner = CliRunner()

# torchvision name -> detectron2 name, written out by hand from the official convert script's rules.
COMMON = {
    "conv1.weight": "stem.conv1.weight",
    "bn1.weight": "stem.conv1.norm.weight",
    "bn1.bias": "stem.conv1.norm.bias",
    "bn1.running_mean": "stem.conv1.norm.running_mean",
    "bn1.running_var": "stem.conv1.norm.running_var",
    "bn1.num_batches_tracked": "stem.conv1.norm.num_batches_tracked",
    "layer1.0.conv1.weight": "res2.0.conv1.weight",
    "layer1.0.bn1.weight": "res2.0.conv1.norm.weight",
    "layer1.1.conv2.weight": "res2.1.conv2.weight",
    "layer1.1.bn2.running_var": "res2.1.conv2.norm.running_var",
    "layer2.0.downsample.0.weight": "res3.0.shortcut.weight",
    "layer2.0.downsample.1.weight": "res3.0.shortcut.norm.weight",
    "layer2.0.downsample.1.running_mean": "res3.0.shortcut.norm.running_mean",
    "layer3.1.bn1.bias": "res4.1.conv1.norm.bias",
    "layer4.0.conv1.weight": "res5.0.conv1.weight",
    "layer4.0.downsample.0.weight": "res5.0.shortcut.weight",
    "layer4.0.downsample.1.bias": "res5.0.shortcut.norm.bias",
    "layer4.1.bn2.weight": "res5.1.conv2.norm.weight",
}
BOTTLENECK = {  # resnet50 only: conv3/bn3, a downsample in layer1, more blocks
    "layer1.0.conv3.weight": "res2.0.conv3.weight",
    "layer1.0.bn3.weight": "res2.0.conv3.norm.weight",
    "layer1.0.bn3.num_batches_tracked": "res2.0.conv3.norm.num_batches_tracked",
    "layer1.0.downsample.0.weight": "res2.0.shortcut.weight",
    "layer1.0.downsample.1.running_var": "res2.0.shortcut.norm.running_var",
    "layer3.5.conv2.weight": "res4.5.conv2.weight",
    "layer3.5.bn3.running_mean": "res4.5.conv3.norm.running_mean",
    "layer4.2.conv3.weight": "res5.2.conv3.weight",
    "layer4.2.bn3.bias": "res5.2.conv3.norm.bias",
}
TABLES = {"resnet18": COMMON, "resnet50": {**COMMON, **BOTTLENECK}}
COUNTS = {"resnet18": 120, "resnet50": 318}  # state_dict entries without fc.weight and fc.bias


@pytest.fixture(scope="module", params=["resnet18", "resnet50"])
def arch_state(request: pytest.FixtureRequest) -> tuple[str, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    return request.param, getattr(torchvision.models, request.param)().state_dict()


def test_mapping_matches_the_hand_written_table(arch_state: tuple[str, dict]) -> None:
    arch, state = arch_state
    converted = to_detectron2(state)
    assert len(converted) == COUNTS[arch]
    assert not any("fc" in k for k in converted)
    for ours, theirs in TABLES[arch].items():
        assert theirs in converted, ours
        assert isinstance(converted[theirs], np.ndarray)
        np.testing.assert_array_equal(converted[theirs], state[ours].numpy())
    # every name is stem.* or res2..5.*, with no torchvision word left over
    assert all(k.split(".")[0] in ("stem", "res2", "res3", "res4", "res5") for k in converted)
    assert not any(word in k for k in converted for word in ("layer", "bn", "downsample"))


def test_round_trip_gives_the_original_back(arch_state: tuple[str, dict]) -> None:
    _, state = arch_state
    back = from_detectron2(to_detectron2(state))
    expected = {k: v for k, v in state.items() if not k.startswith("fc.")}
    assert list(back) == list(expected)
    for key, value in expected.items():
        assert back[key].dtype == value.dtype and torch.equal(back[key], value), key


def test_foreign_keys_are_rejected() -> None:
    with pytest.raises(CheckpointError, match="unexpected backbone key 'head.weight'"):
        to_detectron2({"head.weight": torch.zeros(1)})
    with pytest.raises(CheckpointError, match="unexpected detectron2 key 'roi_heads.box_predictor.weight'"):
        from_detectron2({"roi_heads.box_predictor.weight": np.zeros(1)})


@pytest.fixture(scope="module")
def moco_ckpt(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, torch.Tensor]]:
    """An official-layout MoCo checkpoint of a resnet18 (encoder_q with an MLP head, encoder_k, queue)."""
    torch.manual_seed(1)
    encoder = torchvision.models.resnet18()
    encoder.fc = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 128))
    state = {f"module.encoder_q.{k}": v for k, v in encoder.state_dict().items()}
    state |= {f"module.encoder_k.{k}": v.clone() for k, v in encoder.state_dict().items()}
    state |= {"module.queue": torch.randn(128, 16), "module.queue_ptr": torch.zeros(1, dtype=torch.long)}
    path = tmp_path_factory.mktemp("ckpt") / "checkpoint_0199.pth.tar"
    torch.save({"epoch": 200, "arch": "resnet18", "state_dict": state, "optimizer": {}}, path)
    backbone = {k: v for k, v in encoder.state_dict().items() if not k.startswith("fc.")}
    return path, backbone


def test_convert_file_writes_a_pkl_both_readers_accept(moco_ckpt: tuple[Path, dict], tmp_path: Path) -> None:
    src, backbone = moco_ckpt
    dst = tmp_path / "out" / "moco_r18.pkl"
    dst.parent.mkdir()
    summary = convert_file(src, dst)
    assert summary["arch"] == "resnet18" and summary["format"] == "official-moco"
    assert summary["tensors"] == 120 and len(summary["sha256"]) == 64
    assert [p.name for p in dst.parent.iterdir()] == ["moco_r18.pkl"]  # no temporary file left behind
    safe = load_detectron2_pkl(dst)
    with dst.open("rb") as f:
        plain = pickle.load(f, encoding="latin1")  # what detectron2's checkpointer does
    for obj in (safe, plain):
        assert obj["__author__"] == "moco" and obj["matching_heuristics"] is True
        assert set(obj["model"]) == set(to_detectron2(backbone))
        np.testing.assert_array_equal(obj["model"]["res5.1.conv2.norm.running_var"],
                                      backbone["layer4.1.bn2.running_var"].numpy())
    back = from_detectron2(safe["model"])
    assert all(torch.equal(back[k], v) for k, v in backbone.items())


def test_restricted_reader_accepts_old_protocol_and_numpy_scalars(tmp_path: Path) -> None:
    path = tmp_path / "old.pkl"
    model = {"stem.conv1.weight": np.ones((2, 3), np.float32), "res2.0.conv1.norm.num_batches_tracked": np.int64(7)}
    with path.open("wb") as f:
        pickle.dump({"model": model, "__author__": "old"}, f, protocol=2)
    loaded = load_detectron2_pkl(path)["model"]
    np.testing.assert_array_equal(loaded["stem.conv1.weight"], model["stem.conv1.weight"])
    assert loaded["res2.0.conv1.norm.num_batches_tracked"] == 7


class _Payload:
    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {os.environ['MOCO_TEST_MARKER']}",))


class _OpenPayload:
    def __reduce__(self) -> tuple:
        return (open, (os.environ["MOCO_TEST_MARKER"], "w"))


@pytest.mark.parametrize(("payload", "refused"), [(_Payload, "posix.system"), (_OpenPayload, "io.open")])
def test_malicious_pickle_is_refused_and_never_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    payload: type, refused: str) -> None:
    marker = tmp_path / "payload-ran"
    monkeypatch.setenv("MOCO_TEST_MARKER", str(marker))
    evil = tmp_path / "evil.pkl"
    with evil.open("wb") as f:
        pickle.dump({"model": {"stem.conv1.weight": payload()}}, f, protocol=4)
    with pytest.raises(CheckpointError) as info:
        load_detectron2_pkl(evil)
    message = str(info.value)
    assert f"refused global {refused}" in message and "\n" not in message
    assert not marker.exists()


def test_reader_errors_are_one_line(tmp_path: Path) -> None:
    truncated = tmp_path / "cut.pkl"
    truncated.write_bytes(pickle.dumps({"model": {"a": np.zeros(9)}}, protocol=4)[:40])
    not_model = tmp_path / "list.pkl"
    not_model.write_bytes(pickle.dumps([1, 2], protocol=4))
    for path, match in [(truncated, "not a readable pickle"), (not_model, "expected a dict with a 'model' dict"),
                        (tmp_path / "absent.pkl", "not found")]:
        with pytest.raises(CheckpointError, match=match) as info:
            load_detectron2_pkl(path)
        assert "\n" not in str(info.value)


def test_cli_converts_a_checkpoint(moco_ckpt: tuple[Path, dict], tmp_path: Path) -> None:
    src, backbone = moco_ckpt
    dst = tmp_path / "r18.pkl"
    result = CliRunner().invoke(app, ["convert", str(src), str(dst)])
    assert result.exit_code == 0, result.output
    assert "arch: resnet18" in result.output and "tensors: 120" in result.output
    assert set(load_detectron2_pkl(dst)["model"]) == set(to_detectron2(backbone))


def test_cli_never_writes_over_the_source_and_asks_before_replacing(moco_ckpt: tuple[Path, dict],
                                                                     tmp_path: Path) -> None:
    """``moco convert SRC SRC`` replaced the pretraining checkpoint with the backbone file and exited 0 (issue
    #16); an existing destination was overwritten silently. Now both are one-line errors; --force replaces a
    destination, never the source."""
    src, backbone = moco_ckpt
    copy = tmp_path / "checkpoint.pth.tar"
    copy.write_bytes(src.read_bytes())
    before = copy.read_bytes()
    for args in (["convert", str(copy), str(copy)], ["convert", str(copy), str(copy), "--force"],
                 ["convert", str(copy), str(tmp_path / "." / copy.name), "--force"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2, result.output
        assert result.output.strip() == f"error: {args[2]}: is the checkpoint being converted; write the backbone " \
                                        "somewhere else"
    assert copy.read_bytes() == before
    dst = tmp_path / "r18.pkl"
    dst.write_bytes(b"someone's earlier file")
    result = CliRunner().invoke(app, ["convert", str(copy), str(dst)])
    assert result.exit_code == 2
    assert result.output.strip() == f"error: {dst}: already exists; pass --force to replace it, or choose another name"
    assert dst.read_bytes() == b"someone's earlier file"
    result = CliRunner().invoke(app, ["convert", str(copy), str(dst), "--force"])
    assert result.exit_code == 0, result.output
    assert set(load_detectron2_pkl(dst)["model"]) == set(to_detectron2(backbone))


def test_cli_bad_input_is_one_line_and_exit_code_2(tmp_path: Path) -> None:
    bad = tmp_path / "model_final.pth"
    checkpoint.save_atomic({"model": {"x": torch.zeros(1)}, "__author__": "x"}, bad)
    res = subprocess.run([sys.executable, "-m", "cli", "convert", str(bad), str(tmp_path / "out.pkl")],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "a detectron2 model?" in lines[0]
    assert not (tmp_path / "out.pkl").exists()


def test_a_folder_destination_gets_a_file_named_after_the_source(moco_ckpt: tuple[Path, dict],
                                                                 tmp_path: Path) -> None:
    src, _ = moco_ckpt
    (tmp_path / "out").mkdir()
    for given in (tmp_path / "out", f"{tmp_path / 'out'}/"):
        summary = convert_file(src, given, overwrite=True)
        assert summary["destination"] == str(tmp_path / "out" / "checkpoint_0199.pkl")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["checkpoint_0199.pkl"]


@pytest.mark.parametrize("dst", ["newdir/", "missing/parent/a.pkl"])
def test_a_destination_in_a_folder_that_does_not_exist_is_refused(moco_ckpt: tuple[Path, dict], tmp_path: Path,
                                                                 dst: str) -> None:
    src, _ = moco_ckpt
    res = runner.invoke(app, ["convert", str(src), f"{tmp_path}/{dst}"])  # a Path would drop the slash
    assert res.exit_code == 2 and "no such folder" in res.output, res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing made: not a file named newdir, no folder


def test_to_torchvision_loads_into_torchvision_missing_exactly_fc(moco_ckpt: tuple[Path, dict],
                                                                  tmp_path: Path) -> None:
    src, backbone = moco_ckpt
    res = runner.invoke(app, ["convert", str(src), str(tmp_path), "--to", "torchvision"])
    assert res.exit_code == 0, res.output
    # the method is lost in a .pth (issue 57: it was then refused as "could be supervised, dino, ..."): said, with
    # the option that names it back
    assert "note: a state_dict file keeps the weights, not their method (moco): read it back with " \
        "--weights-format moco" in res.output
    state = torch.load(tmp_path / "checkpoint_0199.pth", weights_only=True)
    result = torchvision.models.resnet18().load_state_dict(state, strict=False)
    assert sorted(result.missing_keys) == ["fc.bias", "fc.weight"] and not result.unexpected_keys
    assert all(torch.equal(state[k], v) for k, v in backbone.items()) and set(state) == set(backbone)
    bad = runner.invoke(app, ["convert", str(src), str(tmp_path), "--to", "onnx"])
    assert bad.exit_code == 2 and "--to: expected one of detectron2, torchvision" in bad.output


def test_weights_holding_nan_are_refused(moco_ckpt: tuple[Path, dict], tmp_path: Path) -> None:
    src, _ = moco_ckpt
    ckpt = torch.load(src, weights_only=True)
    ckpt["state_dict"]["module.encoder_q.layer2.0.bn1.weight"][0] = float("nan")
    torch.save(ckpt, tmp_path / "nan.pth.tar")
    res = runner.invoke(app, ["convert", str(tmp_path / "nan.pth.tar"), str(tmp_path / "a.pkl")])
    assert res.exit_code == 2 and "1 of its 120 backbone tensors hold NaN or inf (layer2.0.bn1.weight)" in res.output
