"""What ``moco eval davis`` costs a checkpoint: wall seconds of label propagation and scoring on generated videos.

Issue 60 asks for the cost of the DAVIS evaluation on the embedded data and at DAVIS's own size. This times
:func:`probes.davis.run.davis_eval` (features, propagation, J and F; masks not written) on the embedded preset's
videos and on generated videos of 854 x 480 px (DAVIS-2017 val's 480p: 30 videos, 1,999 frames), random weights of
each ``--arch`` (the cost does not depend on the weights), and prints seconds in all and a frame.

    .venv/bin/python benchmarks/davis_cost.py                                     # embedded, resnet18
    .venv/bin/python benchmarks/davis_cost.py --size 480x854 --frames 8 --arch resnet50 vit_small
    .venv/bin/python benchmarks/davis_cost.py --size 480x854 --frames 80 --device cuda --arch vit_small

Measured 2026-11-29 on the 2-core CPU machine shared with other jobs (load average 9.5), OMP_NUM_THREADS=2, one
generated video of 8 frames at 854 x 480, DINO's defaults (480 px, 7 previous frames, top-5, radius 12):

    resnet50 (layer4, stride 32)    128 s   (16 s a frame)
    vit_small (patch, stride 16)     65 s   ( 8 s a frame)

so the 1,999 frames of DAVIS-2017 val take hours on such a CPU; no GPU was lent to this task to measure there.
``moco eval davis random --arch resnet18 -c davis_embedded`` (3 videos of 10 frames at 320 x 192) took 21 s of
wall time at load 8, most of it importing torch and torchvision.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from probes.davis.config import load_davis_config
from probes.davis.embedded import DEFAULT_SIZE, ensure_davis
from probes.davis.run import davis_eval


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", nargs="+", default=["resnet18"])
    parser.add_argument("--size", default="x".join(map(str, DEFAULT_SIZE)), help="HxW of the generated frames")
    parser.add_argument("--videos", type=int, default=1)
    parser.add_argument("--frames", type=int, default=10)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    height, width = (int(v) for v in args.size.split("x"))
    with tempfile.TemporaryDirectory() as tmp:
        root = ensure_davis(Path(tmp) / "data", videos=args.videos, frames=args.frames, size=(height, width))
        for arch in args.arch:
            cfg = load_davis_config(None, ["run.save_masks=false", f"data.short_side={min(height, 480)}"],
                                    flags={"arch": arch, "data": {"path": str(root)}, "run": {"device": args.device}})
            start = time.perf_counter()
            _, metrics = davis_eval("random", cfg, Path(tmp) / arch)
            took = time.perf_counter() - start
            frames = args.videos * args.frames
            print(f"{arch:12s} {frames} frames of {width} x {height}: {took:.1f} s ({took / frames:.2f} s a frame); "
                  f"J&F {metrics['J&F_mean']:.1f}")


if __name__ == "__main__":
    main()
