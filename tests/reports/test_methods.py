"""Rows of other methods' weights (issue 47): labelled by the method their record states, grouped by method and
backbone after random init and the supervised reference, each method's published number beside its rows where
the setting matches."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reports.published import load_published
from reports.render import to_markdown
from reports.report import build_report
from tests.reports.conftest import WriteRecord


def released(method: str, arch: str, sha: str, *, fmt: str = "torchvision", stated_by: str = "--weights-format",
             encoder: str = "backbone", normalisation: str = "imagenet", registers: int = 0) -> dict[str, Any]:
    """The backbone section moco_core.model.backbone.BackboneInfo writes for another codebase's weights."""
    return {"source": f"/weights/{method}.pth", "format": fmt, "arch": arch, "sha256": sha * 32,
            "pretrain": {"method": method, "stated_by": stated_by}, "encoder": encoder,
            "normalisation": {"name": normalisation, "mean": [0.0] * 3, "std": [1.0] * 3},
            "model": {"family": "vit", "registers": registers} if arch.startswith("vit") else {"family": "resnet"}}


IMAGENET = {"path": "/data/imagenet", "folder": "imagenet", "classes": 1000}


def _tables(runs: Path) -> dict[str, Any]:
    return {t.title: t for t in build_report([str(runs)], published=load_published(), expected={}).tables}


def test_methods_are_grouped_after_the_floor_and_the_reference(write_record: WriteRecord, runs: Path) -> None:
    write_record("byol.result.json", backbone=released("byol", "resnet18", "b1", encoder="online"))
    write_record("dino.result.json", backbone=released("dino", "resnet18", "d1", fmt="dino-full", stated_by="file",
                                                       encoder="teacher"))
    write_record("simclr.result.json", backbone=released("simclr-v1", "resnet18", "c1", normalisation="none"))
    write_record("swav.result.json", backbone=released("swav", "resnet18", "e1"))
    write_record("moco.result.json")
    write_record("random.result.json", backbone={"source": "random", "format": "random", "arch": "resnet18",
                                                 "sha256": None, "pretrain": {"method": "random init"}})
    write_record("sup.result.json", backbone=released("supervised", "resnet18", "f1"))
    (table,) = _tables(runs).values()
    labels = [row.cells[0].text for row in table.rows]
    assert labels == [
        "random init (R18)", "supervised (torchvision weights, R18) f1f1f1", "MoCo (R18, 15 ep, embedded) a1b2c3",
        "DINO (R18, dino-full, teacher) d1d1d1", "SwAV (R18, torchvision, backbone, method named by --weights-format) "
        "e1e1e1", "BYOL (R18, torchvision, online, method named by --weights-format) b1b1b1",
        "SimCLR v1 (R18, torchvision, backbone, method named by --weights-format, unnormalised input) c1c1c1"]
    assert "published" not in [c.name for c in table.columns]  # the embedded data: no published setting


def test_each_methods_published_number_is_beside_its_rows(write_record: WriteRecord, runs: Path) -> None:
    linear = {"optim": {"epochs": 100}}  # the preset's length: the published rows' setting
    write_record("lin/dino.result.json", backbone=released("dino", "resnet50", "d1", fmt="dino-full",
                                                           stated_by="file", encoder="teacher"),
                 dataset=IMAGENET, config=linear)
    write_record("lin/barlow.result.json", backbone=released("barlowtwins", "resnet50", "b2"), dataset=IMAGENET,
                 config=linear)
    write_record("lin/dinov2.result.json", backbone=released("dinov2", "vit_small_p14", "a3", fmt="dinov2-hub",
                                                             stated_by="file", registers=4),
                 dataset=IMAGENET, config={"optim": {"epochs": 90}}, protocol="linear-mocov3")
    write_record("lin/short.result.json", backbone=released("dino", "resnet50", "d9"), dataset=IMAGENET,
                 config={"optim": {"epochs": 5}})
    write_record("knn/dino20.result.json", task="knn", protocol="knn", dataset=IMAGENET, config={"k": 20},
                 backbone=released("dino", "vit_small", "d2", stated_by="file"))
    write_record("knn/dino200.result.json", task="knn", protocol="knn", dataset=IMAGENET, config={"k": 200},
                 backbone=released("dino", "vit_small", "d3", stated_by="file"))
    tables = _tables(runs)
    cell = {(title, row.cells[0].text.split(" (")[0]): row.cells for title, table in tables.items()
            for row in table.rows}
    linear_title = "Linear classification (the paper's protocol, 100 epochs): imagenet"
    assert [c.name for c in tables[linear_title].columns][-2:] == ["published top-1", "Note"]
    assert cell[(linear_title, "DINO")][-2].text == "75.3"  # DINO's README, ResNet-50
    assert "published: DINO (DINO's linear protocol), source: facebookresearch/dino README" in \
        cell[(linear_title, "DINO")][-1].text
    assert cell[(linear_title, "Barlow Twins")][-2].text == "73.3"
    v3 = "Linear classification (the MoCo v3 protocol, 90 epochs): imagenet"
    assert cell[(v3, "DINOv2")][-2].text == "80.9"  # ViT-S/14 with 4 registers, not the 81.1 of the one without
    short = "Linear classification (5 of the paper's 100 epochs): imagenet"
    assert "published" not in [c.name for c in tables[short].columns]  # a shortened protocol: no published number
    knn20 = "kNN classification (weighted kNN, k 20): imagenet"
    assert cell[(knn20, "DINO")][-2].text == "74.5"  # DINO's kNN is k=20
    knn200 = "kNN classification (weighted kNN): imagenet"
    assert "published" not in [c.name for c in tables[knn200].columns]
    markdown = to_markdown(build_report([str(runs)], published=load_published(), expected={}))
    assert "| published top-1 |" in markdown and "75.3" in markdown
