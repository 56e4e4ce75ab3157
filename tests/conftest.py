"""Shared fixtures: a tiny embedded dataset and a tiny pretraining config that trains in about a second."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from moco_core.config import load_config, replace
from moco_core.data.shapes import generate_shapes
from moco_core.pretrain_config import PretrainConfig

# Serial: two threads. Under pytest-xdist (README: two workers on two cores) each worker takes one, and so does
# every process its tests start (OMP_NUM_THREADS is inherited): a run compared with one made in a subprocess then
# did its sums with the same number of threads, which is what makes CPU results bit-identical. Set in the
# environment either way: without it a run picks its threads by the machine's load (moco_core/threads.py).
_THREADS = 1 if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1 else 2
os.environ["OMP_NUM_THREADS"] = str(_THREADS)
torch.set_num_threads(_THREADS)


@pytest.fixture(scope="session")
def shapes_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """8 classes x 4 train images of 48 px (32 images), generated once per test session."""
    root = tmp_path_factory.mktemp("shapes")
    generate_shapes(root, seed=0, image_size=48, train_per_class=4, val_per_class=2)
    return root


def tiny_config(data: Path, output_dir: Path, **sections: dict) -> PretrainConfig:
    """The embedded preset shrunk: resnet18 on 32-px crops, batch 16 in 4 BN groups, K 40, 2 epochs."""
    cfg = load_config(PretrainConfig, "embedded", [
        "model.queue_size=40", "model.bn_groups=4", "optim.batch_size=16", "optim.epochs=2",
        "data.workers=0", "run.log_every=1", "run.knn_every=0", "augment.crop_size=32",
    ])
    cfg = replace(cfg, data={"path": str(data)}, run={"output_dir": str(output_dir)})
    return replace(cfg, **sections) if sections else cfg


@pytest.fixture
def tiny_cfg(shapes_root: Path, tmp_path: Path) -> PretrainConfig:
    return tiny_config(shapes_root, tmp_path / "run")


@pytest.fixture
def make_config():  # noqa: ANN201 - returns tiny_config, for tests that need several configs
    return tiny_config
