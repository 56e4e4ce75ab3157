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
PATHY = {"--data", "--output-dir", "--config", "-c", "--weights", "--eval-config", "--eval-data", "--out", "-o",
         "--train", "--test", "--resume"}
FLAGS = {"--quiet", "--print-config", "--cached-features", "--force", "--progress", "--resume"}
ARGUMENTS = {  # positional arguments per command
    "pretrain": 0, "sweep": 2, "eval linear": 1, "eval knn": 1, "eval voc": 0, "eval coco": 0, "convert": 2,
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
    ["eval", "voc", "-c", "voc_embedded", "--weights", "random", "--device", "cuda:x"],
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
                 ["eval", "voc", "-c", "voc_embedded", "--weights", "random", "--output-dir", str(tmp_path / "v")]):
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
