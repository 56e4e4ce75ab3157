"""Checkpoints in the official facebookresearch/moco layout, written atomically, read without unpickling code.

The official ``main_moco.py`` saves ``{'epoch', 'arch', 'state_dict', 'optimizer'}`` where ``state_dict`` is
the DistributedDataParallel-wrapped model's: ``module.encoder_q.*``, ``module.encoder_k.*``, ``module.queue``,
``module.queue_ptr``; ``epoch`` is the next epoch to run. We write exactly that, plus our own top-level
fields (config, RNG states, sampler position...), all plain tensors, numbers, strings, lists and dicts, so
``torch.load(path, weights_only=True)`` reads every checkpoint we write and the official scripts read them too.
"""

from __future__ import annotations

import io
import os
import pickle
import pickletools
import random
import re
import shutil
import struct
import tempfile
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import torch

from moco_core.checkpoint_budget import check_tensors, check_zip
from moco_core.commands import checkpoint_name
from moco_core.errors import UserError
from moco_core.file_sets import fill_synced
from moco_core.user_files import regular_file

FORMAT_VERSION = 1
LAST = checkpoint_name("pretrain")  # checkpoint_last.pth.tar; each command's are in the table of commands
POINTER = "last_checkpoint"  # the newest checkpoint's name, in its run directory: detectron2's file, as it writes it

# Our module's state_dict names -> the official DDP-wrapped names. The only place where keys are renamed: MoCo
# (to_official, from_official), the other methods (to_module_names, from_module_names) and the evaluations, which
# read the query encoder under QUERY_PREFIX in every checkpoint (moco_core/model/backbone.py).
QUERY_PREFIX = "module.encoder_q."
_PREFIXES = (("encoder.", QUERY_PREFIX), ("momentum_encoder.", "module.encoder_k."))
_BUFFERS = (("queue", "module.queue"), ("queue_ptr", "module.queue_ptr"))


# MoCo v3 (the official facebookresearch/moco-v3 layout): the DDP-wrapped module's base_encoder (backbone and
# projector), momentum_encoder and predictor. Ours are encoder, momentum_encoder, predictor.
BASE_PREFIX = "module.base_encoder."
_V3_PREFIXES = (("encoder.", BASE_PREFIX), ("momentum_encoder.", "module.momentum_encoder."),
                ("predictor.", "module.predictor."))
# A GradScaler's state before its first step (torch's defaults): the official main_moco.py resumes one from
# 'scaler' (it trains in fp16); ours trains in bf16 or fp32 and needs none.
FRESH_SCALER = {"scale": 65536.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000,
                "_growth_tracker": 0}


class CheckpointError(UserError):
    """A checkpoint cannot be read or is not what was expected. The message is one line."""


def _renamed(state_dict: dict[str, torch.Tensor], exact: tuple[tuple[str, str], ...],
             prefixes: tuple[tuple[str, str], ...], unknown: Callable[[str], Exception], *,
             add_module: bool = False) -> dict[str, torch.Tensor]:
    """``state_dict`` with each key renamed by the first pair that matches it (order kept): ``exact`` (old, new)
    whole names, then ``prefixes`` (old, new); a key neither matches raises ``unknown(key)``. ``add_module``: a key
    without the ``module.`` prefix is read as if it had it (a model saved without its DDP wrapper)."""
    out = {}
    for key, value in state_dict.items():
        name = key if not add_module or key.startswith("module.") else "module." + key
        new = next((after for before, after in exact if name == before), None)
        if new is None:
            new = next((after + name[len(before):] for before, after in prefixes if name.startswith(before)), None)
        if new is None:
            raise unknown(key)
        out[new] = value
    return out


