"""Issue 46's classes on the surfaces issues 47 and 49 added, through the CLI (in this process, or in a real
subprocess where a FIFO or a device is read: tests/test_cli_user_files.py's ``moco``), each a table over the
hostile values and their neighbours that fit:

- other methods' weights files (moco_core/model/weights/): numbers a pickle or a safetensors file holds past 64 bits
  or a double (classes 1), a weights path that is no regular file (class 4);
- the transfer suite's datasets (classification/linear_transfer/readers.py): list-file numbers that are no whole numbers
  or past Python's digit limit (class 1), labels outside the dataset's classes and training images of one class
  (class 8), names that leave the dataset (class 5);
- the suite's split files, read back on --resume (classification/linear_transfer/splits.py): classes 1, 4 and 5;
- the feature cache (moco_core/frozen/features.py): a damaged, foreign, FIFO or folder cache file is
  recomputed with one warning line, never a traceback or a wait.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from tests import suite_layouts
from tests import weights_layouts as layouts
from tests.test_cli_user_files import clean, moco, moco_process

SMALL = ["data.resize=32", "data.crop_size=32", "data.workers=0", "features.batch_size=16", "solver.max_iter=20",
         "solver.lambdas=3"]


def suite(root: Path, out: Path, datasets: str, *extra: str, process: bool = False) -> tuple[int, str]:
    """``moco eval transfer random`` on ``datasets`` under ``root``: (exit code, stdout + stderr); never a
    traceback. A dataset that fails is named in its own ``error: NAME: ...`` line, the run's last line says which
    failed (exit 2). ``process``: in a process of its own, for a run with a FIFO in its way (a wait that a check
    giving way would make endless ends at the timeout); else in this process."""
    args = ["eval", "transfer", "random", "--arch", "resnet18", "--data", str(root), "--datasets", datasets,
            "--output-dir", str(out), "--device", "cpu", "--quiet", *[a for s in SMALL for a in ("--set", s)], *extra]
    result = moco_process(*args, timeout=600) if process else moco(*args)
    text = result.stdout + result.stderr
    assert "Traceback" not in text, text[-3000:]
    assert result.returncode in (0, 2), text[-3000:]
    return result.returncode, text


def dataset_error(text: str, name: str) -> str:
    lines = [line for line in text.splitlines() if line.startswith(f"error: {name}: ")]
    assert len(lines) == 1, text[-3000:]
    return lines[0]


# ---------------------------------------------------------------------------------------------------------------
# other methods' weights files


@pytest.fixture(scope="module")
def knn_args(shapes_root: Path) -> list[str]:
    return ["--data", str(shapes_root), "--crop-size", "32", "--resize", "32", "--workers", "0", "--k", "5",
            "--device", "cpu"]


def _dino(path: Path, epoch: object) -> Path:
    layouts.dino_full(path, layouts.resnet_state(), vit=False)
    obj = torch.load(path, weights_only=False)
    obj["epoch"] = epoch
    torch.save(obj, path)
    return path


def _ours(path: Path, epoch: object, config: dict) -> Path:
    state = {f"module.encoder_q.{k}": v for k, v in layouts.resnet_state().items()}
    torch.save({"format": "moco-suite", "method": "moco", "state_dict": state, "epoch": epoch, "config": config,
                "arch": "resnet18"}, path)
    return path


# (pickled epoch, expected epochs in the record): past 64 bits is kept out of the record (None), as a NaN in the
# checkpoint's config; int64's largest is kept. An integer of over 600 digits (pickle's LONG4; 10**5000 is past
# Python's digit limit too) torch's weights-only unpickler refuses: the file is refused in one line that says why
# ("error"; torch's own message says only "Unsupported operand 139", which the old line turned into "would call
# objects it cannot name").
EPOCHS = [(10 ** 5000, "error"), (2 ** 64, None), (-(2 ** 63) - 1, None), (2 ** 63 - 1, 2 ** 63 - 1), (100, 100)]


@pytest.mark.parametrize(("epoch", "recorded"), EPOCHS, ids=["5000-digits", "2^64", "-2^63-1", "2^63-1", "100"])
@pytest.mark.parametrize("layout", ["dino-full", "moco-suite"])
def test_pickled_numbers_past_64_bits_stay_out_of_the_record(layout: str, epoch: int, recorded: int | None,
                                                            knn_args: list[str], tmp_path: Path) -> None:
    """The record is written (the old code died in json.dump on 5,000 digits) and ``moco report`` reads it as a
    row (a record holding 2**64 was skipped as malformed: the report reads numbers of 64 bits)."""
    path = tmp_path / "weights.pth"
    if layout == "dino-full":
        _dino(path, epoch)
    else:
        _ours(path, epoch, {"optim": {"lr": float("nan"), "epochs": epoch, "deep": [[[[1]]]]}})
    out = tmp_path / "runs" / "knn"
    error = clean(moco("eval", "knn", str(path), *knn_args, "--output-dir", str(out)))
    if recorded == "error":
        assert "refused" in error and "integer of over 600 digits (pickle's LONG4)" in error, error
        assert not (out / "result.json").exists()
        return
    assert error == ""
    record = json.loads((out / "result.json").read_text())
    assert record["backbone"]["pretrain"]["epochs"] == recorded
    if layout == "moco-suite":
        assert record["backbone"]["pretrain"]["config"]["optim"] == {"lr": None, "epochs": recorded,
                                                                     "deep": [[[[1]]]]}
    report = moco("report", str(tmp_path / "runs"), "--out", str(tmp_path / "report"), "--formats", "md,csv")
    assert clean(report) == ""
    assert "none skipped" in report.stdout + report.stderr, report.stdout[-2000:] + report.stderr
    assert "knn" in (tmp_path / "report" / "report.csv").read_text()


def _timm(folder: Path, pretrained_cfg: str | None, metadata: dict[str, str] | None = None) -> Path:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.contiguous() for k, v in layouts.resnet_state().items() if not k.startswith("fc.")}
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt", **(metadata or {})})
    if pretrained_cfg is not None:
        (folder / "config.json").write_text('{"architecture": "resnet18", "pretrained_cfg": ' + pretrained_cfg + '}')
    return folder / "model.safetensors"


NORMALISATIONS = [  # (what the file states, the record's normalisation or the refusal's words)
    ('{"mean": [NaN, 0.5, 0.5], "std": [0.2, 0.2, 0.2]}', "not finite"),
    ('{"mean": [0.5, 0.5, 0.5], "std": [Infinity, 0.2, 0.2]}', "not finite"),
    ('{"mean": [0.5, 0.5, 0.5], "std": [0.2, -Infinity, 0.2]}', "not finite"),
    ('{"mean": [%s, 0.5, 0.5], "std": [0.2, 0.2, 0.2]}' % ("9" * 5000), "malformed JSON"),
    ('{"mean": [0.5, 0.5, 0.5], "std": [1e400, 0.2, 0.2]}', "malformed JSON"),
    ('{"mean": [0.5, 0.5, 0.5], "std": [0, 0.2, 0.2]}', "not > 0"),
    ('{"mean": [0.5, 0.5, 0.5], "std": [1.7976931348623157e308, 0.2, 0.2]}', [1.7976931348623157e308, 0.2, 0.2]),
    ('{"mean": [0.5, 0.5, 0.5], "std": [0.2, 0.2, 0.2]}', [0.2, 0.2, 0.2]),
]


@pytest.mark.parametrize(("stated", "expected"), NORMALISATIONS, ids=[f"cfg{i}" for i in range(len(NORMALISATIONS))])
def test_a_stated_normalisation_that_is_not_finite_is_one_line(stated: str, expected: str | list[float],
                                                              knn_args: list[str], tmp_path: Path) -> None:
    """timm's ``pretrained_cfg`` beside a .safetensors file: NaN and Infinity (JSON constants) were taken as
    the input statistics (a NaN std feeds NaN to the network)."""
    path = _timm(tmp_path / "hub", stated)
    out = tmp_path / "knn"
    error = clean(moco("eval", "knn", str(path), *knn_args, "--weights-format", "supervised",
                       "--output-dir", str(out)))
    if isinstance(expected, str):
        assert expected in error and ("normalisation" in error or "config.json" in error), error
        assert not (out / "result.json").exists()
    else:
        assert error == ""
        assert json.loads((out / "result.json").read_text())["backbone"]["normalisation"]["std"] == expected


@pytest.mark.parametrize("stated", ['{"mean": [%s, 0.5, 0.5], "std": [0.2, 0.2, 0.2]}' % ("9" * 5000),
                                    '{"mean": [0.5, 0.5, 0.5], "std": [%s, 0.2, 0.2]}' % ("1" + "0" * 400),
                                    '[' * 100000,
                                    '{"mean": [0.5, 0.5, 0.5], "std": [0.2, 0.2, 0.2]}'],
                         ids=["5000-digits", "400-digits", "deep", "fits"])
def test_moco_convert_metadata_with_numbers_beyond_64_bits_is_read_as_stating_none(stated: str, knn_args: list[str],
                                                                                   tmp_path: Path) -> None:
    """The normalisation ``moco convert`` writes into a .safetensors file's metadata, damaged: the file states
    none and the method's is used (the old reader ended in ``ValueError: Exceeds the limit (4300 digits)``)."""
    path = _timm(tmp_path / "conv", None, {"moco.method": "dino", "moco.encoder": "teacher",
                                           "moco.normalisation": stated})
    out = tmp_path / "knn"
    assert clean(moco("eval", "knn", str(path), *knn_args, "--output-dir", str(out))) == ""
    std = json.loads((out / "result.json").read_text())["backbone"]["normalisation"]["std"]
    assert std == ([0.2, 0.2, 0.2] if stated.startswith('{"mean": [0.5, 0.5, 0.5], "std": [0.2') else
                   pytest.approx([0.229, 0.224, 0.225]))  # DINO's (ImageNet's) where the file states none


