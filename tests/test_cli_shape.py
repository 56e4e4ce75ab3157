"""One CLI shape (issue 33): the weights first on every evaluation, --resume meaning one thing, -c/--set/--print-config
wherever there is a config, per-command presets, default run directories that never collide, schedules that follow
their length, "did you mean", --version, and an answer to --help without torch."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torchvision
import yaml
from typer.testing import CliRunner

from cli import WORKFLOW, app
from moco_core.config import PRESETS, load_config, presets_for
from moco_core.pretrain_config import PretrainConfig
from moco_core.run.naming import evaluation_dir, weights_tag

runner = CliRunner()


def printed_config(args: list[str]) -> dict:
    result = runner.invoke(app, [*args, "--print-config"])
    assert result.exit_code == 0, result.output
    return yaml.safe_load(result.output[result.output.index("\n", 0) + 1:] if result.output.startswith("note:")
                          else result.output)


def test_the_readmes_two_linear_commands_typed_in_order_get_two_directories(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """README: eval linear runs/embedded/checkpoint_last.pth.tar -c lincls_embedded, then eval linear random --arch
    resnet18 -c lincls_embedded: both wrote runs/lincls_embedded, and the second refused to run."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs/embedded").mkdir(parents=True)
    moco = printed_config(["eval", "linear", "runs/embedded/checkpoint_last.pth.tar", "-c", "lincls_embedded"])
    random = printed_config(["eval", "linear", "random", "--arch", "resnet18", "-c", "lincls_embedded"])
    assert moco["run"]["output_dir"] == "runs/lincls_embedded/embedded"
    assert random["run"]["output_dir"] == "runs/lincls_embedded/random_resnet18"
    voc = [printed_config(["eval", "voc", w, "-c", "voc_embedded"])["run"]["output_dir"]
           for w in ("runs/embedded", "random")]
    assert voc == ["runs/voc_embedded/embedded", "runs/voc_embedded/random_resnet18"]
    knn = printed_config(["eval", "knn", "runs/embedded", "-c", "knn_embedded"])
    assert knn["run"]["output_dir"] == "runs/knn_embedded/embedded" and knn["data"]["crop_size"] == 32
    given = printed_config(["eval", "linear", "random", "--arch", "resnet18", "--output-dir", "mine", "--data", "x"])
    assert given["run"]["output_dir"] == "mine"


@pytest.mark.parametrize(("weights", "arch", "tag"), [
    ("random", "resnet18", "random_resnet18"),
    ("runs/embedded/checkpoint_last.pth.tar", None, "embedded"),
    ("runs/snap/checkpoint_0019.pth.tar", None, "snap_checkpoint_0019"),
    ("CKPT", None, "CKPT"),
    ("/w/resnet50-weights.pth", None, "resnet50-weights"),
    ("/w/moco_v2_800ep_pretrain.pth.tar", None, "moco_v2_800ep_pretrain"),
    ("/w/\x1b[2J evil;name.pth", None, "2J_evil_name"),
])
def test_weights_tags_worked_out_by_hand(weights: str, arch: str | None, tag: str) -> None:
    assert weights_tag(weights, arch) == tag
    assert evaluation_dir("lincls_embedded", "linear", weights, arch) == f"runs/lincls_embedded/{tag}"
    assert evaluation_dir(None, "knn", weights, arch) == f"runs/knn/{tag}"


@pytest.mark.parametrize("command", [["eval", "linear"], ["eval", "linear", "--grid"], ["eval", "knn"],
                                     ["eval", "finetune"], ["eval", "transfer"], ["eval", "voc"]])
