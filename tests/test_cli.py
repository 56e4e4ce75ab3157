"""The moco command: help, errors with exit codes, and real runs through a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from cli import app
from moco_core import checkpoint, config, pretrain_config
from moco_core.pretrain_config import PretrainConfig

runner = CliRunner()
TINY = ["--set", "model.queue_size=40", "--set", "model.bn_groups=4", "--set", "optim.batch_size=16",
        "--set", "optim.epochs=1", "--set", "augment.crop_size=32", "--set", "run.knn_every=0", "--workers", "0",
        "--quiet"]
TINY_LINEAR = ["--set", "optim.epochs=1", "--set", "optim.batch_size=16", "--set", "data.crop_size=32", "--set",
               "data.resize=32", "--workers", "0", "--quiet"]


def moco(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, text=True, cwd=cwd or Path.cwd(),
                          env=env, timeout=600)


@pytest.fixture(scope="module")
def tiny_run(shapes_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One finished ``moco pretrain -c embedded ... TINY`` run, for the tests that only read it (evaluate it, copy
    it): the same command each of them ran for itself."""
    out = tmp_path_factory.mktemp("tiny_run") / "run"
    res = moco("pretrain", "-c", "embedded", "--data", str(shapes_root), "--output-dir", str(out), *TINY)
    assert res.returncode == 0, res.stderr
    return out


def test_help_lists_every_command() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("pretrain", "sweep", "eval", "report", "convert"):
        assert command in result.output
    result = runner.invoke(app, ["eval", "--help"])
    assert result.exit_code == 0
    for command in ("linear", "finetune", "knn", "voc", "coco"):
        assert command in result.output
    # every version it pretrains (the help said "Pretrain MoCo v1/v2" two versions on: issue 57)
    assert "Pretrain MoCo v1, v2 or v3" in " ".join(runner.invoke(app, ["--help"], terminal_width=200).output.split())


def test_pretrain_help_shows_operational_flags() -> None:
    result = runner.invoke(app, ["pretrain", "--help"])
    assert result.exit_code == 0
    for flag in ("--config", "--set", "--data", "--output-dir", "--device", "--seed", "--workers", "--resume",
                 "--nproc"):
        assert flag in result.output


@pytest.mark.parametrize(("command", "message"), [
    (["eval", "voc", "absent.pth"], "data.path: not set"),  # the paper preset: VOC must be given
    (["eval", "coco", "absent.pth"], "data.path: not set"),
    (["convert", "absent.pth", "b.pkl"], "absent.pth"),
])
def test_transfer_commands_fail_in_one_line(command: list[str], message: str) -> None:
    result = runner.invoke(app, command)
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_print_config_applies_flags_last() -> None:
    result = runner.invoke(app, ["pretrain", "-c", "embedded", "--set", "run.seed=5", "--seed", "7",
                                 "--set", "model.temperature=0.3", "--print-config"])
    assert result.exit_code == 0, result.output
    assert "seed: 7" in result.output and "temperature: 0.3" in result.output


