"""The tensor data pipeline (``data.pipeline: tensor``): workers read files, the training device decodes and augments.

With ``data.pipeline: pil`` (the official code's way, and ``auto``'s choice on CPU) DataLoader workers decode each
image with PIL and run the two-crop augmentation per image on the CPU; on a fast GPU that is what the step waits
for (``auto`` takes this pipeline under CUDA). Here the workers read each file's bytes and header and apply the
rule of ``moco_core.data.image_files``, the PIL pipeline's: a refused file (empty, unidentified, over the pixel limit)
is never decoded. JPEGs that torchvision decodes to PIL's pixels (grayscale or colour, up to ``MAX_DECODE_SIDE``:
nearly every file of a photo dataset) stay bytes, and the training process decodes each batch of them (on the GPU
with ``torchvision.io.decode_jpeg`` when training on CUDA, else with its CPU decoder). Every other file PIL takes
(CMYK JPEGs, huge JPEGs at reduced scale, 16-bit PNGs, palettes, TIFF, BMP...) is decoded in the worker by the PIL
pipeline's own code, so that both pipelines take the same files and give the same pixels. The training process
then runs the augmentation of ``moco_core.data.tensor_augment`` as batched tensor ops on the device.

On CPU this happens in the training loop's own thread, between steps, with the random parameters drawn from torch's
global generator (reseeded every epoch by the training loop), so a run is as reproducible as with the PIL pipeline.

On CUDA it runs ahead of the step, in two threads: one decodes batch t+2 while the other augments batch t+1 and the
training stream runs step t. Each has its own CUDA stream, and the training stream waits for a batch's event
before it reads the views. The random parameters come from a generator of the loader's own, seeded from the global
generator when an epoch's iteration starts, so a seed still fixes the run's views.

nvJPEG's hardware decoder (A100, H100) does not wait for work already queued on the stream it is handed:
``nvjpegDecodeBatched`` may write its output before earlier kernels on that stream have run. PyTorch's caching
allocator hands a stream a block as soon as the kernels queued there that used it were *queued*, not run, so a
decode into such a block can overwrite memory those kernels still read: NaN losses within 20 steps on an H100 when
decoding ran on the training stream (see meta-pytorch/torchcodec pull request 1634, which adds a stream
synchronisation before the batched hardware decode, and pytorch/vision pull request 9606). Here the decoder only
ever allocates from its own stream, which runs nothing else: before each decode, that stream is synchronised
(so nothing queued there can be overtaken), and every decoded image is marked with ``record_stream`` for the
stream that reads it, so its block goes back to the decoder only after that reading has run. The views are handed
to the training stream the same way. No host synchronisation of the training stream is needed.

The time the training loop spends waiting for the next batch is counted as data wait by the engine.
"""

from __future__ import annotations

import contextlib
import io
import math
import queue
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from PIL import Image

from moco_core.data import image_files  # MAX_DECODE_SIDE read at each call, as the PIL pipeline reads it
from moco_core.data.data import DatasetError, report_undecodable
from moco_core.data.image_files import decode_rgb, load_rgb, open_header, reason
from moco_core.data.jpeg import decode_jpegs
from moco_core.data.tensor_augment import TensorTwoCrops, apply_params, image_sizes, sample_params
from moco_core.pretrain_config import AugmentConfig

# What a worker made of a file (see prepare): a JPEG's component count (1 or 3: bytes for the device's decoder),
# 0 (the file's image, decoded by PIL), or why the file is refused.
Plan = int | str
Batch = tuple[list[torch.Tensor], torch.Tensor, torch.Tensor, list[Plan]]


class EncodedImages(torch.utils.data.Dataset):
    """``(file bytes as a uint8 tensor, label, index)``: all a worker does is read the file."""

    def __init__(self, samples: list[tuple[str, int]]) -> None:
        self.samples = list(samples)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int, int]:
        path, label = self.samples[index]
        # Plain Python I/O: torchvision's read_file op hangs in forked DataLoader workers (torchvision 0.29).
        with open(path, "rb") as f:
            data = f.read()
        # an empty file stays an empty tensor (frombuffer refuses it); decoding then reports it
        encoded = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
        return encoded, label, index


