"""``moco demo`` end to end on a tiny dataset (linear only; the transfer engines have their own tests)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from moco_demo.run import run_demo

TINY_PRETRAIN = ["model.queue_size=40", "model.bn_groups=4", "optim.batch_size=16", "optim.epochs=1",
                 "data.workers=0", "run.knn_every=0", "augment.crop_size=32"]


def test_demo_runs_every_step_then_skips_them(shapes_root: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    data = f"data.path={shapes_root}"
    overrides = {"moco": [*TINY_PRETRAIN, data], "supervised": [*TINY_PRETRAIN, data],
                 "linear": ["optim.epochs=1", "optim.batch_size=16", "data.workers=0", data]}
    out = tmp_path / "demo"
    report = run_demo(out, device="cpu", tasks=("linear",), overrides=overrides)
    err = capsys.readouterr().err
    assert "demo [6/6] report" in err and "done before" not in err
    records = {name: json.loads((out / "linear" / name / "result.json").read_text())
               for name in ("moco", "supervised", "random")}
    assert records["moco"]["backbone"]["pretrain"]["method"] == "moco"
    assert records["supervised"]["backbone"]["pretrain"]["method"] == "supervised"
    assert records["random"]["backbone"]["format"] == "random"
    markdown = (report / "report.md").read_text()
    assert "MoCo" in markdown and "supervised" in markdown.lower() and "random" in markdown.lower()
    times = json.loads((out / "demo.json").read_text())
    assert [t["name"] for t in times["steps"]][:2] == ["pretrain moco (embedded)", "pretrain supervised "
                                                      "(supervised_embedded)"]
    run_demo(out, device="cpu", tasks=("linear",), overrides=overrides)  # everything is there: only the report
    err = capsys.readouterr().err
    assert err.count("done before") == 5 and "demo [6/6] report: " in err
    again = json.loads((out / "demo.json").read_text())
    assert [t["seconds"] for t in again["steps"]][:5] == [t["seconds"] for t in times["steps"]][:5]  # kept


def test_unknown_tasks_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown demo tasks"):
        run_demo(tmp_path, tasks=("linear", "imagenet"))
