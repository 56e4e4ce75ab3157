"""Throughput of the data pipelines alone (no training step), and the nvJPEG stream hazard, on CUDA.

    python benchmarks/data_pipeline.py --data DIR [--batch 256] [--workers 15] [--batches 30] [--json]

Rows (images/s, each over ``--batches`` batches after 3 untimed ones, clocks read after a device synchronise):
- ``nvjpeg``: ``decode_jpegs`` of file bytes already in memory, one batched nvJPEG call per batch, on a stream of
  its own synchronised before each call (as the pipeline decodes); no augmentation.
- ``tensor_ahead``: ``data.pipeline: tensor`` as training runs it on CUDA: DataLoader workers read bytes, one
  thread decodes, another crops and augments both views (MoCo v2) at ``--crop`` px, ahead of the consumer.
- ``tensor_ahead1``: the same with both stages in one thread.
- ``tensor_inline``: the same work in the consumer's thread, one batch after the other.
- ``pil``: ``data.pipeline: pil``: PIL decoding and the two-crop augmentation in the workers, pinned batches copied
  to the GPU.
- ``loader``: the DataLoader alone (workers read the files' bytes), nothing decoded.
- ``augment``: the two crops alone, on one batch decoded beforehand (GPU time and host time per batch reported).

``--profile``: torch.profiler over 3 batches of the ``augment`` row: the kernels and host ops that cost most.

``--hazard N``: N trials of decoding a batch on a stream that has work queued (kernels that allocate and free
blocks of the decoded images' size behind a slow matrix product), first the unsafe way (on the training stream,
as this project did until the fix), then through the pipeline's decoder (its own stream, synchronised first,
record_stream for the readers). A trial is corrupt when the queued work's result or a decoded image differs from
what a fully synchronised run gives.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from moco_core.config import load_config
from moco_core.data.augment import TwoCrops, build_pretrain_transform
from moco_core.data.data import ImageDataset, scan_images
from moco_core.data.device_data import DeviceAugmentLoader, EncodedImages, collate_encoded, decode_apart, hand_over
from moco_core.data.jpeg import decode_jpegs
from moco_core.pretrain_config import PretrainConfig


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="an image folder (train/<class>/*.JPEG)")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--workers", type=int, default=15)
    p.add_argument("--crop", type=int, default=224)
    p.add_argument("--batches", type=int, default=30, help="timed batches per row")
    p.add_argument("--rows", default="nvjpeg,tensor_ahead,tensor_ahead1,tensor_inline,pil,loader,augment")
    p.add_argument("--switch-interval", type=float, default=None, help="sys.setswitchinterval (s), GIL handoffs")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--pin", action=argparse.BooleanOptionalAction, default=True,
                   help="tensor rows: the DataLoader pins each batch's byte buffer (as training does under CUDA)")
    p.add_argument("--hazard", type=int, default=0, help="trials of the stream-hazard check (0: skip)")
    p.add_argument("--json", action="store_true")
    return p.parse_args()


def timed(batches: Any, count: int, batch: int, warmup: int = 3) -> float:
    """images/s over ``count`` items of the iterator ``batches`` after ``warmup`` untimed ones."""
    for _ in range(warmup):
        next(batches)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(count):
        next(batches)
    torch.cuda.synchronize()
    return count * batch / (time.perf_counter() - start)


def forever(iterable: Any) -> Any:
    while True:
        yield from iterable


def nvjpeg_rate(samples: list[tuple[str, int]], args: argparse.Namespace) -> float:
    datas = [torch.frombuffer(bytearray(Path(p).read_bytes()), dtype=torch.uint8)
             for p, _ in samples[: args.batch * (args.batches + 3)]]
    stream = torch.cuda.Stream()

    def decode() -> Any:
        with torch.cuda.stream(stream):
            for start in range(0, len(datas) - args.batch + 1, args.batch):
                stream.synchronize()
                yield decode_jpegs(datas[start:start + args.batch], "cuda")

    return timed(forever(decode()), args.batches, args.batch)


def tensor_rate(samples: list[tuple[str, int]], cfg: PretrainConfig, args: argparse.Namespace, ahead: bool,
                threads: int = 2) -> float:
    loader = DataLoader(EncodedImages(samples), batch_size=args.batch, shuffle=True, drop_last=True,
                        num_workers=args.workers, persistent_workers=True, collate_fn=collate_encoded,
                        pin_memory=args.pin)
    views = DeviceAugmentLoader(loader, cfg.augment, torch.device("cuda"), views=2, channels_last=True, ahead=ahead,
                                threads=threads)
    if args.profile and ahead:  # every thread's host ops: where the augment thread's time goes in the pipeline
        from torch.profiler import ProfilerActivity, profile

        batches = forever(views)
        timed(batches, 3, args.batch)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            rate = timed(batches, args.batches, args.batch, warmup=0)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30, max_name_column_width=50))
    else:
        rate = timed(forever(views), args.batches, args.batch)
    if ahead:
        print(f"tensor_ahead ({threads} threads), seconds: " +
              ", ".join(f"{k} {v:.2f}" for k, v in views.seconds.items()))
    return rate


def loader_rate(samples: list[tuple[str, int]], args: argparse.Namespace) -> float:
    loader = DataLoader(EncodedImages(samples), batch_size=args.batch, shuffle=True, drop_last=True,
                        num_workers=args.workers, persistent_workers=True, collate_fn=collate_encoded)
    return timed(forever(loader), args.batches, args.batch)


def augment_rate(samples: list[tuple[str, int]], cfg: PretrainConfig, args: argparse.Namespace) -> dict[str, float]:
    from moco_core.data.tensor_augment import TensorTwoCrops

    datas = [torch.frombuffer(bytearray(Path(p).read_bytes()), dtype=torch.uint8) for p, _ in samples[:args.batch]]
    images = decode_jpegs(datas, "cuda")
    two_crops, generator = TensorTwoCrops(cfg.augment, channels_last=True), torch.Generator().manual_seed(0)
    for _ in range(3):
        two_crops(images, generator)
    torch.cuda.synchronize()
    start, host = time.perf_counter(), 0.0
    for _ in range(args.batches):
        t0 = time.perf_counter()
        two_crops(images, generator)
        host += time.perf_counter() - t0
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    result = {"images_per_s": args.batches * args.batch / elapsed, "host_ms_per_batch": host * 1000 / args.batches,
              "ms_per_batch": elapsed * 1000 / args.batches}
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                two_crops(images, generator)
            torch.cuda.synchronize()
        averages = prof.key_averages()
        print(averages.table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=60))
        print(averages.table(sort_by="self_cpu_time_total", row_limit=20, max_name_column_width=60))
    return result


def pil_rate(samples: list[tuple[str, int]], cfg: PretrainConfig, args: argparse.Namespace) -> float:
    dataset = ImageDataset(samples, TwoCrops(build_pretrain_transform(cfg.augment)))
    loader = DataLoader(dataset, batch_size=args.batch, shuffle=True, drop_last=True, num_workers=args.workers,
                        pin_memory=True, persistent_workers=True)

    def to_gpu() -> Any:
        for (q, k), _, _ in forever(loader):
            yield q.cuda(non_blocking=True), k.cuda(non_blocking=True)

    return timed(to_gpu(), args.batches, args.batch)


def _queued_work(seed: torch.Tensor) -> torch.Tensor:
    """A slow product, then a chain of small kernels whose temporaries (``seed``'s size, that of a decoded image)
    are freed while still queued: the blocks a decode issued right after could be handed."""
    big = torch.randn(8192, 8192, device="cuda")
    (big @ big).sum()  # about 1 ms of work ahead of the chain
    x = seed
    for _ in range(200):
        x = x * 1.0001 + 0.5  # a new block each time; the previous one is freed with its reads still queued
    del big
    return x.sum()


def hazard(samples: list[tuple[str, int]], args: argparse.Namespace) -> dict[str, int]:
    datas = [torch.frombuffer(bytearray(Path(p).read_bytes()), dtype=torch.uint8) for p, _ in samples[:64]]
    torch.cuda.synchronize()
    reference = [img.cpu() for img in decode_jpegs(datas, "cuda")]
    elements = reference[0].numel() // 4  # float32 temporaries as large as a decoded image
    seed = torch.rand(elements, device="cuda", generator=torch.Generator("cuda").manual_seed(0))
    expected = float(_queued_work(seed))
    torch.cuda.synchronize()
    counts = {"trials": args.hazard, "unsafe_corrupt": 0, "safe_corrupt": 0}
    for safe in (False, True):
        for _ in range(args.hazard):
            total = _queued_work(seed)
            if safe:  # the pipeline's own decoder and hand-over
                images, decoded = decode_apart(datas, torch.device("cuda"), None, torch.cuda.Stream())
                hand_over(images, decoded, torch.cuda.current_stream())
            else:
                images = decode_jpegs(datas, "cuda")  # on the caller's stream, with work queued on it
            torch.cuda.synchronize()
            bad = float(total) != expected or any(not torch.equal(a.cpu(), b) for a, b in zip(images, reference,
                                                                                            strict=True))
            counts["safe_corrupt" if safe else "unsafe_corrupt"] += int(bad)
    return counts


def main() -> None:
    args = parse_args()
    if args.switch_interval:
        import sys

        sys.setswitchinterval(args.switch_interval)
    cfg = load_config(PretrainConfig, "moco_v2_200ep", [f"augment.crop_size={args.crop}"], flags={"data": {
        "path": args.data}})
    samples = scan_images(Path(args.data), split="train", verify=False, workers=args.workers).samples
    result: dict[str, Any] = {"device": torch.cuda.get_device_name(), "batch": args.batch, "workers": args.workers,
                              "crop": args.crop, "images": len(samples)}
    rows = args.rows.split(",")
    if "nvjpeg" in rows:
        result["nvjpeg"] = nvjpeg_rate(samples, args)
    if "tensor_ahead" in rows:
        result["tensor_ahead"] = tensor_rate(samples, cfg, args, ahead=True)
    if "tensor_ahead1" in rows:
        result["tensor_ahead1"] = tensor_rate(samples, cfg, args, ahead=True, threads=1)
    if "tensor_inline" in rows:
        result["tensor_inline"] = tensor_rate(samples, cfg, args, ahead=False)
    if "pil" in rows:
        result["pil"] = pil_rate(samples, cfg, args)
    if "loader" in rows:
        result["loader"] = loader_rate(samples, args)
    if "augment" in rows:
        result["augment"] = augment_rate(samples, cfg, args)
    if args.hazard:
        result["hazard"] = hazard(samples, args)
    for key in ("nvjpeg", "tensor_ahead", "tensor_ahead1", "tensor_inline", "pil", "loader"):
        if key in result:
            print(f"{key:14s} {result[key]:9.0f} images/s")
    if "augment" in result:
        print("augment        {images_per_s:9.0f} images/s, {ms_per_batch:.1f} ms a batch, of which host "
              "{host_ms_per_batch:.1f} ms".format(**result["augment"]))
    if "hazard" in result:
        print(f"hazard: {result['hazard']}")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
