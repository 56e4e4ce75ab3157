"""Every option of every command is exercised by a test, and the ones no other test covers do what they say."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from cli import app
from moco_core.config import PRESETS
from tests.test_readme import RUN

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def _options(command: Any, path: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """(command path, option) for every option of every command below ``command``."""
    if hasattr(command, "commands"):
        return [o for name, sub in command.commands.items() for o in _options(sub, (*path, name))]
    return [(" ".join(path), opt) for param in command.params if type(param).__name__.endswith("Option")
            for opt in (*param.opts, *param.secondary_opts) if opt != "--help"]


def test_every_option_is_given_by_some_test() -> None:
    """An option counts as exercised when a test passes it (quoted in a test's source) or a README command that
    tests/test_readme.py runs contains it. Options that only negate a default (``--no-quiet``) do not exist."""
    sources = "".join(p.read_text(encoding="utf-8") for p in (ROOT / "tests").rglob("*.py"))
    commands = " ".join(RUN)
    options = _options(typer.main.get_command(app))
    assert len(options) > 60
    missing = [f"moco {cmd} {opt}" for cmd, opt in options
               if f'"{opt}"' not in sources and f"'{opt}'" not in sources
               and not re.search(re.escape(opt) + r"(?![\w-])", commands)]
    assert not missing, missing
    assert not [o for o in options if o[1].startswith("--no-")]


def test_knn_options_reach_the_evaluation(shapes_root: Path, tmp_path: Path) -> None:
    """--k 1 makes the vote a single neighbour's: no temperature changes it; the batch size never does; --seed
    draws the random backbone (without it each run drew other weights)."""
    def knn(*options: str) -> dict:
        out = tmp_path / "_".join(options)
        result = runner.invoke(app, ["eval", "knn", "random", "--arch", "resnet18", "--data", str(shapes_root),
                                     "--crop-size", "32", "--resize", "36", "--workers", "0", "--device", "cpu",
                                     "--output-dir", str(out), *options])
        assert result.exit_code == 0, result.output
        return json.loads((out / "result.json").read_text())

    sharp, flat = knn("--k", "1", "--temperature", "0.01"), knn("--k", "1", "--temperature", "100", "--batch-size", "5")
    assert (sharp["config"]["k"], sharp["config"]["temperature"], flat["config"]["temperature"]) == (1, 0.01, 100.0)
    assert sharp["metrics"]["top1"] == flat["metrics"]["top1"]
    many = knn("--k", "16", "--batch-size", "7")
    assert many["config"]["k"] == 16 and many["metrics"] == knn("--k", "16", "--batch-size", "64")["metrics"]
    other = [knn("--k", "1", "--seed", str(seed))["metrics"] for seed in range(1, 4)]
    assert sharp["config"]["seed"] == 0 and any(m != sharp["metrics"] for m in other)
    assert "version" not in sharp["dataset"]  # a folder given by path: only "embedded" names the shapes' version


def test_sweep_evaluates_with_the_given_linear_config_and_data(shapes_root: Path, tmp_path: Path) -> None:
    config = tmp_path / "linear.yaml"
    config.write_text(f"_base_: {PRESETS / 'lincls_embedded.yaml'}\noptim:\n  epochs: 1\ndata:\n  workers: 0\n")
    pretrain = ["model.arch=resnet18", "model.bn_groups=2", "optim.batch_size=8", "optim.epochs=1",
                "augment.crop_size=32", "data.workers=0", "run.knn_every=0", f"data.path={shapes_root}"]
    result = runner.invoke(app, ["sweep", "K", "16", "-c", "embedded", *[a for s in pretrain for a in ("--set", s)],
                                 "--eval", "linear", "--eval-config", str(config), "--eval-data", str(shapes_root),
                                 "--output-dir", str(tmp_path / "sweep"), "--quiet"])
    assert result.exit_code == 0, result.output
    (record,) = (tmp_path / "sweep").glob("*=16/linear/result.json")
    record = json.loads(record.read_text())
    assert record["protocol"] == "linear" and record["dataset"]["path"] == str(shapes_root)
    assert record["config"]["optim"]["epochs"] == 1 and record["sweep"]["value"] == 16


def test_report_o_is_out(tmp_path: Path) -> None:
    records = ROOT / "tests" / "reports" / "golden" / "records"
    result = runner.invoke(app, ["report", str(records), "-o", str(tmp_path / "here"), "--formats", "md"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "here" / "report.md").read_text(encoding="utf-8").startswith("#")


def test_demo_passes_its_tasks_and_progress_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import moco_demo.run

    seen: dict[str, Any] = {}

    def fake_demo(out: Path, **kwargs: Any) -> Path:
        seen.update(kwargs)
        (out / "report").mkdir(parents=True)
        (out / "report" / "report.md").write_text("# the report\n")
        return out / "report"

    monkeypatch.setattr(moco_demo.run, "run_demo", fake_demo)
    result = runner.invoke(app, ["demo", "--output-dir", str(tmp_path), "--tasks", "voc, linear", "--progress",
                                 "--device", "cpu", "--engine", "torchvision", "--trials", "3", "--seed", "7"])
    assert result.exit_code == 0, result.output
    assert seen == {"device": "cpu", "engine": "torchvision", "tasks": ("voc", "linear"), "show_progress": True,
                    "trials": 3, "seed": 7}
    assert "# the report" in result.output
