"""``moco bench MATRIX --status``: the matrix as a table, read from the cells' run directories while they run:
done, running with its job or process, queued with its job id, failed or stopped with its log's last line."""

from __future__ import annotations

import os
import re
import socket
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app
from cluster.bench import write_state
from cluster.matrix import cells_of, read_matrix

MATRIX = """\
output_dir: out
checkpoints:
  - {label: mine, path: random, arch: resnet18}
  - {label: baseline_long, path: random, arch: resnet50}
evaluations:
  - {label: knn, command: eval knn}
  - {label: linear, command: eval linear}
  - {label: transfer, command: eval transfer}
"""


def test_the_table_says_what_each_cell_is_doing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.yaml").write_text(MATRIX)
    cells = {c.name: c for c in cells_of(read_matrix("m.yaml"), None)}
    gone = subprocess.Popen(["true"])
    gone.wait()  # a process id that has ended
    here = socket.gethostname()
    log = tmp_path / "failed.log"
    log.write_text("features step 8/8\nerror: data: no such folder\nwarning: closing\n")
    write_state(cells["mine/knn"], state="done")
    (cells["mine/knn"].run_dir / "result.json").write_text('{"metrics": {"top1": 71.25, "top5": 90.0}}')
    write_state(cells["mine/linear"], state="running", pid=os.getpid(), host=here, log="x")
    write_state(cells["mine/transfer"], state="queued", job_id="4242_2", log="x")
    write_state(cells["baseline_long/knn"], state="failed", exit_status=2, log=str(log))
    write_state(cells["baseline_long/linear"], state="running", pid=gone.pid, host=here, log=str(log))
    (cells["baseline_long/transfer"].run_dir / "flowers").mkdir(parents=True)  # one dataset of the suite done
    (cells["baseline_long/transfer"].run_dir / "flowers" / "result.json").write_text("{}")
    done = CliRunner().invoke(app, ["bench", "m.yaml", "--status"])
    assert done.exit_code == 0, done.output
    lines = done.output.splitlines()
    assert [re.split(r"\s{2,}", line.strip()) for line in lines[:3]] == [
        ["knn", "linear", "transfer"],
        ["mine", "done top1 71.2", f"running pid {os.getpid()}", "queued job 4242_2"],
        ["baseline_long", "failed", "stopped", "checkpoint (--resume)"]]
    assert len({line.index(word) for line, word in zip(lines[:3], ("linear", "running", "stopped"), strict=True)}) == 1
    assert lines[3:] == [
        "6 cells: 1 done, 1 running, 1 queued, 1 failed, 1 stopped",
        f"failed: baseline_long/knn: {log}: error: data: no such folder",
        f"stopped: baseline_long/linear: {log}: error: data: no such folder"]
