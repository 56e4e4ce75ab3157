"""The linear protocol: only fc changes, BN stays put, the sanity check bites, records are complete."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from classification.engine import sanity_check
from classification.linear import LinearConfig, linear_eval, load_linear_config
from moco_core import checkpoint
from moco_core.config import ConfigError, replace
from moco_core.model.backbone import load_backbone
from moco_core.run.train import pretrain


def tiny_linear(shapes_root: Path, out: Path, **run: object) -> LinearConfig:
    cfg = load_linear_config("lincls_embedded", ["optim.epochs=2", "optim.batch_size=16", "optim.milestones=[1]",
                                                 "data.workers=0", "run.log_every=1", "data.crop_size=32",
                                                 "data.resize=32"])
    return replace(cfg, arch="resnet18", data={"path": str(shapes_root)}, run={"output_dir": str(out), **run})


@pytest.fixture(scope="module")
def pretrained(shapes_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.conftest import tiny_config

    out = tmp_path_factory.mktemp("pre") / "run"
    return pretrain(tiny_config(shapes_root, out, optim={"epochs": 1}), show_progress=False) / checkpoint.LAST


def test_only_fc_changes_and_bn_statistics_stay(pretrained: Path, shapes_root: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The evaluation itself, not a loop of the test's own: after it, every tensor but fc equals the checkpoint's
    (BN running statistics included). Were eval mode dropped, the statistics would move and the sanity check
    would stop the run, which the second half shows."""
    linear_eval(tiny_linear(shapes_root, tmp_path / "kept"), str(pretrained), show_progress=False)
    final = checkpoint.load(tmp_path / "kept" / "linear_final.pth.tar")["state_dict"]
    loaded, _ = load_backbone(str(pretrained), 8)
    changed = {k for k, v in loaded.state_dict().items() if not torch.equal(v, final[k])}
    assert changed == {"fc.weight", "fc.bias"}
    assert any(k.endswith("running_mean") for k in final)
    monkeypatch.setattr(torch.nn.Module, "eval", lambda self: self.train())  # an evaluation that forgot eval()
    with pytest.raises(RuntimeError, match="sanity check failed: .* frozen tensors changed .*running_"):
        linear_eval(tiny_linear(shapes_root, tmp_path / "dropped"), str(pretrained), show_progress=False)


def test_linear_eval_runs_and_records(pretrained: Path, shapes_root: Path, tmp_path: Path) -> None:
    record_path = linear_eval(tiny_linear(shapes_root, tmp_path / "lin"), str(pretrained), show_progress=False)
    record = json.loads(record_path.read_text())
    assert record["schema"] == "moco.result" and record["task"] == "linear" and record["protocol"] == "linear"
    assert record["sanity_check"] == "passed" and record["wall_time_s"] > 0
    assert record["backbone"]["format"] == "moco-suite" and len(record["backbone"]["sha256"]) == 64
    assert record["backbone"]["pretrain"]["config"]["model"]["queue_size"] == 40
    assert [h["epoch"] for h in record["history"]] == [0, 1]
    assert 0 <= record["metrics"]["top1"] <= record["metrics"]["top5"] <= 100
    assert record["dataset"]["classes"] == 8 and record["dataset"]["val_images"] == 16
    final = checkpoint.load(tmp_path / "lin" / "linear_final.pth.tar")
    assert final["arch"] == "resnet18" and "fc.weight" in final["state_dict"]


