"""``moco trials N -- COMMAND``: one command run with N seeds, each trial in a run directory of its own.

Trial ``i`` runs COMMAND with seed ``seed + i`` (``--seed`` for pretrain, voc, coco, semseg; ``--set run.seed`` for
linear and finetune) into ``OUTPUT_DIR/seed_<s>``; ``{seed}`` in an argument becomes the trial's seed, so an
evaluation can name the pretraining of the same seed (``runs/moco/seed_{seed}/checkpoint_last.pth.tar``). Running
it again continues: a finished evaluation is skipped and an interrupted run resumed (as ``moco launch`` does).
``moco report`` shows the trials as one row, mean ± std over n (pretrainings are grouped by recipe, not by weights).
A stop signal stops the whole of it (:class:`moco_core.run.preemption.Stopper`): no further trial is started.
"""

from __future__ import annotations

import dataclasses
import sys

from cluster.job import Command, LaunchError, run_moco
from moco_core.commands import COMMANDS
from moco_core.run.preemption import Stopper


def trial_commands(argv: list[str], trials: int, seed: int) -> list[Command]:
    """The command of each trial: its own run directory, its seed."""
    if trials < 1:
        raise LaunchError(f"N: the number of trials must be >= 1, got {trials}")
    if argv[:1] == ["sweep"]:
        raise LaunchError("moco trials does not run sweeps: use moco sweep --trials N (each trial in OUT/seed_<s>)")
    command = Command.parse(argv, runner="moco trials")
    seed_words = COMMANDS[command.name].seed
    if seed_words is None:
        seeded = [name for name, row in COMMANDS.items() if row.seed is not None]
        raise LaunchError(f"moco trials runs one of: {', '.join(seeded)}; got {command.name!r}")
    if any(a == "--seed" or a.startswith(("--seed=", "run.seed=")) for a in command.args):
        raise LaunchError("--seed: not with moco trials: each trial gets its own (--seed of moco trials, + 1, ...)")
    out = []
    for s in range(seed, seed + trials):
        run_dir = command.run_dir / f"seed_{s}"
        args = [a.replace("{seed}", str(s)) for a in command.args[:-2]]  # the last two: --output-dir DIR
        option, value = seed_words
        out.append(dataclasses.replace(command, args=(*args, option, value.format(s), "--output-dir", str(run_dir)),
                                       run_dir=run_dir))
    return out


def run_trials(argv: list[str], trials: int, seed: int) -> int:
    """Run each trial in turn, in this process; 0 when all succeeded, else 1 after trying every one.

    A stop signal raises :class:`moco_core.run.preemption.Stopped` once the trial under way has stopped: a failed
    trial lets the next one start, a stopped one does not.
    """
    failed = []
    commands = trial_commands(argv, trials, seed)
    with Stopper() as stopper:
        for command in commands:
            if command.finished():
                print(f"{command.run_dir}: finished before", file=sys.stderr, flush=True)
                continue
            stopper.doing = f"trial {command.run_dir.name} (moco {command.name})"
            print(f"trial {command.run_dir.name}: moco {' '.join(command.argv())}", file=sys.stderr, flush=True)
            code = run_moco(command.argv())
            stopper.check()  # a pretraining stopped by the signal returns with status 0, its checkpoint written
            if code:
                failed.append(f"{command.run_dir.name} (exit status {code})")
    if failed:
        print(f"error: {len(failed)} of {trials} trials failed: {', '.join(failed)}; run the same command again to "
              f"retry them (finished trials are kept)", file=sys.stderr)
        return 1
    return 0
