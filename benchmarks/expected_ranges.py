"""Write reports/expected.csv from the records of a ``moco demo --trials N`` directory (N >= 2).

Every row of the demo's report that reports.expected can check (random init, our MoCo and supervised
pretrainings, on the embedded presets) becomes one line per metric: its mean, its sample standard deviation over
the trials, n, and where it was measured. ``moco report`` then flags runs of the same presets outside
``mean ± max(3 std, 1)``.

    .venv/bin/moco demo --trials 3 --output-dir runs/demo3          # about 3 x 30 minutes on 2 CPU cores
    .venv/bin/python benchmarks/expected_ranges.py runs/demo3 --measured "3 trials, moco demo, 2 CPU cores"
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reports.expected import COLUMNS, EXPECTED_CSV, key_of  # noqa: E402
from reports.records import load_records  # noqa: E402
from reports.summary import group  # noqa: E402


def expected_rows(root: Path, measured: str, min_trials: int = 2) -> list[dict[str, str]]:
    """The expected.csv lines for every checkable row of the report of ``root`` with at least ``min_trials``."""
    records, _ = load_records([str(root)])
    main, _ = group(records)
    rows = []
    for entry in main:
        key = key_of(entry)
        if key is None or entry.n < min_trials:
            continue
        for metric, stat in entry.metrics.items():
            rows.append({**dict(zip(COLUMNS[:10], key, strict=True)), "metric": metric, "mean": f"{stat.mean:.4f}",
                         "std": f"{stat.std:.4f}", "n": str(stat.n), "measured": measured})
    return rows


def to_csv(rows: list[dict[str, str]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="a moco demo --trials directory")
    parser.add_argument("--measured", required=True, help="where and how, e.g. '3 trials, moco demo, 2 CPU cores'")
    parser.add_argument("--out", type=Path, default=EXPECTED_CSV)
    args = parser.parse_args()
    rows = expected_rows(args.root, args.measured)
    if not rows:
        sys.exit(f"error: no row of {args.root} has 2 or more trials of a checkable preset")
    args.out.write_text(to_csv(rows), encoding="utf-8")
    for row in rows:
        print(f"{row['task']:6s} {row['backbone']:10s} {row['metric']:10s} {float(row['mean']):6.2f} ± "
              f"{float(row['std']):5.2f} (n={row['n']})")
    print(f"wrote {len(rows)} rows to {args.out}")


if __name__ == "__main__":
    main()
