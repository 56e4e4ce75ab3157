"""Issue 46, class 2: optimizer state that does not fit the model on --resume, through the CLI (in this process:
tests/test_cli_user_files.py's ``moco``), for pretraining (our checkpoints, the official v1/v2 and v3 layouts) and
every evaluation that resumes (linear, fine-tuning, semantic segmentation, detection): one line naming the group or
the parameter that does not fit, before any step (the checkpoint and metrics.jsonl untouched). The old code loaded
such state and failed at the first step in a traceback, or in torch's own code.

Also: a ``semseg`` resume is bit-identical to an uninterrupted run on CPU (its checkpoint now holds the RNG state).
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.test_cli_user_files import clean, moco

PRETRAIN = ["--set", "model.arch=resnet18", "--set", "optim.batch_size=8", "--set", "model.bn_groups=2",
            "--set", "augment.crop_size=32", "--set", "data.workers=0", "--set", "run.knn_every=0", "--quiet",
            "--device", "cpu"]
QUEUE = {"v2": ["--set", "model.queue_size=16"], "v3": ["--set", "optim.warmup_epochs=0"]}


def _first_with_state(optimizer: dict[str, Any]) -> int:
    return next(i for i, entry in optimizer["state"].items() if any(torch.is_tensor(v) and v.dim() for v in
                                                                     entry.values()))


def hostile(optimizer: dict[str, Any], kind: str) -> Any:
    """``optimizer`` (a state_dict) made into state that does not fit it, or left as it is ("fits")."""
    state = copy.deepcopy(optimizer)
    group = state["param_groups"][0]
    if kind == "fits":
        return state
    if kind == "not a dict":
        return [1, 2, 3]
    if kind == "no groups":
        return {"state": {}, "param_groups": "sgd"}
    if kind == "adamw groups":  # what torch.optim.AdamW writes for the same parameters
        kept = {"params": group["params"], "lr": group["lr"], "weight_decay": group["weight_decay"]}
        state["param_groups"][0] = {**kept, "betas": (0.9, 0.999), "eps": 1e-8, "amsgrad": False}
        state["state"] = {i: {"step": torch.tensor(3.0), "exp_avg": torch.zeros(1), "exp_avg_sq": torch.zeros(1)}
                          for i in group["params"][:2]}
        return state
    if kind == "sgd groups":  # SGD's keys where LARS reads trust_coefficient
        state["param_groups"][0] = {"params": group["params"], "lr": 0.1, "momentum": 0.9, "dampening": 0,
                                    "weight_decay": 1e-4, "nesterov": False}
        return state
    if kind == "buffer shape":
        index = _first_with_state(state)
        name = next(k for k, v in state["state"][index].items() if torch.is_tensor(v) and v.dim())
        state["state"][index][name] = torch.zeros(3)
        return state
    if kind == "buffer dtype":
        index = _first_with_state(state)
        name = next(k for k, v in state["state"][index].items() if torch.is_tensor(v) and v.dim())
        state["state"][index][name] = state["state"][index][name].long()
        return state
    if kind == "one parameter less":
        group["params"] = group["params"][:-1]
        return state
    if kind == "two groups":
        state["param_groups"].append({**group, "params": []})
        return state
    raise ValueError(kind)


SAID = {  # what the one line names, by kind
    "not a dict": "the optimizer state is a sequence of numbers, not a dict",
    "no groups": "has no list of parameter groups",
    "adamw groups": "parameter group 0 lacks dampening, momentum, which this run's SGD reads",
    "sgd groups": "parameter group 0 lacks trust_coefficient, which this run's LARS reads",
    "buffer shape": "is [3], the parameter [",
    "buffer dtype": "holds torch.int64 values, not floating point",
    "one parameter less": "parameter group 0 holds",
    "two groups": "it has 2 parameter groups",
}


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory: pytest.TempPathFactory, shapes_root: Path) -> dict[str, Path]:
    """A MoCo v2 (SGD) and a MoCo v3 (LARS) pretraining of one epoch each, on the shapes."""
    runs = {}
    for name, preset in (("v2", "embedded"), ("v3", "mocov3_embedded")):
        out = tmp_path_factory.mktemp(f"pretrained_{name}") / "run"
        result = moco("pretrain", "-c", preset, "--data", str(shapes_root), "--output-dir", str(out), *PRETRAIN,
                      *QUEUE[name], "--set", "optim.epochs=1")
        assert clean(result) == "" and result.returncode == 0
        runs[name] = out
    return runs


def _layout(saved: dict[str, Any], layout: str) -> dict[str, Any]:
    """Our checkpoint as written, or in the official layout: main_moco.py's four fields (v1/v2 and v3 alike)."""
    if layout == "ours":
        return saved
    return {key: saved[key] for key in ("epoch", "arch", "state_dict", "optimizer")}


