"""What a checkpoint file may make us allocate, checked against what the file holds before anything is allocated.

A size read from a file is a claim: torch's loader trusts two of them.

- :func:`check_zip`: a torch zip's records, as its central directory declares them. torch's reader allocates each
  record's declared uncompressed size and inflates a DEFLATE record into it, so a 1 MB file of compressed zeros
  took 1.75 GB. torch writes its records stored (uncompressed), so their total is the file's size; a file may
  declare at most :data:`ZIP_EXPANSION` times its size, plus :data:`ZIP_SLACK`, and each record's compressed
  bytes must lie in the file.
- :func:`check_tensors`: each tensor of a loaded object against the bytes of the storage it views. A view's
  shape and strides are free in a pickle: ``torch.zeros(1).expand(10**12)`` saves 4 bytes and claims 10^12
  elements, which the first operation on its values (a finiteness check, a copy, building a network of that
  size) tries to allocate. A tensor whose elements do not fit in its storage's bytes (an expanded or overlapping
  view) is refused, as is a sparse or other non-strided one; no weights are saved so. And all the tensors
  together against all the distinct storages: many views of one storage each fit it, yet together claim many
  times the file (a 40 MB storage viewed as every block of a ViT-g builds 4 GB); their total may be at most
  :data:`SHARED_EXPANSION` times the storages' bytes, plus :data:`ZIP_SLACK`.

Each raises ``error`` (the caller's :class:`moco_core.errors.UserError` subclass) with one line naming the file,
what it claimed and the limit. Called by :func:`moco_core.checkpoint.load` on every checkpoint read.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from moco_core.errors import UserError

MiB = 1 << 20
ZIP_EXPANSION = 4  # uncompressed records / file size: 1 for what torch.save writes; room for a re-zipped file
ZIP_SLACK = 64 * MiB  # and what a small file may declare beyond that (a few KB file: at most 64 MiB)
SHARED_EXPANSION = 4  # all tensors' bytes / all distinct storages' bytes: 1 for what torch.save writes
WALK_LIMIT = 1 << 22  # containers and tensors visited in a loaded object (a pickle builds at most one per opcode)


def check_zip(path: Path, *, error: type[UserError]) -> None:
    """Refuse a torch zip whose records would take more than the file's budget, before torch reads any of them;
    nothing for a file that is no zip (a legacy pickle: torch checks its storages' sizes against the file)."""
    try:
        if not zipfile.is_zipfile(path):
            return
        with zipfile.ZipFile(path) as archive:
            records = archive.infolist()
    except (OSError, zipfile.BadZipFile, ValueError, EOFError):
        return  # torch's loader says what is wrong with it
    size = path.stat().st_size
    limit = ZIP_EXPANSION * size + ZIP_SLACK
    total = sum(r.file_size for r in records)
    compressed = [r for r in records if r.compress_type != zipfile.ZIP_STORED]
    outside = next((r for r in records if r.compress_size > size or r.header_offset > size), None)
    if outside is not None:
        raise error(f"{path}: its zip record {outside.filename!r} claims {outside.compress_size} bytes, more than "
                    f"the file's {size}: truncated or forged; not read")
    if total > limit:
        how = (f"{len(compressed)} of its {len(records)} records are compressed" if compressed else
               f"its {len(records)} records")
        raise error(f"{path}: its zip records would take {_bytes(total)} when read ({how}), more than "
                    f"{ZIP_EXPANSION}x the file's {_bytes(size)} + {_bytes(ZIP_SLACK)} ({_bytes(limit)}); torch "
                    f"writes its records uncompressed: refused before reading them")


def check_tensors(obj: Any, path: Path, *, error: type[UserError]) -> None:
    """Refuse ``obj`` (a loaded checkpoint) when one of its tensors claims more elements than its storage's bytes
    hold, or is not a strided tensor; no value is read. Shared containers are visited once (a pickle may nest the
    same list many times over: walked as a tree, 100 bytes of it would take for ever)."""
    total, storages = 0, {}
    for name, tensor in _tensors(obj, path, error):
        if tensor.layout != torch.strided:
            raise error(f"{path}: {name} is a {tensor.layout} tensor of shape {list(tensor.shape)}; only dense "
                        f"tensors are read")
        claimed = tensor.numel() * tensor.element_size()
        held = tensor.untyped_storage().nbytes()
        if claimed > held:
            raise error(f"{path}: {name} claims {tensor.numel()} elements of shape {list(tensor.shape)} "
                        f"({_bytes(claimed)}) over {_bytes(held)} of stored data (an expanded or overlapping view, "
                        f"strides {list(tensor.stride())}); tensors may not claim more than the file holds")
        total += claimed
        storages[tensor.untyped_storage().data_ptr()] = held
    held = sum(storages.values())
    if total > SHARED_EXPANSION * held + ZIP_SLACK:
        raise error(f"{path}: its tensors claim {_bytes(total)} together, views of {len(storages)} storages of "
                    f"{_bytes(held)}: more than {SHARED_EXPANSION}x what they share + {_bytes(ZIP_SLACK)}; tensors may "
                    f"not claim more than the file holds")


def _tensors(obj: Any, path: Path, error: type[UserError]) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) for each tensor in ``obj``'s dicts, lists, tuples and sets, each container once."""
    seen: set[int] = set()
    stack: list[tuple[str, Any]] = [("", obj)]
    while stack:
        name, value = stack.pop()
        if isinstance(value, torch.Tensor):
            yield name or "the object", value
            continue
        if not isinstance(value, (dict, list, tuple, set, frozenset)) or id(value) in seen:
            continue
        seen.add(id(value))
        if len(seen) > WALK_LIMIT:
            raise error(f"{path}: holds more than {WALK_LIMIT} containers; not read")
        items = value.items() if isinstance(value, dict) else enumerate(value)
        stack.extend((f"{name}.{_key(key)}" if name else _key(key), item) for key, item in items)


def _key(key: Any) -> str:
    small = isinstance(key, int) and key.bit_length() < 64  # str() of a huge int raises past 4300 digits
    text = key if isinstance(key, str) else str(key) if small else type(key).__name__
    return text if len(text) <= 80 else text[:77] + "..."


def _bytes(count: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", MiB), ("KiB", 1 << 10)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count} bytes"
