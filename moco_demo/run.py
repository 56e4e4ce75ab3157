"""``moco demo``: the paper's whole protocol on the embedded data, on CPU, as one command.

Pretrain MoCo v2 (the ``embedded`` preset) and the supervised baseline (``supervised_embedded``) on the same
images; evaluate MoCo, supervised and random-init backbones with the linear protocol (``lincls_embedded``), VOC
detection (``voc_embedded``) and COCO instance segmentation (``coco_embedded``); write the report. Every step
writes into its own directory under the output directory, and a step whose result is already there, made with the
demo's own settings, is skipped, so an interrupted demo continues where it stopped. A result made otherwise (in
the other mode, smoke or real; with other settings; from other weights) is never taken for the step's: the demo
stops with one line saying what differs (:func:`moco_demo.steps.require_match`). ``demo.json`` keeps each step's
wall time. A stop signal stops the whole demo once the step under way has stopped
(:class:`moco_core.run.preemption.Stopper`).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moco_core import checkpoint, smoke
from moco_core.commands import invocation
from moco_core.errors import UserError
from moco_core.run.preemption import Stopper
from moco_core.run.progress import LINE
from moco_core.run.rundir import last_checkpoint, write_text_atomic
from moco_core.terminal import CLEAR_LINE, write_control
from moco_core.user_files import read_json

# Every evaluation the demo can run, by its embedded preset (``<task>_embedded``; linear: lincls_embedded). The
# default is the paper's headline protocol; the rest of Table 6 and fine-tuning are opt-in (--tasks), so the
# default demo's time stays.
TASKS = ("linear", "voc", "coco", "keypoints", "lvis", "cityscapes", "densepose", "semseg", "finetune")
DEFAULT_TASKS = ("linear", "voc", "coco")
# The three backbones every evaluation compares, as the paper's tables do: (directory, weights).
BACKBONES = ("moco", "supervised", "random")
RANDOM_ARCH = "resnet18"  # the embedded presets' backbone, for random init


@dataclass(frozen=True)
class StepTime:
    name: str
    seconds: float
    skipped: bool


class Demo:
    """Runs the steps in order; ``step`` skips one whose output exists and times the others."""

    def __init__(self, output_dir: Path, total: int, stopper: Stopper) -> None:
        self.output_dir = output_dir
        self.total = total
        self.stopper = stopper
        self.done = 0
        self.times: list[StepTime] = []
        path = output_dir / "demo.json"
        before = self._steps_before(path)
        self.before = {t["name"]: float(t["seconds"]) for t in before if isinstance(t, dict) and "name" in t
                       and isinstance(t.get("seconds"), int | float) and not isinstance(t["seconds"], bool)}

    def step(self, name: str, run: Callable[[], object], *, done: bool = False) -> None:
        self.done += 1
        prefix = f"demo [{self.done}/{self.total}] {name}"
        if done:
            print(f"{prefix}: done before", file=sys.stderr, flush=True)
            self.times.append(StepTime(name, self.before.get(name, 0.0), True))  # what it took then
            return
        print(f"{prefix} ...", file=sys.stderr, flush=True)
        self.stopper.doing = f"demo step {self.done} of {self.total} ({name})"
        start = time.perf_counter()
        run()
        self.stopper.check()  # a pretraining stopped by a signal returns, its checkpoint written: go no further
        took = time.perf_counter() - start
        if sys.stderr.isatty():  # a step's progress line (LINE) may still be there
            write_control(sys.stderr, CLEAR_LINE)
        print(f"{prefix}: {took:.0f} s", file=sys.stderr, flush=True)
        self.times.append(StepTime(name, took, False))
        self._save_times()

    @staticmethod
    def _steps_before(path: Path) -> list:
        """The steps an earlier demo in this folder timed (demo.json); none where it is missing or malformed."""
        try:
            saved = read_json(path, what="demo.json") if path.exists() else {}
        except UserError:
            return []
        steps = saved.get("steps", []) if isinstance(saved, dict) else []
        return steps if isinstance(steps, list) else []

    def _save_times(self) -> None:
        times = {"steps": [t.__dict__ for t in self.times], "total_s": sum(t.seconds for t in self.times)}
        write_text_atomic(self.output_dir / "demo.json", json.dumps(times, indent=2) + "\n")


def run_demo(output_dir: Path, *, device: str = "auto", engine: str = "auto", tasks: tuple[str, ...] = DEFAULT_TASKS,
             show_progress: bool = False, overrides: dict[str, list[str]] | None = None, trials: int = 1,
             seed: int = 0) -> Path:
    """Run every step (skipping finished ones) and write the report; returns the report directory.

    ``overrides``: ``--set`` style changes per preset role ("moco", "supervised", or a task of :data:`TASKS`).
    ``trials`` > 1: the whole protocol once per seed (``seed``, ``seed + 1``, ...), each into ``seed_<s>/``;
    every row of the report is then the mean ± std of its trials (``moco report`` groups pretrainings of one
    recipe with different seeds). A stop signal raises :class:`moco_core.run.preemption.Stopped`.
    """
    overrides = overrides or {}
    from reports.render import write_report
    from reports.report import FORMATS, build_report

    unknown = set(tasks) - set(TASKS)
    if unknown:
        raise ValueError(f"unknown demo tasks {sorted(unknown)}; expected some of {list(TASKS)}")
    if trials < 1:
        raise ValueError(f"trials: must be >= 1, got {trials}")
    if "densepose" in tasks:  # detectron2's DensePose project only: refused before the pretrainings, not after
        from transfer.detection.run import require_densepose

        require_densepose(engine)
    output_dir.mkdir(parents=True, exist_ok=True)
    roots = [output_dir] if trials == 1 else [output_dir / f"seed_{seed + t}" for t in range(trials)]
    shown = True if show_progress else LINE  # without --progress, a terminal still sees each step's line move
    with Stopper() as stopper:
        demo = Demo(output_dir, total=trials * (2 + len(tasks) * len(BACKBONES)) + 1, stopper=stopper)
        for t, root in enumerate(roots):
            seeded = {role: [*overrides.get(role, []), f"run.seed={seed + t}"]
                      for role in ("moco", "supervised", *TASKS)}
            _protocol(demo, root, device, engine, tasks, shown, seeded, f"seed {seed + t}: " if trials > 1 else "")
        report_dir = output_dir / "report"
        demo.step("report", lambda: write_report(build_report([str(root / task) for root in roots for task in tasks]),
                                                 report_dir, FORMATS))
    return report_dir


def _protocol(demo: Demo, root: Path, device: str, engine: str, tasks: tuple[str, ...], show_progress: bool | str,
              overrides: dict[str, list[str]], label: str) -> None:
    """One trial's steps into ``root``: the two pretrainings, then every task on every backbone."""
    from moco_core.config import load_config, replace, to_dict, validated
    from moco_core.pretrain_config import PretrainConfig
    from moco_core.run.train import pretrain
    from moco_demo import steps

    runs = {name: root / "pretrain" / name for name in ("moco", "supervised")}
    for name, preset in (("moco", "embedded"), ("supervised", "supervised_embedded")):
        cfg = validated(replace(load_config(PretrainConfig, preset, overrides.get(name, [])),
                                run={"output_dir": str(runs[name]), "device": device}))
        started = last_checkpoint(runs[name], "pretrain") is not None
        if started:  # the demo's own run, in this mode, with these settings: else it is not continued
            steps.require_pretraining_match(runs[name], to_dict(cfg))
        resume = runs[name] if started else None

        def train(cfg: PretrainConfig = cfg, resume: Path | None = resume) -> None:
            pretrain(cfg, resume=resume, show_progress=show_progress)

        demo.step(f"{label}pretrain {name} ({preset})", train, done=checkpoint.finished(runs[name], cfg.optim.epochs))
    weights = {"moco": str(runs["moco"] / checkpoint.LAST), "supervised": str(runs["supervised"] / checkpoint.LAST),
               "random": "random"}
    for task in tasks:
        for name in BACKBONES:
            out = root / task / name
            config, call = _evaluation(task, weights[name], out, device, engine, show_progress,
                                       overrides.get(task, []))
            done = (out / "result.json").is_file()
            if done:  # a record of this step's settings, mode and weights: else the demo stops, saying why
                steps.require_match(out / "result.json", config, weights[name])
            demo.step(f"{label}{task} {name}", call, done=done)


