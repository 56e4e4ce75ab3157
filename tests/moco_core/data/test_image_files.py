"""moco_core.data.image_files: both data pipelines take the same files, with the same limit, and give the same pixels.

Issue 32: the tensor pipeline died on a 16-bit PNG (uint16 into the augmentation) and, with data.verify_images
false, decoded a 388 KB PNG of 20000 x 20000 pixels until the kernel killed the run at 20 GB. Each file of a
generated corpus (tests/moco_core/image_corpus.py) goes through both pipelines' decoders and the start-up check.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from tests.moco_core import image_corpus as corpus

CORPUS = corpus.corpus()
ROOT = Path(__file__).resolve().parents[3]


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_both_pipelines_take_the_same_files_and_give_the_same_pixels(name: str, tmp_path: Path) -> None:
    """Both refuse, or both give the same size and pixels (see corpus.JPEG_TOLERANCE); what any careful decoder
    takes, both take, and what lost its pixel data, both refuse; the header check refuses nothing that decodes."""
    sample = CORPUS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PIL warns on some odd files it reads (e.g. a palette with transparency)
        pil, tensor, by_torchvision, header = corpus.answers(_write(tmp_path, name, sample.data))
    corpus.assert_agree(name, pil, tensor, by_torchvision)
    taken = not isinstance(pil, corpus.Refused)
    if sample.good is not None:
        assert taken == sample.good, (name, pil)
    if header is not None:
        assert not taken, (name, header)
    if sample.good:
        assert header is None, (name, header)


def _answers(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    pil, tensor, _, header = corpus.answers(path)
    assert header is None and isinstance(pil, torch.Tensor) and isinstance(tensor, torch.Tensor), (pil, tensor)
    return pil, tensor


def test_high_bit_depths_give_the_8_bit_values_worked_out_by_hand(tmp_path: Path) -> None:
    """16-bit gray is scaled by 1/257 and rounded (32896 -> 128); PIL reads 16-bit colour PNGs by their high byte
    (0x8000 -> 128, 0x00FF -> 0); alpha is dropped; floats in [0, 1] are scaled by 255. Both pipelines alike."""
    gray = corpus.png(2, 1, bit_depth=16, colour_type=0, rows=[bytes.fromhex("8080" "ffff")])
    rgb = corpus.png(1, 1, bit_depth=16, colour_type=2, rows=[bytes.fromhex("8000" "00ff" "ffff")])
    rgba = corpus.png(1, 1, bit_depth=16, colour_type=6, rows=[bytes.fromhex("8000" "00ff" "ffff" "0000")])
    gray_alpha = corpus.png(1, 1, bit_depth=16, colour_type=4, rows=[bytes.fromhex("4000" "1234")])
    floats = corpus.encode(Image.fromarray(np.array([[0.5, 1.0]], dtype=np.float32)), "TIFF")
    expected = {"gray.png": [[128, 128, 128], [255, 255, 255]], "rgb.png": [[128, 0, 255]],
                "rgba.png": [[128, 0, 255]], "gray_alpha.png": [[64, 64, 64]], "float.tif": [[128] * 3, [255] * 3]}
    for name, data in {"gray.png": gray, "rgb.png": rgb, "rgba.png": rgba, "gray_alpha.png": gray_alpha,
                       "float.tif": floats}.items():
        pil, tensor = _answers(_write(tmp_path, name, data))
        assert torch.equal(pil, tensor) and tensor[:, 0, :].T.tolist() == expected[name], (name, tensor.tolist())


def test_a_palette_with_transparency_keeps_its_colours(tmp_path: Path) -> None:
    palette = Image.new("P", (2, 1))
    palette.putpalette([10, 20, 30, 200, 100, 0])
    palette.putpixel((1, 0), 1)
    pil, tensor = _answers(_write(tmp_path, "p.png", corpus.encode(palette, "PNG", transparency=0)))
    assert torch.equal(pil, tensor) and tensor[:, 0, :].T.tolist() == [[10, 20, 30], [200, 100, 0]]


def test_exif_orientation_is_ignored_by_both_as_by_the_official_code(tmp_path: Path) -> None:
    """Orientations 1-8 of one stored image all decode to the stored pixels, in both pipelines: the official
    code's ImageFolder loader (PIL) does not rotate, nor does torchvision's decoder by default."""
    img = corpus.picture(40, 24)
    stored, _ = _answers(_write(tmp_path, "1.jpg", corpus.exif_jpeg(img, 1)))
    assert stored.shape == (3, 24, 40)
    for orientation in range(2, 9):
        pil, tensor = _answers(_write(tmp_path, f"{orientation}.jpg", corpus.exif_jpeg(img, orientation)))
        assert torch.equal(pil, stored) and torch.equal(tensor, stored), orientation


def test_the_pixel_limit_is_pils_and_both_pipelines_apply_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PIL refuses images over twice Image.MAX_IMAGE_PIXELS; the tensor pipeline now asks the same question, from
    the header, whatever data.verify_images says: with the limit set to 1000 pixels, 40 x 40 (1600) is taken,
    50 x 50 (2500) refused, by the start-up check and by both decoders, in every format."""
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    for fmt, ext in corpus.FORMATS.items():
        for side in (40, 50):
            path = _write(tmp_path, f"{side}{ext}", corpus.encode(corpus.picture(side, side), fmt))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # 1000 < 1600 < 2000
                pil, tensor, by_torchvision, header = corpus.answers(path)
            corpus.assert_agree(path.name, pil, tensor, by_torchvision)
            if side == 40:
                assert header is None and tensor.shape == (3, 40, 40), (fmt, header, tensor)
            else:
                assert isinstance(tensor, corpus.Refused) and "exceeds limit" in tensor.reason, (fmt, tensor)
                assert header is not None and "exceeds limit" in header, (fmt, header)


