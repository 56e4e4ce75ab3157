"""README.md's commands, run as a user types them: every line of its ``bash`` blocks, as written, by bash, in README
order, in one working directory, so that a command that collides with an earlier one (the same default run
directory) fails here as it would for the user.

The one thing changed is what README itself documents: ``MOCO_SMOKE=1`` (README, "Try a command in seconds"),
which shortens every run, and the variables README's commands are written with (``$IMAGENET``, ``$CKPT``, ...),
pointing at small datasets and weight files in the real on-disk layouts (``tests/layouts.py``, and
``tests/weights_layouts.py`` for other methods' weights; ``$GPUS`` is 2,
the cores here). ``moco`` and ``torchrun`` are the ones this interpreter's environment installs, as after
README's ``source .venv/bin/activate``; SLURM is not installed here, so a stand-in ``sbatch`` takes the script
and answers as SLURM does. The install lines run elsewhere (``ELSEWHERE`` says where), and the detectron2
commands only where detectron2 is importable.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torchvision

from moco_core import checkpoint
from tests import weights_layouts
from tests.dense.layouts import write_ade
from tests.layouts import (
    WNIDS,
    cifar_folder_layout,
    custom_detection_layout,
    detection_layout,
    flowers_layout,
    imagenet_layout,
    inat_layout,
    official_checkpoint,
    pets_layout,
    robustness_layout,
    simclr_subset_file,
    torchvision_weights,
)
from tests.probes.davis_layouts import davis_layout
from tests.probes.layouts import revisitop_layout
from tests.suite_layouts import transfer_suite_layout
from tests.transfer.segmentation.layouts import (
    cityscapes_layout,
    custom_segmentation_layout,
    voc_segmentation_layout,
)

ROOT = Path(__file__).resolve().parents[1]

# Commands not run here, and what runs them instead.
ELSEWHERE = {
    "python3 -m venv .venv && .venv/bin/pip install -q -c constraints.txt -e . && .venv/bin/moco demo":
        "the install is CI's own first step (.ci/run); the demo runs below as MOCO_SMOKE=1 moco demo, and whole in "
        "tests/moco_demo/test_demo.py",
    "python3 -m venv .venv && .venv/bin/pip install -q -c constraints.txt -e '.[test]' && .venv/bin/pytest -q -n 2 "
    "--dist loadfile": "CI's command: .ci/run runs it as written",
    "source .venv/bin/activate": "the commands here run with this environment's bin/ first on PATH",
    ".venv/bin/pip install --no-build-isolation 'git+https://github.com/facebookresearch/detectron2.git'":
        "needs the network; the detectron2 commands run where it is importable",
    ".venv/bin/pip install --no-build-isolation "
    "'git+https://github.com/facebookresearch/detectron2.git#subdirectory=projects/DensePose'":
        "needs the network; the dense pose command runs where DensePose is importable",
}


def readme_commands() -> list[str]:
    """Every command line of README.md's bash blocks, as written (bash ignores the trailing comments)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = [line for block in re.findall(r"```bash\n(.*?)```", text, re.S) for line in block.splitlines()]
    return [line.strip() for line in lines if line.strip()]


def _bare(command: str) -> str:
    return re.sub(r"\s+#.*$", "", command).strip()


RUN = [c for c in readme_commands() if _bare(c) not in ELSEWHERE]