@pytest.mark.parametrize("kind", ["fifo", "device", "directory", "missing"])
def test_a_weights_path_that_is_no_regular_file_is_one_line(kind: str, knn_args: list[str], tmp_path: Path) -> None:
    path = {"device": Path("/dev/zero"), "directory": tmp_path, "missing": tmp_path / "none.pth"}.get(kind)
    if path is None:
        path = tmp_path / "weights.pth"
        os.mkfifo(path)
    error = clean(moco_process("eval", "knn", str(path), *knn_args, "--output-dir", str(tmp_path / "out"), timeout=120))
    said = {"fifo": "is a FIFO", "device": "is a device", "missing": "not found",
            "directory": "a directory without checkpoint_last.pth.tar"}  # a directory is read as a run's
    assert said[kind] in error, error


# ---------------------------------------------------------------------------------------------------------------
# the transfer suite's datasets: numbers in list files, labels outside the classes


def _replace_line(path: Path, number: int, text: str) -> None:
    lines = path.read_text().splitlines()
    lines[number] = text
    path.write_text("".join(f"{line}\n" for line in lines))


def _cifar_label(root: Path, value: object) -> None:
    path = root / "cifar-10-batches-py" / "test_batch"
    with path.open("rb") as f:
        batch = pickle.load(f, encoding="latin1")
    batch["labels"][0] = value
    with path.open("wb") as f:
        pickle.dump(batch, f)


