"""benchmarks/cuda_numerics_on_cpu.py switches CUDA's defaults on for a CPU run, and only inside its context."""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn

import moco_core.data.device_data
import moco_core.run.train
from moco_core.pretrain_config import AugmentConfig, RunConfig

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201 - the benchmark's module
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import cuda_numerics_on_cpu

    yield cuda_numerics_on_cpu
    sys.modules.pop("cuda_numerics_on_cpu", None)


def _conv_output_dtype(autocast) -> torch.dtype:  # noqa: ANN001 - a module's ``autocast``
    conv = nn.Conv2d(3, 4, 3)
    with autocast(torch.device("cpu"), True):
        return conv(torch.randn(1, 3, 8, 8)).dtype


def _speed(method_module: nn.Module) -> moco_core.run.train.Speed:
    method = SimpleNamespace(module=method_module, encoder=method_module)
    return moco_core.run.train.speed_up(method, torch.device("cpu"), RunConfig())  # type: ignore[arg-type]


def test_every_module_that_calls_autocast_is_switched(bench) -> None:
    """A module importing ``autocast`` from moco_core.run.runtime keeps its own reference: each must be listed, or
    its runs would stay in fp32 while the script claims bf16."""
    importers = set()
    for path in ROOT.glob("*/*.py"):
        if path.parts[-2] in ("tests", "benchmarks", ".venv"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.ImportFrom) and node.module == "moco_core.run.runtime"
                    and any(alias.name == "autocast" for alias in node.names)):
                importers.add(f"{path.parts[-2]}.{path.stem}")
    assert importers  # the scan found the engine's, at least
    assert importers <= {module.__name__ for module in bench.AUTOCAST_USERS}


def test_inside_bf16_channels_last_and_ahead_outside_as_before(bench) -> None:
    loader_args = ([], AugmentConfig(), torch.device("cpu"))
    assert all(_conv_output_dtype(module.autocast) == torch.float32 for module in bench.AUTOCAST_USERS)
    with bench.cuda_defaults(compile_encoders=False):
        assert all(_conv_output_dtype(module.autocast) == torch.bfloat16 for module in bench.AUTOCAST_USERS)
        speed = _speed(nn.Conv2d(3, 4, 3))
        assert (speed.channels_last, speed.compiled) == (True, False)
        assert moco_core.data.device_data.DeviceAugmentLoader(*loader_args, views=2).ahead
        assert not moco_core.data.device_data.DeviceAugmentLoader(*loader_args, views=2, ahead=False).ahead
    assert all(_conv_output_dtype(module.autocast) == torch.float32 for module in bench.AUTOCAST_USERS)
    assert _speed(nn.Conv2d(3, 4, 3)) == moco_core.run.train.Speed(channels_last=False, compiled=False)
    assert not moco_core.data.device_data.DeviceAugmentLoader(*loader_args, views=2).ahead


def test_the_switches_are_undone_when_the_command_fails(bench) -> None:
    speed_up = moco_core.run.train.speed_up
    with pytest.raises(RuntimeError), bench.cuda_defaults(compile_encoders=True):
        assert moco_core.run.train.speed_up is not speed_up
        raise RuntimeError("the command failed")
    assert moco_core.run.train.speed_up is speed_up


def test_it_needs_a_command(bench, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        bench.main(["--compile"])
    assert stop.value.code == 2
    assert "give a moco command after --" in capsys.readouterr().err
