"""The repository's promises: README's two commands, and CI running exactly the README's test command."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)\n```", (ROOT / "README.md").read_text(), flags=re.S)
    return blocks[:2]


def test_readme_opens_with_the_two_setup_commands() -> None:
    main_job, tests = readme_commands()
    assert main_job.startswith("python3 -m venv .venv") and main_job.endswith("moco demo")  # the whole protocol
    assert tests.startswith("python3 -m venv .venv") and tests.endswith("pytest -q -n 2 --dist loadfile")


def test_ci_runs_the_readme_test_command() -> None:
    _, tests = readme_commands()
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert tests in ci


def test_the_wheel_holds_every_module_and_data_file(tmp_path: Path) -> None:
    """What ``pip install .`` ships (not an editable install, which reads the source tree): every module of every
    package, the presets and the published numbers. A package left out of pyproject's list fails here."""
    pytest.importorskip("setuptools")  # the wheel is built without build isolation: no network needed
    source = tmp_path / "src"  # a copy: building writes build/ and *.egg-info beside the sources
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".git", ".venv", "runs", "build", "*.egg-info",
                                                                "__pycache__", ".*_cache", ".hypothesis"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path)], check=True, capture_output=True, timeout=300)
    (wheel,) = tmp_path.glob("moco-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    packages = [p.parent for p in ROOT.glob("*/__init__.py") if p.parent.name != "tests"]
    expected = {"cli.py", *(str(f.relative_to(ROOT)) for package in packages for f in package.rglob("*.py"))}
    expected |= {f"configs/{p.name}" for p in (ROOT / "configs").glob("*.yaml")}
    expected |= {f"reports/{p.name}" for p in (ROOT / "reports").glob("*.csv")}
    assert {"configs/moco_v2_200ep.yaml", "reports/published.csv", "cluster/job.py"} <= expected
    assert sorted(expected - shipped) == []


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_readme_and_docs_links_lead_somewhere() -> None:
    """Every relative link of README.md and docs/*.md names a file that exists, and a heading of it after '#'."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    assert len(pages) > 1
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+://", target):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            assert linked.is_file(), f"{page.name}: {target}"
            if anchor:
                headings = re.findall(r"^#+ (.+)$", linked.read_text(encoding="utf-8"), re.M)
                assert anchor in {_anchor(h) for h in headings}, f"{page.name}: {target}"
