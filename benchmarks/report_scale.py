"""How long ``moco report`` takes over many records and over transfer records with many per-image outcomes.

Issue 55 (class 4): the transfer table's paired tests ran in pure Python (McNemar's exact sum over every k, and
10,000 random sign flips over every image), so two single-trial transfer records of 10^6 test images each made
``moco report`` hang. The target: a report over 10,000 records finishes in under a minute on the 2-core machine.

The script writes the records into a scratch folder (or ``--keep DIR``), then times the real command in a fresh
process (``moco report DIR --out OUT --formats md,csv``), with a wall-clock limit (``--limit``, seconds) so a tree
that hangs is reported as such:

- ``many``: ``--records`` records (default 10,000): linear and kNN records of 20 MoCo seeds and random init, and
  transfer suite runs of 12 datasets each (one trial a pretraining, so the paired tests run), each transfer record
  with ``--outcomes`` per-image outcomes (default 1,000);
- ``large``: two single-trial suite runs (MoCo and random init) on CIFAR-10 (top-1: McNemar) and Pets (mean
  per-class: the sign-flip test), each record with 10^6 per-image outcomes.

    .venv/bin/python benchmarks/report_scale.py                      # both cases, this tree
    .venv/bin/python benchmarks/report_scale.py --case large --limit 120

Measured 2026-11-29 on the 2-core CPU machine shared with six other sessions (load average 10), seconds:

    case                                            d564f78                      after issue 55
    large (4 records of 10^6 outcomes)              > 300 wall (killed)          9.4-12.7 wall
    many (10,000 records, 1,000 outcomes each)      84 wall, 17.9 CPU            17-37 wall, 7.3-12.8 CPU

(the spread after is the machine's load, 5 to 10; peak resident memory of ``many``: 0.22 GiB.)

Where the time went (cProfile of ``many`` on d564f78): every record file was read twice (once for the tables of
:mod:`reports.records`, once for the transfer suite's), and the JSON parser called a Python checker for each of
the 18 million numbers; now each file is read once and text without a number of 19 digits or a 3-digit exponent
is parsed by the C parser alone (moco_core/user_files.py).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MOCO = Path(sys.executable).with_name("moco")
DATASETS = ("food101", "cifar10", "cifar100", "cub200", "sun397", "cars", "aircraft", "voc2007", "dtd", "pets",
            "caltech101", "flowers")
PER_CLASS = ("aircraft", "pets", "caltech101", "flowers")


def _backbone(seed: int | None) -> dict[str, Any]:
    if seed is None:
        return {"source": "random", "format": "random", "arch": "resnet50", "pretrain": {}}
    config = {"method": "moco", "data": {"path": "/data/imagenet"}, "optim": {"epochs": 200},
              "model": {"arch": "resnet50"}, "run": {"seed": seed}}
    return {"source": f"/ckpt/s{seed}/checkpoint_last.pth.tar", "format": "moco-suite", "arch": "resnet50",
            "sha256": f"{seed:064x}", "pretrain": {"method": "moco", "epochs": 200, "config": config}}


def _classification(task: str, backbone: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    top1 = round(rng.uniform(20, 70), 2)
    return {"schema": "moco.result", "version": 1, "task": task, "protocol": task,
            "metrics": {"top1": top1, "top5": min(100.0, top1 + 20)}, "backbone": backbone,
            "dataset": {"path": "/data/imagenet", "classes": 1000}, "config": {"k": 200} if task == "knn" else {}}


def _transfer(dataset: str, backbone: dict[str, Any], outcomes: int, rng: random.Random) -> dict[str, Any]:
    metric = "map11" if dataset == "voc2007" else "mean_per_class" if dataset in PER_CLASS else "top1"
    correct = [1 if rng.random() < 0.6 else 0 for _ in range(outcomes)]
    transfer: dict[str, Any] = {"metric": metric, "test": 100.0 * sum(correct) / outcomes, "lambda": 1.0}
    if metric != "map11":
        transfer.update(test_correct=correct, test_labels=[i % 37 for i in range(outcomes)])
    return {"schema": "moco.result", "version": 1, "task": "transfer", "protocol": "linear-transfer",
            "metrics": {metric: transfer["test"]}, "backbone": backbone,
            "dataset": {"name": dataset, "path": "/data/suite", "splits": {"sha256": "s" * 64}},
            "config": {"data": {"crop_size": 224}}, "transfer": transfer}


def _write(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, separators=(",", ":")))


def write_many(root: Path, records: int, outcomes: int) -> int:
    """About ``records`` records: half linear and kNN of 21 pretrainings, half transfer suite runs of 12 datasets."""
    rng = random.Random(0)
    written = 0
    seeds = [None, *range(20)]
    while written < records // 2:
        seed = seeds[written % len(seeds)]
        task = "linear" if written % 2 else "knn"
        _write(root / "eval" / f"{task}_{written}" / "result.json", _classification(task, _backbone(seed), rng))
        written += 1
    run = 0
    while written < records:
        backbone = _backbone(None if run % 2 else run)
        for dataset in DATASETS[: records - written]:
            _write(root / "suite" / f"run{run}" / dataset / "result.json",
                   _transfer(dataset, backbone, outcomes, rng))
            written += 1
        run += 1
    return written


def write_large(root: Path, outcomes: int = 1_000_000) -> int:
    rng = random.Random(0)
    for name, backbone in (("moco", _backbone(0)), ("random", _backbone(None))):
        for dataset in ("cifar10", "pets"):
            _write(root / name / dataset / "result.json", _transfer(dataset, backbone, outcomes, rng))
    return 4


def time_report(root: Path, out: Path, limit: float) -> tuple[float, int | None, str]:
    """(wall seconds, exit code or None where it ran past ``limit``, last line of stderr)."""
    started = time.perf_counter()
    try:
        done = subprocess.run([str(MOCO), "report", str(root), "--out", str(out), "--formats", "md,csv"],
                              capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        return time.perf_counter() - started, None, f"killed after {limit:.0f} s"
    tail = (done.stderr.strip().splitlines() or [""])[-1]
    return time.perf_counter() - started, done.returncode, tail[:200]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=("many", "large", "both"), default="both")
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--outcomes", type=int, default=1_000)
    parser.add_argument("--limit", type=float, default=600.0, help="seconds before the report is killed")
    parser.add_argument("--keep", type=Path, help="write the records here and keep them (default: a scratch folder)")
    args = parser.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="report_scale_"))
    try:
        for case in ("many", "large") if args.case == "both" else (args.case,):
            root = base / case
            count = write_many(root, args.records, args.outcomes) if case == "many" else write_large(root)
            seconds, code, tail = time_report(root, base / f"{case}_report", args.limit)
            print(f"{case}: {count} records, {seconds:.1f} s, exit {code}; {tail}")
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
