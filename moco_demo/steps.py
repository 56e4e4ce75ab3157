"""When a demo step counts as done: what its directory holds was made by this demo, as it runs now.

A step's directory may hold what another run left: a smoke demo's results where a real demo runs (or the reverse),
a result of other settings (a demo run with other overrides), an evaluation of weights that were pretrained again
since. Taken for the step's own, it would stand in the report for what never ran; run over, it would meet the
evaluation's refusal to overwrite a finished run. So a step is done only when its record (a pretraining: its
checkpoint) matches the demo's own settings, mode and weights, and the demo stops with one line naming what
differs otherwise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from moco_core import checkpoint, smoke
from moco_core.errors import UserError, show
from moco_core.model.backbone import file_sha256
from moco_core.user_files import read_json

# Where and how a step ran, not what it measured: a demo continued on another device or with other workers
# continues, and a record's run directory is where the demo put it.
IGNORED = ("run.output_dir", "run.device", "data.workers")


class StepMismatch(UserError):
    """A demo step's directory holds what this demo did not make."""


def _fix(where: Path) -> str:
    return f"remove {where} to run that step again, or run the demo into another --output-dir"


def differences(recorded: dict[str, Any], expected: dict[str, Any], prefix: str = "") -> list[str]:
    """The dotted keys of ``expected`` whose value ``recorded`` holds otherwise, each "key: recorded, expected"
    (keys ``recorded`` lacks are not compared: records of an older version; :data:`IGNORED` neither; an engine of
    "auto" matches the one it resolved to)."""
    out = []
    for key, want in expected.items():
        dotted = f"{prefix}{key}"
        if dotted in IGNORED or key not in recorded or (dotted == "engine" and want == "auto"):
            continue
        have = recorded[key]
        if isinstance(want, dict) and isinstance(have, dict):
            out += differences(have, want, f"{dotted}.")
        elif have != want:
            out.append(f"{dotted} {show(have, 40)} where this demo has {show(want, 40)}")
    return out


def require_pretraining_match(run_dir: Path, config: dict[str, Any]) -> None:
    """The demo's pretraining in ``run_dir`` may be continued or counted as done: made in this mode and with
    ``config`` (the demo's, as the checkpoint keeps it). A one-line :class:`StepMismatch` otherwise."""
    path = run_dir / checkpoint.LAST
    recorded = smoke.recorded(run_dir)
    ckpt = checkpoint.load(path)
    if recorded is None:
        recorded = smoke.of_checkpoint(ckpt, path)
    smoke.refuse_other_mode(recorded, str(run_dir), fix=_fix(run_dir))
    stored = ckpt.get("config")
    differ = differences(stored, config) if isinstance(stored, dict) else []  # none kept: nothing to compare
    if differ:
        raise StepMismatch(f"{path}: made with {_listed(differ)}; {_fix(run_dir)}")


def require_match(record_path: Path, config: dict[str, Any], weights: str) -> None:
    """The evaluation record at ``record_path`` is the step's: made in this mode, with ``config`` (the step's, as
    its record keeps it) and from ``weights`` (the file's SHA-256; random init by its arch). A one-line
    :class:`StepMismatch` otherwise."""
    where = record_path.parent
    record = read_json(record_path, what="a demo step's result.json", error=StepMismatch)
    if not isinstance(record, dict):
        raise StepMismatch(f"{record_path}: not a result record; {_fix(where)}")
    smoke.refuse_other_mode(record.get("smoke") is True, str(record_path), fix=_fix(where))
    stored = record.get("config")
    differ = differences(stored, config) if isinstance(stored, dict) else []  # none kept: nothing to compare
    if differ:
        raise StepMismatch(f"{record_path}: made with {_listed(differ)}; {_fix(where)}")
    backbone = record.get("backbone") if isinstance(record.get("backbone"), dict) else {}
    recorded = backbone.get("sha256")  # every record of ours names its file's; one that does not, nothing to compare
    if weights != "random" and isinstance(recorded, str) and recorded != _file_sha256(Path(weights)):
        raise StepMismatch(f"{record_path}: evaluated other weights than {weights} holds now (it was pretrained "
                           f"again since); {_fix(where)}")


def _listed(differ: list[str]) -> str:
    return differ[0] + (f" (and {len(differ) - 1} more)" if len(differ) > 1 else "")


def _file_sha256(path: Path) -> str | None:
    return file_sha256(path) if path.is_file() else None
