"""Throughput of one full MoCo pretraining step (images/s), on CPU or CUDA, unchanged.

What is measured: the step of ``moco_core.run.engine.train_one_epoch`` itself (the benchmark calls it), i.e. per batch
forward of the query encoder, momentum update, shuffled-BN forward of the key encoder, InfoNCE logits,
F.cross_entropy, backward, SGD step, ``moco.enqueue(keys)`` and the engine's running loss/accuracy sums. The model
is ``MocoMethod``'s, i.e. ``build_moco(ModelConfig(...), world_size=1)`` as a real single-process run builds it,
so split/shuffled BN is what that run uses. ``--warmup`` steps run first (not timed); then ``--steps`` steps are
timed, with a CUDA synchronize before the clock is read.

Data (``--data``): ``synthetic`` = random tensors already on the device (pure step speed, no loading);
``embedded`` or a folder = real PNG/JPEG decoding with the MoCo v2 two-crop augmentation at ``--image-size``
through a DataLoader with ``--workers``; the time blocked waiting for the next batch is reported as a fraction of
the total (``data_wait_fraction``, as the engine computes it). With few images an epoch boundary (workers refill
their prefetch) can fall inside the timed steps, as it does in a real run.

Peak memory: CUDA ``max_memory_allocated`` (reset after warm-up); on CPU the peak RSS of the main process over
its whole life (``ru_maxrss``; DataLoader workers not included).

Queue share: the ops that touch the K-sized queue (the l_neg matmul q @ queue, its backward, and the enqueue) are
timed again alone, in a loop at the same N, C, K; ``queue_fraction`` = their time / step time. ``head_ms`` also
counts everything else that grows with K (concatenation, cross-entropy over 1+K logits and its backward, argmax).

Run from the repository root:
    .venv/bin/python benchmarks/pretrain_step.py --arch resnet18 --image-size 32 --batch 128
    .venv/bin/python benchmarks/pretrain_step.py --arch resnet50 --image-size 224 --batch 256 --device cuda --json
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import resource
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from reference import ReferenceMoCo, reference_step  # benchmarks/reference.py, beside this script
from torch.utils.data import DataLoader

from moco_core.config import ARCHS, ConfigError, load_config
from moco_core.data.augment import TwoCrops, build_pretrain_transform
from moco_core.data.data import ImageDataset, scan_images
from moco_core.data.device_data import DeviceAugmentLoader, EncodedImages, collate_encoded
from moco_core.model.methods import MocoMethod, build_moco
from moco_core.model.moco import MoCo, contrastive_logits
from moco_core.pretrain_config import ModelConfig, PretrainConfig, RunConfig
from moco_core.run.engine import top1, train_one_epoch
from moco_core.run.progress import MetricsWriter, Progress
from moco_core.run.runtime import resolve_data, resolve_device
from moco_core.run.train import speed_up, use_fused_kernels

Batch = tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor, torch.Tensor]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", default="resnet18", choices=ARCHS)
    p.add_argument("--image-size", type=int, default=32, help="crop size fed to the encoders (px)")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--queue-size", type=int, default=65536, help="K")
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--mlp", action="store_true", help="MoCo v2 MLP head")
    p.add_argument("--shuffle-bn", default="shuffle", choices=("shuffle", "sync", "none", "off"),
                   help="off is an alias of none (the config's name)")
    p.add_argument("--bn-groups", type=int, default=8)
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    p.add_argument("--amp", action=argparse.BooleanOptionalAction, default=True, help="bf16 autocast (CUDA only)")
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    p.add_argument("--data", action="append", default=None,
                   help="synthetic (default), embedded, or an image folder, optionally prefixed with its pipeline "
                        "(tensor:DIR, pil:DIR; tensor1:DIR runs the tensor pipeline's two stages in one thread); "
                        "repeat to time several sources on one model (one compilation)")
    p.add_argument("--pipeline", default="pil", choices=("pil", "tensor"),
                   help="for real data without a prefix: pil = PIL augmentation in workers; tensor = decode and "
                        "augment on the device")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile both encoders (run.compile; default: on under CUDA)")
    p.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=None,
                   help="channels_last encoders and images (run.channels_last; default: on under CUDA)")
    p.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1), help="DataLoader workers")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (CPU)")
    p.add_argument("--reference", action="store_true",
                   help="also time the official recipe (benchmarks/reference.py) on the same data and report the ratio")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="after each timed run, N more steps under torch.profiler: the GPU's kernel time per step "
                   "by stream (the step's, the tensor pipeline's), how busy the GPU was, the costliest kernels")
    p.add_argument("--json", action="store_true", help="also print one JSON line with every figure")
    args = p.parse_args(argv)
    sources = []
    for data in args.data or ["synthetic"]:
        pipeline, sep, path = data.partition(":")
        sources.append((path, pipeline) if sep and pipeline in ("pil", "tensor", "tensor1") else (data, args.pipeline))
    args.data, args.pipeline = [d for d, _ in sources], [p for _, p in sources]
    args.shuffle_bn = "none" if args.shuffle_bn == "off" else args.shuffle_bn
    if args.steps < 1 or args.warmup < 0 or args.batch < 1 or args.image_size < 8:
        p.error("need --steps >= 1, --warmup >= 0, --batch >= 1, --image-size >= 8")
    if args.shuffle_bn == "shuffle" and args.bn_groups > 1 and args.batch % args.bn_groups:
        p.error(f"--batch {args.batch} is not divisible by --bn-groups {args.bn_groups}")
    return args


def synthetic_batches(batch: int, size: int, device: torch.device) -> Iterator[Batch]:
    """The same device-resident random batch forever: no loading, no host-to-device copy."""
    im_q = torch.randn(batch, 3, size, size, device=device)
    im_k = torch.randn(batch, 3, size, size, device=device)
    labels = torch.zeros(batch, dtype=torch.long, device=device)
    index = torch.arange(batch, device=device)
    while True:
        yield (im_q, im_k), labels, index


def image_batches(args: argparse.Namespace, device: torch.device, data: str, pipeline: str,
                  channels_last: bool = False) -> Iterator[Batch]:
    """Real images with the MoCo v2 two-crop augmentation, epoch after epoch through one DataLoader.

    ``pipeline`` "pil": PIL decoding and augmentation in the workers; "tensor": the workers read bytes, and
    decoding and augmentation run on ``device`` (``moco_core.data.device_data``), as ``data.pipeline: tensor``.
    """
    overrides = [f"augment.crop_size={args.image_size}", f"data.path={json.dumps(data)}"]
    cfg: PretrainConfig = load_config(PretrainConfig, "moco_v2_200ep", overrides)
    images = scan_images(resolve_data(data), split="train", workers=max(args.workers, 1))
    if len(images.samples) < args.batch:
        raise SystemExit(f"--batch {args.batch} is larger than the dataset ({len(images.samples)} images)")
    if pipeline.startswith("tensor"):
        loader = DataLoader(EncodedImages(images.samples), batch_size=args.batch, shuffle=True, drop_last=True,
                            num_workers=args.workers, persistent_workers=args.workers > 0, collate_fn=collate_encoded,
                            pin_memory=device.type == "cuda")
        source: Iterable[Batch] = DeviceAugmentLoader(loader, cfg.augment, device, views=2,
                                                      channels_last=channels_last,
                                                      threads=1 if pipeline == "tensor1" else 2)
    else:
        dataset = ImageDataset(images.samples, TwoCrops(build_pretrain_transform(cfg.augment)))
        source = DataLoader(dataset, batch_size=args.batch, shuffle=True, num_workers=args.workers, drop_last=True,
                            pin_memory=device.type == "cuda", persistent_workers=args.workers > 0)
    while True:
        yield from source


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_loop(fn: Callable[[], object], device: torch.device, iters: int, warmup: int = 3) -> float:
    """Mean milliseconds of ``fn()`` over ``iters`` calls after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    sync(device)
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    sync(device)
    return (time.perf_counter() - start) * 1000 / iters


