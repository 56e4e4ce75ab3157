"""Issue 46: the surfaces added in the last round put through the classes of hostile input the older ones pass,
each as a table over the hostile values and their neighbours, through the CLI: in this process (:func:`moco`, the
``moco`` app as a process runs it), or in a real subprocess (:func:`moco_process`) where a check giving way would
wait for ever or fill the memory (a FIFO, /dev/zero) or where a resource limit is set.

1. JSON numbers beyond 64-bit integers and finite floats, in records, metrics.jsonl, run.json and annotation files;
2. optimizer state that does not fit the model on --resume (tests/test_cli_resume_state.py);
3. images and label maps that are not images, in the semantic segmentation pipeline;
4. unbounded reads of files a user names (/dev/zero, FIFOs, directories);
5. names read from a file that leave the dataset;
6. report sets written all or none (a full disk, a file-size limit);
8. degenerate label sets (one class; a validation class with no training image).

Every command ends in success or in one ``error:`` line with exit code 2, never a traceback (:func:`clean`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

import pytest

from tests.layouts import custom_detection_layout, inat_layout, pets_layout, simclr_subset_file
from tests.reports.conftest import base_record

ROOT = Path(__file__).resolve().parents[1]
BEYOND = ["9" * 5000, "-" + "9" * 4301, "9" * 400, str(2**63), str(-(2**63) - 1), "1e400", "-1e999",
          "1" + "0" * 400 + ".5"]  # Python's digit limit, past int64, past a double
FITTING = [str(2**63 - 1), str(-(2**63)), "1.7976931348623157e308", "0.000001"]  # their neighbours, which fit


def moco(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``moco ARGS`` as a user types it, run in this process: typer's CliRunner through the ``moco`` app and its
    one-line error handling, with ``env`` set and ``cwd`` the working directory while it runs. The exit code,
    stdout and stderr are a process's, without its 3-5 s of torch import. An exception that leaves the command,
    which a process prints as a traceback, comes back as exit 1 with the traceback on stderr, so :func:`clean`
    refuses it as it refuses a process's."""
    from typer.testing import CliRunner

    from cli import app

    with contextlib.chdir(cwd or ROOT):
        result = CliRunner().invoke(app, list(args), env=env)
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(result.exception))
    return subprocess.CompletedProcess(["moco", *args], result.exit_code, result.stdout, stderr)