def test_every_readme_command_is_run_or_accounted_for() -> None:
    commands = [_bare(c) for c in readme_commands()]
    assert set(ELSEWHERE) <= set(commands), set(ELSEWHERE) - set(commands)  # nothing stale here
    assert all(c.startswith(("moco ", "torchrun ", "MOCO_SMOKE=1 moco ")) for c in map(_bare, RUN)), RUN
    assert all(_checked(c) for c in RUN), [c for c in RUN if not _checked(c)]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """The working directory and the environment of a user who has set README's variables."""
    base = tmp_path_factory.mktemp("readme")
    work = base / "work"
    work.mkdir()
    (base / "weights").mkdir()
    stand_in = base / "slurm-bin"  # SLURM's sbatch, answering as it does; srun is not there to use
    stand_in.mkdir()
    for name, script in (("sbatch", "echo Submitted batch job 4242"), ("srun", "exit 1")):
        (stand_in / name).write_text(f"#!/bin/sh\n{script}\n")
        (stand_in / name).chmod(0o755)
    env = {
        **os.environ,
        "MOCO_SMOKE": "1", "MOCO_DATA_HOME": str(base / "data"), "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1",
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), str(stand_in), os.environ.get("PATH", "")]),
        "IMAGENET": str(imagenet_layout(base / "imagenet", ilsvrc_val_names=True)),
        "INAT": str(inat_layout(base / "inat")), "GPUS": "2",
        "CKPT": str(official_checkpoint(base / "weights" / "moco_v2_200ep.pth.tar")),
        "TV_WEIGHTS": str(torchvision_weights(base / "weights" / "resnet-weights.pth")),
        "DETECTRON2_DATASETS": str(write_ade(cityscapes_layout(voc_segmentation_layout(detection_layout(
            base / "datasets"))))),
        "MYDATA": str(custom_detection_layout(base / "mine")), "CHECKPOINTS": str(base / "checkpoints"),
        "SUBSET": str(simclr_subset_file(base / "1percent.txt", [f"{w}_{i}.JPEG" for i, w in enumerate(WNIDS)])),
        "CIFAR10": str(cifar_folder_layout(base / "cifar10")), "FLOWERS": str(flowers_layout(base / "flowers")),
        "PETS": str(pets_layout(base / "pets")), "TRANSFER": str(transfer_suite_layout(base / "transfer")),
        "MYSEG": str(custom_segmentation_layout(base / "myseg")), "DAVIS": str(davis_layout(base / "davis")),
        "REVISITOP": str(revisitop_layout(base / "revisitop")),
        **other_methods(base / "weights"),
    }
    env["ROBUSTNESS"] = str(robustness_layout(base / "robustness", Path(env["IMAGENET"])))
    env.pop("PYTHONPATH", None)  # the installed package, as a user has it
    return work, env


def other_methods(root: Path) -> dict[str, str]:
    """README's variables for other methods' weights: small files in each project's own layout
    (tests/weights_layouts.py): a ViT of 4-pixel patches where they ship ViTs, ResNet-18s elsewhere (SimCLR v2's
    converter has ResNet-50s only)."""
    lay = weights_layouts
    r18, vit = lay.resnet_state(), lay.timm_vit_state()
    return {"DINO_FULL": str(lay.dino_full(root / "dino_vitnano4_full_checkpoint.pth", vit, vit=True)),
            "DINO_RESNET": str(lay.torchvision_file(root / "dino_resnet18_pretrain.pth", lay.without(r18, "fc."))),
            "DINOV2": str(lay._save(lay.dinov2_state(1, registers=4, swiglu=True), root / "dinov2_reg4_pretrain.pth")),
            "SWAV": str(lay.swav_file(root / "swav_800ep_pretrain.pth.tar", r18)),
            "BARLOW": str(lay.torchvision_file(root / "barlow" / "resnet50.pth", lay.without(r18, "fc."))),
            "BYOL": str(lay.torchvision_file(root / "byol_resnet18.pth", lay.without(r18, "fc."))),
            "SIMCLR": str(lay.simclr_v1(root / "ResNet50_1x.pth", r18)),
            "SIMCLR_V2": str(lay.simclr_v2(root / "r50_1x_sk0.pth", lay.resnet_state("resnet50"))),
            "MAE": str(lay.mae_file(root / "mae_pretrain_vit_nano.pth", vit, full=False)),
            "SOLO": str(lay.solo_learn(root / "solo" / "byol-cifar-ep=399.ckpt", lay.resnet_state(cifar=True))),
            "HF_MODEL": str(lay.transformers_vit(root / "dinov2-small", lay.dinov2_state(), dinov2=True).parent)}


# The method each of those files states itself (the others are named by --weights-format in their command)
STATED = {"$DINO_FULL": "dino", "$DINOV2": "dinov2", "$SIMCLR_V2": "simclr-v2", "$SOLO": "byol", "$HF_MODEL": "dinov2"}