class EncodedBatch(list):
    """A batch's files as views into one byte buffer (a list of uint8 tensors: 1-D bytes, or (3, H, W) images).

    Collated in the workers into one buffer, a batch crosses from a worker to the training process as one shared
    memory segment instead of one per file (256 a batch, a cost the training process pays for every file); it is
    cut into per-file views again there. ``pin_memory`` (the DataLoader's, under CUDA) pins that one buffer: nvJPEG
    then copies the files to the GPU from page-locked memory (a profile on an H100 showed one pageable copy per
    file in each batched decode, about 20 us of host time each).
    """

    buffer: torch.Tensor | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        return _unpack, self._packed()

    def _packed(self) -> tuple[torch.Tensor, list[tuple[int, ...]]]:
        shapes = [tuple(d.shape) for d in self]
        if self.buffer is None:
            self.buffer = torch.cat([d.reshape(-1) for d in self]) if self else torch.empty(0, dtype=torch.uint8)
        return self.buffer, shapes

    def pin_memory(self) -> EncodedBatch:
        buffer, shapes = self._packed()
        return _unpack(buffer.pin_memory(), shapes)


def _unpack(buffer: torch.Tensor, shapes: list[tuple[int, ...]]) -> EncodedBatch:
    parts = torch.split(buffer, [math.prod(shape) for shape in shapes]) if shapes else []
    batch = EncodedBatch(part.view(shape) for part, shape in zip(parts, shapes, strict=True))
    batch.buffer = buffer
    return batch


def _tensor(image: Image.Image) -> torch.Tensor:
    """An RGB PIL image as a uint8 (3, H, W) tensor."""
    return torch.from_numpy(np.array(image)).permute(2, 0, 1).contiguous()


def prepare(data: torch.Tensor) -> tuple[torch.Tensor, Plan]:
    """What a worker makes of a file's bytes (1-D uint8), with its plan.

    The header decides (``moco_core.data.image_files.open_header``, as in the PIL pipeline): a refused file gives an
    empty tensor and why; a JPEG that torchvision decodes to PIL's pixels (grayscale or colour, no longer than
    ``MAX_DECODE_SIDE``; EXIF orientation ignored by both) stays bytes, with its component count, for the device;
    any other file is decoded here by ``decode_rgb``, the PIL pipeline's decoder (0), or gives why it did not.
    """
    try:
        with open_header(io.BytesIO(data.numpy())) as img:
            if img.format == "JPEG" and img.mode in ("L", "RGB") and max(img.size) <= image_files.MAX_DECODE_SIDE:
                return data, len(img.getbands())
            return _tensor(decode_rgb(img)), 0
    except Exception as err:  # a corrupt file can fail in many ways; the training process reports it
        return torch.empty(0, dtype=torch.uint8), reason(err)


def collate_encoded(batch: list[tuple[torch.Tensor, int, int]]) -> Batch:
    """Files have different lengths: keep them as a list (one buffer when it crosses processes: EncodedBatch);
    labels and indices become tensors. Also each file's plan, made here in the worker by :func:`prepare` (reading
    256 headers, and decoding the files that are not plain JPEGs, in the training process would hold its
    interpreter)."""
    files, labels, index = zip(*batch, strict=True)
    datas, plans = zip(*(prepare(f) for f in files), strict=True)
    return EncodedBatch(datas), torch.tensor(labels), torch.tensor(index), list(plans)


def _decode_alone(data: torch.Tensor, components: int, device: torch.device) -> torch.Tensor | str:
    """One JPEG: torchvision's decode, or, where it fails, PIL's on the CPU (a JPEG feature torchvision or nvJPEG
    lacks, e.g. arithmetic coding), so that what the PIL pipeline takes, this one takes too; else why not."""
    try:
        return decode_jpegs([data], device, [components])[0]
    except Exception:  # a corrupt file can fail in many ways; PIL says why
        try:
            return _tensor(load_rgb(io.BytesIO(data.numpy()))).to(device, non_blocking=True)
        except Exception as err:
            return reason(err)


