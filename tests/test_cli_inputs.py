"""No input gives a traceback: every command, every option, generated values and hostile files and paths end in
success or in one bounded line ``error: ...`` with exit code 2.

The property test drives the whole CLI surface with values drawn from a pool of hostile ones; the commands that
would start a long job are stopped where the job starts (the run functions are replaced by stubs that record
the call), so what is tested is everything before: parsing, config resolution and validation, file checks.
The cases of issue 16 are also run for real, each as its own test.
"""

from __future__ import annotations

import os
import shlex
import signal
from pathlib import Path
from typing import Any

import pytest
import typer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cli import app
from moco_core.errors import MESSAGE_LIMIT
from moco_core.terminal import is_printable
from tests.moco_core import image_corpus as corpus
from tests.test_flags import _options

runner = CliRunner()
LINE_LIMIT = MESSAGE_LIMIT + 100  # "error: " and a key name around the bounded message


def assert_clean(result: Any, args: list[str]) -> None:
    """Success, or exit 2 (1: a run that failed) with one bounded ``error:`` line; never a traceback."""
    shown = f"moco {' '.join(args)[:300]}\n{result.output[-2000:]}"
    assert "Traceback" not in result.output, shown
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{shown}\nraised {result.exception!r}") from result.exception
    assert result.exit_code in (0, 1, 2), shown
    if result.exit_code:
        errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1, shown
        assert len(errors[0]) <= LINE_LIMIT, shown


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory, shapes_root: Path) -> dict[str, str]:
    """Paths a user might pass by mistake, or an attacker on purpose."""
    base = tmp_path_factory.mktemp("hostile")
    files = {
        "text": b"hello world\n", "lfs": b"version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 9\n",
        "html": b"<!DOCTYPE html><html></html>", "empty": b"", "junk": os.urandom(300),
        "pickle": b"\x80\x04\x95\x1a\x00\x00\x00\x00\x00\x00\x00\x8c\x02os\x94\x8c\x06system\x94\x93\x94.",
        "yaml": b"!!python/object/apply:os.system ['true']\n", "deep.json": b"[" * 100000 + b"]" * 100000,
        "record.result.json": b'{"schema": "moco.result", "version": 1, "task": "linear"}',
    }
    for name, content in files.items():
        (base / name).write_bytes(content)
    (base / "dir").mkdir()
    (base / "loop").symlink_to(base / "loop")
    return {"shapes": str(shapes_root), "missing": str(base / "absent"), "dir": str(base / "dir"),
            "under_a_file": str(base / "text" / "sub"), "loop": str(base / "loop"), "devnull": os.devnull,
            **{name: str(base / name) for name in files}}


VALUES = ["0", "-1", "1", "3", "2", "99999999999999999999999", "1e309", "nan", "-inf", "0.5", "tpu", "cuda:abc",
          "cuda", "cpu", "auto", "", " ", "x" * 3000, "a\nb", "é✓", "voc_2007_trainval", "knn", "linear",
          "embedded", "random", "resnet18", "md,csv", "linear,voc", "K", "m", "0,0.9", "8,16",
          "model.arch=resnet18", "optim.epochs=-1", "model.queue_size=1000000000000", "=", "a.b.c=1", "[1,2",
          "run.seed=100000000000000000000000", "data.path=/nonexistent", "{a: 1}", "!!python/name:os.system",
          "annotations/train.json", "kit/ImageSets/Main/a.txt", "x.json:images"]
PATHY = {"--data", "--output-dir", "--config", "-c", "--weights", "--resume-from", "--eval-config", "--eval-data",
         "--out", "-o", "--train", "--test", "--resume", "--robustness"}
FLAGS = {"--quiet", "--print-config", "--cached-features", "--force", "--progress", "--resume", "--grid"}
ARGUMENTS = {  # positional arguments per command
    "pretrain": 0, "sweep": 2, "eval linear": 1, "eval finetune": 1, "eval knn": 1, "eval voc": 1, "eval coco": 1,
    "eval lvis": 1, "eval cityscapes": 1, "convert": 2, "report": 1, "demo": 0, "eval snapshots": 1, "launch": 0,
    "eval transfer": 1, "eval retrieval": 1, "eval davis": 1, "eval linseg": 1,
}


