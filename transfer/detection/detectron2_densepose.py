"""``moco eval densepose``: DensePose R-CNN on detectron2's DensePose project (``projects/DensePose``, the
``densepose`` package), the only dense pose implementation; imported by :mod:`transfer.detection.detectron2_engine`
for that task alone.

What is DensePose's own: its config keys (``add_densepose_config``), its model (``DensePoseROIHeads`` with
``DensePoseV1ConvXHead``), its dataset dicts (``load_coco_json`` keeps ``dp_x, dp_y, dp_I, dp_U, dp_V, dp_masks``),
its data loaders and mapper (which turns those into ``DensePoseDataRelative`` targets and flips them with the UV
symmetry transforms), and its evaluator (``DensePoseCOCOEvaluator``: AP^dp under the GPS and GPSm point
similarities, and the IoU of its masks). What is ours: the datasets are registered from ``data.path`` (DensePose's
builtin registration is under ``./datasets``) as ``moco_<name>``, with our augmentations, and the box AP of the same
detections is scored by :mod:`transfer.detection.metrics` as for the other tasks.

Files DensePose fetches on first use from ``dl.fbaipublicfiles.com/densepose/data/`` into iopath's cache
(``$FVCORE_CACHE``, default ``~/.torch/iopath_cache``): ``UV_symmetry_transforms.mat`` (flipping U/V in training;
a copy at ``coco/annotations/UV_symmetry_transforms.mat`` under ``data.path`` is used instead when present) and,
for GPS, ``SMPL_subdiv.mat``, ``SMPL_SUBDIV_TRANSFORM.mat`` and ``Pdist_matrix.pkl``. Nothing here downloads at run
time: a run stops in one line, before training, when one is missing from that cache folder
(``densepose/data/<name>``); put them there beforehand.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from densepose import add_densepose_config
from densepose.data import DatasetMapper as DensePoseMapper
from densepose.data import build_detection_test_loader, build_detection_train_loader
from densepose.data.datasets.coco import DENSEPOSE_METADATA_URL_PREFIX, load_coco_json
from densepose.evaluation import DensePoseCOCOEvaluator
from detectron2.config import CfgNode
from detectron2.data import DatasetCatalog, MetadataCatalog
from detectron2.utils.file_io import PathManager

from moco_core import distributed
from moco_core.data.data import DatasetError
from transfer.detection.config import TransferConfig
from transfer.detection.datasets import DetectionData, parse_dataset
from transfer.detection.detectron2_config import dataset_name

TRANSFORMS = "UV_symmetry_transforms.mat"
# DensePoseCOCOEvaluator's results: AP^dp under each point similarity, and the masks' IoU
EVALUATIONS = {"densepose_gps": "dp_gps", "densepose_gpsm": "dp_gpsm", "densepose_segm": "dp_segm"}


def transforms_source(root: Path) -> str:
    """The UV symmetry transforms the training mapper flips with: a local copy beside the annotations, else
    DensePose's published file (fetched into iopath's cache on first use)."""
    local = root / "coco" / "annotations" / TRANSFORMS
    return str(local) if local.is_file() else DENSEPOSE_METADATA_URL_PREFIX + TRANSFORMS


# What DensePose's code fetches from DENSEPOSE_METADATA_URL_PREFIX into iopath's cache on first use (the training
# mapper's flips; GPS's SMPL geometry)
FETCHED = (TRANSFORMS, "SMPL_subdiv.mat", "SMPL_SUBDIV_TRANSFORM.mat", "Pdist_matrix.pkl")


def require_metadata(cfg: TransferConfig, root: Path) -> None:
    """DatasetError before anything trains when a file DensePose would download is missing: nothing here downloads
    at run time. The embedded scenes bring stand-ins of their own; a copy of the transforms beside the annotations
    serves too."""
    from iopath.common.file_io import get_cache_dir

    from transfer.detection.embedded_densepose import stand_ins

    if cfg.data.path == "embedded" and stand_ins(root) is not None:
        return
    folder = Path(get_cache_dir()) / "densepose" / "data"
    missing = [name for name in FETCHED if not (folder / name).is_file()
               and not (name == TRANSFORMS and (root / "coco" / "annotations" / TRANSFORMS).is_file())]
    if missing:
        raise DatasetError(f"dense pose needs DensePose's {', '.join(missing)} in {folder} (DensePose fetches them "
                           f"from {DENSEPOSE_METADATA_URL_PREFIX} on first use; this tool downloads nothing): copy "
                           f"them there, or set FVCORE_CACHE to a folder holding densepose/data/")


def evaluate(dense: DensePoseCOCOEvaluator, cfg: TransferConfig,
             root: Path) -> dict[str, dict[str, float]] | None:
    """``dense.evaluate()`` (every process calls it: it gathers the predictions; the main process gets the results).

    On the embedded scenes (``root`` their folder) DensePose's GPS files are their stand-ins
    (:mod:`transfer.detection.embedded_densepose`): iopath's cache is pointed at them while it runs, and back.

    Deviation, for DensePose's own code: its GPS loader asks detectron2's PathManager for the SMPL files with
    ``timeout_sec``, which iopath's HTTP handler does not take (iopath 0.1.9 raises "Unused arguments" under its
    strict keyword checking); the checking is relaxed to a warning while it runs."""
    from transfer.detection.embedded_densepose import stand_ins

    handlers = [*PathManager._path_handlers.values(), PathManager._native_path_handler]
    before = [h._strict_kwargs_check for h in handlers]
    local = stand_ins(root) if cfg.data.path == "embedded" else None
    cache = os.environ.get("FVCORE_CACHE")
    PathManager.set_strict_kwargs_checking(False)
    if local is not None:
        os.environ["FVCORE_CACHE"] = str(local)
        _forget_fetched()
    try:
        return dense.evaluate()
    finally:
        for handler, strict in zip(handlers, before, strict=True):
            handler._strict_kwargs_check = strict
        if local is not None:
            _forget_fetched()
            if cache is None:
                os.environ.pop("FVCORE_CACHE", None)
            else:
                os.environ["FVCORE_CACHE"] = cache


def _forget_fetched() -> None:
    """Drop DensePose's files from iopath's HTTP handler's memory of where it cached them (it would reuse them)."""
    for handler in PathManager._path_handlers.values():
        cached = getattr(handler, "cache_map", None)
        if isinstance(cached, dict):
            for url in [u for u in cached if u.startswith(DENSEPOSE_METADATA_URL_PREFIX)]:
                del cached[url]


