"""Loading every command's config: frozen dataclasses (the pretraining's are :mod:`moco_core.pretrain_config`,
each evaluation's in its package) built from their defaults, a YAML preset, ``--set`` overrides and flags, and the
checks they share.

Precedence (lowest first): dataclass defaults < YAML file (``_base_`` chains allowed) < ``--set a.b=value``
overrides < explicit CLI flags. Unknown keys and wrong types are rejected with a one-line error naming the key. A
config class says itself what the loader does beyond that, as class attributes: ``SCHEDULES`` (what is laid out
along the run's length and moves with it), ``FOLLOWERS`` (paths that move with ``data.path``), ``check()`` (its
validator) and ``unused_keys()`` (what a printed config leaves out).
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import logging
import math
import os
import re
import types
import typing
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Literal

import yaml

from moco_core import smoke
from moco_core.commands import claimed_prefixes, preset_prefixes
from moco_core.errors import UserError, show
from moco_core.user_files import CONFIG_LIMIT, int_problem, read_text, regular_file

logger = logging.getLogger("moco.config")

ARCHS = (
    "resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "wide_resnet50_2", "wide_resnet101_2",
)
# Vision Transformers (timm, the optional extra "vit"; moco_core/model/vit.py): MoCo v3 only.
VIT_ARCHS = ("vit_small", "vit_base", "vit_tiny_p4", "vit_nano_p4")


class ConfigError(UserError, ValueError):
    """A configuration value is unknown, of the wrong type, or impossible. The message names the key.

    The message is always one line: line breaks that came in with a key or value are shown as ``\\n``.
    """

def cpu_workers(configured: int) -> int:
    """A config's default of DataLoader workers, ``configured``, at most the CPUs this process may run on (as torch
    counts them: its affinity, else the machine's): 8 workers on 2 cores only queue, and torch warns once a loader.
    A value set in a preset, ``--set`` or ``--workers`` is taken as given."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return min(configured, cores)


# ---------------------------------------------------------------------------------------------------------
# Loading, overriding, validating


def to_dict(cfg: Any) -> dict[str, Any]:
    """Plain nested dict of built-in types (tuples become lists), for YAML and checkpoints."""

    def plain(value: Any) -> Any:
        if isinstance(value, (tuple, list)):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    return plain(dataclasses.asdict(cfg))


_EXPONENT_NUMBER = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+")


def _coerce(value: Any, annotation: Any, key: str) -> Any:
    """Check ``value`` against a field's type and convert lists to tuples; raise ConfigError naming ``key``."""
    origin = typing.get_origin(annotation)
    if origin is Literal:
        choices = typing.get_args(annotation)
        if value not in choices:
            hint = " (YAML reads bare yes/no/on/off as booleans)" if isinstance(value, bool) else ""
            close = did_you_mean(value, [str(c) for c in choices]) if isinstance(value, str) else ""
            raise ConfigError(f"{key}: expected one of {list(choices)}, got {show(value)}{hint}{close}")
        return value
    if origin in (typing.Union, types.UnionType):
        errors = []
        for option in typing.get_args(annotation):
            try:
                return _coerce(value, option, key)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError(errors[0])
    if annotation is type(None):
        if value is not None:
            raise ConfigError(f"{key}: expected null, got {show(value)}")
        return None
    if origin is tuple:
        args = typing.get_args(annotation)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {show(value)}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(v, args[0], f"{key}[{i}]") for i, v in enumerate(value))
        if len(value) != len(args):
            raise ConfigError(f"{key}: expected a list of {len(args)} values, got {len(value)}")
        return tuple(_coerce(v, a, f"{key}[{i}]") for i, (v, a) in enumerate(zip(value, args, strict=True)))
    if annotation is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, got {show(value)}")
        return value
    if annotation is int:  # a count, a seed or a size: records hold it, so it fits what the report reads
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {show(value)}")
        if int_problem(value) is not None:
            raise ConfigError(f"{key}: {int_problem(value)}")
        return value
    if annotation is float:
        if isinstance(value, str) and _EXPONENT_NUMBER.fullmatch(value):
            return float(value)  # YAML 1.1 (PyYAML) reads 1e-4 and 3E2 as strings: it wants a dot in the mantissa
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {show(value)}")
        return float(value)
    if annotation is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {show(value)}")
        if not value.strip():  # an empty path is the current directory: a run would write over what is there
            raise ConfigError(f"{key}: must not be empty")
        if "\x00" in value:
            raise ConfigError(f"{key}: must not contain a NUL character, got {show(value)}")
        return value
    raise TypeError(f"unsupported config annotation {annotation!r} for {key}")


