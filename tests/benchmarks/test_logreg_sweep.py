"""benchmarks/logreg_sweep.py's dry run on the CPU: every figure in one JSON line, both solvers on the same
generated problem, scikit-learn's budget and extrapolation said."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("sklearn")
SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "logreg_sweep.py"


def test_the_dry_run_prints_one_json_line_with_every_figure() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--problems", "small,food101",
                           "--train", "200", "--test", "100", "--dim", "16", "--classes", "4", "--images", "4",
                           "--arch", "resnet18", "--image-size", "32", "--batch", "2", "--every", "9"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1
    out = json.loads(lines[0])
    for name in ("small", "food101"):
        row = out["problems"][name]
        assert (row["train"], row["dim"], row["classes"]) == (200, 16, 4)
        assert row["ours"]["test_top1"] > 40 and row["sklearn"]["values_done"] == row["ours"]["values_done"] == 5
        assert "every 9th" in row["sklearn"]["note"] and row["speedup"] > 0
        for side in ("ours", "sklearn"):  # every 9th of 45 fitted: times 9
            assert row[side]["sweep_s_extrapolated_45"] == pytest.approx(row[side]["sweep_s_measured"] * 9)
    assert out["extraction"]["images"] == 4 and out["extraction"]["images_per_s"] > 0


def test_the_generated_problem_has_learnable_class_structure() -> None:
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        from logreg_sweep import make_problem
    finally:
        sys.path.pop(0)
    p = make_problem(600, 300, 32, 5)
    assert p["x_train"].shape == (600, 32) and p["x_train"].dtype.name == "float32" and (p["x_train"] >= 0).all()
    assert len(p["val_index"]) == 120 and not set(p["val_index"]) & set(p["fit_index"])
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(max_iter=500).fit(p["x_train"], p["y_train"])
    assert 0.5 < model.score(p["x_test"], p["y_test"]) < 1.0  # learnable, not trivial (chance: 0.2)
