"""MoCo v3 in the report: the v3 linear protocol's tables (title, subtitle, chance level, random-init hint), the
published v3 rows beside it and only there, the labels of v3 pretrainings and ViTs, v3's momentum sweep in a table
of its own, and all four formats carrying it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reports.protocols import V3_PROTOCOL
from reports.published import load_published
from reports.render import to_csv, to_html, to_latex, to_markdown
from reports.report import build_report

from .conftest import WriteRecord, base_record

IMAGENET = {"path": "/data/imagenet", "classes": 1000}
V1_PROTOCOL_TITLE = "Linear classification (the paper's protocol, 100 epochs): imagenet"
V3_TITLE = "Linear classification (the MoCo v3 protocol, 90 epochs): imagenet"


def v3_backbone(arch: str = "resnet50", epochs: int = 100, data: str = "/data/imagenet", sha: str = "3c",
                **v3: Any) -> dict[str, Any]:
    """Our MoCo v3 checkpoint as BackboneInfo writes it (its pretraining config with a v3 section)."""
    config = {"method": "mocov3", "model": {"arch": arch}, "v3": {"momentum": 0.99, "momentum_cos": True, **v3},
              "optim": {"epochs": epochs, "schedule": "cosine"}, "data": {"path": data}}
    return {"source": f"/runs/{arch}/checkpoint_last.pth.tar", "format": "moco-suite", "arch": arch,
            "sha256": sha * 32, "pretrain": {"method": "mocov3", "epochs": epochs, "arch": arch, "config": config}}


def v1_backbone(arch: str = "resnet50") -> dict[str, Any]:
    return {**base_record()["backbone"], "arch": arch, "sha256": "b5" * 32}


def random_backbone(arch: str) -> dict[str, Any]:
    return {"source": "random", "format": "random", "arch": arch, "sha256": None,
            "pretrain": {"method": "random init"}}


def v3_linear(epochs: int | None, backbone: dict[str, Any], dataset: dict[str, Any] | None = None,
              **fields: Any) -> dict[str, Any]:
    """A linear record of the MoCo v3 protocol as classification/linear.py writes it: cosine, lr scaled, no
    milestones."""
    arch = backbone["arch"]
    optim = {"lr": 3.0 if arch.startswith("vit_") else 0.1, "momentum": 0.9, "weight_decay": 0.0,
             "batch_size": 1024, "milestones": [], "schedule": "cosine", "scale_lr": True}
    config = {"arch": arch, "optim": {**optim, **({"epochs": epochs} if epochs is not None else {})}}
    return base_record(**{"protocol": V3_PROTOCOL, "backbone": backbone, "dataset": dataset or IMAGENET,
                          "config": config, "note": "the MoCo v3 protocol", **fields})


def v1_linear(epochs: int, backbone: dict[str, Any], dataset: dict[str, Any] | None = None) -> dict[str, Any]:
    return base_record(backbone=backbone, dataset=dataset or IMAGENET,
                       config={"optim": {"lr": 30.0, "epochs": epochs}})


def tables_by_title(runs: Path, **kwargs: Any) -> dict[str, Any]:
    report = build_report([str(runs)], published=load_published(), expected={}, **kwargs)
    return {t.title: t for t in report.tables}


def published_labels(table: Any) -> list[str]:
    return [row.cells[0].text for row in table.rows if row.kind in ("published", "secondary")]


def test_titles_name_the_v3_protocol_and_its_length(write_record: WriteRecord, runs: Path) -> None:
    embedded = {"path": "embedded", "classes": 8}
    for epochs in (90, 30, 120, None):
        write_record(f"v3_{epochs}.result.json", v3_linear(epochs, v3_backbone(), embedded))
    write_record("v1.result.json", v1_linear(100, v1_backbone(), embedded))
    write_record("v1_none.result.json", base_record(config={}))
    titles = list(tables_by_title(runs))
    assert titles == [
        "Linear classification (the paper's protocol, 100 epochs): embedded",
        "Linear classification (epochs not recorded): embedded",
        "Linear classification (the MoCo v3 protocol, 90 epochs): embedded",  # its own length first
        "Linear classification (120 epochs; the MoCo v3 protocol's: 90): embedded",
        "Linear classification (30 of the MoCo v3 protocol's 90 epochs): embedded",
        "Linear classification (the MoCo v3 protocol, epochs not recorded): embedded",  # not v1/v2's title
    ]


def test_subtitle_and_chance_level_of_a_v3_table(write_record: WriteRecord, runs: Path) -> None:
    write_record("a.result.json", v3_linear(90, v3_backbone(), {"path": "/data/imagenet", "classes": 1000}))
    table = tables_by_title(runs)[V3_TITLE]
    assert table.subtitle.startswith("Evaluation data: /data/imagenet. Protocol: linear-mocov3. The protocol of "
                                     "the official moco-v3 main_lincls.py")
    assert "lr per 256 images 0.1 for a ResNet and 3 for a ViT" in table.subtitle
    assert "Chance level: top-1 0.1%, top-5 0.5% (1000 classes)." in table.notes


def hint(table: Any) -> str:
    (found,) = [n for n in table.notes if n.startswith("No random-init row")]
    return found.split("beside them: ", 1)[1]


def test_the_random_init_hint_runs_the_v3_protocol_preset_of_each_arch(write_record: WriteRecord,
                                                                        runs: Path) -> None:
    write_record("r50.result.json", v3_linear(90, v3_backbone("resnet50")))
    write_record("vit.result.json", v3_linear(90, v3_backbone("vit_small", 300, sha="5f")))
    write_record("emb_r18.result.json", v3_linear(30, v3_backbone("resnet18", 30, "embedded"),
                                                 {"path": "embedded", "classes": 8}))
    write_record("emb_vit.result.json", v3_linear(30, v3_backbone("vit_nano_p4", 30, "embedded", sha="77"),
                                                  {"path": "/data/my set", "classes": 8}))
    tables = tables_by_title(runs)
    assert hint(tables[V3_TITLE]) == (
        f"moco eval linear random --arch resnet50 -c lincls_mocov3 --data /data/imagenet --set optim.epochs=90 "
        f"--output-dir {runs}/random_resnet50; "
        f"moco eval linear random --arch vit_small -c lincls_mocov3_vit --data /data/imagenet --set optim.epochs=90 "
        f"--output-dir {runs}/random_vit_small")
    assert hint(tables["Linear classification (30 of the MoCo v3 protocol's 90 epochs): embedded"]) == (
        "moco eval linear random --arch resnet18 -c lincls_mocov3_embedded --data embedded --set optim.epochs=30 "
        f"--output-dir {runs}/random_resnet18")
    # other data than the embedded set: the ImageNet preset of the protocol, with the data given
    assert hint(tables["Linear classification (30 of the MoCo v3 protocol's 90 epochs): my set"]) == (
        "moco eval linear random --arch vit_nano_p4 -c lincls_mocov3_vit --data '/data/my set' "
        f"--set optim.epochs=30 --output-dir {runs}/random_vit_nano_p4")


def test_a_random_vit_row_is_the_floor_of_a_v3_table(write_record: WriteRecord, runs: Path) -> None:
    embedded = {"path": "embedded", "classes": 8}
    for seed, top1 in enumerate((20.0, 22.0)):
        write_record(f"rand{seed}.result.json", v3_linear(30, random_backbone("vit_nano_p4"), embedded,
                                                         metrics={"top1": top1, "top5": 70.0}))
    for seed, top1 in enumerate((40.0, 44.0)):
        write_record(f"v3_{seed}.result.json", v3_linear(30, v3_backbone("vit_nano_p4", 30, "embedded",
                                                                          sha=f"a{seed}"),
                                                         embedded, metrics={"top1": top1, "top5": 90.0}))
    (table,) = tables_by_title(runs).values()
    assert [row.cells[0].text for row in table.rows] == ["random init (ViT-nano/4)",
                                                         "MoCo v3 (ViT-nano/4, 30 ep, embedded)"]
    assert not any(n.startswith("No random-init row") for n in table.notes)
    # 42 - 21 = 21; SE sqrt(8 / 2 + 2 / 2) = sqrt(5) = 2.236: 9.4 SE
    (margin,) = [n for n in table.notes if n.startswith("Above random init")]
    assert margin.endswith("MoCo v3 (ViT-nano/4, 30 ep, embedded) +21.0 (9.4 SE).")


def test_each_row_is_measured_against_the_random_init_of_its_arch(write_record: WriteRecord, runs: Path) -> None:
    """A table of R18 and ViT rows with a random-init row for each: each row's margin is over its own arch's floor
    (with two floors, no margin was given at all)."""
    embedded = {"path": "embedded", "classes": 8}
    for arch, randoms, v3s in (("resnet18", (28.0, 30.0), (40.0, 44.0)), ("vit_nano_p4", (20.0, 22.0), (21.0, 23.0))):
        for seed, top1 in enumerate(randoms):
            write_record(f"rand_{arch}{seed}.result.json", v3_linear(30, random_backbone(arch), embedded,
                                                                     metrics={"top1": top1, "top5": 70.0}))
        for seed, top1 in enumerate(v3s):
            write_record(f"v3_{arch}{seed}.result.json", v3_linear(30, v3_backbone(arch, 30, "embedded",
                                                                                   sha=f"{arch[0]}{seed}"),
                                                                   embedded, metrics={"top1": top1, "top5": 90.0}))
    (table,) = tables_by_title(runs).values()
    (margin,) = [n for n in table.notes if n.startswith("Above random init")]
    # R18: 42 - 29 = 13, SE sqrt(8/2 + 2/2) = 2.236: 5.8 SE; ViT: 22 - 21 = 1, SE sqrt(2/2 + 2/2) = 1.414: 0.7 SE
    assert "MoCo v3 (R18, 30 ep, embedded) +13.0 (5.8 SE)" in margin
    assert "MoCo v3 (ViT-nano/4, 30 ep, embedded) +1.0 (0.7 SE)" in margin


def test_published_v3_rows_only_beside_the_v3_protocol_of_their_arch(write_record: WriteRecord,
                                                                     runs: Path) -> None:
    write_record("v3_r50.result.json", v3_linear(90, v3_backbone("resnet50")))
    write_record("v3_vit.result.json", v3_linear(90, v3_backbone("vit_small", 300, sha="5f")))
    write_record("v1_r50.result.json", v1_linear(100, v1_backbone()))
    write_record("v3_short.result.json", v3_linear(30, v3_backbone("resnet50")))
    write_record("v3_cached.result.json", v3_linear(90, v3_backbone("resnet50"), protocol="linear-cached"))
    write_record("v3_other.result.json", v3_linear(90, v3_backbone("resnet50"), {"path": "/data/cifar"}))
    tables = tables_by_title(runs)
    assert published_labels(tables[V3_TITLE]) == [
        "published: MoCo v3 100ep (IN-1M, R50)", "published: MoCo v3 300ep (IN-1M, R50)",
        "published: MoCo v3 1000ep (IN-1M, R50)", "published: MoCo v3 300ep (IN-1M, ViT-S/16)"]  # no ViT-B/16
    v1_rows = published_labels(tables[V1_PROTOCOL_TITLE])
    assert v1_rows and not any("v3" in label for label in v1_rows)
    assert published_labels(tables["Linear classification (30 of the MoCo v3 protocol's 90 epochs): imagenet"]) == []
    assert published_labels(tables["Linear classification (the MoCo v3 protocol, 90 epochs): cifar"]) == []
    cached = next(t for title, t in tables.items() if "cached" in title)
    assert published_labels(cached) == []


def test_a_v3_checkpoint_under_the_v1_protocol_gets_no_v3_rows(write_record: WriteRecord, runs: Path) -> None:
    """Published rows follow the evaluation protocol, not the pretraining: a v3 R50 evaluated by the paper's
    protocol sits beside MoCo v1/v2's published numbers, and the v3 ones (another protocol) stay out."""
    write_record("a.result.json", v1_linear(100, v3_backbone("resnet50")))
    (table,) = tables_by_title(runs).values()
    labels = published_labels(table)
    assert "published: MoCo v1 200ep (IN-1M, R50)" in labels and not any("v3" in label for label in labels)
    assert table.rows[0].cells[0].text == "MoCo v3 (R50, 100 ep, imagenet) 3c3c3c"


