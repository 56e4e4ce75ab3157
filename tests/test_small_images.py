"""Issue 57, "Resolution follows the data" and part of its friction list: the grid, few-shot and the transfer suite
warn about images far smaller than their crops as ``eval linear`` and ``eval knn`` do, naming the ``*_32px``
preset that fits; the grid takes its 32-px preset (a linear preset given to it says which); data-loader workers
default to at most the CPUs; a smoke run on one's own folder reads a bounded number of images."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from cli import app
from tests import suite_layouts
from tests.layouts import cifar_folder_layout

runner = CliRunner()
QUICK = ["--set", "data.workers=0", "--quiet"]
GRID = ["--set", "optim.epochs=1", "--set", "optim.batch_size=4"]
FEWSHOT = ["--shots", "1", "--tries", "1", "--set", "fewshot.max_iter=5", "--set", "fewshot.lambdas=[1.0]"]
SUITE = ["--set", "solver.lambdas=3", "--set", "solver.max_iter=5", "--set", "features.batch_size=8"]
# 64-px crops: the protocols' 224 would warn the same (at most half the crop), for several times the test's time
CROP_64 = ["--set", "data.crop_size=64", "--set", "data.resize=64"]


@pytest.fixture(autouse=True)
def real_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MOCO_SMOKE", raising=False)  # a smoke run's crops are 32 px: nothing to warn about


@pytest.fixture(scope="module")
def cifar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """CIFAR-10 exported to folders: 3 classes of 32-px PNGs (4 train, 2 test each)."""
    return cifar_folder_layout(tmp_path_factory.mktemp("cifar"))


@pytest.fixture(scope="module")
def small_suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A transfer root of small images only: CIFAR-10's python batches (32 px)."""
    return suite_layouts.transfer_suite_layout(tmp_path_factory.mktemp("suite"), only=("cifar10",))


def _small_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if "the images are small" in line]