def _stub_long_jobs(monkeypatch: pytest.MonkeyPatch, calls: list[str]) -> None:
    """Replace the functions that start a job by stubs: the CLI's checks run, the job does not."""
    import classification.finetune
    import classification.frozen.grid
    import classification.frozen.shots
    import classification.linear
    import classification.linear_transfer.run
    import dense.linseg
    import moco_core.run.train
    import moco_demo.run
    import probes.davis.run
    import probes.retrieval.run
    import sweeps.sweep
    import transfer.detection.run

    def stub(name: str):
        def record(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            raise SystemExit(0)
        return record

    monkeypatch.setattr(moco_core.run.train, "pretrain", stub("pretrain"))
    monkeypatch.setattr(classification.linear, "linear_eval", stub("linear"))
    monkeypatch.setattr(classification.frozen.grid, "grid_eval", stub("grid"))
    monkeypatch.setattr(classification.frozen.shots, "fewshot_eval", stub("fewshot"))
    monkeypatch.setattr(classification.finetune, "finetune", stub("finetune"))
    monkeypatch.setattr(classification.linear_transfer.run, "run_suite", stub("transfer suite"))
    monkeypatch.setattr(transfer.detection.run, "evaluate", stub("transfer"))
    monkeypatch.setattr(sweeps.sweep, "run_sweep", stub("sweep"))
    monkeypatch.setattr(moco_demo.run, "run_demo", stub("demo"))
    monkeypatch.setattr(probes.retrieval.run, "retrieval_eval", stub("retrieval"))
    monkeypatch.setattr(probes.davis.run, "davis_eval", stub("davis"))
    monkeypatch.setattr(dense.linseg, "linseg", stub("linseg"))


COMMANDS = sorted({c for c, _ in _options(typer.main.get_command(app))} | set(ARGUMENTS))
OPTIONS: dict[str, list[str]] = {}
for _command, _option in _options(typer.main.get_command(app)):
    OPTIONS.setdefault(_command, []).append(_option)


@st.composite
def invocations(draw: st.DrawFn, paths: dict[str, str]) -> list[str]:
    command = draw(st.sampled_from(COMMANDS))
    value = st.one_of(st.sampled_from(VALUES), st.sampled_from(sorted(paths.values())), st.text(max_size=20))
    args = command.split()
    args += [draw(value) for _ in range(ARGUMENTS.get(command, 0))]
    for option in draw(st.lists(st.sampled_from(OPTIONS.get(command, ["--help"])), max_size=5)):
        if option in FLAGS:
            args.append(option)
        elif option in PATHY:
            args += [option, draw(st.one_of(st.sampled_from(sorted(paths.values())), value))]
        else:
            args += [option, draw(value)]
    if "--print-config" in OPTIONS.get(command, []) and draw(st.booleans()):
        args.append("--print-config")
    return args


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(data=st.data())
def test_any_command_line_succeeds_or_fails_in_one_line(data: st.DataObject, hostile: dict[str, str],
                                                        tmp_path_factory: pytest.TempPathFactory) -> None:
    args = data.draw(invocations(hostile))
    calls: list[str] = []
    with pytest.MonkeyPatch.context() as monkeypatch:
        _stub_long_jobs(monkeypatch, calls)
        monkeypatch.setenv("MOCO_DATA_HOME", str(tmp_path_factory.getbasetemp() / "data_home"))
        monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))
        result = runner.invoke(app, args)
    assert_clean(result, args)


SMALL = ["--set", "model.arch=resnet18", "--set", "optim.batch_size=8", "--set", "model.bn_groups=2",
         "--set", "model.queue_size=16", "--set", "optim.epochs=1", "--set", "augment.crop_size=32",
         "--set", "data.workers=0", "--set", "run.knn_every=0", "--quiet"]


@pytest.mark.parametrize(("extra", "message"), [
    (["--device", "tpu"], "run.device: expected auto, cpu, cuda, cuda:N or mps, got 'tpu'"),
    (["--device", "cuda:abc"], "run.device: expected auto, cpu, cuda, cuda:N or mps, got 'cuda:abc'"),
    (["--seed", str(10**30)], "run.seed: 1000000000000000000000000000000 is beyond 64 bits"),  # the one bound
    (["--seed", str(2**40)], "run.seed: must be in [0, 2**32)"),  # within 64 bits: the seed's own range
    (["--set", "model.queue_size=1000000000000"], "model.queue_size: must be in [1, 16777216]"),
    (["--set", f"model.arch={'x' * 5000}"], "model.arch: expected one of"),
    (["--output-dir", "{text}"], "run.output_dir: cannot create"),
    (["--output-dir", "{text}/sub"], "run.output_dir: cannot create"),
    (["--set", "model.bn_groups=8"], "optim.batch_size: 8 images over model.bn_groups=8 leaves each BN layer 1 "
                                     "image, and at augment.crop_size 32 a ResNet's last stage is 1x1"),
])
def test_the_issues_inputs_fail_in_one_line(extra: list[str], message: str, hostile: dict[str, str],
                                            tmp_path: Path) -> None:
    args = ["pretrain", "-c", "embedded", "--data", hostile["shapes"], *SMALL, "--output-dir", str(tmp_path / "r"),
            *[e.format(**hostile) for e in extra]]
    result = runner.invoke(app, args)
    assert_clean(result, args)
    assert result.exit_code == 2 and message in result.output


@pytest.mark.parametrize("args", [
    ["eval", "knn", "random", "--data", "{shapes}", "--device", "tpu"],
    ["eval", "knn", "random", "--data", "{shapes}", "--seed", "-1"],
    ["eval", "voc", "-c", "voc_embedded", "random", "--device", "cuda:x"],
    ["eval", "linear", "random", "-c", "lincls_embedded", "--device", "cuda:x"],
    ["convert", "{text}", "{dir}/out.pkl"],
    ["convert", "{lfs}", "{dir}/out.pkl"],
    ["eval", "linear", "{html}", "--data", "{shapes}"],
    ["eval", "knn", "0", "--data", "~0"],  # a user that does not exist: the path stays as typed, as in a shell
    ["pretrain", "-c", "embedded", "--data", "~nosuchuser/imagenet"],
    ["eval", "snapshots", "{shapes}", "--data", "{shapes}"],  # not a pretraining's run directory
    ["launch", "--cluster", "local", "--", "report", "{dir}"],
])
def test_other_commands_fail_in_one_line(args: list[str], hostile: dict[str, str]) -> None:
    args = [a.format(**hostile) for a in args]
    result = runner.invoke(app, args)
    assert_clean(result, args)
    assert result.exit_code == 2


