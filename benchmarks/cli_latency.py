"""How long `moco --help` and an argument error take to answer: wall and CPU seconds of whole processes.

Issue 33: `moco --help` imported torch first (3.4 s of CPU; 19 s on a busy machine). The target is under 0.5 s of
wall time on an idle 2-core machine. Each command runs ``--repeats`` times in a fresh interpreter (nothing cached
between runs but the OS's file cache, warmed by one run first); the median is printed with the CPU time the
process used, which load on the machine inflates less than wall time.

    .venv/bin/python benchmarks/cli_latency.py                      # this tree
    .venv/bin/python benchmarks/cli_latency.py --tree /tmp/old      # another checkout (e.g. a worktree of 30357c9)

Measured 2026-11-25 on the 2-core CPU machine (load average 1.0), median of 3, wall seconds (CPU alike):

    command                              30357c9   after issue 33
    moco --help                            2.91        0.33
    moco eval voc --help                   3.01        0.47
    moco pretrain --bogus (usage error)    2.76        0.34
    moco pretrain --set x (bad value)      2.98        0.20
    moco --version                         2.74        0.22   (30357c9 had none: a usage error)

What is left is typer and its rich help (about 0.15 s), PyYAML and our config modules; torch is imported only when a
command starts its work (tests/test_cli_shape.py checks that none of --help and argument errors loads it).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

COMMANDS = {
    "moco --help": ["--help"],
    "moco eval voc --help": ["eval", "voc", "--help"],
    "moco pretrain --bogus (usage error)": ["pretrain", "--bogus"],
    "moco pretrain --set x (bad value)": ["pretrain", "--set", "x"],
    "moco --version": ["--version"],
}


def timed(tree: Path, args: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of ``python -m cli ARGS`` run in ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "cli", *args], cwd=tree, env=env, capture_output=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1],
                        help="the checkout to time (default: this one)")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    print(f"tree {args.tree}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; median of "
          f"{args.repeats}")
    for name, argv in COMMANDS.items():
        timed(args.tree, argv)  # warm the file cache
        runs = [timed(args.tree, argv) for _ in range(args.repeats)]
        print(f"{name:40s} wall {statistics.median(w for w, _ in runs):6.2f} s   "
              f"cpu {statistics.median(c for _, c in runs):6.2f} s")


if __name__ == "__main__":
    main()
