"""Published reference numbers (``published.csv``, a copy of shared/reference/moco_published.csv) and when to show
them beside ours.

Matching rule (a published row is shown in one of our tables only when the evaluation setting is the same):

* ImageNet linear classification: our table is task ``linear`` with the protocol the published schedule names
  ("100ep lincls": ``linear``, the v1/v2 paper's; "90ep v3 lincls": ``linear-mocov3``, the official moco-v3
  main_lincls.py's; never ``linear-cached`` nor kNN), run for the epochs it names (100, 90), its evaluation
  dataset's name or path contains "imagenet" or "ilsvrc" (case-insensitive), and the published ``backbone`` is
  the short name of an arch in the table (R50 = resnet50, ViT-S/16 = vit_small). So MoCo v3's rows are never
  beside the v1/v2 protocol's numbers, nor v1/v2's beside the v3 protocol's.
  The momentum-ablation rows (backbone "R50 (K=4096)", MoCo v1's) are shown in our momentum ablation table of
  the v1/v2 mechanisms under the same conditions, never in MoCo v3's.
* Fine-tuning (appendix A.6, A.7): task ``finetune`` on ImageNet (a dataset name or path with "imagenet" or
  "ilsvrc") beside ``imagenet_finetune``, on iNaturalist 2018 ("inat") beside ``inat2018_finetune``, run for the
  epochs of the preset (``finetune_imagenet``, ``finetune_inat``), the published ``backbone`` an arch in the table.
* VOC detection: task ``voc``, dataset name or path contains "voc" and the sets are the standard ones (not
  "custom: ..."), engine ``detectron2`` (the published numbers
  are Detectron2's), the detector model equals the published backbone (R50-C4) and the schedule equals it (24k)
  where our record names one.
* COCO: task ``coco``, dataset name or path contains "coco", engine ``detectron2``, same model and schedule.
* COCO keypoints: task ``keypoints``, the same conditions as COCO's (R50-FPN, 2x).
* COCO dense pose: task ``densepose``, the same conditions (R50-FPN, s1x); AP^dp is the GPS one (``dp_gps_AP*``).
* LVIS and Cityscapes instance segmentation: the same with "lvis" / "cityscapes" (the published Cityscapes row
  names no schedule: it is shown beside the preset's 24k run).
* Semantic segmentation: task ``semseg``, the dataset's name or path contains "voc" (VOC12 semantic) or
  "cityscapes" (Cityscapes semantic) and is not one's own folders, the network equals the published backbone
  ("R50 FCN-style os16", the name ``moco eval semseg`` records) and the schedule equals it (30k, 90k). The
  published numbers come from the authors' own code, which was not released: any engine of ours matches.

Other methods' published numbers (the rows with a ``method``: DINO, DINOv2, SwAV, Barlow Twins, BYOL, SimCLR, MAE)
are shown beside each of our rows of that method (the method its record states or the user named), in a
"published" column, where the backbone is the published one (short name, and DINOv2's registers) and the setting
matches: ImageNet linear classification at its preset's length (each method's number is from its own linear
protocol: the note says so), or ImageNet kNN with the published k (DINO's: 20); never in the table-wide rows.

* Instance retrieval (DINOv2's Table 9, task ``revisitop_retrieval``): task ``retrieval``, the table's query
  variant the row's ``schedule`` ("full queries": DINOv2 ranked whole query images), never the embedded data; each
  row shows the columns of the datasets our rows ran (its metric names are ours: ``roxford5k/full/medium/map``), and
  is not shown where none. Every backbone's row is shown, as the paper's table puts them side by side.

The transfer suite's published rows (tasks ``transfer_linear`` and ``transfer_finetune``: Ericsson et al.'s Table 1,
DINOv2's Table 8, SimCLR's Table B.5; the ``schedule`` is the protocol that measured them, the metric a dataset or
"average", the source's own mean) are placed by :mod:`reports.linear_transfer.published`.

Nothing matches the embedded toy data. Published rows are labelled "published" ("published (secondary)" where the
CSV's ``checked`` is ``secondary``: read from a re-typed copy of the paper), keep their source, and never enter our
means. Their differences are to the published supervised row of the same task, backbone and schedule.
"""

from __future__ import annotations

import csv
import dataclasses
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from reports.pretraining import short_arch
from reports.protocols import DETECTION_TASKS, V3_PROTOCOL, finetune_data, paper_length, runs_preset_length
from reports.summary import Setting