def test_every_format_carries_the_v3_table(write_record: WriteRecord, runs: Path) -> None:
    write_record("vit.result.json", v3_linear(90, v3_backbone("vit_base", 300, sha="5f")))
    report = build_report([str(runs)], published=load_published(), expected={})
    markdown, latex, page, csv = to_markdown(report), to_latex(report), to_html(report), to_csv(report)
    label, published = "MoCo v3 (ViT-B/16, 300 ep, imagenet) 5f5f5f", "published: MoCo v3 300ep (IN-1M, ViT-B/16)"
    for text in (markdown, latex, page):
        assert "the MoCo v3 protocol, 90 epochs" in text
        assert label in text and published in text
        assert "lincls_mocov3_vit" in text.replace(r"\_", "_")
    rows = [line for line in csv.splitlines() if "linear-mocov3" in line]
    assert any(label in line and '"mocov3","vit_base"' in line for line in rows)
    assert any('"published"' in line and '"ViT-B/16"' in line and '"90ep v3 lincls"' in line for line in rows)


def test_the_curves_name_the_v3_protocol(write_record: WriteRecord, runs: Path, tmp_path: Path) -> None:
    run = tmp_path / "pretrain"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 5, "epoch": 0, "loss": 6.0, "accuracy": 10.0}\n')
    backbone = {**v3_backbone("resnet18", 30, "embedded"), "source": str(run / "checkpoint_last.pth.tar")}
    embedded = {"path": "embedded", "classes": 8}
    write_record("short.result.json", v3_linear(30, backbone, embedded, metrics={"top1": 40.0, "top5": 90.0}))
    write_record("v1.result.json", v1_linear(5, backbone, embedded) | {"metrics": {"top1": 20.0, "top5": 70.0}})
    (curve,) = build_report([str(runs)], published=[], expected={}).curves
    # the longer evaluation, of the protocol v3 is evaluated by
    assert (curve.linear, curve.linear_label) == (((30, 40.0),), "MoCo v3 linear, 30 ep (the protocol's: 90)")
    write_record("full.result.json", v3_linear(90, backbone, embedded, metrics={"top1": 45.0, "top5": 91.0}))
    write_record("v1full.result.json", v1_linear(100, backbone, embedded) | {"metrics": {"top1": 35.0, "top5": 80.0}})
    (curve,) = build_report([str(runs)], published=[], expected={}).curves
    assert (curve.linear, curve.linear_label) == (((30, 45.0),), "MoCo v3 linear protocol (90 ep)")
