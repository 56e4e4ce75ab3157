"""Which thread count a CPU pretraining should use, on an idle and on a busy machine (issue 33).

Runs ``moco pretrain -c embedded`` (the preset as it is: ResNet-18, batch 128, 32-px crops, the tensor pipeline)
as a user would, once per (background load, OMP_NUM_THREADS) pair, and reads the images/s of its logged windows
from ``metrics.jsonl``: the first window is the warm-up and is left out, the median of the next ``--windows`` is
the figure. The background load is ``--load`` processes that each multiply matrices on one thread without pause,
as another job sharing the machine does. Every run is stopped once it has logged what is needed.

    .venv/bin/python benchmarks/cpu_threads.py                         # loads 0 and 2, threads 1 and all cores
    .venv/bin/python benchmarks/cpu_threads.py --loads 0 1 2 --threads 1 2 --windows 3

It prints one line per pair and the machine's load average before each run (other work on the machine counts
too: say so beside the figures).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BUSY = "import torch\ntorch.set_num_threads(1)\na = torch.randn(256, 256)\nwhile True:\n    a = (a @ a).tanh()\n"


def windows(path: Path) -> list[float]:
    """The images/s of every logged window so far (the epoch summaries excluded)."""
    if not path.is_file():
        return []
    rates = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line being written
        if "images_per_s" in record and "loss" in record and "data_wait" not in record:
            rates.append(float(record["images_per_s"]))
    return rates


def measure(threads: int, load: int, needed: int, log_every: int, timeout: float) -> tuple[float, list[float]]:
    """Median images/s of windows 2..needed+1 of an embedded pretraining at ``threads`` under ``load`` busy
    processes; with the rates seen."""
    busy = [subprocess.Popen([sys.executable, "-c", BUSY], env={**os.environ, "OMP_NUM_THREADS": "1"})
            for _ in range(load)]
    out = Path(tempfile.mkdtemp(prefix="cpu_threads_"))
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    env.pop("MOCO_SMOKE", None)
    moco = Path(sys.executable).parent / "moco"
    run = subprocess.Popen([str(moco), "pretrain", "-c", "embedded", "--set", f"run.log_every={log_every}",
                            "--set", "run.knn_every=0", "--output-dir", str(out / "run"), "--quiet"],
                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    rates: list[float] = []
    try:
        deadline = time.monotonic() + timeout
        while len(windows(out / "run" / "metrics.jsonl")) < needed + 1:
            if run.poll() is not None:
                raise SystemExit(f"the run ended early: {run.stderr.read()[-2000:] if run.stderr else ''}")
            if time.monotonic() > deadline:
                break
            time.sleep(0.5)
        rates = windows(out / "run" / "metrics.jsonl")
    finally:
        run.kill()
        run.wait()
        for p in busy:
            p.kill()
            p.wait()
        shutil.rmtree(out, ignore_errors=True)
    return (statistics.median(rates[1:needed + 1]) if len(rates) > 1 else float("nan")), rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loads", type=int, nargs="+", default=[0, 2], help="busy background processes")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, os.cpu_count() or 1])
    parser.add_argument("--windows", type=int, default=2, help="windows after the warm-up one")
    parser.add_argument("--log-every", type=int, default=3, help="steps a window (batch 128)")
    parser.add_argument("--timeout", type=float, default=400.0, help="seconds a run may take to log them")
    args = parser.parse_args()
    import torch

    print(f"# {os.cpu_count()} cores, torch {torch.__version__}, torch's default threads "
          f"{torch.get_num_threads()}, moco pretrain -c embedded (batch 128), run.log_every {args.log_every}")
    for load in args.loads:
        for threads in args.threads:
            before = os.getloadavg()[0]
            rate, seen = measure(threads, load, args.windows, args.log_every, args.timeout)
            print(f"load {load} threads {threads}: {rate:.1f} images/s (windows {', '.join(f'{r:.1f}' for r in seen)};"
                  f" load average before {before:.2f})", flush=True)


if __name__ == "__main__":
    main()
