"""The commands a report suggests are the commands (issue 51, finding 3; issue 46, class 7): built from the record
of the rows they stand for (preset, overrides, data, arch, mode), quoted, and checked against the known values of
each field. Pasted into a shell, a suggestion runs that one command, and its record lands in the table it was
suggested for, with the same settings."""

from __future__ import annotations

import html
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app
from tests.reports.conftest import WriteRecord, base_record


def suggestions(page: str) -> dict[str, list[str]]:
    """The random-init suggestions of an HTML report as a reader copies them: table title -> the commands (what
    follows the note's words: from its first "moco eval", "MOCO_SMOKE=1 moco" or "(none", split at "; ")."""
    found: dict[str, list[str]] = {}
    for section in re.findall(r"<section>(.*?)</section>", page, re.S):
        title = re.search(r"<h[23]>(.*?)</h[23]>", section)
        for note in re.findall(r"<li>(No random-init row.*?)</li>", section, re.S):
            assert title is not None
            text = html.unescape(note)
            start = min(i for i in (text.find("moco eval "), text.find("MOCO_SMOKE=1 moco"), text.find("(none"))
                        if i >= 0)
            found[html.unescape(title.group(1))] = re.split(r"; (?=moco |MOCO_SMOKE=1 |\(none)", text[start:])
    return found


def stand_in_moco(tmp_path: Path) -> dict[str, str]:
    """An environment whose ``moco`` only exits 0: a pasted suggestion runs it, and nothing else may run."""
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "moco").write_text("#!/bin/sh\nexit 0\n")
    (stub / "moco").chmod(0o755)
    return {"PATH": f"{stub}:/usr/bin:/bin"}


def test_a_hostile_record_yields_no_command_that_runs_anything_else(write_record: WriteRecord, runs: Path,
                                                                    tmp_path: Path) -> None:
    """The issue's record: arch "resnet18;touch X;" gave a hint that, pasted into bash from report.html, ran touch.
    Now an arch that is no arch gives no command, and hostile values elsewhere are quoted."""
    hostile = base_record(task="knn", protocol="knn")
    hostile["backbone"]["arch"] = "resnet18;touch X;"
    write_record("knn/moco/result.json", hostile)
    asked = base_record(invocation={"command": "eval linear", "preset": "lincls_embedded", "smoke": False,
                                    "overrides": ["optim.epochs=1;touch Y", "run.output_dir=$(touch W)"],
                                    "options": {"data": "$(touch Z)", "workers": 0}})
    write_record("linear/moco/result.json", asked)
    out = tmp_path / "report"
    result = CliRunner().invoke(app, ["report", str(runs), "--out", str(out)])
    assert result.exit_code == 0, result.output
    found = suggestions((out / "report.html").read_text())
    env = stand_in_moco(tmp_path)
    for command in (c for commands in found.values() for c in commands):  # pasted into bash, as they are
        subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, timeout=30)
    assert not [p.name for p in tmp_path.iterdir() if p.name in ("X", "Y", "Z", "W")]
    (knn,) = [c for t, c in found.items() if t.startswith("kNN")]
    assert knn == ["(none for these rows: their record's arch is not a value this suite knows)"]
    (linear,) = [c for t, c in found.items() if t.startswith("Linear")]
    assert linear == [f"moco eval linear random --arch resnet18 -c lincls_embedded --data '$(touch Z)' --workers 0 "
                      f"--set 'optim.epochs=1;touch Y' --output-dir {runs}/linear/random_resnet18"]


