"""``moco eval transfer``: the suite, dataset by dataset, into one run directory.

For each dataset: its splits (shipped, or drawn and written to ``splits/<name>.json``), the images checked, the
frozen backbone's features of train, val and test computed once and cached (:mod:`moco_core.frozen.features`),
the 45-value sweep on train scored on val, the refit on train + val at the chosen value, the test set once, with
the dataset's metric; few-shot where asked. Each dataset's record is ``<name>/result.json`` (few-shot:
``<name>/fewshot.result.json``), written when the dataset is done: a suite stopped part-way keeps what it
finished, and ``--resume`` carries on with the rest. A dataset that is not under ROOT is named in one line with
the layout expected, and the others run; one that is there but broken is named in one line too, and the command
ends with an error once the others are done.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from classification.frozen import ssl_transfer
from classification.frozen.fewshot import fewshot
from classification.frozen.metrics import metric
from classification.linear_transfer import embedded
from classification.linear_transfer.catalog import SPECS, Spec, missing_line
from classification.linear_transfer.config import TransferSuiteConfig, check_datasets
from classification.linear_transfer.images import as_dataset, label_tensor, readable
from classification.linear_transfer.readers import SuiteDataError, confined
from classification.linear_transfer.splits import Splits, resolve
from classification.splits import SMALL_PRESETS, image_sides, small_images
from moco_core.checkpoint import point_to
from moco_core.config import ConfigError, to_dict
from moco_core.errors import UserError, print_warning
from moco_core.frozen.features import (
    FeatureTransform,
    cached_features,
    feature_key,
    samples_digest,
    transform_for,
    weights_identity,
)
from moco_core.frozen.logreg import refit, sweep
from moco_core.model.backbone import BackboneInfo, load_backbone
from moco_core.model.taps import default_tap
from moco_core.run.features import FeatureSet, extract_features
from moco_core.run.progress import LINE, format_duration
from moco_core.run.records import write_record
from moco_core.run.rundir import require_fresh, require_same_mode, run_dir_lock, write_run_files, write_text_atomic
from moco_core.run.runtime import resolve_device
from moco_core.solver_protocols import CONVERGED

PROTOCOL = "linear-transfer"  # frozen features, L-BFGS logistic regression, the 45-value sweep, refit, one test


@dataclass
class _Backbone:
    model: torch.nn.Module
    info: BackboneInfo
    tap: str
    transform: FeatureTransform
    weights: dict[str, Any]


def run_suite(cfg: TransferSuiteConfig, pretrained: str, *, show_progress: bool = True, resume: bool = False) -> Path:
    """Evaluate ``pretrained`` on the suite; returns the run's ``suite.json`` (each dataset's record, or why not)."""
    device = resolve_device(cfg.run.device)
    out = Path(str(cfg.run.output_dir))
    root, specs, names = _datasets(cfg)
    unmade = embedded.unmade() if cfg.data.path == "embedded" else {}
    note = _small_images(cfg, root, specs, names)
    if note:
        print_warning(note)
    with run_dir_lock(out, device):
        done = [n for n in names if (out / n / "result.json").exists()]
        if done and not resume:
            require_fresh(out / done[0], ("result.json",), f"the {done[0]} result of a transfer suite",
                          "pass --resume to run the datasets not done yet, or choose another --output-dir")
        if resume:  # a smoke suite's records never stand beside a real one's (moco_core/smoke.py)
            require_same_mode(out)
        write_run_files(out, to_dict(cfg), {"pretrained": pretrained, "device": str(device)})
        backbone = _load(cfg, pretrained)
        outcome: dict[str, str] = {}
        for name, why in unmade.items():  # not made by this installation: said and recorded, not left out silently
            if not cfg.data.datasets or name in cfg.data.datasets:
                print_warning(f"{name}: {why}; skipped")
                outcome[name] = f"missing: {why}"
        for name in names:
            spec = specs[name]
            if name in done:
                outcome[name] = "done before"
                _say(f"{name}: done before ({out / name / 'result.json'}); not run again", show_progress)
                continue
            if not (root / spec.marker).exists():
                print_warning(missing_line(spec, root))
                outcome[name] = "missing"
                continue
            try:
                record = _evaluate(cfg, spec, root, out, backbone, device, show_progress)
                point_to(out, record)  # what a --resume carries on after (moco_core.run.rundir.last_checkpoint)
                outcome[name] = str(record)
            except (SuiteDataError, ConfigError) as err:
                print(f"error: {name}: {err}", file=sys.stderr)
                outcome[name] = f"failed: {err}"
        _summary(out, outcome)
    failed = [n for n, o in outcome.items() if o.startswith("failed")]
    if failed or all(o.startswith("missing") for o in outcome.values()):
        what = f"{', '.join(failed)} failed" if failed else f"none of {', '.join(names)} is under {root}"
        raise UserError(f"transfer suite: {what}; the other datasets' records are in {out}")
    return out / "suite.json"


def _datasets(cfg: TransferSuiteConfig) -> tuple[Path, dict[str, Spec], tuple[str, ...]]:
    """The root (the embedded suite generated on first use), the specs by name, the names to run in order."""
    if cfg.data.path == "embedded":
        root = embedded.ensure_suite()
        specs = {spec.name: spec for spec in embedded.specs(root)}
        known = tuple(specs) + tuple(embedded.unmade())  # asked for by name, an unmade one is said below
    else:
        root = Path(str(cfg.data.path)).expanduser()
        if not root.is_dir():
            raise ConfigError(f"data.path: {root} is not a directory (it should hold the datasets as torchvision's "
                              f"classes download them, e.g. {root}/dtd/dtd/ and {root}/food-101/)")
        specs = {spec.name: spec for spec in SPECS}
        known = tuple(specs)
    check_datasets(cfg.data.datasets, known)
    return root, specs, tuple(n for n in cfg.data.datasets or known if n in specs)


def _small_images(cfg: TransferSuiteConfig, root: Path, specs: dict[str, Spec], names: tuple[str, ...]) -> str | None:
    """``moco eval linear``'s and ``knn``'s warning of images far smaller than the views
    (:func:`classification.splits.small_images`), for the suite as a whole: said when every dataset present is that
    small. A suite that mixes sizes (the 12 datasets' CIFAR beside Food-101) is the protocol's, which upscales CIFAR
    on purpose. Each dataset's lists are read here once more, until one dataset is not small; one that does not
    read is left to its turn in the suite, which says why."""
    sides: list[tuple[int, int]] = []
    for name in names:
        if not (root / specs[name].marker).exists():
            continue
        try:
            found = confined(specs[name].read(root))
        except UserError:
            continue
        split = next((part for part in (found.train, found.pool, found.test) if part is not None), None)
        if split is None:
            continue
        seen = ([(split.arrays.shape[2], split.arrays.shape[1])] if split.arrays is not None else
                image_sides([path for path, _ in split.samples]))
        if small_images(seen, cfg.data.crop_size, SMALL_PRESETS["transfer"]) is None:
            return None
        sides += seen
    return small_images(sides, cfg.data.crop_size, SMALL_PRESETS["transfer"])


def _load(cfg: TransferSuiteConfig, pretrained: str) -> _Backbone:
    torch.manual_seed(cfg.run.seed)  # the weights of "random"
    model, info = load_backbone(pretrained, 1, arch=cfg.arch, crop_size=cfg.data.crop_size,
                                crop_option="--set data.crop_size={0} --set data.resize={0}",
                                weights_format=cfg.run.weights_format)
    tap = cfg.features.tap or default_tap(model)
    transform = transform_for(info, resize=cfg.data.resize, crop_size=cfg.data.crop_size,
                              interpolation=cfg.data.interpolation)
    return _Backbone(model, info, tap, transform, weights_identity(info, cfg.run.seed))


def _say(text: str, show: bool) -> None:
    if show:
        print(text, file=sys.stderr, flush=True)


def _features(cfg: TransferSuiteConfig, spec: Spec, splits: Splits, folder: Path, out: Path, backbone: _Backbone,
              device: torch.device, show: bool) -> dict[str, FeatureSet]:
    """train / val / test features, from the cache when their key is there."""
    cache = Path(cfg.features.cache_dir) if cfg.features.cache_dir else out / "features"
    view = backbone.transform.build()
    sets = {}
    for part in ("train", "val", "test"):
        split = getattr(splits, part)
        identity = {"name": spec.name, "root": str(folder), "split": part,
                    "files": samples_digest(folder, split.samples)}
        if split.arrays is not None:  # CIFAR: the pixels are in the batch files, not in files of their own
            identity["pixels"] = hashlib.sha256(split.arrays.tobytes()).hexdigest()
        key = feature_key(weights=backbone.weights, transform=backbone.transform, dataset=identity,
                          taps=(backbone.tap,), amp=cfg.features.amp, device=device)

        def compute(split: Any = split, part: str = part) -> FeatureSet:
            return extract_features(backbone.model, {part: as_dataset(split, view)}, taps=(backbone.tap,),
                                    what=f"{spec.name} {part} features", batch_size=cfg.features.batch_size,
                                    device=device, workers=cfg.data.workers, amp=cfg.features.amp,
                                    progress=LINE if show else False, timed=show)[part]
        sets[part] = cached_features(cache, key, compute, count=len(split.samples))
    return sets


def _evaluate(cfg: TransferSuiteConfig, spec: Spec, root: Path, out: Path, backbone: _Backbone,
              device: torch.device, show: bool) -> Path:
    started = time.perf_counter()
    found = confined(spec.read(root))
    options = cfg.solver_options()
    protocol = options.pop("protocol")
    splits = resolve(spec, found, out / "splits" / f"{spec.name}.json", seed=cfg.data.split_seed,
                     val_fraction=cfg.data.val_fraction, plain_val=protocol == ssl_transfer.NAME)
    for part in ("train", "val", "test"):
        setattr(splits, part, readable(getattr(splits, part), workers=cfg.data.workers, what=f"{spec.name} {part}"))
    sets = _features(cfg, spec, splits, found.folder, out, backbone, device, show)
    x = {part: s.features[backbone.tap] for part, s in sets.items()}
    y = {part: label_tensor(getattr(splits, part)) for part in sets}
    k = len(found.classes)
    score = metric(spec.metric)
    solver = {**options, "device": device}
    if protocol == ssl_transfer.NAME:
        path, final = ssl_transfer.sweep_and_refit(x["train"], y["train"], x["val"], y["val"], num_classes=k,
                                                   score=score, lambdas=cfg.lambda_values(), **solver)
    else:
        path = sweep(x["train"], y["train"], x["val"], y["val"], num_classes=k, score=score,
                     lambdas=cfg.lambda_values(), **solver)
        final = refit(torch.cat([x["train"], x["val"]]), torch.cat([y["train"], y["val"]]), num_classes=k,
                      lam=path.best_lambda, init=path.fits[path.chosen], **solver)
    test = float(score(final.scores(x["test"]), y["test"]))
    wall = time.perf_counter() - started
    _say(f"{spec.name}: lambda {path.best_lambda:.3g} chosen on val ({spec.metric} {path.scores[path.chosen]:.2f}), "
         f"test {spec.metric} {test:.2f} ({format_duration(wall)})", show)
    if path.at_edge:
        print_warning(f"{spec.name}: lambda {path.best_lambda:.3g}, the sweep's {path.at_edge} value, was chosen: "
                      f"the best may lie beyond the sweep (solver.lambda_min and solver.lambda_max widen it)")
    dataset = {"name": spec.name, "title": spec.title, "path": cfg.data.path, "folder": str(found.folder),
               "classes": k, "metric": spec.metric, "train_images": len(y["train"]), "val_images": len(y["val"]),
               "test_images": len(y["test"]), "splits": splits.provenance,
               **embedded.version_of(cfg.data.path, spec.name)}
    transfer = {"metric": spec.metric, "test": test, "val": path.scores[path.chosen], "lambda": path.best_lambda,
                "C": 1.0 / path.best_lambda, "chosen_at_edge": path.at_edge, "feature": backbone.tap,
                "feature_dim": int(x["train"].shape[1]),
                "solver": {"protocol": protocol, **{k: v for k, v in solver.items() if k != "device"},
                           "device": str(device),
                           "sweep_s": path.seconds, "refit_s": final.seconds, "refit_iterations": final.iterations,
                           "refit_converged": final.converged},
                "features": {p: {"cached": s.cached, "seconds": s.seconds, "file": str(s.path)}
                             for p, s in sets.items()},
                **_per_image(spec.metric, final.scores(x["test"]), y["test"])}
    record = write_record(out / spec.name / "result.json", task="transfer", protocol=PROTOCOL,
                          metrics={spec.metric: test, f"val_{spec.metric}": path.scores[path.chosen]},
                          backbone=backbone.info, dataset=dataset, config=to_dict(cfg), history=path.curve(),
                          extra={"transfer": transfer, "wall_time_s": wall})
    if cfg.fewshot.shots and y["train"].dim() == 1:
        # few-shot has no ssl-transfer form here (their few_shot.py is another protocol): always the converged one
        fewshot_solver = {**cfg.solver_options(CONVERGED), "device": device}
        del fewshot_solver["protocol"]
        _fewshot(cfg, spec, x, y, k, score, fewshot_solver, dataset, backbone, out, show)
    elif cfg.fewshot.shots:
        _say(f"{spec.name}: multi-label; not evaluated few-shot", show)
    return record


def _per_image(name: str, scores: torch.Tensor, labels: torch.Tensor) -> dict[str, list[int]]:
    """Each test image right (1) or wrong (0), and its class: what the report's paired test between two rows
    permutes (single-label metrics; the 11-point mAP has no per-image form)."""
    if name == "map11":
        return {}
    return {"test_correct": (scores.argmax(1) == labels).int().tolist(), "test_labels": labels.tolist()}


def _fewshot(cfg: TransferSuiteConfig, spec: Spec, x: dict[str, torch.Tensor], y: dict[str, torch.Tensor], k: int,
             score: Any, solver: dict[str, Any], dataset: dict[str, Any], backbone: _Backbone, out: Path,
             show: bool) -> None:
    results = []
    for shots in cfg.fewshot.shots:
        result = fewshot(x["train"], y["train"], x["val"], y["val"], x["test"], y["test"], shots=shots,
                         tries=cfg.fewshot.tries, seed=cfg.fewshot.seed, num_classes=k, score=score,
                         lambdas=cfg.lambda_values(), **solver)
        _say(f"{spec.name}: {shots}-shot {spec.metric} {result['mean']:.2f} +- {result['std']:.2f} over "
             f"{result['tries']} tries", show)
        results.append(result)
    metrics = {f"{r['shots']}shot_{spec.metric}": r["mean"] for r in results}
    write_record(out / spec.name / "fewshot.result.json", task="transfer-fewshot", protocol=PROTOCOL + "-fewshot",
                 metrics=metrics, backbone=backbone.info, dataset=dataset, config=to_dict(cfg),
                 extra={"fewshot": results, "solver": {"protocol": CONVERGED,
                                                       **{k: v for k, v in solver.items() if k != "device"}}})


def _summary(out: Path, outcome: dict[str, str]) -> None:
    write_text_atomic(out / "suite.json", json.dumps({"datasets": outcome}, indent=2) + "\n")
