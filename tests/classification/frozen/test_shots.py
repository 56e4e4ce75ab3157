"""classification/frozen/shots.py: few-shot linear and kNN on cached features: the same recorded draws for both
readers, the strength chosen on held-out train images, hand-worked scores, the cache reused on --resume, and the
CLI's one-line refusals."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from classification.frozen import fewshot
from classification.frozen.grid_config import FewShotConfig, GridConfig, GridRunConfig, load_grid_config
from classification.frozen.shots import _shots, fewshot_eval
from classification.splits import LinearDataConfig
from moco_core import smoke
from moco_core.config import ConfigError
from moco_core.frozen.features import FeatureSet
from tests.layouts import imagenet_layout


def _at(degrees: list[float]) -> torch.Tensor:
    radians = torch.tensor(degrees, dtype=torch.float64) * math.pi / 180
    return torch.stack([radians.cos(), radians.sin()], 1).float()


def test_both_readers_hand_worked() -> None:
    """Three classes pointing at 0, 120 and 240 degrees, three images each; val: one image near each class and one
    near class 0 labelled 1, which no reader can get right: 3 of 4 for every draw, for both readers."""
    pool = FeatureSet({"x": _at([0, 2, -2, 120, 122, 118, 240, 242, 238]) * 3},
                      torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2]))
    val = FeatureSet({"x": _at([10, 130, 250, 5]) * 3}, torch.tensor([0, 1, 2, 1]))
    cfg = GridConfig(fewshot=FewShotConfig(shots=(1,), tries=3, knn_k=1, max_iter=100, lambdas=(1e-3, 1.0)))
    queries = torch.nn.functional.normalize(val.features["x"], dim=1)
    result = _shots(cfg, 1, pool, pool, val, queries, "x", 3, torch.device("cpu"))
    assert result["linear"]["mean"] == result["knn"]["mean"] == 75.0
    assert result["linear"]["std"] == result["knn"]["std"] == 0.0
    linear, knn = result["linear"]["runs"], result["knn"]["runs"]
    assert [r["seed"] for r in knn] == [r["seed"] for r in linear] == [fewshot.shot_seed(0, 1, t) for t in range(3)]
    assert all(r["images"] == 3 for r in knn) and all(r["lambda"] in (1e-3, 1.0) for r in linear)


def _config(data: Path, out: Path, **fewshot_options: object) -> GridConfig:
    return GridConfig(arch="resnet18", fewshot=FewShotConfig(**{"shots": (1, 2), "tries": 2, "max_iter": 50,
                                                                "lambdas": (1e-2, 1.0, 1e2), **fewshot_options}),
                      data=LinearDataConfig(path=str(data), crop_size=32, resize=36, workers=0),
                      run=GridRunConfig(output_dir=str(out), device="cpu"))


def test_the_record_and_the_cache(tmp_path: Path) -> None:
    data = imagenet_layout(tmp_path / "imagenet", train_per_class=6)
    record = json.loads(fewshot_eval(_config(data, tmp_path / "run"), "random", show_progress=False).read_text())
    assert record["task"] == "fewshot" and record["protocol"] == "fewshot" and record["sanity_check"] == "passed"
    assert list(record["metrics"]) == ["1shot_linear_top1", "1shot_knn_top1", "2shot_linear_top1", "2shot_knn_top1"]
    assert record["selection"]["split"]["images"] == 4 and record["tap"] == "layer4"  # one held out a class
    one, two = record["fewshot"]
    assert [r["images"] for r in one["knn"]["runs"]] == [4, 4] and [r["images"] for r in two["knn"]["runs"]] == [8, 8]
    assert record["metrics"]["2shot_knn_top1"] == two["knn"]["mean"]
    assert not record["features"]["train"]["cached"] and len(list((tmp_path / "run" / "features").iterdir())) == 2
    with pytest.raises(ConfigError, match="already holds a finished evaluation"):
        fewshot_eval(_config(data, tmp_path / "run"), "random", show_progress=False)
    with pytest.MonkeyPatch.context() as env:  # a smoke run never carries on a real one
        env.setenv("MOCO_SMOKE", "1")
        with pytest.raises(smoke.ModeMismatch, match="holds a real run"):
            fewshot_eval(_config(data, tmp_path / "run"), "random", show_progress=False, resume=True)
    again = json.loads(fewshot_eval(_config(data, tmp_path / "run"), "random", show_progress=False,
                                    resume=True).read_text())
    assert again["features"]["train"]["cached"] and again["features"]["val"]["cached"]
    assert again["metrics"] == record["metrics"]


def test_options_are_checked_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from cli import app

    for override, message in (("fewshot.shots=[0]", "fewshot.shots: must be >= 1"),
                              ("fewshot.tries=0", "fewshot.tries: must be >= 1")):
        with pytest.raises(ConfigError, match=message):
            load_grid_config("lincls_grid_embedded", [override])
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    base = ["eval", "linear", "random", "--arch", "resnet18", "-c", "lincls_grid_embedded"]
    for args, message in ((["--shots", "1,x"], "error: --shots: expected numbers >= 1"),
                          (["--shots", "1", "--nproc", "2"], "error: --nproc: --shots runs in one process"),
                          (["--shots", "1", "--robustness", str(tmp_path)], "error: robustness.root: scores the")):
        done = runner.invoke(app, [*base, *args])
        assert done.exit_code == 2 and done.output.startswith(message) and done.output.count("\n") == 1, done.output
    shown = runner.invoke(app, [*base, "--shots", "1,5", "--tries", "3", "--print-config"])
    assert "shots:\n  - 1\n  - 5\n  tries: 3" in shown.output
    assert "output_dir: runs/lincls_grid_embedded_fewshot/random_resnet18" in shown.output