def run(command: str, cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "Traceback" not in done.stderr, (command, done.stderr[-3000:])
    return done.stdout + done.stderr


EVALUATIONS = {  # task -> the command that makes its MoCo row, on the smoke pretraining
    "knn": "eval knn runs/embedded -c knn_embedded",
    "linear": "eval linear runs/embedded -c lincls_embedded --set optim.epochs=300",
    "finetune": "eval finetune runs/embedded -c finetune_embedded --labels 10%",
    "voc": "eval voc runs/embedded -c voc_embedded",
    "keypoints": "eval keypoints runs/embedded -c keypoints_embedded",
    "lvis": "eval lvis runs/embedded -c lvis_embedded",
    "cityscapes": "eval cityscapes runs/embedded -c cityscapes_embedded",
}


def in_process(command: str, cwd: Path, env: dict[str, str]) -> None:
    """``moco ...`` of the set-up (the rows a report is made of), in this process: what is tested is the commands
    the report suggests, which :func:`run` pastes into bash."""
    from tests.test_cli_user_files import clean, moco

    done = moco(*shlex.split(command), cwd=cwd, env=env)
    assert clean(done) == "" and done.returncode == 0, (command, done.stderr[-3000:])


@pytest.mark.slow
def test_each_suggested_command_runs_and_fills_its_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MOCO_SMOKE=1 rows of every task whose table suggests a random-init command; each suggestion, run as the
    report prints it (its MOCO_SMOKE=1 included: the environment has none), adds the row to the same table."""
    env = {**os.environ, "MOCO_DATA_HOME": str(tmp_path / "data"), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    env.pop("MOCO_SMOKE", None)
    monkeypatch.delenv("MOCO_SMOKE", raising=False)
    smoke = {"MOCO_SMOKE": "1", "MOCO_DATA_HOME": env["MOCO_DATA_HOME"]}
    in_process("pretrain -c embedded --output-dir runs/embedded", tmp_path, smoke)
    for task, command in EVALUATIONS.items():
        in_process(f"{command} --output-dir runs/{task}/embedded", tmp_path, smoke)
    in_process("report runs --out report", tmp_path, {})
    before = suggestions((tmp_path / "report" / "report.html").read_text())
    assert len(before) == len(EVALUATIONS), sorted(before)
    for title, (command, *more) in before.items():
        assert not more and command.startswith("MOCO_SMOKE=1 moco eval "), (title, command)
        run(command, tmp_path, env)
    in_process("report runs --out report", tmp_path, {})
    page = (tmp_path / "report" / "report.html").read_text()
    assert suggestions(page) == {}  # every table has its random-init row now...
    rows = {title: rows for title, rows in re.findall(r"<h[23]>(.*?)</h[23]>.*?<tbody>(.*?)</tbody>", page, re.S)}
    for title in before:  # ...in the table the command was suggested for, beside the MoCo row, both smoke runs
        assert "random init (R18) [smoke]" in rows[html.escape(title, quote=True)], title
    csv = (tmp_path / "report" / "report.csv").read_text()
    assert csv.count('"random init (R18)"') >= len(EVALUATIONS)
    records = [json.loads(p.read_text()) for p in tmp_path.glob("runs/*/random_resnet18/result.json")]
    assert len(records) == len(EVALUATIONS) and all(r["smoke"] for r in records)


def test_a_semi_supervised_table_suggests_the_random_init_of_its_subset(write_record: WriteRecord, runs: Path,
                                                                        tmp_path: Path) -> None:
    """A fine-tuning on 10% of the labels (a semi-supervised table) had no suggestion at all."""
    asked = {"command": "eval finetune", "preset": "finetune_32px", "overrides": ["optim.batch_size=14"],
             "options": {"data": "/data/digits", "labels": "10%"}, "smoke": False}
    subset = {"kind": "labels", "labels": "10%", "seed": 0, "images": 145, "of": 1438}
    write_record("finetune_32px_labels10pct/digits_v3/result.json",
                 base_record(task="finetune", protocol="finetune", invocation=asked,
                             dataset={"path": "/data/digits", "classes": 10, "subset": subset}))
    out = tmp_path / "report"
    assert CliRunner().invoke(app, ["report", str(runs), "--out", str(out)]).exit_code == 0
    (found,) = suggestions((out / "report.html").read_text()).values()
    assert found == [f"moco eval finetune random --arch resnet18 -c finetune_32px --data /data/digits --labels 10% "
                     f"--set optim.batch_size=14 --output-dir {runs}/finetune_32px_labels10pct/random_resnet18"]


def test_the_method_a_file_was_read_as_goes_with_its_commands_not_with_random_init(
        shapes_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file that does not say its method is read as --weights-format names it: the command a stopped evaluation
    prints names it again (without it, that command stops at "does not say which method"), the record keeps it,
    and the report's random-init suggestion, which has no method, leaves it out and still runs."""
    import signal

    import classification.knn as knn
    from tests.layouts import torchvision_weights

    monkeypatch.delenv("MOCO_SMOKE", raising=False)
    weights = torchvision_weights(tmp_path / "resnet18.pth")
    out = tmp_path / "runs" / "dino"
    write = knn.write_record

    def stopped(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        os.kill(os.getpid(), signal.SIGTERM)  # a scheduler's stop, as the scores are written
        return write(*args, **kwargs)

    monkeypatch.setattr(knn, "write_record", stopped)
    first = CliRunner().invoke(app, ["eval", "knn", str(weights), "-c", "knn_32px", "--data", str(shapes_root),
                                     "--k", "5", "--device", "cpu", "--weights-format", "dino", "--set",
                                     "data.workers=0", "--output-dir", str(out)])
    assert first.exit_code == 143, first.output
    prefix = "stopped by SIGTERM during the evaluation; continue with: "
    hint = first.output.strip().splitlines()[-1].removeprefix(prefix)
    assert hint == (f"moco eval knn {weights} -c knn_32px --data {shapes_root} --device cpu --k 5 --weights-format "
                    f"dino --set data.workers=0 --output-dir {out}"), first.output
    monkeypatch.setattr(knn, "write_record", write)
    again = CliRunner().invoke(app, hint.split()[1:])
    assert again.exit_code == 0, again.output
    record = json.loads((out / "result.json").read_text())
    assert record["invocation"]["options"]["weights_format"] == "dino"
    assert record["backbone"]["pretrain"]["method"] == "dino"
    report = tmp_path / "report"
    assert CliRunner().invoke(app, ["report", str(tmp_path / "runs"), "--out", str(report)]).exit_code == 0
    (suggested,) = suggestions((report / "report.html").read_text()).values()
    assert suggested == [f"moco eval knn random --arch resnet18 -c knn_32px --data {shapes_root} --device cpu --k 5 "
                         f"--set data.workers=0 --output-dir {tmp_path / 'runs' / 'random_resnet18'}"]
    floor = CliRunner().invoke(app, suggested[0].split()[1:])
    assert floor.exit_code == 0, floor.output
    assert "weights_format" not in json.loads(
        (tmp_path / "runs" / "random_resnet18" / "result.json").read_text())["invocation"]["options"]