def _flipped(pairs: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    return tuple((theirs, ours) for ours, theirs in pairs)


def to_official(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename our MoCo state_dict keys to the official ``module.encoder_q.*`` layout (order kept)."""
    return _renamed(state_dict, _BUFFERS, _PREFIXES, lambda key: KeyError(f"unexpected MoCo state_dict key {key!r}"))


def from_official(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Inverse of ``to_official``; also accepts keys without the ``module.`` prefix (single-GPU saves)."""
    return _renamed(state_dict, _flipped(_BUFFERS), _flipped(_PREFIXES), lambda key: CheckpointError(
        f"unexpected key {key!r}: not a MoCo pretraining checkpoint"), add_module=True)


def to_official_v3(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our MoCo v3 keys to the official ``module.base_encoder.*``, ``module.momentum_encoder.*`` and
    ``module.predictor.*`` (order kept): what the official main_lincls.py and convert_to_deit.py read."""
    return _renamed(state_dict, (), _V3_PREFIXES, lambda key: KeyError(
        f"unexpected MoCo v3 state_dict key {key!r}"))


def from_official_v3(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Inverse of :func:`to_official_v3`; also accepts keys without ``module.`` (a model saved unwrapped)."""
    return _renamed(state_dict, (), _flipped(_V3_PREFIXES), lambda key: CheckpointError(
        f"unexpected key {key!r}: not a MoCo v3 pretraining checkpoint"), add_module=True)


def checkpoint_method(ckpt: dict[str, Any]) -> str:
    """The method that wrote a pretraining checkpoint: ours say so; an official one is MoCo v3's when its
    state_dict holds ``module.base_encoder.*``, else MoCo v1/v2's."""
    method = ckpt.get("method")
    if isinstance(method, str):
        return method
    state = ckpt.get("state_dict")
    if isinstance(state, dict) and any(isinstance(k, str) and k.startswith(BASE_PREFIX) for k in state):
        return "mocov3"
    return "moco"


def to_module_names(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The other methods' keys (end2end, memory bank, supervised): ``encoder.*`` -> ``module.encoder_q.*`` (what
    the evaluations read, as in MoCo checkpoints), any other ``x`` -> ``module.x``."""
    return {(QUERY_PREFIX + k.removeprefix("encoder.")) if k.startswith("encoder.") else "module." + k: v
            for k, v in state_dict.items()}


def from_module_names(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Inverse of :func:`to_module_names`."""
    return {("encoder." + k.removeprefix(QUERY_PREFIX)) if k.startswith(QUERY_PREFIX) else k.removeprefix("module."): v
            for k, v in state_dict.items()}


def state_mismatch(expected: dict[str, Any], given: dict[str, Any], *, limit: int = 3) -> str | None:
    """What keeps ``given`` (a checkpoint's state dict) from loading into a module whose state dict is
    ``expected``: the first ``limit`` shapes that differ, keys missing and keys not expected, each with how many
    there are in all; None when they match. The counts and names say which model the checkpoint holds."""

    def listed(items: list[str]) -> str:
        return ", ".join(items[:limit]) + (f" and {len(items) - limit} more" if len(items) > limit else "")

    shapes = [f"{key} {list(given[key].shape)} in the checkpoint, {list(value.shape)} here"
              for key, value in expected.items() if key in given and hasattr(value, "shape")
              and hasattr(given[key], "shape") and tuple(given[key].shape) != tuple(value.shape)]
    missing = [key for key in expected if key not in given]
    unexpected = [key for key in given if key not in expected]
    parts = [f"{len(shapes)} shapes differ: {listed(shapes)}" if shapes else "",
             f"{len(missing)} of the model's {len(expected)} keys are not in the checkpoint: {listed(missing)}"
             if missing else "",
             f"{len(unexpected)} keys of the checkpoint are not in the model: {listed(unexpected)}"
             if unexpected else ""]
    return "; ".join(p for p in parts if p) or None


def load_into(module: torch.nn.Module, state: dict[str, Any]) -> None:
    """``module.load_state_dict(state)`` (strict), with a CheckpointError naming the first mismatching keys and
    shapes (:func:`state_mismatch`) instead of torch's many-line error."""
    if not isinstance(state, dict):
        raise CheckpointError(f"the weights are a {type(state).__name__}, not a state dict of tensors")
    problem = state_mismatch(module.state_dict(), state)
    if problem:
        raise CheckpointError(problem)
    try:
        module.load_state_dict(state)
    except RuntimeError as err:  # matching keys and shapes, refused for another reason (a dtype, a hook)
        raise CheckpointError(" ".join(str(err).split())) from None


def checkpoint_arch(ckpt: dict[str, Any]) -> str | None:
    """The architecture a checkpoint says it holds: ours in its config, the official ones in ``arch``."""
    config = ckpt.get("config")
    model = config.get("model") if isinstance(config, dict) else None
    arch = model.get("arch") if isinstance(model, dict) else ckpt.get("arch")
    return arch if isinstance(arch, str) else None


def rng_state() -> dict[str, Any]:
    """Every RNG the run uses, as plain tensors and lists (loadable with weights_only=True)."""
    version, internal, gauss = random.getstate()
    np_state = np.random.get_state()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": [version, list(internal), gauss],
        "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *map(float, np_state[2:])],
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_resume_fields(saved: dict[str, Any], path: Path, *, position: str) -> tuple[int, list[dict[str, Any]]]:
    """An evaluation checkpoint's ``position`` ("epoch", "iteration": how far it got), ``history`` and RNG states
    (set here), each checked first: a field missing or of another kind is a one-line CheckpointError naming it,
    and no RNG is changed."""
    done, history, rng = saved.get(position), saved.get("history", []), saved.get("rng")
    if not isinstance(done, int) or isinstance(done, bool) or done < 0:
        raise CheckpointError(f"{path}: its {position!r} is not a count of {position}s done ({type(done).__name__})")
    if not isinstance(history, list) or not all(isinstance(h, dict) for h in history):
        raise CheckpointError(f"{path}: its 'history' is not a list of logged values")
    if rng is not None:
        try:
            set_rng_state(rng)
        except (KeyError, TypeError, ValueError, RuntimeError, IndexError, AttributeError) as err:
            raise CheckpointError(f"{path}: its 'rng' is not the RNG states a run writes "
                                  f"({type(err).__name__})") from None
    return done, history


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), int(pos), int(has_gauss), cached))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_atomic(obj: dict[str, Any], path: Path) -> None:
    """torch.save ``obj`` to ``path`` through :func:`write_atomic`."""
    write_atomic(path, lambda f: torch.save(obj, f), what="checkpoint")


