"""The pretraining run: schedule, run directory, resume equality, NaN stop, bad inputs."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from moco_core import checkpoint
from moco_core.config import ConfigError, from_dict, replace
from moco_core.data.data import DatasetError
from moco_core.errors import NonFiniteLossError
from moco_core.pretrain_config import OptimConfig, PretrainConfig
from moco_core.run.train import check_run, learning_rate, pretrain


def test_learning_rate_schedules() -> None:
    step = OptimConfig()  # paper: 0.03, x0.1 at 120 and 160 of 200
    assert [learning_rate(step, e) for e in (0, 119, 120, 159, 160, 199)] == pytest.approx(
        [0.03, 0.03, 0.003, 0.003, 0.0003, 0.0003])
    scaled = OptimConfig(batch_size=512)
    assert learning_rate(scaled, 0) == pytest.approx(0.06)  # linear scaling with the batch
    cosine = OptimConfig(schedule="cosine", epochs=200)
    assert learning_rate(cosine, 0) == pytest.approx(0.03)
    assert learning_rate(cosine, 100) == pytest.approx(0.015)
    assert learning_rate(cosine, 150) == pytest.approx(0.03 * (1 + math.cos(math.pi * 0.75)) / 2)


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return checkpoint.load(run_dir / checkpoint.LAST)["state_dict"]


def test_run_directory_contents(tiny_cfg: PretrainConfig) -> None:
    run_dir = pretrain(tiny_cfg, show_progress=False)
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["model"]["queue_size"] == 40
    reloaded = from_dict(PretrainConfig, yaml.safe_load((run_dir / "config.yaml").read_text()))
    assert reloaded == tiny_cfg
    info = json.loads((run_dir / "run.json").read_text())["starts"][0]
    assert info["code_version"] and info["images"] == 32 and info["world_size"] == 1
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "loss" in r]
    assert [r["step"] for r in steps] == [1, 2, 3, 4]  # 32 images / batch 16 = 2 steps an epoch, 2 epochs
    assert {"step", "epoch", "loss", "accuracy", "lr", "images_per_s"} <= set(steps[0])
    # embedded's empty queue: its first step has no negative, so no loss to speak of (null, not a perfect 0)
    assert steps[0]["loss"] is None and steps[0]["accuracy"] is None
    assert all(math.isfinite(r["loss"]) for r in steps[1:])
    ckpt = checkpoint.load(run_dir / checkpoint.LAST)
    assert ckpt["epoch"] == 2 and ckpt["global_step"] == 4
    assert ckpt["queue_ptr"] == (4 * 16) % 40 == int(ckpt["state_dict"]["module.queue_ptr"])
    with pytest.raises(ConfigError, match="already holds a run"):
        pretrain(tiny_cfg, show_progress=False)


def test_resume_gives_the_same_weights_as_an_uninterrupted_run(tiny_cfg: PretrainConfig, tmp_path: Path) -> None:
    straight = pretrain(replace(tiny_cfg, optim={"epochs": 3}, run={"output_dir": str(tmp_path / "a")}),
                        show_progress=False)
    first = pretrain(replace(tiny_cfg, optim={"epochs": 1}, run={"output_dir": str(tmp_path / "b")}),
                     show_progress=False)
    resumed = pretrain(replace(tiny_cfg, optim={"epochs": 3}, run={"output_dir": str(first)}), resume=first,
                       show_progress=False)
    a, b = weights(straight), weights(resumed)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert checkpoint.load(resumed / checkpoint.LAST)["optimizer"]["state"].keys()
    steps = [json.loads(line)["step"] for line in (resumed / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(steps)  # resumed log continues without duplicate steps
    assert len(json.loads((resumed / "run.json").read_text())["starts"]) == 2


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(tiny_cfg: PretrainConfig) -> None:
    run_dir = pretrain(replace(tiny_cfg, optim={"epochs": 1}), show_progress=False)
    good = (run_dir / checkpoint.LAST).read_bytes()
    exploding = replace(tiny_cfg, optim={"epochs": 3, "lr": 1e30})
    with pytest.raises(NonFiniteLossError, match="loss became"):
        pretrain(exploding, resume=run_dir, show_progress=False)
    assert (run_dir / checkpoint.LAST).read_bytes() == good


def test_corrupt_images_are_skipped_with_one_warning(shapes_root: Path, tmp_path: Path, make_config,  # noqa: ANN001
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    shutil.copytree(shapes_root / "train", data / "train")
    (data / "train" / "circle" / "empty.jpg").write_bytes(b"")
    (data / "train" / "square" / "notes.png").write_text("not an image")
    pretrain(make_config(data, tmp_path / "run", optim={"epochs": 1}), show_progress=False)
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if "skipped" in line]
    assert len(warnings) == 1 and "empty.jpg" in warnings[0] and "notes.png" in warnings[0]


def test_missing_dataset_and_oversized_batch(tmp_path: Path, shapes_root: Path, make_config) -> None:  # noqa: ANN001
    with pytest.raises(DatasetError, match="not found"):
        pretrain(make_config(tmp_path / "nowhere", tmp_path / "r1"), show_progress=False)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match="no images"):
        pretrain(make_config(tmp_path / "empty", tmp_path / "r2"), show_progress=False)
    with pytest.raises(ConfigError, match="optim.batch_size: 64 is larger than the dataset"):
        pretrain(make_config(shapes_root, tmp_path / "r3", optim={"batch_size": 64}), show_progress=False)
    with pytest.raises(ConfigError, match="bn_groups"):
        pretrain(make_config(shapes_root, tmp_path / "r4", model={"bn_groups": 3}), show_progress=False)


def test_run_checks_for_several_processes(tiny_cfg: PretrainConfig) -> None:
    cpu = torch.device("cpu")
    assert check_run(tiny_cfg, 1, cpu, 32) == 16
    assert check_run(tiny_cfg, 2, cpu, 32) == 8  # bn_groups applies to one process only
    with pytest.raises(ConfigError, match="not divisible by the 3 processes"):
        check_run(tiny_cfg, 3, cpu, 32)
    # SyncBatchNorm runs on CPU processes too (moco_core.model.batchnorm.SyncBatchNorm; was refused before)
    assert check_run(replace(tiny_cfg, model={"shuffle_bn": "sync"}), 2, cpu, 32) == 8
    assert check_run(replace(tiny_cfg, model={"shuffle_bn": "sync"}), 1, cpu, 32) == 16



@pytest.mark.parametrize(("groups", "world", "crop", "refused"), [
    (8, 1, 32, True), (8, 2, 32, False), (4, 1, 32, False), (8, 1, 33, False), (1, 8, 32, True), (1, 4, 32, False),
])
def test_one_image_a_bn_batch_at_a_1x1_last_stage_is_refused_up_front(tiny_cfg: PretrainConfig, groups: int,
                                                                       world: int, crop: int, refused: bool) -> None:
    """PyTorch's BN refuses one value per channel in training, deep in the first step (a traceback). Batch 8 in
    8 groups (the v2 preset's) or over 8 processes leaves BN 1 image; with crops of 32 px or less, a ResNet's
    last stage is 1x1. What the check refuses, a real forward fails on; what it lets through, trains."""
    cfg = replace(tiny_cfg, optim={"batch_size": 8}, model={"bn_groups": groups}, augment={"crop_size": crop})
    if refused:
        with pytest.raises(ConfigError, match=r"optim.batch_size: 8 images over .* leaves each BN layer 1 image"):
            check_run(cfg, world, torch.device("cpu"), 32)
    else:
        assert check_run(cfg, world, torch.device("cpu"), 32) == 8 // world
    # The reference: the encoder of that run, on its share of the batch, in training mode.
    from moco_core.model.methods import build_moco

    method = build_moco(replace(cfg.model, queue_size=8), world_size=world)  # a MoCo module
    encoder = method.encoder.train()
    images = torch.randn(8 // world, 3, crop, crop)
    if refused:
        with pytest.raises(ValueError, match="Expected more than 1 value per channel when training"):
            encoder(images)
    else:
        assert encoder(images).shape == (8 // world, cfg.model.dim)
    if refused and world == 1:  # the supervised baseline's BN is never split: its 8 images are enough
        assert check_run(replace(cfg, method="supervised"), world, torch.device("cpu"), 32) == 8


def test_knn_monitor_is_logged(tiny_cfg: PretrainConfig, shapes_root: Path) -> None:
    cfg = replace(tiny_cfg, run={"knn_every": 1}, data={"knn_path": str(shapes_root)})
    run_dir = pretrain(cfg, show_progress=False)
    knn = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if "knn_top1" in line]
    assert [r["epoch"] for r in knn] == [0, 1]
    assert all(0 <= r["knn_top1"] <= r["knn_top5"] <= 100 for r in knn)
    with pytest.raises(ConfigError, match="data.knn_path: not set"):
        from moco_core.config import validated

        validated(replace(tiny_cfg, run={"knn_every": 1}, data={"knn_path": None}))


def test_supervised_baseline_learns_a_separable_set(tmp_path: Path) -> None:
    """Two classes that differ in brightness: the supervised method must reach high training accuracy."""
    from PIL import Image

    from moco_core.model.backbone import load_backbone
    from tests.conftest import tiny_config

    for label, value in (("dark", 30), ("light", 220)):
        folder = tmp_path / "data" / "train" / label
        folder.mkdir(parents=True)
        for i in range(16):
            Image.new("RGB", (40, 40), (value + i, value, value - i)).save(folder / f"{i}.png")
    cfg = tiny_config(tmp_path / "data", tmp_path / "sup", optim={"epochs": 8, "lr": 2.0, "schedule": "step",
                                                                   "milestones": ()})
    # supervised_embedded sets the pipeline back to auto (PIL): the tensor one has the MoCo augmentation only
    run_dir = pretrain(replace(cfg, method="supervised", data={"pipeline": "auto"}), show_progress=False)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["epoch_accuracy"] >= 90.0
    ckpt = checkpoint.load(run_dir / checkpoint.LAST)
    assert ckpt["method"] == "supervised" and "fc.weight" in ckpt["state_dict"] and "queue_ptr" not in ckpt
    _, info = load_backbone(str(run_dir / checkpoint.LAST), 2)  # read like torchvision weights
    assert (info.format, info.pretrain["method"]) == ("torchvision", "supervised")
    with pytest.raises(checkpoint.CheckpointError, match="written by method 'supervised', not 'moco'"):
        pretrain(replace(cfg, optim={"epochs": 7}), resume=run_dir, show_progress=False)


def test_gpu_settings_follow_the_device_unless_set() -> None:
    """run.channels_last and run.compile: null means on under CUDA, off on CPU; an explicit value wins. The data
    pipeline "auto" is the tensor one under CUDA for the contrastive methods only. Decided without a GPU: the
    functions only read the device's type."""
    from moco_core.model.methods import MocoMethod
    from moco_core.pretrain_config import ModelConfig, RunConfig
    from moco_core.run.train import build_optimizer, data_pipeline, speed_up

    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert data_pipeline("auto", cuda, "two_crops") == "tensor" and data_pipeline("auto", cuda, "one_crop") == "tensor"
    assert data_pipeline("auto", cuda, "supervised") == "pil" and data_pipeline("auto", cpu, "two_crops") == "pil"
    assert data_pipeline("pil", cuda, "two_crops") == "pil" and data_pipeline("tensor", cpu, "two_crops") == "tensor"

    def method() -> MocoMethod:
        return MocoMethod(ModelConfig(arch="resnet18", queue_size=16), world_size=1, num_classes=0, dataset_size=0)

    plain = method()
    speed = speed_up(plain, cpu, RunConfig())
    assert (speed.channels_last, speed.compiled) == (False, False)
    assert plain.module.encoder.conv1.weight.is_contiguous()
    fast = method()
    speed = speed_up(fast, cpu, RunConfig(channels_last=True, compile=True))
    assert (speed.channels_last, speed.compiled) == (True, True)
    for encoder in (fast.module.encoder, fast.module.momentum_encoder):
        assert encoder.conv1.weight.is_contiguous(memory_format=torch.channels_last)
        assert encoder._compiled_call_impl is not None  # nn.Module.compile: state_dict keys stay as they were
    assert list(fast.state_dict()) == list(plain.state_dict())
    assert all(group["fused"] for group in build_optimizer(plain.module, OptimConfig(), cuda).param_groups)
    assert not any(group["fused"] for group in build_optimizer(plain.module, OptimConfig(), cpu).param_groups)


def test_channels_last_run_resumes_from_an_nchw_checkpoint(make_config, shapes_root: Path, tmp_path: Path) -> None:
    """A run in channels_last (as under CUDA) trains, writes a checkpoint that loads into a plain (NCHW) model,
    and resumes from one written by an NCHW run; the resumed optimizer takes the device's fused setting."""
    cfg = make_config(shapes_root, tmp_path / "a", run={"channels_last": True})
    run_dir = pretrain(cfg, show_progress=False)
    state = checkpoint.load(run_dir / checkpoint.LAST)["state_dict"]
    conv = state["module.encoder_q.conv1.weight"]
    import torchvision

    net = torchvision.models.resnet18(num_classes=128)
    net.fc = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 128))
    net.load_state_dict({k.removeprefix("module.encoder_q."): v for k, v in state.items()
                         if k.startswith("module.encoder_q.")})
    assert torch.equal(net.conv1.weight, conv)
    nchw = pretrain(make_config(shapes_root, tmp_path / "b", optim={"epochs": 1}), show_progress=False)
    written = checkpoint.load(nchw / checkpoint.LAST)
    for group in written["optimizer"]["param_groups"]:
        group["fused"] = True  # as a CUDA run writes it
    torch.save(written, nchw / checkpoint.LAST)
    resumed = pretrain(make_config(shapes_root, tmp_path / "b", run={"channels_last": True}), resume=nchw,
                       show_progress=False)
    ckpt = checkpoint.load(resumed / checkpoint.LAST)
    assert ckpt["epoch"] == 2 and not any(group["fused"] for group in ckpt["optimizer"]["param_groups"])