def queue_costs(moco: MoCo, batch: int, device: torch.device, iters: int) -> tuple[float, float]:
    """(queue_ms, head_ms) at the run's N, C, K, in fp32 as the model computes them.

    queue_ms: l_neg = q @ queue, its backward (grad of q = grad_l_neg @ queue^T), and enqueue.
    head_ms: all the K-dependent work: contrastive_logits, cross-entropy, backward, accuracy, enqueue.
    """
    dim = moco.queue.shape[0]
    q = F.normalize(torch.randn(batch, dim, device=device), dim=1).requires_grad_(True)
    k = F.normalize(torch.randn(batch, dim, device=device), dim=1)
    grad_l_neg = torch.randn(batch, moco.queue_size, device=device)

    def queue_part() -> None:
        l_neg = torch.einsum("nc,ck->nk", q, moco.queue)
        l_neg.backward(grad_l_neg)
        moco.enqueue(k)

    def head_part() -> None:
        logits, labels = contrastive_logits(q, k, moco.queue, moco.temperature)
        F.cross_entropy(logits, labels).backward()
        top1(logits.detach(), labels)
        moco.enqueue(k)

    return timed_loop(queue_part, device, iters), timed_loop(head_part, device, iters)


def peak_memory(device: torch.device) -> tuple[float, str]:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20, "cuda_max_memory_allocated"
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return rss / (2**20 if sys.platform == "darwin" else 2**10), "cpu_peak_rss_main_process"


