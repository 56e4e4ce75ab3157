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
from moco_core.config import ConfigError, replace
from moco_core.data.device_data import DeviceAugmentLoader, EncodedImages, collate_encoded, decode_batch
from moco_core.pretrain_config import AugmentConfig
from moco_core.run.train import pretrain


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
        "from moco_core.data.device_data import EncodedImages, collate_encoded\n"
        f"files = sorted(Path({str(shapes_root)!r}).rglob('*.png'))[:8]\n"
        "loader = DataLoader(EncodedImages([(str(p), 0) for p in files]), batch_size=4, num_workers=2, "
        "collate_fn=collate_encoded)\n"
        "print(sum(len(datas) for datas, _, _, _ in loader))\n"
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
    reasons = {name: next(m for m in warned if name in m) for name in bad}  # each with why, in PIL's words
    assert "(empty file)" in reasons["empty.png"] and "(cannot identify image)" in reasons["notes.png"]
    assert "truncated" in reasons["truncated.jpg"]

    only_bad = DataLoader(EncodedImages(samples[1:4]), batch_size=3, collate_fn=collate_encoded)
    from moco_core.data.data import DatasetError
    with pytest.raises(DatasetError, match="no image of a batch of 3 could be decoded"):
        next(iter(DeviceAugmentLoader(only_bad, AugmentConfig(crop_size=16), torch.device("cpu"), views=1)))


# ---------------------------------------------------------------------------------------------------------
# Decoding and augmenting ahead, in threads (CUDA's way; on the CPU with ahead=True, to test the threads)

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"


@pytest.fixture(scope="module")
def jpeg_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """24 photograph-like JPEGs of 96-143 x 72-104 px (benchmarks/make_jpegs.py's images, shrunk)."""
    import sys

    sys.path.insert(0, str(BENCHMARKS))
    try:
        from make_jpegs import photo_like
    finally:
        sys.path.remove(str(BENCHMARKS))
    root = tmp_path_factory.mktemp("jpegs")
    for i in range(24):
        folder = root / "train" / f"c{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        photo_like(i, 72 + (i * 5) % 33, 96 + (i * 7) % 48).save(folder / f"{i:03d}.JPEG", quality=90)
    return root


def _jpeg_loader(root: Path, batch: int = 8, workers: int = 0) -> DataLoader:
    samples = [(str(p), 0) for p in sorted(root.rglob("*.JPEG"))]
    return DataLoader(EncodedImages(samples), batch_size=batch, num_workers=workers, collate_fn=collate_encoded)


def _threads() -> list[str]:
    import threading

    return [t.name for t in threading.enumerate() if t.name.startswith("moco-")]


def test_ahead_yields_every_batch_in_order_and_is_seeded_by_torch(jpeg_root: Path) -> None:
    loader = _jpeg_loader(jpeg_root)
    ahead = DeviceAugmentLoader(loader, AugmentConfig(crop_size=24), torch.device("cpu"), views=2, ahead=True,
                                prefetch=1)

    def run(seed: int) -> list:
        torch.manual_seed(seed)
        return list(ahead)

    first, again, other = run(0), run(0), run(1)
    ahead.threads = 1  # both stages in one thread: the same batches, the same views
    for ((q, k), _, index), ((q1, k1), _, index1) in zip(first, run(0), strict=True):
        assert torch.equal(index, index1) and torch.equal(q, q1) and torch.equal(k, k1)
    assert [index.tolist() for _, _, index in first] == [list(range(i, i + 8)) for i in (0, 8, 16)]
    for ((q, k), _, _), ((q2, k2), _, _) in zip(first, again, strict=True):
        assert q.shape == k.shape == (8, 3, 24, 24) and torch.equal(q, q2) and torch.equal(k, k2)
    assert not torch.equal(first[0][0][0], other[0][0][0])
    assert _threads() == []


def test_ahead_stops_its_threads_when_the_consumer_stops_early(jpeg_root: Path) -> None:
    ahead = DeviceAugmentLoader(_jpeg_loader(jpeg_root, batch=4, workers=1), AugmentConfig(crop_size=16),
                                torch.device("cpu"), views=1, ahead=True)
    batches = iter(ahead)
    next(batches)
    assert len(_threads()) == 2
    batches.close()  # what a `break` out of the training loop does to the generator
    assert _threads() == []


def test_ahead_hands_a_thread_error_to_the_consumer(tmp_path: Path) -> None:
    for i in range(4):
        (tmp_path / f"{i}.jpg").write_bytes(b"\xff\xd8 not really a jpeg")
    loader = DataLoader(EncodedImages([(str(p), 0) for p in sorted(tmp_path.glob("*.jpg"))]), batch_size=4,
                        collate_fn=collate_encoded)
    from moco_core.data.data import DatasetError

    ahead = DeviceAugmentLoader(loader, AugmentConfig(crop_size=16), torch.device("cpu"), views=2, ahead=True)
    with pytest.raises(DatasetError, match="no image of a batch of 4 could be decoded"):
        list(ahead)
    assert _threads() == []