class DensePoseHooks:
    """Dense pose's :class:`transfer.detection.detectron2_engine.TaskHooks`: DensePose's config keys, its dataset
    dicts and metadata (its mapper needs the dp_* fields), its loaders (its instance filters, its mapper's dense
    pose targets) with our augmentations, and its evaluator."""

    def add_config(self, d2cfg: CfgNode) -> None:
        add_densepose_config(d2cfg)

    def register(self, cfg: TransferConfig, data: DetectionData) -> tuple[str, ...]:
        """Register the training sets and the test set as ``moco_<name>`` with DensePose's loader; the training
        names.

        The dicts are DensePose's (``load_coco_json``: original category ids; its loaders set ``thing_classes``
        and ``thing_dataset_id_to_contiguous_id`` from the files' categories, sorted by id as our reader orders
        them); our reader has checked the same files (present, images of their sizes).
        """
        require_metadata(cfg, data.root)
        metadata: dict[str, Any] = {"class_to_mesh_name": {}, "evaluator_type": "coco",
                                    "densepose_transform_src": transforms_source(data.root)}
        for name in (*cfg.data.train, cfg.data.test):
            spec = parse_dataset(name, cfg.task)
            json_file = str((data.root / str(spec.annotations)).absolute())
            images = str((data.root / spec.folder).absolute())
            registered = dataset_name(name)
            if registered in DatasetCatalog:  # an earlier run in this process: its files may differ
                DatasetCatalog.remove(registered)
                MetadataCatalog.remove(registered)
            DatasetCatalog.register(registered, lambda j=json_file, i=images, n=registered: load_coco_json(j, i, n))
            MetadataCatalog.get(registered).set(json_file=json_file, image_root=images, **metadata)
        return tuple(dataset_name(n) for n in cfg.data.train)

    def train_loader(self, d2cfg: CfgNode, augmentations: list[Any]) -> Any:
        mapper = DensePoseMapper(d2cfg, True)
        mapper.augmentation = augmentations
        return build_detection_train_loader(d2cfg, mapper=mapper)

    def test_loader(self, cfg: TransferConfig, d2cfg: CfgNode, name: str, augmentations: list[Any]) -> Any:
        """DensePose's test loader over ``name`` (one image a batch, sharded over the processes)."""
        mapper = DensePoseMapper(d2cfg, False)
        mapper.augmentation = augmentations
        return build_detection_test_loader(d2cfg, name, mapper=mapper)

    def evaluator(self, d2cfg: CfgNode, name: str) -> DensePoseCOCOEvaluator:
        """DensePose's evaluator as its trainer builds it (DENSEPOSE_EVALUATION.TYPE, MIN_IOU_THRESHOLD)."""
        e = DensePoseCOCOEvaluator(name, distributed.is_distributed(), str(Path(d2cfg.OUTPUT_DIR) / "inference"),
                                   evaluator_type=d2cfg.DENSEPOSE_EVALUATION.TYPE,
                                   min_iou_threshold=d2cfg.DENSEPOSE_EVALUATION.MIN_IOU_THRESHOLD)
        e.reset()
        return e

    def results(self, evaluator: DensePoseCOCOEvaluator, cfg: TransferConfig, data: DetectionData
                ) -> dict[str, float]:
        return flatten(evaluate(evaluator, cfg, data.root))


def flatten(results: dict[str, dict[str, float]] | None) -> dict[str, float]:
    """``{"densepose_gps": {"AP": ...}, ...}`` as ``{"dp_gps_AP": ..., "dp_gpsm_AP75": ..., "dp_segm_AP": ...}``
    (percent, as DensePose reports them) in our conventions: an area range without ground truth (COCOeval's -1,
    -100 once DensePose scales it) is NaN (null in the record), no prediction at all (DensePose's -1) is 0, as our
    box AP has them."""
    def ours(value: float) -> float:
        return math.nan if value <= -100 else 0.0 if value == -1 else float(value)

    return {f"{EVALUATIONS.get(group, group)}_{metric}": ours(value)
            for group, values in (results or {}).items() for metric, value in values.items()}
