"""``moco eval retrieval`` records in ``moco report`` (issue 60): a table per query variant (cropped to the bbx,
revisitop's; whole, DINOv2's), a row per pretraining with its trials' mean and spread, each dataset's mAP a column,
and DINOv2's Table 9 beside the whole-query rows of rOxford5k and rParis6k only, each cell checked against
../shared/reference/published_rows.md. Before, such records were skipped as an unknown task."""

from __future__ import annotations

import csv
import io
import statistics
from pathlib import Path

import pytest

from reports.published import load_published
from reports.render import to_csv, to_markdown
from reports.report import build_report
from reports.tables import MISSING, fmt
from tests.reports.test_published_rows import REFERENCE, _section

from .conftest import WriteRecord, base_record

RANDOM = {"source": "random", "format": "random", "arch": "resnet18", "pretrain": {"method": "random init"}}
# (data path, its datasets and their names in the headers, the protocols run)
DATA = {"/data/revisitop": ({"roxford5k": "rOxford5k", "rparis6k": "rParis6k"}, ("medium", "hard")),
        "embedded": ({"rscenes1": "rscenes1", "rscenes2": "rscenes2"}, ("easy", "medium", "hard"))}
VARIANTS = {"cropped": "queries cropped to their bbx, revisitop's protocol",
            "full": "whole query images, as DINOv2 ran them"}
TITLE = "Instance retrieval by one global feature an image (revisitop's mAP; {}): {}"
PRETRAININGS = {"MoCo (R18, 15 ep, embedded) a1b2c3": (None, 40.0), "random init (R18)": (RANDOM, 10.0)}
SCORES = ("map", "mp@1", "mp@5", "mp@10")


def value(base: float, trial: int, dataset: int, variant: str, protocol: str, score: str) -> float:
    """A distinct number for every cell: the variants, datasets, protocols and trials all differ."""
    return (base + 10 * dataset + (5 if variant == "full" else 0) + 2 * ("easy", "medium", "hard").index(protocol)
            + 3 * trial + SCORES.index(score) * 0.25)


def retrieval(path: str, base: float, trial: int) -> dict[str, float]:
    """probes/retrieval/run.py's metric names and order: dataset, variant, protocol, score."""
    datasets, protocols = DATA[path]
    return {f"{name}/{variant}/{protocol}/{score}": value(base, trial, i, variant, protocol, score)
            for i, name in enumerate(datasets) for variant in VARIANTS for protocol in protocols for score in SCORES}


def write_all(write_record: WriteRecord) -> None:
    """2 pretrainings x 2 trials on the real datasets and on the embedded ones."""
    for path in DATA:
        for label, (backbone, base) in PRETRAININGS.items():
            for trial in range(2):
                extra = {"backbone": backbone} if backbone else {}
                write_record(f"{path.strip('/')}/{label.split()[0]}_{trial}/result.json", base_record(
                    task="retrieval", protocol="revisitop", metrics=retrieval(path, base, trial),
                    dataset={"path": path, "datasets": [{"name": n} for n in DATA[path][0]]},
                    config={"queries": list(VARIANTS), "protocols": list(DATA[path][1]), "seed": trial}, **extra))


def tables(markdown: str) -> dict[str, tuple[list[str], dict[str, dict[str, str]]]]:
    """The Markdown's tables by heading: their column names and rows (label -> column -> cell)."""
    found = {}
    for section in markdown.split("\n## ")[1:]:
        lines = section.splitlines()
        cells = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines if line.startswith("| ")]
        found[lines[0]] = (cells[0], {row[0]: dict(zip(cells[0][1:], row[1:], strict=True)) for row in cells[1:]})
    return found


def table9() -> dict[str, dict[str, float]]:
    """DINOv2's Table 9 as the reference prints it, by our published label ("published: DINOv2 (LVD-142M,
    ViT-L/14)"): Oxford Medium / Hard, Paris Medium / Hard under each model."""
    if not REFERENCE.is_file():
        pytest.skip(f"{REFERENCE} is not beside this clone")
    lines = _section(REFERENCE.read_text(encoding="utf-8"), 2).splitlines()
    (at,) = [i for i, line in enumerate(lines) if line.startswith("| 9 Oxford M / H, Paris M / H |")]
    header = [c.strip() for c in lines[next(i for i in range(at, 0, -1) if not lines[i - 1].startswith("|"))]
              .strip("|").split("|")]
    row = [c.strip() for c in lines[at].strip("|").split("|")]
    data = {"MAE": "IN-1M", "DINO": "IN-1M", "DINOv2": "LVD-142M"}
    found = {}
    for model, cell in zip(header[2:], row[2:], strict=True):
        name, size = model.rsplit(" ", 1)
        oxford, paris = (pair.split(" / ") for pair in cell.split(", "))
        found[f"published: {name} ({data[name]}, ViT-{size})"] = {
            "rOxford5k Medium mAP": float(oxford[0]), "rOxford5k Hard mAP": float(oxford[1]),
            "rParis6k Medium mAP": float(paris[0]), "rParis6k Hard mAP": float(paris[1])}
    return found


