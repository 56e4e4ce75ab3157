"""Issue 56: a requeued ``moco launch`` job resumes, whatever evaluation it runs. Each job is stopped part-way by
the scheduler's SIGTERM, as a pre-emption stops it, and then started again as the requeue hook hands it over
(``Job.checkpoint``): the same command, with what resumes it from its run directory (``Command.argv``), run in
this process (``run_moco``) instead of on a scheduler (tests/cluster/test_launch.py runs the whole cycle on
submitit's local executor, for pretraining, in minutes).

``eval linear --grid`` used to restart without ``--resume`` (the launcher looked for the linear protocol's
checkpoint, the grid writes its own) and was refused as a second start; ``eval transfer`` and ``eval knn`` were
not launchable at all."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from cluster.job import Command, Job, run_moco

pytest.importorskip("submitit")

SHORT = ["--device", "cpu", "--workers", "0"]
EPOCHS_2 = ["--set", "optim.epochs=2", "--set", "optim.batch_size=8", "--set", "data.crop_size=32",
            "--set", "data.resize=36"]  # 32 images of shapes_root: 4 steps an epoch, two epochs
# name: (the command after moco launch --, without --output-dir; MOCO_SMOKE; the file whose nth write the stop
# comes just before: (name, n), n counting from 1)
JOBS: dict[str, tuple[list[str], bool, tuple[str, int]]] = {
    "grid": (["eval", "linear", "random", "--arch", "resnet18", "--grid", *EPOCHS_2, "--set", "grid.lrs=[0.001,1.0]",
              "--quiet"], False, ("grid_last.pth.tar", 2)),  # in the second epoch, the first one's checkpoint written
    "finetune": (["eval", "finetune", "random", "--arch", "resnet18", "-c", "finetune_embedded", *EPOCHS_2,
                  "--quiet"], False, ("finetune_last.pth.tar", 2)),
    "knn": (["eval", "knn", "random", "--arch", "resnet18", "-c", "knn_embedded", "--set", "k=5"], True,
            ("result.json", 1)),  # trains nothing: stopped before its record, it starts again
    "transfer": (["eval", "transfer", "random", "--arch", "resnet18", "-c", "transfer_embedded", "--datasets",
                  "shapes,textures", "--set", "solver.lambdas=3", "--quiet"], True,
                 ("result.json", 2)),  # the first dataset done, not the second
}


def stop_before(monkeypatch: pytest.MonkeyPatch, name: str, n: int) -> Callable[[], int]:
    """SIGTERM to this process just before the ``n``th file called ``name`` is put in place (every checkpoint is
    written to a temporary file and renamed, every record linked); returns how many were put in place so far."""
    put = [0]

    def putting(original: Callable[..., None]) -> Callable[..., None]:
        def put_in_place(src: str | os.PathLike[str], dst: str | os.PathLike[str], **kwargs: object) -> None:
            ours = Path(dst).name == name
            if ours and put[0] == n - 1:
                os.kill(os.getpid(), signal.SIGTERM)  # the evaluation's Stopper raises here, as a scheduler stops it
            original(src, dst, **kwargs)
            put[0] += ours
        return put_in_place

    monkeypatch.setattr(os, "replace", putting(os.replace))
    monkeypatch.setattr(os, "link", putting(os.link))
    return lambda: put[0]


def epochs_logged(run_dir: Path) -> list[int]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["epoch"] for line in lines if '"epoch"' in line]


@pytest.mark.parametrize("job", JOBS)
def test_a_requeued_evaluation_resumes(job: str, shapes_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    argv, smoke, (name, n) = JOBS[job]
    monkeypatch.setenv("MOCO_SMOKE", "1") if smoke else monkeypatch.delenv("MOCO_SMOKE", raising=False)
    data = [] if smoke else ["--data", str(shapes_root)]
    out = tmp_path / job
    command = Command.parse([*argv, *data, *SHORT, "--output-dir", str(out)])  # what moco launch submits
    with pytest.MonkeyPatch.context() as patch:
        put = stop_before(patch, name, n)
        assert run_moco(command.argv()) == 128 + signal.SIGTERM  # stopped part-way
        assert put() == n - 1 and not command.finished()
    stopped = capsys.readouterr().err.strip().splitlines()[-1]
    assert stopped.startswith("stopped by SIGTERM during the evaluation; continue with: "), stopped
    requeued = Job(command).checkpoint().function.command  # what submitit runs at the next start
    again = requeued.argv()
    assert run_moco(again) == 0, capsys.readouterr().err  # not refused as a second start
    resumes = job != "knn"  # kNN has no --resume: it starts again (it checkpoints nothing)
    assert again == [*argv, *data, *SHORT, "--output-dir", str(out), *(["--resume"] if resumes else [])]
    assert stopped.endswith(" --resume") is resumes  # the CLI's own line gives the same answer
    assert requeued.finished() or job == "transfer"  # a suite is done dataset by dataset
    starts = json.loads((out / "run.json").read_text())["starts"] if job != "knn" else []
    if job in ("grid", "finetune"):  # the second start ran the second epoch only
        assert len(starts) == 2 and epochs_logged(out) == [0, 1]
        assert json.loads((out / "result.json").read_text())["history"][-1]["epoch"] == 1
    if job == "transfer":  # the first dataset was not run again, the others were
        done = sorted(p.parent.name for p in out.glob("*/result.json"))
        suite = json.loads((out / "suite.json").read_text())["datasets"]
        assert len(starts) == 2 and sorted(suite) == done and list(suite.values()).count("done before") == 1
    if job == "knn":
        assert json.loads((out / "result.json").read_text())["task"] == "knn"
