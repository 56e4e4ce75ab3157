"""One image file: whether both data pipelines take it, and the RGB image it gives.

Both pipelines (``data.pipeline: pil`` and ``tensor``) ask :func:`open_header` first: PIL's lazy ``Image.open``,
which reads the header only. A file is refused when it is empty, when PIL cannot identify it, when its image is
empty, or when it has more pixels than PIL's decompression-bomb limit: ``Image.open`` raises
``DecompressionBombError`` beyond twice ``Image.MAX_IMAGE_PIXELS`` (178,956,970 pixels, e.g. 13,377 px square,
at PIL's default). That limit is the one the PIL pipeline (and the official code's ImageFolder loader) always
had, so nothing it read before is refused now; asking the same call in the tensor pipeline gives both the same
limit (the same knob, should a user change ``Image.MAX_IMAGE_PIXELS``). Memory stays bounded below it: JPEGs
are decoded at a reduced scale beyond ``MAX_DECODE_SIDE``, other formats at most at the limit.

What passes is decoded by :func:`decode_rgb` (the PIL pipeline; in the tensor pipeline, every file but the
JPEGs torchvision decodes to the same pixels). EXIF orientation is not applied, as in the official code.

PIL's ``ImageFile.LOAD_TRUNCATED_IMAGES`` is deliberately left unset: truncated files must fail to decode, so
that the datasets can report them and substitute another image.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import IO

import numpy as np
from PIL import Image, UnidentifiedImageError

# JPEGs whose longer side exceeds this are decoded at 1/2, 1/4 or 1/8 scale (libjpeg's DCT scaling), keeping
# the longer side at least this long: a huge photo costs tens of MB, not GBs, and a 224-px crop loses nothing.
MAX_DECODE_SIDE = 4096


class RefusedImage(ValueError):
    """A file that neither pipeline decodes (its reason is the message)."""


def reason(err: BaseException) -> str:
    """One line on why a file was refused or did not decode (the start-up check's and both decoders' wording)."""
    if isinstance(err, RefusedImage):
        text = str(err)
    elif isinstance(err, UnidentifiedImageError):
        text = "cannot identify image"
    else:
        text = f"{type(err).__name__}: {err}"
    text = " ".join(text.split())
    return text if len(text) <= 120 else text[:117] + "..."


def open_header(source: str | Path | IO[bytes]) -> Image.Image:
    """``source`` opened by PIL, its header read and nothing decoded; raises for a file neither pipeline takes
    (see the module docstring): :class:`RefusedImage`, or PIL's error (``DecompressionBombError`` over the limit).
    The caller closes the image."""
    named = isinstance(source, (str, Path))
    if (os.path.getsize(source) if named else source.seek(0, os.SEEK_END)) == 0:
        raise RefusedImage("empty file")
    if not named:
        source.seek(0)
    img = Image.open(source)  # raises DecompressionBombError beyond the limit, from the header's size
    if img.width <= 0 or img.height <= 0:
        img.close()
        raise RefusedImage("zero-sized image")
    return img


def check_image(path: str) -> str | None:
    """The start-up header check (``data.verify_images``): None when :func:`open_header` takes ``path``, else why
    not. A file that passes can still fail to decode (a truncated one): the datasets handle that."""
    try:
        open_header(path).close()
    except Exception as err:  # any failure means the file is unusable
        return reason(err)
    return None


def _to_8bit(img: Image.Image) -> Image.Image:
    """Scale 16/32-bit integer and float single-channel images to 8-bit grayscale ("L")."""
    arr = np.asarray(img).astype(np.float64)
    if img.mode.startswith("I;16"):
        arr = arr / 257.0
    elif img.mode == "I" and arr.size and arr.max() > 255:
        arr = arr / 257.0 if arr.max() <= 65535 else arr * (255.0 / arr.max())
    elif img.mode == "F" and arr.size and arr.max() <= 1.0:
        arr = arr * 255.0
    return Image.fromarray(np.clip(np.rint(arr), 0, 255).astype(np.uint8), mode="L")


def decode_rgb(img: Image.Image) -> Image.Image:
    """Decode an image :func:`open_header` gave, fully, to RGB: alpha dropped (a palette's transparency too), high
    bit depths scaled to 8 bits, JPEGs beyond ``MAX_DECODE_SIDE`` at a reduced scale."""
    if img.format == "JPEG" and max(img.size) > MAX_DECODE_SIDE:
        scale = MAX_DECODE_SIDE / max(img.size)
        img.draft("RGB", (math.ceil(img.size[0] * scale), math.ceil(img.size[1] * scale)))
    img.load()
    if img.mode.startswith("I") or img.mode == "F":
        return _to_8bit(img).convert("RGB")
    if img.mode == "P" and "transparency" in img.info:
        return img.convert("RGBA").convert("RGB")
    return img.convert("RGB")


def load_rgb(source: str | Path | IO[bytes]) -> Image.Image:
    """Open ``source``, decode it fully and return an RGB image; raises for a file refused or undecodable."""
    with open_header(source) as img:
        return decode_rgb(img)