def _check_weights(command: str, backbone: dict) -> None:
    """The method the command named, or the one its file states, is the record's; SimCLR's input unnormalised."""
    named = _option(command, "--weights-format")
    weights = command.split()[3]
    if named is None and weights not in STATED:
        return
    method, stated_by = (named, "--weights-format") if named else (STATED[weights], "file")
    assert (backbone["pretrain"]["method"], backbone["pretrain"]["stated_by"]) == (method, stated_by), backbone
    if method.startswith("simclr"):
        assert backbone["normalisation"] == {"name": "none", "mean": [0.0] * 3, "std": [1.0] * 3}


@pytest.mark.slow
@pytest.mark.parametrize("command", RUN, ids=[f"{i:02d} {_bare(c)}" for i, c in enumerate(RUN)])
def test_readme_command(command: str, workspace: tuple[Path, dict[str, str]]) -> None:
    work, env = workspace
    if "--engine detectron2" in command and importlib.util.find_spec("detectron2") is None:
        pytest.skip("detectron2 is not installed (README: an optional extra, built from its source)")
    if "moco eval densepose" in command and importlib.util.find_spec("densepose") is None:
        pytest.skip("DensePose is not installed (README: detectron2's project, built from its source)")
    done = subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    _check(_bare(command), work, env, output)


def _record(output: str, work: Path) -> dict:
    """The record a command printed as ``result: PATH``."""
    paths = re.findall(r"^result: (.+)$", output, re.M)
    assert paths, output[-2000:]
    record = json.loads((work / paths[-1].strip()).read_text())
    assert record["smoke"] is True  # README's switch reached the run
    return record


def _option(command: str, name: str) -> str | None:
    match = re.search(rf"{name} (\S+)", command)
    return match.group(1) if match else None


CHECKS = ("moco pretrain", "torchrun", "moco eval linear", "moco eval finetune", "moco eval knn", "moco eval transfer",
          "moco eval voc",
          "moco eval coco", "moco eval keypoints", "moco eval lvis", "moco eval cityscapes", "moco eval densepose",
          "moco eval semseg", "moco eval linseg", "moco eval retrieval", "moco eval davis",
          "moco eval snapshots", "moco convert", "moco report", "moco launch", "moco sweep", "moco trials",
          "moco bench",
          "MOCO_SMOKE=1 moco demo")


def _checked(command: str) -> bool:
    return _bare(command).startswith(CHECKS)


