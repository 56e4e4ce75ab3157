"""Numbers, degenerate data and optional packages checked where they enter, through the CLI (issue 55, classes 2,
3 and 7): each case ends in one ``error:`` line before any work, where it used to run and break later (a record the
report refuses, a run that never ends, a traceback at the end of the schedule, a score at chance)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app
from moco_core.user_files import INT_BITS, parse_json

runner = CliRunner()
BIG = "9" * 23  # 23 digits: past 64 bits
GRID = ["eval", "linear", "random", "--arch", "resnet18", "-c", "lincls_grid_embedded"]
LINEAR = ["eval", "linear", "random", "--arch", "resnet18", "--data", "embedded"]
SUITE = ["eval", "transfer", "random", "--arch", "resnet18", "--data", "embedded"]
KNN = ["eval", "knn", "random", "--arch", "resnet18", "--data", "embedded"]


def one_line(args: list[str], expected: str) -> None:
    """``moco ARGS`` ends in exactly one line, ``error: EXPECTED...``, with exit code 2 and no traceback."""
    done = runner.invoke(app, args)
    shown = f"moco {' '.join(args)[:200]}\n{done.output[-1500:]}"
    assert done.exit_code == 2 and "Traceback" not in done.output, shown
    assert done.output.startswith(f"error: {expected}") and done.output.count("\n") == 1, shown


# (arguments, the start of the one line): checked with --print-config, which validates the config it prints
NUMBERS = [
    ([*GRID, "--shots", BIG], f"fewshot.shots[0]: {BIG} is beyond 64 bits"),
    ([*GRID, "--shots", f"1,{BIG}"], f"fewshot.shots[1]: {BIG} is beyond 64 bits"),
    ([*GRID, "--set", f"select.seed={BIG}"], f"select.seed: {BIG} is beyond 64 bits"),
    ([*GRID, "--shots", "1", "--set", f"fewshot.seed={BIG}"], f"fewshot.seed: {BIG} is beyond 64 bits"),
    ([*LINEAR, "--labels", "10%", "--set", f"data.subset_seed={BIG}"], f"data.subset_seed: {BIG} is beyond"),
    ([*KNN, "--labels", "10%", "--set", f"data.subset_seed={BIG}"], f"data.subset_seed: {BIG} is beyond"),
    ([*SUITE, "--set", f"data.split_seed={BIG}"], f"data.split_seed: {BIG} is beyond 64 bits"),
    ([*SUITE, "--shots", BIG], f"fewshot.shots[0]: {BIG} is beyond 64 bits"),
    ([*KNN, "--batch-size", BIG], f"batch_size: {BIG} is beyond 64 bits"),
    (["pretrain", "-c", "embedded", "--set", f"optim.batch_size={BIG * 20}"],
     f"optim.batch_size: an integer of {int(BIG * 20).bit_length()} bits is beyond 64 bits"),
    (["pretrain", "-c", "embedded", "--set", f"run.seed={'9' * 5000}"],
     "override 'run.seed=999"),  # past Python's 4,300 digits: PyYAML's int() refused it with a traceback
    ([*GRID, "--shots", "1", "--tries", "101"], "fewshot.tries: must be at most 100"),
    ([*GRID, "--shots", "1", "--tries", BIG], f"fewshot.tries: {BIG} is beyond 64 bits"),
    ([*SUITE, "--shots", "1", "--tries", "1000000"], "fewshot.tries: must be at most 100"),
    # divisors, checked in float32, the precision they divide in: a double's 1e-50 is 0 there, 1e-39 subnormal
    (["pretrain", "-c", "embedded", "--set", "augment.std=[0.2,1e-50,0.2]"], "augment.std: 1e-50 divides float32"),
    (["pretrain", "-c", "embedded", "--set", "augment.std=[0.2,0.2,1e-39]"], "augment.std: 1e-39 divides float32"),
    (["pretrain", "-c", "embedded", "--set", "model.temperature=1e-50"], "model.temperature: 1e-50 divides"),
    (["pretrain", "-c", "mocov3_embedded", "--set", "v3.temperature=1e-50"],
     "v3.temperature: 1e-50 divides float32"),
    (["eval", "voc", "random", "--arch", "resnet18", "--data", "embedded", "--set", "input.std=[1e-50,1,1]"],
     "input.std: 1e-50 divides float32"),
    (["eval", "semseg", "random", "--arch", "resnet18", "--data", "embedded", "--set", "input.std=[1,1,1e-45]"],
     "input.std: 1e-45 divides float32"),
    ([*KNN, "--temperature", "1e-50"], "temperature: 1e-50 divides float32"),
    ([*KNN, "--temperature", "1e39"], "temperature: 1e+39 divides float32"),
    ([*GRID, "--shots", "1", "--set", "fewshot.knn_temperature=1e-50"], "fewshot.knn_temperature: 1e-50 divides"),
]


@pytest.mark.parametrize(("args", "expected"), NUMBERS, ids=[" ".join(a[-2:])[:40] for a, _ in NUMBERS])
def test_numbers_are_checked_when_the_config_is_read(args: list[str], expected: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    one_line([*args, "--print-config"], expected)


def test_the_config_takes_what_the_report_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One bound: the largest seed a config takes is the largest integer a record is read with, and one more is
    refused by both."""
    monkeypatch.chdir(tmp_path)
    largest = 2 ** (INT_BITS - 1) - 1
    assert parse_json(str(largest)) == largest
    done = runner.invoke(app, [*GRID, "--set", f"select.seed={largest}", "--print-config"])
    assert done.exit_code == 0 and f"seed: {largest}" in done.output, done.output
    with pytest.raises(Exception, match="beyond 64 bits"):
        parse_json(str(largest + 1))
    one_line([*GRID, "--set", f"select.seed={largest + 1}", "--print-config"], f"select.seed: {largest + 1} is")


