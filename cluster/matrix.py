"""The matrix file of ``moco bench MATRIX.yaml``: checkpoints x evaluations, and the cells it makes.

A matrix names its checkpoints (a label, the weights' path or ``random`` with an arch, their ``weights_format``
where the file does not state it) and its evaluations (a label, any ``moco eval`` command of the table of commands
:data:`moco_core.commands.COMMANDS` that the suite can write as a command line, with its preset, options and
``--set`` overrides); optionally where the cells go (``output_dir``) and how SLURM runs them (``slurm:``). Every
pair is a :class:`Cell`: its own run directory, ``OUTPUT_DIR/<checkpoint>/<evaluation>``, and its command line,
written by the suite's one command-line writer (:func:`moco_core.commands.command_line`), so a command added to
the table is a command a matrix can name, with no change here.

Reading is strict, as for configs: an unknown key, a value of the wrong type, an unknown command or option, a
missing weights file is one line naming the matrix file and the field (``m.yaml: evaluations[1].command: ...``).
Paths in the file are read as on the command line, from the working directory.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster.job import Command
from moco_core.commands import COMMANDS, OPTIONS, InvalidInvocation, command_line, invocation
from moco_core.config import CONFIG_LIMIT, PRESETS, ConfigError, did_you_mean, from_dict, load_yaml, preset_path
from moco_core.errors import show
from moco_core.user_files import read_text, regular_file

LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # a folder name on every filesystem, and a column's
MATRICES = PRESETS / "matrices"  # the matrices shipped: moco bench NAME
FEATURES = "features"  # OUTPUT_DIR/features: the frozen features every cell of the matrix shares
JOBS = "jobs"  # OUTPUT_DIR/jobs: the SLURM array's scripts and logs (moco bench --slurm)
RANDOM = "random"  # the weights of random init, as every evaluation command names them
# options a matrix sets itself, per cell: where it writes, what it evaluates, where it runs
OWNED = {"output_dir": "each cell's run directory is OUTPUT_DIR/<checkpoint>/<evaluation>",
         "arch": "a checkpoint names its arch (random) or its file states it",
         "weights_format": "a checkpoint names its weights_format",
         "device": "moco bench gives each cell its device (--devices)"}


@dataclass(frozen=True)
class Checkpoint:
    """Weights to evaluate: a file or run directory, or ``random`` with ``arch``."""

    label: str = ""
    path: str = ""
    arch: str | None = None  # random init only: a file names its own
    weights_format: str | None = None  # the method, where the file does not state it (moco eval --weights-format)


@dataclass(frozen=True)
class Evaluation:
    """A ``moco eval`` command as typed, less its weights and its run directory."""

    label: str = ""
    command: str = ""  # a row of the table of commands: "eval knn", "eval linear", "eval transfer", ...
    preset: str | None = None  # -c: a preset of configs/ or a YAML file
    options: dict[str, Any] | None = None  # the command's options by their config names: {k: 20, labels: 10%}
    set: tuple[str, ...] = ()  # --set key=value, in order


@dataclass(frozen=True)
class Slurm:
    """What each cell's array task asks SLURM for (``moco bench --slurm``); options of moco bench override these."""

    partition: str | None = None
    account: str | None = None
    constraint: str | None = None
    time: int = 240  # minutes a start; the task checkpoints and requeues itself before it
    gpus_per_task: int = 1
    cpus_per_task: int | None = None
    mem_gb: int | None = None
    array_parallelism: int = 32  # cells running at once (submitit's slurm_array_parallelism)
    signal_delay: int = 120  # seconds before the limit when the task is told to stop
    max_timeouts: int = 20  # requeues after hitting the time limit


@dataclass(frozen=True)
class Matrix:
    path: Path  # the file, as named
    output_dir: Path | None
    checkpoints: tuple[Checkpoint, ...]
    evaluations: tuple[Evaluation, ...]
    slurm: Slurm


