"""JPEG bytes to images: the frame header's component count, and decoding on the CPU (libjpeg-turbo) or, batched,
on CUDA (nvJPEG) through ``torchvision.io.decode_jpeg``. The tensor pipeline (``moco_core.data.device_data``) reads
files as bytes in its workers and decodes them here, on the training device."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Sequence

import torch
from torchvision.io import ImageReadMode, decode_jpeg

_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # start-of-frame markers (not DHT, JPG, DAC)
_STANDALONE_MARKERS = frozenset(range(0xD0, 0xD8)) | {0x01}  # RSTn and TEM carry no length
_DEPRECATION = "The image decoding and encoding capabilities of TorchVision are deprecated"


def jpeg_num_components(data: torch.Tensor) -> int:
    """The number of colour components in a JPEG's frame header (1 gray, 3 YCbCr/RGB, 4 CMYK/YCCK)."""
    buf = memoryview(data.contiguous().cpu().numpy()).cast("B")
    if bytes(buf[:2]) != b"\xff\xd8":
        raise ValueError("not a JPEG stream (no SOI marker)")
    pos = 2
    while pos + 4 <= len(buf):
        if buf[pos] != 0xFF:
            raise ValueError(f"corrupt JPEG header at byte {pos}")
        marker = buf[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
        elif marker in _STANDALONE_MARKERS:
            pos += 2
        elif marker in _SOF_MARKERS:
            if pos + 10 > len(buf):
                break
            return int(buf[pos + 9])  # marker 2, length 2, precision 1, height 2, width 2, then the count
        elif marker in (0xDA, 0xD9):  # start of scan or end of image before a frame header
            break
        else:
            pos += 2 + (buf[pos + 2] << 8 | buf[pos + 3])
    raise ValueError("JPEG stream has no frame header")


@contextlib.contextmanager
def quiet_torchvision_io() -> Iterator[None]:
    """Silence the warning torchvision 0.29 gives on every decode call (its image IO moves to TorchCodec)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_DEPRECATION, category=DeprecationWarning)
        yield


def _decode_rgb(datas: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """``torchvision.io.decode_jpeg`` of a list, as RGB, on ``device`` (its deprecation warning silenced)."""
    with quiet_torchvision_io():
        # EXIF orientation ignored, as by the official code's PIL loader and by the PIL pipeline (torchvision's
        # default, said here because the two pipelines must agree on it)
        return list(decode_jpeg(datas, mode=ImageReadMode.RGB, device=device, apply_exif_orientation=False))


def decode_jpegs(datas: Sequence[torch.Tensor], device: torch.device | str = "cpu",
                 components: Sequence[int] | None = None) -> list[torch.Tensor]:
    """Decode JPEG bytes (uint8 1-D CPU tensors) to uint8 ``(3, H, W)`` RGB images on ``device``.

    On CUDA the images are decoded in one batched nvJPEG call; grayscale JPEGs come out as 3 equal channels.
    nvJPEG converts 4-component (CMYK/YCCK) JPEGs to RGB only when asked to (torchvision does not ask), so those
    are decoded on the CPU and copied to the device (``components``: each file's count from its frame header,
    when the caller has it; read here otherwise). On the CPU, libjpeg-turbo decodes every kind.

    nvJPEG's hardware decoder does not wait for the work queued on the current stream before writing into the
    output it allocates there: call this on a stream that has nothing pending (``moco_core.data.device_data`` decodes
    on a stream of its own, synchronised before each call).
    """
    device = torch.device(device)
    datas = [d.cpu() for d in datas]
    if not datas:
        return []
    if device.type != "cuda":
        return _decode_rgb(datas, device)
    counts = list(components) if components is not None else [jpeg_num_components(d) for d in datas]
    on_cpu = [count == 4 for count in counts]
    out: list[torch.Tensor | None] = [None] * len(datas)
    for use_cpu in (False, True):
        positions = [i for i, flag in enumerate(on_cpu) if flag == use_cpu]
        if not positions:
            continue
        decoded = _decode_rgb([datas[i] for i in positions], torch.device("cpu") if use_cpu else device)
        for i, img in zip(positions, decoded, strict=True):
            out[i] = img.to(device, non_blocking=True) if use_cpu else img
    return [img for img in out if img is not None]
