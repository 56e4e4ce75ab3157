"""Reading evaluation result records (schema ``moco.result``, version 1) into typed, validated objects.

Every evaluation writes ``result.json`` (a sweep writes many, in subdirectories); ``*.result.json`` files are read
too. A file that cannot be used -- malformed JSON, another schema, an unknown version, missing or ill-typed
fields -- becomes a :class:`Skipped` with the reason, never an exception and never a silent drop.

Required: ``schema`` "moco.result", ``version`` 1, ``task`` (linear, finetune, knn, voc, coco, semseg), ``protocol``,
``backbone.format``, ``backbone.arch``, ``dataset.path``, and -- unless ``status`` is "failed" -- the task's
metrics as percentages, finite numbers in [0, 100] (:data:`TASK_METRICS`). ``sweep``, when present, must name a known
parameter, a number and a mechanism. Everything else (``config``, ``history``, ``code_version``, extra keys) is
optional here. The file is read through :mod:`moco_core.user_files`: numbers beyond 64-bit integers or finite
floats make it malformed JSON.

Records of task ``voc`` and ``coco`` are not produced by the code yet; their reader follows the schema as
specified: ``metrics`` holds ``AP50``/``AP``/``AP75`` (and optionally ``per_class_AP50``) for VOC and
``bbox_*``/``segm_*`` for COCO, ``engine`` ("detectron2" or "torchvision") is a top-level key, and ``config``
holds ``model`` (e.g. "R50-C4", the VOC default) and ``schedule`` (COCO: "1x", "2x"; required there).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from moco_core.errors import UserError
from moco_core.user_files import RECORD_LIMIT, parse_json, read_bytes
from reports.pretraining import (
    ABSENT_METHODS,
    EVAL_ADDED_NEUTRAL,
    Pretraining,
    data_name,
    moco_variant,
    recipe_digest,
    series_digest,
)
from reports.protocols import DETECTION_TASKS, eval_length

SCHEMA = "moco.result"
VERSION = 1
RECORD_NAME = "result.json"
RECORD_SUFFIX = ".result.json"

# Metrics every successful record of a task must carry, in table order.
TASK_METRICS: dict[str, tuple[str, ...]] = {
    "linear": ("top1", "top5"),
    "finetune": ("top1", "top5"),
    "knn": ("top1", "top5"),
    "voc": ("AP50", "AP", "AP75"),
    "coco": ("bbox_AP", "bbox_AP50", "bbox_AP75", "segm_AP", "segm_AP50", "segm_AP75"),
    "keypoints": ("keypoints_AP", "keypoints_AP50", "keypoints_AP75"),
    "lvis": ("segm_AP", "segm_AP50", "segm_AP75", "bbox_AP"),  # the paper's LVIS table: mask AP, AP50, AP75
    "cityscapes": ("segm_AP", "segm_AP50"),  # cityscapesscripts' instance-level AP and AP50
    "densepose": ("dp_gps_AP", "dp_gps_AP50", "dp_gps_AP75", "dp_gpsm_AP", "bbox_AP"),  # DensePose's evaluator
    "semseg": ("mIoU", "pixel_acc"),
    "linseg": ("mIoU", "pixel_acc"),  # moco eval linseg (dense/linseg.py): frozen patch features, no fine-tuning
    "davis": ("J&F_mean", "J_mean", "F_mean"),  # moco eval davis: DAVIS-2017 J&F, J and F means
    # moco eval retrieval: "<dataset>/<cropped|full>/<easy|medium|hard>/<map|mp@k>" for each it ran
    # (RETRIEVAL_METRIC); a table per query variant (table_views)
    "retrieval": (),
    # moco eval linear --shots: "<k>shot_linear_top1", "<k>shot_knn_top1" for each k it ran (FEWSHOT_METRIC)
    "fewshot": (),
}
FEWSHOT_METRIC = re.compile(r"(\d{1,6})shot_(linear|knn)_top1")
# probes/retrieval/run.py's names: the dataset's folder name (probes/retrieval/data.py NAME), the query variant
# (cropped to its bbx, revisitop's; or whole, DINOv2's), revisitop's protocol, the score (mAP, mP@k)
RETRIEVAL_METRIC = re.compile(r"([a-z0-9][a-z0-9_]{0,63})/(cropped|full)/(easy|medium|hard)/(map|mp@\d{1,6})")
QUERY_VARIANTS = ("cropped", "full")  # probes/retrieval/config.py QUERY_MODES, in its order
TASK_ORDER = tuple(TASK_METRICS)
# Metrics a record may carry beyond its task's, kept where they are finite numbers: the linear head grid's scores
# on ImageNet's robustness sets (classification/robustness.py names them; tests/reports/test_grid.py checks it).
OPTIONAL_METRICS: dict[str, tuple[str, ...]] = {
    "linear": ("imagenet_v2_top1", "imagenet_a_top1", "imagenet_r_top1", "imagenet_sketch_top1", "imagenet_real_top1"),
}
SWEEP_PARAMS = ("queue_size", "momentum")
ENGINES = ("detectron2", "torchvision")
DEFAULT_VOC_MODEL = "R50-C4"
DEFAULT_K = 200  # moco eval knn's neighbours (InstDisc's): a kNN table of another k says so

class RecordError(UserError, ValueError):
    """Why one record cannot be used (becomes a :class:`Skipped`)."""


@dataclass(frozen=True)
class Skipped:
    """A file that looked like a record but was not used, and why."""

    path: str
    reason: str


@dataclass(frozen=True)
class Sweep:
    """An ablation run: which hyper-parameter was varied, its value, and the mechanism."""

    param: str  # "queue_size" or "momentum"
    value: float
    method: str
    # The pretraining's recipe less the swept field: the points of one curve share it, and trials of a point
    # share it and the value (their seeds differ). None where the record carries no pretraining config.
    series: str | None = None


@dataclass(frozen=True)
class Record:
    """One validated evaluation record."""

    path: str  # as shown in reports: the directory as given, joined with the path below it
    task: str
    protocol: str
    dataset: str  # readable name
    dataset_path: str
    pretraining: Pretraining
    metrics: dict[str, float] = field(default_factory=dict)
    per_class: dict[str, float] = field(default_factory=dict)  # VOC per_class_AP50
    engine: str | None = None
    model: str | None = None
    schedule: str | None = None
    status: str = "ok"
    failure: str | None = None
    sweep: Sweep | None = None
    eval_recipe: str | None = None  # recipe_digest of the evaluation's own config
    eval_length: int | None = None  # epochs (linear) or iterations (detection) the evaluation trained
    classes: int | None = None  # of the evaluation data
    labels: str | None = None  # the subset of train labels it trained on ("10%", "1percent.txt 3f2a1b"); None: all
    # dataset.content_sha256: the evaluation folder's content (classification/layouts.py)
    data_digest: str | None = None
    k: int | None = None  # kNN: config.k, the neighbours that vote
    # MOCO_SMOKE=1: the evaluation was a smoke run, or the weights came from one (its ``smoke`` field, or its
    # backbone's): numbers that mean nothing, kept out of the tables of real runs (moco_core/smoke.py)
    smoke: bool = False
    # How the evaluation was asked for (moco_core.commands.invocation): the commands suggested for its table are
    # built from it. Checked where a command is built, never trusted as text.
    invocation: dict[str, Any] | None = None
    chosen: str | None = None  # a head grid's chosen head ("layer4 lr 1"; selection.chosen)
    # few-shot: each metric's standard deviation over its tries, and the tries (the record's ``fewshot`` list)
    spread: dict[str, tuple[float, int]] = field(default_factory=dict)
    # retrieval: the query variants it ran ("cropped", "full"), each a table of its own (table_views)
    variants: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status == "ok"


# ---------------------------------------------------------------------------------------------------------- finding


def is_record_name(name: str) -> bool:
    return name == RECORD_NAME or name.endswith(RECORD_SUFFIX)


def find_record_files(roots: Iterable[str]) -> list[tuple[str, Path]]:
    """(display path, file) of every record file under the roots (a root may also be a record file), sorted and
    without duplicates. The display path is the root as given joined with the path below it."""
    found: dict[Path, str] = {}
    for root in roots:
        base = Path(root)
        if base.is_file():
            found.setdefault(base.resolve(), str(base))
            continue
        for file in sorted(base.rglob("*" + RECORD_NAME)):
            if file.is_file() and is_record_name(file.name):
                found.setdefault(file.resolve(), str(file))
    return sorted(((shown, file) for file, shown in found.items()), key=lambda pair: pair[0])


# Tasks whose records reports.linear_transfer.table reads (moco eval transfer's), left alone here
TRANSFER_TASKS = ("transfer", "transfer-fewshot")


def read_records(roots: Iterable[str]) -> list[tuple[str, Any]]:
    """(display path, decoded JSON) of every record file under ``roots``, each file read once; where a file cannot
    be read, its RecordError in place of the JSON. :func:`load_records` and
    :func:`reports.linear_transfer.table.load_trials` share one reading (a report over 10,000 records read each
    twice)."""
    read: list[tuple[str, Any]] = []
    for shown, file in find_record_files(roots):
        try:
            read.append((shown, read_json(file)))
        except RecordError as err:
            read.append((shown, err))
    return read


def load_records(roots: Iterable[str], read: list[tuple[str, Any]] | None = None) -> tuple[list[Record], list[Skipped]]:
    """All usable records under ``roots`` (or of ``read``, :func:`read_records` of them), and the skipped files
    with their reasons (the transfer suite's records are :mod:`reports.linear_transfer.table`'s)."""
    records: list[Record] = []
    skipped: list[Skipped] = []
    for shown, data in read_records(roots) if read is None else read:
        try:
            if isinstance(data, RecordError):
                raise data
            if isinstance(data, dict) and data.get("task") in TRANSFER_TASKS:
                continue
            records.append(parse_record(data, shown))
        except RecordError as err:
            skipped.append(Skipped(shown, str(err)))
    return records, skipped


def read_json(file: Path) -> Any:
    """The decoded record (:mod:`moco_core.user_files`: a regular file of at most RECORD_LIMIT bytes, numbers that
    fit 64-bit integers and finite floats); RecordError says why not."""
    data = read_bytes(file, limit=RECORD_LIMIT, what="record", error=RecordError)
    return parse_json(data, what="", error=RecordError)


# --------------------------------------------------------------------------------------------------------- parsing


def parse_record(data: Any, shown: str) -> Record:
    """Validate one decoded record; raises RecordError with the first problem found."""
    if not isinstance(data, dict):
        raise RecordError(f"not a JSON object (a {type(data).__name__})")
    if data.get("schema") != SCHEMA:
        raise RecordError(f"not a {SCHEMA} record (schema {data.get('schema')!r})")
    version = data.get("version")
    if version != VERSION or isinstance(version, bool):
        raise RecordError(f"unknown version {version!r} (this report reads version {VERSION})")
    task = _required(data, "task", str)
    if task not in TASK_METRICS:
        raise RecordError(f"unknown task {task!r} (expected one of {', '.join(TASK_METRICS)})")
    protocol = _required(data, "protocol", str)
    status, failure = _status(data)
    metrics, per_class = _metrics(data, task, required=status == "ok")
    dataset = _required(data, "dataset", dict)
    dataset_path = _required(dataset, "path", str, "dataset.path")
    name = next((dataset[k] for k in ("name", "folder") if isinstance(dataset.get(k), str) and dataset[k]), None)
    digest = dataset.get("content_sha256")
    config = data.get("config") if isinstance(data.get("config"), dict) else {}
    selection = data.get("selection") if isinstance(data.get("selection"), dict) else {}
    engine, model, schedule = _detection_setting(data, task, config)
    backbone = _required(data, "backbone", dict)
    pretraining = _pretraining(backbone, snapshot=isinstance(data.get("snapshot"), dict))
    pretrain = backbone.get("pretrain") if isinstance(backbone.get("pretrain"), dict) else {}
    invocation = data.get("invocation")
    return Record(
        path=shown, task=task, protocol=protocol, dataset=name or data_name(dataset_path) or dataset_path,
        dataset_path=dataset_path, pretraining=pretraining, metrics=metrics,
        per_class=per_class, engine=engine, model=model, schedule=schedule, status=status, failure=failure,
        sweep=_sweep(data.get("sweep"), _pretrain_config(backbone)),
        eval_recipe=eval_recipe(config, dataset.get("version")), eval_length=eval_length(task, config),
        classes=_count(dataset.get("classes")), labels=subset_label(dataset.get("subset")),
        data_digest=digest if isinstance(digest, str) and digest else None,
        k=_count(config.get("k")) if task == "knn" else None, chosen=_text(selection.get("chosen")),
        smoke=data.get("smoke") is True or pretrain.get("smoke") is True,
        invocation=invocation if isinstance(invocation, dict) else None,
        spread=fewshot_spread(data.get("fewshot")) if task == "fewshot" else {},
        variants=query_variants(metrics, config) if task == "retrieval" else (),
    )


def query_variants(metrics: dict[str, float], config: dict[str, Any]) -> tuple[str, ...]:
    """The query variants of a retrieval record: those its metrics name; a failed record's, those its config asked
    for (``queries``), else both (the command's default)."""
    named = {m[2] for m in map(RETRIEVAL_METRIC.fullmatch, metrics) if m}
    asked = config.get("queries") if isinstance(config.get("queries"), list) else []
    return tuple(v for v in QUERY_VARIANTS if v in (named or set(asked) or QUERY_VARIANTS))


def table_views(record: Record) -> list[Record]:
    """The record as the tables read it: a retrieval record once per query variant (its model "cropped queries" or
    "full queries", its metrics of that variant): the two variants are measured differently, so they are tables
    apart, though one record holds both; any other record as it is."""
    if record.task != "retrieval":
        return [record]
    return [dataclasses.replace(record, model=f"{variant} queries", metrics={
        name: value for name, value in record.metrics.items()
        if (found := RETRIEVAL_METRIC.fullmatch(name)) and found[2] == variant}) for variant in record.variants]


def fewshot_spread(raw: Any) -> dict[str, tuple[float, int]]:
    """(std over the tries, tries) of each few-shot metric ("5shot_linear_top1"), from the record's ``fewshot``
    list (classification/frozen/shots.py: per k, "linear" and "knn" with their mean, std and runs); entries not
    of that form give none (the metric is shown without its spread)."""
    spread: dict[str, tuple[float, int]] = {}
    for item in raw if isinstance(raw, list) else []:
        shots = _count(item.get("shots")) if isinstance(item, dict) else None
        for reader in ("linear", "knn") if shots else ():
            got = item.get(reader) if isinstance(item.get(reader), dict) else {}
            std, runs = _number(got.get("std")), got.get("runs")
            if std is not None and std >= 0 and isinstance(runs, list) and runs:
                spread[f"{shots}shot_{reader}_top1"] = (std, len(runs))
    return spread


def subset_label(subset: Any) -> str | None:
    """What a record's ``dataset.subset`` trained on, as a column names it: "10%" (drawn with seed 0; another seed
    follows: "10% seed 3"), or a file by name and the first six hex digits of its SHA-256 ("1percent.txt 3f2a1b");
    None for the whole train split."""
    if not isinstance(subset, dict):
        return None
    if subset.get("kind") == "labels" and isinstance(subset.get("labels"), str):
        seed = subset.get("seed")
        return subset["labels"] + (f" seed {seed}" if seed not in (0, None) else "")
    if subset.get("kind") == "file":
        sha = subset.get("sha256") if isinstance(subset.get("sha256"), str) else ""
        return " ".join(p for p in (str(subset.get("file") or "subset file"), sha[:6]) if p)
    raise RecordError(f"field 'dataset.subset' has an unknown kind {subset.get('kind')!r} (expected labels or file)")


def _required(obj: dict[str, Any], key: str, kind: type, name: str | None = None) -> Any:
    value = obj.get(key)
    if value is None:
        raise RecordError(f"missing field {name or key!r}")
    if not isinstance(value, kind) or (kind is str and not value):
        raise RecordError(f"field {name or key!r} is not a {'non-empty string' if kind is str else kind.__name__}")
    return value


def _count(value: Any) -> int | None:
    """A whole number >= 0 (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _status(data: dict[str, Any]) -> tuple[str, str | None]:
    status = data.get("status", "ok")
    if status not in ("ok", "failed"):
        raise RecordError(f"unknown status {status!r} (expected 'ok' or 'failed')")
    if status == "ok":
        return status, None
    failure = data.get("failure")
    return status, failure if isinstance(failure, str) and failure.strip() else "no reason given"


def _metrics(data: dict[str, Any], task: str, *, required: bool) -> tuple[dict[str, float], dict[str, float]]:
    raw = data.get("metrics")
    if raw is None and not required:
        return {}, {}
    if not isinstance(raw, dict):
        raise RecordError("missing field 'metrics'" if raw is None else "field 'metrics' is not a dict")
    metrics: dict[str, float] = {}
    for name in TASK_METRICS[task]:
        value = _number(raw.get(name))
        if value is not None:
            metrics[name] = _percent(value, f"metric {name!r}")
        elif required:
            problem = "missing" if name not in raw else "not a finite number"
            raise RecordError(f"metric {name!r} {problem} (task {task})")
    for name in OPTIONAL_METRICS.get(task, ()):
        value = _number(raw.get(name))
        if value is not None:
            metrics[name] = value
    if task == "retrieval":  # in the record's order: dataset, variant, protocol
        named = [m[0] for m in map(RETRIEVAL_METRIC.fullmatch, raw) if m]
        metrics.update({name: _percent(value, f"metric {name!r}") for name in named
                        if (value := _number(raw[name])) is not None})
        if required and not any(name.endswith("/map") for name in metrics):
            raise RecordError("no retrieval mAP (<dataset>/<cropped|full>/<easy|medium|hard>/map) (task retrieval)")
    if task == "fewshot":
        found = sorted((int(m[1]), m[2] == "knn", m[0]) for m in map(FEWSHOT_METRIC.fullmatch, raw) if m)
        metrics.update({name: value for _, _, name in found if (value := _number(raw[name])) is not None})
        if required and not metrics:
            raise RecordError("no few-shot metric (<k>shot_linear_top1, <k>shot_knn_top1) (task fewshot)")
    return metrics, _per_class(raw.get("per_class_AP50")) if task == "voc" else {}


def _per_class(raw: Any) -> dict[str, float]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise RecordError("metric 'per_class_AP50' is not a dict")
    per_class: dict[str, float] = {}
    for name, value in raw.items():
        number = _number(value)
        if number is None:
            raise RecordError(f"metric per_class_AP50[{name!r}] is not a finite number")
        per_class[str(name)] = _percent(number, f"metric per_class_AP50[{name!r}]")
    return per_class


def _percent(value: float, what: str) -> float:
    """``value`` if it is a percentage (every metric of every task is: accuracy, AP, IoU); a number a record
    cannot hold (1e308 as a top-1) would otherwise reach the tables, whose means and deviations overflow."""
    if not 0 <= value <= 100:
        raise RecordError(f"{what} is {value:.6g}, not a percentage in [0, 100]")
    return value


def _detection_setting(data: dict[str, Any], task: str,
                       config: dict[str, Any]) -> tuple[str | None, str | None, str | None]:
    """(engine, model, schedule) of a detection, keypoint or semantic segmentation record (a DAVIS record's model:
    the features read); all None for classification."""
    if task == "davis":  # moco eval davis: a table a feature map read, named by its tap and stride
        tap, stride = config.get("tap"), config.get("stride")
        return None, f"{tap}, stride {stride}" if isinstance(tap, str) and isinstance(stride, int) else None, None
    if task not in (*DETECTION_TASKS, "semseg"):
        return None, None, None
    engine = _required(data, "engine", str)
    model = config.get("model", DEFAULT_VOC_MODEL if task == "voc" else None)
    schedule = config.get("schedule")
    if not isinstance(model, str) or not model:
        raise RecordError(f"missing field 'config.model' (the detector, e.g. R50-C4) for task {task}")
    if task != "voc" and (not isinstance(schedule, str) or not schedule):
        labels = {"coco": "1x or 2x", "keypoints": "1x or 2x", "lvis": "1x or 2x", "cityscapes": "24k",
                  "densepose": "s1x",
                  "semseg": "30k, 90k"}[task]
        raise RecordError(f"missing field 'config.schedule' ({labels}) for task {task}")
    return engine, model, schedule if isinstance(schedule, str) and schedule else None


def _pretrain_config(backbone: dict[str, Any]) -> dict[str, Any]:
    pretrain = backbone.get("pretrain") if isinstance(backbone.get("pretrain"), dict) else {}
    return pretrain.get("config") if isinstance(pretrain.get("config"), dict) else {}


def pretraining_of(backbone: dict[str, Any]) -> Pretraining:
    """A record's ``backbone`` as a :class:`Pretraining` (RecordError where it lacks its format or arch)."""
    return _pretraining(backbone)


def _pretraining(backbone: dict[str, Any], *, snapshot: bool = False) -> Pretraining:
    """``snapshot``: the record is of a snapshot kept on the way (its top-level ``snapshot`` field)."""
    fmt = _required(backbone, "format", str, "backbone.format")
    arch = _required(backbone, "arch", str, "backbone.arch")
    source = backbone.get("source") if isinstance(backbone.get("source"), str) else ""
    sha = backbone.get("sha256") if isinstance(backbone.get("sha256"), str) else None
    pretrain = backbone.get("pretrain") if isinstance(backbone.get("pretrain"), dict) else {}
    method = pretrain.get("method") if isinstance(pretrain.get("method"), str) else None
    config = _pretrain_config(backbone)
    data_cfg = config.get("data") if isinstance(config.get("data"), dict) else {}
    data_path = data_cfg.get("path") if isinstance(data_cfg.get("path"), str) else None
    optim = config.get("optim") if isinstance(config.get("optim"), dict) else {}
    epochs, planned = _count(pretrain.get("epochs")), _count(optim.get("epochs"))
    partial = _count(pretrain.get("partial_epoch_steps")) or 0  # absent from records written before it was
    if fmt == "random" or source == "random" or method == "random init":
        kind, method, sha, data_path, epochs = "random", "random init", None, None, None
    elif fmt in ("official-moco", "official-mocov3"):  # moco_core/model/weights/moco.py: the official v1/v2, v3 files
        kind = "official"
    elif method in ABSENT_METHODS:  # a method nobody stated is never guessed (a plain torchvision file included)
        kind = "unknown"
    elif fmt == "torchvision" and method == "supervised" and not config:
        kind, data_path, epochs = "torchvision", None, None  # torchvision's supervised weights, named so
    elif method == "supervised" and config:
        kind = "supervised"  # our supervised baseline
    elif fmt != "moco-suite" and not config:
        kind, data_path = "released", None  # another codebase's weights: the method its file states or was named
    else:
        kind = "ours"
    recipe = recipe_digest(config) if kind in ("ours", "supervised") and config else None
    if epochs is None:
        planned, partial = None, 0
    variant = moco_variant(config) if method == "moco" else None
    if kind == "released":
        epochs = planned = None  # a released file's own training length is its paper's business, not a label
    normalisation = backbone.get("normalisation") if isinstance(backbone.get("normalisation"), dict) else {}
    model = backbone.get("model") if isinstance(backbone.get("model"), dict) else {}
    return Pretraining(kind=kind, method=method, arch=arch, data=data_name(data_path), data_path=data_path,
                       epochs=epochs, sha256=sha, source=source, format=fmt, recipe=recipe, planned_epochs=planned,
                       partial_steps=partial, snapshot=snapshot, variant=variant,
                       stated_by=_text(pretrain.get("stated_by")), encoder=_text(backbone.get("encoder")),
                       normalisation=_text(normalisation.get("name")), registers=_count(model.get("registers")) or 0)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def eval_recipe(config: dict[str, Any], data_version: Any = None) -> str | None:
    """The evaluation's recipe: its config's digest, with the version of generated data the record names (the
    embedded detection scenes': the same config on other scenes is another recipe)."""
    if not config:
        return None
    return recipe_digest({**config, "dataset_version": data_version} if isinstance(data_version, str) else config,
                         EVAL_ADDED_NEUTRAL)


def _sweep(raw: Any, config: dict[str, Any]) -> Sweep | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise RecordError("field 'sweep' is not a dict")
    param = raw.get("param")
    if param not in SWEEP_PARAMS:
        raise RecordError(f"unknown sweep.param {param!r} (expected one of {', '.join(SWEEP_PARAMS)})")
    value = _number(raw.get("value"))
    if value is None:
        raise RecordError("field 'sweep.value' is not a finite number")
    method = raw.get("method")
    if not isinstance(method, str) or not method:
        raise RecordError("field 'sweep.method' is not a non-empty string")
    return Sweep(param=param, value=value, method=method, series=series_digest(config, param, method))
