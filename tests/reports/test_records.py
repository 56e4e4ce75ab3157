"""Reading records: which files are found, why a record is skipped, and how pretrainings are labelled and grouped."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from reports.pretraining import moco_variant, short_arch
from reports.records import find_record_files, load_records
from reports.summary import group

from .conftest import SHA, WriteRecord, base_record

ROOT = Path(__file__).resolve().parents[2]


def test_finds_result_json_and_dot_result_json_recursively(write_record: WriteRecord, runs: Path) -> None:
    write_record("a/b/c/result.json")
    write_record("x.result.json")
    write_record("myresult.json")  # neither name: not a record
    write_record("notes.json")
    shown = [s for s, _ in find_record_files([str(runs), str(runs / "a")])]  # overlapping roots: found once
    assert shown == [str(runs / "a/b/c/result.json"), str(runs / "x.result.json")]


@pytest.mark.parametrize(("content", "reason"), [
    ('{"schema": "moco.result",', "malformed JSON"),
    ("[1, 2]", "not a JSON object (a list)"),
    (base_record(schema="other"), "not a moco.result record (schema 'other')"),
    (base_record(version=2), "unknown version 2 (this report reads version 1)"),
    (base_record(version="1"), "unknown version '1'"),
    (base_record(version=True), "unknown version True"),
    (base_record(task="segmentation"), "unknown task 'segmentation'"),
    ({k: v for k, v in base_record().items() if k != "dataset"}, "missing field 'dataset'"),
    (base_record(dataset={"classes": 8}), "missing field 'dataset.path'"),
    (base_record(backbone={"format": "random"}), "missing field 'backbone.arch'"),
    (base_record(metrics={"top5": 1.0}), "metric 'top1' missing (task linear)"),
    (base_record(metrics={"top1": float("nan"), "top5": 1.0}), "metric 'top1' not a finite number"),
    (base_record(status="crashed"), "unknown status 'crashed'"),
    (base_record(sweep={"param": "lr", "value": 1, "method": "moco"}), "unknown sweep.param 'lr'"),
    (base_record(task="coco", protocol="coco", engine="detectron2", config={"model": "R50-C4"}, metrics=dict.fromkeys(
        ("bbox_AP", "bbox_AP50", "bbox_AP75", "segm_AP", "segm_AP50", "segm_AP75"), 1.0)),
     "missing field 'config.schedule'"),
    (base_record(task="voc", protocol="voc", metrics={"AP50": 1, "AP": 1, "AP75": 1}), "missing field 'engine'"),
])
def test_unusable_records_are_skipped_with_the_reason(write_record: WriteRecord, runs: Path, content: object,
                                                      reason: str) -> None:
    write_record("bad.result.json", content if isinstance(content, str) else json.dumps(content))
    write_record("good.result.json")
    records, skipped = load_records([str(runs)])
    assert len(records) == 1
    assert len(skipped) == 1 and skipped[0].path.endswith("bad.result.json")
    assert reason in skipped[0].reason


def test_unreadable_bytes_are_skipped(write_record: WriteRecord, runs: Path) -> None:
    (runs / "bin.result.json").parent.mkdir(parents=True, exist_ok=True)
    (runs / "bin.result.json").write_bytes(b"\xff\xfe\x00junk")
    records, skipped = load_records([str(runs)])
    assert records == [] and skipped[0].reason.startswith("malformed JSON (")


def test_labels_of_baselines_and_ours(write_record: WriteRecord, runs: Path) -> None:
    write_record("tv.result.json", backbone={"source": "/w/r50.pth", "format": "torchvision", "arch": "resnet50",
                                             "sha256": "0f1e2d" + "0" * 58, "pretrain": {"method": "supervised"}})
    write_record("sup.result.json", backbone={"source": "/r/s.pth", "format": "torchvision", "arch": "resnet18",
                                              "sha256": "5e" * 32, "pretrain": {
                                                  "method": "supervised", "epochs": 10,
                                                  "config": {"data": {"path": "/tmp/lt/e"}}}})
    write_record("rand.result.json", backbone={"source": "random", "format": "random", "arch": "resnet18",
                                               "sha256": None, "pretrain": {"method": "random init"}})
    write_record("off.result.json", backbone={"source": "/o/m.pth.tar", "format": "official-moco",
                                              "arch": "resnet50", "sha256": "cd" * 32,
                                              "pretrain": {"method": "moco", "epochs": 200, "config": {}}})
    write_record("e2e.result.json", backbone={**base_record()["backbone"], "sha256": "ee" * 32,
                                              "pretrain": {"method": "end2end", "epochs": 3, "config": {}}})
    write_record("moco.result.json")
    labels = [e.pretraining.label for e in group(load_records([str(runs)])[0])[0]]
    # the floor and the references first, then the rows grouped by method and backbone (issue 47)
    assert labels == ["random init (R18)", "supervised (torchvision weights, R50) 0f1e2d",
                      "supervised (R18, 10 ep, e) 5e5e5e", "MoCo (R18, 15 ep, embedded) a1b2c3",
                      "MoCo (official checkpoint, R50, 200 ep) cdcdcd", "end-to-end (R18, 3 ep) eeeeee"]


def test_a_torchvision_record_that_names_no_method_is_not_supervised(write_record: WriteRecord, runs: Path) -> None:
    """Issue 47: a record of a plain torchvision state dict whose method nobody stated was labelled "supervised
    (torchvision weights)"; it is an unknown pretraining. One whose method was named is labelled by it."""
    write_record("plain.result.json", backbone={"source": "/w/r50.pth", "format": "torchvision", "arch": "resnet50",
                                                "sha256": "0f1e2d" + "0" * 58, "pretrain": {}})
    write_record("dino.result.json", backbone={
        "source": "/w/dino.pth", "format": "torchvision", "arch": "resnet50", "sha256": "d1" * 32, "encoder": "teacher",
        "pretrain": {"method": "dino", "stated_by": "--weights-format"}})
    entries = group(load_records([str(runs)])[0])[0]
    assert [(e.pretraining.kind, e.pretraining.is_supervised) for e in entries] == [("released", False),
                                                                                   ("unknown", False)]
    assert [e.pretraining.label for e in entries] == [
        "DINO (R50, torchvision, teacher, method named by --weights-format) d1d1d1",
        "unknown pretraining (torchvision, R50) 0f1e2d"]