@dataclass(frozen=True)
class Cell:
    """One checkpoint under one evaluation, in its own run directory."""

    checkpoint: Checkpoint
    evaluation: Evaluation
    run_dir: Path

    @property
    def name(self) -> str:
        return f"{self.checkpoint.label}/{self.evaluation.label}"

    def line(self, device: str | None = None) -> str:
        """The shell command of this cell (on ``device`` where given), as the suite writes every suggestion."""
        evaluation, checkpoint = self.evaluation, self.checkpoint
        options = {**(evaluation.options or {}), **({"device": device} if device else {}),
                   **({"weights_format": checkpoint.weights_format} if checkpoint.weights_format else {})}
        recorded = invocation(evaluation.command, preset=evaluation.preset, overrides=self.overrides(),
                              options=options, smoke=False)
        return command_line(recorded, weights=checkpoint.path, arch=checkpoint.arch, output_dir=str(self.run_dir))

    def overrides(self) -> tuple[str, ...]:
        """The evaluation's ``--set`` overrides, and where its command caches frozen features (the table's
        ``feature_cache``): one folder for the whole matrix, ``OUTPUT_DIR/features``, unless the evaluation names
        its own. A second evaluation of the same features (the same weights, dataset, view and tap: the cache's
        key) reads them instead of extracting them again."""
        key = COMMANDS[self.evaluation.command].feature_cache
        if key is None or any(text.partition("=")[0].strip() == key for text in self.evaluation.set):
            return self.evaluation.set
        return (*self.evaluation.set, f"{key}={(self.run_dir.parent.parent / FEATURES).absolute()}")

    def command(self, device: str | None = None) -> Command:
        """The cell as ``moco launch`` runs a command: what resumes it and what says it is done."""
        return Command.parse(shlex.split(self.line(device))[1:], runner="moco bench")


def commands() -> list[str]:
    """The commands a matrix can name: every evaluation the suite writes command lines for."""
    return [name for name in OPTIONS if name.startswith("eval ")]


def read_matrix(name_or_path: str) -> Matrix:
    """The matrix in a file (or shipped), every field checked (:class:`ConfigError` naming the file and the field)."""
    path = matrix_path(name_or_path)
    data = load_yaml(read_text(path, limit=CONFIG_LIMIT, what="matrix file", error=ConfigError), str(path))
    try:
        return _parse(path, data)
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None


def matrix_path(name_or_path: str) -> Path:
    """A matrix's YAML file, or the name of one shipped in ``configs/matrices/`` (``embedded``)."""
    shipped = MATRICES / f"{name_or_path}.yaml"
    if Path(name_or_path).suffix in (".yaml", ".yml") or not shipped.is_file():
        if Path(name_or_path).suffix not in (".yaml", ".yml"):
            known = sorted(p.stem for p in MATRICES.glob("*.yaml"))
            raise ConfigError(f"{name_or_path}: neither a YAML file (.yaml, .yml) nor a matrix of configs/matrices/ "
                              f"(shipped: {', '.join(known)})")
        return regular_file(name_or_path, what="matrix file", error=ConfigError)
    return shipped


def _parse(path: Path, data: Any) -> Matrix:
    if not isinstance(data, dict):
        raise ConfigError(f"expected a mapping of checkpoints, evaluations, output_dir, slurm; got {show(data)}")
    known = ("checkpoints", "evaluations", "output_dir", "slurm")
    for key in data:
        if key not in known:
            raise ConfigError(f"{show(key)}: unknown key{did_you_mean(key, known)} (known: {', '.join(known)})")
    checkpoints = tuple(_checkpoint(item, f"checkpoints[{i}].") for i, item in enumerate(_list(data, "checkpoints")))
    evaluations = tuple(_evaluation(item, f"evaluations[{i}].") for i, item in enumerate(_list(data, "evaluations")))
    for key, items in (("checkpoints", checkpoints), ("evaluations", evaluations)):
        labels = [item.label for item in items]
        twice = next((label for label in labels if labels.count(label) > 1), None)
        if twice is not None:
            raise ConfigError(f"{key}: label {twice!r} names two entries; each needs its own (its cells' folder)")
    output_dir = data.get("output_dir")
    if output_dir is not None and (not isinstance(output_dir, str) or not output_dir.strip()):
        raise ConfigError(f"output_dir: expected a folder's path, got {show(output_dir)}")
    slurm = from_dict(Slurm, data.get("slurm") or {}, "slurm.")
    matrix = Matrix(path, Path(output_dir) if output_dir else None, checkpoints, evaluations, slurm)
    for cell in cells(matrix, Path("runs")):  # every command line is written once here: what it refuses, now
        try:
            cell.line()
        except InvalidInvocation as err:
            i = checkpoints.index(cell.checkpoint) if err.field in ("arch", "weights_format") else \
                evaluations.index(cell.evaluation)
            where = f"checkpoints[{i}].{err.field}" if err.field in ("arch", "weights_format") else \
                f"evaluations[{i}].{err.field}"
            raise ConfigError(f"{where}: {err}") from None
    return matrix