def decode_batch(datas: list[torch.Tensor], device: torch.device,
                 plans: Sequence[Plan] | None = None) -> list[torch.Tensor | str]:
    """RGB uint8 (3, H, W) images on ``device``; for a file refused or undecodable, why (a str).

    ``plans``: each file's, as ``collate_encoded`` made them in the workers (made here from the bytes when not
    given). JPEGs are decoded in one batched call (one nvJPEG call under CUDA); if that call fails, each is decoded
    alone (:func:`_decode_alone`) so that one corrupt file costs only itself.
    """
    if plans is None:
        prepared = [prepare(d) for d in datas]
        datas, plans = [d for d, _ in prepared], [p for _, p in prepared]
    images: list[torch.Tensor | str] = [""] * len(datas)
    jpegs: list[int] = []  # positions of the JPEGs left to torchvision
    counts: list[int] = []  # and their component counts
    for i, (data, plan) in enumerate(zip(datas, plans, strict=True)):
        if isinstance(plan, str):
            images[i] = plan
        elif plan == 0:  # decoded by PIL in the worker
            images[i] = data.to(device, non_blocking=True)
        else:
            jpegs.append(i)
            counts.append(plan)
    if jpegs:
        try:
            decoded: list[torch.Tensor | str] = list(decode_jpegs([datas[i] for i in jpegs], device, counts))
        except Exception:
            decoded = [_decode_alone(datas[i], count, device) for i, count in zip(jpegs, counts, strict=True)]
        for i, image in zip(jpegs, decoded, strict=True):
            images[i] = image
    return images


class DeviceAugmentLoader:
    """Wraps a DataLoader of ``EncodedImages``: yields what the PIL pipeline yields, made on ``device``.

    ``views`` 2 gives ``((query view, key view), labels, indices)`` (moco, end2end); 1 gives ``(view, labels,
    indices)`` (memory-bank). ``channels_last`` writes the views in that layout (``run.channels_last``).
    ``ahead`` (default: on CUDA) decodes and augments up to ``prefetch`` batches ahead of the one being trained
    on, in ``threads`` threads (2: one decodes while the other augments; 1: one does both). On the CPU it only
    moves the work off the training thread, which a CPU run does not gain from: it is there to test the threads
    without a GPU.
    """

    def __init__(self, loader: Iterable[Any], cfg: AugmentConfig, device: torch.device, *, views: int,
                 channels_last: bool = False, prefetch: int = 2, ahead: bool | None = None,
                 threads: int = 2) -> None:
        if views not in (1, 2):
            raise ValueError(f"views must be 1 or 2, got {views}")
        if prefetch < 1:
            raise ValueError(f"prefetch must be >= 1, got {prefetch}")
        self.loader, self.cfg, self.device, self.views = loader, cfg, device, views
        self.channels_last, self.prefetch = channels_last, prefetch
        self.seconds: Counter[str] = Counter()  # where the threads' time went (ahead only), summed over epochs
        self.ahead = device.type == "cuda" if ahead is None else ahead
        if threads not in (1, 2):
            raise ValueError(f"threads must be 1 or 2, got {threads}")
        self.threads = threads  # ahead: decode and augment in two threads, or both in one
        self.two_crops = TensorTwoCrops(cfg, channels_last=channels_last)

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def _replace_undecodable(self, images: list[torch.Tensor | str], index: torch.Tensor) -> list[torch.Tensor]:
        """Each file that was refused or did not decode is reported once, with why, and stands in as another image
        of its batch (the PIL pipeline uses the next image of the dataset instead); a batch with no decodable
        image stops the run."""
        good = [image for image in images if isinstance(image, torch.Tensor)]
        if len(good) == len(images):
            return good
        samples = getattr(getattr(self.loader, "dataset", None), "samples", None)
        for i, image in enumerate(images):
            if isinstance(image, str):
                name = samples[int(index[i])][0] if samples is not None else f"dataset item {int(index[i])}"
                report_undecodable(name, "another image of its batch", image)
        if not good:
            raise DatasetError(f"no image of a batch of {len(images)} could be decoded (dataset items "
                               f"{index.tolist()[:5]}...); check the files (data.verify_images checks headers only)")
        return [image if isinstance(image, torch.Tensor) else good[i % len(good)] for i, image in enumerate(images)]

    def _augment(self, images: list[torch.Tensor | str], index: torch.Tensor,
                 generator: torch.Generator | None) -> Any:
        decoded = self._replace_undecodable(images, index)
        if self.views == 2:
            return self.two_crops(decoded, generator)
        params = sample_params(len(decoded), image_sizes(decoded), self.cfg, generator)
        return apply_params(decoded, params, self.cfg, channels_last=self.channels_last)

    def __iter__(self) -> Iterator[tuple[Any, torch.Tensor, torch.Tensor]]:
        if self.ahead:
            return self._ahead()
        # The DataLoader's iterator is made now, not at the first batch: making it draws the workers' seed from
        # torch's RNG, and a resumed epoch restores the RNG state between iter() and its first batch
        # (engine.train_one_epoch), so the views after a resume are those the run would have drawn unstopped.
        return self._inline(iter(self.loader))

    def _inline(self, batches: Iterator[Batch]) -> Iterator[tuple[Any, torch.Tensor, torch.Tensor]]:
        for datas, labels, index, plans in batches:
            yield self._augment(decode_batch(datas, self.device, plans), index, None), labels, index

    def _ahead(self) -> Iterator[tuple[Any, torch.Tensor, torch.Tensor]]:
        """Decode and augment in two threads (each on its own CUDA stream under CUDA), ``prefetch`` ahead."""
        batches = iter(self.loader)  # here, not in a thread: creating it draws the workers' seed from torch's RNG
        generator = torch.Generator().manual_seed(int(torch.randint(0, 2**62, (1,))))
        pipeline = _Pipeline(self, batches, generator)
        try:
            yield from pipeline
        finally:
            pipeline.close()