def _flowers_label(root: Path, value: float) -> None:
    from scipy.io import savemat

    savemat(root / "flowers-102" / "imagelabels.mat",
            {"labels": np.array([[value, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3]], dtype=np.float64)})


def _cars_class(root: Path, value: int) -> None:
    from scipy.io import loadmat, savemat

    path = root / "stanford_cars" / "cars_test_annos_withlabels.mat"
    annotations = loadmat(path, squeeze_me=True)["annotations"]
    annotations["class"][0] = value
    savemat(path, {"annotations": annotations})


# One root a row: every dataset's list file damaged at once (the suite goes on past a failed dataset and names
# each in its own line). The old readers ended in tracebacks (int('abc'), Python's digit limit, 'Overflow when
# unpacking long long', IndexError in the solver) or trained on a label outside the classes (CIFAR's 10 and -1,
# Flowers' class 0 read as -1).
HOSTILE = {
    "cub200": [("id", "abc"), ("id", "9" * 5000), ("label", "0"), ("label", "201"), ("label", "9" * 5000)],
    "pets": [("class", "9" * 5000), ("class", "1.5")],
    "flowers": [("label", 0.0), ("label", 1e300), ("label", float("nan")), ("label", 1.5)],
    "cifar10": [("label", 10), ("label", -1), ("label", "x"), ("label", 10 ** 5000), ("label", 1.5)],
    "cars": [("class", 0), ("class", 1000)],
}
FITTING = {"cub200": [("id", "9223372036854775807"), ("label", "2")], "pets": [("class", "3")],
           "flowers": [("label", 3.0)], "cifar10": [("label", 9)], "cars": [("class", 2)]}  # the largest that fit