PUBLISHED_CSV = Path(__file__).with_name("published.csv")
# Published metric name -> ours (by task)
METRIC_NAMES = {"APbb": "bbox_AP", "APbb50": "bbox_AP50", "APbb75": "bbox_AP75", "APmk": "segm_AP",
                "APmk50": "segm_AP50", "APmk75": "segm_AP75", "APkp": "keypoints_AP", "APkp50": "keypoints_AP50",
                "APkp75": "keypoints_AP75", "APdp": "dp_gps_AP", "APdp50": "dp_gps_AP50", "APdp75": "dp_gps_AP75"}
TASKS = {"linear": "imagenet_linear", "voc": "voc07+12_det", "coco": "coco_det_seg", "keypoints": "coco_keypoints",
         "lvis": "lvis_v0.5", "cityscapes": "cityscapes_instance",
         "densepose": "coco_densepose"}
_ANY_SCHEDULE = "-"  # a published row without a schedule (Cityscapes instance): beside ours at the preset's length
FINETUNE_TASKS = {"imagenet": "imagenet_finetune", "inat2018": "inat2018_finetune"}  # by data kind
# Semantic segmentation: the published task by the word the evaluation dataset's name or path holds
SEMSEG_TASKS = {"voc": "voc12_semantic", "cityscapes": "cityscapes_semantic"}
RETRIEVAL_TASK = "revisitop_retrieval"  # metrics named as moco eval retrieval's, schedule its query variant
_MOMENTUM = re.compile(r"\bm=([0-9.]+)")


@dataclass
class PublishedRow:
    """The published metrics of one (task, backbone, schedule, pretraining data, pretraining, source)."""

    task: str
    backbone: str
    schedule: str
    pretrain_data: str
    pretrain: str
    source: str
    checked: str
    method: str = ""  # the method (reports.pretraining.METHOD_NAMES) whose rows it is shown beside; "": MoCo's tables
    values: dict[str, float] = field(default_factory=dict)  # by our metric names
    deltas: dict[str, float] = field(default_factory=dict)

    @property
    def secondary(self) -> bool:
        return self.checked != "primary"

    @property
    def origin(self) -> str:
        return "published (secondary)" if self.secondary else "published"

    @property
    def label(self) -> str:
        details = ", ".join(p for p in (self.pretrain_data, self.backbone) if p and p not in ("none", "-"))
        return f"{self.origin}: {self.pretrain} ({details})"

    @property
    def protocol(self) -> str | None:
        """Our protocol of the same evaluation: "linear-mocov3" for MoCo v3's "90ep v3 lincls", "linear" for the
        paper's "100ep lincls"; None for the detection schedules."""
        if self.task != TASKS["linear"]:
            return None
        return V3_PROTOCOL if " v3 " in f" {self.schedule} " else "linear"

    @property
    def momentum(self) -> float | None:
        found = _MOMENTUM.search(self.pretrain)
        return float(found.group(1)) if found else None


def load_published(path: Path = PUBLISHED_CSV) -> list[PublishedRow]:
    """One row per published setting, in the file's order, with the published supervised differences."""
    rows: dict[tuple[str, ...], PublishedRow] = {}
    with path.open(newline="", encoding="utf-8") as f:
        for line in csv.DictReader(f):
            key = tuple(line[k] for k in ("task", "backbone", "schedule", "pretrain_data", "pretrain", "source",
                                          "checked")) + (line.get("method") or "",)
            row = rows.setdefault(key, PublishedRow(*key))
            row.values[METRIC_NAMES.get(line["metric"], line["metric"])] = float(line["value"])
    result = list(rows.values())
    for row in result:
        _add_deltas(row, result)
    return result


def _add_deltas(row: PublishedRow, rows: list[PublishedRow]) -> None:
    if row.pretrain == "supervised":
        return
    for metric, value in row.values.items():
        refs = [r.values[metric] for r in rows if r.pretrain == "supervised" and metric in r.values
                and (r.task, r.backbone, r.schedule) == (row.task, row.backbone, row.schedule)]
        if len(refs) == 1:
            row.deltas[metric] = value - refs[0]


def _schedule_epochs(schedule: str) -> int | None:
    """The linear protocol's epochs a published schedule names ("100ep lincls": 100; MoCo v3's "90ep v3 lincls":
    90), or None: a published row is shown beside ours only where the protocols are as long."""
    found = re.match(r"(\d+)ep\b", schedule)
    return int(found.group(1)) if found else None


def _named(setting: Setting, *words: str) -> bool:
    text = f"{setting.dataset} {setting.dataset_path}".lower()
    return any(w in text for w in words)