def test_a_cpu_run_warns_when_its_images_per_second_collapse(tiny_cfg: PretrainConfig, monkeypatch: pytest.MonkeyPatch,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    """The watch sees every logged window's rate, across epochs, and its warning reaches the log once."""
    from moco_core.run.progress import SlowdownWatch

    seen: list[float] = []
    observe = SlowdownWatch.observe

    def spying(self: SlowdownWatch, rate: float) -> str | None:
        seen.append(rate)
        # the rates of a machine that slows down from the 5th window on (the real ones of this tiny run are noise)
        return observe(self, 10.0 if len(seen) >= 5 else 100.0)

    monkeypatch.setattr(SlowdownWatch, "observe", spying)
    cfg = replace(tiny_cfg, optim={"epochs": 4})
    with caplog.at_level("WARNING", logger="moco.engine"):
        pretrain(cfg, show_progress=False)
    steps = json.loads((Path(cfg.run.output_dir) / "metrics.jsonl").read_text().splitlines()[-1])["step"]
    assert len(seen) == steps >= 7  # one window a step (log_every 1), every epoch
    warnings = [r.getMessage() for r in caplog.records if "images/s, down from" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].startswith("warning: 10 images/s, down from 100"), warnings
    assert "OMP_NUM_THREADS=1" in warnings[0] or torch.get_num_threads() == 1, warnings
