"""classification/linear_transfer: the drawn splits and their files, and whole suites on the layouts' fixtures (random
ResNet-18 at 32 px): one record a dataset, the curve, the split's provenance, resume, missing and broken datasets,
the command line."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from classification.linear_transfer.catalog import BY_NAME
from classification.linear_transfer.config import load_suite_config
from classification.linear_transfer.readers import Split, SuiteDataError, caltech101
from classification.linear_transfer.run import run_suite
from classification.linear_transfer.splits import draw_pool, hold_out, resolve
from cli import app
from moco_core.config import ConfigError
from moco_core.errors import UserError
from tests import suite_layouts

runner = CliRunner()
SMALL = ["data.resize=32", "data.crop_size=32", "data.workers=0", "features.batch_size=8", "solver.max_iter=50"]


def _pool(counts: dict[int, int]) -> Split:
    return Split([(f"/d/{c}/{i}.jpg", c) for c, n in counts.items() for i in range(n)])


def test_draws_are_per_class_seeded_and_stratified() -> None:
    pool = _pool({0: 40, 1: 35, 2: 20})
    train, test = draw_pool(pool, 30, None, seed=0)
    per = {c: sum(1 for _, label in train.samples if label == c) for c in range(3)}
    assert per == {0: 30, 1: 30, 2: 19} and len(test) == 10 + 5 + 1  # a class of 20 keeps one for test
    assert not {p for p, _ in train.samples} & {p for p, _ in test.samples}
    assert draw_pool(pool, 30, None, seed=0)[0].samples == train.samples
    assert draw_pool(pool, 30, None, seed=1)[0].samples != train.samples
    # a class's draw does not depend on the others: the same images of class 0 with class 2 gone
    alone = draw_pool(_pool({0: 40, 1: 35}), 30, None, seed=0)[0]
    assert [s for s in alone.samples if s[1] == 0] == [s for s in train.samples if s[1] == 0]
    rest, val = hold_out(_pool({0: 10, 1: 5, 2: 1}), 0.2, seed=0)
    val_per = {c: sum(1 for _, label in val.samples if label == c) for c in range(3)}
    assert val_per == {0: 2, 1: 1, 2: 0} and len(rest) == 8 + 4 + 1  # never a class's last image


def test_the_split_file_is_written_then_read_back(tmp_path: Path) -> None:
    root = tmp_path / "root"
    suite_layouts.caltech101(root)
    spec, path = BY_NAME["caltech101"], tmp_path / "splits" / "caltech101.json"
    first = resolve(spec, caltech101(root), path, seed=0, val_fraction=0.2)
    assert first.provenance["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert first.provenance["how"]["train"].startswith("drawn: 30 a class")
    again = resolve(spec, caltech101(root), path, seed=5, val_fraction=0.5)  # read back, not redrawn
    for part in ("train", "val", "test"):
        assert getattr(again, part).samples == getattr(first, part).samples
    assert again.provenance["how"]["val"].startswith("read back from caltech101.json")
    doc = json.loads(path.read_text())
    doc["test"][0][0] = "../../../etc/passwd"
    path.write_text(json.dumps(doc))
    with pytest.raises(SuiteDataError, match="leaves"):
        resolve(spec, caltech101(root), path, seed=0, val_fraction=0.2)
    doc["test"][0] = ["accordion/image_0001.jpg", 0]  # the wrong label
    path.write_text(json.dumps(doc))
    with pytest.raises(SuiteDataError, match="does not hold with that label"):
        resolve(spec, caltech101(root), path, seed=0, val_fraction=0.2)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return suite_layouts.transfer_suite_layout(tmp_path_factory.mktemp("suite"),
                                               only=("cifar10", "dtd", "caltech101", "voc2007", "flowers"))


def _cfg(root: Path, out: Path, *extra: str, datasets: tuple[str, ...] | None = None):  # noqa: ANN202
    flags = {"data": {"path": str(root), "datasets": datasets}, "run": {"output_dir": str(out), "device": "cpu"},
             "arch": "resnet18"}
    return load_suite_config(None, [*SMALL, *extra], flags=flags)


def test_a_suite_on_the_real_layouts(root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    names = ("cifar10", "dtd", "caltech101", "voc2007", "food101")
    with pytest.raises(UserError, match="transfer suite: none of"):
        run_suite(_cfg(root, tmp_path / "empty", datasets=("food101",)), "random", show_progress=False)
    run_suite(_cfg(root, out, datasets=names), "random", show_progress=False)
    err = capsys.readouterr().err
    assert f"warning: food101: not found under {root} (expected {root}/food-101/meta/" in err
    summary = json.loads((out / "suite.json").read_text())["datasets"]
    assert summary["food101"] == "missing" and set(summary) == set(names)
    for name, metric in (("cifar10", "top1"), ("dtd", "top1"), ("caltech101", "mean_per_class"),
                         ("voc2007", "map11")):
        record = json.loads((out / name / "result.json").read_text())
        assert record["task"] == "transfer" and 0 <= record["metrics"][metric] <= 100
        assert len(record["history"]) == 45 and record["history"][0]["lambda"] == pytest.approx(1e-6)
        t = record["transfer"]
        assert t["lambda"] in [h["lambda"] for h in record["history"]] and t["C"] == pytest.approx(1 / t["lambda"])
        assert t["val"] == max(h["val"] for h in record["history"])
        splits = record["dataset"]["splits"]
        assert splits["sha256"] == hashlib.sha256(Path(splits["file"]).read_bytes()).hexdigest()
        assert record["dataset"]["metric"] == metric and record["backbone"]["format"] == "random"
    dtd = json.loads((out / "dtd" / "result.json").read_text())["dataset"]
    assert dtd["splits"]["how"] == {"train": "shipped", "test": "shipped", "val": "shipped"}
    assert (dtd["train_images"], dtd["val_images"], dtd["test_images"]) == (3, 3, 3)
    cifar = json.loads((out / "cifar10" / "result.json").read_text())
    assert cifar["dataset"]["splits"]["how"]["val"] == "drawn: 20% of each class of train"
    assert len(cifar["transfer"]["test_correct"]) == 3  # each test image right or wrong, for the paired test
    features = sorted((out / "features").glob("features-*.pt"))
    assert len(features) == 12  # train, val, test of 4 datasets

    # again without --resume: refused; with it: nothing redone, the features read from the cache
    with pytest.raises(ConfigError, match="pass --resume"):
        run_suite(_cfg(root, out, datasets=names), "random", show_progress=False)
    (out / "dtd" / "result.json").unlink()
    run_suite(_cfg(root, out, datasets=names), "random", show_progress=True, resume=True)
    err = capsys.readouterr().err
    assert "cifar10: done before" in err and "dtd: lambda" in err and "features:" not in err
    assert json.loads((out / "dtd" / "result.json").read_text())["transfer"]["features"]["train"]["cached"]


def test_a_broken_dataset_is_one_line_and_the_others_run(root: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    broken = tmp_path / "root"
    shutil.copytree(root, broken)
    (broken / "dtd" / "dtd" / "labels" / "val1.txt").write_text("banded/../../../secret.jpg\n")
    with pytest.raises(UserError, match="transfer suite: dtd failed"):
        run_suite(_cfg(broken, tmp_path / "run", datasets=("dtd", "flowers")), "random", show_progress=False)
    err = capsys.readouterr().err
    assert "error: dtd: " in err and "leaves" in err
    assert (tmp_path / "run" / "flowers" / "result.json").is_file()


def test_fewshot_records_mean_and_std_over_recorded_draws(root: Path, tmp_path: Path) -> None:
    cfg = _cfg(root, tmp_path / "run", "fewshot.shots=[1,2]", "fewshot.tries=3", "solver.lambdas=9",
               datasets=("caltech101",))
    run_suite(cfg, "random", show_progress=False)
    record = json.loads((tmp_path / "run" / "caltech101" / "fewshot.result.json").read_text())
    assert record["task"] == "transfer-fewshot" and set(record["metrics"]) == {"1shot_mean_per_class",
                                                                             "2shot_mean_per_class"}
    one = record["fewshot"][0]
    assert one["shots"] == 1 and len(one["runs"]) == 3 and len({r["seed"] for r in one["runs"]}) == 3
    assert all(r["images"] == 3 for r in one["runs"])  # 1 image of each of the 3 classes


def test_the_command(root: Path, tmp_path: Path) -> None:
    out = tmp_path / "cli"
    common = ["eval", "transfer", "random", "--arch", "resnet18", "--data", str(root), "--output-dir", str(out),
              "--device", "cpu", "--quiet", *[a for s in SMALL for a in ("--set", s)]]
    args = [*common, "--datasets", "dtd"]
    done = runner.invoke(app, args)
    assert done.exit_code == 0, done.output
    assert f"result: {out / 'suite.json'}" in done.output and (out / "dtd" / "result.json").is_file()
    for bad, message in ((["--datasets", "dtdd"], "unknown dataset 'dtdd' (did you mean 'dtd'?)"),
                         (["--shots", "1,x"], "--shots: expected numbers >= 1"),
                         (["--shots", "\u00b2"], "--shots: expected numbers >= 1"),  # isdigit() but no int: a traceback
                         (["--shots", ""], "--shots: expected numbers >= 1"),
                         (["--solver", "cuml"], "solver.name: 'cuml': expected one of torch, sklearn")):
        result = runner.invoke(app, [*common, *bad])
        assert result.exit_code == 2 and message in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1
    printed = runner.invoke(app, ["eval", "transfer", "random", "--arch", "resnet18", "-c", "transfer_embedded",
                                  "--print-config"])
    assert printed.exit_code == 0 and "crop_size: 32" in printed.output and "lambdas: 45" in printed.output


def test_a_file_that_names_no_method_needs_weights_format(root: Path, tmp_path: Path) -> None:
    """A plain torchvision ResNet could be supervised, DINO, Barlow Twins or BYOL: the suite refuses to guess (one
    line, exit 2) and records the method --weights-format names."""
    from tests.layouts import torchvision_weights

    weights = torchvision_weights(tmp_path / "resnet18.pth")
    common = ["eval", "transfer", str(weights), "--data", str(root), "--datasets", "dtd", "--device", "cpu",
              "--quiet", *[a for s in SMALL for a in ("--set", s)]]
    refused = runner.invoke(app, [*common, "--output-dir", str(tmp_path / "a")])
    assert refused.exit_code == 2 and "--weights-format" in refused.output, refused.output
    assert len(refused.output.strip().splitlines()) == 1
    named = runner.invoke(app, [*common, "--output-dir", str(tmp_path / "b"), "--weights-format", "dino"])
    assert named.exit_code == 0, named.output
    backbone = json.loads((tmp_path / "b" / "dtd" / "result.json").read_text())["backbone"]
    assert backbone["pretrain"]["method"] == "dino", backbone


def test_an_embedded_dataset_this_installation_cannot_make_is_said_and_recorded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Without scikit-learn the embedded suite's digits cannot be made: the suite ran the other four and said
    nothing, suite.json did not list it, and the report's mean was empty with no reason (issue 57)."""
    monkeypatch.setitem(__import__("sys").modules, "sklearn", None)
    monkeypatch.setenv("MOCO_SMOKE", "1")
    cfg = load_suite_config("transfer_embedded", [*SMALL, "solver.lambdas=3", f"run.output_dir={tmp_path / 'run'}",
                                                  "run.device=cpu", "data.datasets=[shapes,digits]", "arch=resnet18"])
    suite = json.loads(run_suite(cfg, "random", show_progress=False).read_text())["datasets"]
    assert suite["shapes"].endswith("result.json")
    assert suite["digits"] == ("missing: the embedded suite's digits (scikit-learn's scans) needs sklearn: pip install "
                               "'moco[sklearn]' (or pip install scikit-learn)")
    assert "warning: digits: the embedded suite's digits" in capsys.readouterr().err
