"""A corpus of odd image files, generated here (nothing binary is committed), and the two data pipelines' answers.

Every mode PIL knows, saved in every format of PNG, TIFF, BMP, WebP, GIF and JPEG that PIL writes it in; the PNGs
PIL cannot write (16-bit RGB, RGBA and gray+alpha; 1, 2 and 4-bit gray; tRNS transparency), written by hand;
JPEGs progressive, grayscale, CMYK, in each chroma subsampling, with each EXIF orientation 1-8; TIFF compressions
and float and 16-bit TIFFs; files truncated, empty, not images at all, or named with another format's extension.
Decompression bombs are separate (:func:`bombs`): decoding one by mistake takes gigabytes, so they are only opened
in a process whose memory is capped.

Used by tests/moco_core/data/test_image_files.py and the property test of tests/test_cli_inputs.py.
"""

from __future__ import annotations

import functools
import io
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from moco_core.data.data import check_image, load_rgb
from moco_core.data.device_data import EncodedImages, collate_encoded, decode_batch

FORMATS = {"PNG": ".png", "TIFF": ".tif", "BMP": ".bmp", "WEBP": ".webp", "GIF": ".gif", "JPEG": ".jpg"}
MODES = ["1", "L", "P", "RGB", "RGBA", "CMYK", "YCbCr", "LAB", "HSV", "I", "F", "LA", "PA", "La", "RGBa", "RGBX",
         "I;16", "I;16L", "I;16B", "I;16N"]
# JPEGs decoded by torchvision (libjpeg-turbo) against Pillow's libjpeg-turbo: both decode with libjpeg's defaults
# (integer IDCT, "fancy" chroma upsampling), so they agree exactly here; a build of either on another libjpeg may
# round the IDCT (ITU T.81 allows +-1) and the colour conversion differently: up to 2 levels.
JPEG_TOLERANCE = 2


@dataclass(frozen=True)
class Sample:
    """A file of the corpus: its bytes, and whether a careful decoder must take it (None: either way, but both
    pipelines the same way)."""

    data: bytes
    good: bool | None


def encode(img: Image.Image, fmt: str, **save: object) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **save)
    return buf.getvalue()