def _damage(root: Path, dataset: str, field: str, value: object) -> None:
    cub = root / "CUB_200_2011"
    if dataset == "cub200" and field == "id":
        for name in ("images", "image_class_labels", "train_test_split"):
            rest = (cub / f"{name}.txt").read_text().splitlines()[0].split(" ", 1)[1]
            _replace_line(cub / f"{name}.txt", 0, f"{value} {rest}")
    elif dataset == "cub200":
        image = (cub / "image_class_labels.txt").read_text().split(" ", 1)[0]  # an id changed above stays
        _replace_line(cub / "image_class_labels.txt", 0, f"{image} {value}")
    elif dataset == "pets":
        path = root / "oxford-iiit-pet" / "annotations" / "test.txt"
        lines = path.read_text().splitlines()
        first = next(n for n, line in enumerate(lines) if not line.startswith("#"))  # after the header
        image, _, *rest = lines[first].split()
        _replace_line(path, first, " ".join([image, str(value), *rest]))
    elif dataset == "flowers":
        _flowers_label(root, float(value))  # type: ignore[arg-type]
    elif dataset == "cifar10":
        _cifar_label(root, value)
    else:
        _cars_class(root, int(value))  # type: ignore[call-overload]


@pytest.mark.slow
@pytest.mark.parametrize("row", range(max(len(v) for v in HOSTILE.values())))
def test_suite_list_files_with_numbers_that_are_no_class_are_one_line_each(row: int, tmp_path: Path) -> None:
    names = tuple(name for name, values in HOSTILE.items() if row < len(values))
    root = suite_layouts.transfer_suite_layout(tmp_path / "data", names)
    for name in names:
        _damage(root, name, *HOSTILE[name][row])
    code, text = suite(root, tmp_path / "run", ",".join(names))
    assert code == 2 and "failed" in text.splitlines()[-1], text[-3000:]
    for name in names:
        error = dataset_error(text, name)
        assert "whole number" in error or "not one of its" in error or "'labels' must be class numbers" in error, \
            error
        assert not (tmp_path / "run" / name / "result.json").exists()


def test_suite_list_files_with_the_largest_numbers_that_fit_are_read(tmp_path: Path) -> None:
    names = tuple(FITTING)
    root = suite_layouts.transfer_suite_layout(tmp_path / "data", names)
    for name, values in FITTING.items():
        for field, value in values:
            _damage(root, name, field, value)
    code, text = suite(root, tmp_path / "run", ",".join(names))
    assert code == 0, text[-3000:]
    assert all((tmp_path / "run" / name / "result.json").is_file() for name in names)