def _list(data: dict[str, Any], key: str) -> list[Any]:
    items = data.get(key)
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{key}: expected a list of at least one entry, got {show(items)}")
    return items


def _label(value: str, where: str) -> None:
    if not LABEL.fullmatch(value):
        raise ConfigError(f"{where}label: expected letters, digits, '_', '.' or '-' (at most 64, not starting with "
                          f"'.', '_' or '-'), got {show(value)}")


def _checkpoint(item: Any, where: str) -> Checkpoint:
    checkpoint = from_dict(Checkpoint, item, where)
    _label(checkpoint.label, where)
    if checkpoint.label in (FEATURES, JOBS):
        raise ConfigError(f"{where}label: {checkpoint.label!r} is a folder of the matrix's own (OUTPUT_DIR/"
                          f"{checkpoint.label}); name the checkpoint otherwise")
    if not checkpoint.path:
        raise ConfigError(f"{where}path: missing: the weights' file or run directory, or {RANDOM} with an arch")
    if checkpoint.path == RANDOM:
        if checkpoint.arch is None:
            raise ConfigError(f"{where}arch: random weights need an arch (e.g. resnet50)")
        if checkpoint.weights_format is not None:
            raise ConfigError(f"{where}weights_format: random weights have no method; leave it out")
    elif checkpoint.arch is not None:
        raise ConfigError(f"{where}arch: only with path: {RANDOM}; a weights file names its own")
    elif not Path(checkpoint.path).expanduser().exists():
        raise ConfigError(f"{where}path: no such file or directory: {show(checkpoint.path)}")
    return checkpoint


def _evaluation(item: Any, where: str) -> Evaluation:
    options = item.get("options") if isinstance(item, dict) else None
    if options is not None and not isinstance(options, dict):
        raise ConfigError(f"{where}options: expected a mapping of the command's options, got {show(options)}")
    # the options' names and values are checked against the command's when its command lines are written
    rest = {k: v for k, v in item.items() if k != "options"} if isinstance(item, dict) else item
    evaluation = dataclasses.replace(from_dict(Evaluation, rest, where), options=options)
    _label(evaluation.label, where)
    allowed = commands()
    if evaluation.command not in allowed:
        raise ConfigError(f"{where}command: expected one of {', '.join(allowed)}; got {show(evaluation.command)}"
                          f"{did_you_mean(evaluation.command, allowed)}")
    if evaluation.preset is not None:
        preset_path(evaluation.preset, evaluation.command)
    for name in evaluation.options or {}:
        if name in OWNED:
            raise ConfigError(f"{where}options.{name}: not in a matrix: {OWNED[name]}")
    return evaluation


def cells_of(matrix: Matrix, output_dir: str | None) -> list[Cell]:
    """The cells under ``output_dir`` (``moco bench --output-dir``), else under the matrix's own ``output_dir``."""
    if output_dir is None and matrix.output_dir is None:
        raise ConfigError(f"{matrix.path}: output_dir: missing: name where the cells go, in the file or with "
                          f"--output-dir")
    return cells(matrix, Path(output_dir).expanduser() if output_dir is not None else matrix.output_dir)


def cells(matrix: Matrix, output_dir: Path) -> list[Cell]:
    """Every checkpoint under every evaluation, checkpoint by checkpoint, in the file's order."""
    return [Cell(checkpoint, evaluation, output_dir / checkpoint.label / evaluation.label)
            for checkpoint in matrix.checkpoints for evaluation in matrix.evaluations]