def picture(width: int, height: int, seed: int = 0) -> Image.Image:
    """An RGB picture with gradients (which lossy formats keep) and a little noise, different in every corner (a
    flip or rotation shows)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width]
    rgb = np.stack([xx * 255 // max(width - 1, 1), yy * 255 // max(height - 1, 1), (xx * yy) % 256], axis=2)
    return Image.fromarray(np.clip(rgb + rng.integers(-8, 9, rgb.shape), 0, 255).astype(np.uint8), "RGB")


def as_mode(img: Image.Image, mode: str) -> Image.Image:
    """``img`` in ``mode``; the 16-bit integer modes hold the gray levels spread over 0..65535."""
    gray = np.asarray(img.convert("L"))
    if mode.startswith("I;16"):
        wide = Image.fromarray(gray.astype(np.uint16) * 257)  # I;16
        return wide if mode == "I;16" else wide.convert(mode)
    if mode == "I":
        return Image.fromarray(gray.astype(np.int32) * 257)
    if mode == "F":
        return Image.fromarray(gray.astype(np.float32) / 255)
    return img.convert(mode)


def saved(img: Image.Image, mode: str, fmt: str, **save: object) -> bytes | None:
    """``img`` in ``mode`` saved as ``fmt``, or None where PIL does not write that mode in that format."""
    try:
        return encode(as_mode(img, mode), fmt, **save)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def chunk(kind: bytes, body: bytes) -> bytes:
    """A PNG chunk: length, type, body, CRC."""
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png(width: int, height: int, *, bit_depth: int, colour_type: int, rows: Iterable[bytes],
        extra: bytes = b"") -> bytes:
    """A PNG written by hand (``rows``: each row's samples, big-endian, without the filter byte), for what PIL
    does not write; ``extra``: chunks before the image data (e.g. tRNS)."""
    packer = zlib.compressobj(9)
    data = b"".join(packer.compress(b"\x00" + row) for row in rows) + packer.flush()
    return png_file(width, height, bit_depth=bit_depth, colour_type=colour_type, compressed=data, extra=extra)


def png_file(width: int, height: int, *, bit_depth: int, colour_type: int, compressed: bytes,
             extra: bytes = b"") -> bytes:
    """A PNG of the zlib stream of its filtered rows."""
    header = struct.pack(">IIBBBBB", width, height, bit_depth, colour_type, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + extra + chunk(b"IDAT", compressed)
            + chunk(b"IEND", b""))


def wide_png(width: int, height: int, channels: int, colour_type: int, seed: int) -> bytes:
    """A 16-bit PNG of random samples: ``channels`` 1 (gray), 2 (gray, alpha), 3 (RGB) or 4 (RGBA)."""
    values = np.random.default_rng(seed).integers(0, 65536, (height, width * channels), dtype=np.uint16)
    return png(width, height, bit_depth=16, colour_type=colour_type, rows=(r.astype(">u2").tobytes() for r in values))


def _narrow_png(width: int, height: int, bit_depth: int, seed: int) -> bytes:
    levels = np.random.default_rng(seed).integers(0, 2 ** bit_depth, (height, width), dtype=np.uint8)
    per_byte = 8 // bit_depth
    padded = np.pad(levels, ((0, 0), (0, -width % per_byte)))
    shifts = (8 - bit_depth * (1 + np.arange(per_byte))).astype(np.uint8)
    packed = (padded.reshape(height, -1, per_byte) << shifts).sum(axis=2).astype(np.uint8)
    return png(width, height, bit_depth=bit_depth, colour_type=0, rows=(r.tobytes() for r in packed))


def exif_jpeg(img: Image.Image, orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return encode(img, "JPEG", quality=90, exif=exif.tobytes())


def truncations(data: bytes) -> dict[str, bytes]:
    """``data`` cut in the middle (pixel data lost: no decoder may take it), a byte short, and header-only."""
    return {"half": data[: len(data) // 2], "short1": data[:-1], "head": data[:24]}


def corpus() -> dict[str, Sample]:
    """Name (with an image extension) -> sample; about 300 small files, made in about a second."""
    img = picture(61, 45)  # big enough that half a JPEG cuts its image data, not its header
    found: dict[str, Sample] = {}
    for mode in MODES:
        for fmt, ext in FORMATS.items():
            data = saved(img, mode, fmt)
            if data is not None:
                found[f"{fmt.lower()}-{mode.replace(';', '_')}{ext}"] = Sample(data, True)
    wide = {"gray16": (1, 0), "gray_alpha16": (2, 4), "rgb16": (3, 2), "rgba16": (4, 6)}
    for name, (channels, colour_type) in wide.items():
        found[f"png-{name}.png"] = Sample(wide_png(23, 17, channels, colour_type, seed=channels), True)
    for depth in (1, 2, 4):
        found[f"png-gray{depth}bit.png"] = Sample(_narrow_png(23, 17, depth, seed=depth), True)
    found["png-gray-trns.png"] = Sample(png(3, 2, bit_depth=8, colour_type=0, rows=[b"\x00\x80\xff"] * 2,
                                            extra=chunk(b"tRNS", b"\x00\x80")), True)
    palette = img.convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    found["png-P-transparency.png"] = Sample(encode(palette, "PNG", transparency=3), True)
    found["gif-P-transparency.gif"] = Sample(encode(palette, "GIF", transparency=3), True)
    found["png-P-alpha-table.png"] = Sample(encode(palette, "PNG", transparency=bytes(range(0, 256, 16))), True)
    found["gif-animated.gif"] = Sample(encode(img, "GIF", save_all=True, append_images=[img.rotate(90)]), True)
    found["tiff-multipage.tif"] = Sample(encode(img, "TIFF", save_all=True, append_images=[img.rotate(180)]), True)
    found["webp-lossless.webp"] = Sample(encode(img.convert("RGBA"), "WEBP", lossless=True), True)
    for compression in ("tiff_lzw", "tiff_deflate", "packbits", "jpeg", "tiff_adobe_deflate"):
        found[f"tiff-{compression}.tif"] = Sample(encode(img, "TIFF", compression=compression), True)
    for subsampling in (0, 1, 2):
        for progressive in (False, True):
            name = f"jpg-sub{subsampling}{'-progressive' if progressive else ''}.jpg"
            found[name] = Sample(encode(img, "JPEG", quality=90, subsampling=subsampling, progressive=progressive),
                                 True)
    found["jpg-gray-progressive.jpg"] = Sample(encode(img.convert("L"), "JPEG", progressive=True), True)
    found["jpg-cmyk-progressive.jpg"] = Sample(encode(img.convert("CMYK"), "JPEG", progressive=True), True)
    found["jpg-optimized-q100.jpg"] = Sample(encode(img, "JPEG", quality=100, optimize=True), True)
    found["mpo-two-frames.jpg"] = Sample(encode(img, "MPO", save_all=True, append_images=[img.rotate(90)]), True)
    for orientation in range(1, 9):
        found[f"jpg-exif{orientation}.jpg"] = Sample(exif_jpeg(img, orientation), True)
        exif = Image.Exif()
        exif[0x0112] = orientation
        found[f"png-exif{orientation}.png"] = Sample(encode(img, "PNG", exif=exif.tobytes()), True)
    # right bytes, wrong name: web scrapes are full of these
    found["png-named.jpg"] = Sample(encode(img, "PNG"), True)
    found["gif-named.jpg"] = Sample(encode(img, "GIF"), True)
    found["jpeg-named.png"] = Sample(encode(img, "JPEG"), True)
    broken: dict[str, bytes] = {}
    for name in ("jpg-sub2.jpg", "jpg-sub0-progressive.jpg", "jpg-gray-progressive.jpg", "jpg-cmyk-progressive.jpg",
                 "png-RGB.png", "png-rgb16.png", "png-I_16.png", "tiff-RGB.tif", "tiff-jpeg.tif", "bmp-RGB.bmp",
                 "webp-RGB.webp", "gif-RGB.gif", "mpo-two-frames.jpg"):
        stem, ext = name.rsplit(".", 1)
        for cut, data in truncations(found[name].data).items():
            broken[f"{stem}-cut-{cut}.{ext}"] = data
    for name, data in broken.items():
        found[name] = Sample(data, None if "-short1" in name else False)  # one byte short: some formats do not care
    for name, data in {"empty.jpg": b"", "empty.png": b"", "text.jpg": b"not an image\n",
                       "html.png": b"<!DOCTYPE html><html></html>", "zeros.tif": bytes(4096),
                       "noise.webp": np.random.default_rng(5).integers(0, 256, 3000, dtype=np.uint8).tobytes(),
                       "jpeg-magic-only.jpg": b"\xff\xd8\xff\xe0", "png-magic-only.png": b"\x89PNG\r\n\x1a\n"}.items():
        found[name] = Sample(data, False)
    return found


@functools.lru_cache(maxsize=2)
def bomb_png(side: int = 20000, band: int = 1000) -> bytes:
    """The issue's bomb: a gray PNG of ``side`` x ``side`` pixels, all zero: 388 KB at 20000 (400 million pixels).

    Its zlib stream is one band of ``band`` rows compressed and repeated (a full flush leaves no back-reference
    across bands), not 400 MB compressed (5 s); the checksum is that of all the zero bytes.
    """
    assert side % band == 0
    rows = bytes((side + 1) * band)  # each row: filter byte 0, then the pixels
    packer = zlib.compressobj(9)
    first = packer.compress(rows) + packer.flush(zlib.Z_FULL_FLUSH)  # with the 2-byte zlib header
    again = packer.compress(rows) + packer.flush(zlib.Z_FULL_FLUSH)
    end = packer.flush()[:-4]  # the last, empty block, without the checksum of two bands
    adler = ((side + 1) * side % 65521) << 16 | 1  # Adler-32 of zero bytes: A stays 1, B gains 1 a byte
    stream = first + again * (side // band - 1) + end + struct.pack(">I", adler)
    return png_file(side, side, bit_depth=8, colour_type=0, compressed=stream)


def huge_jpeg_header(width: int = 60000, height: int = 60000) -> bytes:
    """A small JPEG whose frame header claims ``width`` x ``height`` pixels: nothing but the header is large."""
    data = bytearray(encode(picture(16, 16), "JPEG"))
    sof = data.index(b"\xff\xc0")
    data[sof + 5: sof + 9] = struct.pack(">HH", height, width)
    return bytes(data)


def bombs() -> dict[str, bytes]:
    return {"bomb.png": bomb_png(), "bomb.jpg": huge_jpeg_header()}


# ---------------------------------------------------------------------------------------------------------
# The pipelines' answers for one file: a uint8 (3, H, W) image, or the reason it was refused


@dataclass(frozen=True)
class Refused:
    reason: str


def pil_pipeline(path: Path) -> torch.Tensor | Refused:
    """What the PIL pipeline's dataset decodes (``load_rgb``, as ``ImageDataset`` calls it)."""
    try:
        return torch.from_numpy(np.array(load_rgb(path))).permute(2, 0, 1)
    except Exception as err:  # what ImageDataset catches
        return Refused(str(err) or type(err).__name__)


def tensor_pipeline(path: Path) -> tuple[torch.Tensor | Refused, bool]:
    """What the tensor pipeline decodes on the CPU (a worker's ``EncodedImages`` and ``collate_encoded``, then
    ``decode_batch``), and whether torchvision's JPEG decoder made it (the worker's plan: a component count)."""
    datas, _, _, plans = collate_encoded([EncodedImages([(str(path), 0)])[0]])
    image = decode_batch(datas, torch.device("cpu"), plans)[0]
    by_torchvision = not isinstance(plans[0], str) and plans[0] > 0
    return (image if isinstance(image, torch.Tensor) else Refused(str(image))), by_torchvision


def header_check(path: Path) -> str | None:
    return check_image(str(path))


def assert_agree(name: str, pil: torch.Tensor | Refused, tensor: torch.Tensor | Refused,
                 by_torchvision: bool) -> None:
    """Both refused, or both took the file with the same size and pixels (JPEG_TOLERANCE where torchvision's
    decoder made the tensor pipeline's)."""
    if isinstance(pil, Refused) or isinstance(tensor, Refused):
        assert isinstance(pil, Refused) and isinstance(tensor, Refused), (
            f"{name}: PIL {_show(pil)}, tensor {_show(tensor)}")
        return
    assert tensor.dtype == torch.uint8 and tensor.shape == pil.shape, (name, tensor.dtype, tensor.shape, pil.shape)
    difference = int((tensor.int() - pil.int()).abs().max())
    assert difference <= (JPEG_TOLERANCE if by_torchvision else 0), (name, difference)


def _show(answer: torch.Tensor | Refused) -> str:
    return repr(answer) if isinstance(answer, Refused) else f"{answer.dtype} {tuple(answer.shape)}"


def answers(path: Path) -> tuple[torch.Tensor | Refused, torch.Tensor | Refused, bool, str | None]:
    """Both pipelines' answers and the header check's for the file at ``path``."""
    tensor, by_torchvision = tensor_pipeline(path)
    return pil_pipeline(path), tensor, by_torchvision, header_check(path)