# (command, the module blocked, the start of the one line): an evaluator's package missing, for every engine
EXTRAS = [
    (["eval", "lvis", "random", "--arch", "resnet18", "--data", "embedded", "--engine", "torchvision"], "lvis",
     "task: the lvis evaluation needs lvis: pip install 'moco[lvis]'"),
    (["eval", "lvis", "random", "--arch", "resnet18", "--data", "embedded", "--engine", "detectron2"], "lvis",
     "task: the lvis evaluation needs lvis: pip install 'moco[lvis]'"),
    (["eval", "cityscapes", "random", "--arch", "resnet18", "--data", "embedded", "--engine", "torchvision"],
     "cityscapesscripts", "task: the cityscapes evaluation needs cityscapesscripts: pip install 'moco[cityscapes]'"),
    (["eval", "cityscapes", "random", "--arch", "resnet18", "--data", "embedded", "--engine", "auto"],
     "cityscapesscripts", "task: the cityscapes evaluation needs cityscapesscripts: pip install 'moco[cityscapes]'"),
    ([*SUITE, "--solver", "sklearn"], "sklearn", "solver.name: solver sklearn needs sklearn: pip install "
     "'moco[sklearn]' (or pip install scikit-learn)"),
]


@pytest.mark.parametrize(("args", "module", "expected"), EXTRAS, ids=[f"{a[1]}-{a[-1]}" for a, _, _ in EXTRAS])
def test_missing_extras_are_said_before_the_work(args: list[str], module: str, expected: str, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The package is blocked in this process (``sys.modules[name] = None``: its import raises ImportError, as
    where it is not installed); the run functions are stubs that record a call, so that reaching them (the old
    behaviour: the whole schedule, then an ImportError traceback at test time) fails the test at once."""
    import classification.linear_transfer.run
    import transfer.detection.run

    calls: list[str] = []
    monkeypatch.setattr(transfer.detection.run, "evaluate", lambda *a, **k: calls.append("transfer"))
    monkeypatch.setattr(classification.linear_transfer.run, "run_suite", lambda *a, **k: calls.append("suite"))
    monkeypatch.setitem(sys.modules, module, None)
    monkeypatch.chdir(tmp_path)
    one_line(args, expected)
    one_line([*args, "--print-config"], expected)
    assert calls == []


def last_line(args: list[str], expected: str) -> None:
    """``moco ARGS`` ends in one ``error: EXPECTED...`` line, the last (notes and warnings may come before), exit
    code 2, no traceback."""
    done = runner.invoke(app, args)
    shown = f"moco {' '.join(args)[:200]}\n{done.output[-1500:]}"
    errors = [line for line in done.output.splitlines() if line.startswith("error: ")]
    assert done.exit_code == 2 and "Traceback" not in done.output and len(errors) == 1, shown
    assert done.output.splitlines()[-1].startswith(f"error: {expected}"), shown


@pytest.fixture(scope="module")
def few_images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ImageNet-layout folder (4 classes, 2 train images each, one val), a subset file naming one train image,
    and a one-class folder of 2 train images (``--labels 1%`` of it is one image)."""
    from tests.layouts import WNIDS, imagenet_layout

    root = tmp_path_factory.mktemp("few")
    imagenet_layout(root / "data", train_per_class=2, val_per_class=1)
    (root / "one.txt").write_text(f"{WNIDS[0]}_0.JPEG\n")
    for split, names in (("train", ("a.JPEG", "b.JPEG")), ("val", ("c.JPEG",))):
        folder = root / "small" / split / WNIDS[0]
        folder.mkdir(parents=True)
        for name in names:
            (folder / name).write_bytes((root / "data" / "train" / WNIDS[0] / f"{WNIDS[0]}_0.JPEG").read_bytes())
    return root


SMALL = {"trained": ["--set", "data.crop_size=32", "--set", "data.resize=36", "--set", "optim.epochs=1"],
         "knn": ["--crop-size", "32", "--resize", "36"]}
ONE_IMAGE = [  # (command, data folder, more arguments, None: it runs and writes its record, or the one line)
    (["eval", "finetune"], "data", ["--subset", "one.txt"],
     "data.subset: fine-tuning trains BatchNorm on each batch's statistics, which needs at least 2 images a batch; "
     "the training images are 1"),
    (["eval", "finetune"], "small", ["--labels", "1%"], "data.labels: fine-tuning trains BatchNorm"),
    (["eval", "finetune"], "data", ["--set", "optim.batch_size=1"], "optim.batch_size: fine-tuning trains BatchNorm"),
    (["eval", "linear"], "data", ["--subset", "one.txt"], None),  # BN in eval mode: one image trains fc
    (["eval", "knn"], "data", ["--subset", "one.txt"], None),  # a bank of one image: k is cut to 1
    (["eval", "linear", "--grid"], "data", ["--subset", "one.txt"], "select.holdout_fraction: no class of the 1 "
     "train images has 2 images to hold one out"),
]


@pytest.mark.parametrize(("command", "folder", "more", "expected"), ONE_IMAGE,
                         ids=[f"{' '.join(c[1:])}-{m[-1]}" for c, _, m, _ in ONE_IMAGE])
def test_one_training_image(command: list[str], folder: str, more: list[str], expected: str | None,
                            few_images: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fewest images each protocol takes: fine-tuning ended in BatchNorm's ValueError traceback after the
    set-up; now one line before training (a ViT, without BatchNorm, would train). The frozen protocols run."""
    monkeypatch.chdir(few_images)
    out = tmp_path / "run"
    args = [*command[:2], "random", "--arch", "resnet18", *command[2:], "--data", folder, "--device", "cpu",
            "--workers", "0", *SMALL["knn" if command[1] == "knn" else "trained"], "--output-dir", str(out), *more]
    if expected is not None:
        last_line(args, expected)
        return
    done = runner.invoke(app, args)
    assert done.exit_code == 0 and (out / "result.json").is_file(), done.output[-1500:]


@pytest.fixture(scope="module")
def overflowing_weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A torchvision ResNet-18 file whose every value is finite, with BN scales of 1e10: its activations pass
    float32's range within a few blocks, and its features are NaN."""
    from tests.weights_layouts import resnet_state, torchvision_file

    state = resnet_state()
    for key in state:
        if key.endswith(("bn1.weight", "bn2.weight")):
            state[key] = state[key] * 1e10
    assert all(value.isfinite().all() for value in state.values())
    return torchvision_file(tmp_path_factory.mktemp("overflow") / "resnet18.pth", state)


NON_FINITE = [  # (command and options, the start of the one line): every reader of frozen features refuses them
    (["eval", "knn"], ["--crop-size", "32", "--resize", "36"], "kNN: the backbone's features (train images, val"),
    (["eval", "linear", "--cached-features"], SMALL["trained"], "run.cached_features: the backbone's features "
     "(train images, val images) are not finite"),
    (["eval", "linear"], SMALL["trained"], "linear training: the backbone's features (train images, the frozen "
     "network's) are not finite"),
    (["eval", "linear", "--grid"], SMALL["trained"], "epoch 1's train images: the backbone's features (layer4) are "
     "not finite"),
    (["eval", "linear", "--shots", "1", "--tries", "1"], SMALL["trained"], "train: the backbone's features "
     "(layer4) are not finite"),
    (["eval", "transfer"], ["--datasets", "shapes", "--set", "data.resize=32", "--set", "data.crop_size=32"],
     "shapes train features: the backbone's features"),
]


@pytest.mark.parametrize(("command", "more", "expected"), NON_FINITE, ids=[" ".join(c[1:]) for c, _, _ in NON_FINITE])
def test_non_finite_features_are_refused(command: list[str], more: list[str], expected: str, few_images: Path,
                                         overflowing_weights: Path, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """NaN features from finite weights: one line naming them, never a score at chance or "lower the lr"."""
    monkeypatch.chdir(few_images)
    data = "embedded" if command[1] == "transfer" else "data"
    last_line([*command[:2], str(overflowing_weights), *command[2:], "--data", data, "--device", "cpu", "--workers",
               "0", "--weights-format", "supervised", "--output-dir", str(tmp_path / "run"), *more], expected)


def test_non_finite_scores_after_fine_tuning_are_refused(few_images: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Finite weights with negative BN running variances: training normalises by the batch's statistics and runs,
    evaluation (eval mode, the running ones, still negative after one step) gives NaN scores, which ranked as class
    0, a score at chance in the record without a word; now one line."""
    from tests.weights_layouts import resnet_state, torchvision_file

    state = {key: value * 0 - 100.0 if key.endswith("running_var") else value for key, value in resnet_state().items()}
    weights = torchvision_file(tmp_path / "negative_variance.pth", state)
    monkeypatch.chdir(few_images)
    last_line(["eval", "finetune", str(weights), "--weights-format", "supervised", "--data", "data", "--device", "cpu",
               "--workers", "0", *SMALL["trained"], "--output-dir", str(tmp_path / "run")],
              "evaluation: the backbone's features (val images, in eval mode) are not finite")
    assert not (tmp_path / "run" / "result.json").exists()


@pytest.mark.parametrize("nproc", ["99999999999999999999999", "100000"])
def test_nproc_beyond_the_machine_is_one_line(nproc: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--nproc of 23 digits ended in torch's OverflowError traceback; 100,000 would start that many processes."""
    monkeypatch.chdir(tmp_path)
    last_line(["eval", "linear", "random", "--arch", "resnet18", "-c", "lincls_embedded", "--nproc", nproc],
              "--nproc: ")