def from_dict(cls: type, data: dict[str, Any], prefix: str = "") -> Any:
    """Build dataclass ``cls`` from a nested dict; missing keys keep their defaults, unknown keys fail."""
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'}: expected a mapping, got {show(data)}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for name in data:
        if not isinstance(name, str):
            raise ConfigError(f"{prefix}{show(name)}: a key must be a name, got {type(name).__name__}")
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"{prefix}{unknown[0]}: unknown key{did_you_mean(unknown[0], names)} (known: "
                          f"{', '.join(sorted(names))})")
    values = {}
    for name, value in data.items():
        annotation = hints[name]
        if dataclasses.is_dataclass(annotation):
            values[name] = from_dict(annotation, value, f"{prefix}{name}.")
        else:
            values[name] = _coerce(value, annotation, f"{prefix}{name}")
    return cls(**values)


def _merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


# Our configs/ package sits beside moco_core/ in a source tree and in site-packages alike. Found by path, not by
# importing "configs": a detectron2 source checkout on sys.path has a configs/ folder that would shadow ours.
PRESETS = Path(__file__).resolve().parent.parent / "configs"


def preset_path(name_or_path: str, command: str | None = None) -> Path:
    """A YAML path, or the name of a preset shipped in ``configs/`` (``moco_v2_200ep``, ``embedded``...).

    A name that is both a preset and a folder here means the preset; a folder otherwise is refused as one."""
    path = Path(name_or_path)
    as_path = path.suffix in (".yaml", ".yml") or name_or_path.endswith(("/", os.sep))
    if path.is_file():
        return path
    shipped = PRESETS / f"{name_or_path}.yaml"
    if not as_path and shipped.is_file():
        return shipped
    if path.is_dir():
        raise ConfigError(f"config: {path} is a directory; give a YAML file or a preset name")
    if as_path or path.exists():  # missing, or a FIFO or device: said as such, never opened
        regular_file(path, what="config file", error=ConfigError)
    known = presets_for(command) if command else sorted(p.stem for p in PRESETS.glob("*.yaml"))
    raise ConfigError(f"unknown config preset {show(name_or_path)}{did_you_mean(name_or_path, known)} (presets: "
                      f"{', '.join(known)})")


MAX_YAML_VALUES = 100_000  # a config has a few hundred; YAML anchors and aliases can make a billion from 400 bytes


