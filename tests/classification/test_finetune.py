"""Fine-tuning: the schedule and the layer-wise lrs against hand-worked values, every layer and BN trained,
iNaturalist 2018's layout, one-line errors (resume, bit-identical on CPU: tests/classification/test_engine.py)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from classification.finetune import (
    FINETUNE_LAST,
    FinetuneConfig,
    build_optimizer,
    finetune,
    finetune_lr,
    load_finetune_config,
    set_lr,
)
from moco_core import checkpoint
from moco_core.config import ConfigError, replace
from moco_core.data.data import DatasetError
from moco_core.data.inat import inat_splits
from moco_core.model.backbone import load_backbone
from tests.layouts import INAT_CATEGORIES, inat_layout


def tiny(data: Path, out: Path, epochs: int = 2) -> FinetuneConfig:
    cfg = load_finetune_config("finetune_embedded", [f"optim.epochs={epochs}", "optim.batch_size=8",
                                                      f"optim.milestones={[1] if epochs > 1 else []}",
                                                      "data.workers=0", "run.log_every=1"])
    return replace(cfg, arch="resnet18", data={"path": str(data)}, run={"output_dir": str(out)})


def test_step_schedule_of_the_inat_preset() -> None:
    """A.6: lr 0.025, x0.1 at 70% and 90% of 100 epochs."""
    o = load_finetune_config("finetune_inat", ["data.path=x"]).optim
    assert (o.lr, o.epochs, o.milestones, o.weight_decay, o.momentum) == (0.025, 100, (70, 90), 1e-4, 0.9)
    for progress, lr in ((0, 0.025), (69.99, 0.025), (70, 0.0025), (89.5, 0.0025), (90, 0.00025), (99.9, 0.00025)):
        assert finetune_lr(o, progress) == pytest.approx(lr, rel=1e-12), progress
    short = load_finetune_config("finetune_inat", ["data.path=x", "optim.epochs=10"]).optim  # fractions kept
    assert short.milestones == (7, 9)


def test_warmup_and_cosine_of_the_vit_preset() -> None:
    """MAE's: 5e-4 per 256 at batch 1024 is 2e-3; linear warm-up over 5 epochs, cosine to 1e-6 at 100."""
    o = load_finetune_config("finetune_vit", ["data.path=x"]).optim
    assert finetune_lr(o, 0) == 0
    assert finetune_lr(o, 2.5) == pytest.approx(1e-3)
    assert finetune_lr(o, 5) == pytest.approx(2e-3)
    assert finetune_lr(o, 52.5) == pytest.approx(1e-6 + (2e-3 - 1e-6) / 2)  # half-way through the cosine
    assert finetune_lr(o, 28.75) == pytest.approx(1e-6 + (2e-3 - 1e-6) * (1 + math.cos(math.pi / 4)) / 2)  # 1/4
    assert finetune_lr(o, 100) == pytest.approx(1e-6)


def test_layer_wise_lrs_of_a_vit_equal_hand_computed_values() -> None:
    """vit_nano_p4 has 6 blocks: with layer decay 0.5 the patch embedding and class token learn at lr x 0.5^7,
    block i at lr x 0.5^(6 - i), the final norm and head at lr; no weight decay on biases, norms and tokens; the
    fixed position embedding in no group."""
    model, _ = load_backbone("random", 8, arch="vit_nano_p4", crop_size=32)
    cfg = load_finetune_config("finetune_vit", ["data.path=x", "optim.layer_decay=0.5", "optim.weight_decay=0.05"])
    optimizer = build_optimizer(model, cfg.optim)
    set_lr(optimizer, 1e-3)
    where = {id(p): g for g in optimizer.param_groups for p in g["params"]}
    params = dict(model.named_parameters())
    expected = {  # name: (lr, weight decay), worked out by hand
        "patch_embed.proj.weight": (1e-3 / 128, 0.05), "patch_embed.proj.bias": (1e-3 / 128, 0.0),
        "cls_token": (1e-3 / 128, 0.0), "blocks.0.attn.qkv.weight": (1e-3 / 64, 0.05),
        "blocks.0.norm1.weight": (1e-3 / 64, 0.0), "blocks.3.mlp.fc1.weight": (1e-3 / 8, 0.05),
        "blocks.5.mlp.fc2.bias": (1e-3 / 2, 0.0), "blocks.5.attn.proj.weight": (1e-3 / 2, 0.05),
        "norm.weight": (1e-3, 0.0), "head.weight": (1e-3, 0.05), "head.bias": (1e-3, 0.0)}
    for name, (lr, wd) in expected.items():
        group = where[id(params[name])]
        assert (group["lr"], group["weight_decay"]) == (pytest.approx(lr, rel=1e-12), wd), name
    assert id(params["pos_embed"]) not in where
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert sorted(map(id, trainable)) == sorted(where) and len(where) == sum(len(g["params"]) for g in
                                                                              optimizer.param_groups)
    assert isinstance(optimizer, torch.optim.AdamW)


