"""``moco sweep``: value parsing, the per-point configs, failure detection, and a real two-point sweep."""

from __future__ import annotations

import json
import math
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from moco_core.config import ConfigError, replace
from sweeps import sweep
from sweeps.sweep import chance_loss, parse_values, point_config, run_sweep, training_failure


def test_parse_values() -> None:
    assert parse_values("K", "256, 1024,4096") == [256, 1024, 4096]
    assert parse_values("m", "0,0.9,0.99,0.999,0.9999") == [0.0, 0.9, 0.99, 0.999, 0.9999]
    for param, text, message in [("K", "0", "K must be a whole number"), ("K", "12.5", "whole number"),
                                 ("m", "1.5", r"m must be in \[0, 1\]"), ("m", "a,b", "numbers separated"),
                                 ("m", ",", "no values"), ("T", "1", "unknown parameter")]:
        with pytest.raises(ConfigError, match=message):
            parse_values(param, text)


def test_point_config_changes_the_swept_setting_only(tiny_cfg, tmp_path: Path) -> None:
    k = point_config(tiny_cfg, "K", 64, tmp_path / "k")
    assert (k.model.queue_size, k.optim.batch_size, k.run.output_dir) == (64, 16, str(tmp_path / "k"))
    m = point_config(tiny_cfg, "m", 0.9, tmp_path / "m")
    assert (m.model.momentum, m.model.queue_size) == (0.9, tiny_cfg.model.queue_size)
    e2e = point_config(replace(tiny_cfg, method="end2end"), "K", 8, tmp_path / "e")
    assert (e2e.optim.batch_size, e2e.model.queue_size) == (8, tiny_cfg.model.queue_size)  # the batch is K


def test_chance_loss_is_that_of_uniform_logits(tiny_cfg) -> None:
    assert chance_loss(tiny_cfg) == pytest.approx(math.log(41))  # K 40 negatives + the positive
    assert chance_loss(replace(tiny_cfg, method="memory-bank")) == pytest.approx(math.log(41))
    assert chance_loss(replace(tiny_cfg, method="end2end")) == pytest.approx(math.log(16))  # batch 16
    assert chance_loss(replace(tiny_cfg, method="supervised")) is None


