"""moco_core/commands.py: the commands the suite suggests, built from a record's invocation, every field checked
against its known set and every value quoted (issue 46, class 7: a record's arch once ran ``touch`` when pasted)."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moco_core import commands
from moco_core.commands import InvalidInvocation, command_line, invocation
from moco_core.config import ARCHS, PRESETS, VIT_ARCHS


def test_the_known_sets_are_the_suites() -> None:
    from moco_core.model.weights.formats import WEIGHTS_FORMATS
    from moco_core.model.weights.resnet_names import CIFAR_SUFFIX

    assert commands.ARCHS == ARCHS + VIT_ARCHS
    assert commands.WEIGHTS_FORMATS == WEIGHTS_FORMATS and commands.CIFAR_SUFFIX == CIFAR_SUFFIX
    assert commands.PRESETS == PRESETS
    assert {"lincls_32px", "knn_32px", "finetune_32px", "lincls_embedded"} <= commands.known_presets()


def test_the_options_are_the_cli_options() -> None:
    """Every option a suggestion may carry is an option of that command (by its kebab-case name)."""
    from typer.main import get_command

    from cli import app

    group = get_command(app)
    for name, options in commands.OPTIONS.items():
        command = group
        for word in name.split():
            command = command.commands[word]  # type: ignore[attr-defined]
        flags = {opt for param in command.params for opt in param.opts}
        assert {"--" + o.replace("_", "-") for o in options} <= flags, (name, set(options))


def asked(**changes: Any) -> dict[str, Any]:
    base = invocation("eval knn", preset="knn_embedded", overrides=["k=20"], smoke=False,
                      options={"data": "/data/my set", "arch": None, "workers": 2, "labels": "10%"})
    return {**base, **changes}


def test_a_command_from_an_invocation() -> None:
    assert command_line(asked(), weights="random", arch="resnet18", output_dir="runs/x y/random_resnet18") == (
        "moco eval knn random --arch resnet18 -c knn_embedded --data '/data/my set' --workers 2 --labels 10% "
        "--set k=20 --output-dir 'runs/x y/random_resnet18'")
    # a resume hint: the same weights (a file names its own arch), --resume; a smoke run continues as one
    resumed = command_line(asked(command="eval linear", preset="lincls_embedded", options={"arch": "resnet18"},
                                 overrides=["run.output_dir=elsewhere", "optim.epochs=3"], smoke=True),
                           weights="runs/embedded", output_dir="out", resume=True)
    assert resumed == ("MOCO_SMOKE=1 moco eval linear runs/embedded -c lincls_embedded --set optim.epochs=3 "
                       "--output-dir out --resume")
    # the method a file was read as goes with the file, not with random init (a CIFAR-stem ResNet is an arch)
    solo = asked(options={"weights_format": "simclr-v2", "data": "d"})
    assert command_line(solo, weights="w.ckpt", output_dir="o") == (
        "moco eval knn w.ckpt -c knn_embedded --weights-format simclr-v2 --data d --set k=20 --output-dir o")
    assert command_line(solo, weights="random", arch="resnet18_cifar") == (
        "moco eval knn random --arch resnet18_cifar -c knn_embedded --data d --set k=20")


@pytest.mark.parametrize(("changes", "field"), [
    ({"command": "eval linear; rm -rf /"}, "command"),
    ({"preset": "knn_embedded;touch X"}, "preset"),
    ({"preset": "no_such_preset"}, "preset"),
    ({"overrides": ["k=1", "a b=2"]}, "overrides"),
    ({"overrides": ["$(touch X)=1"]}, "overrides"),
    ({"overrides": "k=1"}, "overrides"),
    ({"options": {"arch": "resnet18;touch X;"}}, "arch"),
    ({"options": {"arch": "vit_small_cifar"}}, "arch"),
    ({"options": {"device": "cpu;touch X"}}, "device"),
    ({"options": {"labels": "10%;touch X"}}, "labels"),
    ({"options": {"workers": "2;touch X"}}, "workers"),
    ({"options": {"workers": -1}}, "workers"),
    ({"options": {"temperature": float("nan")}}, "temperature"),
    ({"options": {"exec": "touch X"}}, "options"),
    ({"options": {"cached_features": True}}, "options"),  # not kNN's
    ({"smoke": "yes"}, "smoke"),
])
def test_an_unknown_field_gives_no_command(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInvocation) as err:
        command_line(asked(**changes), weights="random")
    assert err.value.field == field


def test_an_unknown_method_gives_no_command_for_the_file() -> None:
    with pytest.raises(InvalidInvocation) as err:
        command_line(asked(options={"weights_format": "dino;touch X"}), weights="runs/x")
    assert err.value.field == "weights_format"


@settings(max_examples=200, deadline=None)
@given(value=st.text(min_size=1, max_size=40).filter(lambda v: "\x00" not in v))
def test_any_value_is_one_word_to_the_shell(value: str) -> None:
    """Whatever text a record holds where a value goes (a path, an override's value), the shell reads the command
    back word for word: no value ends a command or starts another."""
    recorded = asked(options={"data": value}, overrides=[f"k={value}"])
    words = shlex.split(command_line(recorded, weights="random", arch="resnet18", output_dir=value))
    assert words == ["moco", "eval", "knn", "random", "--arch", "resnet18", "-c", "knn_embedded", "--data", value,
                     "--set", f"k={value}", "--output-dir", value]


def test_a_hostile_command_runs_nothing_but_moco(tmp_path: Path) -> None:
    """The command, pasted into bash with a stand-in moco on PATH, runs that stand-in and nothing else."""
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "moco").write_text("#!/bin/sh\nexit 0\n")
    (stub / "moco").chmod(0o755)
    hostile = "x'; touch pwned; echo '$(touch pwned2)`touch pwned3`"
    line = command_line(asked(options={"data": hostile}, overrides=[f"k={hostile}"]), weights="random",
                        arch="resnet18", output_dir=hostile)
    done = subprocess.run(["bash", "-c", line], cwd=tmp_path, env={"PATH": f"{stub}:/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert not list(tmp_path.glob("pwned*"))


@pytest.mark.parametrize(("command", "preset"), [
    ("eval linear", "lincls_32px"), ("eval finetune", "finetune_32px"), ("eval knn", "knn_32px"),
    ("eval transfer", "transfer_embedded"), ("eval voc", "voc_embedded"), ("eval coco", "coco_embedded"),
    ("eval keypoints", "keypoints_embedded"), ("eval lvis", "lvis_embedded"),
    ("eval cityscapes", "cityscapes_embedded"), ("eval densepose", "densepose_embedded"),
    ("eval semseg", "semseg_embedded"), ("eval davis", "davis_embedded")])
def test_every_evaluation_keeps_the_method_it_was_told(command: str, preset: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Through each CLI: --weights-format goes into the invocation its record and resume hint are built from, so
    the command that continues it reads the file as the first did; a random-init command drops it."""
    from typer.testing import CliRunner

    import classification.cli
    import moco_core.cli
    import probes.cli
    from cli import app

    told: list[dict[str, Any]] = []

    def launched(cfg: Any, print_config: bool, nproc: int, fn: Any, *args: Any) -> None:
        told.append(args[-1])  # the invocation: each command passes it last

    monkeypatch.setattr(classification.cli, "print_or_launch", launched)
    monkeypatch.setattr(moco_core.cli, "print_or_launch", launched)
    monkeypatch.setattr(probes.cli, "print_or_launch", launched)
    weights = tmp_path / "w.pth"
    weights.write_bytes(b"")
    result = CliRunner().invoke(app, [*command.split(), str(weights), "-c", preset, "--weights-format", "dino",
                                      "--data", str(tmp_path), "--output-dir", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    (asked,) = told
    assert asked["command"] == command and asked["options"]["weights_format"] == "dino"
    resume = command_line(asked, weights=str(weights), resume=True)
    assert resume == f"moco {command} {weights} -c {preset} --data {tmp_path} --weights-format dino --resume"
    assert "--weights-format" not in command_line(asked, weights="random", arch="resnet50")