def _evaluation(task: str, weights: str, out: Path, device: str, engine: str, show_progress: bool | str,
                changes: list[str]) -> tuple[dict[str, Any], Callable[[], Path]]:
    """The config (as its record keeps it) and the call that evaluates ``weights`` on ``task`` with the embedded
    preset into ``out``."""
    from moco_core.config import replace, to_dict

    overrides = [*changes, f"run.output_dir={out}", f"run.device={device}"]
    preset = "lincls_embedded" if task == "linear" else f"{task}_embedded"
    options: dict[str, Any] = {"arch": RANDOM_ARCH if weights == "random" else None, "device": device,
                               "engine": engine if task not in ("linear", "finetune", "semseg") else None}
    extra = {"invocation": invocation(f"eval {task}", preset=preset, overrides=changes, options=options,
                                      smoke=smoke.enabled())}
    if task == "linear":
        from classification.linear import linear_eval, load_linear_config

        cfg = load_linear_config(preset, overrides)
        cfg = replace(cfg, arch=RANDOM_ARCH) if weights == "random" else cfg
        part_way = last_checkpoint(out, "eval linear") is not None  # an evaluation an interrupted demo left part-way
        return to_dict(cfg), lambda: linear_eval(cfg, weights, show_progress=show_progress, resume=part_way,
                                                 extra=extra)
    if task == "finetune":
        from classification.finetune import finetune, load_finetune_config

        fcfg = load_finetune_config(preset, overrides)
        fcfg = replace(fcfg, arch=RANDOM_ARCH) if weights == "random" else fcfg
        part_way = last_checkpoint(out, "eval finetune") is not None
        return to_dict(fcfg), lambda: finetune(fcfg, weights, show_progress=show_progress, resume=part_way,
                                               extra=extra)
    if task == "semseg":
        from transfer.segmentation.config import load_semseg_config
        from transfer.segmentation.run import evaluate as evaluate_semseg

        scfg = load_semseg_config(preset, overrides)
        resume = last_checkpoint(out, "eval semseg") is not None
        return to_dict(scfg), lambda: evaluate_semseg(scfg, weights, show_progress=show_progress, resume=resume,
                                                      extra=extra)
    from transfer.detection.config import load_transfer_config
    from transfer.detection.run import evaluate

    tcfg = load_transfer_config(task, preset, overrides, {"engine": engine})
    resume = last_checkpoint(out, f"eval {task}") is not None  # a fine-tuning an interrupted demo left part-way
    return to_dict(tcfg), lambda: evaluate(tcfg, weights, show_progress=show_progress, resume=resume, extra=extra)