def test_groups_by_checkpoint_hash_not_path(write_record: WriteRecord, runs: Path) -> None:
    write_record("a.result.json")
    write_record("b.result.json", backbone={**base_record()["backbone"], "source": "/copy/elsewhere.pth.tar"})
    other_recipe = {"method": "moco", "epochs": 15, "config": {"data": {"path": "embedded"},
                                                               "model": {"temperature": 0.1}}}
    write_record("c.result.json", backbone={**base_record()["backbone"], "sha256": "99" * 32,
                                            "pretrain": other_recipe})
    write_record("d.result.json", dataset={"path": "/data/other"})
    write_record("e.result.json", protocol="linear-cached")
    main, _ = group(load_records([str(runs)])[0])
    assert sorted(e.n for e in main) == [1, 1, 1, 2]
    assert next(e for e in main if e.n == 2).pretraining.sha256 == SHA


def test_pretrainings_of_one_recipe_with_other_seeds_are_trials_of_one_row(write_record: WriteRecord,
                                                                             runs: Path) -> None:
    def pretrained(seed: int, sha: str, **model: float) -> dict:
        config = {"data": {"path": "embedded", "workers": seed}, "model": {"queue_size": 1024, **model},
                  "run": {"seed": seed, "output_dir": f"runs/demo/seed_{seed}/pretrain/moco"}}
        return {**base_record()["backbone"], "sha256": sha, "source": f"/runs/seed_{seed}/checkpoint_last.pth.tar",
                "pretrain": {"method": "moco", "epochs": 15, "config": config}}

    for seed, sha, top1 in ((0, "a0", 40.0), (1, "a1", 44.0), (2, "a2", 42.0)):  # seed, paths, workers differ
        write_record(f"s{seed}.result.json", backbone=pretrained(seed, sha * 32),
                     metrics={"top1": top1, "top5": 90.0})
    write_record("t.result.json", backbone=pretrained(0, "b0" * 32, temperature=0.1))  # another recipe
    main, _ = group(load_records([str(runs)])[0])
    trials, other = sorted(main, key=lambda e: -e.n)
    assert trials.n == 3 and trials.metrics["top1"].mean == 42.0 and trials.metrics["top1"].std == 2.0
    assert trials.pretraining.label == "MoCo (R18, 15 ep, embedded)"  # three checkpoints: no one hash
    assert other.n == 1 and other.pretraining.label.endswith("b0b0b0")


