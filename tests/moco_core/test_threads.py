"""CPU threads chosen for the machine (moco_core/threads.py): the free cores, shared between a run's processes."""

from __future__ import annotations

import logging

import pytest
import torch

from moco_core import threads as runtime


@pytest.mark.parametrize("cores, load, processes, threads", [
    (2, 0.0, 1, 2),  # idle: every core
    (2, 0.4, 1, 2),  # 1.6 free rounds to 2
    (2, 0.6, 1, 1),  # 1.4 free: 1
    (2, 1.03, 1, 1),  # another job on one core: 1 (the collapse benchmarks/cpu_threads.py measured with 2)
    (2, 3.5, 1, 1),  # busier than the machine: still 1
    (2, 0.0, 2, 1),  # two processes share two cores
    (16, 0.2, 1, 16),
    (16, 4.0, 1, 12),
    (16, 0.0, 4, 4),
    (16, 8.0, 4, 2),
    (1, 0.0, 1, 1),
    (2, -1.0, 1, 2),  # a negative load (never seen) counts as none
])
def test_cpu_threads(cores: int, load: float, processes: int, threads: int) -> None:
    assert runtime.cpu_threads(cores, load, processes) == threads


@pytest.fixture
def threads_kept() -> None:
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_a_busy_machine_gets_fewer_threads_and_a_note(threads_kept: None, monkeypatch: pytest.MonkeyPatch,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    for name in ("LOCAL_WORLD_SIZE", "WORLD_SIZE", "RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(runtime.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(runtime.os, "getloadavg", lambda: (1.5, 1.0, 1.0))
    with caplog.at_level(logging.WARNING, logger="moco.threads"):
        assert runtime.use_cpu_threads() == 1
    assert torch.get_num_threads() == 1
    (note,) = [r.getMessage() for r in caplog.records]
    assert note.startswith("note: 1 CPU thread a process, not 2: the load average is 1.5 on 2 cores")
    assert "OMP_NUM_THREADS" in note
    monkeypatch.setattr(runtime.os, "getloadavg", lambda: (0.1, 1.0, 1.0))
    caplog.clear()
    assert runtime.use_cpu_threads() == 2 and torch.get_num_threads() == 2 and not caplog.records


def test_omp_num_threads_decides(threads_kept: None, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.set_num_threads(1)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setattr(runtime.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert runtime.use_cpu_threads() == 1 and torch.get_num_threads() == 1