@pytest.mark.parametrize(("preset", "sets", "left_out"), [
    ("embedded", ["model.temperature=0.3"], {"v3": None, "optim": ["warmup_epochs"]}),
    ("moco_v2_200ep", ["data.path=/data/imagenet"], {"v3": None, "optim": ["warmup_epochs"]}),
    ("mocov3_embedded", ["v3.temperature=0.3"], {"model": list(pretrain_config._V3_UNUSED)}),
    ("mocov3_vit_embedded", ["v3.momentum=0.996"], {"model": list(pretrain_config._V3_UNUSED)}),
])
def test_print_config_leaves_out_what_the_method_does_not_use_and_loads_back(
        preset: str, sets: list[str], left_out: dict, tmp_path: Path) -> None:
    """A v3 config printed v1/v2's model.queue_size, momentum, temperature ... (refused at any other value, so not
    used) and a v1/v2 config the v3 section: a reader took them to apply. They are left out and named in a comment;
    the printed YAML, given back with -c, is the same config."""
    if "vit" in preset:
        pytest.importorskip("timm")
    overrides = [a for s in sets for a in ("--set", s)]
    result = runner.invoke(app, ["pretrain", "-c", preset, *overrides, "--print-config"])
    assert result.exit_code == 0, result.output
    printed = yaml.safe_load(result.output)
    dotted = [f"{section}.{key}" if key else section for section, keys in left_out.items() for key in keys or [None]]
    assert result.output.splitlines()[0] == f"# not used by method {printed['method']}, left out: " + ", ".join(
        k if "." in k else f"{k} section" for k in dotted)
    for section, keys in left_out.items():
        if keys is None:
            assert section not in printed
        else:
            assert not set(keys) & set(printed[section]), printed[section]
    # what is printed is what the run uses: the value just set, and every other setting of the resolved config
    set_key, set_value = sets[0].split("=")
    assert str(printed[set_key.split(".")[0]][set_key.split(".")[1]]) == set_value
    expected = config.to_dict(config.load_config(PretrainConfig, preset, sets))
    expected["run"]["output_dir"] = printed["run"]["output_dir"]  # the CLI's default run directory
    for key in dotted:
        section, _, name = key.partition(".")
        expected[section].pop(name) if name else expected.pop(section)
    assert printed == expected
    file = tmp_path / "printed.yaml"
    file.write_text(result.output)
    loaded = config.load_config(PretrainConfig, str(file))
    assert loaded == config.replace(config.load_config(PretrainConfig, preset, sets),
                                    run={"output_dir": printed["run"]["output_dir"]})
    again = runner.invoke(app, ["pretrain", "-c", str(file), "--print-config"])
    # the same, but the second line, which says where the data paths come from: now the printed file
    assert again.exit_code == 0 and again.output.splitlines()[1].endswith(f"(preset {file})")
    assert [line for i, line in enumerate(again.output.splitlines()) if i != 1] == [
        line for i, line in enumerate(result.output.splitlines()) if i != 1]


def test_print_config_refuses_what_the_run_would() -> None:
    """The issue's case: batch 30 in 4 BN groups printed fine, then the run refused it."""
    base = ["pretrain", "-c", "embedded", "--set", "optim.batch_size=30", "--set", "model.bn_groups=4"]
    result = runner.invoke(app, [*base, "--print-config"])
    assert result.exit_code == 2 and result.output == "error: optim.batch_size: 30 is not divisible by " \
        "model.bn_groups=4\n"
    result = runner.invoke(app, [*base, "--print-config", "--nproc", "3"])  # 10 per process: each is a BN group
    assert result.exit_code == 0 and "batch_size: 30" in result.output
    result = runner.invoke(app, [*base, "--print-config", "--nproc", "4"])
    assert result.exit_code == 2 and "30 is not divisible by the 4 processes" in result.output


@pytest.mark.parametrize("preset", [None, "moco_v1_200ep", "moco_v2_200ep", "moco_v2_800ep"])
def test_paper_presets_take_the_data_flag(preset: str | None) -> None:
    """The README's first command: presets that leave data.path unset get it from --data (at 5671961 the config
    was validated before the flag was merged, and every one of these stopped with "data.path: not set")."""
    config = ["-c", preset] if preset else []
    result = runner.invoke(app, ["pretrain", *config, "--data", "/data/imagenet", "--print-config"])
    assert result.exit_code == 0, result.output
    assert "path: /data/imagenet" in result.output
    result = runner.invoke(app, ["pretrain", *config, "--print-config"])  # without it: still the one-line error
    assert result.exit_code == 2 and "data.path: not set" in result.output


