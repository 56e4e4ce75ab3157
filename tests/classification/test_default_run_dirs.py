"""An evaluation called without an output directory (a library caller, not the CLI) writes where the CLI would:
``runs/<task>_<data>/<weights>`` (moco_core.run.naming.evaluation_dir), so evaluating the same weights on two
datasets in turn never lands in one directory (where the second was refused as a finished evaluation)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from classification import engine
from classification.frozen import shots
from classification.frozen.grid_config import GridConfig
from classification.linear import LinearConfig, _Linear
from moco_core.config import replace


class _Reached(Exception):
    """Where the evaluation would start its work: the directory it chose."""


def _linear(cfg: Any) -> Path:
    def stop(protocol: Any, **_: Any) -> Path:
        raise _Reached(protocol.cfg.run.output_dir)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine, "run_epochs", stop)
        with pytest.raises(_Reached) as reached:
            engine.run_evaluation(cfg, "random", "linear", _Linear, show_progress=False, extra=None, resume=False)
    return Path(reached.value.args[0])


def _fewshot(cfg: Any) -> Path:
    def stop(run_dir: Path, *_: Any) -> Any:
        raise _Reached(run_dir)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(shots, "run_dir_lock", stop)
        with pytest.raises(_Reached) as reached:
            shots.fewshot_eval(cfg, "random", show_progress=False)
    return Path(reached.value.args[0])


@pytest.mark.parametrize(("config", "run", "task"), [(LinearConfig, _linear, "linear"),
                                                      (GridConfig, _fewshot, "linear_fewshot")])
def test_the_fallback_directory_is_keyed_by_the_data(config: Any, run: Any, task: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("digits", "cifar10"):
        (tmp_path / name).mkdir()
        cfg = replace(config(), arch="resnet18", data={"path": str(tmp_path / name)}, run={"device": "cpu"})
        assert run(cfg) == Path(f"runs/{task}_{name}/random_resnet18")
    embedded = replace(config(), arch="resnet18", data={"path": "embedded"}, run={"device": "cpu"})
    assert run(embedded) == Path(f"runs/{task}/random_resnet18")  # the embedded data has no tag, as in the CLI
