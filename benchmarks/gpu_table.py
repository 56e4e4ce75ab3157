"""Issue #20's table from the files benchmarks/gpu_report.sh writes: ``python benchmarks/gpu_table.py OUT``.

Prints Markdown (this tree beside the figures measured at 5671961 on one H100 80GB HBM3, as the issue gives them)
and writes everything it read to ``OUT/report.json``.
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
from pathlib import Path
from typing import Any


def load(out: Path, name: str) -> dict[str, Any]:
    path = out / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def real_run(out: Path) -> dict[str, Any]:
    """The real command's last logged window and its epoch summary (metrics.jsonl)."""
    path = out / "real_metrics.jsonl"
    if not path.is_file():
        return {}
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    windows = [line for line in lines if "loss" in line]
    epochs = [line for line in lines if "epoch_loss" in line]
    return {"last_window": windows[-1] if windows else None, "epoch": epochs[-1] if epochs else None,
            "windows": windows}


def after_compile(windows: list[dict[str, Any]], step: dict[str, Any]) -> dict[str, Any]:
    """The real command's logged windows after its first (which holds the compilation): median images/s and data
    wait, and that median's ratio to the compiled synthetic step (issue #37's target: 0.95, data wait under 3%)."""
    later = [w for w in windows[1:] if isinstance(w.get("images_per_s"), (int, float))]
    if not later:
        return {}
    rate = statistics.median(w["images_per_s"] for w in later)
    waits = [w["data_wait"] for w in later if isinstance(w.get("data_wait"), (int, float))]
    return {"windows": len(later), "images_per_s": rate, "data_wait": statistics.median(waits) if waits else None,
            "ratio": rate / step["images_per_s"] if step.get("images_per_s") else None}


def profile_row(run: dict[str, Any]) -> str:
    """A timed run's profile (pretrain_step.py --profile): wall and GPU-busy ms a step, kernel ms by stream."""
    prof = run.get("profile")
    if not prof:
        return "-"
    streams = ", ".join(f"{ms:.1f}" for _, ms in sorted(prof["stream_kernel_ms"].items(), key=lambda kv: -kv[1]))
    streams = streams or "no kernels"
    return f"{prof['wall_ms_per_step']:.1f} / {prof['busy_ms']:.1f} ({prof['busy_fraction']:.0%}) / {streams}"


def demo_rows(out: Path) -> list[tuple[str, str, str]]:
    """The CUDA demo's report (report.csv): each backbone's mean +- std over its trials, task by task."""
    path = out / "demo_report.csv"
    if not path.is_file():
        return [("`moco demo --trials 3 --tasks linear --device cuda`", "not measured", "not run")]
    with path.open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["origin"] == "ours" and r["metric"] in ("top1", "AP50", "AP")]
    shown = []
    for r in rows:
        spread = f" +- {float(r['std']):.1f}" if r["std"] else ""
        shown.append((f"CUDA demo: {r['task']} {r['metric']}, {r['method']}", "-",
                      f"{float(r['mean']):.1f}{spread} (n {r['n']})"))
    return shown


def decoder_rows(decoders: dict[str, Any]) -> list[tuple[str, str, str]]:
    """benchmarks/jpeg_decoders.py: each decoder's images/s alone and beside a matrix product loop, with that loop's
    rate beside it (a decoder that leaves the multiprocessors free leaves the loop's rate as it is alone)."""
    rows = decoders.get("jpeg_decoders", {})
    alone = rows.get("matmul alone", {}).get("matmul_per_s")
    shown = []
    for name, row in rows.items():
        if not isinstance(row, dict) or name == "matmul alone":
            continue
        if "error" in row:
            shown.append((f"JPEG decode alone: {name}", "-", row["error"][:120]))
            continue
        beside = row.get("matmul_per_s_beside")
        load = (f"; beside a matmul loop {rate(row.get('images_per_s_loaded'))}, the loop at "
                f"{beside / alone:.0%} of its rate alone" if beside and alone else "")
        shown.append((f"JPEG decode alone: {name} (mean abs diff to libjpeg-turbo {row['mean_abs_diff']:.2f})", "-",
                       rate(row.get("images_per_s")) + load))
    return shown