PRETRAIN_CASES = [(method, layout, kind) for method, kinds in (
    ("v2", ("fits", "not a dict", "no groups", "adamw groups", "buffer shape", "buffer dtype", "one parameter less",
            "two groups")),
    ("v3", ("fits", "sgd groups", "buffer shape")))
    for layout in ("ours", "official") for kind in kinds]


@pytest.mark.parametrize(("method", "layout", "kind"), PRETRAIN_CASES,
                         ids=[f"{m}-{layout}-{k.replace(' ', '_')}" for m, layout, k in PRETRAIN_CASES])
def test_pretraining_resume_checks_the_optimizer_state_before_any_step(method: str, layout: str, kind: str,
                                                                       pretrained: dict[str, Path],
                                                                       shapes_root: Path, tmp_path: Path) -> None:
    source = pretrained[method] / "checkpoint_last.pth.tar"
    saved = torch.load(source, weights_only=True)
    saved = _layout({**saved, "optimizer": hostile(saved["optimizer"], kind)}, layout)
    ckpt = tmp_path / "given.pth.tar"
    torch.save(saved, ckpt)
    before = ckpt.read_bytes()
    out = tmp_path / "continued"
    preset = "embedded" if method == "v2" else "mocov3_embedded"
    result = moco("pretrain", "-c", preset, "--data", str(shapes_root), "--resume-from", str(ckpt),
                  "--output-dir", str(out), *PRETRAIN, *QUEUE[method], "--set", "optim.epochs=2")
    line = clean(result)
    if kind == "fits":
        assert result.returncode == 0 and torch.load(out / "checkpoint_last.pth.tar", weights_only=True)[
            "epoch"] == 2
        return
    assert f"{ckpt}: its optimizer state does not fit this run's: " in line and SAID[kind] in line, line
    if kind in ("buffer shape", "buffer dtype"):
        assert "the state of encoder." in line, line  # the parameter, by name
    assert ckpt.read_bytes() == before and not (out / "checkpoint_last.pth.tar").exists()
    assert not (out / "metrics.jsonl").exists() or not (out / "metrics.jsonl").read_text().strip()


def test_the_check_takes_every_fitting_state_torch_writes() -> None:
    """The neighbours: the state each optimizer writes after steps fits itself (SGD with and without momentum,
    AdamW, LARS, two groups as detection's SGD has them), and an empty state (before the first step) too."""
    from moco_core.model.optimizers import LARS
    from moco_core.optimizer_state import optimizer_problem

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Flatten(),
                                torch.nn.LazyLinear(2))
    model(torch.randn(2, 3, 8, 8))
    makers = [lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), lambda p: torch.optim.SGD(p, lr=0.1),
              lambda p: torch.optim.AdamW(p, lr=1e-3), lambda p: LARS(p, lr=0.1),
              lambda p: torch.optim.SGD([{"params": list(p)[:2]}, {"params": list(p)[2:], "weight_decay": 0}],
                                        lr=0.1, momentum=0.9)]
    for make in makers:
        optimizer = make(model.parameters())
        assert optimizer_problem(optimizer, optimizer.state_dict()) is None
        model(torch.randn(2, 3, 8, 8)).sum().backward()
        optimizer.step()
        assert optimizer_problem(optimizer, optimizer.state_dict()) is None
        other = make(model.parameters())
        assert optimizer_problem(other, copy.deepcopy(optimizer.state_dict())) is None


