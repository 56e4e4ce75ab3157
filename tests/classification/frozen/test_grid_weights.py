"""The grid and few-shot read other methods' weights as every evaluation does (issue 47's --weights-format): the
pixels normalised as the weights' method trained, the record naming the method and the normalisation, and a file
that does not say what it is refused in one line until --weights-format names it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import classification.frozen.grid
import classification.frozen.shots
from cli import app
from moco_core.model.weights.formats import UNNORMALISED
from tests import weights_layouts as layouts
from tests.layouts import imagenet_layout

SMALL = ["--set", "optim.batch_size=8", "--set", "optim.epochs=1", "--set", "data.crop_size=32",
         "--set", "data.resize=36", "--set", "grid.lrs=[0.1,1]", "--workers", "0", "--device", "cpu", "--quiet"]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("grid_weights")
    r18 = layouts.resnet_state()
    return {"simclr": layouts.simclr_v1(root / "simclr.pth", r18),
            "plain": layouts.torchvision_file(root / "resnet18.pth", layouts.without(r18, "fc.")),
            "data": imagenet_layout(root / "imagenet", train_per_class=6)}


def _spy(monkeypatch: pytest.MonkeyPatch, module: object) -> list[tuple[list[float], list[float]]]:
    """What load_splits built the center-crop view with: the mean and std of its last step."""
    seen: list[tuple[list[float], list[float]]] = []
    real = module.load_splits  # type: ignore[attr-defined]

    def spy(*args: object, **kwargs: object) -> object:
        splits = real(*args, **kwargs)
        step = splits.val.transform.transforms[-1]
        seen.append((list(step.mean), list(step.std)))
        return splits

    monkeypatch.setattr(module, "load_splits", spy)
    return seen


@pytest.mark.parametrize("mode", ["grid", "shots"])
def test_simclr_weights_named_by_weights_format_get_unnormalised_pixels(
        files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    module = classification.frozen.grid if mode == "grid" else classification.frozen.shots
    seen = _spy(monkeypatch, module)
    monkeypatch.chdir(tmp_path)
    extra = ["--grid"] if mode == "grid" else ["--shots", "1", "--tries", "1"]
    done = CliRunner().invoke(app, ["eval", "linear", str(files["simclr"]), *extra, "--data", str(files["data"]),
                                    "--weights-format", "simclr-v1", "--output-dir", str(tmp_path / "run"), *SMALL])
    assert done.exit_code == 0, done.output
    assert seen == [([0.0, 0.0, 0.0], [1.0, 1.0, 1.0])]  # SimCLR's converted weights take [0, 1] pixels
    record = json.loads((tmp_path / "run" / "result.json").read_text())
    backbone = record["backbone"]
    assert (backbone["pretrain"]["method"], backbone["pretrain"]["stated_by"]) == ("simclr-v1", "--weights-format")
    assert backbone["normalisation"] == UNNORMALISED.record() and record["sanity_check"] == "passed"
    assert record["config"]["run"]["weights_format"] == "simclr-v1"


def test_a_file_that_names_no_method_is_refused_in_one_line(files: dict[str, Path], tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    base = ["eval", "linear", str(files["plain"]), "--grid", "--data", str(files["data"]), *SMALL]
    done = runner.invoke(app, [*base, "--output-dir", str(tmp_path / "refused")])
    assert done.exit_code == 2 and done.output.startswith("error: ") and done.output.count("\n") == 1, done.output
    assert "--weights-format" in done.output and not (tmp_path / "refused" / "result.json").exists()
    bad = runner.invoke(app, [*base, "--weights-format", "nonsense", "--output-dir", str(tmp_path / "bad")])
    assert bad.exit_code == 2 and bad.output.startswith("error: run.weights_format: "), bad.output
    named = runner.invoke(app, [*base, "--weights-format", "supervised", "--output-dir", str(tmp_path / "named")])
    assert named.exit_code == 0, named.output
    record = json.loads((tmp_path / "named" / "result.json").read_text())
    assert record["protocol"] == "linear-grid" and record["backbone"]["pretrain"]["method"] == "supervised"