def _expanded_size(node: yaml.Node, sizes: dict[int, float]) -> float:
    """How many values ``node`` stands for once every alias is expanded (infinite for a node that holds itself).

    Aliases are references to a node already composed, so this is computed over distinct nodes, once each."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    sizes[key] = math.inf  # while counting its children: a node reached again from inside itself loops
    children: list[yaml.Node] = []
    if isinstance(node, yaml.SequenceNode):
        children = list(node.value)
    elif isinstance(node, yaml.MappingNode):
        children = [part for pair in node.value for part in pair]
    total = 1.0
    for child in children:
        total += _expanded_size(child, sizes)
        if total > MAX_YAML_VALUES:
            break
    sizes[key] = total
    return total


def load_yaml(text: str, where: str) -> Any:
    """``yaml.safe_load(text)``, refusing (one line naming ``where``) invalid YAML and documents whose aliases
    expand to more than MAX_YAML_VALUES values or nest too deeply: the work of loading is bounded, not only the
    error message (a 424-byte file of nested anchors once cost 2.1 GB before its error)."""
    loader = None
    try:
        loader = yaml.SafeLoader(text)
        node = loader.get_single_node()
        if node is None:
            return None
        size = _expanded_size(node, {})
        if size > MAX_YAML_VALUES:
            raise ConfigError(f"{where}: " + ("holds itself through a YAML alias (&anchor / *alias)" if size == math.inf
                              else f"expands to more than {MAX_YAML_VALUES:,} values through YAML aliases (&anchor / "
                              f"*alias); a config needs a few hundred"))
        return loader.construct_document(node)
    except yaml.YAMLError as err:
        raise ConfigError(f"{where}: not valid YAML ({str(err).splitlines()[0]})") from None
    except RecursionError:
        raise ConfigError(f"{where}: nested too deeply to be a config") from None
    except ConfigError:  # the alias checks' own line above (a ConfigError is a ValueError too)
        raise
    except ValueError as err:  # a number past Python's 4,300 digits, an impossible date: PyYAML's int() or date()
        raise ConfigError(f"{where}: a value YAML cannot convert ({str(err).split(':')[0]})") from None
    finally:
        if loader is not None:
            loader.dispose()


def read_yaml(path: Path, _seen: tuple[Path, ...] = (), cls: type | None = None) -> dict[str, Any]:
    """Read a YAML config, resolving ``_base_: other.yaml`` (relative to the file) recursively. With ``cls``, a
    file that changes its base's length (``optim.epochs``) has the base's schedule scaled, as ``--set`` does."""
    path = path.resolve()
    if path in _seen:
        raise ConfigError(f"{path}: _base_ chain loops")
    data = load_yaml(read_text(path, limit=CONFIG_LIMIT, what="config file", error=ConfigError), str(path)) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    base = data.pop("_base_", None)
    if base is not None:
        inherited = read_yaml(path.parent / base, (*_seen, path), cls)
        data = _merge(inherited, data) if cls is None else _scale_schedules(cls, inherited, data,
                                                                            _merge(inherited, data))
    return data


def parse_override(text: str) -> dict[str, Any]:
    """``a.b=value`` -> ``{'a': {'b': value}}``, the value parsed as YAML (``0.2``, ``true``, ``[1, 2]``)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {show(text)}: expected key=value, e.g. model.temperature=0.2")
    value = load_yaml(raw, f"override {show(text)}")
    nested: dict[str, Any] = value
    for part in reversed(key.strip().split(".")):
        nested = {part: nested}
    return nested


# The presets of configs/ each command takes, by the file's name: lincls_* for eval linear, knn_* for eval knn,
# voc_*, coco_*, keypoints_*, lvis_* and cityscapes_* for the detection tasks, semseg_* for semantic segmentation,
# the rest (embedded, moco_*, supervised_*) for pretraining.
def presets_for(command: str) -> list[str]:
    """The names of the presets in ``configs/`` for ``command`` (pretrain, linear, knn, voc, coco; or a config
    class's name), sorted: by the table of commands' prefixes (:func:`moco_core.commands.preset_prefixes`)."""
    names = sorted(p.stem for p in PRESETS.glob("*.yaml"))
    prefixes = preset_prefixes(command)
    if prefixes:
        return [n for n in names if n.startswith(prefixes)]
    return [n for n in names if not n.startswith(claimed_prefixes())]