def test_a_data_home_that_cannot_be_written_is_one_line(hostile: dict[str, str], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOCO_DATA_HOME", hostile["under_a_file"])  # no folder can be made there
    for args in (["pretrain", "-c", "embedded", *SMALL, "--output-dir", str(tmp_path / "p")],
                 ["eval", "voc", "-c", "voc_embedded", "random", "--output-dir", str(tmp_path / "v")]):
        result = runner.invoke(app, args)
        assert_clean(result, args)
        assert result.exit_code == 2 and "cannot write the embedded " in result.output  # shapes, or VOC2007 scenes
        assert "set MOCO_DATA_HOME to a writable folder" in result.output


def test_one_bad_record_is_skipped_not_fatal_to_the_report(hostile: dict[str, str], tmp_path: Path) -> None:
    import shutil

    records = tmp_path / "records"
    shutil.copytree(Path(__file__).parent / "reports" / "golden" / "records", records)
    (records / "deep.result.json").write_bytes(Path(hostile["deep.json"]).read_bytes())
    result = runner.invoke(app, ["report", str(records), "-o", str(tmp_path / "out"), "--formats", "md"])
    assert result.exit_code == 0, result.output
    assert "deep.result.json (malformed JSON (nested too deep))" in result.output
    assert (tmp_path / "out" / "report.md").is_file()


# ---------------------------------------------------------------------------------------------------------
# Issue 32: control characters from outside, expanding YAML, empty paths


CONTROL_PIECES = ["\x1b[2J", "\x1b]0;pwned\x07", "\x1bc", "\x9b31m", "\u202e", "\r", "\x00", "\x07", "\udcff",
                  "a", "/", ".", "=", "embedded", "1"]
nasty_text = st.lists(st.sampled_from(CONTROL_PIECES), min_size=1, max_size=6).map("".join)


@st.composite
def nasty_invocations(draw: st.DrawFn) -> list[str]:
    """Any command, every argument and option value carrying control characters (keys of --set too)."""
    command = draw(st.sampled_from(COMMANDS))
    args = command.split() + [draw(nasty_text) for _ in range(ARGUMENTS.get(command, 0))]
    for option in draw(st.lists(st.sampled_from(OPTIONS.get(command, ["--help"])), min_size=1, max_size=4)):
        if option in FLAGS:
            args.append(option)
        elif option == "--set":
            args += [option, draw(st.sampled_from([f"{draw(nasty_text)}=1", f"run.output_dir={draw(nasty_text)}",
                                                   f"model.arch={draw(nasty_text)}", draw(nasty_text)]))]
        else:
            args += [option, draw(nasty_text)]
    return args


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(data=st.data())
def test_no_command_prints_a_control_character_it_was_given(data: st.DataObject,
                                                            tmp_path_factory: pytest.TempPathFactory) -> None:
    args = data.draw(nasty_invocations())
    calls: list[str] = []
    with pytest.MonkeyPatch.context() as monkeypatch:
        _stub_long_jobs(monkeypatch, calls)
        monkeypatch.setenv("MOCO_DATA_HOME", str(tmp_path_factory.getbasetemp() / "data_home"))
        monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))
        result = runner.invoke(app, args)
    assert_clean(result, args)
    assert is_printable(result.output), f"moco {args!r}\n{result.output[-2000:]!r}"


@pytest.fixture(scope="module")
def escape_named_images(tmp_path_factory: pytest.TempPathFactory, shapes_root: Path) -> Path:
    """The shapes' train/ with two files whose names clear the screen and retitle the window: one that fails the
    header check (garbage), one that passes it and fails to decode (a truncated PNG)."""
    import io
    import shutil

    from PIL import Image

    root = tmp_path_factory.mktemp("escapes") / "train"
    shutil.copytree(shapes_root / "train", root)
    first = sorted(p for p in root.iterdir() if p.is_dir())[0]
    (first / "\x1b[2J\x1b]0;pwned\x07.png").write_bytes(os.urandom(200))
    png = io.BytesIO()
    Image.new("RGB", (48, 48), (200, 10, 10)).save(png, format="PNG")
    (first / "\x1bc\u202etruncated.png").write_bytes(png.getvalue()[:-40])
    return root.parent


@pytest.mark.parametrize("pipeline", ["pil", "tensor"])
def test_file_names_with_escapes_are_shown_escaped_even_with_quiet(escape_named_images: Path, tmp_path: Path,
                                                                   pipeline: str) -> None:
    import subprocess
    import sys

    small = [a for a in SMALL if a != "--quiet"]
    args = ["pretrain", "-c", "embedded", "--data", str(escape_named_images), *small, "--quiet",
            "--set", f"data.pipeline={pipeline}", "--set", "model.bn_groups=1", "--set", "optim.batch_size=16",
            "--output-dir", str(tmp_path / "run")]
    res = subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, timeout=600)
    out, err = res.stdout.decode(errors="replace"), res.stderr.decode(errors="replace")
    assert res.returncode == 0, err[-3000:]
    assert b"\x1b" not in res.stdout + res.stderr and "\u202e" not in err and "\x07" not in err, err
    assert "\\x1b[2J\\x1b]0;pwned\\x07.png" in err  # the header check's skip warning
    assert "\\x1bc\\u202etruncated.png" in err  # the decode warning
    assert "Traceback" not in out + err


