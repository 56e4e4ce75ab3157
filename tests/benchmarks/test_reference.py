"""The benchmark's reference mode rebuilds the official recipe: it must compute what our model computes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from moco_core.model.methods import build_moco
from moco_core.pretrain_config import ModelConfig

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201 - the benchmarks folder's modules
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import pretrain_step
    import reference

    yield pretrain_step, reference
    for name in ("pretrain_step", "reference"):
        sys.modules.pop(name, None)


def test_reference_recipe_matches_our_step(bench) -> None:
    """Same weights, queue and inputs (BN without shuffling, so both are deterministic): same logits, loss,
    momentum-updated key encoder, queue after the enqueue, and weights after one SGD step."""
    _, reference = bench
    torch.manual_seed(0)
    cfg = ModelConfig(arch="resnet18", dim=16, queue_size=32, momentum=0.9, temperature=0.2, shuffle_bn="none")
    ours = build_moco(cfg, world_size=1)
    ref = reference.ReferenceMoCo(build_moco(cfg, world_size=1).encoder, dim=16, queue_size=32, momentum=0.9,
                                  temperature=0.2, shuffle_keys=False)
    ref.encoder_q.load_state_dict(ours.encoder.state_dict())
    ref.encoder_k.load_state_dict(ours.momentum_encoder.state_dict())
    with torch.no_grad():  # a key encoder different from the query one, so the momentum update matters
        for p in ours.momentum_encoder.parameters():
            p.mul_(0.5)
        for p_ref, p in zip(ref.encoder_k.parameters(), ours.momentum_encoder.parameters(), strict=True):
            p_ref.copy_(p)
    ref.queue.copy_(ours.queue)
    im_q, im_k = torch.randn(8, 3, 32, 32), torch.randn(8, 3, 32, 32)
    opt_ours = torch.optim.SGD(ours.parameters(), lr=0.1, momentum=0.9)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)

    logits, labels, keys = ours(im_q, im_k)
    loss = F.cross_entropy(logits, labels)
    opt_ours.zero_grad()
    loss.backward()
    opt_ours.step()
    ours.enqueue(keys)
    ref_loss = reference.reference_step(ref, opt_ref, im_q, im_k)

    assert ref_loss.item() == pytest.approx(loss.item(), rel=1e-5)
    for p_ref, p in zip(ref.encoder_k.parameters(), ours.momentum_encoder.parameters(), strict=True):
        torch.testing.assert_close(p_ref, p, rtol=1e-5, atol=1e-6)
    for p_ref, p in zip(ref.encoder_q.parameters(), ours.encoder.parameters(), strict=True):
        torch.testing.assert_close(p_ref, p, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(ref.queue, ours.queue, rtol=1e-4, atol=1e-5)  # lerp vs mul-add rounding
    assert int(ref.queue_ptr) == int(ours.queue_ptr) == 8


def test_reference_refuses_a_queue_that_is_not_a_multiple_of_the_batch(bench) -> None:
    _, reference = bench
    ref = reference.ReferenceMoCo(torch.nn.Linear(4, 8), dim=8, queue_size=10, momentum=0.9, temperature=0.2,
                                  shuffle_keys=False)
    with pytest.raises(ValueError, match="multiple of the batch"):
        ref(torch.randn(4, 4), torch.randn(4, 4))


def test_benchmark_prints_ours_the_reference_and_their_ratio(bench, capsys: pytest.CaptureFixture[str]) -> None:
    pretrain_step, _ = bench
    result = pretrain_step.main(["--arch", "resnet18", "--image-size", "16", "--batch", "8", "--queue-size", "64",
                                 "--bn-groups", "2", "--steps", "2", "--warmup", "1", "--reference"])
    out = capsys.readouterr().out
    assert result["reference"]["images_per_s"] > 0 and result["images_per_s"] > 0
    assert result["speedup_vs_reference"] == pytest.approx(result["images_per_s"] / result["reference"]["images_per_s"])
    assert "speed-up over the reference" in out and "data wait" in out and "peak memory" in out


def test_benchmark_on_real_images_with_the_tensor_pipeline(bench, shapes_root: Path) -> None:
    pretrain_step, _ = bench
    result = pretrain_step.main(["--arch", "resnet18", "--image-size", "16", "--batch", "8", "--queue-size", "64",
                                 "--bn-groups", "2", "--steps", "2", "--warmup", "1", "--data", str(shapes_root),
                                 "--workers", "0", "--pipeline", "tensor", "--reference"])
    assert result["pipeline"] == "tensor" and 0 <= result["data_wait_fraction"] <= 1
    assert 0 <= result["reference"]["data_wait_fraction"] <= 1


def test_data_sources_take_a_pipeline_prefix(bench) -> None:
    pretrain_step, _ = bench
    args = pretrain_step.parse_args(["--data", "synthetic", "--data", "tensor:/x", "--data", "tensor1:/x",
                                     "--data", "/y", "--pipeline", "tensor", "--data", "c:/windows/path"])
    assert list(zip(args.data, args.pipeline, strict=True)) == [
        ("synthetic", "tensor"), ("/x", "tensor"), ("/x", "tensor1"), ("/y", "tensor"), ("c:/windows/path", "tensor")]
    assert pretrain_step.parse_args([]).data == ["synthetic"]


def test_gpu_table_reads_what_the_report_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """benchmarks/gpu_table.py on the files gpu_report.sh leaves: figures where stages ran, '-' where they did not,
    everything in report.json."""
    import json

    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import gpu_table

    run = {"data": "synthetic", "pipeline": None, "images_per_s": 3866.0, "warmup_s": 120.0, "peak_memory_mb": 12622}
    tensor = {"data": "/d", "pipeline": "tensor", "images_per_s": 2934.1, "data_wait_fraction": 0.009}
    (tmp_path / "step_compiled.json").write_text(json.dumps({"machine": {"cuda_device": "GPU"}, **run,
                                                             "runs": [run, tensor]}))
    (tmp_path / "step_eager.json").write_text(json.dumps({"images_per_s": 768.0,
                                                          "reference": {"images_per_s": 1186.0}}))
    (tmp_path / "data.json").write_text(json.dumps({"tensor_ahead": 10625.0, "hazard": {
        "trials": 5, "unsafe_corrupt": 5, "safe_corrupt": 0}}))
    (tmp_path / "real_metrics.jsonl").write_text(
        json.dumps({"step": 20, "loss": 7.8, "images_per_s": 2494.0}) + "\n" +
        json.dumps({"step": 100, "epoch_loss": 9.1, "images_per_s": 975.0, "data_wait": 0.076}) + "\n")
    (tmp_path / "tests.log").write_text("...\n4 passed in 40s\n")
    monkeypatch.setattr(sys, "argv", ["gpu_table.py", str(tmp_path)])
    gpu_table.main()
    out = capsys.readouterr().out
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ")[2].rstrip(" |") for line in out.splitlines()
            if line.startswith("| ") and " | " in line}
    assert rows["step, split BN, channels_last + torch.compile (the CUDA default now)"] == "3,866"
    assert rows["end to end from JPEGs, tensor pipeline, compiled step"] == "2,934, data wait 0.9%"
    assert rows["speed-up of the compiled step over the official recipe"] == "3.26x"
    assert rows["nvJPEG hazard: corrupt trials, unsafe decode / our decoder"] == "5 / 0 of 5"
    assert rows["step, plain BN, channels_last + torch.compile"] == "-"
    assert rows["`pytest -m gpu tests/moco_core`"] == "4 passed in 40s"
    assert "2,494 / 975, data wait 7.6%" in out
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["device"] == "GPU" and report["data"]["tensor_ahead"] == 10625.0
    sys.modules.pop("gpu_table", None)


def test_make_jpegs_writes_an_image_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import make_jpegs
    from PIL import Image

    mean_kib = make_jpegs.write_folder(tmp_path, 3, workers=1)
    files = sorted(tmp_path.rglob("*.JPEG"))
    assert [f.relative_to(tmp_path).as_posix() for f in files] == [
        "train/c000/000000.JPEG", "train/c001/000001.JPEG", "train/c002/000002.JPEG"]
    sizes = [Image.open(f).size for f in files]
    assert all(400 <= w < 560 and 300 <= h < 420 for w, h in sizes) and len(set(sizes)) == 3
    assert 40 < mean_kib < 160
    assert make_jpegs.photo_like(1).tobytes() == make_jpegs.photo_like(1).tobytes()  # the same everywhere
    sys.modules.pop("make_jpegs", None)