def did_you_mean(word: object, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices`` to a mistyped ``word``, or ``""``."""
    close = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


# A run's length and what is laid out along it: (length key, keys scaled with it, when it applies, a label that
# names the schedule). The scaled keys keep their fraction of the run; values that fall at or past its end go.
Schedule = tuple[str, tuple[str, ...], Callable[[dict[str, Any]], bool] | None, str | None]


def step_schedule(config: dict[str, Any]) -> bool:
    """A a config class's ``SCHEDULES`` condition: the merged config's ``optim.schedule`` is the step one (or not set,
    the
    default's). Milestones move with the run's length only there: a cosine schedule has none."""
    return _get(config, "optim.schedule") in (None, "step")


def _get(data: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


def _set(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        data = data.setdefault(part, {})
    data[last] = value


def _default(cls: type, dotted: str) -> Any:
    value: Any = cls()
    for part in dotted.split("."):
        value = getattr(value, part)
    return list(value) if isinstance(value, tuple) else value


def _scaled(value: Any, old: int, new: int) -> Any:
    """``value`` (an int, or a list of them) moved from a run of ``old`` to one of ``new``: the same fraction."""
    if isinstance(value, list):  # milestones: after the first epoch at the earliest; none past the run's end
        moved = [max(1, round(v * new / old)) if isinstance(v, int) and not isinstance(v, bool) else v for v in value]
        return [m for m in moved if not isinstance(m, int) or m < new]
    if isinstance(value, bool) or not isinstance(value, int):
        return value
    return min(max(round(value * new / old), 0), max(new - 1, 0))


def _scale_schedules(cls: type, preset: dict[str, Any], explicit: dict[str, Any],
                     merged: dict[str, Any]) -> dict[str, Any]:
    for length_key, keys, applies, label in getattr(cls, "SCHEDULES", ()):
        new = _get(explicit, length_key)
        old = _get(preset, length_key)
        old = _default(cls, length_key) if old is None else old
        if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (new, old)) or new == old:
            continue
        if applies is not None and not applies(merged):
            continue
        for key in keys:
            if _get(explicit, key) is not None:
                continue  # chosen with the length: as given (the validator refuses what falls outside the run)
            before = _get(preset, key)
            before = _default(cls, key) if before is None else before
            after = _scaled(before, old, new)
            if after != before:
                _set(merged, key, after)
                logger.warning("note: %s scaled with %s to %s (was %s of %s); set %s to choose it", key, length_key,
                               after, before, old, key)
        if label and _get(explicit, label) is None:
            name = _get(preset, label) or _default(cls, label)
            _set(merged, label, f"{name}, {new} it")  # not the preset's schedule: not reported as it
    return merged


def load_config(
    cls: type, config: str | None = None, overrides: tuple[str, ...] | list[str] = (),
    base: dict[str, Any] | None = None, flags: dict[str, Any] | None = None, *, check: bool = True,
) -> Any:
    """Defaults < ``base`` (a stored config, when resuming) < YAML file < overrides < ``flags`` (explicit CLI
    flags as a nested dict; None means "not given"). The result is validated once, after everything is merged:
    a value that only a flag supplies (``--data``) must not be reported missing (``check=False``: not at all).

    A schedule follows its length: when overrides or flags change ``optim.epochs`` (``solver.iterations``) and
    leave the milestones (steps, warm-up) alone, these are scaled with it and a note says so (a config class's
    ``SCHEDULES``).
    """
    data, explicit = _layers(cls, config, overrides, base, flags)
    merged = _merge(data, explicit)
    for key in _followers_moved(cls, data, explicit):  # --print-config says so (data_sources)
        _set(merged, key, _get(explicit, "data.path"))
    if smoke.enabled():
        explicit, merged = _smoke(cls, explicit, merged)
    merged = _scale_schedules(cls, data, explicit, merged)
    built = from_dict(cls, merged)
    return validated(built) if check else built


def _layers(cls: type, config: str | None, overrides: tuple[str, ...] | list[str], base: dict[str, Any] | None,
            flags: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the stored config and preset merged, what the command gave: --set overrides and explicit flags merged)."""
    data: dict[str, Any] = dict(base or {})
    if config:
        data = _merge(data, read_yaml(preset_path(config, cls.__name__), cls=cls))
    explicit: dict[str, Any] = {}
    for text in overrides:
        explicit = _merge(explicit, parse_override(text))
    return data, _merge(explicit, given(flags or {}))


# Data paths that follow data.path (by config class name): where a preset reads them from the training data's
# root (the embedded presets' kNN monitor: data.knn_path embedded, as data.path), --data or --set data.path moves
# them too, so that a monitor never measures other data than the run trains on, unless the command sets them apart.


def _followers_moved(cls: type, data: dict[str, Any], explicit: dict[str, Any]) -> list[str]:
    """The keys of a config class's ``FOLLOWERS`` the command moves with its data.path: those it did not set itself
    whose value
    before (preset, stored config, default) was data.path's before."""
    new = _get(explicit, "data.path")
    if new is None:
        return []
    old = _get(data, "data.path")
    moved = []
    for key in getattr(cls, "FOLLOWERS", ()):
        before = _get(data, key)
        if _get(explicit, key) is None and before == old and new != old:
            moved.append(key)
    return moved


def data_sources(cls: type, config: str | None = None, overrides: tuple[str, ...] | list[str] = (),
                 base: dict[str, Any] | None = None, flags: dict[str, Any] | None = None) -> dict[str, str]:
    """Where data.path and the paths that follow it (a config class's ``FOLLOWERS``) come from, for ``--print-config``:
    "--data",
    "--set", "follows data.path", "the stored config", "preset NAME" or "default"."""
    data, explicit = _layers(cls, config, overrides, base, flags)
    from_flags = given(flags or {})
    moved = _followers_moved(cls, data, explicit)
    preset = read_yaml(preset_path(config, cls.__name__)) if config else {}
    out = {}
    for key in ("data.path", *getattr(cls, "FOLLOWERS", ())):
        if key in moved:
            out[key] = "follows data.path"
        elif _get(from_flags, key) is not None:  # data.path's flag: --data
            out[key] = "--data"
        elif _get(explicit, key) is not None:
            out[key] = "--set"
        elif _get(preset, key) is not None:
            out[key] = f"preset {config}"
        elif _get(base or {}, key) is not None:
            out[key] = "the stored config"
        else:
            out[key] = "default"
    return out


def _smoke(cls: type, explicit: dict[str, Any], merged: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``MOCO_SMOKE=1`` (:mod:`moco_core.smoke`): the shortened length, as if given with ``--set`` (so that the
    schedule follows it), and the small sizes the command did not choose."""
    changes: dict[str, Any] = {}
    for key, value in smoke.sizes(cls.__name__, lambda k: _get(explicit, k), lambda k: _get(merged, k)).items():
        _set(changes, key, value)
    if cls.__name__ in smoke.LENGTHS:
        key = smoke.LENGTHS[cls.__name__][0]
        configured = _get(merged, key)
        shortened = smoke.length(cls.__name__, _default(cls, key) if configured is None else configured)
        if shortened is not None:
            given_length: dict[str, Any] = {}
            _set(given_length, *shortened)
            explicit = _merge(explicit, given_length)
            changes = _merge(changes, given_length)
    for key in smoke.INTERVALS.get(cls.__name__, ()):
        value = _get(merged, key)
        if value is not None and smoke.interval(value) != value:
            _set(changes, key, smoke.interval(value))
    return explicit, _merge(merged, changes)


def given(flags: dict[str, Any]) -> dict[str, Any]:
    """``flags`` without the values that were not given (None), at every level; empty sections dropped."""
    out: dict[str, Any] = {}
    for key, value in flags.items():
        if isinstance(value, dict):
            value = given(value) or None
        if value is not None:
            out[key] = value
    return out


def validated(cfg: Any) -> Any:
    """Run the config class's validator (if it has one) and return ``cfg``."""
    check = getattr(cfg, "check", None)
    if check is not None:
        check()
    return cfg


def replace(cfg: Any, **changes: Any) -> Any:
    """``cfg`` with fields replaced; a dict replaces fields of a section: ``replace(cfg, run={'seed': 1})``."""
    updates = {name: dataclasses.replace(getattr(cfg, name), **value) if isinstance(value, dict) else value
               for name, value in changes.items()}
    return dataclasses.replace(cfg, **updates)


DEVICE_NAMES = "auto, cpu, cuda, cuda:N or mps"
SEED_LIMIT = 2**32  # numpy's and the DataLoader workers' seeds are below it
MAX_QUEUE = 2**24  # keys: 16.8M x 128 floats is 8 GiB, 256 times the paper's K


def device_problem(name: str) -> str | None:
    """Why ``name`` is not a device this suite runs on, or None."""
    if re.fullmatch(r"auto|cpu|mps|cuda(:\d{1,4})?", name):
        return None
    return f"expected {DEVICE_NAMES}, got {show(name)}"


def seed_problem(seed: int) -> str | None:
    return None if 0 <= seed < SEED_LIMIT else f"must be in [0, 2**32), got {seed}"


Check = tuple[bool, str, "str | None"]  # (holds, "section.key", what is wrong when it does not)

# float32's smallest normal number and its largest: a divisor outside them (a double's 1e-50 is 0 in float32, 1e-39
# is subnormal and its reciprocal overflows) makes the quotient inf or NaN, a traceback or a score at chance.
FLOAT32_TINY = 2.0 ** -126
FLOAT32_MAX = (2 - 2.0 ** -23) * 2.0 ** 127


def divisor_check(key: str, values: float | tuple[float, ...]) -> Check:
    """A temperature or a std, each of which divides float32 tensors: every value must be one float32 holds as a
    normal number. Listed after the key's own check (> 0, finite), whose message stays the first said."""
    bad = next((v for v in (values if isinstance(values, tuple) else (values,))
                if not FLOAT32_TINY <= v <= FLOAT32_MAX), None)
    return (bad is None, key, f"{bad} divides float32 tensors, where it is 0, subnormal or infinite: need values "
            f"in [{FLOAT32_TINY:.3g}, {FLOAT32_MAX:.3g}]")


# run.loggers: each mirrors metrics.jsonl (moco_core/run/loggers.py); the package it needs, named as its extra too.
LOGGERS = {"tensorboard": "tensorboard", "wandb": "wandb"}


def extra_problem(what: str, module: str, extra: str, pip_name: str | None = None) -> str | None:
    """Why ``what`` cannot run here: ``module``, of the optional extra ``extra``, is not installed (checked when
    the config is read, not when the run has trained for hours and imports it to test); None when it is."""
    if importlib.util.find_spec(module) is not None:
        return None
    return f"{what} needs {module}: pip install 'moco[{extra}]' (or pip install {pip_name or module})"


def loggers_problem(names: tuple[str, ...]) -> str | None:
    """Why ``names`` cannot be ``run.loggers`` here: an unknown name, one given twice, or a package not installed
    (checked now, not when the run has trained for an hour)."""
    for i, name in enumerate(names):
        if name not in LOGGERS:
            return f"unknown logger {name!r} (known: {', '.join(LOGGERS)})"
        if name in names[:i]:
            return f"{name} is named twice"
        if importlib.util.find_spec(LOGGERS[name]) is None:
            return f"{name} is not installed: pip install 'moco[{name}]' (or pip install {LOGGERS[name]})"
    return None


def run_checks(device: str, seed: int, loggers: tuple[str, ...] = ()) -> list[Check]:
    """The checks every command's ``run`` section shares: a device this build knows, a seed torch accepts,
    loggers that exist and are installed."""
    return [(device_problem(device) is None, "run.device", device_problem(device)),
            (seed_problem(seed) is None, "run.seed", seed_problem(seed)),
            (loggers_problem(loggers) is None, "run.loggers", loggers_problem(loggers))]


def require(checks: list[Check]) -> None:
    """A ConfigError, "key: message", for the first check that does not hold."""
    for ok, key, message in checks:
        if not ok:
            raise ConfigError(f"{key}: {message}")


def config_yaml(cfg: Any, sources: dict[str, str] | None = None) -> str:
    """``cfg`` as YAML that ``-c`` loads back to the same config. A pretraining config leaves out the settings its
    method does not use (v1/v2's model.queue_size, ... for mocov3; the v3 section for the others), which a reader
    would otherwise take to apply, and a first comment line names them. ``sources`` (:func:`data_sources`): a
    comment line (the second of a pretraining config) saying where each data path comes from."""
    data = to_dict(cfg)
    head = ""
    if sources:
        head = "# " + "; ".join(f"{key}: {show(_get(data, key))} ({where})" for key, where in sources.items()) + "\n"
    if not hasattr(cfg, "unused_keys"):
        return head + yaml.safe_dump(data, sort_keys=False)
    left_out = cfg.unused_keys()
    for key in left_out:
        *parents, name = key.split(".")
        del (_get(data, ".".join(parents)) if parents else data)[name]
    names = ", ".join(k + (" section" if "." not in k else "") for k in left_out)
    return f"# not used by method {cfg.method}, left out: {names}\n" + head + yaml.safe_dump(data, sort_keys=False)
