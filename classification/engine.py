"""The classification engine: the epoch driver of linear classification, fine-tuning and the linear head grid, and
what their runs score and check with (:func:`evaluate`, :func:`frozen_reference`, :func:`sanity_check`).

:func:`run_evaluation` starts or resumes a run directory under its lock (``config.yaml`` and ``run.json``, the
epoch checkpoint read back), drives the epochs (progress, ``metrics.jsonl``, after each epoch an atomic
checkpoint named by the run directory's pointer: :func:`moco_core.checkpoint.save_last`) and leaves the record to
the protocol. Each protocol keeps its setup, its training epoch and what it saves, as an :class:`EpochProtocol`
(MAE's ``main_*.py`` / ``engine_*.py`` split; one loop for every task, as detectron2's one trainer). A stop signal
ends a run wherever it is (:func:`moco_core.cli.report_result`); ``--resume`` continues from the last whole epoch.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn
from torch.utils.data import DataLoader

from moco_core import checkpoint, distributed
from moco_core.config import ConfigError, replace, to_dict
from moco_core.data.data import DecodeFailures
from moco_core.errors import print_warning
from moco_core.model import backbone
from moco_core.model.backbone import BackboneInfo
from moco_core.model.vit import classifier_name
from moco_core.optimizer_state import load_optimizer_state
from moco_core.run.features import non_finite_error
from moco_core.run.knn import topk_accuracy
from moco_core.run.naming import evaluation_dir
from moco_core.run.progress import MetricsWriter, Progress
from moco_core.run.rundir import check_epoch_run, run_dir_lock, write_run_files
from moco_core.run.runtime import autocast, resolve_device


@dataclass(frozen=True)
class Words:
    """How a protocol's refusals name its runs (each keeps the wording it has always had)."""

    finished: str  # what a run directory with a record holds: "a finished linear evaluation"
    unfinished: str  # what one with an epoch checkpoint holds: "an unfinished linear evaluation"
    hint: str  # what to do instead of starting over either
    kind: str  # what a checkpoint of another format is not: "linear evaluation"
    verb: str  # what a checkpoint does to other weights: "evaluates"
    extended: str | None = None  # what more optim.epochs extend: "the evaluation" (None: a run never extended)


@dataclass(frozen=True)
class Built:
    """What the driver needs of a protocol's setup."""

    info: BackboneInfo
    optimizer: torch.optim.Optimizer
    modules: list[nn.Module]  # what the optimizer trains: a saved state must fit them
    steps: int  # steps an epoch (on each process)


@dataclass(frozen=True)
class EpochDone:
    """What one epoch reports: its history entry, its metrics.jsonl fields (``step`` first), its progress line."""

    history: dict[str, Any]
    metrics: dict[str, Any]
    message: str


def scored_epoch(epoch: int, step: int, loss: float, lr: float, acc: dict[str, float]) -> EpochDone:
    """The report of an epoch that ends with the model scored on val (linear classification, fine-tuning)."""
    return EpochDone({"epoch": epoch, **acc}, {"step": step, "loss": loss, "lr": lr, **acc},
                     f"val top1 {acc['top1']:.2f} top5 {acc['top5']:.2f}")