def test_cached_features_mode_is_labelled(shapes_root: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from cli import app

    sets = ["optim.epochs=2", "optim.batch_size=16", "optim.lr=1.0", "data.workers=0", "data.crop_size=32",
            "data.resize=32"]
    result = CliRunner().invoke(app, ["eval", "linear", "random", "--arch", "resnet18", "-c", "lincls_embedded",
                                      "--data", str(shapes_root), "--output-dir", str(tmp_path / "cached"),
                                      "--cached-features", "--quiet", *[a for v in sets for a in ("--set", v)]])
    assert result.exit_code == 0, result.output
    record = json.loads((tmp_path / "cached" / "result.json").read_text())
    assert record["protocol"] == "linear-cached" and "not the paper's protocol" in record["note"]
    assert record["backbone"]["format"] == "random"


def test_sanity_check_catches_a_modified_weight(pretrained: Path) -> None:
    model, info = load_backbone(str(pretrained), 8)
    initial = {k: v.clone() for k, v in model.state_dict().items() if not k.startswith("fc.")}
    sanity_check(model, info, initial)  # untouched: passes
    with torch.no_grad():
        model.layer3[0].conv1.weight[0, 0, 0, 0] += 1e-3
    with pytest.raises(RuntimeError, match="sanity check failed: 1 frozen tensors changed .*layer3.0.conv1.weight"):
        sanity_check(model, info, initial)
    model, info = load_backbone("random", 8, arch="resnet18")
    initial = {k: v.clone() for k, v in model.state_dict().items() if not k.startswith("fc.")}
    model.layer1[0].bn1.running_mean += 1
    with pytest.raises(RuntimeError, match="layer1.0.bn1.running_mean"):
        sanity_check(model, info, initial)


def test_bad_config_and_unlabelled_data(tmp_path: Path, shapes_root: Path) -> None:
    with pytest.raises(ConfigError, match="data.path: not set"):
        load_linear_config(None, [])
    with pytest.raises(ConfigError, match="optim.lr: must be > 0"):
        load_linear_config("lincls_embedded", ["optim.lr=0"])
    with pytest.raises(ConfigError, match="optim.lr: must be finite, got inf"):
        load_linear_config("lincls_embedded", ["optim.lr=.inf"])
    flat = tmp_path / "flat"
    (flat / "train").mkdir(parents=True)
    (flat / "val").mkdir()
    for split in ("train", "val"):
        for src in sorted((shapes_root / split / "circle").iterdir())[:2]:
            (flat / split / src.name).write_bytes(src.read_bytes())
    with pytest.raises(ConfigError, match="no class folders"):
        linear_eval(tiny_linear(flat, tmp_path / "x"), "random", show_progress=False)


class _Crash(Exception):
    pass


def test_a_crash_between_the_last_epoch_and_the_record_resumes_to_the_record(
        shapes_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """All epochs done and saved, killed before result.json: --resume writes the record (what moco launch and moco
    trials do after such a kill), the one a run never killed writes; with the record there, it refuses."""
    from classification.linear import LINEAR_LAST

    straight = json.loads(linear_eval(tiny_linear(shapes_root, tmp_path / "straight"), "random",
                                      show_progress=False).read_text())
    real_save = checkpoint.save_atomic

    def save_then_crash(obj: dict, path: Path) -> None:
        real_save(obj, path)
        if path.name == LINEAR_LAST and obj["epoch"] == 2:  # the last of tiny_linear's 2 epochs
            raise _Crash

    monkeypatch.setattr(checkpoint, "save_atomic", save_then_crash)
    with pytest.raises(_Crash):
        linear_eval(tiny_linear(shapes_root, tmp_path / "crashed"), "random", show_progress=False)
    monkeypatch.setattr(checkpoint, "save_atomic", real_save)
    assert not (tmp_path / "crashed" / "result.json").exists()
    resumed = json.loads(linear_eval(tiny_linear(shapes_root, tmp_path / "crashed"), "random", show_progress=False,
                                     resume=True).read_text())
    assert resumed["history"] == straight["history"] and resumed["metrics"] == straight["metrics"]
    with pytest.raises(ConfigError, match="the 2 epochs of .* are done already; raise it"):
        linear_eval(tiny_linear(shapes_root, tmp_path / "crashed"), "random", show_progress=False, resume=True)


@pytest.mark.parametrize("cached", [False, True])
def test_resume_after_a_crash_is_bit_identical(shapes_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               cached: bool) -> None:
    """Killed after epoch 2 of 3 (its checkpoint written), then --resume: the same fc, history and record as a run
    never interrupted (CPU, no loader workers: augmentation draws come from the restored RNG)."""
    from classification.linear import LINEAR_LAST

    def config(out: str) -> Any:
        cfg = tiny_linear(shapes_root, tmp_path / out, cached_features=cached)
        return replace(cfg, optim={"epochs": 3, "milestones": [2]})

    straight = json.loads(linear_eval(config("straight"), "random", show_progress=False).read_text())
    real_save = checkpoint.save_atomic

    def save_then_crash(obj: dict, path: Path) -> None:
        real_save(obj, path)
        if path.name == LINEAR_LAST and obj["epoch"] == 2:
            raise _Crash

    monkeypatch.setattr(checkpoint, "save_atomic", save_then_crash)
    with pytest.raises(_Crash):
        linear_eval(config("crashed"), "random", show_progress=False)
    monkeypatch.setattr(checkpoint, "save_atomic", real_save)
    with pytest.raises(ConfigError, match=r"already holds an unfinished linear evaluation \(linear_last.pth.tar\); "
                                          r"pass --resume"):
        linear_eval(config("crashed"), "random", show_progress=False)
    resumed = json.loads(linear_eval(config("crashed"), "random", show_progress=False, resume=True).read_text())
    assert resumed["history"] == straight["history"] and resumed["metrics"] == straight["metrics"]
    a = checkpoint.load(tmp_path / "straight" / "linear_final.pth.tar")["state_dict"]
    b = checkpoint.load(tmp_path / "crashed" / "linear_final.pth.tar")["state_dict"]
    assert all(torch.equal(a[k], b[k]) for k in ("fc.weight", "fc.bias"))
    lines = [json.loads(line) for line in (tmp_path / "crashed" / "metrics.jsonl").read_text().splitlines()]
    assert [line["epoch"] for line in lines] == [0, 1, 2]
    with pytest.raises(ConfigError, match="the 3 epochs of .* are done already; raise it"):
        linear_eval(config("crashed"), "random", show_progress=False, resume=True)
    longer = replace(config("crashed"), optim={"epochs": 4})
    extended = json.loads(linear_eval(longer, "random", show_progress=False, resume=True).read_text())
    assert [h["epoch"] for h in extended["history"]] == [0, 1, 2, 3]
    from tests.layouts import torchvision_weights

    other = torchvision_weights(tmp_path / "other.pth")
    with pytest.raises(ConfigError, match="evaluates 'random', not"):
        linear_eval(replace(longer, optim={"epochs": 5}, run={"weights_format": "supervised"}), str(other),
                    show_progress=False, resume=True)


def test_splits_that_are_not_labelled_alike_are_named_in_one_line(tmp_path: Path) -> None:
    """ImageNet's validation archive unpacks flat (val/*.JPEG): the message says so and what to do, for the
    linear protocol, kNN and the pretraining's kNN monitor; differing class folders are named by an example."""
    import shutil

    from classification.linear import LinearDataConfig, load_splits
    from moco_core.run.knn import KnnMonitor
    from tests.layouts import WNIDS, imagenet_layout

    root = imagenet_layout(tmp_path / "imagenet")
    flat = root / "val"
    for image in list(flat.glob("*/*.JPEG")):
        image.rename(flat / image.name)
    for folder in flat.iterdir():
        if folder.is_dir():
            folder.rmdir()

    def error(path: Path) -> str:
        with pytest.raises(ConfigError) as err:
            load_splits(LinearDataConfig(path=str(path), workers=0), augment=False)
        with pytest.raises(ConfigError) as knn_err:
            KnnMonitor.from_root(path, crop_size=32, device=torch.device("cpu"), workers=0)
        assert str(knn_err.value) == str(err.value).replace("data.path:", "data.knn_path:", 1)
        assert "\n" not in str(err.value)
        return str(err.value)

    assert error(root) == (f"data.path: {flat} holds its images directly, not in class folders (ImageNet's "
                           f"validation archive unpacks that way): move each into val/<class>/, named as in "
                           f"train/ (the ILSVRC2012 devkit's ground truth, or Kaggle's LOC_val_solution.csv, gives "
                           f"each image's class)")
    for image in list(flat.glob("*.JPEG")):
        (flat / image.name[:9]).mkdir(exist_ok=True)
        image.rename(flat / image.name[:9] / image.name)
    shutil.rmtree(flat / WNIDS[2])
    assert error(root) == (f"data.path: train/ and val/ have different class folders (4 vs 3; {WNIDS[2]} only "
                           f"in train/)")
    (flat / WNIDS[2]).mkdir()
    (flat / "n99999999").mkdir()
    shutil.copy(next((root / "train" / WNIDS[0]).glob("*_0.JPEG")), flat / "n99999999" / "x.JPEG")
    shutil.copy(next((root / "train" / WNIDS[0]).glob("*_0.JPEG")), flat / WNIDS[2] / "y.JPEG")
    assert error(root).endswith("(4 vs 5; n99999999 only in val/)")
    (flat / "n99999998").mkdir()
    shutil.copy(flat / "n99999999" / "x.JPEG", flat / "n99999998" / "x.JPEG")
    assert error(root).endswith("(4 vs 6; n99999998 only in val/, and others)")
    shutil.rmtree(root / "train")
    (root / "train").mkdir()
    shutil.copy(flat / "n99999999" / "x.JPEG", root / "train" / "x.JPEG")
    assert error(root) == (f"data.path: {root / 'train'} has no class folders; this evaluation needs labels "
                           f"(train/<class>/*.JPEG)")


def test_tensorboard_mirrors_the_evaluations_metrics(shapes_root: Path, tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tests.moco_core.run.test_loggers import as_tensorboard_stores, expected_series, jsonl, tensorboard_scalars

    cfg = replace(tiny_linear(shapes_root, tmp_path / "lin", loggers=("tensorboard",)), arch="resnet18")
    linear_eval(cfg, "random", show_progress=False)
    lines = jsonl(tmp_path / "lin")
    assert [line["step"] for line in lines] == [2, 4]  # 2 epochs of 2 steps: one line an epoch
    shown = tensorboard_scalars(tmp_path / "lin" / "tensorboard")
    assert set(shown) == {"epoch", "loss", "lr", "top1", "top5"}
    assert shown == as_tensorboard_stores(expected_series(lines))