def logreg_rows(logreg: dict[str, Any]) -> list[tuple[str, str, str]]:
    """benchmarks/logreg_sweep.py (issue 49): the 45-value sweep and refit, ours on the device beside scikit-learn's
    on the host's CPU, each problem's seconds and test top-1; the frozen extraction's images/s."""
    if not logreg:
        return [("transfer sweep (`benchmarks/logreg_sweep.py`)", "-", "not run")]
    shown = []
    for name, row in logreg.get("problems", {}).items():
        ours, sk = row["ours"], row.get("sklearn")
        shape = f"{row['train']:,} x {row['dim']}, {row['classes']} classes"
        now = f"{ours['total_s_extrapolated']:.1f} s, test {ours['test_top1']:.2f}"
        if sk:
            now += (f"; scikit-learn {sk['total_s_extrapolated']:.1f} s ({sk['note']}), test {sk['test_top1']:.2f}; "
                    f"{row['speedup']:.1f}x")
        shown.append((f"transfer sweep, 45 L2 values + refit, {name} ({shape})", "-", now))
    ext = logreg.get("extraction")
    if ext:
        shown.append((f"frozen extraction, {ext['arch']} {ext['image_size']} px, batch {ext['batch']}, "
                      f"{ext['precision']}", "-", rate(ext["images_per_s"])))
    return shown


def grid_rows(grid: dict[str, Any]) -> list[tuple[str, str, str]]:
    """benchmarks/head_grid.py (issue 48): each setting's one head against the grid, images/s and the time ratio."""
    if not grid:
        return [("linear head grid (`benchmarks/head_grid.py`)", "-", "not run")]
    shown = []
    for setting in grid.get("settings", []):
        one, many = setting["one_head"], setting["grid"]
        memory = (f"; peak {one['peak_memory_mib'] / 1024:.1f} / {many['peak_memory_mib'] / 1024:.1f} GiB"
                  if "peak_memory_mib" in one and "peak_memory_mib" in many else "")
        shown.append((f"head grid: {many.get('arch', '')} {setting['setting']}, 1 head / {many['heads']} heads, "
                      "images/s (time ratio)", "-",
                      f"{rate(one['images_per_s'])} / {rate(many['images_per_s'])} "
                      f"({setting['time_ratio']:.2f}x){memory}"))
    return shown


def tail(out: Path, name: str) -> str:
    path = out / f"{name}.log"
    lines = path.read_text(errors="replace").strip().splitlines() if path.is_file() else []
    return lines[-1] if lines else "not run"


def rate(value: Any) -> str:
    return f"{value:,.0f}" if isinstance(value, (int, float)) else "-"


def v3_rows(v3: dict[str, Any], arch: str) -> list[tuple[str, str, str]]:
    """A MoCo v3 stage (benchmarks/mocov3_gpu_step.py): ours, the official recipe, their ratio (target 1.5x)."""
    ours, ref = v3.get("ours", {}), v3.get("reference", {})
    shape = f"{v3.get('arch', arch)}, {v3.get('image_size', 224)} px, batch {v3.get('batch', 256)}"
    extra = " + flash attention" if arch.startswith("vit") else ", channels_last"
    memory = "/".join(f"{r['peak_memory_gib']:.1f}" if isinstance(r.get("peak_memory_gib"), float) else "-"
                      for r in (ours, ref))
    return [
        (f"MoCo v3 step ({shape}), bf16 + torch.compile{extra}", "-", rate(ours.get("images_per_s"))),
        (f"MoCo v3 official recipe ({shape}), fp16 + GradScaler, eager", "-", rate(ref.get("images_per_s"))),
        (f"speed-up of the MoCo v3 step over its official recipe ({shape}; target 1.5x)", "-",
         f"{v3['ratio']:.2f}x" if "ratio" in v3 else "-"),
        (f"MoCo v3 ({shape}): compile warm-up s; peak GiB ours / official", "-",
         f"{ours.get('warmup_s', float('nan')):.0f}; {memory}"),
    ]