def moco_process(*args: str, env: dict[str, str] | None = None, timeout: float = 300,
                 **popen: Any) -> subprocess.CompletedProcess[str]:
    """``python -m cli ARGS`` in a subprocess, for a command that needs a process of its own: one that would wait
    for ever or fill the memory if a check gave way (a FIFO, /dev/zero: ``timeout`` ends it), or one run under a
    resource limit (``preexec_fn``)."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "cli", *args], cwd=ROOT, env=environment, text=True,
                          capture_output=True, timeout=timeout, **popen)


def clean(result: subprocess.CompletedProcess[str]) -> str:
    """Success, or exit 2 and one ``error:`` line (returned); never a traceback."""
    shown = f"exit {result.returncode}\n{result.stdout[-1500:]}\n{result.stderr[-3000:]}"
    assert "Traceback" not in result.stdout + result.stderr, shown
    if result.returncode == 0:
        return ""
    assert result.returncode == 2, shown
    errors = [line for line in (result.stdout + result.stderr).splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, shown
    return errors[0]


@pytest.fixture(scope="module")
def data_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("data_home")


def smoke(data_home: Path) -> dict[str, str]:
    return {"MOCO_SMOKE": "1", "MOCO_DATA_HOME": str(data_home)}


# ---------------------------------------------------------------------------------------------------------------
# 1. JSON numbers beyond what Python converts


def test_report_skips_records_and_metrics_lines_with_numbers_beyond_64_bits_in_one_line(tmp_path: Path) -> None:
    """One report over a record and a pretraining log per value: a value beyond int64 or a double skips its record
    (in the skip line) and its metrics line (a warning naming the file); its neighbours that fit are read. The
    old reader died on the first ("ValueError: Exceeds the limit (4300 digits)", "OverflowError"). A metric that
    fits JSON but is no percentage (1e308 as a top-1: the tables' means overflowed) is skipped too."""
    runs = tmp_path / "runs"
    runs.mkdir()
    values = [*BEYOND, *FITTING]
    for n, value in enumerate(values):
        pre = tmp_path / "pre" / f"{n:02d}"
        pre.mkdir(parents=True)
        (pre / "metrics.jsonl").write_text('{"epoch": 0, "step": 1, "loss": 5.0, "accuracy": 1.0}\n'
                                           f'{{"epoch": 0, "step": 2, "loss": {value}, "accuracy": 2.0}}\n')
        curve = base_record()  # a record whose pretraining's log holds the value
        curve["backbone"] = {**curve["backbone"], "source": str(pre / "checkpoint_last.pth.tar"),
                             "sha256": f"{n:02d}" * 32,  # a pretraining of its own (its length): a curve each
                             "pretrain": {**curve["backbone"]["pretrain"], "epochs": 100 + n}}
        (runs / f"curve-{n:02d}.result.json").write_text(json.dumps(curve))
        record = base_record(history=[{"epoch": 0, "top1": "V"}])  # a number no table reads
        record["backbone"] = {**record["backbone"], "sha256": f"{n + 50:02d}" * 32}
        (runs / f"{n:02d}").mkdir(parents=True)
        (runs / f"{n:02d}" / "result.json").write_text(json.dumps(record).replace('"V"', value))
    for n, value in enumerate(("9" * 400, FITTING[2], str(2**63 - 1), "100.000001", "-0.5")):  # as the top-1
        record = json.dumps(base_record(metrics={"top1": "V", "top5": 90.0})).replace('"V"', value)
        (runs / f"top1-{n}.result.json").write_text(record)
    result = moco("report", str(runs), "-o", str(tmp_path / "out"))
    assert clean(result) == "" and result.returncode == 0
    skipped = next(line for line in result.stdout.splitlines() if line.startswith("skipped"))
    assert skipped.startswith(f"skipped {len(BEYOND) + 5}: "), skipped
    for n in range(len(values)):
        assert (f"runs/{n:02d}/result.json (malformed JSON (" in skipped) == (n < len(BEYOND)), (n, skipped)
    assert "top1-0.result.json (malformed JSON (integer 9999" in skipped
    for n in range(1, 5):
        assert f"top1-{n}.result.json (metric 'top1' is " in skipped and "not a percentage in [0, 100])" in skipped
    warned = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    for n in range(len(values)):
        said = [line for line in warned if f"pre/{n:02d}/metrics.jsonl: 1 unreadable lines skipped" in line]
        assert len(said) == (n < len(BEYOND)), (n, warned)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["report.csv", "report.html", "report.md",
                                                                   "report.tex"]


INAT_CASES = [(value, True) for value in BEYOND[:4]] + [(value, False) for value in FITTING[:2]]


@pytest.mark.parametrize(("value", "beyond"), INAT_CASES, ids=[f"{v[:6]}..{len(v)}" for v, _ in INAT_CASES])
def test_inaturalist_annotation_numbers_beyond_64_bits_are_one_line(value: str, beyond: bool, tmp_path: Path,
                                                                    data_home: Path) -> None:
    """An image id beyond int64 in train2018.json: one line naming the file; an id that fits is read (and then
    refused for the category it names, which the file does not list)."""
    root = inat_layout(tmp_path / "inat", train_per_class=1, val_per_class=1)
    text = (root / "train2018.json").read_text()
    doc = json.loads(text)
    doc["images"][0]["id"] = doc["annotations"][0]["image_id"] = doc["annotations"][0]["category_id"] = "V"
    (root / "train2018.json").write_text(json.dumps(doc).replace('"V"', value))
    line = clean(moco("eval", "finetune", "random", "--arch", "resnet18", "-c", "finetune_embedded", "--data",
                      str(root), "--output-dir", str(tmp_path / "out"), "--quiet", env=smoke(data_home)))
    if beyond:
        assert "train2018.json: malformed JSON (" in line and "beyond" in line, line
    else:
        assert f"category id {value} is annotated but not among the 4 categories" in line, line


@pytest.fixture(scope="module")
def detection_root(tmp_path_factory: pytest.TempPathFactory, data_home: Path) -> Path:
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("MOCO_DATA_HOME", str(data_home))
        return custom_detection_layout(tmp_path_factory.mktemp("detection"), train=4, test=2)


ANNOTATION_CASES = [(task, value, beyond) for task in ("coco", "keypoints", "lvis")
                    for value, beyond in ((BEYOND[0], True), (BEYOND[5], True), (FITTING[0], False))]


@pytest.mark.parametrize(("task", "value", "beyond"), ANNOTATION_CASES,
                         ids=[f"{t}-{v[:6]}..{len(v)}" for t, v, _ in ANNOTATION_CASES])
def test_annotation_file_numbers_beyond_64_bits_are_one_line(task: str, value: str, beyond: bool, tmp_path: Path,
                                                             detection_root: Path, data_home: Path) -> None:
    """COCO, keypoints and LVIS annotation files (dense pose: the same COCO reader, whose command needs detectron2:
    tests/transfer/detection): an image width beyond int64 or a double is one line naming the file; one that fits
    is read, and refused for disagreeing with the image (also one line)."""
    source = detection_root / "annotations" / ("keypoints_val.json" if task == "keypoints" else "val.json")
    doc = json.loads(source.read_text())
    if task == "lvis":
        for category in doc["categories"]:
            category["frequency"] = "f"
        for image in doc["images"]:
            image.update(neg_category_ids=[], not_exhaustive_category_ids=[])
    doc["images"][0]["width"] = "V"
    hostile = tmp_path / "hostile.json"
    hostile.write_text(json.dumps(doc).replace('"V"', value))
    spec = f"{hostile}:{detection_root / 'images'}"
    line = clean(moco("eval", task, "random", "--arch", "resnet18", "-c", f"{task}_embedded", "--data",
                      str(detection_root), "--train", spec, "--test", spec, "--output-dir", str(tmp_path / "out"),
                      "--engine", "torchvision", "--quiet", env=smoke(data_home)))
    assert line, "a width that disagrees with the image must not train"
    if beyond:
        assert f"{hostile}: malformed JSON (" in line and "beyond" in line, line
    else:
        assert "malformed JSON" not in line and "annotation" in line, line


@pytest.mark.parametrize("run_json", [
    '{"starts": [' + "9" * 5000 + "]}", '{"starts": [], "x": ' + "9" * 400 + "}", '{"starts": [1e400]}',
])
def test_a_run_json_with_numbers_beyond_64_bits_is_not_ours_and_is_kept(run_json: str, tmp_path: Path,
                                                                         data_home: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_text(run_json)
    line = clean(moco("pretrain", "-c", "embedded", "--output-dir", str(out), "--quiet", env=smoke(data_home)))
    assert "holds a run.json that no moco run wrote" in line, line
    assert (out / "run.json").read_text() == run_json


# ---------------------------------------------------------------------------------------------------------------
# 4. Unbounded reads: files that are not regular files


@pytest.fixture
def not_files(tmp_path: Path) -> dict[str, str]:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "folder").mkdir()
    (tmp_path / "zero-link").symlink_to("/dev/zero")
    return {"/dev/zero": "/dev/zero", "fifo": str(fifo), "folder": str(tmp_path / "folder"),
            "zero-link": str(tmp_path / "zero-link")}


KINDS = {"/dev/zero": "is a device", "fifo": "is a FIFO", "folder": "is a directory", "zero-link": "is a device"}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_subset_file_that_is_not_a_regular_file_is_one_line(kind: str, not_files: dict[str, str],
                                                               shapes_root: Path, tmp_path: Path,
                                                               data_home: Path) -> None:
    """``--subset /dev/zero`` grew to gigabytes and a FIFO waited for ever: now one line, in seconds."""
    line = clean(moco_process("eval", "linear", "random", "--arch", "resnet18", "-c", "lincls_embedded", "--data",
                      str(shapes_root), "--subset", not_files[kind], "--output-dir", str(tmp_path / "out"),
                      "--quiet", env=smoke(data_home), timeout=120))
    assert line.startswith("error: data.subset: file ") and KINDS[kind] in line, line


def test_a_subset_file_that_is_a_regular_file_is_read(shapes_root: Path, tmp_path: Path, data_home: Path) -> None:
    names = sorted(p.name for p in (shapes_root / "train").rglob("*.png"))[::2]
    subset = simclr_subset_file(tmp_path / "half.txt", names)
    result = moco("eval", "linear", "random", "--arch", "resnet18", "-c", "lincls_embedded", "--data",
                  str(shapes_root), "--subset", str(subset), "--output-dir", str(tmp_path / "out"), "--quiet",
                  env=smoke(data_home))
    assert clean(result) == "" and json.loads((tmp_path / "out" / "result.json").read_text())["dataset"][
        "subset"]["images"] == len(names)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_config_that_is_not_a_regular_file_is_one_line(kind: str, not_files: dict[str, str],
                                                          tmp_path: Path) -> None:
    """``-c /dev/zero``, and the same as a YAML's ``_base_`` (read before, without a limit)."""
    line = clean(moco_process("pretrain", "--print-config", "-c", not_files[kind], timeout=60))
    assert KINDS[kind] in line or "is a directory; give a YAML file" in line, line
    based = tmp_path / "based.yaml"
    based.write_text(f"_base_: {not_files[kind]}\n")
    line = clean(moco_process("pretrain", "--print-config", "-c", str(based), timeout=60))
    assert line.startswith("error: config file ") and KINDS[kind] in line, line


@pytest.mark.parametrize("kind", ["fifo", "zero-link"])
def test_list_and_annotation_files_that_are_not_regular_files_are_one_line(kind: str, not_files: dict[str, str],
                                                                           tmp_path: Path, data_home: Path) -> None:
    """A dataset's own lists replaced by a FIFO or a link to /dev/zero: Pets' trainval.txt, iNaturalist's
    val2018.json."""
    pets = pets_layout(tmp_path / "pets") / "oxford-iiit-pet"
    (pets / "annotations" / "test.txt").unlink()
    (pets / "annotations" / "test.txt").symlink_to(not_files[kind])
    line = clean(moco_process("eval", "linear", "random", "--arch", "resnet18", "-c", "lincls_embedded", "--data",
                      str(pets.parent), "--output-dir", str(tmp_path / "p"), "--quiet", env=smoke(data_home),
                      timeout=120))
    assert "test.txt" in line and KINDS[kind] in line, line
    inat = inat_layout(tmp_path / "inat", train_per_class=1, val_per_class=1)
    (inat / "val2018.json").unlink()
    (inat / "val2018.json").symlink_to(not_files[kind])
    line = clean(moco_process("eval", "finetune", "random", "--arch", "resnet18", "-c", "finetune_embedded", "--data",
                      str(inat), "--output-dir", str(tmp_path / "i"), "--quiet", env=smoke(data_home), timeout=120))
    assert "val2018.json" in line, line


# ---------------------------------------------------------------------------------------------------------------
# 5. Names read from a file that leave the dataset

ESCAPES = ["../../../etc/passwd", "/etc/passwd", "..", "train_val2018/../../outside.jpg", "a/../../b.jpg"]
INSIDE = ["./{name}", "{top}/x/../{rest}"]  # neighbours that climb and come back: they stay inside


@pytest.mark.parametrize("name", ESCAPES + INSIDE)
def test_inaturalist_file_names_that_leave_the_dataset_are_refused(name: str, tmp_path: Path,
                                                                   data_home: Path) -> None:
    """The iNaturalist layout opened ``file_name: "../../../etc/passwd"`` and tried to decode it."""
    root = inat_layout(tmp_path / "inat", train_per_class=1, val_per_class=1)
    doc = json.loads((root / "train2018.json").read_text())
    first = doc["images"][0]["file_name"]
    top, rest = first.split("/", 1)
    doc["images"][0]["file_name"] = name.format(name=first, top=top, rest=rest)
    (root / "train2018.json").write_text(json.dumps(doc))
    result = moco("eval", "finetune", "random", "--arch", "resnet18", "-c", "finetune_embedded", "--data", str(root),
                  "--output-dir", str(tmp_path / "out"), "--quiet", env=smoke(data_home))
    line = clean(result)
    if name in ESCAPES:
        assert f"image 0: file_name {name!r} leaves {root}" in line, line
    else:
        assert line == "" and result.returncode == 0


@pytest.mark.parametrize("name", ["../../../etc/passwd", "/etc/passwd", "../train/x.png"])
def test_subset_names_that_leave_the_dataset_are_refused(name: str, shapes_root: Path, tmp_path: Path,
                                                          data_home: Path) -> None:
    first = sorted(p.name for p in (shapes_root / "train").rglob("*.png"))[0]
    subset = simclr_subset_file(tmp_path / "escape.txt", [first, name])
    line = clean(moco("eval", "linear", "random", "--arch", "resnet18", "-c", "lincls_embedded", "--data",
                      str(shapes_root), "--subset", str(subset), "--output-dir", str(tmp_path / "out"), "--quiet",
                      env=smoke(data_home)))
    assert f"data.subset: {subset}: name {name!r} leaves" in line, line


def test_pets_list_names_that_leave_the_dataset_are_refused(tmp_path: Path, data_home: Path) -> None:
    pets = pets_layout(tmp_path / "pets") / "oxford-iiit-pet"
    listing = pets / "annotations" / "trainval.txt"
    listing.write_text("../../../../etc/passwd 1 1 1\n" + listing.read_text())
    line = clean(moco("eval", "linear", "random", "--arch", "resnet18", "-c", "lincls_embedded", "--data",
                      str(pets.parent), "--output-dir", str(tmp_path / "p"), "--quiet", env=smoke(data_home)))
    assert "image '../../../../etc/passwd.jpg' leaves" in line, line


@pytest.mark.parametrize("line_text", ["../../../etc/passwd", "/JPEGImages/../../../etc/passwd.jpg "
                                       "/SegmentationClassAug/2007_000033.png"])
def test_semseg_list_entries_that_leave_the_devkit_are_refused(line_text: str, tmp_path: Path,
                                                               data_home: Path) -> None:
    from tests.transfer.segmentation.layouts import voc_segmentation_layout

    root = voc_segmentation_layout(tmp_path / "datasets")
    listing = root / "VOC2012" / "ImageSets" / "Segmentation" / "val.txt"
    listing.write_text(listing.read_text() + line_text + "\n")
    line = clean(moco("eval", "semseg", "random", "--arch", "resnet18", "--data", str(root), "--output-dir",
                      str(tmp_path / "out"), "--quiet", env=smoke(data_home)))
    assert "val.txt:3:" in line and "leaves" in line, line


# ---------------------------------------------------------------------------------------------------------------
# 3. Images and label maps that are not images, in eval semseg


def _segmentation_set(root: Path, images: int = 6, size: tuple[int, int] = (40, 48)) -> Path:
    """``root/{train,val}_{img,lab}/<n>.png``: RGB images and grey label maps of classes 0 and 1."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        (root / f"{split}_img").mkdir(parents=True)
        (root / f"{split}_lab").mkdir()
        for n in range(images):
            image = Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8))
            image.save(root / f"{split}_img" / f"{n:02d}.png")
            label = np.zeros(size, dtype=np.uint8)
            label[8:30, 4 + n % 16:28 + n % 16] = 1
            Image.fromarray(label).save(root / f"{split}_lab" / f"{n:02d}.png")
    return root


def _damage(path: Path, how: str) -> None:
    """Make ``path`` one of the files that are not images (or not label maps)."""
    import io

    from PIL import Image

    from tests.moco_core import image_corpus as corpus

    if how == "truncated":  # passes the header check, fails to decode (the last pixels and IEND cut)
        path.write_bytes(path.read_bytes()[:-30])
    elif how == "garbage":
        path.write_bytes(os.urandom(300))
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "bomb":  # 20000 x 20000 pixels in 388 KB
        path.write_bytes(corpus.bomb_png())
    elif how == "link":  # a link to a file that is no image, inside the dataset (one out of it is refused:
        path.unlink()  # tests/moco_core/test_links.py)
        path.with_suffix(".txt").write_text("not an image\n")
        path.symlink_to(path.with_suffix(".txt").name)
    elif how == "rgb":  # a colour picture where a label map belongs
        png = io.BytesIO()
        Image.new("RGB", Image.open(path).size, (200, 10, 10)).save(png, format="PNG")
        path.write_bytes(png.getvalue())
    elif how == "resized":  # a label map of another size than its image
        Image.open(path).resize((10, 10)).save(path)


SEMSEG = ["eval", "semseg", "random", "--arch", "resnet18", "--train", "train_img:train_lab", "--test",
          "val_img:val_lab", "--classes", "a,b", "--quiet"]
HOW = ["bomb", "garbage", "empty", "link", "truncated"]


# (folder, how) of the broken file of pair n: images and label maps of each kind (those cut short pass the header
# check and fail to decode); the last pairs stay whole
BROKEN = [*(("img", how) for how in HOW), *(("lab", how) for how in [*HOW, "rgb", "resized"])]
CUT = [f"{n:02d}.png" for n, (_, how) in enumerate(BROKEN) if how == "truncated"]


@pytest.mark.parametrize("workers", [0, 1])
def test_semseg_skips_pairs_that_are_not_images_in_train_and_val_and_counts_them(workers: int, tmp_path: Path,
                                                                                 data_home: Path) -> None:
    """Under MOCO_SMOKE=1 (two iterations: most training pairs are never read), each kind of broken file in train
    and in val, as the image and as the label map: the run finishes; one warning line a set counts and names what
    the header check skipped (the bomb first: the pixel limit, from its header); the val image and label map cut
    short after their headers are decoded, fail and are left out of the score, counted in one line. Old code: a
    traceback, or (train, smoke) nothing noticed."""
    root = _segmentation_set(tmp_path / "seg", images=16)
    for n, (where, how) in enumerate(BROKEN):
        for split in ("train", "val"):
            _damage(root / f"{split}_{where}" / f"{n:02d}.png", how)
    result = moco(*SEMSEG, "--data", str(root), "--output-dir", str(tmp_path / "out"), "--set",
                  f"data.workers={workers}", env=smoke(data_home))
    assert clean(result) == "" and result.returncode == 0, result.stderr[-2000:]
    record = json.loads((tmp_path / "out" / "result.json").read_text())
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    checked = len(BROKEN) - len(CUT)  # found by the header check
    for split, which in (("train", "train set train_img:train_lab"), ("val", "test set val_img:val_lab")):
        (line,) = [w for w in warnings if w.startswith(f"warning: {which}: skipped")]
        assert f"skipped {checked} of its 16 image and label pairs, unreadable: {split}_img/00.png (Decompression" \
               "BombError: Image size (400000000 pixels) exceeds limit" in line, line
        assert f"{split}_img/01.png (cannot identify image)" in line and f" and {checked - 5} more" in line, line
    assert record["dataset"]["train_images"] == record["dataset"]["test_images"] == 16 - checked
    (left_out,) = [w for w in warnings if "did not decode" in w]
    assert f"test set val_img:val_lab: {len(CUT)} of {16 - checked} pairs did not decode and are left out of the " \
           f"score: {CUT[0]} (" in left_out and f", {CUT[1]} (" in left_out, left_out


@pytest.mark.parametrize(("split", "where", "how"), [("train", "lab", "bomb"), ("val", "img", "garbage"),
                                                      ("train", "lab", "rgb"), ("val", "lab", "link")])
def test_semseg_with_nothing_usable_left_is_one_line(split: str, where: str, how: str, tmp_path: Path,
                                                     data_home: Path) -> None:
    root = _segmentation_set(tmp_path / "seg", images=3)
    for path in sorted((root / f"{split}_{where}").iterdir()):
        _damage(path, how)
    line = clean(moco(*SEMSEG, "--data", str(root), "--output-dir", str(tmp_path / "out"), env=smoke(data_home)))
    assert f"none of its 3 image and label pairs can be read: {split}_{where}/00.png (" in line, line


def test_semseg_with_no_labelled_pixel_in_val_is_one_line(tmp_path: Path, data_home: Path) -> None:
    """Every val label the ignore index: mIoU NaN and exit 0 before; one line now, and no record."""
    from PIL import Image

    root = _segmentation_set(tmp_path / "seg", images=3)
    for path in (root / "val_lab").iterdir():
        Image.new("L", Image.open(path).size, 255).save(path)
    line = clean(moco(*SEMSEG, "--data", str(root), "--output-dir", str(tmp_path / "out"), env=smoke(data_home)))
    assert "no labelled pixel in its 3 label maps" in line and "mIoU is undefined" in line, line
    assert not (tmp_path / "out" / "result.json").exists()


def test_cityscapes_instance_maps_that_are_bombs_are_one_line(tmp_path: Path) -> None:
    """The Cityscapes detection reader opened instanceIds PNGs with PIL and let the bomb error through."""
    from moco_core.data.data import DatasetError
    from tests.moco_core import image_corpus as corpus
    from transfer.detection.cityscapes import _dicts

    image = tmp_path / "a_leftImg8bit.png"
    image.write_bytes(b"")
    for how, data in (("bomb", corpus.bomb_png()), ("garbage", os.urandom(200))):
        instances = tmp_path / f"{how}_gtFine_instanceIds.png"
        instances.write_bytes(data)
        with pytest.raises(DatasetError, match=r"is not a readable PNG \(") as caught:
            _dicts([(image, instances)])
        assert "\n" not in str(caught.value)


# ---------------------------------------------------------------------------------------------------------------
# 6. Report sets: all or none


@pytest.fixture(scope="module")
def report_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[int]]:
    """The golden records, and the sizes of the report of all of them (its four files), smallest first."""
    runs = tmp_path_factory.mktemp("report") / "runs"
    shutil.copytree(ROOT / "tests" / "reports" / "golden" / "records", runs)
    scratch = runs.parent / "scratch"
    assert clean(moco("report", str(runs), "-o", str(scratch))) == ""
    return runs, sorted(p.stat().st_size for p in scratch.iterdir())


@pytest.fixture
def previous_report(report_runs: tuple[Path, list[int]], tmp_path: Path) -> tuple[Path, Path, dict[str, bytes]]:
    """Records, and an earlier report of part of them in ``out`` (all four formats), byte for byte."""
    runs, _ = report_runs
    out = tmp_path / "out"
    assert clean(moco("report", str(runs / "linear"), "-o", str(out))) == ""
    return runs, out, {p.name: p.read_bytes() for p in out.iterdir()}


@pytest.mark.parametrize("cut", ["nothing", "smallest", "second", "third", "largest"])
def test_a_report_that_cannot_be_written_whole_leaves_the_previous_one_whole(
        cut: str, report_runs: tuple[Path, list[int]], previous_report: tuple[Path, Path, dict[str, bytes]]) -> None:
    """A file-size limit (RLIMIT_FSIZE: a write past it fails with EFBIG, as one on a full disk fails with ENOSPC)
    just under the size of each of the new report's files in turn (none can be written; those from the smallest
    up; ...; the largest alone): one line, exit 2, the earlier report as it was and no temporary file beside it.
    Old code: report.md replaced, report.csv cut at the limit, the .tex and .html of the earlier report left."""
    import resource

    runs, out, before = previous_report
    sizes = report_runs[1]
    limit = {"nothing": 0, "smallest": sizes[0] - 1, "second": sizes[1] - 1, "third": sizes[2] - 1,
             "largest": sizes[3] - 1}[cut]

    def capped() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    line = clean(moco_process("report", str(runs), "-o", str(out), preexec_fn=capped))
    assert line.startswith(f"error: cannot write the report to {out}: File too large; nothing was changed"), line
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_a_report_written_whole_replaces_the_whole_set(previous_report: tuple[Path, Path, dict[str, bytes]]) -> None:
    """The neighbour: room enough, the new set replaces the old one, and a format not asked for this time goes
    with it (never a new report.md beside an old report.html)."""
    runs, out, before = previous_report
    assert clean(moco("report", str(runs), "-o", str(out), "--formats", "md,csv")) == ""
    assert sorted(p.name for p in out.iterdir()) == ["report.csv", "report.md"]
    assert (out / "report.md").read_bytes() != before["report.md"]


@pytest.mark.parametrize("fail_at", range(4))
def test_no_space_at_any_file_of_the_set_changes_nothing(fail_at: int, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """ENOSPC at the n-th file's write (the CLI in this process, os.write patched): the set is as it was."""
    import errno

    from typer.testing import CliRunner

    import moco_core.file_sets
    from cli import app

    runs = tmp_path / "runs"
    shutil.copytree(ROOT / "tests" / "reports" / "golden" / "records", runs)
    out = tmp_path / "out"
    assert CliRunner().invoke(app, ["report", str(runs / "linear"), "-o", str(out)]).exit_code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    real, calls = moco_core.file_sets._written, []

    def full(directory: Path, name: str, data: bytes) -> Path:
        calls.append(name)
        if len(calls) > fail_at:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(directory, name, data)

    monkeypatch.setattr(moco_core.file_sets, "_written", full)
    result = CliRunner().invoke(app, ["report", str(runs), "-o", str(out)])
    assert result.exit_code == 2 and "No space left on device; nothing was changed" in result.output
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