def test_a_resnet_has_one_lr_and_refuses_layer_decay() -> None:
    model, _ = load_backbone("random", 8, arch="resnet18")
    cfg = load_finetune_config("finetune_embedded", [])
    (group,) = build_optimizer(model, cfg.optim).param_groups
    assert len(group["params"]) == len(list(model.parameters())) and group["weight_decay"] == 1e-4
    with pytest.raises(ConfigError, match="optim.layer_decay: 0.7 decays the lr per ViT block; a ResNet takes 1.0"):
        build_optimizer(model, replace(cfg.optim, layer_decay=0.7))


def test_every_layer_and_bn_learn_and_the_record_is_complete(shapes_root: Path, tmp_path: Path) -> None:
    torch.manual_seed(0)
    initial, _ = load_backbone("random", 8, arch="resnet18")
    record = json.loads(finetune(tiny(shapes_root, tmp_path / "ft"), "random", show_progress=False).read_text())
    assert (record["task"], record["protocol"], record["dataset"]["layout"]) == ("finetune", "finetune",
                                                                                  "imagefolder")
    assert [h["epoch"] for h in record["history"]] == [0, 1] and record["wall_time_s"] > 0
    assert record["dataset"]["classes"] == 8 and record["dataset"]["val_images"] == 16
    assert record["note"].startswith("fine-tuning: sgd lr 0.015, 2 epochs, x0.1 at [1]")
    final = checkpoint.load(tmp_path / "ft" / FINETUNE_LAST)["model"]
    unchanged = {k for k, v in initial.state_dict().items() if k != "fc.weight" and k != "fc.bias"
                 and "num_batches" not in k and torch.equal(v, final[k])}
    assert not unchanged  # convolutions, BN affine parameters and BN running statistics all moved
    assert final["layer4.1.bn2.num_batches_tracked"].item() == 2 * 4  # 32 images / 8: 4 steps an epoch


def test_a_vit_fine_tunes_with_its_preset_chosen_for_it(shapes_root: Path, tmp_path: Path) -> None:
    """No -c: a ViT gets finetune_vit (AdamW, layer decay), named in a note; one epoch runs end to end."""
    from typer.testing import CliRunner

    from cli import app

    sets = ["optim.epochs=1", "optim.batch_size=8", "optim.warmup_epochs=0", "data.workers=0", "data.crop_size=32",
            "data.resize=32"]
    result = CliRunner().invoke(app, ["eval", "finetune", "random", "--arch", "vit_nano_p4", "--data",
                                      str(shapes_root), "--output-dir", str(tmp_path / "vit"), "--quiet",
                                      *[a for v in sets for a in ("--set", v)]])
    assert result.exit_code == 0, result.output
    assert "fine-tuned with -c finetune_vit (AdamW, layer-wise lr decay)" in result.output
    record = json.loads((tmp_path / "vit" / "result.json").read_text())
    assert record["backbone"]["arch"] == "vit_nano_p4" and "adamw lr 0.0005 per 256" in record["note"]
    assert "layer decay 0.65" in record["note"]


