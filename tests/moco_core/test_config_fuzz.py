"""Property test: any --set override either gives a valid config or one ConfigError line naming a key."""

from __future__ import annotations

import dataclasses
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moco_core.config import ConfigError, load_config
from moco_core.pretrain_config import PretrainConfig


def _keys(cls: type, prefix: str = "") -> list[str]:
    keys = []
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            keys += _keys(type(default), f"{prefix}{f.name}.")
        else:
            keys.append(f"{prefix}{f.name}")
    return keys


KEYS = _keys(PretrainConfig)
scalars = st.one_of(
    st.integers(-10**6, 10**6).map(str), st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["true", "false", "null", "off", "~", "''", "[]", "{}", "resnet18", "moco", "cosine", "1e-3",
                     "-0.0", "0x10", ".inf", "-.inf", ".nan"]),
    st.text(max_size=12),
)
values = st.one_of(scalars, st.lists(scalars, max_size=4).map(lambda xs: "[" + ", ".join(xs) + "]"))
keys = st.one_of(st.sampled_from(KEYS), st.sampled_from(["model", "optim", "model.nope", "nope", "a.b.c", ""]),
                 st.text(max_size=10))
overrides = st.lists(st.tuples(keys, values).map(lambda kv: f"{kv[0]}={kv[1]}"), min_size=1, max_size=3)
CASES = 1500


@settings(max_examples=CASES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(overrides)
def test_overrides_give_a_valid_config_or_one_line_naming_a_key(texts: list[str]) -> None:
    try:
        cfg = load_config(PretrainConfig, "embedded", texts)
    except ConfigError as err:
        message = str(err)
        assert message and "\n" not in message, message
        return
    m, o = cfg.model, cfg.optim
    assert m.queue_size >= 1 and 0 <= m.momentum <= 1 and m.temperature > 0 and math.isfinite(m.temperature)
    assert o.batch_size >= 1 and o.lr > 0 and math.isfinite(o.lr) and o.epochs >= 1
