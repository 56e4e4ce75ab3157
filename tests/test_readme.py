"""README.md's commands, run as a user types them, on data in its real on-disk layout.

Each command of README.md's ``bash`` blocks is taken as written. What changes: the user's own paths
(``/data/imagenet``, ``/data/datasets``, ``$DETECTRON2_DATASETS``) become small datasets in the same layouts
(``tests/layouts.py``); ``CKPT`` and ``resnet50-weights.pth`` are files of those names in the working directory
(an official ``main_moco.py`` checkpoint, a torchvision ``state_dict``); ``--nproc 8`` runs 2 processes (2 cores
here); and ``--set`` overrides are appended that shrink the run (1 epoch, a few iterations, resnet18, small crops,
no loader workers, each run in its own directory), never a different preset. Commands run in README order, in one
working directory, so that ``--resume runs/embedded`` and ``moco report runs/`` find what earlier ones wrote.

``test_every_readme_command_is_covered`` fails when README.md gains a command that nothing here runs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app
from moco_core import checkpoint
from moco_core.shapes import SHAPES_VERSION
from tests.layouts import (
    WNIDS,
    custom_detection_layout,
    detection_layout,
    imagenet_layout,
    official_checkpoint,
    torchvision_weights,
)
from transfer.embedded import EMBEDDED_VERSION

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()

PRETRAIN = ["model.arch=resnet18", "optim.batch_size=8", "model.bn_groups=2", "model.queue_size=32",
            "optim.epochs=1", "augment.crop_size=32", "data.workers=0", "run.log_every=1"]
EMBEDDED = ["optim.epochs=1", "run.knn_every=0", "data.workers=0"]
LINEAR = ["optim.epochs=1", "optim.batch_size=8", "data.crop_size=32", "data.resize=36", "data.workers=0"]
DETECTION = ["solver.batch_size=2", "solver.iterations=2", "solver.warmup_iters=1", "solver.steps=[1]",
             "solver.precise_bn_iters=1", "detector.pooler_resolution=4", "detector.roi_batch_size_per_image=8",
             "detector.rpn_pre_nms_topk_train=64", "detector.rpn_post_nms_topk_train=32",
             "detector.rpn_pre_nms_topk_test=32", "detector.rpn_post_nms_topk_test=8",
             "detector.detections_per_image=5", "input.min_size_train=[48]", "input.min_size_test=48",
             "input.max_size=64", "run.test_batch_size=4", "data.workers=0"]
FPN = ["detector.anchor_sizes=[8,16,32,64,128]"]

# README command -> the --set overrides that shrink it (None: run it as written).
RUN: dict[str, list[str] | None] = {
    "moco pretrain -c moco_v1_200ep --data /data/imagenet": [*PRETRAIN, "run.output_dir=runs/v1"],
    "moco pretrain -c moco_v2_200ep --data /data/imagenet --nproc 8": [*PRETRAIN, "run.output_dir=runs/v2"],
    "torchrun --nproc-per-node 8 -m cli pretrain -c moco_v2_200ep --data /data/imagenet": [
        *PRETRAIN, "run.output_dir=runs/v2_torchrun"],
    "moco pretrain -c embedded --set model.temperature=0.1 --set optim.epochs=30": EMBEDDED,
    "moco pretrain --resume runs/embedded --set optim.epochs=30": ["optim.epochs=2"],
    "moco pretrain -c moco_v2_200ep --data x --print-config": None,
    "moco launch --nodes 2 --gpus-per-node 8 --partition learn --time 4320 -- pretrain -c moco_v2_200ep --data "
    "/data/imagenet --output-dir /checkpoints/v2_200ep --set run.keep_every=20": None,
    "moco launch --gpus-per-node 1 --partition learn -- eval snapshots /checkpoints/v2_200ep --follow --data "
    "/data/imagenet --output-dir /checkpoints/v2_200ep/linear_snapshots": None,
    "moco launch --gpus-per-node 8 --partition learn -- eval linear /checkpoints/v2_200ep/checkpoint_last.pth.tar "
    "--data /data/imagenet --output-dir /checkpoints/v2_200ep/linear": None,
    "moco launch --cluster local --gpus-per-node 0 --tasks-per-node 2 --wait -- pretrain -c embedded --output-dir "
    "runs/launched": EMBEDDED,
    "moco eval linear runs/embedded/checkpoint_last.pth.tar -c lincls_embedded": [
        "optim.epochs=1", "data.workers=0", "run.output_dir=runs/linear_moco"],
    "moco eval linear random --arch resnet18 -c lincls_embedded": [
        "optim.epochs=1", "data.workers=0", "run.output_dir=runs/linear_random"],
    "moco eval linear CKPT --data /data/imagenet": [*LINEAR, "run.output_dir=runs/linear_official"],
    "moco eval linear resnet50-weights.pth --data /data/imagenet": [*LINEAR, "run.output_dir=runs/linear_tv"],
    "moco eval knn CKPT --data /data/imagenet": None,
    "moco pretrain -c embedded --set run.keep_every=20 --output-dir runs/snapshots": [
        *EMBEDDED, "optim.epochs=2", "run.keep_every=1"],
    "moco eval snapshots runs/snapshots -c lincls_embedded --follow": ["optim.epochs=1", "data.workers=0"],
    "moco eval voc -c voc_embedded --weights runs/embedded/checkpoint_last.pth.tar": [
        *DETECTION, "run.output_dir=runs/voc_moco"],
    "moco eval voc -c voc_embedded --weights random --output-dir runs/voc_random": DETECTION,
    "moco eval coco -c coco_embedded --weights runs/supervised_embedded/checkpoint_last.pth.tar": [
        *DETECTION, "run.output_dir=runs/coco_supervised"],
    "moco eval voc --weights CKPT --data /data/datasets --nproc 8": [*DETECTION, "run.output_dir=runs/voc_paper"],
    "moco eval coco -c coco_R50_FPN_1x --weights CKPT --data /data/datasets --nproc 8": [
        *DETECTION, *FPN, "run.output_dir=runs/coco_fpn"],
    "moco eval coco --weights resnet50-weights.pth --data /data/datasets --engine torchvision": [
        *DETECTION, "run.output_dir=runs/coco_tv"],
    "moco eval voc --weights CKPT --data /data/mine --train MyDevkit/ImageSets/Main/train.txt --test "
    "MyDevkit/ImageSets/Main/val.txt": [*DETECTION, "run.output_dir=runs/voc_mine"],
    "moco eval coco --weights CKPT --data /data/mine --train annotations/train.json:images --test "
    "annotations/val.json:images": [*DETECTION, "run.output_dir=runs/coco_mine"],
    "moco convert CKPT backbone.pkl": None,
    "moco report runs/": None,
    "moco sweep m 0,0.9,0.99,0.999 -c embedded --output-dir runs/sweep_m": ["SMALL", *EMBEDDED, "optim.batch_size=16"],
    "moco sweep K 256,1024,4096 -c embedded --output-dir runs/sweep_K": ["SMALL", *EMBEDDED, "optim.batch_size=16"],
    "moco sweep K 8,16,32 -c embedded --set method=end2end --output-dir runs/sweep_e2e": ["SMALL", *EMBEDDED],
    "moco trials 3 -- pretrain -c embedded --output-dir runs/moco_trials": EMBEDDED,
    "moco trials 3 -- eval linear runs/moco_trials/seed_{seed}/checkpoint_last.pth.tar -c lincls_embedded "
    "--output-dir runs/linear_trials": ["optim.epochs=1", "data.workers=0"],
    "moco report runs/ --out report/": None,
}
NEEDS_DETECTRON2 = {
    "moco eval voc --weights CKPT --engine detectron2 --data $DETECTRON2_DATASETS": [
        *DETECTION, "run.output_dir=runs/d2_voc"],
    "moco eval coco --weights CKPT -c coco_R50_FPN_1x --engine detectron2 --data $DETECTRON2_DATASETS --nproc 8": [
        *DETECTION, *FPN, "run.output_dir=runs/d2_coco"],
    "moco eval voc --weights random -c voc_embedded --engine detectron2": [*DETECTION, "run.output_dir=runs/d2_emb"],
}
# Commands not run here, and what runs them instead.
ELSEWHERE = {
    "python3 -m venv .venv && .venv/bin/pip install -q -c constraints.txt -e . && .venv/bin/moco demo":
        "the install is CI's own first step (.ci/run); the demo's steps run in tests/moco_demo/test_demo.py",
    "python3 -m venv .venv && .venv/bin/pip install -q -c constraints.txt -e '.[test]' && .venv/bin/pytest -q -n 2 "
    "--dist loadfile":
        "CI's command: .ci/run runs it as written",
    ".venv/bin/pip install --no-build-isolation 'git+https://github.com/facebookresearch/detectron2.git'":
        "needs the network; the detectron2 commands below run when it is importable",
}


def readme_commands() -> list[str]:
    """Every command line of README.md's bash blocks, its trailing comment removed."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = [line for block in re.findall(r"```bash\n(.*?)```", text, re.S) for line in block.splitlines()]
    return [re.sub(r"\s+#.*$", "", line).strip() for line in lines if line.strip()]


