"""benchmarks/gpu_report.sh, run on the CPU: every stage that does not need CUDA runs its real command line.

A GPU is lent to few sessions, and the script has one device call to do its work in: a stage whose arguments no
longer match the benchmark or the CLI would cost that call. Shrunk through $STEP_ARGS and $REAL_ARGS (resnet18,
32 px, a few steps) and with compilation turned off (TORCH_COMPILE_DISABLE: the stages still pass --compile), it
runs here in about a minute. The two data stages measure nvJPEG and need CUDA, so they are left out.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STAGES = ["jpegs", "tests", "decoders", "step_compiled", "real", "mocov3_vit", "mocov3_r50", "demo", "head_grid",
          "logreg", "step_eager", "step_plain_compiled", "step_eager_nchw"]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None, reason="needs bash, timeout")
def test_gpu_report_runs_every_stage_on_cpu(tmp_path: Path) -> None:
    out, run = tmp_path / "out", tmp_path / "run"
    env = {
        **os.environ, "OUT": str(out), "DATA": str(tmp_path / "jpegs"), "RUN": str(run), "N": "48",
        "BUDGET": "600", "PYTHON": sys.executable, "WORKERS": "0", "STAGES": " ".join(STAGES),
        # the step at batch 8 (2 images a BN group), one untimed step, one profiled: every step stage still runs
        "STEP_ARGS": "--arch resnet18 --image-size 32 --batch 8 --bn-groups 4 --queue-size 64 --steps 2 --device cpu",
        "STEP_WARMUP": "1",
        "REAL_ARGS": "--set model.arch=resnet18 --set optim.batch_size=16 --set model.bn_groups=2 "
                     "--set model.queue_size=32 --set augment.crop_size=32 --set run.log_every=1",
        "V3_ARGS": "--arch vit_nano_p4 --image-size 32 --batch 8 --mlp-dim 64 --steps 2 --warmup 1 --device cpu",
        "V3_R50_ARGS": "--arch resnet18 --image-size 32 --batch 8 --mlp-dim 64 --steps 2 --warmup 1 --device cpu",
        "DECODER_ARGS": "--device cpu --batch 8 --batches 2",
        # the trials as processes at once (benchmarks/demo_parallel.sh), as on the GPU
        "DEMO_PARALLEL": "2", "DEMO_ARGS": "--tasks linear --device cpu", "DEMO_ENV": "MOCO_SMOKE=1",
        "DEMO": str(tmp_path / "demo"), "PROFILE": "1",
        # the GPU's own path of each (head_grid --gpu: ResNet-50 and ViT-B/16 with 52 heads), at batch 1 on the CPU
        "GRID_ARGS": "--device cpu --gpu --batch 1 --steps 1 --warmup 0 --classes 10",
        "LOGREG_ARGS": "--device cpu --problems small --train 200 --test 100 --dim 16 --classes 4 --budget 5 "
                       "--images 2 --batch 2 --arch resnet18 --image-size 32",
        "TORCH_COMPILE_DISABLE": "1", "CUDA_VISIBLE_DEVICES": "",
    }
    res = subprocess.run(["bash", "benchmarks/gpu_report.sh"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=900)
    assert res.returncode == 0, res.stderr[-2000:]
    # Each stage prints "== NAME (...)" and then "   rc N, Ts"; every one ran (none skipped) and exited 0.
    ran = dict(re.findall(r"^== (\w+) \(.*\n   rc (\d+),", res.stdout, flags=re.M))
    assert ran == {stage: "0" for stage in STAGES}, res.stdout[-4000:]

    report = json.loads((out / "report.json").read_text())
    assert report, "gpu_table.py wrote no figures"
    table = (out / "table.md").read_text()
    # The real command's own metrics came back (the tensor pipeline is only the default under CUDA: PIL here).
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any(m.get("images_per_s", 0) > 0 for m in metrics)
    real_row = next(line for line in table.splitlines() if line.startswith("| `moco pretrain -c moco_v2_200ep"))
    assert re.search(r"\| [\d,.]+ / [\d,.]+, data wait", real_row), real_row
    # The step rows have figures for this tree, and the compiled ones ran through the same command lines.
    for row in ("eager NCHW", "official recipe", "channels_last + torch.compile (the CUDA default now)",
                "plain BN, channels_last + torch.compile", "end to end from JPEGs, tensor pipeline, compiled",
                "end to end from JPEGs, PIL pipeline", "MoCo v3 step (vit_nano_p4, 32 px, batch 8)",
                "MoCo v3 official recipe (vit_nano_p4"):
        line = next(line for line in table.splitlines() if row in line)
        assert re.search(r"\| [\d,.]+(, data wait [\d.]+%)? \|$", line), line
    ratios = [line for line in table.splitlines() if "MoCo v3 step over its official recipe" in line]
    assert len(ratios) == 2 and all(re.search(r"\| [\d.]+x \|$", line) for line in ratios), ratios
    # The real command's windows after its first, against the synthetic step; the profiles of the timed runs.
    settled = next(line for line in table.splitlines() if "median of its windows after the first" in line)
    assert re.search(r"\| [\d,]+, data wait [\d.]+%; \d+% of [\d,]+ \|$", settled), settled
    assert report["real_after_compile"]["windows"] >= 2
    for line in (line for line in table.splitlines() if line.startswith("| profile,")):
        assert re.search(r"\| [\d.]+ / [\d.]+ \(\d+%\) / no kernels \|$", line), line  # the CPU: no CUDA streams
    # The demo's trials came back as the report's rows: each backbone's linear top-1 over 2 (smoke) trials.
    # The decoders, on the CPU: torchvision's libjpeg-turbo (and nvImageCodec's, where it is installed).
    decoders = [line for line in table.splitlines() if line.startswith("| JPEG decode alone: torchvision")]
    assert len(decoders) == 1 and re.search(r"\| [\d,]+ \|$", decoders[0]), decoders
    demo = [line for line in table.splitlines() if line.startswith("| CUDA demo: linear top1")]
    assert len(demo) == 3 and all(line.endswith("(n 2) |") for line in demo), demo
    # The new evaluations' rows (issues 48, 49): the grid against one head on both backbones, the sweep beside
    # scikit-learn's, the extraction's images/s.
    grid = [line for line in table.splitlines() if line.startswith("| head grid: ")]
    assert [line.split()[3] for line in grid] == ["resnet50", "vit_base"], grid
    assert all(re.search(r"1 head / 52 heads, images/s \(time ratio\) \| - \| [\d,]+ / [\d,]+ \([\d.]+x\) \|$", line)
               for line in grid), grid
    sweep = next(line for line in table.splitlines() if line.startswith("| transfer sweep, 45 L2 values"))
    assert re.search(r"\| [\d.]+ s, test [\d.]+; scikit-learn [\d.]+ s .*; [\d.]+x \|$", sweep), sweep
    assert re.search(r"^\| frozen extraction, resnet18 32 px, batch 2, fp32 \| - \| [\d,]+ \|$", table, flags=re.M)
    with tarfile.open(out / "logs.tgz") as logs:
        names = {Path(name).name for name in logs.getnames()}
    assert {f"{stage}.log" for stage in STAGES} <= names


def test_gpu_busy_time_counts_overlapping_kernels_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """pretrain_step.busy_union: kernels on two streams at once count once; gaps not at all (by hand: 0-2 and 1-3
    overlap to 0-3, 5-6 apart, 5.5-5.8 inside it: 4)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from pretrain_step import busy_union

    assert busy_union([(5.0, 6.0), (0.0, 2.0), (1.0, 3.0), (5.5, 5.8)]) == 4.0
    assert busy_union([]) == 0.0
