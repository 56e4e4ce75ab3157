"""More than one node: torchrun with 2 nodes of 2 processes each on 127.0.0.1 (gloo, c10d rendezvous), through
pretraining and linear evaluation, against the same 4 processes on one node."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from moco_core import checkpoint

ROOT = Path(__file__).resolve().parents[1]
PRETRAIN = ["model.arch=resnet18", "optim.batch_size=16", "model.queue_size=48", "optim.epochs=1",
            "augment.crop_size=32", "data.workers=0", "run.knn_every=0", "run.log_every=1", "model.shuffle_bn=shuffle"]
LINEAR = ["optim.epochs=1", "optim.batch_size=16", "data.crop_size=32", "data.resize=32", "data.workers=0"]


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _torchrun(nodes: int, per_node: int, args: list[str], cwd: Path) -> None:
    """``torchrun`` on ``nodes`` agents of this machine, each starting ``per_node`` processes, all joining one
    c10d rendezvous on 127.0.0.1; waits for all."""
    port = _port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    launcher = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nodes}", f"--nproc-per-node={per_node}",
                "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id=moco-{port}",
                "--max-restarts=0", "-m", "cli", *args]
    agents = [subprocess.Popen(launcher, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True) for _ in range(nodes)]
    outputs = [agent.communicate(timeout=600)[0] for agent in agents]
    for agent, output in zip(agents, outputs, strict=True):
        assert agent.returncode == 0, output[-3000:]


@pytest.mark.slow
def test_two_nodes_of_two_processes_equal_one_node_of_four(shapes_root: Path, tmp_path: Path) -> None:
    sets = [a for s in PRETRAIN for a in ("--set", s)]
    for name, nodes, per_node in (("one_node", 1, 4), ("two_nodes", 2, 2)):
        _torchrun(nodes, per_node, ["pretrain", "-c", "embedded", "--data", str(shapes_root), "--output-dir",
                                    str(tmp_path / name), "--quiet", *sets], tmp_path)
        _torchrun(nodes, per_node, ["eval", "linear", str(tmp_path / name / checkpoint.LAST), "-c",
                                    "lincls_embedded", "--data", str(shapes_root), "--output-dir",
                                    str(tmp_path / f"{name}_linear"), "--quiet",
                                    *[a for s in LINEAR for a in ("--set", s)]], tmp_path)
    one, two = (checkpoint.load(tmp_path / name / checkpoint.LAST) for name in ("one_node", "two_nodes"))
    # 32 images, a global batch of 16 over 4 processes: 2 steps, each enqueuing the keys of all 4 ranks
    assert one["global_step"] == two["global_step"] == 2
    assert int(two["state_dict"]["module.queue_ptr"]) == 32 % 48
    for key, value in one["state_dict"].items():
        assert torch.equal(value, two["state_dict"][key]), key
    records = [json.loads((tmp_path / f"{name}_linear" / "result.json").read_text())
               for name in ("one_node", "two_nodes")]
    assert records[0]["metrics"] == records[1]["metrics"] and records[0]["history"] == records[1]["history"]
    for name in ("one_node", "two_nodes", "one_node_linear", "two_nodes_linear"):  # ~0.5 GB of checkpoints
        shutil.rmtree(tmp_path / name)
