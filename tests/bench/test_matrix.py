"""``moco bench``'s matrix file: what it accepts, the cells it makes, and the one-line refusals of what it cannot
run, each naming the file and the field (issue 58)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app
from cluster.matrix import cells_of, commands, read_matrix
from moco_core import commands as table
from moco_core.config import ConfigError

GOOD = """\
output_dir: out
checkpoints:
  - {label: mine, path: weights.pth.tar, weights_format: moco}
  - {label: random, path: random, arch: resnet18}
evaluations:
  - {label: knn, command: eval knn, preset: knn_embedded, options: {k: 20, labels: 10%}}
  - {label: lin, command: eval linear, preset: lincls_embedded, set: [optim.epochs=2, "optim.lr=0.5"]}
"""


def write(tmp_path: Path, text: str) -> str:
    (tmp_path / "weights.pth.tar").write_bytes(b"")
    path = tmp_path / "m.yaml"
    path.write_text(text)
    return str(path)


def test_every_checkpoint_meets_every_evaluation_in_its_own_run_directory(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    matrix = read_matrix(write(tmp_path, GOOD))
    cells = cells_of(matrix, None)
    assert [(c.name, c.run_dir) for c in cells] == [
        ("mine/knn", Path("out/mine/knn")), ("mine/lin", Path("out/mine/lin")),
        ("random/knn", Path("out/random/knn")), ("random/lin", Path("out/random/lin"))]
    assert shlex.split(cells[0].line("cuda:1")) == [
        "moco", "eval", "knn", "weights.pth.tar", "-c", "knn_embedded", "--k", "20", "--labels", "10%", "--device",
        "cuda:1", "--weights-format", "moco", "--output-dir", "out/mine/knn"]
    assert shlex.split(cells[3].line()) == [
        "moco", "eval", "linear", "random", "--arch", "resnet18", "-c", "lincls_embedded", "--set", "optim.epochs=2",
        "--set", "optim.lr=0.5", "--output-dir", "out/random/lin"]
    command = cells[3].command()
    assert command.name == "eval linear" and command.run_dir == tmp_path / "out/random/lin"
    assert cells_of(matrix, "elsewhere")[0].run_dir == Path("elsewhere/mine/knn")  # --output-dir


def test_a_command_added_to_the_table_is_one_a_matrix_can_name(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    row = table.Command("eval depth", ("DepthConfig",), ("depth_",), {"data": "path", "output_dir": "path",
                        "arch": "arch", "weights_format": "weights_format"}, ("--seed", "{}"), {})
    monkeypatch.setitem(table.COMMANDS, row.name, row)
    monkeypatch.setitem(table.OPTIONS, row.name, row.options)
    assert "eval depth" in commands()
    text = GOOD.replace("command: eval linear, preset: lincls_embedded", "command: eval depth, options: {data: d}")
    cells = cells_of(read_matrix(write(tmp_path, text)), None)
    assert cells[1].line() == ("moco eval depth weights.pth.tar --data d --weights-format moco --set optim.epochs=2 "
                                "--set optim.lr=0.5 --output-dir out/mine/lin")


@pytest.mark.parametrize(("change", "message"), [
    (("output_dir: out", "outdir: out"), "m.yaml: 'outdir': unknown key (did you mean 'output_dir'?)"),
    (("{label: mine,", "{lable: mine,"), "m.yaml: checkpoints[0].lable: unknown key"),
    (("command: eval knn", "command: eval knnn"), "m.yaml: evaluations[0].command: expected one of eval linear, "),
    (("command: eval knn", "command: pretrain"), "m.yaml: evaluations[0].command: expected one of"),
    (("path: weights.pth.tar", "path: gone.pth"), "m.yaml: checkpoints[0].path: no such file or directory: 'gone.pth'"),
    (("arch: resnet18", "arch: resnet9"), "m.yaml: checkpoints[1].arch: option --arch: 'resnet9' is not a known value"),
    (("path: random, arch: resnet18", "path: random"), "m.yaml: checkpoints[1].arch: random weights need an arch"),
    (("weights_format: moco", "weights_format: mocco"), "m.yaml: checkpoints[0].weights_format: option "
                                                         "--weights-format: 'mocco' is not a known value"),
    (("k: 20", "kk: 20"), "m.yaml: evaluations[0].options: option 'kk' is not one of moco eval knn's"),
    (("k: 20", "k: -1"), "m.yaml: evaluations[0].k: option --k: -1 is not a known value"),
    (("k: 20", "device: cpu"), "m.yaml: evaluations[0].options.device: not in a matrix: moco bench gives each cell"),
    (("k: 20", "output_dir: x"), "m.yaml: evaluations[0].options.output_dir: not in a matrix"),
    (("preset: knn_embedded", "preset: knn_embeded"), "m.yaml: unknown config preset 'knn_embeded'"),
    (("optim.epochs=2", "optim.epochs"), "m.yaml: evaluations[1].overrides: override 'optim.epochs' is not key=value"),
    (("label: lin,", "label: knn,"), "m.yaml: evaluations: label 'knn' names two entries"),
    (("label: lin,", "label: ../up,"), "m.yaml: evaluations[1].label: expected letters, digits"),
    (("label: random,", "label: jobs,"), "m.yaml: checkpoints[1].label: 'jobs' is a folder of the matrix's own"),
    ((GOOD[GOOD.index("evaluations:"):], "evaluations: []\n"), "m.yaml: evaluations: expected a list of at least "
                                                               "one entry, got []"),
    (("set: [optim.epochs=2, \"optim.lr=0.5\"]", "set: optim.epochs=2"), "m.yaml: evaluations[1].set: expected a "
                                                                        "list"),
])
def test_a_bad_matrix_is_one_line_naming_the_file_and_the_field(change: tuple[str, str], message: str,
                                                                tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert change[0] in GOOD
    path = write(tmp_path, GOOD.replace(*change))
    with pytest.raises(ConfigError) as raised:
        read_matrix(path)
    assert str(raised.value).startswith(str(tmp_path / message.split(": ", 1)[0]) + ": " + message.split(": ", 1)[1]), \
        str(raised.value)


def test_the_cli_says_it_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, GOOD.replace("eval knn", "eval knnn"))
    done = CliRunner().invoke(app, ["bench", path, "--devices", "cpu"])
    assert done.exit_code == 2 and done.output.count("\n") == 1, done.output
    assert done.output.startswith(f"error: {path}: evaluations[0].command: expected one of")
    done = CliRunner().invoke(app, ["bench", "nothing"])
    assert done.exit_code == 2 and done.output.startswith("error: nothing: neither a YAML file (.yaml, .yml) nor a "
                                                          "matrix of configs/matrices/ (shipped: embedded)")
    for args in (["bench", "\x00.yaml"], ["eval", "cityscapes", "x", "--config", "\x00/"]):  # hypothesis found the 2nd
        done = CliRunner().invoke(app, args)
        assert done.exit_code == 2 and "is not a file name (it holds a NUL character)" in done.output, done.output
    done = CliRunner().invoke(app, ["bench", "gone.yaml"])
    assert done.exit_code == 2 and done.output == "error: matrix file not found: gone.yaml\n", done.output