class EpochProtocol(ABC):
    """One protocol's part of a run (:func:`run_epochs` does the rest): its setup, its epoch, the tensors its
    checkpoint holds beside the optimizer, what follows the epochs and its record. ``cfg`` has ``optim.epochs``,
    ``run.output_dir``, ``run.log_every`` and ``run.loggers``."""

    words: ClassVar[Words]
    last: ClassVar[str]  # the epoch checkpoint's file name in the run directory
    format: ClassVar[str]  # its "format"

    def __init__(self, cfg: Any, pretrained: str, device: torch.device, extra: dict[str, Any]) -> None:
        self.cfg, self.pretrained, self.device, self.extra = cfg, pretrained, device, extra

    @abstractmethod
    def set_up(self, failures: DecodeFailures) -> Built:
        """Build the data, the model and its optimizer; one-line errors for what cannot run, before any step."""

    @abstractmethod
    def train_epoch(self, epoch: int, step: int, progress: Progress) -> EpochDone:
        """Train epoch ``epoch`` (0-based), ``step`` steps done before it, and score it where the protocol does."""

    @abstractmethod
    def state(self) -> dict[str, Any]:
        """The checkpoint's fields of this protocol's own (fc, the model, the heads)."""

    @abstractmethod
    def load_state(self, saved: dict[str, Any], path: Path) -> None:
        """Load :meth:`state`'s fields of ``saved`` (read from ``path``) into the model; a one-line error where they
        do not fit."""

    @abstractmethod
    def write_result(self, history: list[dict[str, Any]], result: Any, run_dir: Path, started: float) -> Path:
        """The record of the run (main process), from :meth:`finish`'s ``result``; its path."""

    def finish(self, history: list[dict[str, Any]], progress: Progress) -> Any:
        """After the last epoch, on every process: what the record needs beyond ``history`` (checks, scores)."""
        return None

    def write_files(self, run_dir: Path) -> None:
        """More files of the run, written after ``run.json`` and ``config.yaml`` (main process); none by default."""
        return None

    def require_epochs_left(self, first: int, run_dir: Path) -> None:
        """Refuse a resume with no epoch left to train (every epoch done but no record: killed before writing it,
        which is done now)."""
        epochs = self.cfg.optim.epochs
        if first > epochs or (first == epochs and (run_dir / "result.json").exists()):
            raise ConfigError(f"optim.epochs: the {first} epochs of {run_dir / self.last} are done already; raise it "
                              f"to extend {self.words.extended}")


def run_evaluation(cfg: Any, pretrained: str, name: str, protocol: type[EpochProtocol], *,
                   show_progress: bool | str, extra: dict[str, Any] | None, resume: bool) -> Path:
    """Run ``protocol`` on ``pretrained`` (a checkpoint, a run directory or "random") in ``cfg.run.output_dir``
    under its lock, in every process of the group; returns the record's path. ``resume``: continue from the run
    directory's last epoch (bit-identical on CPU), or extend a finished run to more ``optim.epochs``."""
    device = resolve_device(cfg.run.device)
    if cfg.run.output_dir is None:  # the CLI names it after the preset; a caller without one gets runs/<name>/...
        # ... keyed by the data as the CLI's is: two datasets evaluated in turn never land in one directory
        cfg = replace(cfg, run={"output_dir": evaluation_dir(None, name, pretrained, cfg.arch, cfg.data.path)})
    with distributed.process_group(device), run_dir_lock(Path(cfg.run.output_dir), device):
        return run_epochs(protocol(cfg, pretrained, device, extra or {}), resume=resume, show_progress=show_progress)


def run_epochs(protocol: EpochProtocol, *, resume: bool, show_progress: bool | str) -> Path:
    """Start or resume ``protocol``'s run directory, train its epochs, checkpoint each; its record's path."""
    cfg, words, main = protocol.cfg, protocol.words, distributed.is_main()
    run_dir = Path(cfg.run.output_dir)
    # a finished or checkpointed run keeps its weights, config and metrics
    check_epoch_run(run_dir, resume, protocol.last, finished=words.finished, unfinished=words.unfinished,
                    hint=words.hint)
    failures = DecodeFailures(run_dir / ".undecodable")  # reported once per epoch by the main process
    built = protocol.set_up(failures)
    # the checkpoint is read before the run files are rewritten: a resume refused leaves the run as it was
    history: list[dict[str, Any]] = []
    first = _restore(protocol, built, run_dir / protocol.last, history) if resume else 0
    protocol.require_epochs_left(first, run_dir)
    if main:
        write_run_files(run_dir, to_dict(cfg), {"pretrained": protocol.pretrained, "backbone_format": built.info.format,
                                                 "world_size": distributed.world_size(),
                                                 "device": str(protocol.device)})
        protocol.write_files(run_dir)
    epochs, started = cfg.optim.epochs, time.perf_counter()
    progress = Progress(built.steps * epochs, done_steps=first * built.steps, every=cfg.run.log_every,
                        enabled=main and show_progress)
    with MetricsWriter(run_dir / "metrics.jsonl", enabled=main, loggers=cfg.run.loggers, config=to_dict(cfg),
                       quiet=not show_progress) as metrics:
        metrics.start(first * built.steps)
        for epoch in range(first, epochs):
            done = protocol.train_epoch(epoch, epoch * built.steps, progress)
            history.append(done.history)
            metrics.write(epoch=epoch, **done.metrics)
            progress.message(f"epoch {epoch + 1}/{epochs}: {done.message}")
            note = failures.report(f"epoch {epoch + 1}") if main else None
            if note:
                print_warning(note)
            if main:  # after the epoch's evaluation: the RNG state the next epoch's loader starts from
                checkpoint.save_last({"format": protocol.format, "epoch": epoch + 1, **protocol.state(),
                                      "optimizer": built.optimizer.state_dict(), "history": history,
                                      "pretrained": protocol.pretrained, "rng": checkpoint.rng_state(),
                                      "config": to_dict(cfg)}, run_dir / protocol.last)
        result = protocol.finish(history, progress)
    if not main:
        return run_dir / "result.json"
    return protocol.write_result(history, result, run_dir, started)


