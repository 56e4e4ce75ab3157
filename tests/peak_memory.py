"""Peak memory of ``moco`` commands, measured on the commands themselves: a table of commands run in-process
(typer's CliRunner) by one fresh Python, one import of torch for the whole table, started by a small process that
reads its peak from RUSAGE_CHILDREN (a process forked from pytest would start with pytest's peak:
tests/test_cli_inputs.py says why), under an address-space cap that stops a runaway before the machine's memory."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# Runs each command of a JSON list in-process, as the moco entry point would, and writes (exit code, output,
# stderr, exception, this process's peak so far) of each to a JSON file after each command.
DRIVER = """
import json, resource, sys
from typer.testing import CliRunner
from cli import app
results = []
for args in json.load(open(sys.argv[1])):
    res = CliRunner().invoke(app, args)
    failed = res.exception is not None and not isinstance(res.exception, SystemExit)
    results.append({"code": res.exit_code, "output": res.output, "stderr": res.stderr,
                    "exception": repr(res.exception)[:300] if failed else None,
                    "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024})
    json.dump(results, open(sys.argv[2], "w"))
"""


def measured(commands: list[list[str]], tmp: Path, cap: int) -> tuple[list[dict[str, Any]], int]:
    """The ``moco`` commands run one after another by one fresh Python whose address space is capped at ``cap``
    bytes: the result of each (``code``, ``output``, ``stderr``, ``exception``: a crash's repr, ``peak``: the
    process's peak resident bytes after it), and the peak of the whole process, which bounds each command's."""
    probe = ("import resource, subprocess, sys; code = subprocess.call(sys.argv[1:], stdout=subprocess.DEVNULL); "
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(code)")

    def capped() -> None:
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        resource.setrlimit(resource.RLIMIT_AS, (cap if hard == resource.RLIM_INFINITY else min(cap, hard), hard))

    (tmp / "commands.json").write_text(json.dumps(commands))
    process = subprocess.run([sys.executable, "-c", probe, sys.executable, "-c", DRIVER, str(tmp / "commands.json"),
                              str(tmp / "results.json")], cwd=ROOT, capture_output=True, text=True, preexec_fn=capped,
                             timeout=900, env={**os.environ, "PYTHONPATH": str(ROOT)})
    done = json.loads((tmp / "results.json").read_text()) if (tmp / "results.json").is_file() else []
    assert process.returncode == 0 and len(done) == len(commands), (process.returncode, process.stderr[-3000:])
    return done, int(process.stdout.split()[-1]) * 1024
