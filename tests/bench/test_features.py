"""``moco bench``: the cells of a matrix share one feature cache (OUTPUT_DIR/features), for the commands whose row
of the table of commands names its key (``feature_cache``): a second evaluation of the same frozen features
(weights' digest, dataset, view, tap: the cache's key) reads them instead of extracting them again."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from classification.linear_transfer.config import TransferSuiteConfig
from cli import app
from cluster.matrix import cells_of, read_matrix
from moco_core.commands import COMMANDS
from moco_core.config import load_config

MATRIX = """\
output_dir: out
checkpoints:
  - {label: r18, path: random, arch: resnet18}
evaluations:
  - {label: full, command: eval transfer, preset: transfer_embedded, options: {datasets: shapes},
     set: [solver.lambdas=3]}
  - {label: coarse, command: eval transfer, preset: transfer_embedded, options: {datasets: shapes},
     set: [solver.lambdas=2]}
  - {label: own, command: eval transfer, set: [features.cache_dir=mine]}
  - {label: knn, command: eval knn}
"""


def test_the_cache_key_of_the_table_is_a_key_of_the_commands_config() -> None:
    for row in COMMANDS.values():
        if row.feature_cache is not None:
            assert row.configs == ("TransferSuiteConfig",)  # the one command with a cache a caller names, so far
            cfg = load_config(TransferSuiteConfig, overrides=[f"{row.feature_cache}=/x"], check=False)
            assert cfg.features.cache_dir == "/x"  # loading refuses a key the config does not have


def test_every_cell_that_caches_features_caches_them_in_one_folder(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.yaml").write_text(MATRIX)
    sets = {c.evaluation.label: [w for w in shlex.split(c.line()) if "=" in w]
            for c in cells_of(read_matrix("m.yaml"), None)}
    shared = f"features.cache_dir={tmp_path / 'out' / 'features'}"
    assert sets == {"full": ["solver.lambdas=3", shared], "coarse": ["solver.lambdas=2", shared],
                    "own": ["features.cache_dir=mine"], "knn": []}


@pytest.mark.slow
def test_a_second_evaluation_of_the_same_features_reads_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two transfer sweeps of random weights on one embedded dataset, one after the other (MOCO_SMOKE)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MOCO_SMOKE", "1")
    (tmp_path / "m.yaml").write_text(MATRIX.split("  - {label: own")[0])
    done = CliRunner().invoke(app, ["bench", "m.yaml", "--devices", "cpu", "--jobs", "1"])
    assert done.exit_code == 0, done.output
    records = {label: json.loads((tmp_path / "out/r18" / label / "shapes/result.json").read_text())
               for label in ("full", "coarse")}
    features = {label: record["transfer"]["features"] for label, record in records.items()}
    assert [part["cached"] for part in features["full"].values()] == [False] * 3  # extracted once, here
    assert [part["cached"] for part in features["coarse"].values()] == [True] * 3  # and read here
    assert {Path(part["file"]).parent for f in features.values() for part in f.values()} == {tmp_path / "out/features"}
    assert len(list((tmp_path / "out/features").glob("features-*.pt"))) == 3
