"""No input gives a traceback: every command, every option, generated values and hostile files and paths end in
success or in one bounded line ``error: ...`` with exit code 2.

The property test drives the whole CLI surface with values drawn from a pool of hostile ones; the commands that
would start a long job are stopped where the job starts (the run functions are replaced by stubs that record
the call), so what is tested is everything before: parsing, config resolution and validation, file checks.
The cases of issue 16 are also run for real, each as its own test.
"""

from __future__ import annotations

import os
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
         "--out", "-o", "--train", "--test", "--resume"}
FLAGS = {"--quiet", "--print-config", "--cached-features", "--force", "--progress", "--resume"}
ARGUMENTS = {  # positional arguments per command
    "pretrain": 0, "sweep": 2, "eval linear": 1, "eval knn": 1, "eval voc": 1, "eval coco": 1, "convert": 2,
    "report": 1, "demo": 0, "eval snapshots": 1, "launch": 0,
}


def _stub_long_jobs(monkeypatch: pytest.MonkeyPatch, calls: list[str]) -> None:
    """Replace the functions that start a job by stubs: the CLI's checks run, the job does not."""
    import lincls.linear
    import moco_core.train
    import moco_demo.run
    import sweeps.sweep
    import transfer.run

    def stub(name: str):
        def record(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            raise SystemExit(0)
        return record

    monkeypatch.setattr(moco_core.train, "pretrain", stub("pretrain"))
    monkeypatch.setattr(lincls.linear, "linear_eval", stub("linear"))
    monkeypatch.setattr(transfer.run, "evaluate", stub("transfer"))
    monkeypatch.setattr(sweeps.sweep, "run_sweep", stub("sweep"))
    monkeypatch.setattr(moco_demo.run, "run_demo", stub("demo"))


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
    (["--seed", str(10**30)], "run.seed: must be in [0, 2**32)"),
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
    assert "deep.result.json (JSON nested too deeply to be a record)" in result.output
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
    tracemalloc.start()
    started = time.perf_counter()
    result = runner.invoke(app, args)
    took, peak = time.perf_counter() - started, tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert_clean(result, args)
    # Every node once expanded: a list l_k is itself plus fanout copies of l_{k-1} (l_0: fanout scalars); the
    # document is its mapping, each key and value, and model: {arch: *l_depth} (3 nodes and l_depth again).
    sizes = [1 + fanout]
    for _ in range(depth):
        sizes.append(1 + fanout * sizes[-1])
    values = 1 + sum(1 + size for size in sizes) + 3 + sizes[-1]
    if values > MAX_YAML_VALUES:  # 424 bytes once cost 2.1 GB and 39 s here
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