def main() -> None:
    out = Path(sys.argv[1])
    compiled, eager, plain, nchw = (load(out, n) for n in ("step_compiled", "step_eager", "step_plain_compiled",
                                                            "step_eager_nchw"))
    data, real = load(out, "data"), real_run(out)
    v3, v3_r50 = load(out, "mocov3_vit"), load(out, "mocov3_r50")
    runs = {(r["data"] if r["pipeline"] is None else r["pipeline"]): r for r in compiled.get("runs", [])}
    synthetic, tensor, pil = runs.get("synthetic", {}), runs.get("tensor", {}), runs.get("pil", {})
    tensor1 = runs.get("tensor1", {})
    reference = eager.get("reference", {})
    window, epoch = real.get("last_window") or {}, real.get("epoch") or {}
    settled = after_compile(real.get("windows") or [], synthetic)

    def wait(run: dict[str, Any]) -> str:
        value = run.get("data_wait_fraction", run.get("data_wait"))
        return f", data wait {value:.1%}" if isinstance(value, (int, float)) else ""

    rows = [
        ("step, synthetic, split BN 8 groups, eager NCHW (5671961's default path)", "1,759",
         rate(nchw.get("images_per_s"))),
        ("official recipe rebuilt (`--reference`: fp32, per-parameter momentum, queue clone)", "1,184",
         rate(reference.get("images_per_s"))),
        ("step, split BN, eager channels_last", "1,032", rate(eager.get("images_per_s"))),
        ("step, split BN, channels_last + torch.compile (the CUDA default now)", "did not compile in 8 min",
         rate(synthetic.get("images_per_s"))),
        ("step, plain BN, channels_last + torch.compile", "4,130", rate(plain.get("images_per_s"))),
        (f"compile warm-up ({compiled.get('warmup', 5)} steps), split BN / plain BN, s", "100 (plain)",
         f"{synthetic.get('warmup_s', float('nan')):.0f} / {plain.get('warmup_s', float('nan')):.0f}"),
        ("peak GPU memory, compiled split BN step, GiB", "13.2 (eager)",
         f"{synthetic.get('peak_memory_mb', float('nan')) / 1024:.1f}"),
        ("speed-up of the compiled step over the official recipe", "1.34x (eager)",
         f"{synthetic['images_per_s'] / reference['images_per_s']:.2f}x" if synthetic and reference else "-"),
        ("end to end from JPEGs, tensor pipeline, compiled step", "NaN within 20 steps",
         rate(tensor.get("images_per_s")) + wait(tensor)),
        ("end to end from JPEGs, tensor pipeline in one thread, compiled step", "-",
         rate(tensor1.get("images_per_s")) + wait(tensor1)),
        ("end to end from JPEGs, PIL pipeline, compiled step", "891, data wait 37%",
         rate(pil.get("images_per_s")) + wait(pil)),
        ("`moco pretrain -c moco_v2_200ep --data DIR` (default: tensor on CUDA), last logged window / epoch",
         "1,145 (PIL), 38%",
         f"{rate(window.get('images_per_s'))} / {rate(epoch.get('images_per_s'))}" + wait(epoch)),
        ("the real command: median of its windows after the first (compilation), data wait; ratio to the compiled "
         "synthetic step (target 95%, wait < 3%)", "2,494 (last window) / 3,866 = 65%",
         f"{rate(settled.get('images_per_s'))}{wait(settled)}; {settled['ratio']:.0%} of "
         f"{rate(synthetic.get('images_per_s'))}" if settled.get("ratio") else "-"),
        ("profile, compiled step, synthetic: wall / GPU-busy ms a step (busy share) / kernel ms by stream", "-",
         profile_row(synthetic)),
        ("profile, end to end, tensor pipeline: wall / GPU-busy ms a step (busy share) / kernel ms by stream", "-",
         profile_row(tensor)),
        ("pipeline alone: nvJPEG batched decode", "11,300", rate(data.get("nvjpeg"))),
        ("pipeline alone: decode + two crops, tensor (ahead, threads)", "1,479", rate(data.get("tensor_ahead"))),
        ("pipeline alone: decode + two crops, tensor (ahead, one thread)", "-", rate(data.get("tensor_ahead1"))),
        ("pipeline alone: decode + two crops, tensor (inline)", "-", rate(data.get("tensor_inline"))),
        ("pipeline alone: PIL two crops in workers", "1,181", rate(data.get("pil"))),
        ("nvJPEG hazard: corrupt trials, unsafe decode / our decoder", "NaN every run",
         "{unsafe_corrupt} / {safe_corrupt} of {trials}".format(**data["hazard"]) if "hazard" in data else "-"),
        ("`pytest -m gpu tests/moco_core`", "1 failure", tail(out, "tests")),
        *decoder_rows(load(out, "decoders")),
        *v3_rows(v3, "vit_base"),
        *v3_rows(v3_r50, "resnet50"),
        *demo_rows(out),
        *logreg_rows(load(out, "logreg")),
        *grid_rows(load(out, "head_grid")),
    ]
    device = (compiled.get("machine") or eager.get("machine") or {}).get("cuda_device") or data.get("device", "?")
    env = (out / "env.log").read_text().strip().splitlines() if (out / "env.log").is_file() else []
    print(f"GPU report: {device}; {' | '.join(env[1:3])}")
    print()
    print("| images/s unless said | at 5671961 (issue #20, H100) | this tree |")
    print("|---|---|---|")
    for name, before, now in rows:
        print(f"| {name} | {before} | {now} |")
    report = {"device": device, "env": env, "rows": [{"what": n, "before": b, "now": v} for n, b, v in rows],
              "step_compiled": compiled, "step_eager": eager, "step_plain_compiled": plain, "step_eager_nchw": nchw,
              "data": data, "decoders": load(out, "decoders"), "real": real,
              "real_after_compile": settled, "mocov3_vit": v3, "mocov3_r50": v3_r50,
              "logreg": load(out, "logreg"), "head_grid": load(out, "head_grid")}
    (out / "report.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
