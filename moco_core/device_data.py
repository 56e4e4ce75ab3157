"""The tensor data pipeline (``data.pipeline: tensor``): workers read bytes, the training device does the rest.

With ``data.pipeline: pil`` (the default, the official code's way) DataLoader workers decode each image with PIL
and run the two-crop augmentation per image on the CPU; on a fast GPU that is what the step waits for. Here the
workers only read each file's bytes. The training process then decodes the batch (JPEGs on the GPU with
``torchvision.io.decode_jpeg`` when training on CUDA; other formats, and everything on CPU, with torchvision's
CPU decoders) and runs the augmentation of ``moco_core.gpu_augment`` as batched tensor ops on the device. Its
random parameters are drawn from torch's global generator, which the training loop reseeds every epoch, so a
run is as reproducible as with the PIL pipeline (the two pipelines draw different random numbers).

The time spent decoding and augmenting is counted as data wait by the engine, as it is work done for the data.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torchvision.io import ImageReadMode, decode_image

from moco_core.config import AugmentConfig
from moco_core.data import DatasetError, report_undecodable
from moco_core.gpu_augment import (
    TensorTwoCrops,
    apply_params,
    decode_jpegs,
    image_sizes,
    quiet_torchvision_io,
    sample_params,
)

_JPEG_MAGIC = (0xFF, 0xD8)


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


def collate_encoded(batch: list[tuple[torch.Tensor, int, int]]) -> tuple[list[torch.Tensor], torch.Tensor,
                                                                           torch.Tensor]:
    """Files have different lengths: keep them as a list; labels and indices become tensors."""
    datas, labels, index = zip(*batch, strict=True)
    return list(datas), torch.tensor(labels), torch.tensor(index)


def is_jpeg(data: torch.Tensor) -> bool:
    return data.numel() >= 2 and (int(data[0]), int(data[1])) == _JPEG_MAGIC


def _decode_one(data: torch.Tensor, device: torch.device) -> torch.Tensor | None:
    try:
        if is_jpeg(data):
            return decode_jpegs([data], device)[0]
        with quiet_torchvision_io():
            return decode_image(data, mode=ImageReadMode.RGB).to(device, non_blocking=True)
    except Exception:  # a corrupt file can fail in many ways; the caller reports it
        return None


def decode_batch(datas: list[torch.Tensor], device: torch.device) -> list[torch.Tensor | None]:
    """RGB uint8 (3, H, W) images on ``device``, None where a file does not decode.

    JPEGs are decoded in one batched call (one nvJPEG call under CUDA); if that call fails, each is retried alone
    so that one corrupt file costs only itself.
    """
    images: list[torch.Tensor | None] = [None] * len(datas)
    jpegs = [i for i, data in enumerate(datas) if is_jpeg(data)]
    if jpegs:
        try:
            decoded: list[torch.Tensor | None] = list(decode_jpegs([datas[i] for i in jpegs], device))
        except Exception:
            decoded = [_decode_one(datas[i], device) for i in jpegs]
        for i, image in zip(jpegs, decoded, strict=True):
            images[i] = image
    for i, data in enumerate(datas):
        if not is_jpeg(data):
            images[i] = _decode_one(data, device)
    return images


class DeviceAugmentLoader:
    """Wraps a DataLoader of ``EncodedImages``: yields what the PIL pipeline yields, made on ``device``.

    ``views`` 2 gives ``((query view, key view), labels, indices)`` (moco, end2end); 1 gives ``(view, labels,
    indices)`` (memory-bank).
    """

    def __init__(self, loader: Iterable[Any], cfg: AugmentConfig, device: torch.device, *, views: int) -> None:
        if views not in (1, 2):
            raise ValueError(f"views must be 1 or 2, got {views}")
        self.loader, self.cfg, self.device, self.views = loader, cfg, device, views
        self.two_crops = TensorTwoCrops(cfg)

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def _replace_undecodable(self, images: list[torch.Tensor | None], index: torch.Tensor) -> list[torch.Tensor]:
        """Each file that did not decode is reported once and stands in as another image of its batch (the PIL
        pipeline uses the next image of the dataset instead); a batch with no decodable image stops the run."""
        bad = [i for i, image in enumerate(images) if image is None]
        if not bad:
            return images  # type: ignore[return-value]
        samples = getattr(getattr(self.loader, "dataset", None), "samples", None)
        for i in bad:
            name = samples[int(index[i])][0] if samples is not None else f"dataset item {int(index[i])}"
            report_undecodable(name, "another image of its batch")
        good = [image for image in images if image is not None]
        if not good:
            raise DatasetError(f"no image of a batch of {len(images)} could be decoded (dataset items "
                               f"{index.tolist()[:5]}...); check the files (data.verify_images checks headers only)")
        return [image if image is not None else good[i % len(good)] for i, image in enumerate(images)]

    def __iter__(self) -> Iterator[tuple[Any, torch.Tensor, torch.Tensor]]:
        for datas, labels, index in self.loader:
            images = self._replace_undecodable(decode_batch(datas, self.device), index)
            if self.views == 2:
                yield self.two_crops(images), labels, index
            else:
                params = sample_params(len(images), image_sizes(images), self.cfg)
                yield apply_params(images, params, self.cfg), labels, index
