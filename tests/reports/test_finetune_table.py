"""The fine-tuning table: titled by the preset its length and data name, the paper's rows (appendix A.6, A.7)
beside runs of the same recipe on ImageNet or iNaturalist 2018, never beside a shortened run or the embedded data."""

from __future__ import annotations

from pathlib import Path

from classification.finetune import load_finetune_config
from reports.protocols import FINETUNE_PRESETS
from reports.published import load_published
from reports.report import build_report

from .conftest import WriteRecord, base_record


def finetune_record(path: str, epochs: int, arch: str = "resnet50", top1: float = 70.0, **fields: object) -> dict:
    record = base_record(task="finetune", protocol="finetune", metrics={"top1": top1, "top5": 90.0},
                         config={"optim": {"epochs": epochs}}, dataset={"path": path, "classes": 8}, **fields)
    record["backbone"]["arch"] = arch
    return record


def test_the_preset_lengths_are_the_presets() -> None:
    """reports cannot import classification; it restates the presets' lengths, and these must be theirs."""
    for preset, epochs, _ in FINETUNE_PRESETS.values():
        assert load_finetune_config(preset, ["data.path=x"]).optim.epochs == epochs, preset


def test_published_rows_stand_beside_runs_of_the_papers_recipes(write_record: WriteRecord, runs: Path) -> None:
    write_record("inat/result.json", finetune_record("/data/inat2018", 100))
    write_record("imagenet/result.json", finetune_record("/data/imagenet", 90))
    write_record("short/result.json", finetune_record("/data/imagenet", 9))
    write_record("embedded/result.json", finetune_record("embedded", 5, arch="resnet18"))
    report = build_report([str(runs)], published=load_published(), expected={})
    tables = {t.title: t for t in report.tables}
    assert list(tables) == [  # by data path, the preset's length first
        "Fine-tuning (the paper's ImageNet recipe, 90 epochs): imagenet",
        "Fine-tuning (9 of the paper's ImageNet recipe's 90 epochs): imagenet",
        "Fine-tuning (the paper's iNaturalist recipe, 100 epochs): inat2018",
        "Fine-tuning (the embedded preset, 5 epochs): embedded",
    ]

    def labels(title: str) -> list[str]:
        return [row.cells[0].text for row in tables[title].rows]

    inat = labels("Fine-tuning (the paper's iNaturalist recipe, 100 epochs): inat2018")
    assert inat[1:] == ["published (secondary): random init (R50)", "published (secondary): supervised (IN-1M, R50)",
                        "published (secondary): MoCo v1 200ep (IN-1M, R50)",
                        "published (secondary): MoCo v1 (IG-1B, R50)"]
    imagenet = tables["Fine-tuning (the paper's ImageNet recipe, 90 epochs): imagenet"]
    published = {row.cells[0].text: row.cells[2].text for row in imagenet.rows[1:]}
    assert published == {"published (secondary): random init (R50)": "76.5",
                         "published (secondary): MoCo v1 200ep (IN-1M, R50)": "77.0",
                         "published (secondary): MoCo v1 (IG-1B, R50)": "77.3"}
    assert len(labels("Fine-tuning (9 of the paper's ImageNet recipe's 90 epochs): imagenet")) == 1
    embedded = tables["Fine-tuning (the embedded preset, 5 epochs): embedded"]
    assert len(embedded.rows) == 1 and any("moco eval finetune random --arch resnet18 -c finetune_embedded "
                                           "--data embedded --set optim.epochs=5" in n for n in embedded.notes)
