"""The packages' layering, read from the source with ``ast`` (nothing is imported): shared services live in
moco_core, classification, transfer and dense import only moco_core, no module imports itself back through others;
the root ``cli.py`` (``moco``) gathers the packages' command lines, and one package module imports it back: the
exception named in :data:`EXCEPTIONS`.

``python -m pytest tests/test_layers.py -s`` prints the package graph."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("moco_core", "classification", "transfer", "dense", "probes", "sweeps", "moco_demo", "reports", "cluster")
ALLOWED = {  # package -> the packages of ours it may import
    "moco_core": set(), "classification": {"moco_core"}, "transfer": {"moco_core"}, "dense": {"moco_core"},
    "probes": {"moco_core"}, "reports": {"moco_core"},
    "sweeps": {"moco_core", "classification"}, "cluster": {"moco_core"},
    "moco_demo": {"moco_core", "classification", "transfer", "reports"},
}
ROOT_CLI = "cli"  # cli.py at the root: the moco command
# (module, what it imports) allowed against the layers, with why
EXCEPTIONS = {
    ("cluster.job", ROOT_CLI): "a job runs moco's own command line in its process (run_moco): the cluster's jobs "
                               "are any moco command, which only the root cli gathers",
}


def our_module(name: str) -> str | None:
    """The module of ours that an imported name lies in ("moco_core.run.train.pretrain" -> "moco_core.run.train"),
    None for a package alone or a name outside our files."""
    parts = name.split(".")
    for n in range(len(parts), 1, -1):
        if (ROOT / Path(*parts[:n])).with_suffix(".py").is_file():
            return ".".join(parts[:n])
    return None


def module_imports() -> dict[str, set[str]]:
    """module ("transfer.detection.run", "moco_core.run.train") -> the modules of ours it imports, at the top or inside
    functions."""
    graph: dict[str, set[str]] = defaultdict(set)
    for path in [ROOT / f"{ROOT_CLI}.py", *(p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py")))]:
        me = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            for name in names:
                target = ROOT_CLI if name == ROOT_CLI else (
                    our_module(name) if name.split(".")[0] in PACKAGES else None)
                if target is not None and (me, target) not in EXCEPTIONS:
                    graph[me].add(target)
    return graph


def test_the_root_cli_gathers_the_packages_command_lines_and_one_exception_imports_it() -> None:
    """``cli.py`` imports each package's command line (and moco_core's shared helpers); no package module imports
    it but the named exceptions, whose edges are left out of the graph the other tests read."""
    graph = module_imports()
    assert {t for t in graph[ROOT_CLI] if not t.startswith("moco_core.")} == {
        f"{p}.cli" for p in PACKAGES if p != "moco_core"}, graph[ROOT_CLI]
    assert not [m for m, targets in graph.items() if ROOT_CLI in targets]
    for module, target in EXCEPTIONS:  # each exception is still there: one that went is struck from the list
        path = ROOT / Path(*module.split(".")).with_suffix(".py")
        assert any(isinstance(node, ast.ImportFrom) and node.module == target
                   for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))), (module, target)


def test_packages_import_only_what_their_layer_allows() -> None:
    graph = module_imports()
    packages: dict[str, set[str]] = defaultdict(set)
    for module, targets in graph.items():
        packages[module.split(".")[0]] |= {t.split(".")[0] for t in targets} - {module.split(".")[0]}
    for package in PACKAGES:
        print(f"{package:10s} -> {', '.join(sorted(packages[package])) or '-'}")
    assert {p: packages[p] - ALLOWED[p] for p in PACKAGES if packages[p] - ALLOWED[p]} == {}
    shared = {t for module, targets in graph.items() if module.startswith("reports.") for t in targets
              if not t.startswith("reports.")}
    # reports run where torch is not installed: of moco_core, only modules that import no torch (the one error path,
    # the torch-free builder of suggested commands, the reader of files a user names, the writer of file sets, the
    # names of the transfer suite's solver protocols, the escaping of control characters)
    assert shared <= {"moco_core.errors", "moco_core.commands", "moco_core.user_files", "moco_core.file_sets",
                      "moco_core.solver_protocols", "moco_core.terminal"}, shared


def test_no_module_imports_itself_back() -> None:
    graph = module_imports()
    cycles = set()

    def walk(start: str, node: str, path: tuple[str, ...]) -> None:
        for target in graph.get(node, ()):
            if target == start:
                cycles.add(tuple(sorted(path)))
            elif target not in path:
                walk(start, target, (*path, target))

    for module in list(graph):
        walk(module, module, (module,))
    assert not cycles, sorted(cycles)



BLOCK_EXTRAS = """
import builtins, sys
real_import = builtins.__import__
def without_extras(name, *args, **kwargs):
    if name.split(".")[0] in ("pycocotools", "lvis", "cityscapesscripts", "detectron2"):
        raise ModuleNotFoundError(f"No module named {name!r}")
    return real_import(name, *args, **kwargs)
builtins.__import__ = without_extras
import pytest
sys.exit(pytest.main(["-q", "--collect-only", "-p", "no:cacheprovider", "tests/moco_core"]))
"""


def test_moco_core_tests_collect_without_the_transfer_extras() -> None:
    """``pytest -m gpu tests/moco_core`` collects on a machine without pycocotools and the other transfer extras
    (the GPU machine has none: test_matfile.py's import of tests/layouts.py, which imports the transfer package,
    stopped the whole collection there)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", BLOCK_EXTRAS], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]
