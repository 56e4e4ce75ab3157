#!/usr/bin/env bash
# Issue #20's table for the current tree, on one CUDA GPU, in one run of at most $BUDGET seconds (default 560):
#   OUT=/tmp/gpu bash benchmarks/gpu_report.sh            # from the repository root
# Stages run in order of importance; one that would not fit in what is left of the budget is skipped (and says so);
# $STAGES names the ones to run (default: all).
# Each writes $OUT/<stage>.log (and .json); the table comes last (benchmarks/gpu_table.py: $OUT/table.md and
# $OUT/report.json), and the logs end in $OUT/logs.tgz.
# Needs torch, torchvision, pyyaml, typer, pandas, pytest, and timm for the MoCo v3 stage (pip install -e '.[vit]');
# nothing is downloaded. The JPEGs are generated here (benchmarks/make_jpegs.py: $N files, default 25600, in $DATA).
# $STEP_ARGS (the step's shape: R50, 224 px, batch 256, v2 head), $REAL_ARGS (appended to the real command) and
# $V3_ARGS and $V3_R50_ARGS (the MoCo v3 stages': ViT-B/16 and ResNet-50, 224 px, batch 256) and $DEMO_ARGS
# (the CUDA demo's: 3 trials, linear) are there to shrink a run;
# tests/benchmarks/test_gpu_report.py runs this script on the CPU that way, so that its command lines stay in step
# with the benchmarks and the CLI between GPU sessions.
set -u
OUT=${OUT:-/tmp/gpu_report}
DATA=${DATA:-/tmp/moco_jpegs}
N=${N:-25600}
BUDGET=${BUDGET:-560}
PY=${PYTHON:-python3}
WORKERS=${WORKERS:-$(( $(nproc) - 1 ))}
STAGES=${STAGES:-jpegs tests decoders step_compiled data data_switch real mocov3_vit mocov3_r50 demo logreg head_grid \
step_plain_compiled step_eager step_eager_nchw}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
start=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - start) )); }

# stage NAME SECONDS_NEEDED COMMAND...: run COMMAND with a timeout of what is left, output to $OUT/NAME.log; the
# last line of the output that is a JSON object goes to $OUT/NAME.json.
stage() {
  local name=$1 need=$2; shift 2
  case " $STAGES " in *" $name "*) ;; *) return ;; esac
  local remaining; remaining=$(left)
  if [ "$remaining" -lt "$need" ]; then
    echo "== $name: skipped, ${remaining}s left of the budget, needs about ${need}s" | tee "$OUT/$name.log"
    return
  fi
  echo "== $name ($(date +%T), ${remaining}s left)"
  local t0; t0=$(date +%s)
  timeout "$remaining" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "   rc $rc, $(( $(date +%s) - t0 ))s"
  grep '^{' "$OUT/$name.log" | tail -n 1 >"$OUT/$name.json"
  [ -s "$OUT/$name.json" ] || rm -f "$OUT/$name.json"
  tail -n 4 "$OUT/$name.log" | sed 's/^/   /' | cut -c1-400
}

read -r -a step_args <<<"${STEP_ARGS:---arch resnet50 --image-size 224 --batch 256 --mlp --steps 30}"
# $STEP_WARMUP: the untimed steps before the timed ones, of every step stage (default: 5 compiled, 3 eager)
read -r -a real_args <<<"${REAL_ARGS:-}"
STEP=(benchmarks/pretrain_step.py "${step_args[@]}" --json)

{ nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
  "$PY" -c "import torch, torchvision; print('torch', torch.__version__, 'torchvision', torchvision.__version__, \
'cuda', torch.version.cuda, torch.cuda.get_device_name())"; nproc; } >"$OUT/env.log" 2>&1
cat "$OUT/env.log"
[ -d "$DATA/train" ] || stage jpegs 60 "$PY" benchmarks/make_jpegs.py "$DATA" "$N"
stage tests 150 "$PY" -m pytest -q -m gpu -p no:cacheprovider tests/moco_core
# The JPEG decoders side by side (issue 50's lever: Hopper's hardware decoders through nvImageCodec, where the
# optional nvidia-nvimgcodec-cu13 and nvidia-nvjpeg wheels are installed), alone and beside a matrix product loop.
stage decoders 60 "$PY" benchmarks/jpeg_decoders.py --data "$DATA" ${DECODER_ARGS:-} --json
# One compiled model (split BN, 8 groups: the single-process shuffled BN) timed on synthetic data, then end to
# end from the JPEGs through both pipelines; after each, $PROFILE steps under torch.profiler (where the GPU's time
# goes: the step's stream against the pipeline's).
# $STEP_DATA: which of synthetic, tensor, tensor1 (its pipeline in one thread) and pil run (default: all).
step_data=()
for d in ${STEP_DATA:-synthetic tensor tensor1 pil}; do
  if [ "$d" = synthetic ]; then step_data+=(--data synthetic); else step_data+=(--data "$d:$DATA"); fi
done
stage step_compiled 240 "$PY" "${STEP[@]}" --compile --warmup "${STEP_WARMUP:-5}" --workers "$WORKERS" \
  --profile "${PROFILE:-8}" "${step_data[@]}"