def _check(command: str, work: Path, env: dict[str, str], output: str) -> None:
    """What each command must have left behind, beyond exit code 0 and no traceback."""
    out = _option(command, "--output-dir")
    if command.startswith("moco launch"):
        run_dir = Path(out.replace("$CHECKPOINTS", env["CHECKPOINTS"])) if out.startswith("$") else work / out
        (submitted,) = json.loads((run_dir / "launch.json").read_text())["submissions"]
        if "--cluster local" in command:  # run here, to its end, as 2 processes
            start = json.loads((run_dir / "run.json").read_text())["starts"][-1]
            assert start["world_size"] == 2 and start["scheduler_job"] == submitted["job_id"] and start["smoke"]
        else:
            script = Path(submitted["script"]).read_text()
            assert submitted["job_id"] == "4242" and "#SBATCH --partition=learn" in script
            assert f"#SBATCH --gpus-per-node={_option(command, '--gpus-per-node')}" in script
    elif command.startswith("moco bench"):
        _check_bench(command, work, env, output)
    elif "--print-config" in command:
        assert "temperature: 0.2" in output and "mlp: true" in output and "epochs: 2" in output  # 200 -> 2
    elif command.startswith(("moco pretrain", "torchrun")):
        run_dir = work / (out or f"runs/{_option(command, '-c')}")
        ckpt = checkpoint.load(run_dir / checkpoint.LAST)
        epochs = ckpt["config"]["optim"]["epochs"]
        named = re.search(r"epochs=(\d+)|_(\d+)ep\b", command)  # MOCO_SMOKE: 1 epoch per 100, at least 1
        assert ckpt["epoch"] == epochs == (math.ceil(int(named.group(1) or named.group(2)) / 100) if named else 1)
        assert json.loads((run_dir / "run.json").read_text())["starts"][-1]["smoke"] is True
    elif command.startswith("moco eval snapshots"):  # each kept snapshot evaluated, marked with its epoch
        records = [json.loads(p.read_text()) for p in sorted((work / "runs/snapshots/linear_snapshots").glob(
            "*/result.json"))]
        assert [r["snapshot"]["epoch"] for r in records] == [1], records
    elif command.startswith("moco eval retrieval"):  # each dataset asked for, both query variants, Medium and Hard
        record = _record(output, work)
        names = (_option(command, "--datasets") or ("rscenes1,rscenes2" if "embedded" in command else
                                                     "roxford5k,rparis6k")).split(",")
        assert {key.rsplit("/", 1)[0] for key in record["metrics"]} == {
            f"{name}/{variant}/{protocol}" for name in names for variant in ("cropped", "full")
            for protocol in ("medium", "hard")}, record["metrics"]
        _check_weights(command, record["backbone"])
    elif command.startswith("moco eval finetune"):  # every epoch of the shortened schedule, on the data's layout
        record = _record(output, work)
        assert record["task"] == "finetune" and 0 <= record["metrics"]["top1"] <= 100
        assert len(record["history"]) == record["config"]["optim"]["epochs"] == 1
        assert record["dataset"]["layout"] == ("inat2018" if "$INAT" in command else
                                               LAYOUTS.get(_option(command, "--data") or "", "imagefolder"))
        if "--nproc" in command:  # two processes, BN synchronised across them
            result = work / re.findall(r"^result: (.+)$", output, re.M)[-1].strip()
            assert json.loads((result.parent / "run.json").read_text())["starts"][-1]["world_size"] == 2
    elif command.startswith("moco eval transfer"):  # one record a dataset present, each its metric and curve
        suite = json.loads((work / re.findall(r"^result: (.+)$", output, re.M)[-1].strip()).read_text())
        done = {name: path for name, path in suite["datasets"].items() if path.endswith("result.json")}
        wanted = (_option(command, "--datasets") or "").split(",") if "--datasets" in command else None
        expected = wanted or (["shapes", "textures", "variants", "scenes", "digits"] if "embedded" in command else
                              ["food101", "cifar10", "cifar100", "cub200", "sun397", "cars", "aircraft", "voc2007",
                               "dtd", "pets", "caltech101", "flowers"])
        assert sorted(done) == sorted(expected), suite
        for path in done.values():
            record = json.loads((work / path).read_text())
            assert record["smoke"] is True and len(record["history"]) == 45 and record["task"] == "transfer"
            assert record["transfer"]["solver"]["protocol"] == (
                "ssl-transfer" if "solver.protocol=ssl-transfer" in command else "converged")
        if "--shots" in command:
            assert all((work / path).with_name("fewshot.result.json").is_file() for path in done.values())
    elif command.startswith(("moco eval linear", "moco eval knn")):
        record = _record(output, work)
        assert all(0 <= value <= 100 for value in record["metrics"].values()) and record["metrics"]
        if "linear" in command:
            assert record["sanity_check"] == "passed"
        if "--shots" in command:  # few-shot: each k's linear and kNN, over the tries asked for
            shots, tries = _option(command, "--shots").split(","), int(_option(command, "--tries"))
            assert record["task"] == "fewshot" and [str(r["shots"]) for r in record["fewshot"]] == shots
            assert all(len(r[reader]["runs"]) == tries for r in record["fewshot"] for reader in ("linear", "knn"))
        elif "lincls_fewshot_32px" in command:  # the preset's k and draws
            assert record["task"] == "fewshot" and [r["shots"] for r in record["fewshot"]] == [1, 5, 10]
            assert all(len(r["linear"]["runs"]) == 5 for r in record["fewshot"])
        elif "--grid" in command or "lincls_grid" in command:
            _check_grid(command, record)
        _check_data(command, record["dataset"], env)
        _check_weights(command, record["backbone"])
    elif command.startswith("moco eval davis"):  # J&F of every object, on MOCO_SMOKE's small frames
        record = _record(output, work)
        assert record["task"] == "davis" and set(record["metrics"]) == {"J&F_mean", "J_mean", "F_mean"}
        tap = _option(command, "--tap") or ("patch" if "$DINO_FULL" in command else "layer4")
        assert record["config"]["short_side"] == 64 and record["config"]["tap"] == tap
        _check_weights(command, record["backbone"])
    elif command.startswith("moco eval linseg"):  # the fast mode: its strength chosen on held-out train images
        record = _record(output, work)
        assert record["task"] == "linseg" and record["protocol"] == "linseg-fast"
        assert all(0 <= record["metrics"][m] <= 100 for m in ("mIoU", "pixel_acc")), record["metrics"]
        assert record["selection"]["on"].startswith("held-out train images") and 0 <= record["knn"]["mIoU"] <= 100
        assert record["dataset"]["name"] == ("ADE20K" if "$DETECTRON2_DATASETS" in command else "embedded")
        _check_weights(command, record["backbone"])
    elif command.startswith("moco eval"):  # voc, coco, keypoints, lvis, cityscapes, densepose, semseg
        record = _record(output, work)
        assert record["metrics"] and record["config"]["solver"]["iterations"] == 2
        if command.startswith("moco eval keypoints"):  # AP^kp through COCOeval, on a keypoint file's set
            assert {"keypoints_AP", "keypoints_AP50", "keypoints_AP75"} <= record["metrics"].keys()
        if command.startswith("moco eval densepose"):  # AP^dp through DensePose's evaluator, and the box AP
            assert {"dp_gps_AP", "dp_gpsm_AP", "bbox_AP"} <= record["metrics"].keys()
        if "$MYDATA" in command or "$MYSEG" in command:  # one's own sets: named as such
            assert record["dataset"]["name"].startswith("custom: ")
        _check_weights(command, record["backbone"])
    elif command.startswith("moco convert") and "--to torchvision" in command:
        state = torch.load(work / command.split()[3], weights_only=True)
        missing, unexpected = torchvision.models.resnet18().load_state_dict(state, strict=False)
        assert sorted(missing) == ["fc.bias", "fc.weight"] and not unexpected
    elif command.startswith("moco convert") and command.split()[3].endswith(".safetensors"):
        from safetensors import safe_open

        with safe_open(str(work / command.split()[3]), framework="pt") as f:  # says what it was converted from
            assert f.metadata()["moco.method"] == "dino" and "cls_token" in f.keys()  # noqa: SIM118
    elif command.startswith("moco convert") and "--to timm" in command:  # a ViT's state_dict, less its head
        state = torch.load(work / command.split()[3], weights_only=True)
        assert {"cls_token", "pos_embed", "patch_embed.proj.weight"} <= state.keys()
        assert not any(k.startswith("head.") for k in state)
    elif command.startswith("moco convert"):  # detectron2's pickle: {"model": {res2...: ndarray}, ...}
        with open(work / command.split()[3], "rb") as f:
            assert "stem.conv1.weight" in pickle.load(f)["model"]
    elif command.startswith("moco sweep"):
        trials = int(_option(command, "--trials") or 1)
        for value in command.split()[3].split(","):  # each point pretrained and evaluated (kNN), per trial
            found = list((work / out).glob(f"**/*={value}/knn/result.json"))
            assert len(found) == trials, (value, found)
    elif command.startswith("moco trials"):  # one directory per seed
        assert sorted(p.name for p in (work / out).iterdir() if p.is_dir()) == ["seed_0", "seed_1", "seed_2"]
    elif command.startswith("moco report"):
        text = (work / (_option(command, "--out") or "report") / "report.md").read_text()
        assert "random init" in text and "VOC" in text
        if "report_methods" in command:  # the rows of other methods' weights, by the method their records state
            assert all(f"| {name} (" in text for name in ("DINO", "DINOv2", "SwAV", "Barlow Twins", "BYOL", "MAE"))
    elif command.startswith("MOCO_SMOKE=1 moco demo"):
        assert (work / "runs/demo/report/report.md").is_file()
    else:
        raise AssertionError(f"no check for {command}")


