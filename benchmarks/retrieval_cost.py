"""What ``moco eval retrieval`` costs: wall seconds of one evaluation, on the embedded preset or on synthetic data of
revisited Oxford's and Paris' size in revisitop's layout (issue 60's goal: under 5 minutes a checkpoint for both).

    python benchmarks/retrieval_cost.py --embedded --arch resnet18                       # the embedded preset
    python benchmarks/retrieval_cost.py --root /tmp/rsized --arch resnet50 --device cuda # rOxford5k + rParis6k sized
    python benchmarks/retrieval_cost.py --root /tmp/rsmall --images 200 --queries 10     # a quick look on a CPU

The synthetic sets (written once under ``--root``) have rOxford5k's 4,993 database images and 70 queries and
rParis6k's 6,322 and 70 by default, photograph-like JPEGs (``make_jpegs.photo_like``) of 1024 x 768 px, the size of
the released photographs, and a random ground truth; the numbers scored mean nothing, the time is the point. The
weights are random (``--arch``): reading a file adds its load time only.

Measured 2026-11-29 on 2 CPU cores shared with other jobs (load average 8-11), ``--device cpu``, OMP_NUM_THREADS=1,
random ResNet-18 (our random init: the CIFAR stem), the evaluation alone (imports excluded):

    --embedded (2 sets of 30 images + 8 queries, both query variants, 64 px)             9.0 s
    --images 100 --queries 10 --workers 1 (2 sets: 200 images + 40 query reads, 1024 px -> 224 px)
                                                                                        74.9 s, 80.4 s (27-32 s CPU)

That is about 0.12 s of CPU an image read, decoded, shrunk and featurised at 224 px. No GPU was at hand: the
rOxford5k + rParis6k-sized run (11,315 database images, 280 query reads) on a GPU is still to be measured; its
cost there is expected to be the JPEG decoding and the LANCZOS shrink in the loader's workers, not the network.
"""

from __future__ import annotations

import argparse
import pickle
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.make_jpegs import photo_like  # noqa: E402
from moco_core.config import load_config, replace  # noqa: E402
from probes.retrieval.config import RetrievalConfig  # noqa: E402
from probes.retrieval.run import retrieval_eval  # noqa: E402

SIZES = {"roxford5k": (4993, 70), "rparis6k": (6322, 70)}  # database images, queries


def write_set(root: Path, name: str, images: int, queries: int, side: int) -> None:
    """``root/name`` in revisitop's layout, unless its ground truth is there already."""
    folder = root / name
    if (folder / f"gnd_{name}.pkl").exists():
        return
    (folder / "jpg").mkdir(parents=True, exist_ok=True)
    names = [f"{name}_{i:06d}" for i in range(images)] + [f"{name}_query_{i:03d}" for i in range(queries)]
    for i, stem in enumerate(names):
        photo_like(i, height=side * 3 // 4, width=side).save(folder / "jpg" / f"{stem}.jpg", quality=90)
    rng = np.random.default_rng(0)
    gnd = []
    for _ in range(queries):
        picked = rng.choice(images, size=min(60, images), replace=False).tolist()
        gnd.append({"bbx": [side * 0.1, side * 0.1, side * 0.6, side * 0.5], "easy": picked[:20],
                    "hard": picked[20:40], "junk": picked[40:]})
    with open(folder / f"gnd_{name}.pkl", "wb") as f:
        pickle.dump({"imlist": names[:images], "qimlist": names[images:], "gnd": gnd}, f, protocol=2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embedded", action="store_true", help="the retrieval_embedded preset")
    parser.add_argument("--root", type=Path, help="where the synthetic sets are written (once) and read")
    parser.add_argument("--images", type=int, help="database images a set (default: the real counts)")
    parser.add_argument("--queries", type=int, default=70)
    parser.add_argument("--side", type=int, default=1024, help="the photographs' longer side, px")
    parser.add_argument("--arch", default="resnet50")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--out", type=Path, default=Path("/tmp/retrieval_cost"))
    args = parser.parse_args()
    if args.embedded:
        cfg = load_config(RetrievalConfig, "retrieval_embedded", [], flags={"arch": args.arch})
    else:
        if args.root is None:
            parser.error("--root or --embedded")
        for name, (images, queries) in SIZES.items():
            write_set(args.root, name, args.images or images, min(args.queries, queries), args.side)
        cfg = load_config(RetrievalConfig, None, [], flags={"arch": args.arch, "image_size": args.image_size,
                                                            "data": {"path": str(args.root), "workers": args.workers}})
    run = 0
    while (args.out / f"run{run}").exists():
        run += 1
    cfg = replace(cfg, run={"output_dir": str(args.out / f"run{run}"), "device": args.device})
    start = time.perf_counter()
    retrieval_eval(cfg, "random", show_progress=False)
    print(f"moco eval retrieval ({args.arch}, {'embedded' if args.embedded else args.root}, {cfg.run.device}): "
          f"{time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
