"""The table of commands (:data:`COMMANDS`: a row per command that runs in a run directory, with its config
classes, presets, options, trial seed and checkpoints, which ``moco launch``, ``moco trials``, the lists of presets
and the resume answer read), and the command lines this suite suggests to its user (a report's "to add the
random-init row, run: ...", an evaluation's "continue with: ..."), built from what the run they stand for was asked
(its record's ``invocation``), every field checked against its known set and every value shell-quoted: pasted into
a shell, a suggestion runs that command and nothing else, whatever a record holds (a record is a file anyone can
edit).

An evaluation's record keeps ``invocation`` (:func:`invocation`): the command, its preset (``-c``), its ``--set``
overrides, the options given and the mode (``MOCO_SMOKE``). :func:`command_line` writes it back as a command for
other weights (``random`` and an arch) or for the same run (``--resume``). Torch-free and importing none of our
modules: ``moco report`` (which imports no torch) uses it too. The known sets are restated here;
tests/moco_core/test_commands.py checks them against the config's and the CLI's own.
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SMOKE_PREFIX = "MOCO_SMOKE=1 "  # moco_core.smoke.command_prefix(True); reports import this module, not smoke
ARCHS = ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "wide_resnet50_2", "wide_resnet101_2",
         "vit_small", "vit_base", "vit_tiny_p4", "vit_nano_p4")  # moco_core.config.ARCHS + VIT_ARCHS
CIFAR_SUFFIX = "_cifar"  # a ResNet with the CIFAR stem, for random init: moco_core.model.weights.resnet_names
WEIGHTS_FORMATS = ("supervised", "moco", "mocov3", "dino", "dinov2", "swav", "deepcluster-v2", "sela-v2",
                   "barlowtwins", "byol", "simclr-v1", "simclr-v2", "mae")  # moco_core.model.weights.formats'
ENGINES = ("auto", "detectron2", "torchvision")
PRESETS = Path(__file__).resolve().parent.parent / "configs"  # as moco_core.config.PRESETS

_PATH = "path"  # any text, quoted
_COUNT = "count"  # a whole number >= 0
_NUMBER = "number"  # a finite number
_FLAG = "flag"  # a switch: true, or left out
_PATHS = "paths"  # a list of texts, the option repeated
_DEVICE = re.compile(r"auto|cpu|mps|cuda(:\d{1,4})?")
_LABELS = re.compile(r"\d{1,3}(\.\d{1,6})?%")
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}(\.[A-Za-z_][A-Za-z0-9_]{0,63}){0,7}")
_SHOTS = re.compile(r"\d{1,6}(,\d{1,6}){0,31}")  # k a class, e.g. 1,5,10
_TAP = re.compile(r"patch\d{0,2}|layer[1-4]")  # moco_core.model.taps' dense taps
_PRESET_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")

_COMMON = {"data": _PATH, "output_dir": _PATH, "device": _DEVICE, "workers": _COUNT, "arch": "arch",
           "weights_format": "weights_format"}
_CLASSIFICATION = {**_COMMON, "labels": _LABELS, "subset": _PATH, "seed": _COUNT}
_DETECTION = {**_COMMON, "engine": "engine", "train": _PATHS, "test": _PATH, "seed": _COUNT, "nproc": _COUNT}
_LAST = "checkpoint_last.pth.tar"  # a pretraining's newest checkpoint, and a torchvision fine-tuning's


@dataclass(frozen=True)
class Command:
    """A row of the table of commands: a ``moco`` command that runs in a run directory of its own (every row runs
    under ``moco launch``), with what the CLI's help, the presets, the suggested command lines, ``moco trials`` and
    the resume answer (:func:`moco_core.run.rundir.last_checkpoint`) read of it."""

    name: str  # as typed after moco: "pretrain", "eval linear"
    configs: tuple[str, ...]  # the names of the config classes it reads
    presets: tuple[str, ...]  # the prefixes of its presets in configs/; none: those no other command claims
    # The options a suggested command line carries over, by their names in the config of the CLI (kebab-case on
    # the command line): what changes what is measured, or where and on what it runs. None: nothing is suggested.
    options: dict[str, Any] | None
    seed: tuple[str, str] | None  # the option and value that give a trial its seed; None: no moco trials
    # The checkpoints its epochs write, by mode: the files its --resume continues from (patterns in the run
    # directory). A new start names the newest in the pointer beside them; these are what run directories written
    # before the pointer are read by. Empty: no --resume (it trains nothing, or skips what is done by itself).
    checkpoints: dict[str, str]
    done: str | None = "result.json"  # the file that says the run is finished; None: a new start finds out itself
    precheck: bool = False  # moco launch runs it with --print-config first: what it would refuse, before queueing
    # The --set key of the folder its frozen features are cached in, keyed by what made them (weights' digest,
    # dataset, view, tap): moco bench points all its cells at one, so a second evaluation of the same features
    # reads them. None: it keeps no feature cache a caller can name.
    feature_cache: str | None = None


_DETECTION_ROW = {"configs": ("TransferConfig",), "options": _DETECTION, "seed": ("--seed", "{}"),
                  "checkpoints": {"torchvision": _LAST}}  # detectron2 writes the pointer itself, no checkpoint of ours
_TABLE = (
    Command("pretrain", ("PretrainConfig",), (), None, ("--seed", "{}"), {"pretrain": _LAST}, done=None,
            precheck=True),
    Command("eval linear", ("LinearConfig", "GridConfig"), ("lincls_",),
            {**_CLASSIFICATION, "cached_features": _FLAG, "nproc": _COUNT, "grid": _FLAG, "robustness": _PATH,
             "shots": _SHOTS, "tries": _COUNT}, ("--seed", "{}"),
            {"linear": "linear_last.pth.tar", "grid": "grid_last.pth.tar"}),
    Command("eval finetune", ("FinetuneConfig",), ("finetune_",), {**_CLASSIFICATION, "nproc": _COUNT},
            ("--seed", "{}"), {"finetune": "finetune_last.pth.tar"}),
    Command("eval knn", ("KnnConfig",), ("knn_",),
            {**_CLASSIFICATION, "k": _COUNT, "temperature": _NUMBER, "crop_size": _COUNT, "resize": _COUNT,
             "batch_size": _COUNT}, ("--seed", "{}"), {}),
    Command("eval snapshots", ("LinearConfig",), ("lincls_",), None, None, {}, done=None),
    Command("eval transfer", ("TransferSuiteConfig",), ("transfer_",),
            {**_COMMON, "datasets": _PATH, "solver": re.compile(r"torch|sklearn"), "shots": _SHOTS, "tries": _COUNT,
             "seed": _COUNT}, ("--seed", "{}"), {"datasets": "*/result.json"}, done=None,
            feature_cache="features.cache_dir"),
    Command("eval voc", presets=("voc_",), precheck=True,
            **{**_DETECTION_ROW, "options": {**_DETECTION, "classes": _PATH}}),
    *(Command(f"eval {task}", presets=(f"{task}_",), precheck=task != "densepose", **_DETECTION_ROW)
      for task in ("coco", "keypoints", "lvis", "cityscapes", "densepose")),  # densepose was never prechecked
    Command("eval semseg", ("SemsegConfig",), ("semseg_",),
            {**_COMMON, "train": _PATH, "test": _PATH, "classes": _PATH, "ignore_index": _COUNT, "seed": _COUNT,
             "nproc": _COUNT}, ("--seed", "{}"), {"semseg": _LAST}),
    Command("eval linseg", ("LinsegConfig",), ("linseg_",),
            {name: kind for name, kind in _COMMON.items() if name != "workers"} | {"seed": _COUNT}, ("--seed", "{}"),
            {}),  # reads its images in its own process: no --workers
    Command("eval retrieval", ("RetrievalConfig",), ("retrieval_",),
            {**_COMMON, "datasets": _PATH, "image_size": _COUNT, "seed": _COUNT}, ("--seed", "{}"), {}),
    Command("eval davis", ("DavisConfig",), ("davis_",),
            {"data": _PATH, "output_dir": _PATH, "device": _DEVICE, "arch": "arch", "weights_format": "weights_format",
             "tap": _TAP, "seed": _COUNT}, ("--seed", "{}"), {}),
)
COMMANDS: dict[str, Command] = {row.name: row for row in _TABLE}  # the table, by name
OPTIONS = {row.name: row.options for row in _TABLE if row.options is not None}  # the commands suggested, read here


def checkpoint_name(command: str, mode: str | None = None) -> str:
    """The file ``command``'s epochs write in ``mode`` (a key of its row's ``checkpoints``; None: its only one)."""
    names = COMMANDS[command].checkpoints
    return names[mode] if mode is not None else next(iter(names.values()))


def preset_prefixes(key: str) -> tuple[str, ...]:
    """The prefixes of the presets of ``key``: a command (``eval linear``), its last word (``linear``, as the help
    texts ask) or the name of a config class (those of every command that reads it). Empty for pretraining and
    for any other key: their presets are those no command claims (:func:`claimed_prefixes`)."""
    rows = [row for row in _TABLE if key in (row.name, row.name.split()[-1], *row.configs)]
    return tuple(dict.fromkeys(prefix for row in rows for prefix in row.presets))


def claimed_prefixes() -> tuple[str, ...]:
    """Every command's preset prefixes: a preset that starts with none of them is a pretraining's."""
    return tuple(dict.fromkeys(prefix for row in _TABLE for prefix in row.presets))


# --set keys a suggestion leaves out: where the run wrote (the suggestion names its own --output-dir)
DROPPED_OVERRIDES = ("run.output_dir",)


class InvalidInvocation(ValueError):
    """A field of a recorded invocation that is not one of its known values: no command is suggested from it.
    ``field`` names it without its value (which may be anything a file can hold)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def invocation(command: str, *, preset: str | None, overrides: list[str] | tuple[str, ...],
               options: dict[str, Any], smoke: bool) -> dict[str, Any]:
    """What a record keeps of how its evaluation was asked for: ``moco <command>``, its preset, its ``--set``
    overrides in order, the options given (None and False left out: not given) and whether ``MOCO_SMOKE`` was on."""
    return {"command": command, "preset": preset, "overrides": list(overrides),
            "options": {name: list(value) if isinstance(value, tuple) else value for name, value in options.items()
                        if value is not None and value is not False and value != []},
            "smoke": smoke}