def _check_bench(command: str, work: Path, env: dict[str, str], output: str) -> None:
    """The matrix README shows is the one shipped; run here, every cell's record; on SLURM, one array of them all."""
    shipped = (ROOT / "configs" / "matrices" / "embedded.yaml").read_text().split("\n", 2)[2]  # less its comment
    assert f"```yaml\n{shipped}```" in (ROOT / "README.md").read_text()
    cells = [f"{c}/{e}" for c in ("moco_seed0", "random") for e in ("knn", "linear")]
    if "--slurm" in command:
        root = Path(_option(command, "--output-dir").replace("$CHECKPOINTS", env["CHECKPOINTS"]))
        states = [json.loads((root / cell / "bench.json").read_text()) for cell in cells]
        assert [s["job_id"] for s in states] == [f"4242_{i}" for i in range(4)] and "4242 (4 cells" in output
        (script,) = (root / "jobs").glob("*_submission.sh")
        text = script.read_text()  # submitit caps the parallelism (16) at the array's size
        assert "#SBATCH --array=0-3%4" in text and "#SBATCH --partition=learn" in text
    elif "--status" in command:
        assert "4 cells: 4 done," in output, output
    else:
        records = [json.loads((work / "runs/bench_embedded" / cell / "result.json").read_text()) for cell in cells]
        assert all(r["smoke"] is True for r in records) and [r["task"] for r in records[:2]] == ["knn", "linear"]