def test_every_readme_command_is_covered() -> None:
    commands = readme_commands()
    assert len(commands) == len(set(commands))
    assert set(commands) == set(RUN) | set(NEEDS_DETECTRON2) | set(ELSEWHERE), (
        set(commands) ^ (set(RUN) | set(NEEDS_DETECTRON2) | set(ELSEWHERE)))
    assert [c for c in commands if c in RUN] == list(RUN)  # run in README order


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory, shapes_root: Path) -> dict[str, Path]:
    """A working directory holding CKPT, resnet50-weights.pth and runs/supervised_embedded (the supervised
    baseline README's prose pretrains with ``moco pretrain -c supervised_embedded``), with the datasets beside it."""
    base = tmp_path_factory.mktemp("readme")
    work = base / "work"
    work.mkdir()
    official_checkpoint(work / "CKPT")
    torchvision_weights(work / "resnet50-weights.pth")
    paths = {"work": work, "imagenet": imagenet_layout(base / "imagenet"),
             "datasets": detection_layout(base / "datasets"), "shapes": shapes_root,
             "mine": custom_detection_layout(base / "mine")}
    result = _invoke(["pretrain", "-c", "supervised_embedded", *_sets([*EMBEDDED, "optim.batch_size=32"])], work)
    assert result.exit_code == 0, result.output
    return paths