def save_last(obj: dict[str, Any], path: Path) -> None:
    """Save a run's newest checkpoint (:func:`save_atomic`), then name it in the run directory's :data:`POINTER`,
    as detectron2's ``Checkpointer`` does: what ``--resume``, a requeued job, the demo, sweeps and snapshots read
    (:func:`moco_core.run.rundir.last_checkpoint`), whatever the command calls its checkpoint."""
    save_atomic(obj, path)
    point_to(path.parent, path)


def point_to(run_dir: Path, path: Path) -> None:
    """Name ``path`` (a file in ``run_dir``, or in a folder of it) in ``run_dir``'s :data:`POINTER`, written
    atomically after the file itself: the pointer never names a file that is not whole."""
    data = path.relative_to(run_dir).as_posix().encode("utf-8")
    write_atomic(run_dir / POINTER, lambda f: f.write(data), what=POINTER)


def write_atomic(path: Path, write: Callable[[BinaryIO], None], *, what: str = "file") -> None:
    """Call ``write`` on a temporary file in the same directory, fsync, then rename it over ``path``.

    A crash (or a full disk) at any point leaves either the previous file or the new one, never a torn one.
    An OSError (a full disk, a quota, a vanished directory) becomes a one-line CheckpointError saying so.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as err:
        raise CheckpointError(f"cannot write {what} {path}: {err.strerror or err}") from err
    try:
        fill_synced(fd, tmp, write)
        os.replace(tmp, path)
    except (OSError, RuntimeError) as err:
        Path(tmp).unlink(missing_ok=True)
        reason = write_failure(err, path.parent)
        if reason is None:  # a RuntimeError that is not a failed write: not ours to explain
            raise
        kept = f"the previous {what} is intact" if path.exists() else f"no {what} was written"
        raise CheckpointError(f"cannot write {what} {path}: {reason}; {kept}") from err
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_failure(err: BaseException, directory: Path) -> str | None:
    """Why a write into ``directory`` failed, in a few words, or None when ``err`` is not a failed write.

    PyTorch's zip writer reports a short write (a full disk, a quota) as a RuntimeError such as "unexpected pos
    704 vs 598"; it is named as such, with the free space.
    """
    if isinstance(err, OSError):
        return err.strerror or str(err)
    if not any(m in str(err) for m in ("unexpected pos", "PytorchStreamWriter", "file write failed")):
        return None
    try:
        free = f"{shutil.disk_usage(directory).free / 2**20:.1f} MiB free there"
    except OSError:
        free = "free space unknown"
    return f"the write stopped short: the device is full or a quota or file-size limit was reached ({free})"


def remove_partial_writes(run_dir: Path) -> list[Path]:
    """Delete the temporary files of checkpoint writes that a killed process never finished; returns them.

    Only the run's own process may call this (at its start): the files are those ``save_atomic`` names.
    """
    partial = sorted([*run_dir.glob(f".{LAST}.*.tmp"), *run_dir.glob(".checkpoint_*.copy.tmp"),
                      *run_dir.glob(f".{POINTER}.*.tmp")]) if run_dir.is_dir() else []
    for tmp in partial:
        tmp.unlink(missing_ok=True)
    return partial


def snapshot_name(epoch_index: int) -> str:
    """The snapshot ``run.keep_every`` keeps after epoch ``epoch_index`` (0-based): ``checkpoint_NNNN.pth.tar``."""
    return f"checkpoint_{epoch_index:04d}.pth.tar"


def keep_copy(path: Path, name: str) -> Path:
    """Keep a snapshot of ``path`` under ``name`` in the same directory (a hard link where possible). It appears
    whole or not at all: ``moco eval snapshots --follow`` may be watching for it."""
    target = path.with_name(name)
    target.unlink(missing_ok=True)
    try:
        os.link(path, target)
    except OSError:
        partial = path.with_name(f".{name}.copy.tmp")
        shutil.copyfile(path, partial)
        os.replace(partial, target)
    return target


def load(path: str | Path, *, stand_ins: tuple[tuple[type, str], ...] = ()) -> dict[str, Any]:
    """Read a checkpoint with ``weights_only=True``: nothing in the file can run code.

    ``stand_ins``: (class, "module.name") pairs: each named global of the pickle is read as that inert class
    instead (moco_core/model/weights/files.py: the ``argparse.Namespace`` that DINO's and MAE's training
    checkpoints pickle). Raises CheckpointError (one line) for missing, truncated or non-checkpoint files, for
    pickles that would need any other object to load, and for files whose sizes overrun what they hold
    (:mod:`moco_core.checkpoint_budget`: compressed zip records, expanded tensors), before allocating them.
    """
    path = regular_file(path, what="checkpoint", error=CheckpointError)  # missing, a FIFO, a device, a folder
    plainly = not_a_pickle(path)
    if plainly:
        raise CheckpointError(f"{path}: not a checkpoint: {plainly}")
    check_zip(path, error=CheckpointError)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # torch's note on pickle protocols: the error says more
            with torch.serialization.safe_globals(list(stand_ins)):
                obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        allowed = {name for _, name in stand_ins}
        needed = [name for name in pickle_globals(path) if name not in allowed]
        instruction = _unread_instruction(str(err))
        if instruction and not needed:
            raise CheckpointError(f"{path}: refused, it holds {instruction}, which the safe loader does not read "
                                  f"(only tensors and plain data are read)") from None
        shown = ", ".join(needed[:3]) + (", ..." if len(needed) > 3 else "") if needed else "objects it cannot name"
        hint = ""
        if needed and all(name.startswith("numpy") or name == "_codecs.encode" for name in needed):  # protocol 2
            hint = ("; it holds numpy arrays, like a detectron2 .pkl: give the pretraining checkpoint it was "
                    "converted from")
        raise CheckpointError(f"{path}: refused, loading it would call {shown} (only tensors and plain data "
                              f"are read, nothing in a file may run code){hint}") from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError, OSError, KeyError, IndexError, TypeError,
            AttributeError, MemoryError, RecursionError, struct.error) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(f"{path}: not a readable checkpoint (truncated or corrupt?): {first[:200]}") from None
    if not isinstance(obj, dict):
        raise CheckpointError(f"{path}: expected a dict, found {type(obj).__name__}")
    check_tensors(obj, path, error=CheckpointError)
    return obj


def not_a_pickle(path: Path) -> str | None:
    """What ``path`` plainly is when it is no checkpoint at all (a git-LFS pointer, a web page, text, nothing), from
    its first bytes; None when it may be one (a zip, as torch.save writes, or a binary pickle)."""
    with path.open("rb") as f:
        head = f.read(512)
    if not head:
        return "the file is empty"
    if head.startswith(b"PK") or head[:1] == b"\x80":  # torch's zip format; a pickle of protocol 2 or later
        return None
    if head.startswith(b"version https://git-lfs"):
        return "it is a git-LFS pointer, the file itself was never fetched: run git lfs pull"
    lower = head.lower()
    if lower.lstrip().startswith(b"<!doctype html") or b"<html" in lower:
        return "it is an HTML page (a download that returned a web page, such as a sign-in or error page)"
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return None  # binary: let the loader say what is wrong with it
    first = " ".join(text.split())[:40]
    return f"it is a text file (it starts with {first!r})"


# in words, what a pickle instruction that torch's weights-only unpickler does not read holds (its name says little)
_INSTRUCTIONS = {"LONG4": "an integer of over 600 digits"}


def _unread_instruction(message: str) -> str | None:
    """The pickle instruction torch's weights-only unpickler stopped at ("Unsupported operand 139"), in words; None
    where its message names none."""
    found = re.search(r"Unsupported operand (\d+)", message)
    if not found:
        return None
    code = int(found.group(1))
    op = next((op for op in pickletools.opcodes if ord(op.code) == code), None)
    if op is None:
        return f"pickle instruction {code}"
    meaning = _INSTRUCTIONS.get(op.name)
    return f"{meaning} (pickle's {op.name})" if meaning else f"pickle's {op.name} instruction"


def pickle_globals(path: Path) -> list[str]:
    """The ``module.name`` callables a pickle (a plain one, or a torch zip's ``data.pkl``) would import to load.

    Read with ``pickletools``, which only parses the opcodes: nothing is imported or run.
    """
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                member = next((n for n in archive.namelist() if n.endswith("data.pkl")), None)
                data = archive.read(member) if member else b""
        else:
            data = path.read_bytes()
        found: list[str] = []
        pushed: list[str | None] = []  # strings pushed so far (memo lookups included): STACK_GLOBAL's operands
        memo: dict[int, str | None] = {}
        for op, arg, _ in pickletools.genops(io.BytesIO(data)):
            last = pushed[-1] if pushed else None
            if op.name == "GLOBAL":
                found.append(str(arg).replace(" ", "."))
                pushed.append(None)
            elif op.name == "STACK_GLOBAL":
                if len(pushed) >= 2 and None not in pushed[-2:]:
                    found.append(f"{pushed[-2]}.{pushed[-1]}")
                pushed.append(None)
            elif op.name == "MEMOIZE":
                memo[len(memo)] = last
            elif op.name in ("PUT", "BINPUT", "LONG_BINPUT"):
                memo[int(arg)] = last
            elif op.name in ("GET", "BINGET", "LONG_BINGET"):
                pushed.append(memo.get(int(arg)))
            elif isinstance(arg, str) and ("UNICODE" in op.name or "STRING" in op.name):
                pushed.append(arg)
            elif op.stack_after:  # anything else that leaves a value on the stack
                pushed.append(None)
    except (OSError, ValueError, zipfile.BadZipFile, pickle.UnpicklingError):
        return []
    return list(dict.fromkeys(n for n in found if not n.startswith(("torch.", "collections.OrderedDict"))))


def finished(run_dir: Path, epochs: int) -> bool:
    """Whether ``run_dir`` holds a checkpoint of a run that completed ``epochs`` epochs."""
    path = run_dir / LAST
    return path.is_file() and load(path).get("epoch", 0) >= epochs


def resolve(run_dir_or_ckpt: str | Path) -> Path:
    """A run directory means its last checkpoint; a file is itself."""
    path = Path(run_dir_or_ckpt)
    if path.is_dir():
        if not (path / LAST).is_file():
            raise CheckpointError(f"{path}: a directory without {LAST}; give a pretraining's run directory or a "
                                  f"checkpoint file")
        return path / LAST
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}")
    return path