def _write_losses(run_dir: Path, losses: list[float]) -> None:
    run_dir.mkdir(parents=True)
    lines = [{"step": i, "epoch": i, "loss": 9.0} for i in range(len(losses))]  # step lines are not epoch lines
    lines += [{"step": i, "epoch": i, "epoch_loss": v} for i, v in enumerate(losses)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_training_failure_judges_the_last_epoch_against_chance(tiny_cfg, tmp_path: Path) -> None:
    chance = math.log(41)  # 3.7136
    _write_losses(tmp_path / "stuck", [chance, 0.99 * chance])  # 3.676 >= 0.98 * 3.7136 = 3.639: failed
    _write_losses(tmp_path / "learned", [chance, 0.97 * chance])  # 3.602 < 3.639: trained
    assert "stayed at chance level: last epoch 3.676" in training_failure(tiny_cfg, tmp_path / "stuck")
    assert training_failure(tiny_cfg, tmp_path / "learned") is None
    assert training_failure(tiny_cfg, tmp_path / "missing") == "no epoch finished"


@pytest.mark.slow
def test_sweep_runs_each_point_writes_records_and_resumes(tiny_cfg, shapes_root: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from classification.knn import knn_eval
    from classification.linear import LinearDataConfig

    data = LinearDataConfig(path=str(shapes_root), crop_size=32, resize=36, workers=0)
    calls = []

    def evaluate(ckpt: Path, out: Path, extra: dict, seed: int) -> tuple[Path, dict]:
        calls.append(ckpt)
        return knn_eval(str(ckpt), data, out, k=5, extra=extra, seed=seed)

    out = tmp_path / "sweep"
    points = run_sweep(tiny_cfg, "m", [0.0, 0.99], out, evaluate, eval_name="knn", show_progress=False)
    assert [p.value for p in points] == [0.0, 0.99] and len(calls) == 2
    for p in points:
        record = json.loads(p.record.read_text())
        assert p.record == out / f"momentum={p.value:g}" / "knn" / "result.json"
        assert record["sweep"] == {"param": "momentum", "value": p.value, "method": "moco"}
        assert record["status"] == p.status == ("failed" if p.failure else "ok")
        assert record["failure"] == p.failure == training_failure(point_config(tiny_cfg, "m", p.value, p.run_dir),
                                                                  p.run_dir)
        assert record["backbone"]["pretrain"]["config"]["model"]["momentum"] == p.value
        assert 0 <= record["metrics"]["top1"] <= 100

    def no_pretraining(*args, **kwargs):
        raise AssertionError("a finished point was pretrained again")

    monkeypatch.setattr("moco_core.run.train.pretrain", no_pretraining)
    again = run_sweep(tiny_cfg, "m", [0.0, 0.99], out, evaluate, eval_name="knn", show_progress=False)
    assert len(calls) == 2  # records present: not evaluated again either
    assert [p.metrics for p in again] == [p.metrics for p in points]


def test_diverging_point_is_reported_failed_not_raised(tiny_cfg, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from moco_core.errors import NonFiniteLossError

    def diverge(cfg, **kwargs):
        raise NonFiniteLossError("loss became nan at epoch 1, step 3")

    monkeypatch.setattr("moco_core.run.train.pretrain", diverge)
    points = run_sweep(tiny_cfg, "K", [8], tmp_path, lambda *a: pytest.fail("nothing to evaluate"),
                       eval_name="knn", show_progress=False)
    assert points[0].status == "failed" and "loss diverged: loss became nan" in points[0].failure
    assert points[0].record is None
    assert sweep.summary(points, "K").splitlines()[1].split()[:3] == ["8", "failed", "-"]


ROOT = Path(__file__).resolve().parents[2]
# 32 images, batch 16 in 4 BN groups: 2 steps an epoch; the kNN evaluation on the same images
TINY = ["model.queue_size=40", "model.bn_groups=4", "optim.batch_size=16", "optim.epochs=1", "augment.crop_size=32",
        "run.knn_every=0", "data.workers=0", "run.device=cpu"]


def sweep_args(shapes_root: Path, out: Path, values: str, *extra: str) -> list[str]:
    sets = [a for s in (*TINY, f"data.path={shapes_root}", *extra) for a in ("--set", s)]
    return ["sweep", "m", values, "--config", "embedded", *sets, "--eval-data", str(shapes_root), "--output-dir",
            str(out)]


def test_trials_of_a_sweep_write_a_record_per_point_and_seed(shapes_root: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 33: N trials of a sweep write N records per point, each with its pretraining's seed and the same
    ``sweep`` field (what the report groups them by); run again, nothing is redone."""
    from typer.testing import CliRunner

    from cli import app

    out = tmp_path / "sweep"
    args = [*sweep_args(shapes_root, out, "0.9,0.99"), "--trials", "2", "--seed", "5", "--quiet"]
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 0, done.output
    records = [json.loads(p.read_text()) for p in sorted(out.glob("seed_*/momentum=*/knn/result.json"))]
    assert len(records) == 4
    for value in (0.9, 0.99):
        of_point = [r for r in records if r["sweep"]["value"] == value]
        assert [r["sweep"] for r in of_point] == [{"param": "momentum", "value": value, "method": "moco"}] * 2
        assert [r["backbone"]["pretrain"]["config"]["run"]["seed"] for r in of_point] == [5, 6]
        assert [r["config"]["seed"] for r in of_point] == [5, 6]  # the evaluation's too
    table = done.stdout.strip().splitlines()
    assert table[0].split() == ["momentum", "seed", "status", "top1"]
    assert [row.split()[:2] for row in table[1:]] == [["0.9", "5"], ["0.99", "5"], ["0.9", "6"], ["0.99", "6"]]

    def never(*args, **kwargs):
        raise AssertionError("a finished point was run again")

    monkeypatch.setattr("moco_core.run.train.pretrain", never)
    monkeypatch.setattr("classification.knn.knn_eval", never)
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    assert again.stdout == done.stdout  # the same table, from the records


def logged_steps(out: Path) -> int:
    try:
        lines = (out / "metrics.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return 0
    return max((json.loads(line)["step"] for line in lines if line.endswith("}") and '"loss"' in line), default=0)


def test_sigterm_stops_a_sweep_before_it_evaluates_the_stopped_pretraining(shapes_root: Path,
                                                                            tmp_path: Path) -> None:
    """Issue 32: the stopped pretraining returned, was evaluated as if finished (its record then skipped on every
    rerun), and the sweep went on to the next point and exited 0."""
    out = tmp_path / "sweep"
    args = sweep_args(shapes_root, out, "0.9,0.99", "optim.epochs=2", "run.log_every=1")  # 4 steps, each logged
    proc = subprocess.Popen([sys.executable, "-m", "cli", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    first = out / "momentum=0.9"
    try:
        deadline = time.monotonic() + 120
        while logged_steps(first / "pretrain") < 1:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1]
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 143, err
    rerun = shlex.join(["moco", *args])  # every option as given: none at its default
    assert err.strip().splitlines()[-1] == (f"stopped by SIGTERM during the pretraining of {first}; nothing more was "
                                            f"started; continue with: {rerun}")
    assert sorted(p.name for p in out.rglob("*") if p.is_dir()) == ["momentum=0.9", "pretrain"]  # no knn/

    from typer.testing import CliRunner

    from cli import app

    done = CliRunner().invoke(app, shlex.split(rerun)[1:])
    assert done.exit_code == 0, done.output
    assert len(list(out.glob("momentum=*/knn/result.json"))) == 2
    starts = json.loads((first / "pretrain" / "run.json").read_text())["starts"]
    assert starts[1]["resumed_from"] == str(first / "pretrain" / "checkpoint_last.pth.tar")  # continued, not redone


# MoCo v3 (issue 34): no queue; m is the start of the cosine schedule to 1, set in v3.momentum.
V3_TINY = ["optim.batch_size=16", "optim.epochs=1", "optim.warmup_epochs=0", "v3.mlp_dim=64", "v3.dim=32",
           "run.knn_every=0", "data.workers=0", "run.device=cpu"]


def v3_config(preset: str, data: Path):
    from moco_core.config import load_config
    from moco_core.pretrain_config import PretrainConfig

    return load_config(PretrainConfig, preset, [*V3_TINY, f"data.path={data}"])


def test_v3_m_sweep_sets_the_cosine_schedules_start_and_k_is_refused(shapes_root: Path, tmp_path: Path) -> None:
    cfg = v3_config("mocov3_embedded", shapes_root)
    point = point_config(cfg, "m", 0.9, tmp_path / "m")
    assert (point.v3.momentum, point.model.momentum) == (0.9, cfg.model.momentum)  # model.* stays at its default
    assert (point.v3.momentum_cos, point.run.output_dir) == (True, str(tmp_path / "m"))
    with pytest.raises(ConfigError, match=r"^sweep K: method mocov3 has no queue .* sweep m \(v3.momentum\)"):
        point_config(cfg, "K", 64, tmp_path / "k")
    with pytest.raises(ConfigError, match="method mocov3 has no queue"):
        run_sweep(cfg, "K", [64], tmp_path, lambda *a: pytest.fail("nothing to evaluate"), eval_name="knn")
    assert not any(tmp_path.iterdir())  # refused before anything ran
    pytest.importorskip("timm")
    vit = point_config(v3_config("mocov3_vit_embedded", shapes_root), "m", 0.996, tmp_path / "vit")
    assert (vit.model.arch, vit.v3.momentum) == ("vit_nano_p4", 0.996)


def test_linear_preset_follows_the_method_backbone_and_crops(shapes_root: Path, tiny_cfg) -> None:
    """The embedded protocol for a pretraining at the embedded presets' 32-px crops, the full-size one otherwise
    (the old rule gave the embedded v3 preset to an ImageNet v3 sweep, and 224-px crops to an embedded v2 one)."""
    at = {crop: replace(tiny_cfg, augment={"crop_size": crop}) for crop in (32, 224)}
    assert (sweep.linear_preset(at[32]), sweep.linear_preset(at[224])) == ("lincls_embedded", None)
    v3 = v3_config("mocov3_embedded", shapes_root)
    assert sweep.linear_preset(v3) == "lincls_mocov3_embedded"
    assert sweep.linear_preset(replace(v3, augment={"crop_size": 224})) == "lincls_mocov3"
    vit = replace(v3, model={"arch": "vit_nano_p4"})  # not validated: no timm
    assert sweep.linear_preset(vit) == "lincls_mocov3_vit_embedded"
    assert sweep.linear_preset(replace(vit, augment={"crop_size": 224})) == "lincls_mocov3_vit"


@pytest.mark.parametrize("preset", ["lincls_mocov3_embedded", "lincls_mocov3_vit_embedded"])
def test_the_v3_linear_presets_a_sweep_picks_load(preset: str, shapes_root: Path) -> None:
    from classification.linear import load_linear_config, protocol_name

    cfg = load_linear_config(preset, [], flags={"data": {"path": str(shapes_root)}})
    assert cfg.data.path == str(shapes_root) and protocol_name(cfg) == "linear-mocov3"


def test_v3_sweep_through_the_cli_writes_v3_records(shapes_root: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from cli import app

    out = tmp_path / "sweep"
    sets = [a for s in (*V3_TINY, f"data.path={shapes_root}") for a in ("--set", s)]
    common = ["-c", "mocov3_embedded", *sets, "--eval-data", str(shapes_root), "--output-dir", str(out), "--quiet"]
    refused = CliRunner().invoke(app, ["sweep", "K", "64,128", *common])
    assert refused.exit_code == 2 and not out.exists()
    assert refused.output.strip().splitlines() == [
        "error: sweep K: method mocov3 has no queue (its negatives are the other keys of the batch); sweep m "
        "(v3.momentum) instead"]
    done = CliRunner().invoke(app, ["sweep", "m", "0.9,0.99", *common])
    assert done.exit_code == 0, done.output
    for value in (0.9, 0.99):
        record = json.loads((out / f"momentum={value:g}" / "knn" / "result.json").read_text())
        assert record["sweep"] == {"param": "momentum", "value": value, "method": "mocov3"}
        pretrained = record["backbone"]["pretrain"]["config"]
        assert (pretrained["method"], pretrained["v3"]["momentum"]) == ("mocov3", value)
        assert pretrained["model"]["momentum"] == 0.999  # v1/v2's, unused: left at its default


def test_linear_sweep_reads_its_protocol_before_pretraining_and_gives_it_the_data(shapes_root: Path,
                                                                                  tmp_path: Path) -> None:
    """A linear protocol that names no data (LinearConfig's defaults, or a file without data.path) stopped with
    "data.path: not set" after the first point's pretraining; now the sweep's evaluation root fills it in, and a
    protocol that does not load stops the sweep before anything runs."""
    from typer.testing import CliRunner

    from cli import app

    protocol = tmp_path / "lincls_tiny.yaml"
    protocol.write_text("optim: {batch_size: 16, epochs: 1, milestones: []}\n"
                        "data: {crop_size: 32, resize: 32, workers: 0}\nrun: {device: cpu}\n")
    out = tmp_path / "sweep"
    args = [*sweep_args(shapes_root, out, "0.99"), "--eval", "linear", "--quiet"]
    missing = CliRunner().invoke(app, [*args, "--eval-config", str(tmp_path / "absent.yaml")])
    assert missing.exit_code == 2 and not out.exists(), missing.output
    done = CliRunner().invoke(app, [*args, "--eval-config", str(protocol)])
    assert done.exit_code == 0, done.output
    record = json.loads((out / "momentum=0.99" / "linear" / "result.json").read_text())
    assert record["sweep"] == {"param": "momentum", "value": 0.99, "method": "moco"}
    assert record["config"]["data"]["path"] == str(shapes_root)