def alias_bomb(depth: int, fanout: int) -> str:
    """``depth`` levels of anchors, each a list of ``fanout`` aliases of the one before: fanout**depth values."""
    lines = ["l0: &l0 [" + ", ".join(["x"] * fanout) + "]"]
    for level in range(1, depth + 1):
        lines.append(f"l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * fanout) + "]")
    return "\n".join(lines) + f"\nmodel: {{arch: *l{depth}}}\n"


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(depth=st.integers(1, 12), fanout=st.integers(2, 12), inside_set=st.booleans())
def test_expanding_yaml_is_refused_before_it_is_expanded(depth: int, fanout: int, inside_set: bool,
                                                         tmp_path_factory: pytest.TempPathFactory) -> None:
    import time
    import tracemalloc

    from moco_core.config import MAX_YAML_VALUES

    text = alias_bomb(depth, fanout)
    if inside_set:
        args = ["pretrain", "--print-config", "--set", "run={" + text.strip().replace("\n", ", ") + "}"]
    else:
        path = tmp_path_factory.mktemp("yaml") / "bomb.yaml"
        path.write_text(text)
        args = ["pretrain", "--print-config", "--data", "x", "-c", str(path)]
    # Every node once expanded: a list l_k is itself plus fanout copies of l_{k-1} (l_0: fanout scalars); the
    # document is its mapping, each key and value, and model: {arch: *l_depth} (3 nodes and l_depth again).
    sizes = [1 + fanout]
    for _ in range(depth):
        sizes.append(1 + fanout * sizes[-1])
    values = 1 + sum(1 + size for size in sizes) + 3 + sizes[-1]
    traced = values > MAX_YAML_VALUES  # memory is bounded for a bomb only; tracing the rest costs time, not checks
    if traced:
        tracemalloc.start()
    started = time.perf_counter()
    result = runner.invoke(app, args)
    took, peak = time.perf_counter() - started, tracemalloc.get_traced_memory()[1] if traced else 0
    tracemalloc.stop()
    assert_clean(result, args)
    if traced:  # 424 bytes once cost 2.1 GB and 39 s here
        assert result.exit_code == 2 and "through YAML aliases" in result.output, result.output
        assert peak < 50e6 and took < 5, (peak, took)
    else:  # a small document with anchors loads: refused for what its values are, not for its aliases
        assert "YAML aliases" not in result.output


@pytest.mark.parametrize("yaml_text", ["a: &a [*a]\nmodel: {arch: *a}\n", "run: &r {output_dir: *r}\n"])
def test_a_yaml_value_that_holds_itself_is_one_line(yaml_text: str, tmp_path: Path) -> None:
    path = tmp_path / "loop.yaml"
    path.write_text(yaml_text)
    result = runner.invoke(app, ["pretrain", "--print-config", "--data", "x", "-c", str(path)])
    assert result.exit_code == 2 and "holds itself through a YAML alias" in result.output, result.output