def _sets(overrides: list[str]) -> list[str]:
    return [arg for value in overrides for arg in ("--set", value)]


def _invoke(args: list[str], cwd: Path) -> object:
    previous = Path.cwd()
    os.chdir(cwd)
    try:
        return runner.invoke(app, args)
    finally:
        os.chdir(previous)


def _args(command: str, paths: dict[str, Path], shrink: list[str] | None) -> list[str]:
    """The command's arguments after the program, with the user's paths replaced and the shrinking appended."""
    text = (command.replace("/data/imagenet", str(paths["imagenet"])).replace("/data/datasets", str(paths["datasets"]))
            .replace("/data/mine", str(paths["mine"])).replace("/checkpoints", str(paths["work"] / "checkpoints"))
            .replace("$DETECTRON2_DATASETS", str(paths["datasets"])))
    args = shlex.split(text)
    if "--nproc" in args:
        args[args.index("--nproc") + 1] = "2"
    if "--nproc-per-node" in args:
        args[args.index("--nproc-per-node") + 1] = "2"
    if args[1:2] == ["trials"]:  # 2 trials here
        args[2] = "2"
    shrink = list(shrink or [])
    if "SMALL" in shrink:  # the sweeps: many points, so the small labelled shapes set (train/ and val/) for each
        shrink.remove("SMALL")
        shrink += [f"data.path={paths['shapes']}", f"data.knn_path={paths['shapes']}"]
    return args + _sets(shrink)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run(command: str, paths: dict[str, Path], shrink: list[str] | None) -> tuple[int, str]:
    args = _args(command, paths, shrink)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    if args[0] == "torchrun":  # the launcher torch installs, as a module of this interpreter
        args = [sys.executable, "-m", "torch.distributed.run", "--master-port", str(_free_port()), *args[1:]]
        done = subprocess.run(args, cwd=paths["work"], capture_output=True, text=True, env=env, timeout=300)
        return done.returncode, done.stdout + done.stderr
    assert args[0] == "moco", command
    if args[1] == "launch":  # SLURM is not installed here: a stand-in sbatch takes the script and answers as it does
        stand_in = paths["work"].parent / "slurm-bin"
        stand_in.mkdir(exist_ok=True)
        for name, script in (("sbatch", "echo Submitted batch job 4242"), ("srun", "exit 1")):
            (stand_in / name).write_text(f"#!/bin/sh\n{script}\n")
            (stand_in / name).chmod(0o755)
        env["PATH"] = f"{stand_in}{os.pathsep}{env['PATH']}"
    if "--nproc" in args or args[1] == "launch":  # through a real process: the launcher's exit code matters
        done = subprocess.run([sys.executable, "-m", "cli", *args[1:]], cwd=paths["work"], capture_output=True,
                              text=True, env=env, timeout=300)
        return done.returncode, done.stdout + done.stderr
    result = _invoke(args[1:], paths["work"])
    return result.exit_code, result.output