def machine(device: torch.device) -> dict[str, Any]:
    info: dict[str, Any] = {"processor": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
                            "torch": torch.__version__, "cuda_device": None}
    try:  # platform.processor() is often just the architecture on Linux
        model = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name"))
        info["cpu_model"] = model.split(":", 1)[1].strip()
    except (OSError, StopIteration):
        pass
    if device.type == "cuda":
        info["cuda_device"] = torch.cuda.get_device_name(device)
    return info


def run_steps(method: MocoMethod, source: Iterator[Batch], optimizer: torch.optim.Optimizer, steps: int,
              device: torch.device, amp: bool, channels_last: bool) -> float:
    """``steps`` steps of the engine's own loop; returns its data-wait fraction."""
    batches: Iterable[Batch] = itertools.islice(source, steps)
    quiet_progress, no_metrics = Progress(steps, enabled=False), MetricsWriter(Path(os.devnull), enabled=False)
    stats = train_one_epoch(method.module, method, batches, optimizer, epoch=0, epochs=1, step=0,
                            lr=optimizer.defaults["lr"], device=device, amp=amp, log_every=steps + 1,
                            progress=quiet_progress, metrics=no_metrics, channels_last=channels_last)
    return stats.data_wait


def sgd(params: Iterable[torch.nn.Parameter], batch: int) -> torch.optim.SGD:
    """The paper's optimizer: lr 0.03 per 256 images, momentum 0.9, weight decay 1e-4."""
    return torch.optim.SGD(params, lr=0.03 * batch / 256, momentum=0.9, weight_decay=1e-4)


