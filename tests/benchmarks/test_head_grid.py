"""benchmarks/head_grid.py's dry run on the CPU: each setting's two runs (one head, the grid) go to the end and the
JSON line carries every figure the GPU run reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_dry_run_prints_every_figure(tmp_path: Path) -> None:
    pytest.importorskip("timm")
    env = {**os.environ, "MOCO_DATA_HOME": str(tmp_path / "data"), "OMP_NUM_THREADS": "1"}
    env.pop("MOCO_SMOKE", None)
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "head_grid.py"), "--tiny"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["benchmark"] == "head_grid" and out["device"] == "cpu" and out["torch"] and out["peak_rss_mib"] > 0
    resnet, vit, embedded = out["settings"]
    for setting, taps in ((resnet, ["layer4", "layer3", "layer2", "layer1"]),
                          (vit, ["cls", "cls+avg", "cls4", "cls4+avg"])):
        assert setting["one_head"]["heads"] == 1 and setting["grid"]["heads"] == 52 and setting["grid"]["taps"] == taps
        for run in (setting["one_head"], setting["grid"]):
            assert run["images_per_s"] > 0 and run["batch"] == 4 and "compile_s" not in run
        assert setting["time_ratio"] == pytest.approx(setting["one_head"]["images_per_s"]
                                                      / setting["grid"]["images_per_s"])
    assert embedded["one_head"]["heads"] == 1 and embedded["grid"]["heads"] == 13
    assert embedded["time_ratio"] == pytest.approx(embedded["grid"]["wall_s"] / embedded["one_head"]["wall_s"])