def _record(output: str, work: Path) -> dict:
    """The record a command printed as ``result: PATH`` (relative to the working directory, if it is)."""
    paths = re.findall(r"^result: (.+)$", output, re.M)
    assert paths, output[-2000:]
    return json.loads((work / paths[-1].strip()).read_text())


def _check(command: str, work: Path, output: str) -> None:
    """What each command must have left behind, beyond exit code 0 and no traceback."""
    shrink = RUN[command] or []
    out_dir = next((s.split("=", 1)[1] for s in shrink if s.startswith("run.output_dir=")), None)
    if command.startswith("moco pretrain") and "--output-dir " in command:
        out_dir = command.split("--output-dir ")[1].split()[0]
    if command.startswith("moco launch"):
        run_dir = work / command.split("--output-dir ")[1].split()[0].replace("/checkpoints", "checkpoints")
        (submitted,) = json.loads((run_dir / "launch.json").read_text())["submissions"]
        if "--cluster local" in command:  # run here, to its end, as 2 processes
            start = json.loads((run_dir / "run.json").read_text())["starts"][-1]
            assert start["world_size"] == 2 and start["scheduler_job"] == submitted["job_id"]
            assert checkpoint.load(run_dir / checkpoint.LAST)["epoch"] == 1
        else:
            script = Path(submitted["script"]).read_text()
            assert submitted["job_id"] == "4242" and "#SBATCH --partition=learn" in script
            assert f"#SBATCH --nodes={2 if '--nodes 2' in command else 1}" in script
            assert f"#SBATCH --gpus-per-node={command.split('--gpus-per-node ')[1].split()[0]}" in script
            assert "#SBATCH --signal=USR2@120" in script
    elif "--print-config" in command:
        assert "path: x" in output and "mlp: true" in output and "temperature: 0.2" in output
    elif command.startswith(("moco pretrain", "torchrun")):
        ckpt = checkpoint.load(work / (out_dir or "runs/embedded") / checkpoint.LAST)
        assert ckpt["epoch"] == (2 if "--resume" in command or "keep_every" in command else 1)
        if "/data/imagenet" in command and "torchrun" not in command and "--nproc" not in command:
            assert f"skipped 1 unreadable image: {WNIDS[0]}_truncated.JPEG" in output  # one line, not a traceback
    elif command.startswith("moco eval linear"):
        record = _record(output, work)
        assert record["sanity_check"] == "passed" and 0 <= record["metrics"]["top1"] <= 100
        if "_embedded" in command:  # generated shapes, their version part of the recipe
            assert record["dataset"]["version"] == f"shapes v{SHAPES_VERSION}", record["dataset"]
        else:
            assert "version" not in record["dataset"], record["dataset"]
    elif command.startswith("moco trials"):  # one directory and record (or checkpoint) per seed
        out = work / command.split("--output-dir ")[1].split()[0]
        assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["seed_0", "seed_1"]
        if "eval linear" in command:
            seeds = [json.loads((out / s / "result.json").read_text())["config"]["run"]["seed"] for s in ("seed_0",
                                                                                                          "seed_1")]
            assert seeds == [0, 1]
    elif command.startswith("moco eval snapshots"):  # each kept snapshot evaluated, marked with its epoch
        found = sorted((work / "runs/snapshots/linear_snapshots").glob("*/result.json"))
        records = [json.loads(p.read_text()) for p in found]
        assert [r["snapshot"]["epoch"] for r in records] == [1, 2], records
    elif command.startswith("moco eval knn"):
        assert 0 <= _record(output, work)["metrics"]["top1"] <= 100
    elif command.startswith("moco eval"):
        record = json.loads((work / (out_dir or "runs/voc_random") / "result.json").read_text())
        assert record["metrics"], record
        if "_embedded" in command:  # generated scenes, their version part of the recipe
            assert record["dataset"]["version"] == f"scenes v{EMBEDDED_VERSION}", record["dataset"]
        else:
            assert "version" not in record["dataset"], record["dataset"]
        if "/data/mine" in command:  # one's own sets: named as such, their classes the names the files use
            assert record["dataset"]["name"].startswith("custom: ") and record["dataset"]["classes"] == 8
    elif command.startswith("moco sweep"):
        out = work / command.split("--output-dir ")[1].split()[0]
        for value in command.split()[3].split(","):  # each point pretrained and evaluated: <name>=<value>/knn
            (point,) = out.glob(f"*={value}")
            record = json.loads((point / "knn" / "result.json").read_text())
            assert record["sweep"]["value"] == float(value) and record["status"] in ("ok", "failed"), record
    elif command.startswith("moco convert"):  # detectron2's pickle: {"model": {res2...: ndarray}, ...}
        import pickle

        with open(work / "backbone.pkl", "rb") as f:
            converted = pickle.load(f)
        assert "stem.conv1.weight" in converted["model"] and converted["matching_heuristics"] is True
    elif command.startswith("moco report"):  # --out defaults to report/
        text = (work / "report" / "report.md").read_text()
        assert "random init" in text and "VOC" in text and "COCO" in text