@pytest.mark.parametrize("classes", [1, 2])
def test_training_images_of_one_class_are_one_line(classes: int, tmp_path: Path) -> None:
    """Every CIFAR-10 train and test image relabelled to one class: the old code fitted it and recorded top-1 100%.
    Two classes (the neighbour) still run."""
    root = suite_layouts.transfer_suite_layout(tmp_path / "data", ("cifar10",))
    for path in (root / "cifar-10-batches-py").glob("*_batch*"):
        with path.open("rb") as f:
            batch = pickle.load(f, encoding="latin1")
        batch["labels"] = [i % classes for i in range(len(batch["labels"]))]
        with path.open("wb") as f:
            pickle.dump(batch, f)
    code, text = suite(root, tmp_path / "run", "cifar10")
    if classes == 2:
        assert code == 0 and (tmp_path / "run" / "cifar10" / "result.json").is_file(), text[-3000:]
        return
    assert code == 2 and "every train image is of one class (airplane, of 10)" in dataset_error(text, "cifar10")
    assert not (tmp_path / "run" / "cifar10" / "result.json").exists()


@pytest.mark.parametrize("name", ["../../../etc/passwd", "/etc/passwd", "a/../../../x"])
def test_suite_names_that_leave_the_dataset_are_refused(name: str, tmp_path: Path) -> None:
    """CUB's images.txt names a file outside CUB_200_2011/images/: one line naming it, nothing read."""
    root = suite_layouts.transfer_suite_layout(tmp_path / "data", ("cub200",))
    path = root / "CUB_200_2011" / "images.txt"
    _replace_line(path, 0, f"1 {name}")
    code, text = suite(root, tmp_path / "run", "cub200")
    assert code == 2 and "leaves" in dataset_error(text, "cub200")


# ---------------------------------------------------------------------------------------------------------------
# the feature cache


def _cache_variants(good: bytes) -> dict[str, bytes | None]:
    magic, rest = good.split(b"\n", 1)
    header, payload = rest.split(b"\n", 1)
    fields = json.loads(header)

    def with_header(text: bytes) -> bytes:
        return magic + b"\n" + text + b"\n" + payload

    return {  # None: a FIFO (the old reader waited on it for ever)
        "5000-digit length": with_header(header.replace(b'"bytes": ', b'"bytes": ' + b"9" * 5000, 1)),
        "length past a C size": with_header(json.dumps({**fields, "bytes": 10 ** 30}).encode()),
        "NaN in the key": with_header(json.dumps({**fields, "key": {"a": float("nan")}}).encode()),
        "nested too deep": with_header(b"[" * 100_000),
        "fifo": None,
        "truncated": good[: len(good) // 2],
    }


@pytest.mark.parametrize("batch", [0, 1])
def test_a_damaged_feature_cache_is_recomputed_with_one_warning(batch: int, tmp_path: Path) -> None:
    """The suite's three cache files (train, val, test) damaged in three ways a run, read by ``--resume``: each
    recomputed, one warning line each, the same result. The old reader ended in ValueError (Python's digit
    limit), OverflowError, ValueError (NaN in the key's canonical JSON) or RecursionError, or waited on a FIFO."""
    root = suite_layouts.transfer_suite_layout(tmp_path / "data", ("dtd",))
    out = tmp_path / "run"
    assert suite(root, out, "dtd")[0] == 0
    first = json.loads((out / "dtd" / "result.json").read_text())["metrics"]
    files = sorted((out / "features").glob("features-*.pt"))
    assert len(files) == 3
    variants = list(_cache_variants(files[0].read_bytes()).items())[3 * batch:3 * batch + 3]
    for path, (_, data) in zip(files, variants, strict=True):
        path.unlink()
        if data is None:
            os.mkfifo(path)
        else:
            path.write_bytes(data)
    shutil.rmtree(out / "dtd")
    code, text = suite(root, out, "dtd", "--resume", process=any(data is None for _, data in variants))
    assert code == 0, text[-3000:]
    warnings = [line for line in text.splitlines() if line.startswith("warning: feature cache")]
    assert len(warnings) == 3 and all(line.endswith("recomputing it") for line in warnings), text[-3000:]
    assert json.loads((out / "dtd" / "result.json").read_text())["metrics"] == first
    assert all(path.is_file() for path in files)
