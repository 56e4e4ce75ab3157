"""Honest exits and visible progress (issue 51, finding 5): a run a signal stopped exits with 128 + its number, so a
shell chain stops there (pretrain exited 0 on SIGTERM and ``pretrain && eval`` evaluated a half-trained
checkpoint); an evaluation stopped in its test phase prints the command that continues it (it printed nothing), and
that command does; the test phase shows its progress; every metrics.jsonl line carries its time."""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

STOP_IN_TEST = """
import os, signal, sys
import transfer.engine
predict = transfer.engine.predict
def stopped(*args, **kwargs):  # SIGTERM the moment the test phase starts, as a scheduler's would come
    os.kill(os.getpid(), signal.SIGTERM)
    return predict(*args, **kwargs)
transfer.engine.predict = stopped
from cli import main
sys.argv = ["moco", *sys.argv[1:]]
main()
"""


def environment(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MOCO_DATA_HOME": str(tmp_path / "data"), "PYTHONUNBUFFERED": "1",
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    env.pop("MOCO_SMOKE", None)
    return env


@pytest.mark.slow
def test_an_evaluation_stopped_in_its_test_phase_says_how_to_continue_and_that_continues(tmp_path: Path) -> None:
    out = tmp_path / "voc"
    args = ["eval", "voc", "random", "--arch", "resnet18", "-c", "voc_embedded", "--output-dir", str(out)]
    stopped = subprocess.run([sys.executable, "-c", STOP_IN_TEST, *args], cwd=ROOT, capture_output=True, text=True,
                             env={**environment(tmp_path), "MOCO_SMOKE": "1"}, timeout=600)
    assert stopped.returncode == 143, stopped.stderr
    hint = f"MOCO_SMOKE=1 moco eval voc random --arch resnet18 -c voc_embedded --output-dir {out} --resume"
    assert stopped.stderr.strip().splitlines()[-1] == f"stopped by SIGTERM during the evaluation; continue with: {hint}"
    assert "Traceback" not in stopped.stderr and not (out / "result.json").exists()
    continued = subprocess.run(["bash", "-c", hint], cwd=tmp_path, env=environment(tmp_path), capture_output=True,
                               text=True, timeout=600)  # as pasted: the hint carries its MOCO_SMOKE=1
    assert continued.returncode == 0, continued.stderr
    assert "test step 2/2 " in continued.stderr  # the test phase's progress, in a log
    assert "test: scoring " in continued.stderr and "(voc's evaluator)" in continued.stderr
    assert json.loads((out / "result.json").read_text())["smoke"] is True
    for line in (out / "metrics.jsonl").read_text().splitlines():
        stamp = datetime.datetime.fromisoformat(json.loads(line)["time"])
        assert stamp.tzinfo is not None and abs(time.time() - stamp.timestamp()) < 3600


@pytest.mark.slow
def test_a_pretraining_a_signal_stopped_exits_non_zero_and_stops_a_chain(shapes_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    pretrain = (f"{sys.executable} -m cli pretrain -c embedded --data {shapes_root} --output-dir {out} "
                "--set model.queue_size=40 --set model.bn_groups=4 --set optim.batch_size=16 --set optim.epochs=50 "
                "--set run.log_every=1 --set run.knn_every=0 --set data.workers=0 --quiet")
    chain = subprocess.Popen(["bash", "-c", f"{pretrain} && touch {tmp_path / 'evaluated'}"], cwd=ROOT,
                             env=environment(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    metrics = out / "metrics.jsonl"
    try:
        deadline = time.monotonic() + 300
        while not (metrics.is_file() and '"loss"' in metrics.read_text()):
            assert chain.poll() is None and time.monotonic() < deadline, chain.communicate()[1]
            time.sleep(0.05)
        (child,) = (Path(f"/proc/{chain.pid}/task/{chain.pid}/children").read_text().split())  # the pretraining
        os.kill(int(child), signal.SIGTERM)
        _, err = chain.communicate(timeout=120)
    finally:
        if chain.poll() is None:
            os.killpg(chain.pid, signal.SIGKILL)
        chain.wait()
    assert chain.returncode == 143, err
    assert not (tmp_path / "evaluated").exists()  # the chain stopped at the stopped pretraining
    assert err.strip().splitlines()[-1].endswith(f"continue with: moco pretrain --resume --output-dir {out}")
    assert all("time" in json.loads(line) for line in metrics.read_text().splitlines())
