"""Monitors on the data the user named (issue 51, finding 2): --data (or data.path) moves every data path that
follows it, the kNN monitor's too, unless the command sets it apart; --print-config says where each comes from.
``moco pretrain -c mocov3_embedded --data DIR`` kept data.knn_path: embedded, and its logged kNN accuracy was the
built-in shapes' beside the user's own linear numbers."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from cli import app
from moco_core.config import load_config
from moco_core.pretrain_config import PretrainConfig


def printed(args: list[str]) -> tuple[str, dict]:
    result = CliRunner().invoke(app, ["pretrain", *args, "--print-config"])
    assert result.exit_code == 0, result.output
    text = result.stdout
    return text, yaml.safe_load(text)


@pytest.mark.parametrize("preset", ["mocov3_embedded", "embedded", "supervised_embedded", "mocov3_32px"])
def test_data_moves_the_knn_monitor_with_it(preset: str, tmp_path: Path) -> None:
    text, cfg = printed(["-c", preset, "--data", str(tmp_path)])
    assert cfg["data"]["path"] == str(tmp_path) and cfg["data"]["knn_path"] == str(tmp_path)
    assert text.splitlines()[1] == (f"# data.path: '{tmp_path}' (--data); data.knn_path: '{tmp_path}' (follows "
                                    f"data.path)")
    _, by_set = printed(["-c", preset, "--set", f"data.path={tmp_path}"])  # data.path by --set moves it too
    assert by_set["data"]["knn_path"] == str(tmp_path)


def test_a_monitor_set_apart_stays_apart(tmp_path: Path) -> None:
    text, cfg = printed(["-c", "mocov3_embedded", "--data", str(tmp_path), "--set", "data.knn_path=embedded"])
    assert cfg["data"]["knn_path"] == "embedded"
    assert text.splitlines()[1] == f"# data.path: '{tmp_path}' (--data); data.knn_path: 'embedded' (--set)"
    text, cfg = printed(["-c", "mocov3_embedded"])  # nothing moved: both the preset's
    assert cfg["data"]["knn_path"] == "embedded"
    assert text.splitlines()[1] == ("# data.path: 'embedded' (preset mocov3_embedded); data.knn_path: 'embedded' "
                                    "(preset mocov3_embedded)")


def test_a_preset_whose_monitor_reads_other_data_keeps_it(tmp_path: Path) -> None:
    from moco_core.config import data_sources

    preset = tmp_path / "mine.yaml"
    preset.write_text("_base_: " + str(Path(__file__).resolve().parents[2] / "configs" / "embedded.yaml") +
                      "\ndata:\n  knn_path: /labelled/elsewhere\n")
    cfg = load_config(PretrainConfig, str(preset), flags={"data": {"path": str(tmp_path)}})
    assert cfg.data.knn_path == "/labelled/elsewhere"  # the preset set it apart from data.path
    assert data_sources(PretrainConfig, str(preset), flags={"data": {"path": str(tmp_path)}}) == {
        "data.path": "--data", "data.knn_path": f"preset {preset}"}
