"""JPEG decoders side by side on the same files: which one takes the decode off the GPU's multiprocessors.

    python benchmarks/jpeg_decoders.py --data DIR [--batch 256] [--batches 20] [--json]

The tensor pipeline decodes with torchvision's batched nvJPEG call (``moco_core.data.jpeg.decode_jpegs``), whose
kernels share the streaming multiprocessors with the training step (issue 50: about 21 ms of the pipeline's GPU
work beside the step's 64 ms on an H100). Hopper has hardware JPEG decoders that nvImageCodec drives
(``pip install nvidia-nvimgcodec-cu13 nvidia-nvjpeg``, optional: nothing here needs it). Rows, images/s over
``--batches`` batches after 2 untimed ones, each on bytes already in memory:

- ``torchvision``: ``decode_jpegs`` as the pipeline calls it (nvJPEG, hybrid CPU/GPU backend);
- ``nvimgcodec_<backend>``: nvImageCodec's batched decode restricted to one backend (``hw_gpu_only``: the
  hardware decoder; ``gpu_only``: CUDA kernels; ``hybrid_cpu_gpu``; ``cpu_only``: libjpeg-turbo threads);
- ``<row>+load``: the same decode while a matrix product loop keeps the multiprocessors busy on another stream,
  with that loop's own rate: a decoder that needs no multiprocessors leaves the loop's rate where it was alone
  (``matmul alone``).

Each nvImageCodec row's images are checked against torchvision's on the CPU (mean absolute difference in grey
levels; decoders differ by IDCT and upsampling, a few levels, never more). Without CUDA (``--device cpu``, the dry
run) only the CPU rows run.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from moco_core.data.jpeg import decode_jpegs

BACKENDS = ("hw_gpu_only", "gpu_only", "hybrid_cpu_gpu", "cpu_only")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="a folder of JPEGs (searched recursively)")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--batches", type=int, default=20)
    p.add_argument("--device", default="cuda")
    p.add_argument("--threads", type=int, default=0, help="nvImageCodec's CPU threads (0: one a core)")
    p.add_argument("--json", action="store_true")
    return p.parse_args()


def nvimgcodec_decoder(backend: str, device: str, threads: int) -> Any:
    """nvImageCodec's decoder restricted to ``backend``; None where the package or the backend is missing."""
    try:
        from nvidia import nvimgcodec
    except ImportError:
        return None
    kind = getattr(nvimgcodec.BackendKind, backend.upper())
    device_id = nvimgcodec.NVIMGCODEC_DEVICE_CPU_ONLY if device == "cpu" else torch.cuda.current_device()
    try:
        return nvimgcodec.Decoder(device_id=device_id, max_num_cpu_threads=threads,
                                  backends=[nvimgcodec.Backend(kind)])
    except Exception as err:  # noqa: BLE001 (a backend this machine lacks: the row says why)
        print(f"nvimgcodec {backend}: {err}")
        return None


def nvimgcodec_decode(decoder: Any, datas: list[bytes], device: str) -> list[torch.Tensor]:
    """Decode to RGB ``(3, H, W)`` uint8 tensors on ``device`` (nvImageCodec gives HWC)."""
    from nvidia import nvimgcodec

    params = nvimgcodec.DecodeParams(color_spec=nvimgcodec.ColorSpec.SRGB, apply_exif_orientation=False)
    images = decoder.decode([nvimgcodec.CodeStream(d) for d in datas], params=params)
    if any(img is None for img in images):
        raise RuntimeError(f"{sum(img is None for img in images)} of {len(images)} images not decoded")
    if device == "cpu":
        return [torch.from_numpy(np.asarray(img.cpu())).permute(2, 0, 1) for img in images]
    return [torch.as_tensor(img, device=device).permute(2, 0, 1) for img in images]


def rate(decode: Any, batches: list[Any], batch: int, device: str) -> float:
    for b in batches[:2]:
        decode(b)
    if device != "cpu":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for b in batches[2:]:
        decode(b)
    if device != "cpu":
        torch.cuda.synchronize()
    return (len(batches) - 2) * batch / (time.perf_counter() - start)


class MatmulLoad:
    """Matrix products on a stream of their own in a thread, counting how many finish: the multiprocessors' load."""

    def __init__(self) -> None:
        self.stream = torch.cuda.Stream()
        self.a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        self.done = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        with torch.cuda.stream(self.stream):
            while not self.stop.is_set():
                for _ in range(8):
                    self.a @ self.a
                self.stream.synchronize()
                self.done += 8

    def __enter__(self) -> MatmulLoad:
        self.thread.start()
        time.sleep(0.5)
        self.start, self.count = time.perf_counter(), self.done
        return self

    def __exit__(self, *exc: object) -> None:
        self.per_s = (self.done - self.count) / (time.perf_counter() - self.start)
        self.stop.set()
        self.thread.join()


def main() -> None:
    args = parse_args()
    files = sorted(Path(args.data).rglob("*.JPEG")) + sorted(Path(args.data).rglob("*.jpg"))
    need = args.batch * (args.batches + 2)
    if len(files) < need:
        raise SystemExit(f"{args.data}: {len(files)} JPEGs, need {need} (--batch x (--batches + 2))")
    raw = [f.read_bytes() for f in files[:need]]
    batches_b = [raw[i:i + args.batch] for i in range(0, need, args.batch)]
    batches_t = [[torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in bs] for bs in batches_b]
    cuda = args.device != "cpu"
    rows: dict[str, Any] = {}
    reference = decode_jpegs(batches_t[0][:8], "cpu")

    def torchvision_decode(b: list[torch.Tensor]) -> list[torch.Tensor]:
        return decode_jpegs(b, args.device)

    decoders: dict[str, Any] = {"torchvision": (torchvision_decode, batches_t)}
    for backend in BACKENDS:
        if backend != "cpu_only" and not cuda:
            continue
        dec = nvimgcodec_decoder(backend, args.device, args.threads)
        if dec is not None:
            decoders[f"nvimgcodec_{backend}"] = (lambda b, dec=dec: nvimgcodec_decode(dec, b, args.device), batches_b)
    for name, (decode, batches) in decoders.items():
        try:
            out = decode(batches[0][:8])
            if cuda:
                torch.cuda.synchronize()
            diff = max(float((o.cpu().float() - r.float()).abs().mean()) for o, r in zip(out, reference, strict=True))
            rows[name] = {"images_per_s": rate(decode, batches, args.batch, args.device), "mean_abs_diff": diff}
            if cuda:
                torch.cuda.synchronize()
                with MatmulLoad() as load:
                    loaded = rate(decode, batches, args.batch, args.device)
                rows[name] |= {"images_per_s_loaded": loaded, "matmul_per_s_beside": load.per_s}
        except Exception as err:  # noqa: BLE001 (one decoder failing leaves the others' rows)
            rows[name] = {"error": f"{type(err).__name__}: {err}"[:300]}
        print(name, rows[name], flush=True)
    if cuda:
        with MatmulLoad() as load:
            time.sleep(3)
        rows["matmul alone"] = {"matmul_per_s": load.per_s}
        rows["device"] = torch.cuda.get_device_name()
    rows["torch"] = torch.__version__
    if args.json:
        print(json.dumps({"jpeg_decoders": rows}))


if __name__ == "__main__":
    main()
