"""Config: paper defaults, presets, precedence, and one-line errors naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from moco_core.config import ConfigError, load_config, parse_override, preset_path
from moco_core.pretrain_config import PretrainConfig


def test_defaults_are_the_papers() -> None:
    cfg = PretrainConfig()
    m, o, a = cfg.model, cfg.optim, cfg.augment
    assert (m.arch, m.dim, m.queue_size, m.momentum, m.temperature) == ("resnet50", 128, 65536, 0.999, 0.07)
    assert not m.mlp
    assert (o.lr, o.batch_size, o.momentum, o.weight_decay, o.epochs) == (0.03, 256, 0.9, 1e-4, 200)
    assert (o.schedule, o.milestones) == ("step", (120, 160))
    assert (a.crop_size, a.crop_scale, a.color_jitter, a.grayscale_prob, a.blur_prob) == (
        224, (0.2, 1.0), (0.4, 0.4, 0.4, 0.4), 0.2, 0.0)


def test_v2_preset() -> None:
    cfg = load_config(PretrainConfig, "moco_v2_200ep", ["data.path=/data/imagenet"])
    assert cfg.model.mlp and cfg.model.temperature == 0.2 and cfg.optim.schedule == "cosine"
    assert cfg.augment.color_jitter == (0.4, 0.4, 0.4, 0.1) and cfg.augment.color_jitter_prob == 0.8
    assert cfg.augment.blur_prob == 0.5 and cfg.augment.blur_sigma == (0.1, 2.0)
    assert not cfg.augment.grayscale_before_jitter
    assert cfg.model.queue_size == 65536 and cfg.optim.epochs == 200
    assert load_config(PretrainConfig, "moco_v2_800ep", ["data.path=x"]).optim.epochs == 800
    v1 = load_config(PretrainConfig, "moco_v1_200ep", ["data.path=x"])
    assert v1 == load_config(PretrainConfig, None, ["data.path=x"])  # the v1 preset is the defaults


def test_precedence_file_then_overrides(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("_base_: base.yaml\nmodel:\n  temperature: 0.1\n")
    (tmp_path / "base.yaml").write_text("model:\n  temperature: 0.5\n  dim: 64\ndata:\n  path: embedded\n")
    cfg = load_config(PretrainConfig, str(path), ["model.dim=32"])
    assert (cfg.model.temperature, cfg.model.dim, cfg.model.queue_size) == (0.1, 32, 65536)
    assert parse_override("optim.milestones=[10, 20]") == {"optim": {"milestones": [10, 20]}}


def test_numbers_in_exponent_notation(tmp_path: Path) -> None:
    """How researchers write learning rates and decays; PyYAML (YAML 1.1) reads 1e-4 as the string '1e-4'."""
    path = tmp_path / "c.yaml"
    path.write_text("optim:\n  weight_decay: 1e-4\n  lr: 3E-2\naugment:\n  crop_scale: [2e-1, 1]\n")
    cfg = load_config(PretrainConfig, str(path), ["model.temperature=7e-2", "model.momentum=+9.99e-1",
                                                  "augment.blur_sigma=[.1e0, 2.e0]", "data.path=1e3"])
    assert (cfg.optim.weight_decay, cfg.optim.lr, cfg.augment.crop_scale) == (1e-4, 0.03, (0.2, 1.0))
    assert (cfg.model.temperature, cfg.model.momentum, cfg.augment.blur_sigma) == (0.07, 0.999, (0.1, 2.0))
    assert cfg.data.path == "1e3"  # a string field keeps the text
    for text in ("1e", "e3", "1e-3x", "1e-3e3", "0x1p3"):
        with pytest.raises(ConfigError, match=f"optim.lr: expected a number, got '{text}'"):
            load_config(PretrainConfig, "embedded", [f"optim.lr={text}"])
    with pytest.raises(ConfigError, match="model.dim: expected an integer, got '1e2'"):  # no silent rounding
        load_config(PretrainConfig, "embedded", ["model.dim=1e2"])


@pytest.mark.parametrize(("override", "message"), [
    ("model.foo=1", "model.foo: unknown key"),
    ("modle.dim=1", "modle: unknown key"),
    ("model.dim=abc", "model.dim: expected an integer"),
    ("model.dim=1.5", "model.dim: expected an integer"),
    ("model.mlp=3", "model.mlp: expected true or false"),
    ("model.queue_size=0", r"model.queue_size: must be in \[1, 16777216\]"),
    ("model.momentum=1.5", r"model.momentum: must be in \[0, 1\]"),
    ("model.momentum=-0.1", r"model.momentum: must be in \[0, 1\]"),
    ("model.temperature=0", "model.temperature: must be finite and > 0"),
    ("model.temperature=.inf", "model.temperature: must be finite and > 0, got inf"),
    ("model.temperature=.nan", "model.temperature: must be finite and > 0, got nan"),
    ("optim.lr=.inf", "optim.lr: must be finite and > 0, got inf"),
    ("optim.weight_decay=.inf", "optim.weight_decay: must be finite and >= 0, got inf"),
    ("model.arch=vgg16", "model.arch: expected one of"),
    ("model.shuffle_bn=maybe", "model.shuffle_bn: expected one of"),
    ("model.shuffle_bn=off", "model.shuffle_bn: expected one of .* got False .YAML reads bare"),
    ("optim.schedule=linear", "optim.schedule: expected one of"),
    ("augment.crop_scale=[0.5]", "augment.crop_scale: expected a list of 2 values"),
    ("augment.crop_scale=[0.8, 0.2]", "augment.crop_scale: need 0 < min <= max <= 1"),
    ("optim.milestones=[a]", r"optim.milestones\[0\]: expected an integer"),
    ("optim.batch_size=0", "optim.batch_size: must be >= 1"),
    ("model", "expected key=value"),
])
def test_bad_values_are_one_line_errors_naming_the_key(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        load_config(PretrainConfig, "embedded", [override])
    assert "\n" not in str(err.value)


def test_missing_data_path_and_unknown_preset(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="data.path: not set"):
        load_config(PretrainConfig, "moco_v2_200ep")
    with pytest.raises(ConfigError, match="unknown config preset 'nope'.*embedded"):
        preset_path("nope")
    with pytest.raises(ConfigError, match="config file not found"):
        preset_path(str(tmp_path / "absent.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(PretrainConfig, str(bad))


def test_a_directory_given_as_config_is_named_as_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "experiments").mkdir()
    (tmp_path / "embedded").mkdir()  # a folder that has a preset's name
    with pytest.raises(ConfigError, match="config: experiments is a directory; give a YAML file or a preset name"):
        preset_path("experiments/")
    with pytest.raises(ConfigError, match="is a directory"):
        preset_path("experiments")
    assert preset_path("embedded").name == "embedded.yaml"  # the preset, as before
    with pytest.raises(ConfigError, match="config: embedded is a directory"):
        preset_path("embedded/")  # written as a folder: the folder


def test_keys_must_be_names(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("run: {1: 2, seed: 3}\n")
    with pytest.raises(ConfigError, match=r"^run\.1: a key must be a name, got int$"):
        load_config(PretrainConfig, str(path))