# ---------------------------------------------------------------------------------------------------------------
# 8. Degenerate label sets


def _classes(shapes_root: Path, root: Path, count: int) -> Path:
    for split in ("train", "val"):
        for folder in sorted((shapes_root / split).iterdir())[:count]:
            shutil.copytree(folder, root / split / folder.name)
    return root


@pytest.mark.parametrize("command", ["linear", "finetune", "knn"])
@pytest.mark.parametrize("classes", [1, 2, 5, 6])
def test_fewer_classes_than_top_k(command: str, classes: int, shapes_root: Path, tmp_path: Path,
                                  data_home: Path) -> None:
    """One class crashed linear and fine-tuning (IndexError: top-5 of one class); kNN wrote no top5. Now top-5 is
    top-min(5, C): 100% below six classes, and the record says which k (``topk``)."""
    root = _classes(shapes_root, tmp_path / "data", classes)
    preset = {"linear": ["-c", "lincls_embedded"], "finetune": ["-c", "finetune_embedded"], "knn": []}[command]
    result = moco("eval", command, "random", "--arch", "resnet18", *preset, "--data", str(root), "--output-dir",
                  str(tmp_path / "out"), env=smoke(data_home))
    assert clean(result) == "" and result.returncode == 0
    record = json.loads((tmp_path / "out" / "result.json").read_text())
    assert record["topk"] == {"top1": 1, "top5": min(5, classes)}
    if classes <= 5:
        assert record["metrics"]["top5"] == 100.0
    if classes == 1:
        assert record["metrics"]["top1"] == 100.0