def test_labels_reach_the_fine_tuning_through_the_cli(shapes_root: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """`eval finetune --labels 10%` (the semi-supervised protocol) trains on the class-balanced tenth the shared data
    layer draws, validates on the whole val split, names the subset in the record and writes to its own default
    directory (the CLI had no --labels: fine-tuning on a subset needed --set data.labels=...)."""
    from typer.testing import CliRunner

    from cli import app

    sets = ["optim.epochs=1", "optim.batch_size=8", "data.workers=0"]
    monkeypatch.chdir(tmp_path)  # the default output directory is relative
    result = CliRunner().invoke(app, ["eval", "finetune", "random", "--arch", "resnet18", "-c", "finetune_embedded",
                                      "--data", str(shapes_root), "--labels", "10%", "--quiet",
                                      *[a for v in sets for a in ("--set", v)]])
    assert result.exit_code == 0, result.output
    run_dir = tmp_path / "runs" / f"finetune_embedded_{shapes_root.name}_labels10pct" / "random_resnet18"
    dataset = json.loads((run_dir / "result.json").read_text())["dataset"]
    train, classes = dataset["subset"]["of"], dataset["classes"]
    per_class = max(1, math.floor(0.1 * train / classes + 0.5))  # a balanced split: every class as big
    assert dataset["subset"] == {"kind": "labels", "labels": "10%", "seed": 0, "images": per_class * classes,
                                 "of": train}
    assert dataset["train_images"] == per_class * classes and dataset["val_images"] > dataset["train_images"]


def test_inat2018_layout_is_read_through_its_json_files(tmp_path: Path) -> None:
    root = inat_layout(tmp_path / "inat")
    train, val, classes = inat_splits(root)
    assert classes == [str(c[0]) for c in INAT_CATEGORIES] and (len(train), len(val)) == (20, 8)
    doc = json.loads((root / "val2018.json").read_text())
    first = doc["images"][0]
    label = next(a["category_id"] for a in doc["annotations"] if a["image_id"] == first["id"])
    assert val[0] == (str(root / first["file_name"]), classes.index(str(label)))
    assert all(Path(p).is_file() and Path(p).relative_to(root / "train_val2018") for p, _ in train + val)
    missing = Path(train[3][0])
    missing.unlink()
    with pytest.raises(DatasetError, match=r"train2018.json: 1 of its 20 images are missing \(first: .*"):
        inat_splits(root)
    (root / "val2018.json").unlink()
    with pytest.raises(DatasetError, match="has train2018.json but no val2018.json"):
        inat_splits(root)


def test_finetune_on_the_inat_layout(tmp_path: Path) -> None:
    root = inat_layout(tmp_path / "inat", train_per_class=2, val_per_class=1)
    record = json.loads(finetune(tiny(root, tmp_path / "ft", 1), "random", show_progress=False).read_text())
    assert record["dataset"]["layout"] == "inat2018" and record["dataset"]["classes"] == 4
    assert (record["dataset"]["train_images"], record["dataset"]["val_images"]) == (8, 4)


def test_cli_errors_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Exit code 2 and one line starting with error:, no traceback; the first through a real process."""
    from typer.testing import CliRunner

    from cli import app

    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # no note on the machine's load before the error
    monkeypatch.setenv("MOCO_DATA_HOME", str(tmp_path / "data"))
    out = ["--output-dir", str(tmp_path / "out"), "--quiet"]
    done = subprocess.run([sys.executable, "-m", "cli", "eval", "finetune", "random", "-c", "finetune_embedded",
                           *out], capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "error: 'random' needs the ResNet to initialise: pass --arch (resnet50 for the paper's protocol, resnet18 "
        "for the embedded presets)"], done.stderr
    cases = [
        (["--arch", "resnet18", "-c", "finetune_embedded", "--set", "optim.layer_decay=0.5"],
         "optim.layer_decay: 0.5 decays the lr per ViT block; a ResNet takes 1.0"),
        (["--arch", "resnet18", "-c", "finetune_embeded"], "did you mean 'finetune_embedded'"),
        (["--arch", "resnet18", "--set", "optim.milestones=[5,200]"], "optim.milestones: [5, 200] fall"),
        (["--arch", "resnet18", "--data", str(tmp_path / "nowhere")], "nowhere"),
    ]
    for args, message in cases:
        result = CliRunner().invoke(app, ["eval", "finetune", "random", *args, *out])
        lines = result.output.strip().splitlines()
        assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (args, result.output)
        assert message in lines[0], (args, lines)


def test_trials_and_launch_resume_a_finetuning(tmp_path: Path) -> None:
    from cluster.job import Command
    from cluster.trials import trial_commands

    commands = trial_commands(["eval", "finetune", "runs/moco/seed_{seed}", "-c", "finetune_embedded",
                               "--output-dir", str(tmp_path / "ft")], 2, 0)
    assert [c.args[:5] for c in commands] == [("runs/moco/seed_0", "-c", "finetune_embedded", "--seed", "0"),
                                               ("runs/moco/seed_1", "-c", "finetune_embedded", "--seed", "1")]
    command = Command.parse(["eval", "finetune", "random", "--output-dir", str(tmp_path / "ft")])
    assert command.resume_args() == []
    (tmp_path / "ft").mkdir()
    (tmp_path / "ft" / FINETUNE_LAST).write_bytes(b"")
    assert command.resume_args() == ["--resume"]
