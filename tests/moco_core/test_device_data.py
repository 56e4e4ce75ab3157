"""The tensor pipeline: workers read bytes, the training device decodes and augments; training runs on it."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

from moco_core import checkpoint
from moco_core.config import AugmentConfig, ConfigError, replace
from moco_core.device_data import DeviceAugmentLoader, EncodedImages, collate_encoded, decode_batch, is_jpeg
from moco_core.train import pretrain


def _encoded(image: Image.Image, fmt: str) -> torch.Tensor:
    buf = io.BytesIO()
    image.save(buf, format=fmt, quality=95) if fmt == "JPEG" else image.save(buf, format=fmt)
    return torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)


def test_decode_batch_mixes_jpeg_png_gray_and_alpha() -> None:
    yy, xx = np.mgrid[0:20, 0:30]
    smooth = np.stack([xx * 8, yy * 12, 255 - xx * 4], axis=2).astype(np.uint8)  # JPEG keeps smooth images close
    rgb = Image.fromarray(smooth, "RGB")
    datas = [_encoded(rgb, "JPEG"), _encoded(rgb, "PNG"), _encoded(rgb.convert("L"), "PNG"),
             _encoded(rgb.convert("RGBA"), "PNG"), _encoded(rgb.convert("L"), "JPEG")]
    assert [is_jpeg(d) for d in datas] == [True, False, False, False, True]
    images = decode_batch(datas, torch.device("cpu"))
    assert all(im.shape == (3, 20, 30) and im.dtype == torch.uint8 for im in images)
    expected = torch.from_numpy(smooth).permute(2, 0, 1)
    assert torch.equal(images[1], expected) and torch.equal(images[3], expected)  # PNG is lossless; alpha dropped
    assert (images[0].float() - expected.float()).abs().mean() < 3  # lossy, but close
    assert torch.equal(images[2][0], images[2][1]) and torch.equal(images[2][1], images[2][2])  # gray -> 3 equal


def test_loader_yields_what_the_pil_pipeline_yields(shapes_root: Path) -> None:
    samples = [(str(p), 0) for p in sorted((shapes_root / "train").rglob("*.png"))][:6]
    loader = DataLoader(EncodedImages(samples), batch_size=3, collate_fn=collate_encoded)
    cfg = AugmentConfig(crop_size=24)
    two = list(DeviceAugmentLoader(loader, cfg, torch.device("cpu"), views=2))
    assert len(two) == 2
    (q, k), labels, index = two[0]
    assert q.shape == k.shape == (3, 3, 24, 24) and q.dtype == torch.float32 and not torch.equal(q, k)
    assert labels.tolist() == [0, 0, 0] and index.tolist() == [0, 1, 2]
    one, _, _ = next(iter(DeviceAugmentLoader(loader, cfg, torch.device("cpu"), views=1)))
    assert one.shape == (3, 3, 24, 24)
    with pytest.raises(ValueError, match="views must be 1 or 2"):
        DeviceAugmentLoader(loader, cfg, torch.device("cpu"), views=3)


def test_pretraining_runs_on_the_tensor_pipeline(tiny_cfg) -> None:
    run_dir = pretrain(replace(tiny_cfg, data={"pipeline": "tensor"}), show_progress=False)
    ckpt = checkpoint.load(run_dir / checkpoint.LAST)
    assert ckpt["epoch"] == 2 and ckpt["config"]["data"]["pipeline"] == "tensor"
    with pytest.raises(ConfigError, match="data.pipeline: tensor has the MoCo augmentation only"):
        pretrain(replace(tiny_cfg, method="supervised", data={"pipeline": "tensor"},
                         run={"output_dir": str(run_dir.parent / "sup")}), show_progress=False)


def test_workers_read_bytes_without_hanging(shapes_root: Path) -> None:
    """torchvision's read_file hung in forked DataLoader workers; the dataset reads files with plain Python."""
    import subprocess
    import sys

    script = (
        "import torch; from pathlib import Path; from torch.utils.data import DataLoader\n"
        "from moco_core.device_data import EncodedImages, collate_encoded\n"
        f"files = sorted(Path({str(shapes_root)!r}).rglob('*.png'))[:8]\n"
        "loader = DataLoader(EncodedImages([(str(p), 0) for p in files]), batch_size=4, num_workers=2, "
        "collate_fn=collate_encoded)\n"
        "print(sum(len(datas) for datas, _, _ in loader))\n"
    )
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "8"


def test_undecodable_files_are_reported_once_and_replaced(tmp_path: Path, shapes_root: Path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    good = sorted((shapes_root / "train").rglob("*.png"))[:2]
    jpeg = _encoded(Image.open(good[0]).convert("RGB"), "JPEG")
    bad = {"truncated.jpg": bytes(jpeg[: len(jpeg) // 3].tolist()), "empty.png": b"",
           "notes.png": b"not an image at all"}
    for name, data in bad.items():
        (tmp_path / name).write_bytes(data)
    samples = [(str(good[0]), 0), *((str(tmp_path / n), 0) for n in bad), (str(good[1]), 0)]
    loader = DataLoader(EncodedImages(samples), batch_size=5, collate_fn=collate_encoded)
    augment = DeviceAugmentLoader(loader, AugmentConfig(crop_size=16), torch.device("cpu"), views=2)
    with caplog.at_level("WARNING", logger="moco.data"):
        (q, k), _, _ = next(iter(augment))
        next(iter(augment))  # a second epoch: nothing reported twice
    assert q.shape == (5, 3, 16, 16) and torch.isfinite(q).all()
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 3 and all(f"{tmp_path}" in m and "using another image" in m for m in warned)

    only_bad = DataLoader(EncodedImages(samples[1:4]), batch_size=3, collate_fn=collate_encoded)
    from moco_core.data import DatasetError
    with pytest.raises(DatasetError, match="no image of a batch of 3 could be decoded"):
        next(iter(DeviceAugmentLoader(only_bad, AugmentConfig(crop_size=16), torch.device("cpu"), views=1)))