def decode_apart(datas: list[torch.Tensor], device: torch.device, plans: Sequence[Plan] | None,
                 stream: Any) -> tuple[list[torch.Tensor | str], Any]:
    """``decode_batch`` on ``stream`` (a CUDA stream that runs nothing but decoding; None on the CPU), synchronised
    first so that nvJPEG's writes can overtake nothing (see the module docstring). Returns the images and an event
    recorded after them (None on the CPU); readers on other streams take them through :func:`hand_over`."""
    if stream is None:
        return decode_batch(datas, device, plans), None
    with torch.cuda.stream(stream):
        stream.synchronize()
        images = decode_batch(datas, device, plans)
        done = torch.cuda.Event()
        done.record(stream)
    return images, done


def hand_over(tensors: Iterable[torch.Tensor | str], event: Any, reader: Any) -> None:
    """Let stream ``reader`` read ``tensors`` made on another stream: it waits for ``event``, and each tensor's
    block returns to its own stream's pool only after ``reader``'s work on it has run (nothing on the CPU)."""
    if reader is None:
        return
    reader.wait_event(event)
    for tensor in tensors:
        if isinstance(tensor, torch.Tensor):  # not the reason a file was refused
            tensor.record_stream(reader)


_END = object()


class _Pipeline:
    """Decode and augment ahead of the consumer, in two threads joined by a bounded queue (or both in one), each
    stage on a CUDA stream of its own; the consumer's stream waits on each batch's event."""

    def __init__(self, owner: DeviceAugmentLoader, batches: Iterator[Batch], generator: torch.Generator) -> None:
        self.owner, self.batches, self.generator = owner, batches, generator
        self.device = owner.device
        self.cuda = self.device.type == "cuda"
        self.decoded: queue.Queue[Any] = queue.Queue(maxsize=1)
        self.ready: queue.Queue[Any] = queue.Queue(maxsize=owner.prefetch)
        self.stopping = threading.Event()
        # Seconds each thread spent in each part, for benchmarks/data_pipeline.py (DeviceAugmentLoader.seconds).
        self.seconds: Counter[str] = owner.seconds
        stages = [(self._decode, self.decoded), (self._augment, self.ready)] if owner.threads == 2 else [
            (self._decode_and_augment, self.ready)]
        self.threads = [threading.Thread(target=self._run, args=stage, daemon=True, name=f"moco-{stage[0].__name__}")
                        for stage in stages]
        for thread in self.threads:
            thread.start()

    def _put(self, q: queue.Queue[Any], item: Any) -> bool:
        """Put ``item`` unless the pipeline is closing; False when it is."""
        while not self.stopping.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _get(self, q: queue.Queue[Any]) -> Any:
        while not self.stopping.is_set():
            try:
                return q.get(timeout=0.1)
            except queue.Empty:
                continue
        return _END

    def _run(self, stage: Any, out: queue.Queue[Any]) -> None:
        try:
            stage(out)
        except BaseException as err:  # noqa: BLE001 (handed to the consumer, which raises it)
            self._put(out, err)
            return
        self._put(out, _END)

    def _tick(self, part: str, since: float) -> float:
        now = time.perf_counter()
        self.seconds[part] += now - since
        return now

    def _stream(self) -> tuple[Any, contextlib.AbstractContextManager[Any]]:
        """A new CUDA stream and a function giving the context that makes it current (nothing on the CPU)."""
        if not self.cuda:
            return None, contextlib.nullcontext
        stream = torch.cuda.Stream(self.device)
        return stream, lambda: torch.cuda.stream(stream)

    def _event(self, stream: Any) -> Any:
        """An event recorded on ``stream`` (None on the CPU, where every op has finished when it returns)."""
        if stream is None:
            return None
        event = torch.cuda.Event()
        event.record(stream)
        return event

    def _decode_one(self, batch: Batch, stream: Any) -> tuple[Any, ...]:
        datas, labels, index, plans = batch
        images, decoded = decode_apart(datas, self.device, plans, stream)
        return images, labels, index, decoded

    def _augment_one(self, item: tuple[Any, ...], stream: Any) -> tuple[Any, ...]:
        images, labels, index, decoded = item
        hand_over(images, decoded, stream)  # the decoder gets these blocks back once our reads have run
        views = self.owner._augment(images, index, self.generator)
        return views, labels, index, self._event(stream)

    def _decode(self, out: queue.Queue[Any]) -> None:
        stream, current = self._stream()
        with current():
            clock = time.perf_counter()
            for batch in self.batches:
                clock = self._tick("decode: loader", clock)
                item = self._decode_one(batch, stream)
                clock = self._tick("decode: nvjpeg", clock)
                if not self._put(out, item):
                    return
                clock = self._tick("decode: queue full", clock)

    def _augment(self, out: queue.Queue[Any]) -> None:
        stream, current = self._stream()
        with current():
            clock = time.perf_counter()
            while True:
                item = self._get(self.decoded)
                clock = self._tick("augment: waiting for decode", clock)
                if isinstance(item, BaseException):
                    raise item
                if item is _END:
                    return
                item = self._augment_one(item, stream)
                clock = self._tick("augment: augment", clock)
                if not self._put(out, item):
                    return
                clock = self._tick("augment: queue full", clock)

    def _decode_and_augment(self, out: queue.Queue[Any]) -> None:
        (decode_stream, decoding), (augment_stream, augmenting) = self._stream(), self._stream()
        clock = time.perf_counter()
        for batch in self.batches:
            clock = self._tick("loader", clock)
            with decoding():
                item = self._decode_one(batch, decode_stream)
            clock = self._tick("nvjpeg", clock)
            with augmenting():
                item = self._augment_one(item, augment_stream)
            clock = self._tick("augment", clock)
            if not self._put(out, item):
                return
            clock = self._tick("queue full", clock)

    def __iter__(self) -> Iterator[tuple[Any, torch.Tensor, torch.Tensor]]:
        consumer = torch.cuda.current_stream(self.device) if self.cuda else None
        while True:
            item = self._get(self.ready)
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            views, labels, index, done = item
            # the augment stream reuses these blocks only after the step has run
            hand_over(views if isinstance(views, tuple) else (views,), done, consumer)
            yield views, labels, index

    def close(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=10)