# ---------------------------------------------------------------------------------------------------------
# CUDA (skipped without a GPU)

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _busy(x: torch.Tensor, rounds: int) -> torch.Tensor:
    """Queue work on the current stream that allocates and frees blocks as it goes (what a training step does)."""
    for _ in range(rounds):
        x = torch.tanh(x @ x.T / x.shape[1]) + 0.0  # new blocks each round; the old ones are freed while queued
    return x


@pytest.mark.gpu
@needs_cuda
def test_ahead_on_cuda_gives_the_views_of_a_synchronised_decode(jpeg_root: Path) -> None:
    """The threaded pipeline, run while the consumer's stream is kept busy with work that allocates and frees
    memory, gives exactly the views that decoding with the whole device synchronised gives, for the same random
    parameters: nothing the decoder wrote landed in memory other work was still using, or the other way round."""
    from moco_core.data.device_data import _Pipeline

    device = torch.device("cuda")
    cfg = AugmentConfig(crop_size=32)
    owner = DeviceAugmentLoader(_jpeg_loader(jpeg_root, batch=6), cfg, device, views=2)
    expected = []
    generator = torch.Generator().manual_seed(7)
    for datas, _, index, components in _jpeg_loader(jpeg_root, batch=6):
        torch.cuda.synchronize()
        images = decode_batch(datas, device, components)
        torch.cuda.synchronize()
        expected.append([view.cpu() for view in owner._augment(images, index, generator)])
    for trial in range(5):
        pipeline = _Pipeline(owner, iter(_jpeg_loader(jpeg_root, batch=6)), torch.Generator().manual_seed(7))
        load = torch.randn(2048, 2048, device=device)
        got = []
        for views, _, _ in pipeline:
            load = _busy(load, 20)
            got.append([view.cpu() for view in views])
        pipeline.close()
        assert torch.isfinite(load).all()
        for batch, (want, have) in enumerate(zip(expected, got, strict=True)):
            for a, b in zip(want, have, strict=True):
                assert torch.equal(a, b), (trial, batch)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.slow
def test_100_steps_on_cuda_from_jpegs_keep_a_finite_loss(tmp_path: Path, make_config) -> None:
    """The issue's reproduction: the tensor pipeline on CUDA turned the loss into NaN within 5-20 steps, every run.
    100 steps (ResNet-50 at 128 px, batch 64: kernels in flight while the next batches decode), with no host
    synchronisation between steps except every 25 (the engine's loss check, which sums every step's loss: one
    NaN or inf anywhere stops the run with NonFiniteLossError)."""
    import sys

    sys.path.insert(0, str(BENCHMARKS))
    try:
        from make_jpegs import write_folder
    finally:
        sys.path.remove(str(BENCHMARKS))
    write_folder(tmp_path / "data", 640, workers=4)
    cfg = make_config(tmp_path / "data", tmp_path / "run")
    cfg = replace(cfg, model={"arch": "resnet50", "queue_size": 4096, "bn_groups": 8},
                  augment={"crop_size": 128}, optim={"batch_size": 64, "epochs": 10},
                  data={"pipeline": "tensor", "workers": 4},
                  run={"device": "cuda", "log_every": 25, "compile": False, "checkpoint_every": 10})
    run_dir = pretrain(cfg, show_progress=False)
    import json

    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [line for line in lines if "loss" in line]
    assert max(line["step"] for line in steps) == 100
    assert all(np.isfinite(line["loss"]) for line in steps)


def test_a_batch_crosses_processes_as_one_buffer() -> None:
    """EncodedBatch pickles as one buffer and comes back as views into it, byte for byte and in shape; the plans
    the workers make are the component count of the JPEGs left to torchvision (3 for RGB, 1 for grayscale), 0 for
    a file they decoded with PIL (a CMYK JPEG, a PNG: its image travels), and why a file was refused."""
    import pickle

    from moco_core.data.device_data import EncodedBatch

    rgb = Image.fromarray(np.arange(20 * 30 * 3, dtype=np.uint8).reshape(20, 30, 3), "RGB")
    items = [(_encoded(rgb, "JPEG"), 0, 0), (_encoded(rgb.convert("L"), "JPEG"), 1, 1),
             (_encoded(rgb.convert("CMYK"), "JPEG"), 0, 2), (_encoded(rgb, "PNG"), 1, 3),
             (torch.tensor([0xFF, 0xD8, 1, 2], dtype=torch.uint8), 0, 4)]
    datas, labels, index, plans = collate_encoded(items)
    assert plans[:4] == [3, 1, 0, 0] and labels.tolist() == [0, 1, 0, 1, 0] and index.tolist() == list(range(5))
    assert plans[4] == "cannot identify image" and datas[4].numel() == 0
    assert torch.equal(datas[0], items[0][0]) and datas[2].shape == datas[3].shape == (3, 20, 30)
    assert torch.equal(datas[3], torch.from_numpy(np.array(rgb)).permute(2, 0, 1))  # the PNG, decoded
    back = pickle.loads(pickle.dumps(datas))
    assert isinstance(back, EncodedBatch) and len(back) == 5
    assert all(a.shape == b.shape and torch.equal(a, b) for a, b in zip(datas, back, strict=True))
    assert len({t.untyped_storage().data_ptr() for t in back}) == 1  # one buffer, five views