def test_retrieval_records_make_a_table_a_query_variant_with_dinov2s_rows_beside_the_real_whole_queries(
        write_record: WriteRecord, runs: Path) -> None:
    write_all(write_record)
    report = build_report([str(runs)], published=load_published(), expected={})
    assert not report.skipped, report.skipped  # before: "unknown task 'retrieval'"
    shown = tables(to_markdown(report))
    published = table9()
    assert len(published) == 6
    for path, (datasets, _) in DATA.items():
        for variant, what in VARIANTS.items():
            columns, rows = shown[TITLE.format(what, path.rsplit("/", 1)[-1])]
            shown_protocols = ("medium", "hard")  # Easy, where it ran, is the CSV's
            maps = [f"{header} {p.capitalize()} mAP" for header in datasets.values() for p in shown_protocols]
            assert columns[:2 + len(maps)] == ["Pretraining", "n", *maps], columns
            assert "vs random init (" + maps[0] + ")" in columns
            for label, (_, base) in PRETRAININGS.items():
                trials = [[value(base, t, i, variant, p, "map") for i in range(len(datasets))
                           for p in shown_protocols] for t in range(2)]
                cells = [f"{fmt(statistics.fmean(v))} ± {fmt(statistics.stdev(v))}" for v in zip(*trials, strict=True)]
                assert [rows[label][m] for m in maps] == cells and rows[label]["n"] == "2", (label, rows[label])
            beside = {label: cells for label, cells in rows.items() if label.startswith("published")}
            if path == "embedded" or variant == "cropped":
                assert not beside, (path, variant, list(beside))
                continue
            assert set(beside) == set(published)
            for label, cells in beside.items():
                assert {m: cells[m] for m in maps} == {m: fmt(v) for m, v in published[label].items()}, label
                assert cells["n"] == MISSING


def test_the_csv_holds_every_score_of_both_variants_and_the_published_rows_of_the_real_whole_queries_only(
        write_record: WriteRecord, runs: Path) -> None:
    write_all(write_record)
    rows = list(csv.DictReader(io.StringIO(to_csv(build_report([str(runs)], published=load_published(),
                                                                expected={})))))
    ours = [r for r in rows if r["origin"] == "ours"]
    for path in DATA:
        for variant in VARIANTS:
            section = f"retrieval:revisitop:{path}:{variant} queries"
            for label, (_, base) in PRETRAININGS.items():
                got = {r["metric"]: r for r in ours if r["section"] == section and r["pretraining"] == label}
                expected = {name: [retrieval(path, base, t)[name] for t in range(2)]
                            for name in retrieval(path, base, 0) if f"/{variant}/" in name}
                assert set(got) == set(expected), (section, label)  # mAP and mP@k, of this variant only
                for name, values in expected.items():
                    assert float(got[name]["mean"]) == pytest.approx(statistics.fmean(values))
                    assert float(got[name]["std"]) == pytest.approx(statistics.stdev(values))
                    assert got[name]["n"] == "2" and got[name]["model"] == f"{variant} queries"
                if label.startswith("MoCo"):  # compared with random init on every metric
                    assert got[f"{next(iter(DATA[path][0]))}/{variant}/medium/map"]["baseline"] == "random init (R18)"
    published = [r for r in rows if r["origin"] == "published"]
    assert {r["section"] for r in published} == {"retrieval:revisitop:/data/revisitop:full queries"}
    assert len(published) == 6 * 4 and {r["metric"].split("/")[0] for r in published} == {"roxford5k", "rparis6k"}


def test_a_failed_retrieval_run_is_a_failed_row_of_the_variants_it_asked_for(write_record: WriteRecord,
                                                                             runs: Path) -> None:
    """A failed record holds no metrics: its config's query variants say which tables its row belongs to."""
    write_all(write_record)
    backbone = {**base_record()["backbone"], "arch": "resnet50"}
    write_record("failed/result.json", base_record(
        task="retrieval", protocol="revisitop", status="failed", failure="out of memory", metrics=None,
        backbone=backbone, dataset={"path": "/data/revisitop"}, config={"queries": ["full"]}))
    report = build_report([str(runs)], published=load_published(), expected={})
    assert not report.skipped, report.skipped
    shown = tables(to_markdown(report))
    full = shown[TITLE.format(VARIANTS["full"], "revisitop")][1]
    (failed,) = [cells for label, cells in full.items() if label.startswith("MoCo (R50")]
    assert failed["rOxford5k Medium mAP"] == "failed" and "out of memory" in failed["Note"]
    assert not any(label.startswith("MoCo (R50") for label in shown[TITLE.format(VARIANTS["cropped"], "revisitop")][1])