def test_short_arch() -> None:
    assert [short_arch(a) for a in ("resnet18", "resnet50", "wide_resnet50_2", "vit_b")] == \
        ["R18", "R50", "R50w2", "vit_b"]
    assert [short_arch(a) for a in ("vit_small", "vit_base", "vit_tiny_p4", "vit_nano_p4")] == \
        ["ViT-S/16", "ViT-B/16", "ViT-Ti/4", "ViT-nano/4"]


def test_every_vit_of_moco_core_has_a_readable_name() -> None:
    """reports restates the ViT names (it imports no moco_core): each of VIT_SHAPES has one, whose patch size and
    size letter are its shape's (S: width 384, B: 768, Ti: 192, DeiT's names)."""
    from moco_core.model.vit import VIT_SHAPES
    from reports.pretraining import VIT_NAMES

    assert set(VIT_NAMES) == set(VIT_SHAPES)
    sizes = {384: "S", 768: "B", 192: "Ti", 96: "nano"}
    for arch, shape in VIT_SHAPES.items():
        assert VIT_NAMES[arch] == f"ViT-{sizes[shape.embed_dim]}/{shape.patch_size}"


V1 = {"model": {"mlp": False}, "augment": {"blur_prob": 0.0}, "optim": {"schedule": "step"}}
V2 = {"model": {"mlp": True}, "augment": {"blur_prob": 0.5}, "optim": {"schedule": "cosine"}}


@pytest.mark.parametrize(("config", "variant"), [
    (V1, "v1"), (V2, "v2"),
    ({**V2, "optim": {"schedule": "step"}}, None),  # MLP and blur without cos: one of v2's ablation rows
    ({**V1, "model": {"mlp": True}}, None),  # v1 + MLP
    ({**V2, "augment": {}}, None),  # the config does not say: no version claimed
    ({"model": {"mlp": False}}, None),
    ({}, None),
    ({**V1, "augment": {"blur_prob": True}}, None),  # not a number
])
def test_moco_variant_is_v1_or_v2_only_for_their_whole_recipe(config: dict, variant: str | None) -> None:
    assert moco_variant(config) == variant


def test_the_presets_are_the_variants_they_are_named_after() -> None:
    from moco_core.config import load_config, to_dict
    from moco_core.pretrain_config import PretrainConfig

    found = {preset: moco_variant(to_dict(load_config(PretrainConfig, preset, check=False))) for preset in
             ("moco_v1_200ep", "moco_v2_200ep", "moco_v2_800ep", "embedded")}
    assert found == {"moco_v1_200ep": "v1", "moco_v2_200ep": "v2", "moco_v2_800ep": "v2", "embedded": "v2"}


def test_labels_name_the_moco_version(write_record: WriteRecord, runs: Path) -> None:
    def ours(method: str, arch: str, sha: str, config: dict) -> dict:
        return {**base_record()["backbone"], "arch": arch, "sha256": sha * 32,
                "pretrain": {"method": method, "epochs": 100, "config": {**config, "data": {"path": "/d/imagenet"}}}}

    write_record("v1.result.json", backbone=ours("moco", "resnet50", "11", V1))
    write_record("v2.result.json", backbone=ours("moco", "resnet50", "22", V2))
    write_record("mix.result.json", backbone=ours("moco", "resnet50", "33", {**V1, "model": {"mlp": True}}))
    write_record("v3.result.json", backbone=ours("mocov3", "vit_small", "44", {"method": "mocov3"}))
    write_record("v3r.result.json", backbone=ours("mocov3", "resnet50", "55", {"method": "mocov3", **V2}))
    write_record("off3.result.json", backbone={"source": "/o/vit-b-300ep.pth.tar", "format": "official-mocov3",
                                               "arch": "vit_base", "sha256": "66" * 32,
                                               "pretrain": {"method": "mocov3", "epochs": 300, "config": {}}})
    write_record("rand.result.json", backbone={"source": "random", "format": "random", "arch": "vit_small",
                                               "sha256": None, "pretrain": {"method": "random init"}})
    labels = [e.pretraining.label for e in group(load_records([str(runs)])[0])[0]]
    assert labels == ["random init (ViT-S/16)", "MoCo v1 (R50, 100 ep, imagenet) 111111",
                      "MoCo v2 (R50, 100 ep, imagenet) 222222", "MoCo (R50, 100 ep, imagenet) 333333",
                      "MoCo v3 (R50, 100 ep, imagenet) 555555",
                      "MoCo v3 (official checkpoint, ViT-B/16, 300 ep) 666666",
                      "MoCo v3 (ViT-S/16, 100 ep, imagenet) 444444"]