@pytest.fixture(scope="module")
def evaluations(tmp_path_factory: pytest.TempPathFactory, shapes_root: Path,
                pretrained: dict[str, Path]) -> dict[str, tuple[list[str], Path, str]]:
    """A finished short run of each evaluation that resumes: (its command, its run directory, its checkpoint)."""
    from moco_core.data.shapes import CLASSES
    from tests.transfer.segmentation.layouts import voc_segmentation_layout
    from transfer.embedded import ensure_voc

    base = tmp_path_factory.mktemp("evaluations")
    weights = str(pretrained["v2"] / "checkpoint_last.pth.tar")
    seg = voc_segmentation_layout(base / "seg")
    voc = ensure_voc(base / "voc", trainval=8, test=4, size=64)
    small = ["--set", "data.workers=0", "--quiet"]
    commands = {
        "linear": (["eval", "linear", weights, "-c", "lincls_embedded", "--data", str(shapes_root), *small,
                    "--set", "optim.batch_size=8", "--set", "data.crop_size=32", "--set", "data.resize=36",
                    "--set", "optim.milestones=[]"], "optim.epochs", "linear_last.pth.tar"),
        "finetune": (["eval", "finetune", weights, "-c", "finetune_embedded", "--data", str(shapes_root), *small,
                      "--set", "optim.batch_size=8", "--set", "data.crop_size=32", "--set", "data.resize=36",
                      "--set", "optim.milestones=[]"], "optim.epochs", "finetune_last.pth.tar"),
        "semseg": (["eval", "semseg", weights, "--data", str(seg), *small, "--set", "solver.batch_size=2",
                    "--set", "solver.steps=[1]", "--set", "input.crop_size=32", "--set", "head.channels=8"],
                   "solver.iterations", "checkpoint_last.pth.tar"),
        "voc": (["eval", "voc", weights, "-c", "voc_embedded", "--engine", "torchvision", "--data", str(voc),
                 *small, "--set", "solver.batch_size=2", "--set", "solver.steps=[1]", "--set",
                 "solver.warmup_iters=1", "--set", "solver.precise_bn_iters=0", "--set", "input.min_size_train=[48]",
                 "--set", "input.min_size_test=48", "--set", "input.max_size=64", "--set",
                 "detector.rpn_post_nms_topk_train=32", "--set", "detector.rpn_post_nms_topk_test=8", "--set",
                 f"data.classes={list(CLASSES)}"],
                "solver.iterations", "checkpoint_last.pth.tar"),
    }
    done = {}
    for name, (command, length, last) in commands.items():
        out = base / f"{name}_run"
        result = moco(*command, "--output-dir", str(out), "--set", f"{length}=2")
        assert clean(result) == "" and result.returncode == 0, name
        done[name] = ([*command, "--output-dir", str(out), "--resume", "--set", f"{length}=3"], out, last)
    return done


EVAL_CASES = [(name, kind) for name in ("linear", "finetune", "semseg", "voc")
              for kind in ("not a dict", "adamw groups", "buffer shape", "one parameter less")]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "kind"), EVAL_CASES, ids=[f"{n}-{k.replace(' ', '_')}" for n, k in EVAL_CASES])
def test_every_evaluation_resume_checks_the_optimizer_state_before_any_step(
        name: str, kind: str, evaluations: dict[str, tuple[list[str], Path, str]], tmp_path: Path) -> None:
    command, finished, last = evaluations[name]
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    saved = torch.load(out / last, weights_only=True)
    saved["optimizer"] = hostile(saved["optimizer"], kind)
    torch.save(saved, out / last)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and not p.name.startswith(".")}
    command = [str(out) if arg == str(finished) else arg for arg in command]
    line = clean(moco(*command))
    assert f"{out / last}: its optimizer state does not fit this run's: " in line and SAID[kind] in line, line
    after = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and not p.name.startswith(".")}
    assert {k: v for k, v in after.items() if k != "run.json"} == {k: v for k, v in before.items()
                                                                    if k != "run.json"}


@pytest.mark.parametrize("workers", [0])
def test_a_semseg_resume_is_bit_identical_to_an_uninterrupted_run(workers: int, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Killed after the checkpoint of iteration 2 of 4, then --resume: every weight and BN statistic of the final
    checkpoint equals the uninterrupted run's, bit for bit (CPU, data.workers 0). The old checkpoint held no RNG
    state: the resumed run drew other scales, crops and flips."""
    from moco_core import checkpoint
    from tests.transfer.segmentation.layouts import voc_segmentation_layout
    from transfer.segmentation.config import load_semseg_config
    from transfer.segmentation.run import evaluate

    root = voc_segmentation_layout(tmp_path / "datasets")

    def config(out: str) -> Any:
        return load_semseg_config(None, ["solver.batch_size=2", "solver.iterations=4", "solver.steps=[3]",
                                         "input.crop_size=32", "head.channels=8", f"data.workers={workers}",
                                         "run.log_every=1", "run.checkpoint_every=2", "head.arch=resnet18"],
                                  {"data": {"path": str(root)}, "run": {"output_dir": str(tmp_path / out)}})

    evaluate(config("straight"), "random", show_progress=False)
    real_save = checkpoint.save_atomic

    class Killed(Exception):
        pass

    def save_then_die(obj: dict, path: Path) -> None:
        real_save(obj, path)
        if obj.get("iteration") == 2:
            raise Killed

    monkeypatch.setattr(checkpoint, "save_atomic", save_then_die)
    with pytest.raises(Killed):
        evaluate(config("killed"), "random", show_progress=False)
    monkeypatch.setattr(checkpoint, "save_atomic", real_save)
    evaluate(config("killed"), "random", show_progress=False, resume=True)
    straight, resumed = (torch.load(tmp_path / name / "checkpoint_last.pth.tar", weights_only=True)
                         for name in ("straight", "killed"))
    assert straight["iteration"] == resumed["iteration"] == 4
    assert straight["model"].keys() == resumed["model"].keys()
    different = [k for k in straight["model"] if not torch.equal(straight["model"][k], resumed["model"][k])]
    assert different == []