def test_linear_eval_takes_the_data_flag_over_a_preset_without_data(tmp_path: Path) -> None:
    """``moco eval linear CKPT --data DIR``: the paper protocol's config has no data.path; the flag supplies it
    (at 5671961 this stopped with "data.path: not set"), and the run goes on to check the folder itself."""
    # weights that read (the weights are read before the data: their normalisation is the data's)
    result = runner.invoke(app, ["eval", "linear", "random", "--arch", "resnet18", "--data", str(tmp_path),
                                 "--output-dir", str(tmp_path / "out")])
    assert result.exit_code == 2
    expected = (f"error: data.path: {tmp_path} needs train/ and val/ (or test/) folders with one folder per class, or "
                f"Flowers-102's or Oxford-IIIT Pets' files as torchvision downloads them")
    assert result.output.strip() == expected
    result = runner.invoke(app, ["eval", "linear", "absent.pth"])
    assert result.exit_code == 2 and result.output.startswith("error: data.path: not set")


def test_errors_are_one_line_without_traceback(tmp_path: Path) -> None:
    res = moco("pretrain", "-c", "embedded", "--set", "model.momentum=2")
    assert res.returncode == 2
    assert res.stderr.strip() == "error: model.momentum: must be in [0, 1], got 2.0"
    res = moco("pretrain", "-c", "embedded", "--data", str(tmp_path / "missing"), "--output-dir", str(tmp_path / "r"))
    assert res.returncode == 2
    assert res.stderr.strip().startswith("error: ") and "missing" in res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
    res = moco("pretrain", "-c", "embedded", "--resume", str(tmp_path / "nothing-here"))
    assert res.returncode == 2 and "no checkpoint at" in res.stderr and "Traceback" not in res.stderr