def _restore(protocol: EpochProtocol, built: Built, path: Path, history: list[dict[str, Any]]) -> int:
    """Load a run's last epoch from ``path`` (the protocol's tensors, the optimizer, history, RNG); the epochs it
    had done. What does not fit this run is a one-line error before any step."""
    saved = checkpoint.load(path)
    if saved.get("format") != protocol.format:
        raise checkpoint.CheckpointError(f"{path}: not a {protocol.words.kind} checkpoint")
    if saved.get("pretrained") != protocol.pretrained:
        raise ConfigError(f"--resume: {path} {protocol.words.verb} {saved.get('pretrained')!r}, not "
                          f"{protocol.pretrained!r}")
    protocol.load_state(saved, path)
    load_optimizer_state(built.optimizer, saved.get("optimizer"), source=str(path), modules=built.modules)
    epoch, saved_history = checkpoint.restore_resume_fields(saved, path, position="epoch")
    history += saved_history
    return epoch


@torch.no_grad()
def evaluate(model: nn.Module, loader: DataLoader, device: torch.device, amp: bool,
             num_classes: int) -> dict[str, float]:
    """Top-1/top-5 (%) over the whole validation set, summed across ranks. With fewer than 5 classes top-5 is
    top-``num_classes`` (:func:`moco_core.run.knn.topk_accuracy`: 100% for every class the model scores)."""
    model.eval()
    counts = torch.zeros(3, dtype=torch.float64, device=device)  # top1 hits, top5 hits, images
    finite = torch.ones((), dtype=torch.bool, device=device)  # read once after the pass: no host sync a batch
    for images, target, _ in loader:
        with autocast(device, amp):
            scores = model(images.to(device, non_blocking=True)).float()
        finite &= torch.isfinite(scores).all()
        acc = topk_accuracy(scores, target.to(device), (1, 5))
        n = target.shape[0]
        counts += torch.tensor([acc["top1"] * n / 100, acc["top5"] * n / 100, n], device=device,
                               dtype=torch.float64)
    if not bool(finite):  # NaN scores rank as class 0: a score at chance, without a word
        raise non_finite_error("evaluation", ["val images, in eval mode"])
    if distributed.world_size() > 1:
        torch.distributed.all_reduce(counts)
    return {"top1": (counts[0] / counts[2]).item() * 100, "top5": (counts[1] / counts[2]).item() * 100}


def frozen_reference(model: nn.Module, info: BackboneInfo) -> dict[str, torch.Tensor]:
    """What :func:`sanity_check` compares a random network against: a copy of every tensor but the classifier's, as
    initialised; none for weights read from a file, which it reads again instead."""
    if info.source != "random":
        return {}
    head = classifier_name(model) + "."
    return {k: v.clone() for k, v in model.state_dict().items() if not k.startswith(head)}


def sanity_check(model: nn.Module, info: BackboneInfo, initial: dict[str, torch.Tensor]) -> None:
    """Every tensor but the classifier's must equal the pretrained weights (re-read from the file) or the initial
    ones."""
    reference = initial if info.source == "random" else backbone.reread_state(info)
    head = classifier_name(model) + "."
    state = {k: v.cpu() for k, v in model.state_dict().items() if not k.startswith(head)}
    changed = [k for k in state if k in reference and not torch.equal(state[k], reference[k].cpu())]
    if changed or state.keys() != reference.keys():
        raise RuntimeError(f"sanity check failed: {len(changed)} frozen tensors changed (first: {changed[:3]}) "
                           f"during linear training; the evaluation is invalid")