stage data 90 "$PY" benchmarks/data_pipeline.py --data "$DATA" --workers "$WORKERS" --hazard 5 --json \
  --rows "${DATA_ROWS:-nvjpeg,tensor_ahead,tensor_ahead1,tensor_inline,pil,loader,augment}"
stage data_switch 40 "$PY" benchmarks/data_pipeline.py --data "$DATA" --workers "$WORKERS" --switch-interval 0.0005 \
  --rows tensor_ahead,tensor_ahead1
RUN=${RUN:-/tmp/moco_real_run}
rm -rf "$RUN"
# The real command: its logged windows after the first (the compilation's) against the compiled synthetic step.
stage real 150 "$PY" -m cli pretrain -c moco_v2_200ep --data "$DATA" --set optim.epochs=1 --set run.log_every=10 \
  --workers "$WORKERS" --output-dir "$RUN" "${real_args[@]}"
[ -f "$RUN/metrics.jsonl" ] && cp "$RUN/metrics.jsonl" "$OUT/real_metrics.jsonl"
# MoCo v3 (issue 34): the ViT-B/16 step as `moco pretrain -c mocov3_vit_base_300ep` runs it on one GPU (bf16,
# torch.compile, flash attention), then the official moco-v3 recipe (fp16 + GradScaler, eager) on the same network.
read -r -a v3_args <<<"${V3_ARGS:---arch vit_base --image-size 224 --batch 256 --steps 20 --warmup 5}"
stage mocov3_vit 240 "$PY" benchmarks/mocov3_gpu_step.py "${v3_args[@]}" --json
read -r -a v3_r50_args <<<"${V3_R50_ARGS:---arch resnet50 --image-size 224 --batch 256 --steps 20 --warmup 5}"
stage mocov3_r50 200 "$PY" benchmarks/mocov3_gpu_step.py "${v3_r50_args[@]}" --json
# Issue #17's CUDA half: the demo's trials with CUDA's defaults (bf16, channels_last, compiled, tensor pipeline).
DEMO=${DEMO:-/tmp/moco_demo_cuda}
read -r -a demo_args <<<"${DEMO_ARGS:---trials 3 --tasks linear --device cuda}"
read -r -a demo_env <<<"${DEMO_ENV:-}"  # MOCO_SMOKE=1 for the CPU dry run (tests/benchmarks/test_gpu_report.py)
# DEMO_PARALLEL=N: the N trials run as N processes at once (benchmarks/demo_parallel.sh), then one --trials N
# run writes the report; $DEMO_ARGS then leaves out --trials.
if [ -n "${DEMO_PARALLEL:-}" ]; then
  stage demo 240 env "${demo_env[@]}" PYTHON="$PY" bash benchmarks/demo_parallel.sh "$DEMO_PARALLEL" "$DEMO" \
    "${demo_args[@]}"
  cp "$DEMO"/seed_*.log "$OUT/" 2>/dev/null
else
  stage demo 240 env "${demo_env[@]}" "$PY" -m cli demo --output-dir "$DEMO" "${demo_args[@]}"
fi
for f in report/report.csv report/report.md demo.json; do [ -f "$DEMO/$f" ] && cp "$DEMO/$f" "$OUT/demo_$(basename "$f")"; done
# Each evaluation's result.json, so that the trials a stopped demo finished still count.
[ -d "$DEMO" ] && (cd "$DEMO" && find . -name result.json | tar czf "$OUT/demo_results.tgz" -T -)
# Issue 49: the transfer protocol's 45-value L-BFGS sweep on the GPU beside scikit-learn's on this machine's CPU
# (where it is installed), and the frozen extraction's images/s; before it, issue 48: one linear head against the
# 52-head grid on one frozen pass (ResNet-50 and ViT-B/16, batch 1,024). $LOGREG_ARGS and $GRID_ARGS shrink them.
sk=(); "$PY" -c "import sklearn" 2>/dev/null || sk=(--skip-sklearn)
read -r -a grid_args <<<"${GRID_ARGS:---device cuda --gpu}"
stage head_grid 120 "$PY" benchmarks/head_grid.py "${grid_args[@]}"
read -r -a logreg_args <<<"${LOGREG_ARGS:---device cuda --problems small,food101 --budget 30 --images 4096 --batch 256}"
stage logreg 120 "$PY" benchmarks/logreg_sweep.py "${logreg_args[@]}" "${sk[@]}"
stage step_eager 60 "$PY" "${STEP[@]}" --no-compile --warmup "${STEP_WARMUP:-3}" --reference
stage step_plain_compiled 200 "$PY" "${STEP[@]}" --compile --warmup "${STEP_WARMUP:-5}" --shuffle-bn none
stage step_eager_nchw 40 "$PY" "${STEP[@]}" --no-compile --no-channels-last --warmup "${STEP_WARMUP:-3}"
"$PY" benchmarks/gpu_table.py "$OUT" | tee "$OUT/table.md"
# Few files come back from a device call: the logs travel as one archive beside report.json and table.md.
(cd "$OUT" && tar czf logs.tgz --remove-files ./*.log ./*.jsonl $(ls ./*.json | grep -v report.json) 2>/dev/null)