_CAPPED = """
import json, resource, sys
from pathlib import Path
from tests.moco_core import image_corpus as corpus

def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
status = dict(line.split(':', 1) for line in open('/proc/self/status'))
size = int(status['VmSize'].split()[0]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + 2**30, resource.getrlimit(resource.RLIMIT_AS)[1]))
before, found = peak(), {}
for path in sorted(Path(sys.argv[1]).iterdir()):
    pil, tensor, _, header = corpus.answers(path)
    found[path.name] = [getattr(pil, 'reason', 'decoded'), getattr(tensor, 'reason', 'decoded'), header]
found['grown'] = peak() - before
print(json.dumps(found))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="caps memory with RLIMIT_AS, reads /proc")
def test_bombs_are_refused_from_the_header_without_allocating(tmp_path: Path) -> None:
    """The issue's bomb (a 388 KB PNG of 20000 x 20000 pixels) and a JPEG whose header claims 60000 x 60000: both
    pipelines and the header check refuse them, saying why, in a process allowed 1 GiB more than it had after its
    imports (decoding the PNG takes 1.2 GB, the JPEG 10.8 GB); its peak memory grows by less than 100 MB."""
    for name, data in corpus.bombs().items():
        _write(tmp_path, name, data)
    assert (tmp_path / "bomb.png").stat().st_size < 400_000
    done = subprocess.run([sys.executable, "-c", _CAPPED, str(tmp_path)], capture_output=True, text=True, cwd=ROOT,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert found.pop("grown") < 100 * 2**20
    for name, (pil, tensor, header) in found.items():
        for answer in (pil, tensor, header):
            assert "exceeds limit of 178956970 pixels" in answer, (name, answer)


def test_huge_jpegs_are_decoded_at_the_same_reduced_scale_by_both(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A JPEG longer than MAX_DECODE_SIDE is decoded at 1/2, 1/4 or 1/8 scale (libjpeg's DCT scaling), in the
    tensor pipeline too (by PIL, in the worker), not at full size on the device: with the side limit at 64, a
    512 x 300 JPEG gives 128 x 75 (1/4) in both."""
    from moco_core.data import image_files

    monkeypatch.setattr(image_files, "MAX_DECODE_SIDE", 64)
    pil, tensor, by_torchvision, _ = corpus.answers(
        _write(tmp_path, "big.jpg", corpus.encode(corpus.picture(512, 300), "JPEG", quality=90)))
    corpus.assert_agree("big.jpg", pil, tensor, by_torchvision)
    assert not by_torchvision and tensor.shape == (3, 75, 128)
    small, _, by_torchvision, _ = corpus.answers(_write(tmp_path, "small.jpg", corpus.encode(corpus.picture(60, 40),
                                                                                                 "JPEG")))
    assert by_torchvision and small.shape == (3, 40, 60)