def test_a_val_class_with_no_training_image(shapes_root: Path, tmp_path: Path, data_home: Path) -> None:
    """A class whose train images are all unreadable (skipped): its val images are scored, never a hit at top-1
    for an untrained column... or at random; top-5 of 2 classes is 100%."""
    root = _classes(shapes_root, tmp_path / "data", 2)
    for path in sorted((root / "train").iterdir())[1].iterdir():
        path.write_bytes(os.urandom(100))
    result = moco("eval", "linear", "random", "--arch", "resnet18", "-c", "lincls_embedded", "--data", str(root),
                  "--output-dir", str(tmp_path / "out"), env=smoke(data_home))
    assert clean(result) == "" and result.returncode == 0
    record = json.loads((tmp_path / "out" / "result.json").read_text())
    assert record["metrics"]["top5"] == 100.0 and record["topk"] == {"top1": 1, "top5": 2}


# ---------------------------------------------------------------------------------------------------------------
# Also: W&B under --quiet


def test_wandb_prints_and_colours_nothing_under_quiet(tmp_path: Path, data_home: Path) -> None:
    """In a terminal (a pseudo-terminal, where W&B colours), with run.loggers [wandb]: --quiet leaves no W&B line
    and no colour; without it W&B speaks (the test would pass for a logger that never ran)."""
    import pty

    pytest.importorskip("wandb")

    def in_a_terminal(*args: str) -> bytes:
        leader, follower = pty.openpty()
        process = subprocess.Popen([sys.executable, "-m", "cli", *args], cwd=ROOT, stdin=follower,
                                   stdout=follower, stderr=follower,
                                   env={**os.environ, "PYTHONPATH": str(ROOT), **smoke(data_home)})
        os.close(follower)
        output = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal closed: the process ended
                break
            if not chunk:
                break
            output += chunk
        os.close(leader)
        assert process.wait(timeout=300) == 0, output[-3000:]
        return output

    args = ["pretrain", "-c", "embedded", "--set", "run.loggers=[wandb]", "--output-dir"]
    quiet = in_a_terminal(*args, str(tmp_path / "quiet"), "--quiet")
    assert b"wandb" not in quiet.lower() and b"\x1b[" not in quiet, quiet[-2000:]
    loud = in_a_terminal(*args, str(tmp_path / "loud"))
    assert b"wandb" in loud