def test_real_pretrain_run_and_resume(shapes_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = moco("pretrain", "-c", "embedded", "--data", str(shapes_root), "--output-dir", str(out), *TINY)
    assert res.returncode == 0, res.stderr
    assert (out / checkpoint.LAST).is_file() and (out / "config.yaml").is_file()
    # Resume from the run directory with more epochs: the stored config is reused, --set extends it.
    res = moco("pretrain", "--resume", str(out), "--set", "optim.epochs=2", "--quiet")
    assert res.returncode == 0, res.stderr
    assert checkpoint.load(out / checkpoint.LAST)["epoch"] == 2
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert max(line["epoch"] for line in lines) == 1


def test_progress_lines_when_not_a_terminal(shapes_root: Path, tmp_path: Path) -> None:
    res = moco("pretrain", "-c", "embedded", "--data", str(shapes_root), "--output-dir", str(tmp_path / "r"),
               *TINY[:-1])
    assert res.returncode == 0, res.stderr
    lines = res.stderr.splitlines()
    assert any(line.startswith("epoch 1/1 step 2/2 loss") and "img/s" in line and "eta" in line for line in lines)
    # The epoch (2 steps) ends before the first metrics window (run.log_every 5): no value yet reads "-", not "nan".
    assert any(line.startswith("epoch 1/1 step 2/2 loss - acc - img/s - eta") for line in lines), lines
    assert "nan" not in res.stderr.lower()
    assert any(line.startswith("epoch 1/1: loss") and "data-wait" in line for line in lines)
    assert "\r" not in res.stderr


@pytest.mark.slow
def test_two_process_gloo_pretrain(shapes_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "ddp"
    res = moco("pretrain", "-c", "embedded", "--data", str(shapes_root), "--output-dir", str(out), "--nproc", "2",
               "--device", "cpu", *TINY)
    assert res.returncode == 0, res.stderr
    ckpt = checkpoint.load(out / checkpoint.LAST)
    # Global batch 16 over 2 ranks: each step enqueues the 16 keys gathered from both.
    assert ckpt["global_step"] == 2 and ckpt["queue_ptr"] == 32
    assert json.loads((out / "run.json").read_text())["starts"][0]["world_size"] == 2
    assert "Warning" not in res.stderr, res.stderr  # PyTorch 2.14's broadcast_buffers notice, once a rank


def test_eval_linear_and_knn_commands(shapes_root: Path, tiny_run: Path, tmp_path: Path) -> None:
    ckpt = str(tiny_run / checkpoint.LAST)
    res = moco("eval", "linear", ckpt, "-c", "lincls_embedded", "--data", str(shapes_root), "--output-dir",
               str(tmp_path / "lin"), *TINY_LINEAR)
    assert res.returncode == 0, res.stderr
    assert "sanity check passed" in res.stderr
    assert json.loads((tmp_path / "lin" / "result.json").read_text())["protocol"] == "linear"
    res = moco("eval", "knn", ckpt, "--data", str(shapes_root), "--output-dir", str(tmp_path / "knn"), "--crop-size",
               "32", "--resize", "32", "--workers", "0")
    assert res.returncode == 0, res.stderr
    assert json.loads((tmp_path / "knn" / "result.json").read_text())["metrics"]["top1"] >= 0
    res = moco("eval", "linear", str(tmp_path / "nothing.pth"), "-c", "lincls_embedded", "--data", str(shapes_root))
    assert res.returncode == 2 and res.stderr.startswith("error: checkpoint not found")


@pytest.mark.slow
def test_two_process_linear_eval(shapes_root: Path, tmp_path: Path) -> None:
    """Same result in 1 and 2 processes for the cheap parts: every val image is counted once."""
    res = moco("eval", "linear", "random", "--arch", "resnet18", "-c", "lincls_embedded", "--data", str(shapes_root),
               "--output-dir", str(tmp_path / "ddp"), "--nproc", "2", "--device", "cpu", *TINY_LINEAR)
    assert res.returncode == 0, res.stderr
    record = json.loads((tmp_path / "ddp" / "result.json").read_text())
    assert record["sanity_check"] == "passed" and record["dataset"]["val_images"] == 16
    assert json.loads((tmp_path / "ddp" / "run.json").read_text())["starts"][0]["world_size"] == 2
    # 16 val images over 8 classes: any exact count gives a multiple of 100/16
    assert (record["metrics"]["top1"] * 16 / 100) == pytest.approx(round(record["metrics"]["top1"] * 16 / 100))


@pytest.mark.slow
def test_two_process_end2end(shapes_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "e2e"
    res = moco("pretrain", "-c", "embedded", "--data", str(shapes_root), "--output-dir", str(out), "--nproc", "2",
               "--device", "cpu", "--set", "method=end2end", *TINY)
    assert res.returncode == 0, res.stderr
    assert checkpoint.load(out / checkpoint.LAST)["method"] == "end2end"


def test_sweep_then_report(shapes_root: Path, tmp_path: Path) -> None:
    """moco sweep writes one evaluated record per value; moco report turns them into the ablation table and plot."""
    res = moco("sweep", "m", "0.9,0.99", "-c", "embedded", "--set", f"data.path={shapes_root}",
               "--set", "data.workers=0", *[a for a in TINY if a not in ("--workers", "0")],
               "--output-dir", str(tmp_path / "sweep"))
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[0].split() == ["momentum", "status", "top1"]
    for m in ("0.9", "0.99"):
        record = json.loads((tmp_path / "sweep" / f"momentum={m}" / "knn" / "result.json").read_text())
        assert record["sweep"] == {"param": "momentum", "value": float(m), "method": "moco"}
    res = moco("report", str(tmp_path / "sweep"), "--out", str(tmp_path / "report"))
    assert res.returncode == 0, res.stderr
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "momentum" in markdown and "0.99" in markdown
    assert "data:image/png;base64," in (tmp_path / "report" / "report.html").read_text()
    res = moco("sweep", "m", "2", "-c", "embedded")
    assert res.returncode == 2 and res.stderr.strip() == "error: sweep: m must be in [0, 1], got 2"


def test_disk_full_during_a_checkpoint_stops_with_one_line(shapes_root: Path, tmp_path: Path) -> None:
    """The first epoch's checkpoint is written; the disk 'fills' at the second: one line, exit 2, epoch 1 kept."""
    out = tmp_path / "run"
    script = (
        "import sys, torch\n"
        "real, calls = torch.save, []\n"
        "def save(obj, f, *a, **k):\n"
        "    calls.append(1)\n"
        "    if len(calls) > 1:\n"
        "        f.write(b'partial'); raise OSError(28, 'No space left on device')\n"
        "    return real(obj, f, *a, **k)\n"
        "torch.save = save\n"
        "from cli import main\n"
        "sys.argv = ['moco', *sys.argv[1:]]\n"
        "main()\n"
    )
    args = ["pretrain", "-c", "embedded", "--data", str(shapes_root), "--output-dir", str(out), *TINY,
            "--set", "optim.epochs=2"]
    res = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=600)
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().splitlines()[-1].startswith("error: cannot write checkpoint")
    assert "No space left on device; the previous checkpoint is intact" in res.stderr
    assert "Traceback" not in res.stderr
    assert checkpoint.load(out / checkpoint.LAST)["epoch"] == 1
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == []  # no temporary file left


def test_resuming_a_copied_run_writes_into_the_copy(tiny_run: Path, tmp_path: Path) -> None:
    """Issue #16: ``--resume DIR`` wrote into the directory recorded in the checkpoint: resuming a copy extended
    and overwrote the original. Now the copy is extended, the original is untouched, and run.json says where the
    run came from; --output-dir still chooses another directory."""
    import shutil

    original, copy = tiny_run, tmp_path / "b"
    shutil.copytree(original, copy)
    snapshot = {p.name: p.read_bytes() for p in original.iterdir() if p.is_file()}
    res = moco("pretrain", "--resume", str(copy), "--set", "optim.epochs=2", "--quiet")
    assert res.returncode == 0, res.stderr
    assert {p.name: p.read_bytes() for p in original.iterdir() if p.is_file()} == snapshot
    assert checkpoint.load(copy / checkpoint.LAST)["epoch"] == 2
    starts = json.loads((copy / "run.json").read_text())["starts"]
    assert starts[-1]["moved_from"] == str(original) and "moved_from" not in starts[0]
    res = moco("pretrain", "--resume", str(copy / checkpoint.LAST), "--set", "optim.epochs=3", "--quiet",
               "--output-dir", str(tmp_path / "c"))
    assert res.returncode == 0, res.stderr
    assert checkpoint.load(tmp_path / "c" / checkpoint.LAST)["epoch"] == 3
    assert checkpoint.load(copy / checkpoint.LAST)["epoch"] == 2


def test_eval_knn_refuses_nan_weights_and_an_unwritable_output_before_its_work(shapes_root: Path, tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch
                                                                               ) -> None:
    import torch
    import torchvision
    from typer.testing import CliRunner

    import classification.knn
    from cli import app

    state = torchvision.models.resnet18().state_dict()
    torch.save(state, tmp_path / "ok.pth")
    state["layer4.1.conv2.weight"].fill_(float("nan"))
    torch.save(state, tmp_path / "nan.pth")
    (tmp_path / "a_file").write_text("")
    small = ["--data", str(shapes_root), "--crop-size", "32", "--resize", "36", "--workers", "0"]

    def no_work(*args: object, **kwargs: object) -> None:
        raise AssertionError("the features were extracted before the output folder was checked")

    with monkeypatch.context() as patch:
        patch.setattr(classification.knn, "load_splits", no_work)
        res = CliRunner().invoke(app, ["eval", "knn", str(tmp_path / "ok.pth"), *small,
                                       "--output-dir", str(tmp_path / "a_file" / "knn")])
    assert res.exit_code == 2 and "--output-dir: cannot write in" in res.output, res.output
    res = CliRunner().invoke(app, ["eval", "knn", str(tmp_path / "nan.pth"), *small,
                                   "--output-dir", str(tmp_path / "knn")])
    assert res.exit_code == 2 and "hold NaN or inf (layer4.1.conv2.weight)" in res.output, res.output
    assert not (tmp_path / "knn" / "result.json").exists()
