"""What ran: the length of an evaluation as its record states it, and the titles and notes that name it so.

A table says "the paper's protocol" or "the embedded schedule" only where the records' config trained for that
preset's length: a linear run shortened to 5 epochs is "5 of the paper's 100 epochs", a VOC run of 60 iterations
is not the embedded schedule of 200. The lengths below are those of the presets (lincls/linear.py's defaults,
configs/voc_*.yaml and coco_*.yaml); tests/reports/test_protocols.py checks them against the presets themselves,
since ``reports`` imports no other package of ours.
"""

from __future__ import annotations

import shlex
from typing import Any, Protocol


class Setting(Protocol):
    """What is read here of a :class:`reports.summary.Setting` (named by its fields: summary imports this module)."""

    task: str
    schedule: str | None
    length: int | None

PAPER_LINEAR_EPOCHS = 100  # arXiv 1911.05722 section 4.1, the official main_lincls.py
# (task, schedule label) -> the preset's solver.iterations
SCHEDULE_ITERATIONS = {("voc", "24k"): 24000, ("voc", "embedded"): 200, ("coco", "1x"): 90000,
                       ("coco", "2x"): 180000, ("coco", "embedded"): 200}
TASK_COMMANDS = {"linear": "moco eval linear random --arch {arch}", "knn": "moco eval knn random --arch {arch}",
                 "voc": "moco eval voc random --arch {arch}", "coco": "moco eval coco random --arch {arch}"}


def preset_schedule(s: Setting) -> str:
    """The preset a schedule label names: a run at another length is labelled "embedded, 60 it" (its config
    says so when --set changed solver.iterations alone), the preset "embedded"."""
    return (s.schedule or "").split(", ")[0]


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def eval_length(task: str, config: dict[str, Any]) -> int | None:
    """The epochs (linear: ``optim.epochs``) or iterations (detection: ``iterations``, else ``solver.iterations``)
    a record's evaluation trained; None for kNN, which trains nothing, and where the config does not say."""
    if task == "linear":
        optim = config.get("optim")
        return _count(optim.get("epochs")) if isinstance(optim, dict) else None
    if task in ("voc", "coco"):
        solver = config.get("solver")
        found = _count(config.get("iterations"))
        return found if found is not None or not isinstance(solver, dict) else _count(solver.get("iterations"))
    return None


def length_key(s: Setting) -> str | None:
    """The length in a setting's key: "100ep", "200it"."""
    if s.length is None:
        return None
    return f"{s.length}ep" if s.task == "linear" else f"{s.length}it"


def paper_length(s: Setting) -> int | None:
    """The length of the preset a setting's protocol and schedule name; None where none is known."""
    if s.task == "linear":
        return PAPER_LINEAR_EPOCHS
    return SCHEDULE_ITERATIONS.get((s.task, preset_schedule(s)))


def runs_preset_length(s: Setting) -> bool:
    """The records trained for their preset's length (or do not say, as records before the field did)."""
    return s.length is None or s.length == paper_length(s)


def _linear_length(s: Setting) -> str:
    if s.length is None:
        return "epochs not recorded"
    if s.length < PAPER_LINEAR_EPOCHS:
        return f"{s.length} of the paper's {PAPER_LINEAR_EPOCHS} epochs"
    return f"{s.length} epochs; the paper's: {PAPER_LINEAR_EPOCHS}"


def _schedule(s: Setting) -> str:
    """"24k schedule, 24000 iterations"; "60 iterations, not the embedded schedule's 200"."""
    preset = SCHEDULE_ITERATIONS.get((s.task, preset_schedule(s)))
    named = preset_schedule(s)
    if s.length is None:
        return f"{s.schedule} schedule label, iterations not recorded" if s.schedule else "iterations not recorded"
    if preset is None:
        return f"schedule {s.schedule}, {s.length} iterations" if s.schedule else f"{s.length} iterations"
    if s.length == preset:
        return f"{named} schedule, {s.length} iterations"
    return f"{s.length} iterations, not the {named} schedule's {preset}"


def setting_title(s: Setting) -> str:
    if s.task == "linear":
        if s.protocol == "linear":
            what = "the paper's protocol, 100 epochs" if s.length == PAPER_LINEAR_EPOCHS else _linear_length(s)
            head = f"Linear classification ({what})"
        elif s.protocol == "linear-cached":
            length = "" if s.length is None else f"; {s.length} epochs"
            head = f"Linear classification on cached features (NOT the paper's protocol{length})"
        else:
            head = f"Linear classification (protocol {s.protocol}, {_linear_length(s)})"
    elif s.task == "knn":
        head = "kNN classification (weighted kNN)" if s.protocol == "knn" else f"kNN classification ({s.protocol})"
    else:
        what = ", ".join(p for p in (s.model, _schedule(s), s.engine) if p)
        head = f"VOC detection ({what})" if s.task == "voc" else f"COCO detection and instance segmentation ({what})"
    return f"{head}: {s.dataset}"


def setting_subtitle(s: Setting) -> str:
    text = f"Evaluation data: {s.dataset_path}. Protocol: {s.protocol}."
    if s.protocol == "linear-cached":
        text += " fc trained on center-crop features extracted once; not comparable to the paper's numbers."
    return text


def chance_note(s: Setting) -> str | None:
    """Top-1 and top-5 of guessing, for classification over a known number of classes."""
    if s.task not in ("linear", "knn") or not s.classes:
        return None
    top1, top5 = 100 / s.classes, 100 * min(5, s.classes) / s.classes
    return f"Chance level: top-1 {top1:.3g}%, top-5 {top5:.3g}% ({s.classes} classes)."


def random_init_hint(s: Setting, archs: set[str]) -> str:
    """How to add the random-init row a table lacks: the command, with the rows' arch, data and length."""
    arch = next(iter(archs)) if len(archs) == 1 else "ARCH"
    command = TASK_COMMANDS[s.task].format(arch=arch) + f" --data {shlex.quote(s.dataset_path)}"
    if s.protocol == "linear-cached":
        command += " --cached-features"
    if s.length is not None:
        command += f" --set {'optim.epochs' if s.task == 'linear' else 'solver.iterations'}={s.length}"
    return ("No random-init row (the floor to read the other rows against). To add one, with the other options "
            f"the rows were evaluated with and its result.json below a directory this report reads: {command}")