def _check_grid(command: str, record: dict) -> None:
    """A grid names its heads and the one chosen, and where; with $ROBUSTNESS, the chosen head on every set."""
    on_val = "select.split=val" in command
    assert record["protocol"] == ("linear-grid-selected-on-val" if on_val else "linear-grid")
    assert record["selection"]["chosen"] in [h["head"] for h in record["grid"]] and len(record["grid"]) == 13
    held = record["dataset"]["classes"]  # 10% of 4-6 images a class: one image of each class held out
    assert record["selection"]["split"]["images"] == (record["dataset"]["val_images"] if on_val else held)
    if "$ROBUSTNESS" in command:
        assert list(record["robustness"]) == ["imagenet-v2", "imagenet-a", "imagenet-r", "imagenet-sketch",
                                              "imagenet-real"]
        assert {"imagenet_v2_top1", "imagenet_real_top1"} <= record["metrics"].keys()


LAYOUTS = {"$CIFAR10": "imagefolder (test/ as val)", "$FLOWERS": "flowers-102", "$PETS": "oxford-iiit-pet",
           "$IMAGENET": "imagefolder"}


def _check_data(command: str, dataset: dict, env: dict[str, str]) -> None:
    """The subset a command names is the one its record names, on the whole val split; a folder is named by its
    layout and content digest."""
    data = _option(command, "--data")
    if data in LAYOUTS:
        assert dataset["layout"] == LAYOUTS[data] and len(dataset["content_sha256"]) == 64
    if "--subset" in command:  # one image of each class, named in SimCLR's format
        assert dataset["subset"]["kind"] == "file" and dataset["train_images"] == len(WNIDS)
        assert dataset["subset"]["sha256"] == hashlib.sha256(Path(env["SUBSET"]).read_bytes()).hexdigest()
    elif "--labels" in command:
        fraction = float(_option(command, "--labels").rstrip("%")) / 100
        assert dataset["subset"] == {"kind": "labels", "labels": _option(command, "--labels"), "seed": 0,
                                     "images": dataset["train_images"], "of": dataset["subset"]["of"]}
        assert dataset["train_images"] == dataset["classes"] * max(1, round(fraction * dataset["subset"]["of"]
                                                                           / dataset["classes"]))
    else:
        assert "subset" not in dataset


def test_a_collision_fails_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What this file relies on: two commands that write one run directory do not both succeed."""
    env = {**os.environ, "MOCO_SMOKE": "1", "MOCO_DATA_HOME": str(tmp_path / "data"), "OMP_NUM_THREADS": "1",
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    command = "moco eval linear random --arch resnet18 -c lincls_embedded"
    first = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr[-2000:]
    again = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert again.returncode == 2 and "already holds a finished linear evaluation" in again.stderr