@pytest.mark.slow
@pytest.mark.parametrize("command", list(RUN))
def test_readme_command(command: str, workspace: dict[str, Path]) -> None:
    code, output = _run(command, workspace, RUN[command])
    assert code == 0, output[-3000:]
    assert "Traceback" not in output
    _check(command, workspace["work"], output)
    _drop_weights(command, workspace["work"])


def _drop_weights(command: str, work: Path) -> None:
    """Checked: the run's weight files go (CI's disk is small); later commands read only runs/embedded's
    checkpoint, the supervised baseline's and the records."""
    shrink = RUN[command] or []
    out = next((s.split("=", 1)[1] for s in shrink if s.startswith("run.output_dir=")), None)
    if "--output-dir " in command:
        out = command.split("--output-dir ")[1].split()[0]
    if command.startswith("moco pretrain") and "keep_every" in command or "-- pretrain -c embedded" in command:
        return  # the next command evaluates them
    if command.startswith("moco eval snapshots"):  # then the snapshots it evaluated go
        out = command.split()[3]
    if command.startswith("moco trials") and "eval linear" in command:  # and the pretrainings of each seed
        _unlink_weights(work / "runs/moco_trials")
    if out is None or out in ("runs/embedded", "runs/supervised_embedded") or not (work / out).is_dir():
        return
    _unlink_weights(work / out)


def _unlink_weights(run_dir: Path) -> None:
    for pattern in ("*.pth.tar", "*.pth", "*.pkl"):
        for path in run_dir.rglob(pattern):
            path.unlink()


@pytest.mark.slow
@pytest.mark.parametrize("command", list(NEEDS_DETECTRON2))
def test_readme_detectron2_command(command: str, workspace: dict[str, Path]) -> None:
    if importlib.util.find_spec("detectron2") is None:
        pytest.skip("detectron2 is not installed (README: it is an optional extra, built from its source)")
    code, output = _run(command, workspace, NEEDS_DETECTRON2[command])
    assert code == 0, output[-3000:]
