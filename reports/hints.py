"""The command a table suggests for the row it lacks: random init, the floor to read the other rows against.

Built from how a row of the table was evaluated (its record's ``invocation``: preset, overrides, options, mode),
with random weights of the row's arch and a run directory beside the row's, so that its record lands in the same
table with the same settings. Records written before they kept their invocation get the command the table's
setting implies (task, protocol, data, length, the preset its schedule names). Every field is checked against its
known values and every value quoted (:func:`moco_core.commands.command_line`): a record is a file anyone can edit,
and a suggestion pasted into a shell must run that command and nothing else.
"""

from __future__ import annotations

import re
from pathlib import PurePath
from typing import Any, Protocol

from moco_core.commands import ARCHS, InvalidInvocation, command_line
from reports.protocols import (
    EPOCH_TASKS,
    FINETUNE_PRESETS,
    GRID_ON_VAL,
    GRID_PROTOCOL,
    V3_PROTOCOL,
    finetune_data,
    preset_schedule,
    v3_preset,
)


class Row(Protocol):
    """What is read here of a :class:`reports.summary.Entry` (summary imports tables, which imports this)."""

    pretraining: Any
    invocation: dict[str, Any] | None
    files: list[str]
    setting: Any  # the row's own: a semi-supervised table's rows differ in their labels


def implied_invocation(s: Any, arch: str, shots: str | None = None) -> dict[str, Any]:
    """How a row of setting ``s`` was most likely evaluated, for records that do not say: the preset its protocol,
    data or schedule names, its data, its length where recorded, and its mode; a few-shot row (``moco eval linear
    --shots``) the k its table shows (``shots``: "1,5")."""
    preset = None
    grid = s.protocol in (GRID_PROTOCOL, GRID_ON_VAL)
    if grid:  # the grid's own presets (lincls_grid without one): a linear preset would not run the grid's recipe
        preset = "lincls_grid_embedded" if s.dataset_path == "embedded" else None
    elif s.protocol == V3_PROTOCOL:
        preset = v3_preset(arch, s.dataset_path)
    elif s.task == "finetune" and finetune_data(s):
        preset = FINETUNE_PRESETS[finetune_data(s)][0]
    elif s.dataset_path == "embedded" and s.task in ("linear", "knn"):
        preset = "lincls_embedded" if s.task == "linear" else "knn_embedded"
    elif preset_schedule(s) == "embedded":
        preset = f"{s.task}_embedded"
    fewshot = s.task == "fewshot"
    # chosen on val, the reported set: the grid's and few-shot's protocols name it (classification/frozen)
    overrides = ["select.split=val"] if s.protocol == GRID_ON_VAL or (fewshot and s.protocol != "fewshot") else []
    if s.length is not None:
        overrides.append(f"{'optim.epochs' if s.task in EPOCH_TASKS else 'solver.iterations'}={s.length}")
    options: dict[str, Any] = {"data": s.dataset_path}
    if s.protocol == "linear-cached":
        options["cached_features"] = True
    if grid:
        options["grid"] = True
    if fewshot and shots:
        options["shots"] = shots
    if s.labels and re.fullmatch(r"\d{1,3}(\.\d+)?%", s.labels):  # a fraction drawn with the default seed
        options["labels"] = s.labels
    return {"command": "eval linear" if fewshot else f"eval {s.task}", "preset": preset, "overrides": overrides,
            "options": options, "smoke": s.mark == "smoke"}


def beside(record_path: str, arch: str) -> str:
    """A run directory for the random-init row near the record at ``record_path``, below the folder the report
    read it from: beside its run directory (``result.json``'s folder), or inside the folder of a record named
    ``*.result.json`` (records kept side by side)."""
    path = PurePath(record_path)
    return str((path.parent.parent if path.name == "result.json" else path.parent) / f"random_{arch}")


def random_init_command(s: Any, arch: str, rows: list[Row]) -> str:
    """The command for the random-init row of ``arch`` in setting ``s``, from the first row of that arch that
    says how it was evaluated (else from the setting); a note saying which field is unknown where one is."""
    of_arch = [r for r in rows if r.pretraining.arch == arch]
    asked = next((r for r in of_arch if r.invocation is not None), None)
    recorded = asked.invocation if asked is not None else None
    source = asked or of_arch[0]
    try:
        if arch not in ARCHS:
            raise InvalidInvocation("arch", "not a known arch")
        implied = (implied_invocation(getattr(source, "setting", None) or s, arch, _shots(of_arch))
                   if recorded is None else None)
        return command_line(recorded if recorded is not None else implied, weights="random",
                            arch=arch, output_dir=beside(source.files[0], arch) if source.files else None)
    except InvalidInvocation as err:  # said by field name only: the value may be anything a file holds
        return f"(none for these rows: their record's {err.field} is not a value this suite knows)"


def _shots(rows: list[Row]) -> str | None:
    """The k of a few-shot table's rows ("1,5"), from their metrics' names (``<k>shot_linear_top1``)."""
    ks = {int(name.split("shot_")[0]) for r in rows for name in getattr(r, "metrics", {})
          if "shot_" in name and name.split("shot_")[0].isdigit()}
    return ",".join(str(k) for k in sorted(ks)) or None


def random_init_hint(s: Any, rows: list[Row]) -> str:
    """How to add the random-init row a table lacks: one command per arch of its rows (and per subset of the
    labels, in a semi-supervised table)."""
    def labels(row: Row) -> str:
        return getattr(getattr(row, "setting", None), "labels", None) or ""

    keys = sorted({(r.pretraining.arch, labels(r)) for r in rows if r.pretraining.kind != "random"})
    commands = "; ".join(random_init_command(s, arch, [r for r in rows if labels(r) == subset])
                         for arch, subset in keys)
    return ("No random-init row (the floor to read the other rows against). To add one, with the settings the "
            f"rows were evaluated with, beside them: {commands}")
