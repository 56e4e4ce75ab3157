#!/usr/bin/env bash
# `moco demo --trials N` with its trials as N processes at once, for a GPU that one trial's small steps leave
# mostly idle:  bash benchmarks/demo_parallel.sh N OUTPUT_DIR [moco demo options but --trials, --seed]
# Trial s runs `moco demo --trials 1 --seed s --output-dir OUTPUT_DIR/seed_<s>` (the folder --trials N gives it,
# logged to OUTPUT_DIR/seed_<s>.log); then `moco demo --trials N` finds every step done and writes the report.
set -u
n=$1 out=$2; shift 2
PY=${PYTHON:-python3}
mkdir -p "$out"
pids=()
for ((s = 0; s < n; s++)); do
  "$PY" -m cli demo --output-dir "$out/seed_$s" --seed "$s" --trials 1 "$@" >"$out/seed_$s.log" 2>&1 &
  pids+=($!)
done
rc=0
for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
for ((s = 0; s < n; s++)); do tail -n 3 "$out/seed_$s.log" | sed "s/^/seed $s: /"; done
[ "$rc" -eq 0 ] || { echo "a trial exited $rc"; exit "$rc"; }
exec "$PY" -m cli demo --output-dir "$out" --trials "$n" "$@"
