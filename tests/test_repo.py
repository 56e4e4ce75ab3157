"""The repository's promises: README's two commands, and CI running exactly the README's test command."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)\n```", (ROOT / "README.md").read_text(), flags=re.S)
    return blocks[:2]


def test_readme_opens_with_the_two_setup_commands() -> None:
    main_job, tests = readme_commands()
    assert main_job.startswith("python3 -m venv .venv") and main_job.endswith("moco demo")  # the whole protocol
    assert tests.startswith("python3 -m venv .venv") and tests.endswith("pytest -q")


def test_ci_runs_the_readme_test_command() -> None:
    _, tests = readme_commands()
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert tests in ci


def test_configs_are_shipped_as_package_data() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'configs = ["*.yaml"]' in pyproject
    assert {p.stem for p in (ROOT / "configs").glob("*.yaml")} >= {"embedded", "moco_v1_200ep", "moco_v2_200ep",
                                                                    "moco_v2_800ep"}
