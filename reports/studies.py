"""Studies: the families of runs one ``moco report`` finds, each reported in a section (or a page) of its own.

A folder of runs often holds several studies at once: ``moco demo``'s, the README's tour, one's own data. Put in
one set of tables, their rows mix (the demo's MoCo row and the tour's, of one recipe, become two trials of one
row) and the page reads as one study that never ran. Records are gathered into studies so:

* everything under a directory holding ``demo.json`` (a ``moco demo``'s output) is that demo's study;
* the other records are linked when they share a table (task, protocol, evaluation data), the weights they
  evaluate (a checkpoint's SHA-256, or for trials the pretraining recipe), the data those were pretrained on, or
  the data they are evaluated on; each connected group is a study, named after the data its pretrainings used
  (else the data it evaluates on).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath

from reports.pretraining import data_name
from reports.records import Record

DEMO_MARK = "demo.json"  # moco_demo.run writes it at the top of a demo's output directory


@dataclass(frozen=True)
class Study:
    name: str  # what ``moco report --only`` takes; unique in a report
    description: str
    records: tuple[Record, ...]

    @property
    def slug(self) -> str:
        """The study's name as a folder name (``moco report --split``)."""
        return re.sub(r"[^A-Za-z0-9._-]+", "_", self.name).strip("._") or "study"


def demo_root(record: Record, roots: Sequence[str]) -> str | None:
    """The directory of the ``moco demo`` a record belongs to (a parent holding ``demo.json``, not above the root
    it was found under), as shown; None for a record of no demo."""
    shown = PurePath(record.path)
    tops = [PurePath(root) for root in roots]
    top = next((t for t in tops if t == shown or t in shown.parents), None)
    for parent in shown.parents:
        if (Path(parent) / DEMO_MARK).is_file():
            return str(parent)
        if parent == top:
            break
    return None


class _Groups:
    """Union-find over string keys."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, key: str) -> str:
        self.parent.setdefault(key, key)
        while self.parent[key] != key:
            self.parent[key] = self.parent[self.parent[key]]
            key = self.parent[key]
        return key

    def join(self, a: str, b: str) -> None:
        self.parent[self.find(a)] = self.find(b)


def _links(record: Record) -> list[str]:
    """What ties a record to others of its study: its table, its evaluation data, its weights, their data."""
    p = record.pretraining
    links = [f"table\0{record.task}\0{record.protocol}\0{record.dataset_path}", f"data\0{record.dataset_path}"]
    if p.kind != "random":
        identity = p.recipe or p.sha256
        if identity:
            links.append(f"weights\0{identity}")
        if p.data_path:
            links.append(f"data\0{p.data_path}")
    return links


def _names(paths: set[str]) -> str:
    names = sorted({data_name(path) or path for path in paths})
    return " + ".join(names[:3]) + (f" + {len(names) - 3} more" if len(names) > 3 else "")


def find_studies(records: Sequence[Record], roots: Sequence[str]) -> list[Study]:
    """The studies the records make up, demos first, then by name."""
    demos: dict[str, list[Record]] = {}
    rest: list[Record] = []
    for record in records:
        root = demo_root(record, roots)
        if root is None:
            rest.append(record)
        else:
            demos.setdefault(root, []).append(record)
    groups = _Groups()
    for record in rest:
        first, *others = _links(record)
        for link in others:
            groups.join(first, link)
    parts: dict[str, list[Record]] = {}
    for record in rest:
        parts.setdefault(groups.find(_links(record)[0]), []).append(record)
    studies = [Study("demo" if len(demos) == 1 else root, f"moco demo in {root}", tuple(found))
               for root, found in sorted(demos.items())]
    named = []
    for found in parts.values():
        pretrained = {r.pretraining.data_path for r in found if r.pretraining.data_path}
        evaluated = {r.dataset_path for r in found}
        name = _names(pretrained) if pretrained else _names(evaluated)
        what = f"pretrained on {_names(pretrained)}; " if pretrained else ""
        named.append(Study(name, f"{what}evaluated on {_names(evaluated)}", tuple(found)))
    taken = {s.name for s in studies}
    for study in sorted(named, key=lambda s: s.name):
        name, n = study.name, 2
        while name in taken:
            name, n = f"{study.name} ({n})", n + 1
        taken.add(name)
        studies.append(Study(name, study.description, study.records))
    return studies