@pytest.mark.parametrize("args", [
    ["pretrain", "-c", "embedded", "--output-dir", ""],
    ["pretrain", "-c", "embedded", "--output-dir", "  "],
    ["pretrain", "-c", "embedded", "--set", "run.output_dir=''"],
    ["pretrain", "-c", "embedded", "--data", ""],
    ["eval", "linear", "random", "-c", "lincls_embedded", "--output-dir", ""],
    ["eval", "voc", "-c", "voc_embedded", "random", "--output-dir", ""],
    ["eval", "coco", "-c", "coco_embedded", "random", "--output-dir", ""],
])
def test_an_empty_path_is_refused_not_read_as_the_current_directory(args: list[str], tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.yaml").write_text("mine: true\n")  # what the user keeps in the folder they are in
    calls: list[str] = []
    _stub_long_jobs(monkeypatch, calls)
    result = runner.invoke(app, args)
    assert_clean(result, args)
    assert result.exit_code == 2 and "must not be empty" in result.output and not calls, result.output
    assert (tmp_path / "config.yaml").read_text() == "mine: true\n" and sorted(os.listdir(tmp_path)) == ["config.yaml"]


def test_a_run_never_writes_over_a_config_yaml_or_run_json_it_did_not_write(shapes_root: Path, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.yaml").write_text("mine: true\n")
    args = ["pretrain", "-c", "embedded", "--data", str(shapes_root), *SMALL, "--output-dir", "."]
    result = runner.invoke(app, args)
    assert_clean(result, args)
    assert result.exit_code == 2 and "holds a config.yaml that no moco run wrote" in result.output, result.output
    assert (tmp_path / "config.yaml").read_text() == "mine: true\n"
    assert sorted(os.listdir(tmp_path)) == ["config.yaml"]  # no run.json, no lock, no metrics left behind
    (tmp_path / "config.yaml").unlink()
    (tmp_path / "run.json").write_text('{"my": "notes"}')
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "holds a run.json that no moco run wrote" in result.output, result.output
    assert (tmp_path / "run.json").read_text() == '{"my": "notes"}'


# ---------------------------------------------------------------------------------------------------------
# Odd images through both data pipelines (issue 32): a 16-bit PNG ended the tensor pipeline in a traceback, and a
# PNG bomb was decoded in full when data.verify_images was false.

# What PIL writes, format by format, of the modes it has; and the PNGs it does not write, by hand.
WRITABLE = [(mode, fmt) for fmt in corpus.FORMATS for mode in corpus.MODES
            if corpus.saved(corpus.picture(4, 3), mode, fmt) is not None]
HAND_PNGS = {"gray16": (1, 0), "gray_alpha16": (2, 4), "rgb16": (3, 2), "rgba16": (4, 6)}
LIMIT = 700  # Image.MAX_IMAGE_PIXELS in the property test: images over 1400 pixels are bombs


@st.composite
def odd_files(draw: st.DrawFn) -> tuple[str, bytes, int | None]:
    """An image of a drawn mode, bit depth, size and format, saved with drawn options, maybe cut or with a byte
    changed; with the name it is saved under and its number of pixels if it is whole (None if not)."""
    width, height = draw(st.integers(1, 48)), draw(st.integers(1, 48))
    img = corpus.picture(width, height, seed=draw(st.integers(0, 3)))
    if draw(st.integers(0, 4)) == 0:
        kind = draw(st.sampled_from(sorted(HAND_PNGS)))
        channels, colour_type = HAND_PNGS[kind]
        name, data = f"{kind}.png", corpus.wide_png(width, height, channels, colour_type, seed=width)
    else:
        mode, fmt = draw(st.sampled_from(WRITABLE))
        options: dict[str, object] = {
            "JPEG": {"quality": draw(st.integers(1, 100)), "progressive": draw(st.booleans()),
                     "subsampling": draw(st.integers(0, 2))},
            "WEBP": {"lossless": draw(st.booleans()), "quality": draw(st.integers(0, 100))},
            "TIFF": {"compression": draw(st.sampled_from(["raw", "tiff_lzw", "tiff_deflate", "packbits"]))},
            "PNG": {"compress_level": draw(st.integers(0, 9))},
        }.get(fmt, {})
        saved = corpus.saved(img, mode, fmt, **options)
        assert saved is not None
        name, data = f"{fmt.lower()}-{mode.replace(';', '_')}{corpus.FORMATS[fmt]}", saved
    damage = draw(st.sampled_from(["none", "none", "cut", "byte"]))
    if damage == "cut":
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif damage == "byte":
        at = draw(st.integers(0, len(data) - 1))
        data = data[:at] + bytes([(data[at] + draw(st.integers(1, 255))) % 256]) + data[at + 1:]
    return name, data, width * height if damage == "none" else None


@settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(file=odd_files())
def test_both_pipelines_make_the_same_decision_on_any_image(file: tuple[str, bytes, int | None],
                                                            tmp_path_factory: pytest.TempPathFactory) -> None:
    """Any generated image file: both pipelines refuse it, or both decode it to the same pixels; the header check
    refuses nothing that decodes; a whole file is taken unless over the pixel limit, which all three refuse."""
    import warnings

    from PIL import Image

    name, data, pixels = file
    path = tmp_path_factory.getbasetemp() / "odd_files" / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    with pytest.MonkeyPatch.context() as monkeypatch, warnings.catch_warnings():
        monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", LIMIT)
        warnings.simplefilter("ignore")  # PIL's DecompressionBombWarning between the limit and twice it
        pil, tensor, by_torchvision, header = corpus.answers(path)
    corpus.assert_agree(name, pil, tensor, by_torchvision)
    taken = not isinstance(pil, corpus.Refused)
    assert header is None or not taken, (name, header)
    if pixels is not None:
        bomb = pixels > 2 * LIMIT
        assert taken != bomb, (name, pil)
        if bomb:
            assert isinstance(tensor, corpus.Refused) and "exceeds limit" in tensor.reason, (name, tensor)
            assert header is not None and "exceeds limit" in header, (name, header)


@pytest.mark.parametrize("verify", ["false", "true"])
def test_pretraining_on_the_tensor_pipeline_survives_a_16_bit_png_and_a_bomb(verify: str, tmp_path: Path,
                                                                           shapes_root: Path) -> None:
    """The issue's run, for real: 13 images of the embedded set, a 16-bit gray and a 16-bit colour PNG, and the
    388 KB PNG of 20000 x 20000 pixels. The run ends in a checkpoint; stderr holds one line, the bomb's: refused
    at start-up (verify_images true) or where its batch is decoded (false); its peak memory stays under 2 GiB (the
    bomb alone decodes to 1.2 GB), under an address-space cap that stops a runaway long before the machine's."""
    import resource
    import shutil
    import subprocess
    import sys

    data = tmp_path / "data"
    data.mkdir()
    for image in sorted((shapes_root / "train").rglob("*.png"))[:13]:
        shutil.copy(image, data / image.name)
    (data / "deep-gray.png").write_bytes(corpus.wide_png(48, 40, 1, 0, seed=1))
    (data / "deep-rgb.png").write_bytes(corpus.wide_png(48, 40, 3, 2, seed=2))
    (data / "bomb.png").write_bytes(corpus.bomb_png())
    args = [sys.executable, "-m", "cli", "pretrain", "-c", "embedded", "--data", str(data), "--output-dir",
            str(tmp_path / "run"), *SMALL, "--set", "data.pipeline=tensor", "--set", f"data.verify_images={verify}",
            "--device", "cpu"]  # a CUDA context reserves more address space than the cap below

    def cap() -> None:
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        resource.setrlimit(resource.RLIMIT_AS, (5 * 2**30 if hard == resource.RLIM_INFINITY else min(5 * 2**30, hard),
                                                hard))

    # The run's own peak memory. A process forked from this one keeps this one's resident size as its peak across
    # exec (the kernel's maxrss outlives the old image): measured on the run itself, a test process grown past
    # 2 GiB by earlier tests read as the run's. So a small process started afresh starts the run and reports the
    # peak of the run (and the loader workers it waited for): RUSAGE_CHILDREN of a process with no other child.
    probe = ("import resource, subprocess, sys; code = subprocess.call(sys.argv[1:], stdout=subprocess.DEVNULL); "
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(code)")
    root = Path(__file__).resolve().parents[1]
    with open(tmp_path / "stderr", "w") as stderr:
        process = subprocess.Popen([sys.executable, "-c", probe, *args], cwd=root, stdout=subprocess.PIPE,
                                   stderr=stderr, preexec_fn=cap, env={**os.environ, "PYTHONPATH": str(root)})
        peak_kib = int(process.communicate()[0].split()[-1])
    lines = (tmp_path / "stderr").read_text().splitlines()
    assert process.returncode == 0 and (tmp_path / "run" / "checkpoint_last.pth.tar").is_file(), lines
    lines = [line for line in lines if "too short for its numbers" not in line]  # 1 or 2 steps: said, and true
    assert len(lines) == 1 and "bomb.png (DecompressionBombError: Image size (400000000 pixels) exceeds limit" in (
        lines[0]), lines
    assert lines[0].startswith("cannot decode " if verify == "false" else "warning: skipped 1 unreadable image")
    assert peak_kib * 1024 < 2 * 2**30


# ---------------------------------------------------------------------------------------------------------
# Characters a terminal or a reader acts on: C0 but newline and tab, DEL, C1, line separators, bidi controls,
# lone surrogates (moco_core.terminal's set, restated here as the independent reference).
RAW_CONTROL = "[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
FORMULA = ("=", "+", "-", "@", "\t", "\r", "\n")  # a cell starting so is a spreadsheet formula (OWASP)
HOSTILE_TEXT = st.one_of(st.text(), st.sampled_from([
    "\x1bc", "\x1b[2J", "\x1b]0;owned\x07", "\x9b31m", "\u202eevil", "\ud800", "a\rb", "=HYPERLINK(\"x\")",
    "-1+1", "@SUM(A1)", "\t=1", "+cmd|' /C calc'!A0", "-1.5",
]))


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(text=HOSTILE_TEXT)
def test_a_shared_record_cannot_drive_a_terminal_or_a_spreadsheet(text: str) -> None:
    """A record field of any text (records are shared): ``moco report`` succeeds, prints and writes no control
    character raw, and report.csv reads back whole (every row its columns) with no cell starting a formula but
    plain numbers."""
    import csv
    import json
    import re
    import tempfile

    from reports.safe_text import is_plain_number
    from tests.reports.conftest import base_record

    record = base_record(dataset={"path": text or "x", "name": text, "classes": 8}, status="failed", failure=text,
                         sweep={"param": "momentum", "value": 0.9, "method": text or "x"})
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "runs").mkdir()
        (Path(tmp) / "runs" / "r.result.json").write_text(json.dumps(record), encoding="utf-8")
        (Path(tmp) / "runs" / "s.result.json").write_text(json.dumps(base_record(failure=text)), encoding="utf-8")
        args = ["report", str(Path(tmp) / "runs"), "-o", str(Path(tmp) / "out")]
        result = runner.invoke(app, args)
        assert_clean(result, args)
        assert result.exit_code == 0, result.output
        assert re.search(RAW_CONTROL, result.output) is None
        for name in ("report.md", "report.csv", "report.tex", "report.html"):
            assert re.search(RAW_CONTROL, (Path(tmp) / "out" / name).read_text(encoding="utf-8")) is None, name
        with (Path(tmp) / "out" / "report.csv").open(newline="", encoding="utf-8") as f:
            cells = list(csv.reader(f))
    assert all(len(line) == len(cells[0]) for line in cells)
    assert len(cells) == 1 + 2 * 2  # the header; top-1 and top-5 of each of the two rows
    assert all(not c.startswith(FORMULA) or is_plain_number(c) for line in cells for c in line)


# ---------------------------------------------------------------------------------------------------------
# Signals to every wrapper command: moco trials, demo, sweep and launch --wait run other runs in their process (or
# wait for a job). A stop signal (SIGTERM: a scheduler's; SIGINT: Ctrl-C) must stop the whole command: the run
# under way stops (a pretraining with its checkpoint), nothing more is started, the exit status is 128 + the
# signal's number and the last line names the command that continues; run, that command finishes what is left
# and redoes nothing finished. SIGUSR1 is left out: no command handles it (its default action ends the process).
# The runs are stand-ins (below) that behave as the real ones do towards the wrapper, so each case takes
# milliseconds; tests/cluster, tests/moco_demo and tests/sweeps signal real runs in processes of their own.

class FakeRuns:
    """Pretraining and evaluations as a wrapper sees them. A pretraining takes the stop signals (StopSignal), so it
    stops after its epoch, writes its checkpoint and returns; an evaluation has no handler. ``sig`` is sent to
    this process at ``point`` ("middle" or "end": its output written) of the first run of ``kind``."""

    def __init__(self, sig: int | None = None, kind: str = "", point: str = "") -> None:
        self.sig, self.kind, self.point = sig, kind, point
        self.log: list[str] = []  # what was done, in order; "signal" where the signal was sent

    def _send(self, kind: str, point: str) -> None:
        if self.sig is not None and (kind, point) == (self.kind, self.point) and "signal" not in self.log:
            self.log.append("signal")
            signal.raise_signal(self.sig)

    def pretrain(self, cfg: Any, resume: Any = None, show_progress: Any = False) -> Path:
        import torch

        from moco_core import checkpoint
        from moco_core.run.preemption import StopSignal

        run_dir = Path(cfg.run.output_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        epoch = checkpoint.load(run_dir / checkpoint.LAST)["epoch"] if resume else 0
        with StopSignal(torch.device("cpu"), every=1) as stop:
            while epoch < cfg.optim.epochs and not stop.requested(0):
                epoch += 1
                self.log.append(f"train {run_dir} epoch {epoch}")
                self._send("pretrain", "middle")
            torch.save({"epoch": epoch}, run_dir / checkpoint.LAST)
            self._send("pretrain", "end" if epoch == cfg.optim.epochs else "")
        return run_dir

    def evaluate(self, out: Path) -> Path:
        self.log.append(f"start {out}")
        out.mkdir(parents=True, exist_ok=True)
        self._send("eval", "middle")
        (out / "result.json").write_text("{}")
        self.log.append(f"record {out}")
        self._send("eval", "end")
        return out / "result.json"

    def job(self) -> Any:
        runs = self

        class Job:  # a submitit job: its task's status, or the wait is signalled
            job_id = "4242"

            def results(self) -> list[int]:
                runs.log.append("submitted")
                runs._send("job", "middle")
                if runs.sig is not None and runs.point == "end":  # the signal went to the job's tasks
                    runs.log.append("signal")
                    return [128 + runs.sig]  # the status of a command that signal stopped (cluster.job.Job)
                return [0]

            def cancel(self, check: bool = True) -> None:  # scancel: SIGTERM to the job's tasks
                runs.log.append("job told to stop")

            def done(self) -> bool:
                return True

        return Job()

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import classification.knn
        import classification.linear
        import cluster.job
        import moco_core.run.train
        import reports.render
        import reports.report

        monkeypatch.setattr(moco_core.run.train, "pretrain", self.pretrain)
        monkeypatch.setattr(classification.linear, "linear_eval",
                            lambda cfg, *a, **k: self.evaluate(Path(cfg.run.output_dir)))
        monkeypatch.setattr(classification.knn, "knn_eval", lambda w, d, out, **k: (self.evaluate(out), {"top1": 1.0}))
        monkeypatch.setattr(reports.report, "build_report", lambda dirs: None)
        monkeypatch.setattr(reports.render, "write_report",
                            lambda report, out, formats: out.mkdir(parents=True) or (out / "report.md").write_text(""))
        monkeypatch.setattr(cluster.job, "executor", lambda *a, **k: type("Executor", (), {
            "submit": lambda executor, job: self.job()})())


WRAPPERS = {  # a tiny command of each wrapper; {out} is its output directory
    "trials pretrain": ["trials", "2", "--", "pretrain", "-c", "embedded", "--set", "optim.epochs=3", "--quiet",
                        "--output-dir", "{out}"],
    "trials eval": ["trials", "2", "--seed", "3", "--", "eval", "linear", "{out}/weights.pth.tar", "-c",
                    "lincls_embedded", "--output-dir", "{out}"],
    "demo": ["demo", "--tasks", "linear", "--output-dir", "{out}"],
    "sweep": ["sweep", "m", "0.9,0.99", "-c", "embedded", "--set", "optim.epochs=3", "--trials", "2", "--output-dir",
              "{out}"],
    "launch --wait": ["launch", "--wait", "--", "pretrain", "-c", "embedded", "--output-dir", "{out}"],
}
CASES = [(wrapper, kind, point) for wrapper in WRAPPERS
         for kind in (("job",) if wrapper.startswith("launch") else ("eval",) if wrapper == "trials eval" else
                      ("pretrain",) if wrapper == "trials pretrain" else ("pretrain", "eval"))
         for point in ("middle", "end")]


def _outputs(root: Path) -> list[str]:
    """What a run leaves: records and finished checkpoints (their epochs), relative to ``root``."""
    import torch

    found = [f"{p.relative_to(root)}" for p in root.rglob("result.json")]
    found += [f"{p.relative_to(root)} epoch {torch.load(p)['epoch']}" for p in root.rglob("checkpoint_last.pth.tar")]
    return sorted(found)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize(("wrapper", "kind", "point"), CASES)
def test_signals_to_every_wrapper_command(wrapper: str, kind: str, point: str, sig: int, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    args = [a.format(out=tmp_path / "stopped") for a in WRAPPERS[wrapper]]
    monkeypatch.chdir(tmp_path)
    stopped = FakeRuns(sig, kind, point)
    with monkeypatch.context() as patch:
        stopped.install(patch)
        result = runner.invoke(app, args)
    name = signal.Signals(sig).name
    assert result.exit_code == 128 + sig, result.output  # 143 for SIGTERM, 130 for SIGINT
    after = stopped.log[stopped.log.index("signal") + 1:]
    assert after == (["job told to stop"] if (kind, point) == ("job", "middle") else []), stopped.log
    assert "Traceback" not in result.output and "error:" not in result.output
    lines = [line for line in result.output.splitlines() if line.startswith("stopped by")]
    assert lines == [result.stderr.strip().splitlines()[-1]], result.output  # one line, the last of stderr
    assert lines[0].startswith(f"stopped by {name} during ") and "; nothing more was started; continue with: " \
        "moco " in lines[0]
    rerun = shlex.split(lines[0].split("; continue with: ")[1])
    assert rerun[:2] == ["moco", args[0]]

    again = FakeRuns()
    with monkeypatch.context() as patch:
        again.install(patch)
        finished = runner.invoke(app, rerun[1:])
    assert finished.exit_code == 0, finished.output
    work = [e for e in (*stopped.log, *again.log) if e.startswith(("train", "record"))]
    assert len(work) == len(set(work)), work  # no epoch trained twice, no evaluation recorded twice
    if kind != "job":  # a job is the scheduler's to continue: nothing of it is on disk here
        outputs, count = _never_stopped(wrapper, tmp_path.parent / f"whole-{wrapper}", monkeypatch)
        assert _outputs(tmp_path / "stopped") == outputs and len(work) == count  # all of it, as if never stopped


_WHOLE: dict[str, tuple[list[str], int]] = {}


def _never_stopped(wrapper: str, out: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], int]:
    """The outputs of the wrapper's command never stopped, and how many epochs and records it made (once)."""
    if wrapper not in _WHOLE:
        runs = FakeRuns()
        with monkeypatch.context() as patch:
            runs.install(patch)
            done = runner.invoke(app, [a.format(out=out) for a in WRAPPERS[wrapper]])
        assert done.exit_code == 0, done.output
        _WHOLE[wrapper] = _outputs(out), len([e for e in runs.log if e.startswith(("train", "record"))])
    return _WHOLE[wrapper]


WRAPPER_TEXT = ["0", "-1", "x y", "'", '"', "a\nb", "é✓", "--", "-c", "--set", "", "runs/a b", "linear,voc",
                "model.queue_size=8", "{seed}", "$HOME", "*"]


def _typed(param: Any) -> st.SearchStrategy[str]:
    """Values a parameter of its type accepts: integers for an int, any text for the rest."""
    if param is not None and param.type_descriptor.annotation is int:
        return st.integers(-(2**40), 2**40).map(str)
    return st.one_of(st.sampled_from(WRAPPER_TEXT), st.text(max_size=8))


WRAPPER_COMMANDS = {name: typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]
                    for name in ("trials", "demo", "sweep", "launch")}


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(data=st.data())
def test_the_command_a_stop_names_parses_to_the_same_command(data: st.DataObject) -> None:
    """``rerun_command`` writes a parsed wrapper command line back: parsed again, it gives the same values (the
    case of a wrapper stopped with any options: its last line must be the command to paste)."""
    from hypothesis import event

    from moco_core.run.preemption import rerun_command

    name = data.draw(st.sampled_from(sorted(WRAPPER_COMMANDS)))
    command = WRAPPER_COMMANDS[name]
    args = [data.draw(_typed(p)) for p in command.params if p.param_type_name == "argument"]
    options = {o: p for p in command.params if p.param_type_name == "option" for o in p.opts}
    for option in data.draw(st.lists(st.sampled_from(sorted(options)), max_size=6)):
        flag = options[option].is_flag
        args += [option] if flag else [option, data.draw(_typed(options[option]))]
    if data.draw(st.booleans()):
        args += ["--", *data.draw(st.lists(_typed(None), max_size=4))]
    try:
        ctx = command.make_context(name, list(args))
    except Exception:  # refused as typed (an argument that looks like an option): nothing to run again
        event("refused as typed")
        return
    line = rerun_command(ctx)
    again = command.make_context(name, shlex.split(line)[2:])
    assert line.startswith(f"moco {name}")
    assert repr(sorted(again.params.items())) == repr(sorted(ctx.params.items())), (args, line)
    assert again.args == ctx.args, (args, line)


@pytest.mark.parametrize("args", [
    ["sweep", "0", "--", "--"],  # an argument after "--" that reads as one: "--" must come before it again
    ["sweep", "m", "--", "-1"],
    ["trials", "3", "--seed", "1", "--", "pretrain", "-c", "x y", "--", "--set"],
    ["launch", "--wait", "--time", "5", "--", "pretrain", "--output-dir", "a\nb"],
])
def test_awkward_command_lines_are_named_so_that_they_parse_back(args: list[str]) -> None:
    from moco_core.run.preemption import rerun_command

    command = WRAPPER_COMMANDS[args[0]]
    ctx = command.make_context(args[0], args[1:])
    again = command.make_context(args[0], shlex.split(rerun_command(ctx))[2:])
    assert sorted(again.params.items()) == sorted(ctx.params.items()) and again.args == ctx.args
