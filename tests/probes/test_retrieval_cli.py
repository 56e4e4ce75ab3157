"""Issue 60: ``moco eval retrieval`` through the CLI (typer's CliRunner) on the embedded data and on revisitop's
release layout, a ResNet and ViTs of other methods' files; the query crop is the box's pixels."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

from cli import app
from moco_core.model.backbone import load_backbone
from moco_core.model.weights.formats import IMAGENET
from probes.retrieval.features import global_features
from tests import weights_layouts
from tests.probes.layouts import revisitop_layout


def _run(args: list[str]) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["eval", "retrieval", *args])
    return result.exit_code, result.output


def test_the_embedded_data_gives_every_dataset_variant_and_protocol(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOCO_DATA_HOME", str(tmp_path / "data"))
    code, output = _run(["random", "--arch", "resnet18", "-c", "retrieval_embedded", "--image-size", "32",
                         "--output-dir", str(tmp_path / "out")])
    assert code == 0, output
    record = json.loads((tmp_path / "out" / "result.json").read_text())
    assert (record["task"], record["protocol"], record["config"]["feature"]) == ("retrieval", "revisitop", "layer4")
    keys = {f"{d}/{v}/{p}/{m}" for d in ("rscenes1", "rscenes2") for v in ("cropped", "full")
            for p in ("medium", "hard") for m in ("map", "mp@1", "mp@5", "mp@10")}
    assert set(record["metrics"]) == keys and all(0 <= v <= 100 for v in record["metrics"].values())
    assert set(record["query_variants"]) == {"cropped", "full"}
    assert [d["queries"] for d in record["dataset"]["datasets"]] == [8, 8]
    assert record["invocation"]["command"] == "eval retrieval"


@pytest.mark.parametrize("weights", ["dino", "mae"])
def test_vits_of_other_methods_on_the_release_layout(tmp_path: Path, weights: str) -> None:
    """A resampling ViT (DINO's teacher, MAE's encoder: sides rounded to patches, aspect kept) reads both
    datasets; the record states the method and the class token."""
    vit = weights_layouts.timm_vit_state()
    path = (weights_layouts.dino_full(tmp_path / "dino_full_checkpoint.pth", vit, vit=True) if weights == "dino"
            else weights_layouts.mae_file(tmp_path / "mae_pretrain.pth", vit, full=False))
    data = revisitop_layout(tmp_path / "revisitop")
    args = [str(path), "--data", str(data), "--image-size", "32", "--workers", "0", "--output-dir",
            str(tmp_path / "out"), *(["--weights-format", "mae"] if weights == "mae" else [])]
    code, output = _run(args)
    assert code == 0, output
    record = json.loads((tmp_path / "out" / "result.json").read_text())
    assert record["backbone"]["pretrain"]["method"] == weights and record["config"]["feature"] == "cls"
    assert "roxford5k/cropped/medium/map" in record["metrics"] and "rparis6k/full/hard/map" in record["metrics"]


def test_a_hostile_ground_truth_is_one_line_through_the_cli(tmp_path: Path) -> None:
    import os
    import pickle

    class Payload:
        def __reduce__(self) -> tuple:
            return (os.mkdir, (str(tmp_path / "ran"),))

    data = revisitop_layout(tmp_path / "revisitop")
    (data / "rparis6k" / "gnd_rparis6k.pkl").write_bytes(pickle.dumps(Payload(), protocol=4))
    code, output = _run(["random", "--arch", "resnet18", "--data", str(data), "--output-dir", str(tmp_path / "o")])
    assert code == 2 and output.count("\n") == 1 and output.startswith("error: ") and "posix.mkdir" in output
    assert not (tmp_path / "ran").exists() and not (tmp_path / "o" / "result.json").exists()


def test_a_cropped_query_is_the_feature_of_its_box(tmp_path: Path) -> None:
    """The crop is taken in the file's pixels before the resize, rounded as PIL's crop(bbx) rounds it (DINO's query
    crop): the same feature as the box saved alone."""
    pixels = np.random.default_rng(0).integers(0, 256, size=(40, 48, 3), dtype=np.uint8)
    box = (5.5, 8.5, 40.5, 30.4)
    Image.fromarray(pixels).save(tmp_path / "query.png")
    Image.fromarray(pixels).crop(box).save(tmp_path / "box.png")
    model, _ = load_backbone(None, 1, arch="resnet18")
    model.eval()
    kwargs = {"image_size": 224, "scales": (1.0,), "normalisation": IMAGENET, "device": torch.device("cpu"),
              "workers": 0}
    cropped = global_features(model, [(tmp_path / "query.png", box)], **kwargs)
    alone = global_features(model, [(tmp_path / "box.png", None)], **kwargs)
    whole = global_features(model, [(tmp_path / "query.png", None)], **kwargs)
    assert torch.allclose(cropped, alone, atol=1e-6) and not torch.allclose(cropped, whole, atol=1e-3)
    assert torch.allclose(cropped.norm(dim=1), torch.ones(1))


@pytest.mark.parametrize("scales", ["[1.0]", "[1,0.5]"])
def test_a_fixed_grid_vit_reads_its_square_at_one_scale(tmp_path: Path, scales: str) -> None:
    """A random ViT (MoCo v3's fixed position grid) takes its own square; several scales would feed it the same
    square again, so they are refused in one line before any feature is computed."""
    data = revisitop_layout(tmp_path / "revisitop")
    code, output = _run(["random", "--arch", "vit_nano_p4", "--data", str(data), "--datasets", "rparis6k",
                         "--image-size", "32", "--workers", "0", "--set", f"scales={scales}", "--output-dir",
                         str(tmp_path / "out")])
    if scales == "[1.0]":
        assert code == 0, output
        record = json.loads((tmp_path / "out" / "result.json").read_text())
        assert record["config"]["feature"] == "cls" and {k.split("/")[0] for k in record["metrics"]} == {"rparis6k"}
    else:
        assert code == 2 and output.startswith("error: scales: this ViT (vit_nano_p4) has a fixed grid")
        assert output.count("\n") == 1 and not (tmp_path / "out" / "result.json").exists()


@pytest.mark.parametrize("workers", ["0", "1"])
def test_an_undecodable_image_is_one_line_naming_it(tmp_path: Path, workers: str) -> None:
    """Every image is needed (a ranking without one would score another protocol): none is substituted; the line
    names the file, from the loader's worker process too."""
    data = revisitop_layout(tmp_path / "revisitop")
    broken = data / "roxford5k" / "jpg" / "keble_000000.jpg"
    broken.write_bytes(b"not a jpeg")
    code, output = _run(["random", "--arch", "resnet18", "--data", str(data), "--datasets", "roxford5k",
                         "--image-size", "32", "--workers", workers, "--output-dir", str(tmp_path / "out")])
    errors = [line for line in output.splitlines() if line.startswith("error: ")]
    assert code == 2 and errors == [f"error: {broken}: cannot identify image"], output


@pytest.mark.parametrize(("args", "message"), [
    (["--data", "embedded"], "data.datasets: the embedded data holds rscenes1, rscenes2"),
    (["-c", "retrieval_embedded", "--set", "scales=[]"], "scales: need 1 or more scales"),
    (["-c", "retrieval_embedded", "--set", "queries=[crop]"], "queries: expected some of cropped, full"),
    (["-c", "retrieval_embedded", "--set", "protocols=[medium,extreme]"], "protocols: expected some of easy"),
    (["-c", "retrieval_embedded", "--image-size", "8"], "image_size: must be 16 to 4096 pixels, got 8"),
    (["-c", "retrieval_embedded", "--datasets", "../x"], "data.datasets: expected folder names"),
    (["--data", "/nonexistent"], "/nonexistent/roxford5k: no such folder; revisitop's layout is"),
])
def test_bad_settings_are_one_line_before_any_work(tmp_path: Path, args: list[str], message: str) -> None:
    code, output = _run(["random", "--arch", "resnet18", *args, "--output-dir", str(tmp_path / "out")])
    assert code == 2 and output.startswith(f"error: {message}") and output.count("\n") == 1, output
    assert not (tmp_path / "out" / "result.json").exists()