def test_one_preset_on_two_data_folders_gets_two_directories(command: list[str], tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 57: README's random-init baseline on CIFAR-10, then the same command on one's own folder: both wrote
    runs/<preset>/random_resnet18, and the second was refused as a finished evaluation. The data's folder is in
    the name now; the embedded data's runs keep theirs."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cifar10").mkdir()
    (tmp_path / "my digits").mkdir()
    dirs = [printed_config([*command, "random", "--arch", "resnet18", "--data", data])["run"]["output_dir"]
            for data in ("cifar10", "my digits", str(tmp_path / "my digits") + "/")]
    group = dirs[0].split("/")[1].removesuffix("_cifar10")
    assert dirs == [f"runs/{group}_cifar10/random_resnet18", f"runs/{group}_my_digits/random_resnet18",
                    f"runs/{group}_my_digits/random_resnet18"]
    assert evaluation_dir("lincls_embedded", "linear", "random", "resnet18", "embedded") == \
        "runs/lincls_embedded/random_resnet18"


@pytest.mark.parametrize("args", [
    ["eval", "linear", "random", "-c", "lincls_embedded"],
    ["eval", "knn", "random", "-c", "knn_embedded"],
    ["eval", "voc", "random", "--data", "embedded"],  # the paper's preset names no arch
])
def test_random_without_an_arch_is_refused_not_a_resnet50(args: list[str]) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "'random' needs the ResNet to initialise: pass --arch" in result.output


def test_a_run_directory_given_as_weights_is_its_last_checkpoint(tmp_path: Path) -> None:
    from moco_core.checkpoint import CheckpointError
    from moco_core.model.backbone import load_resnet

    run = tmp_path / "run"
    run.mkdir()
    state = torchvision.models.resnet18().state_dict()
    torch.save({"state_dict": state, "epoch": 3}, run / "checkpoint_last.pth.tar")
    model, info = load_resnet(str(run), weights_format="supervised")  # a state_dict that names no method
    assert info.source == str(run / "checkpoint_last.pth.tar") and info.arch == "resnet18"
    assert torch.equal(model.layer1[0].conv1.weight, state["layer1.0.conv1.weight"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="a directory without checkpoint_last.pth.tar"):
        load_resnet(str(tmp_path / "empty"))


@pytest.mark.parametrize(("preset", "epochs", "milestones"), [
    ("lincls_embedded", 5, [3, 4]),  # [18, 24] of 30: 0.6 and 0.8 of the run
    (None, 5, [3, 4]),  # the paper's [60, 80] of 100
    (None, 2, [1]),  # 1.2 -> 1, 1.6 -> 2: past the end, gone
    (None, 1, []),  # no drop in a one-epoch run (not [0, 0]: from the start)
    (None, 300, [180, 240]),
])
def test_linear_milestones_follow_the_epochs(preset: str | None, epochs: int, milestones: list[int]) -> None:
    args = ["eval", "linear", "random", "--arch", "resnet18", "--data", "x", "--set", f"optim.epochs={epochs}"]
    result = runner.invoke(app, [*args, *(["-c", preset] if preset else []), "--print-config"])
    assert result.exit_code == 0, result.output
    assert f"note: optim.milestones scaled with optim.epochs to {milestones}" in result.output
    assert printed_config([*args, *(["-c", preset] if preset else [])])["optim"]["milestones"] == milestones


def test_milestones_given_outside_the_run_are_refused() -> None:
    result = runner.invoke(app, ["eval", "linear", "random", "--arch", "resnet18", "-c", "lincls_embedded", "--set",
                                 "optim.epochs=5", "--set", "optim.milestones=[18,24]"])
    assert result.exit_code == 2 and "optim.milestones: [18, 24] fall outside a 5-epoch run" in result.output
    chosen = printed_config(["eval", "linear", "random", "--arch", "resnet18", "-c", "lincls_embedded", "--set",
                             "optim.epochs=5", "--set", "optim.milestones=[2]"])
    assert chosen["optim"]["milestones"] == [2]


def test_detection_steps_and_warm_up_follow_the_iterations_and_the_label_says_so() -> None:
    cfg = printed_config(["eval", "voc", "random", "-c", "voc_embedded", "--set", "solver.iterations=60"])
    assert cfg["solver"]["steps"] == [45, 55] and cfg["solver"]["warmup_iters"] == 33  # 150, 183 of 200
    assert cfg["schedule"] == "embedded, 60 it"  # not reported (or matched with published rows) as the preset's
    same = printed_config(["eval", "voc", "random", "-c", "voc_embedded"])
    assert same["schedule"] == "embedded" and same["solver"]["steps"] == [150, 183]


def test_pretraining_milestones_follow_only_a_step_schedule() -> None:
    step = load_config(PretrainConfig, "moco_v1_200ep", ["optim.epochs=20"], flags={"data": {"path": "x"}})
    assert step.optim.milestones == (12, 16)  # 120, 160 of 200
    cosine = load_config(PretrainConfig, "embedded", ["optim.epochs=20"])
    assert cosine.optim.schedule == "cosine" and cosine.optim.milestones == (120, 160)  # unused, untouched


@pytest.mark.parametrize(("args", "message"), [
    (["pretrain", "--set", "optim.lr", "0.1"], "--set 'optim.lr' 0.1: expected key=value, e.g. --set optim.lr=0.1"),
    (["pretrian"], "no such command 'pretrian' (did you mean 'pretrain'?)"),
    (["eval", "lineer", "x"], "no such command 'lineer' (did you mean 'linear'?)"),
    (["pretrain", "-c", "embeded"], "unknown config preset 'embeded' (did you mean 'embedded'?)"),
    (["pretrain", "-c", "embedded", "--set", "model.temprature=0.1"],
     "model.temprature: unknown key (did you mean 'temperature'?)"),
    (["pretrain", "-c", "embedded", "--set", "optim.schedule=cosin"], "(did you mean 'cosine'?)"),
    (["eval", "knn", "x", "-c", "lincls_embeded"], "(did you mean 'knn_embedded'?) (presets: knn_32px, "
                                                    "knn_embedded)"),
])
def test_mistakes_are_named_with_what_was_meant(args: list[str], message: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and message in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1


def test_version_and_workflow_order() -> None:
    from moco_core import __version__

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output == f"moco {__version__}\n"
    shown = runner.invoke(app, ["--help"]).output
    positions = [shown.index(f" {name} ") for name in WORKFLOW]
    assert positions == sorted(positions), shown
    assert "b''" not in shown  # click probes streams with write(b""): the guard must refuse bytes as text does


@pytest.mark.parametrize("command", ["pretrain", "linear", "finetune", "knn", "voc", "coco", "lvis", "cityscapes"])
def test_each_command_lists_its_own_presets(command: str) -> None:
    args = ["pretrain"] if command == "pretrain" else ["eval", command]
    shown = " ".join(runner.invoke(app, [*args, "--help"], terminal_width=400).output.split())
    everything = sorted(p.stem for p in (Path(__file__).parents[1] / "configs").glob("*.yaml"))
    for name in everything:
        if name == "embedded" and command != "pretrain":
            continue  # the word is also --data's value in every help
        named = re.search(rf"(?<![\w]){name}(?![\w])", shown) is not None
        assert named == (name in presets_for(command)), (name, shown)


def test_the_weights_come_first_everywhere_and_the_old_forms_still_work(tmp_path: Path) -> None:
    for task in ("voc", "coco", "lvis", "cityscapes"):
        old = runner.invoke(app, ["eval", task, "--weights", "random", "-c", f"{task}_embedded", "--print-config"])
        assert old.exit_code == 0 and "note: --weights is the old form" in old.output, old.output
        both = runner.invoke(app, ["eval", task, "random", "--weights", "other", "-c", f"{task}_embedded"])
        assert both.exit_code == 2 and "two weights given" in both.output


def test_resume_is_a_flag_everywhere_and_the_old_pretrain_form_still_works(shapes_root: Path, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from moco_core import checkpoint
    from tests.conftest import tiny_config

    monkeypatch.chdir(tmp_path)
    cfg = tiny_config(shapes_root, tmp_path / "run")
    from moco_core.config import to_dict

    checkpoint.save_atomic({"epoch": 1, "config": to_dict(cfg), "state_dict": {}}, tmp_path / "run" /
                           checkpoint.LAST)
    new = printed_config(["pretrain", "--resume", "--output-dir", "run"])
    assert new["model"]["queue_size"] == 40 and new["run"]["output_dir"] == "run"  # the stored config, there
    old = runner.invoke(app, ["pretrain", "--resume", "run", "--print-config"])
    assert old.exit_code == 0 and "note: --resume PATH is the old form; now --resume-from run" in old.output
    both = runner.invoke(app, ["pretrain", "--resume", "--resume-from", "run"])
    assert both.exit_code == 2 and "give one of them" in both.output


def test_help_and_argument_errors_do_not_import_torch() -> None:
    """`moco --help` took 3.4 s of CPU (19 s on a busy machine) importing torch; benchmarks/cli_latency.py times it."""
    for args in (["--help"], ["eval", "voc", "--help"], ["pretrain", "--set", "x"], ["eval", "linear"]):
        script = ("import sys; sys.argv = ['moco', *sys.argv[1:]]\nimport cli\ntry:\n    cli.main()\n"
                  "except SystemExit:\n    pass\nheavy = sorted(m for m in ('torch', 'torchvision', 'numpy', 'PIL', "
                  "'pandas', 'matplotlib') if m in sys.modules)\nprint('HEAVY', heavy)")
        done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120)
        assert "HEAVY []" in done.stdout, (args, done.stdout[-500:], done.stderr[-500:])


def test_pretrainings_of_two_presets_get_two_directories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """README: pretrain -c moco_v1_200ep, then -c moco_v2_200ep: both wrote runs/pretrain, the second refused."""
    monkeypatch.chdir(tmp_path)
    dirs = [printed_config(["pretrain", "-c", preset, "--data", "x"])["run"]["output_dir"]
            for preset in ("moco_v1_200ep", "moco_v2_200ep", "embedded", str(PRESETS / "embedded.yaml"))]
    assert dirs == ["runs/moco_v1_200ep", "runs/moco_v2_200ep", "runs/embedded", "runs/embedded"]
    assert printed_config(["pretrain", "--data", "x"])["run"]["output_dir"] == "runs/pretrain"
    assert printed_config(["pretrain", "-c", "embedded", "--output-dir", "mine"])["run"]["output_dir"] == "mine"


@pytest.mark.parametrize("command", [["eval", "linear"], ["eval", "linear", "--grid"], ["eval", "linear", "--shots",
                                     "1"], ["eval", "finetune"], ["eval", "knn"], ["eval", "transfer"]])
def test_every_seeded_evaluation_takes_seed(command: list[str]) -> None:
    """Issue 57, friction: --seed was eval transfer's and eval knn's only; eval linear (the grid, few-shot) and
    fine-tuning took their seed as --set run.seed=S. Each takes --seed now, as the run's seed."""
    cfg = printed_config([*command, "random", "--arch", "resnet18", "--data", "embedded", "--seed", "5"])
    assert cfg["run"]["seed"] == 5