def measure(run: Callable[[int], float], args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """``run(n)`` does n steps and returns their data-wait fraction: ``args.warmup`` untimed steps (their time is
    reported: with --compile it is mostly compiling), then ``args.steps`` timed ones (peak memory counted from
    there on CUDA)."""
    start = time.perf_counter()
    if args.warmup:
        run(args.warmup)
    sync(device)
    warmup_s = time.perf_counter() - start
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    data_wait = run(args.steps)
    sync(device)
    elapsed = time.perf_counter() - start
    memory_mb, memory_kind = peak_memory(device)
    return {"images_per_s": args.batch * args.steps / elapsed, "step_ms": elapsed * 1000 / args.steps,
            "data_wait_fraction": data_wait, "peak_memory_mb": memory_mb, "peak_memory_kind": memory_kind,
            "warmup_s": warmup_s}


def busy_union(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by the union of (start, end) intervals (kernels overlapping across streams count
    once)."""
    covered, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop > end:
            covered += stop - max(start, end)
            end = stop
    return covered


def profile_steps(run: Callable[[int], float], steps: int, device: torch.device) -> dict[str, Any]:
    """``run(steps)`` under torch.profiler: where the GPU's time goes once the step is compiled and the pipeline
    warm. Per step: the wall time, the kernel time of each CUDA stream (the training stream and those the tensor
    pipeline decodes and crops on), the time at least one kernel ran (``busy_ms``; its ratio to the wall time:
    ``busy_fraction``, near 1 when the GPU is the bound), and the ten kernels with the most time."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    sync(device)
    start = time.perf_counter()
    with profile(activities=activities) as prof:
        run(steps)
        sync(device)
    wall_ms = (time.perf_counter() - start) * 1000
    kernels = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    streams: dict[str, float] = {}
    by_name: dict[str, float] = {}
    for e in kernels:
        took = e.time_range.end - e.time_range.start  # microseconds
        streams[str(e.device_resource_id)] = streams.get(str(e.device_resource_id), 0.0) + took / 1000 / steps
        by_name[e.name] = by_name.get(e.name, 0.0) + took / 1000 / steps
    busy_ms = busy_union([(e.time_range.start, e.time_range.end) for e in kernels]) / 1000 / steps
    top = sorted(by_name.items(), key=lambda item: -item[1])[:10]
    return {"steps": steps, "wall_ms_per_step": wall_ms / steps, "busy_ms": busy_ms,
            "busy_fraction": busy_ms / (wall_ms / steps), "stream_kernel_ms": streams,
            "top_kernels_ms": [{"name": name[:120], "ms": ms} for name, ms in top]}


def reference_run(args: argparse.Namespace, cfg: ModelConfig, device: torch.device) -> dict[str, float]:
    """Time the official recipe (fp32, Python momentum loop, queue clone, host-side pointer; real images through
    PIL in DataLoader workers) on the same kind of data as our run."""
    if args.queue_size % args.batch:
        raise SystemExit(f"--reference: the official recipe needs --queue-size ({args.queue_size}) to be a multiple "
                         f"of --batch ({args.batch})")
    data = args.data[0]
    source = (synthetic_batches(args.batch, args.image_size, device) if data == "synthetic"
              else image_batches(args, device, data, "pil"))
    torch.manual_seed(0)
    encoder = build_moco(cfg, world_size=1).encoder  # the same network and BN handling as ours
    model = ReferenceMoCo(encoder, dim=args.dim, queue_size=args.queue_size, momentum=cfg.momentum,
                          temperature=cfg.temperature, shuffle_keys=args.shuffle_bn == "shuffle").to(device)
    optimizer = sgd(model.parameters(), args.batch)

    def steps(n: int) -> float:
        wait, start = 0.0, time.perf_counter()
        for _ in range(n):
            fetch = time.perf_counter()
            (im_q, im_k), _, _ = next(source)
            im_q, im_k = im_q.to(device), im_k.to(device)
            wait += time.perf_counter() - fetch
            reference_step(model, optimizer, im_q, im_k)
        sync(device)
        return wait / (time.perf_counter() - start)

    return measure(steps, args, device)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    try:
        device = resolve_device(args.device)
    except ConfigError as err:
        raise SystemExit(f"error: {err}") from None
    if args.threads and device.type == "cpu":
        torch.set_num_threads(args.threads)
    amp = args.amp and device.type == "cuda"
    torch.backends.cudnn.benchmark = True  # as a real run on CUDA (moco_core.run.train.resolve_device)
    torch.manual_seed(0)
    cfg = ModelConfig(arch=args.arch, dim=args.dim, mlp=args.mlp, queue_size=args.queue_size,
                      shuffle_bn=args.shuffle_bn, bn_groups=args.bn_groups)
    method = MocoMethod(cfg, world_size=1, num_classes=0, dataset_size=0)  # its module is build_moco(cfg, world_size=1)
    moco = method.module.to(device)
    speed = speed_up(method, device, RunConfig(channels_last=args.channels_last, compile=args.compile))
    optimizer = sgd(moco.parameters(), args.batch)
    use_fused_kernels(optimizer, device)

    runs = []
    for data, pipeline in zip(args.data, args.pipeline, strict=True):
        synthetic = data == "synthetic"
        source = (synthetic_batches(args.batch, args.image_size, device) if synthetic
                  else image_batches(args, device, data, pipeline, speed.channels_last))
        def steps(n: int, source: Iterator[Batch] = source) -> float:
            return run_steps(method, source, optimizer, n, device, amp, speed.channels_last)

        timed = measure(steps, args, device)
        if args.profile:
            timed["profile"] = profile_steps(steps, args.profile, device)
        runs.append({"data": data, "workers": None if synthetic else args.workers,
                     "pipeline": None if synthetic else pipeline, **timed})
    step_ms = runs[0]["step_ms"]
    queue_ms, head_ms = queue_costs(moco, args.batch, device, iters=max(args.steps, 10))

    result = {
        "machine": machine(device), "arch": args.arch, "image_size": args.image_size, "batch": args.batch,
        "queue_size": args.queue_size, "dim": args.dim, "mlp": args.mlp, "shuffle_bn": args.shuffle_bn,
        "bn_groups": args.bn_groups, "device": str(device), "amp": amp, "threads": torch.get_num_threads(),
        "channels_last": speed.channels_last, "compiled": speed.compiled,
        **runs[0], "runs": runs,
        "queue_ms": queue_ms, "queue_fraction": queue_ms / step_ms,
        "head_ms": head_ms, "head_fraction": head_ms / step_ms, "steps": args.steps, "warmup": args.warmup,
    }
    if args.reference:
        ref = reference_run(args, cfg, device)
        result["reference"] = ref
        result["speedup_vs_reference"] = result["images_per_s"] / ref["images_per_s"]
    m = result["machine"]
    print(f"MoCo pretrain step: {args.arch} {args.image_size}px batch {args.batch} K {args.queue_size} "
          f"dim {args.dim}{' mlp' if args.mlp else ''} bn {args.shuffle_bn}/{args.bn_groups}")
    print(f"  device {device} ({m['cuda_device'] or m.get('cpu_model') or m['processor']}, "
          f"{result['threads']} threads) amp {'bf16' if amp else 'off'}, torch {m['torch']}, "
          f"channels_last {speed.channels_last}, compiled {speed.compiled}")
    for run in runs:
        print(f"  data {run['data']}" + ("" if run["pipeline"] is None else
                                         f" ({args.workers} workers, {run['pipeline']} pipeline)") +
              f", {args.steps} timed steps after {args.warmup} warm-up ({run['warmup_s']:.1f} s)")
        print(f"    {run['images_per_s']:.1f} images/s, {run['step_ms']:.1f} ms/step, "
              f"data wait {run['data_wait_fraction']:.1%}, peak memory {run['peak_memory_mb']:.0f} MiB "
              f"({run['peak_memory_kind']})")
        if "profile" in run:
            prof = run["profile"]
            streams = ", ".join(f"{k}: {v:.1f}" for k, v in sorted(prof["stream_kernel_ms"].items()))
            print(f"    profile of {prof['steps']} more steps: {prof['wall_ms_per_step']:.1f} ms/step, GPU busy "
                  f"{prof['busy_ms']:.1f} ms ({prof['busy_fraction']:.0%}); kernel ms/step by stream {{{streams}}}")
            for kernel in prof["top_kernels_ms"][:5]:
                print(f"      {kernel['ms']:6.2f} ms  {kernel['name'][:90]}")
    print(f"  queue ops (l_neg fwd+bwd, enqueue) {queue_ms:.2f} ms = {result['queue_fraction']:.1%} of the step; "
          f"all K-dependent head work {head_ms:.2f} ms = {result['head_fraction']:.1%}")
    if args.reference:
        ref = result["reference"]
        print(f"  reference (official recipe: fp32, Python momentum loop, queue clone, host pointer"
              f"{'' if args.data[0] == 'synthetic' else ', PIL augmentation in workers'}): "
              f"{ref['images_per_s']:.1f} images/s, {ref['step_ms']:.1f} ms/step, data wait "
              f"{ref['data_wait_fraction']:.1%}, peak memory {ref['peak_memory_mb']:.0f} MiB")
        print(f"  speed-up over the reference: {result['speedup_vs_reference']:.2f}x")
    if args.json:
        print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