def matching(setting: Setting, archs: set[str], rows: list[PublishedRow],
             metrics: Collection[str] = ()) -> list[PublishedRow]:
    """The published rows to show in the main table of ``setting`` (whose rows have these archs, and these
    ``metrics``: a retrieval row is shown for the datasets they name only): none beside a protocol shortened or
    lengthened from the paper's. Other methods' rows are shown beside their own rows only (:func:`beside`)."""
    rows = [r for r in rows if not r.method]
    if not runs_preset_length(setting):
        return []
    if setting.task == "retrieval":
        return _retrieval(setting, set(metrics), rows)
    if setting.task == "linear":
        if setting.protocol not in ("linear", V3_PROTOCOL) or not _named(setting, "imagenet", "ilsvrc"):
            return []
        shorts = {short_arch(a) for a in archs}
        epochs = setting.length or paper_length(setting)
        return [r for r in rows if r.task == TASKS["linear"] and r.protocol == setting.protocol
                and r.backbone in shorts and _schedule_epochs(r.schedule) in (None, epochs)]
    if setting.task == "finetune":
        task = FINETUNE_TASKS.get(finetune_data(setting) or "")
        shorts = {short_arch(a) for a in archs}
        return [r for r in rows if task and r.task == task and r.backbone in shorts]
    if setting.task in DETECTION_TASKS:
        custom = setting.dataset.startswith("custom:")  # one's own devkit or COCO file (transfer/detection/datasets.py)
        word = "coco" if setting.task in ("keypoints", "densepose") else setting.task
        if setting.engine != "detectron2" or custom or not _named(setting, word):
            return []
        return [r for r in rows if r.task == TASKS[setting.task] and r.backbone == setting.model
                and (setting.schedule is None or r.schedule in (setting.schedule, _ANY_SCHEDULE))]
    if setting.task == "semseg" and not setting.dataset.startswith("custom:"):
        tasks = {task for word, task in SEMSEG_TASKS.items() if _named(setting, word)}
        return [r for r in rows if r.task in tasks and r.backbone == setting.model and r.schedule == setting.schedule]
    return []


def _retrieval(setting: Setting, metrics: set[str], rows: list[PublishedRow]) -> list[PublishedRow]:
    """The published rows of the table's query variant (its model, the rows' ``schedule``), each with the values of
    the table's columns only: their metric names hold the real datasets' names (roxford5k, rparis6k), which no
    embedded set has."""
    if setting.dataset_path == "embedded":
        return []
    shown = [dataclasses.replace(r, values={m: v for m, v in r.values.items() if m in metrics})
             for r in rows if r.task == RETRIEVAL_TASK and r.schedule == setting.model]
    return [r for r in shown if r.values]


def matching_momentum(setting: Setting, archs: set[str], rows: list[PublishedRow],
                      methods: set[str] | None = None) -> list[PublishedRow]:
    """The published momentum-ablation rows (MoCo v1's) to show in our momentum ablation table of ``setting``,
    whose curves are of ``methods`` (sweep.method): none in a table of MoCo v3's curves."""
    if "mocov3" in (methods or set()) or setting.task != "linear" or setting.protocol != "linear" \
            or not _named(setting, "imagenet", "ilsvrc") or not runs_preset_length(setting):
        return []
    shorts = {short_arch(a) for a in archs}
    return [r for r in rows if r.task == TASKS["linear"] and r.momentum is not None and r.protocol == "linear"
            and r.backbone.split(" ")[0] in shorts and r.backbone.startswith(tuple(f"{s} (K=" for s in shorts))]


KNN_TASK = "imagenet_knn"


def beside(setting: Setting, method: str | None, backbone: str, rows: list[PublishedRow]) -> PublishedRow | None:
    """The published number of ``method`` on ``backbone`` (:func:`reports.pretraining.published_backbone`) in
    ``setting``, where exactly one row matches (see the module docstring); None otherwise."""
    if not method or not _named(setting, "imagenet", "ilsvrc"):
        return None
    if setting.task == "linear" and setting.protocol in ("linear", V3_PROTOCOL) and runs_preset_length(setting):
        task, schedule = TASKS["linear"], None
    elif setting.task == "knn" and setting.protocol == "knn" and setting.k is not None:
        task, schedule = KNN_TASK, f"k={setting.k}"
    else:
        return None
    found = [r for r in rows if r.method == method and r.task == task and r.backbone == backbone
             and (schedule is None or r.schedule == schedule)]
    return found[0] if len(found) == 1 else None