def test_reports_imports_no_torch_nor_other_packages_of_ours() -> None:
    """Reports run where only records are (no torch): the modules import nothing of ours but the torch-free
    modules of moco_core they share: the torch-free builder of suggested commands (moco_core.commands), the one error
    path (moco_core.errors, which escapes through moco_core.terminal), the reader of files a user names
    (moco_core.user_files), the writer of file sets (moco_core.file_sets) and the names of the solver protocols
    (moco_core.solver_protocols)."""
    ours = "('torch', 'torchvision', 'moco_core', 'classification', 'transfer', 'sweeps', 'moco_demo')"
    shared = ("('moco_core', 'moco_core.commands', 'moco_core.errors', 'moco_core.terminal', 'moco_core.user_files', "
              "'moco_core.file_sets', 'moco_core.solver_protocols')")
    code = ("import sys, reports.report, reports.render, reports.plots, reports.screenshot, reports.cli; "
            f"bad = [m for m in sys.modules if m.split('.')[0] in {ours} and m not in {shared}]; "
            "print(bad); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def pretrained(epochs: int, planned: int | None, partial: int | None = None, sha: str = SHA) -> dict:
    """Our MoCo R18 backbone as BackboneInfo writes it: ``partial`` None is a record from before the field."""
    config: dict = {"data": {"path": "embedded"}, **({"optim": {"epochs": planned}} if planned else {})}
    pretrain = {"method": "moco", "epochs": epochs, "config": config,
                **({"partial_epoch_steps": partial} if partial is not None else {})}
    return {**base_record()["backbone"], "sha256": sha, "pretrain": pretrain}


@pytest.mark.parametrize(("backbone", "extra", "label"), [
    (pretrained(20, 20, 0), {}, "MoCo (R18, 20 ep, embedded) a1b2c3"),
    # stopped by a signal in its third epoch of 20: the checkpoint's epoch 2, its sampler 6 steps in
    (pretrained(2, 20, 6), {}, "MoCo (R18, 2 of 20 ep + 6 steps, unfinished, embedded) a1b2c3"),
    (pretrained(3, 20, 0), {}, "MoCo (R18, 3 of 20 ep, unfinished, embedded) a1b2c3"),  # killed after epoch 3
    (pretrained(2, 20, None), {}, "MoCo (R18, 2 of 20 ep, unfinished, embedded) a1b2c3"),  # an older record
    (pretrained(15, None, None), {}, "MoCo (R18, 15 ep, embedded) a1b2c3"),  # no config: as before
    (pretrained(10, 100, 0), {"snapshot": {"run": "/r", "epoch": 10}}, "MoCo (R18, 10 of 100 ep, snapshot, "
                                                                       "embedded) a1b2c3"),
])
def test_a_pretraining_is_labelled_by_the_epochs_it_completed(write_record: WriteRecord, runs: Path, backbone: dict,
                                                               extra: dict, label: str) -> None:
    write_record("r.result.json", backbone=backbone, **extra)
    (record,), _ = load_records([str(runs)])
    assert record.pretraining.label == label


def test_a_stopped_pretraining_is_not_a_trial_of_the_finished_one(write_record: WriteRecord, runs: Path) -> None:
    """Two checkpoints of one run (one recipe): the one stopped mid-epoch and the one at the next epoch's end."""
    write_record("stopped.result.json", backbone=pretrained(2, 20, 6, "57" * 32), metrics={"top1": 18.0, "top5": 70.0})
    write_record("later.result.json", backbone=pretrained(2, 20, 0, "58" * 32), metrics={"top1": 19.0, "top5": 71.0})
    main, _ = group(load_records([str(runs)])[0])
    assert sorted((e.pretraining.partial_steps, e.n) for e in main) == [(0, 1), (6, 1)]