@pytest.mark.parametrize(("command", "preset"), [
    (["eval", "linear", "random", "--grid", *GRID, *CROP_64], "-c lincls_grid_32px"),
    (["eval", "linear", "random", *FEWSHOT, *CROP_64], "-c lincls_fewshot_32px"),
    (["eval", "transfer", "random", *SUITE, *CROP_64], "-c transfer_32px"),
    (["eval", "linear", "random", "-c", "lincls_grid_32px", *GRID], None),
    (["eval", "linear", "random", "-c", "lincls_fewshot_32px", *FEWSHOT], None),
    (["eval", "transfer", "random", "-c", "transfer_32px", *SUITE], None),
], ids=["grid", "fewshot", "transfer", "grid_32px", "fewshot_32px", "transfer_32px"])
def test_small_images_name_the_preset_that_fits(command: list[str], preset: str | None, cifar: Path,
                                                small_suite: Path, tmp_path: Path) -> None:
    """Before: --grid and eval transfer ran 224-px crops of 32-px images without a word (few-shot too), and
    there was no 32-px preset of the grid, few-shot or the suite; now each warns once as eval linear does."""
    data = small_suite if command[1] == "transfer" else cifar
    result = runner.invoke(app, [*command, "--arch", "resnet18", "--data", str(data), *QUICK,
                                 "--output-dir", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    lines = _small_lines(result.output)
    if preset is None:
        assert lines == []
    else:
        assert len(lines) == 1 and lines[0].startswith("warning: the images are small (")
        assert f"); for images this small use {preset}: " in lines[0], lines[0]


def test_a_suite_that_mixes_sizes_is_the_protocols(small_suite: Path, tmp_path: Path) -> None:
    """CIFAR at 224 px beside larger images is the 12-dataset protocol's own choice: no warning then."""
    from classification.linear_transfer.config import load_suite_config
    from classification.linear_transfer.run import _datasets, _small_images

    root = tmp_path / "mixed"
    suite_layouts.transfer_suite_layout(root, only=("cifar10", "dtd"))
    for path in (root / "dtd").rglob("*.jpg"):
        Image.new("RGB", (300, 200)).save(path)
    for data, warned in ((small_suite, True), (root, False)):
        cfg = load_suite_config(None, [], flags={"data": {"path": str(data)}})
        assert (_small_images(cfg, *_datasets(cfg)) is not None) is warned


@pytest.mark.parametrize("preset", ["lincls_32px", "lincls_mocov3_32px"])
def test_the_grid_with_a_linear_preset_names_its_own(preset: str, cifar: Path) -> None:
    """Before: ``optim.lr: unknown key`` (or ``optim.milestones``), a key the user never set, and no preset of
    the grid for small images; now one line naming the grid's, which runs (the test above)."""
    result = runner.invoke(app, ["eval", "linear", "random", "--arch", "resnet18", "-c", preset, "--grid", "--data",
                                 str(cifar), "--print-config"])
    assert result.exit_code == 2
    (line,) = result.output.splitlines()
    assert line.startswith(f"error: -c {preset}: not a preset of the grid or few-shot (optim.")
    assert line.endswith("(small images: lincls_grid_32px, lincls_fewshot_32px)")


def test_the_32px_presets_resolve(cifar: Path) -> None:
    """The grid's 32-px preset is the embedded grid's recipe on one's own folder; few-shot's adds k = 1, 5, 10 and
    writes beside it, not into a doubled ``_fewshot`` folder; the suite's reads 32-px views."""
    import yaml

    def resolved(*args: str) -> dict:
        result = runner.invoke(app, [*args, "--print-config"])
        assert result.exit_code == 0, result.output
        return yaml.safe_load(result.output)

    weights = ["random", "--arch", "resnet18", "--data", str(cifar)]
    grid = resolved("eval", "linear", *weights, "-c", "lincls_grid_32px")
    few = resolved("eval", "linear", *weights, "-c", "lincls_fewshot_32px")
    suite = resolved("eval", "transfer", *weights, "-c", "transfer_32px")
    assert (grid["data"]["crop_size"], grid["data"]["path"], grid["fewshot"]["shots"]) == (32, str(cifar), [])
    assert few["fewshot"]["shots"] == [1, 5, 10] and few["grid"] == grid["grid"]
    assert few["run"]["output_dir"] == f"runs/lincls_fewshot_32px_{cifar.name}/random_resnet18"
    assert (suite["data"]["crop_size"], suite["data"]["resize"], suite["data"]["path"]) == (32, 32, str(cifar))


def test_worker_defaults_follow_the_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: 8 workers (4 for kNN, the suite, detection, segmentation) on any machine, and torch's warning on 2
    cores; now at most the CPUs this process may use, while a value given is taken as given."""
    from classification.frozen.grid_config import GridConfig
    from classification.knn import KnnConfig
    from classification.linear import LinearConfig
    from classification.linear_transfer.config import TransferSuiteConfig
    from moco_core.config import load_config
    from moco_core.pretrain_config import PretrainConfig
    from transfer.detection.config import TransferConfig
    from transfer.segmentation.config import SemsegConfig

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    classes = (PretrainConfig, LinearConfig, GridConfig, KnnConfig, TransferSuiteConfig, TransferConfig, SemsegConfig)
    assert [cls().data.workers for cls in classes] == [2] * len(classes)
    assert load_config(PretrainConfig, None, ["data.workers=8"], check=False).data.workers == 8
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)
    assert [cls().data.workers for cls in classes] == [8, 8, 8, 4, 4, 4, 4]  # the configured defaults


def test_a_smoke_run_reads_a_bounded_share_of_a_large_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: a smoke run read every image of one's own folder, an epoch at batch 8 (CIFAR-10's 50,000 images:
    6,250 steps, a line each); now at most 64 images a folder (8 steps), evenly spaced so both classes stay, and a
    real run reads them all."""
    from moco_core.data.data import scan_images

    for c in range(2):
        (tmp_path / "train" / f"c{c}").mkdir(parents=True)
        for i in range(50):
            Image.new("RGB", (8, 8), (c * 100, i, 0)).save(tmp_path / "train" / f"c{c}" / f"{i:02d}.png")
    assert len(scan_images(tmp_path).samples) == 100
    monkeypatch.setenv("MOCO_SMOKE", "1")
    found = scan_images(tmp_path)
    assert len(found.samples) == 64 and [label for _, label in found.samples].count(0) == 32
