"""A demo step is done only when what its directory holds matches the demo's own settings and mode (issue 51,
finding 1): it counted as done whenever its result.json existed, so a smoke demo took a stopped real demo's
checkpoint for finished, and a demo with other settings reported the old results as its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

DEMO = """
import functools, json, os, sys
from pathlib import Path
import moco_demo.run
from tests.moco_demo.test_demo import tiny
overrides = tiny(Path(sys.argv[1]))
overrides["linear"] += json.loads(os.environ.get("MORE_LINEAR", "[]"))
moco_demo.run.run_demo = functools.partial(moco_demo.run.run_demo, overrides=overrides)
from cli import main
sys.argv = ["moco", *sys.argv[2:]]
main()
"""


def demo(shapes_root: Path, out: Path, *, smoke_run: bool = False,
         more_linear: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MORE_LINEAR": json.dumps(list(more_linear)),
           "MOCO_DATA_HOME": str(out.parent / "data")}
    env.pop("MOCO_SMOKE", None)
    if smoke_run:
        env["MOCO_SMOKE"] = "1"
    return subprocess.run([sys.executable, "-c", DEMO, str(shapes_root), "demo", "--output-dir", str(out),
                           "--tasks", "linear", "--device", "cpu"], cwd=Path(__file__).resolve().parents[2],
                          env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_a_step_is_done_only_when_its_record_matches_the_demo(shapes_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "demo"
    first = demo(shapes_root, out)
    assert first.returncode == 0, first.stderr
    again = demo(shapes_root, out)  # the same demo: every step done before
    assert again.returncode == 0 and again.stderr.count("done before") == 5, again.stderr
    other = demo(shapes_root, out, more_linear=("optim.epochs=2",))  # other settings: not this demo's results
    assert other.returncode == 2, other.stderr
    assert other.stderr.strip().splitlines()[-1].startswith(
        f"error: {out / 'linear' / 'moco' / 'result.json'}: made with optim.epochs 1 where this demo has 2"), \
        other.stderr
    assert other.stderr.strip().endswith(f"remove {out / 'linear' / 'moco'} to run that step again, or run the demo "
                                         f"into another --output-dir")
    smoked = demo(shapes_root, out, smoke_run=True)  # the other mode: a real run is never a smoke demo's step
    assert smoked.returncode == 2, smoked.stderr
    assert smoked.stderr.strip().splitlines()[-1] == (
        f"error: {out / 'pretrain' / 'moco'} holds a real run (no MOCO_SMOKE), and this command is a smoke run "
        f"(MOCO_SMOKE=1): the two are never mixed; remove {out / 'pretrain' / 'moco'} to run that step again, or "
        f"run the demo into another --output-dir")


def test_differences_name_the_keys_that_differ() -> None:
    from moco_demo.steps import differences

    recorded = {"optim": {"epochs": 1, "lr": 30.0}, "run": {"output_dir": "a", "device": "cpu", "seed": 0},
                "engine": "torchvision", "old": 1}
    expected = {"optim": {"epochs": 1, "lr": 30.0, "new": 3}, "run": {"output_dir": "b", "device": "auto", "seed": 1},
                "engine": "auto"}
    # where and on what it ran do not matter, a seed does; a key the record lacks (an older version's) is not
    # compared; "auto" matches the engine it resolved to
    assert differences(recorded, expected) == ["run.seed 0 where this demo has 1"]