def known_presets() -> set[str]:
    """The names of the presets shipped in ``configs/``."""
    return {path.stem for path in PRESETS.glob("*.yaml")}


def command_line(recorded: Any, *, weights: str, arch: str | None = None, output_dir: str | None = None,
                 resume: bool = False) -> str:
    """The shell command that runs ``recorded`` (an invocation, as :func:`invocation` makes it, read back from a
    record) again on ``weights``: its preset, overrides and options; ``arch`` and ``output_dir`` replace the
    recorded ones where given; ``resume`` adds ``--resume``. Raises :class:`InvalidInvocation` naming the first
    field that is not a known value; every value is quoted."""
    if not isinstance(recorded, dict):
        raise InvalidInvocation("invocation", "the record's invocation is not a mapping")
    command = recorded.get("command")
    if command not in OPTIONS:
        raise InvalidInvocation("command", f"command {_shown(command)} is not one of {', '.join(OPTIONS)}")
    options = recorded.get("options", {})
    if not isinstance(options, dict):
        raise InvalidInvocation("options", "the record's invocation.options is not a mapping")
    options = {**options, **({"arch": arch} if arch is not None else {}),
               **({"output_dir": output_dir} if output_dir is not None else {})}
    if weights != "random":
        options.pop("arch", None)  # a file names its own
    else:
        options.pop("weights_format", None)  # random weights have no method
    words = ["moco", *command.split(), weights]
    if "arch" in options:
        words += _option(command, "arch", options.pop("arch"))
    preset = recorded.get("preset")
    if preset is not None:
        words += ["-c", _preset(preset)]
    last = options.pop("output_dir", None)
    for name, value in options.items():
        words += _option(command, name, value)
    overrides = recorded.get("overrides", [])
    if not isinstance(overrides, list):
        raise InvalidInvocation("overrides", "the record's invocation.overrides is not a list")
    for text in overrides:
        key = _override_key(text)
        if key not in DROPPED_OVERRIDES:
            words += ["--set", text]
    if last is not None:
        words += _option(command, "output_dir", last)
    if resume:
        words.append("--resume")
    smoke = recorded.get("smoke", False)
    if not isinstance(smoke, bool):
        raise InvalidInvocation("smoke", "the record's invocation.smoke is not true or false")
    return (SMOKE_PREFIX if smoke else "") + shlex.join(words)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _preset(preset: Any) -> str:
    """A shipped preset's name, or a YAML file's path."""
    if isinstance(preset, str) and _PRESET_NAME.fullmatch(preset) and preset in known_presets():
        return preset
    if isinstance(preset, str) and preset.endswith((".yaml", ".yml")) and "\x00" not in preset and len(preset) < 4096:
        return preset
    raise InvalidInvocation("preset", f"preset {_shown(preset)} is neither a preset of configs/ nor a YAML file")


