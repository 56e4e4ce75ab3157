"""Issue 56: one table of commands (moco_core/commands.py COMMANDS). Every command that runs in a run directory has
its row, and what moco launch, moco trials and the presets' lists take comes from it: the launcher and trials once
kept lists of their own, which had missed eval transfer, eval knn and eval densepose."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.main import get_command

from cli import app
from cluster.job import Command, LaunchError
from cluster.trials import trial_commands
from moco_core import checkpoint
from moco_core.commands import COMMANDS, checkpoint_name
from moco_core.config import presets_for

EVALS = sorted(get_command(app).commands["eval"].commands)  # type: ignore[attr-defined]


def test_every_command_that_runs_in_a_run_directory_has_a_row() -> None:
    assert sorted(COMMANDS) == sorted(["pretrain", *(f"eval {name}" for name in EVALS)])


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_launch_and_trials_take_every_command_of_the_table(name: str, tmp_path: Path) -> None:
    argv = [*name.split(), "w", "--output-dir", str(tmp_path)]
    assert Command.parse(argv).name == name
    if COMMANDS[name].seed is None:  # eval snapshots: its evaluations' seeds are its config's
        with pytest.raises(LaunchError, match="moco trials runs one of"):
            trial_commands(argv, 2, 0)
        return
    option, value = COMMANDS[name].seed  # type: ignore[misc]
    first, _ = trial_commands(argv, 2, 5)
    assert first.argv()[-4:] == [option, value.format(5), "--output-dir", str(tmp_path / "seed_5")]


def test_each_command_offers_the_presets_of_its_prefixes() -> None:
    assert presets_for("linear") == presets_for("eval linear") == presets_for("GridConfig")
    assert "lincls_grid_embedded" in presets_for("LinearConfig") and "embedded" in presets_for("pretrain")
    detection = presets_for("TransferConfig")  # every detection task's, as the config class serves them all
    assert {"voc_embedded", "coco_embedded", "densepose_embedded", "cityscapes_embedded"} <= set(detection)
    assert not set(detection) & set(presets_for("semseg"))
    claimed = {name for key in COMMANDS for name in presets_for(key) if key != "pretrain"}
    assert not claimed & set(presets_for("pretrain"))  # a pretraining's presets are those no other claims


def test_the_checkpoint_names_are_the_tables() -> None:
    from classification.finetune import FINETUNE_LAST
    from classification.frozen.grid import GRID_LAST
    from classification.linear import LINEAR_LAST

    assert checkpoint.LAST == checkpoint_name("pretrain") == "checkpoint_last.pth.tar"  # as official main_moco.py
    assert (LINEAR_LAST, GRID_LAST, FINETUNE_LAST) == ("linear_last.pth.tar", "grid_last.pth.tar",
                                                       "finetune_last.pth.tar")  # run directories of before read so
