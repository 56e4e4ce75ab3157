"""Run a ``moco`` command on the CPU with the numerics and code paths a CUDA run takes by default.

Under CUDA a run differs from a CPU run in more than its kernels: bf16 autocast (``run.amp``, fp32 on the CPU),
both encoders in channels_last (which takes shuffled BN's plain-ops path, ``group_batch_norm``), the encoders
compiled, and the tensor pipeline running ahead of the step in two threads with a generator of its own. This
script switches those on for a CPU run, so that what they do to the results can be measured without a GPU
(issue #17 asks MoCo's linear margin over random init to hold on CUDA with bf16 as on CPU):

    .venv/bin/python benchmarks/cuda_numerics_on_cpu.py -- demo --trials 3 --tasks linear --device cpu \\
        --output-dir runs/demo_bf16

Everything after ``--`` is a ``moco`` command line, run in this process. What it still does not reproduce: the
CUDA kernels themselves (cuDNN's convolutions and their bf16 accumulation), nvJPEG (the embedded images are
PNGs, decoded on the CPU under CUDA too), fused SGD (the same update, one kernel), and compilation unless
``--compile`` (inductor's CPU code). bf16 autocast on the CPU ran at fp32's speed on this project's 2-core
machine, whose CPU has AVX512-BF16 (2026-11-23: 215 against 211-242 ms for a resnet18 step at batch 128, 32 px);
a CPU without bf16 instructions may be much slower.

Nothing of the product is changed: the switches replace functions in this process only, for the length of the
command. The records the runs write cannot tell that they ran this way: keep them in their own output directory.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import torch

import classification.engine
import classification.finetune
import classification.linear
import dense.features
import moco_core.data.device_data
import moco_core.run.engine
import moco_core.run.features
import moco_core.run.runtime
import moco_core.run.train
import transfer.engine
from moco_core.config import replace

# Every module that calls ``autocast`` (each holds its own reference, imported from moco_core.run.runtime).
AUTOCAST_USERS = (moco_core.run.runtime, moco_core.run.engine, moco_core.run.features, classification.engine,
                  classification.linear, classification.finetune, transfer.engine, dense.features)


def bf16_autocast(device: torch.device, amp: bool) -> contextlib.AbstractContextManager[object]:
    """``run.amp`` on any device: bf16 autocast, as CUDA runs by default."""
    if amp and device.type in ("cuda", "cpu"):
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


@contextlib.contextmanager
def cuda_defaults(*, compile_encoders: bool) -> Iterator[None]:
    """Inside, this process's runs take CUDA's defaults on the CPU (see the module's docstring)."""
    speed_up = moco_core.run.train.speed_up
    loader_init = moco_core.data.device_data.DeviceAugmentLoader.__init__

    def cuda_speed_up(method: Any, device: torch.device, run: Any) -> Any:
        run = replace(run, channels_last=True if run.channels_last is None else run.channels_last,
                      compile=compile_encoders if run.compile is None else run.compile)
        return speed_up(method, device, run)

    def ahead_init(self: Any, *args: Any, ahead: bool | None = None, **kwargs: Any) -> None:
        loader_init(self, *args, ahead=True if ahead is None else ahead, **kwargs)

    with contextlib.ExitStack() as undo:
        for module, name, value in [*((m, "autocast", bf16_autocast) for m in AUTOCAST_USERS),
                                    (moco_core.run.train, "speed_up", cuda_speed_up),
                                    (moco_core.data.device_data.DeviceAugmentLoader, "__init__", ahead_init)]:
            undo.callback(setattr, module, name, getattr(module, name))
            setattr(module, name, value)
        yield


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    own, command = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--compile", action="store_true", help="also torch.compile the encoders (inductor, CPU)")
    args = parser.parse_args(own)
    if not command:
        parser.error("give a moco command after --, for example: -- demo --trials 3 --tasks linear --device cpu")
    print(f"moco {' '.join(command)}: bf16 autocast, channels_last, pipeline ahead in threads"
          f"{', compiled encoders' if args.compile else ''} (CUDA's defaults), on the CPU", flush=True)
    import cli

    sys.argv = ["moco", *command]
    with cuda_defaults(compile_encoders=args.compile):
        cli.main()


if __name__ == "__main__":
    main()