def _override_key(text: Any) -> str:
    if not isinstance(text, str) or "=" not in text or len(text) > 4096:
        raise InvalidInvocation("overrides", f"override {_shown(text)} is not key=value")
    key = text.partition("=")[0].strip()
    if not _KEY.fullmatch(key):
        raise InvalidInvocation("overrides", f"override key {_shown(key)} is not a config key")
    return key


def _option(command: str, name: Any, value: Any) -> list[str]:
    """``--name value`` (or ``--name`` alone for a switch, repeated for a list), checked against its kind."""
    kind = OPTIONS[command].get(name) if isinstance(name, str) else None
    if kind is None:
        raise InvalidInvocation("options", f"option {_shown(name)} is not one of moco {command}'s")
    flag = "--" + name.replace("_", "-")
    if kind == _FLAG:
        if value is not True:
            raise InvalidInvocation(name, f"option {flag} is a switch, got {_shown(value)}")
        return [flag]
    if kind == _PATHS:
        if not isinstance(value, list) or not all(isinstance(v, str) and v and "\x00" not in v for v in value):
            raise InvalidInvocation(name, f"option {flag}: expected a list of names, got {_shown(value)}")
        return [word for v in value for word in (flag, v)]
    if kind == _COUNT:
        ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63
    elif kind == _NUMBER:
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    elif kind == "arch":
        ok = value in ARCHS or (isinstance(value, str) and value.endswith(CIFAR_SUFFIX)
                                and value.removesuffix(CIFAR_SUFFIX) in ARCHS and value.startswith(("resnet", "wide")))
    elif kind == "weights_format":
        ok = value in WEIGHTS_FORMATS
    elif kind == "engine":
        ok = value in ENGINES
    elif kind == _PATH:
        ok = isinstance(value, str) and bool(value) and "\x00" not in value and len(value) < 4096
    else:  # a pattern
        ok = isinstance(value, str) and kind.fullmatch(value) is not None
    if not ok:
        raise InvalidInvocation(name, f"option {flag}: {_shown(value)} is not a known value")
    return [flag, str(value)]
