"""The pretraining run: build data, model and optimizer from a config, train, checkpoint, resume."""

from __future__ import annotations

import contextlib
import math
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

from moco_core import checkpoint, distributed, smoke
from moco_core.config import VIT_ARCHS, ConfigError, replace, to_dict
from moco_core.data.augment import build_pretrain_transform, build_supervised_transform, build_two_crops
from moco_core.data.data import DecodeFailures, ImageDataset, scan_images, warn_revisited, warn_skipped
from moco_core.data.device_data import DeviceAugmentLoader, EncodedImages, collate_encoded
from moco_core.errors import print_warning
from moco_core.model.batchnorm import sync_batchnorm_for
from moco_core.model.methods import METHODS, Method, build_method, split_bn_groups
from moco_core.model.optimizers import make_optimizer, resolve_optimizer
from moco_core.optimizer_state import load_optimizer_state
from moco_core.pretrain_config import OptimConfig, PretrainConfig, RunConfig
from moco_core.run.engine import EpochState, train_one_epoch
from moco_core.run.knn import KnnMonitor
from moco_core.run.naming import pretrain_dir
from moco_core.run.preemption import ResumableSampler, StopSignal, ignore_sigterm, kill_workers_at_exit
from moco_core.run.progress import MetricsWriter, Progress, SlowdownWatch
from moco_core.run.rundir import code_version, require_fresh, run_dir_lock, write_run_files
from moco_core.run.runtime import resolve_data, resolve_device
from moco_core.run.schedule import short_schedule


def learning_rate(cfg: OptimConfig, epoch: float) -> float:
    """lr at ``epoch`` (0-based; MoCo v1/v2 set it once per epoch, as their official code; v3 every step, at the
    fractional epoch ``epoch + i / steps_per_epoch``, as its official code).

    Base lr = cfg.lr * batch / 256 (the paper: 0.03 at batch 256). Warm-up (v3): base * epoch / warmup_epochs
    before ``warmup_epochs``; the schedule then runs over the epochs after it. Step: x0.1 at each milestone
    passed. Cosine (v2, v3): base * (1 + cos(pi * t / T)) / 2, t the epochs since the warm-up, T those after it.
    """
    base = cfg.lr * cfg.batch_size / 256
    warmup = cfg.warmup_epochs
    if epoch < warmup:
        return base * epoch / warmup
    if cfg.schedule == "cosine":
        return base * 0.5 * (1.0 + math.cos(math.pi * (epoch - warmup) / (cfg.epochs - warmup)))
    return base * 0.1 ** sum(epoch >= m for m in cfg.milestones)


class StepSchedule:
    """What changes every step of a MoCo v3 run: the lr (warm-up, then the schedule) and the momentum m, both
    at the fractional epoch of the step, set before it (official main_moco.py)."""

    def __init__(self, cfg: OptimConfig, method: Method, optimizer: torch.optim.Optimizer, *, epoch: int,
                 steps_per_epoch: int) -> None:
        self.cfg, self.method, self.optimizer = cfg, method, optimizer
        self.epoch, self.steps_per_epoch = epoch, steps_per_epoch

    def __call__(self, batch: int) -> float:
        """Set the lr and m of the epoch's batch ``batch`` (0-based); returns the lr."""
        at = self.epoch + batch / self.steps_per_epoch
        lr = learning_rate(self.cfg, at)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.method.schedule(at / self.cfg.epochs)  # type: ignore[union-attr]
        return lr


def epoch_seed(seed: int, epoch: int, rank: int) -> int:
    """Seed of an epoch's augmentations and shuffles: a run resumed at an epoch boundary replays it exactly."""
    return (seed * 1_000_003 + epoch * 1009 + rank) % (2**63)


def check_run(cfg: PretrainConfig, world_size: int, device: torch.device, dataset_size: int | None) -> int:
    """Per-process batch size, after checking that the run can go as configured on these processes (and, when
    ``dataset_size`` is given, on a dataset of that many images). ``--print-config`` makes the same checks."""
    batch = cfg.optim.batch_size
    if cfg.method in ("end2end", "mocov3") and batch < 2:
        raise ConfigError(f"optim.batch_size: {cfg.method}'s keys are the batch's: a batch of 1 has no negatives")
    if batch % world_size:
        raise ConfigError(f"optim.batch_size: {batch} is not divisible by the {world_size} processes")
    local = batch // world_size
    if cfg.method == "mocov3" and local < 2:  # BN over one image of the heads' 1-D features is undefined
        raise ConfigError(f"optim.batch_size: {batch} images over {world_size} processes leaves each 1; mocov3's "
                          f"heads batch-normalise, give each process 2 images or more")
    groups = split_bn_groups(cfg.model, world_size) if cfg.method != "mocov3" else 1
    if local % groups:
        raise ConfigError(f"optim.batch_size: {batch} is not divisible by model.bn_groups={cfg.model.bn_groups}")
    split = groups > 1 and cfg.method != "supervised"
    per_bn = local // groups if split else local  # the images each BN layer's statistics come from
    if per_bn == 1 and cfg.augment.crop_size <= 32:  # a ResNet's last stage is then 1x1: one value per channel
        where = (f"{batch} images over model.bn_groups={cfg.model.bn_groups}" if split else
                 f"{batch} images over {world_size} processes" if world_size > 1 else f"a batch of {batch}")
        raise ConfigError(f"optim.batch_size: {where} leaves each BN layer 1 image, and at augment.crop_size "
                          f"{cfg.augment.crop_size} a ResNet's last stage is 1x1: batch norm would see one value "
                          f"per channel; give it 2 images or more (a larger batch{', fewer groups' if split else ''})"
                          f" or a crop over 32")
    if dataset_size is not None and batch > dataset_size:
        raise ConfigError(f"optim.batch_size: {batch} is larger than the dataset ({dataset_size} images)")
    return local


@dataclass(frozen=True)
class Speed:
    channels_last: bool
    compiled: bool


def speed_up(method: Method, device: torch.device, run: RunConfig) -> Speed:
    """Apply ``run.channels_last`` and ``run.compile`` (null: on under CUDA) to the method's encoders, in place.

    ``nn.Module.compile`` compiles each encoder's call and leaves its parameters and state_dict keys as they were,
    so checkpoints, the momentum update and DDP see the same modules. MoCo's key encoder is compiled too (its
    forward runs under no_grad: an inference graph); the shuffle, the queue and the loss stay eager.
    """
    cuda = device.type == "cuda"
    channels_last = cuda if run.channels_last is None else run.channels_last
    compiled = cuda if run.compile is None else run.compile
    if channels_last:
        method.module.to(memory_format=torch.channels_last)
    if compiled:
        for encoder in {id(m): m for m in (method.encoder, getattr(method.module, "momentum_encoder", None))
                        if m is not None}.values():
            encoder.compile()
    return Speed(channels_last=channels_last, compiled=compiled)


def data_pipeline(name: str, device: torch.device, transform: str) -> str:
    """``data.pipeline`` resolved: "auto" is the tensor pipeline under CUDA for the contrastive methods (their
    augmentation is the one it implements), else PIL."""
    if name != "auto":
        return name
    return "tensor" if device.type == "cuda" and transform != "supervised" else "pil"


def eager_mode() -> contextlib.AbstractContextManager[Any]:
    """Compiled modules run eagerly inside (torch >= 2.6; with an older torch they compile for the new shapes)."""
    set_stance = getattr(torch.compiler, "set_stance", None)
    return set_stance("force_eager") if set_stance is not None else contextlib.nullcontext()


def build_optimizer(module: nn.Module, cfg: OptimConfig, device: torch.device, *, method: str = "moco",
                    vit: bool = False) -> torch.optim.Optimizer:
    """``optim.optimizer`` (auto: SGD for v1/v2, LARS or AdamW for v3 on a ResNet or a ViT) over all parameters,
    as the official code: the key encoder's never get gradients, so the optimizer skips them, and optimizer state
    indices then match official checkpoints. One fused kernel per step on CUDA (SGD, AdamW)."""
    name = resolve_optimizer(cfg.optimizer, method, vit)
    optimizer = make_optimizer(module, name, lr=learning_rate(cfg, 0), momentum=cfg.momentum,
                               weight_decay=cfg.weight_decay)
    use_fused_kernels(optimizer, device)
    return optimizer


def use_fused_kernels(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """Fused SGD or AdamW on CUDA, torch's default (foreach) elsewhere; set again after loading a checkpoint, whose
    param groups carry the flags of the machine that wrote it (an official checkpoint carries none). LARS has
    neither."""
    if not isinstance(optimizer, (torch.optim.SGD, torch.optim.AdamW)):
        return
    for group in optimizer.param_groups:
        group["fused"] = device.type == "cuda"
        group["foreach"] = None


@dataclass
class Resumed:
    epoch: int  # epoch to run next (0-based), the official 'epoch' field
    step: int
    partial: EpochState | None = None  # how far into ``epoch`` a mid-epoch checkpoint got
    output_dir: str | None = None  # the run directory the checkpoint's config records (ours only)


def restore(path: Path, method: Method, optimizer: torch.optim.Optimizer, steps_per_epoch: int,
            model_arch: str, *, ckpt: dict[str, Any] | None = None) -> Resumed:
    """Load model, queue, pointer, optimizer and position from one of our or an official checkpoint (``ckpt``:
    ``path`` already loaded, where the caller has it).

    An epoch-end checkpoint resumes at the start of the next epoch, whose seeds are a function of the epoch
    (:func:`epoch_seed`). A mid-epoch one also gives the batches done and the RNG states to continue from.
    """
    ckpt = checkpoint.load(path) if ckpt is None else ckpt
    if "state_dict" not in ckpt:
        raise checkpoint.CheckpointError(f"{path}: has no 'state_dict'; not a pretraining checkpoint")
    if checkpoint.checkpoint_method(ckpt) != method.name:
        raise checkpoint.CheckpointError(f"{path}: was written by method {checkpoint.checkpoint_method(ckpt)!r}, not "
                                         f"{method.name!r}")
    try:
        method.load_state_dict(ckpt["state_dict"])
    except checkpoint.CheckpointError as err:
        arch = checkpoint.checkpoint_arch(ckpt)
        holds = f"it holds {arch}, the config asks for {model_arch}" if arch and arch != model_arch else \
            f"the config asks for {model_arch}"
        raise checkpoint.CheckpointError(f"{path}: does not match the configured model ({holds}): {err}") from None
    if "optimizer" in ckpt:  # ours and the official v1/v2 and v3 layouts: checked before any step
        load_optimizer_state(optimizer, ckpt["optimizer"], source=str(path), modules=[method.module])
    epoch = int(ckpt.get("epoch", 0))
    step = int(ckpt.get("global_step", epoch * steps_per_epoch))
    config = ckpt.get("config") if isinstance(ckpt.get("config"), dict) else {}
    recorded = config.get("run", {}).get("output_dir") if isinstance(config.get("run"), dict) else None
    output_dir = recorded if isinstance(recorded, str) else None
    position = ckpt.get("sampler") if isinstance(ckpt.get("sampler"), dict) else {}
    batches = int(position.get("position", 0))
    if not batches:
        return Resumed(epoch=epoch, step=step, output_dir=output_dir)
    if batches >= steps_per_epoch:
        raise checkpoint.CheckpointError(f"{path}: stopped after batch {batches} of epoch {epoch + 1}, but an epoch "
                                         f"has {steps_per_epoch} batches here: the data or batch size changed")
    partial = EpochState(batches=batches, loss_sum=float(position.get("loss_sum", 0.0)),
                         accuracy_sum=float(position.get("accuracy_sum", 0.0)),
                         counted=int(position.get("counted", batches)), rng=ckpt.get("rng"))
    return Resumed(epoch=epoch, step=step, partial=partial, output_dir=output_dir)


def checkpoint_dict(cfg: PretrainConfig, method: Method, optimizer: torch.optim.Optimizer, *, epoch: int,
                    step: int, partial: EpochState | None = None) -> dict[str, Any]:
    """The official four fields, then ours. ``epoch`` is the epoch to run next, as main_moco.py writes it.

    A mid-epoch checkpoint (``partial``) keeps ``epoch`` at the unfinished epoch, so the official script would
    rerun it whole; ours continues after the ``sampler.position`` batches already trained.
    """
    partial = partial or EpochState()
    return {
        "epoch": epoch,
        "arch": cfg.model.arch,
        "state_dict": method.state_dict(),
        "optimizer": optimizer.state_dict(),
        "format": "moco-suite",
        "format_version": checkpoint.FORMAT_VERSION,
        "method": method.name,
        "config": to_dict(cfg),
        "global_step": step,
        **method.extras(),
        "sampler": {"epoch": epoch, "position": partial.batches, "loss_sum": partial.loss_sum,
                    "accuracy_sum": partial.accuracy_sum, "counted": partial.counted},
        "rng": checkpoint.rng_state(),
        "code_version": code_version(),
        "smoke": smoke.enabled(),  # what is evaluated from it is marked so (moco_core/smoke.py)
    }


def pretrain(cfg: PretrainConfig, *, resume: str | Path | None = None, show_progress: bool | str = True) -> Path:
    """Pretrain MoCo as ``cfg`` says; returns the run directory. Joins torch.distributed when launched so."""
    if cfg.run.output_dir is None:  # the CLI names it after the preset (moco_core.run.naming.pretrain_dir)
        cfg = replace(cfg, run={"output_dir": pretrain_dir(None)})
    device = resolve_device(cfg.run.device)
    with distributed.process_group(device, cfg.run.dist_timeout_s), run_dir_lock(Path(cfg.run.output_dir), device):
        return _pretrain(cfg, device, resume, show_progress)


def _pretrain(cfg: PretrainConfig, device: torch.device, resume: str | Path | None, show_progress: bool | str) -> Path:
    run_dir = Path(cfg.run.output_dir)
    resume_path = checkpoint.resolve(resume) if resume else None
    if resume_path is None:
        prefix = smoke.command_prefix(smoke.recorded(run_dir) is True)  # the mode it was run in
        require_fresh(run_dir, (checkpoint.LAST,), "a run", f"pass --resume to continue it ({prefix}moco pretrain "
                      f"--resume --output-dir {shlex.quote(str(run_dir))}), or choose another --output-dir")
    loaded = refuse_other_mode(resume_path) if resume_path is not None else None
    run = _set_up(cfg, device, resume_path, loaded)
    metrics = MetricsWriter(run_dir / "metrics.jsonl", enabled=distributed.is_main(), loggers=cfg.run.loggers,
                            config=to_dict(cfg), quiet=not show_progress)
    if distributed.is_main():
        write_run_files(run_dir, to_dict(cfg), {
            "world_size": distributed.world_size(), "device": str(device), "dataset": str(run.data_root),
            "images": run.images, "skipped_images": run.skipped, "resumed_from": str(resume_path) if resume_path
            else None, "start_epoch": run.start.epoch, "data_pipeline": run.pipeline,
            "channels_last": run.speed.channels_last, "compiled": run.speed.compiled,
            **moved(run.start.output_dir, run_dir),
        })
        checkpoint.remove_partial_writes(run_dir)
        metrics.start(run.start.step)
    with metrics:  # the loggers are closed (flushed) at the end, and on an error
        _train(cfg, run, device, metrics, show_progress)
    return run_dir


def refuse_other_mode(resume_path: Path) -> dict[str, Any] | None:
    """Stop before any work when the checkpoint to continue was written in the other mode (smoke or real) than
    this process runs in: its run.json says which (cheap), else the checkpoint itself, which is then returned
    (restored from without a second read)."""
    recorded, loaded = smoke.recorded(resume_path.parent), None
    if recorded is None:
        loaded = checkpoint.load(resume_path)
        recorded = smoke.of_checkpoint(loaded, resume_path)
    how = "with MOCO_SMOKE=1" if recorded else "without MOCO_SMOKE"
    smoke.refuse_other_mode(recorded, str(resume_path), fix=f"continue it {how}, or start this run in another "
                            f"--output-dir")
    return loaded


@dataclass
class _Run:
    """What the epochs of one pretraining work with (built by :func:`_set_up`)."""

    method: Method
    model: nn.Module  # the method's module, wrapped in DDP with several processes
    optimizer: torch.optim.Optimizer
    sampler: ResumableSampler
    loader: Any
    local_batch: int
    speed: Speed
    failures: DecodeFailures
    start: Resumed
    data_root: Path
    pipeline: str
    images: int
    skipped: int


def _set_up(cfg: PretrainConfig, device: torch.device, resume_path: Path | None,
            loaded: dict[str, Any] | None = None) -> _Run:
    """Data, model, optimizer and loader of a run, restored from ``resume_path`` when given (``loaded``: that
    checkpoint, where it was read already)."""
    world, rank, main = distributed.world_size(), distributed.rank(), distributed.is_main()
    data_root = resolve_data(cfg.data.path)
    images = scan_images(data_root, split="train", verify=cfg.data.verify_images, workers=max(cfg.data.workers, 1),
                         shared=True)
    local_batch = check_run(cfg, world, device, len(images.samples))
    for note in (warn_revisited(images.revisited), warn_skipped(images.skipped)):
        if note and main:
            print_warning(note)
    method_cls: Any = METHODS[cfg.method]
    if cfg.data.pipeline == "tensor" and method_cls.transform == "supervised":
        raise ConfigError(f"data.pipeline: tensor has the MoCo augmentation only; method {cfg.method} needs pil")
    pipeline = data_pipeline(cfg.data.pipeline, device, method_cls.transform)
    if method_cls.needs_labels and not images.classes:
        raise ConfigError(f"method: {cfg.method} needs labels: {data_root} has no class folders")

    torch.manual_seed(cfg.run.seed)  # identical initial weights and queue on every rank
    method = build_method(cfg, world_size=world, num_classes=len(images.classes), dataset_size=len(images.samples))
    module = sync_batchnorm_for(method.module.to(device), device)  # model.shuffle_bn: sync on CPU processes too
    speed = speed_up(method, device, cfg.run)
    optimizer = build_optimizer(module, cfg.optim, device, method=cfg.method, vit=cfg.model.arch in VIT_ARCHS)
    transform = {"two_crops": lambda: build_two_crops(cfg.augment),
                 "one_crop": lambda: build_pretrain_transform(cfg.augment),
                 "supervised": lambda: build_supervised_transform(cfg.augment)}[method.transform]()
    failures = DecodeFailures(Path(cfg.run.output_dir) / ".undecodable")  # reported once per epoch by rank 0
    if pipeline == "tensor":
        dataset, collate = EncodedImages(images.samples), collate_encoded
    else:
        dataset, collate = ImageDataset(images.samples, transform, failures), None
    sampler = ResumableSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=cfg.run.seed,
                               drop_last=True)
    kill_workers_at_exit()  # its workers ignore SIGTERM: an exit on an error must not wait for them
    loader: Any = DataLoader(dataset, batch_size=local_batch, sampler=sampler, num_workers=cfg.data.workers,
                             pin_memory=device.type == "cuda", drop_last=True,
                             collate_fn=collate, worker_init_fn=ignore_sigterm)
    if pipeline == "tensor":
        loader = DeviceAugmentLoader(loader, cfg.augment, device, views=2 if method.transform == "two_crops" else 1,
                                     channels_last=speed.channels_last)
    note = short_schedule("this pretraining", steps_per_epoch=len(loader), epochs=cfg.optim.epochs,
                          images=len(images.samples), batch_size=cfg.optim.batch_size,
                          warmup_epochs=cfg.optim.warmup_epochs)
    if note and main:
        print(note, file=sys.stderr)
    start = Resumed(epoch=0, step=0)
    if resume_path is not None:
        start = restore(resume_path, method, optimizer, len(loader), cfg.model.arch, ckpt=loaded)
        use_fused_kernels(optimizer, device)  # the checkpoint's choice was for the device that wrote it
    model: nn.Module = module
    if world > 1:
        with distributed.unsynced_buffers_accepted():
            model = DistributedDataParallel(module, device_ids=[device.index] if device.type == "cuda" else None,
                                            broadcast_buffers=False)
    return _Run(method, model, optimizer, sampler, loader, local_batch, speed, failures, start, data_root, pipeline,
                len(images.samples), len(images.skipped))


def _train(cfg: PretrainConfig, run: _Run, device: torch.device, metrics: MetricsWriter,
           show_progress: bool | str) -> None:
    """The epochs from ``run.start`` on, until the last or a stop signal (then with a checkpoint)."""
    main, rank, run_dir = distributed.is_main(), distributed.rank(), Path(cfg.run.output_dir)
    monitor = None
    if cfg.run.knn_every and main:
        try:
            monitor = KnnMonitor.from_root(resolve_data(cfg.data.knn_path or ""), crop_size=cfg.augment.crop_size,
                                           device=device, workers=cfg.data.workers)
        except ConfigError as err:  # the monitor's data: often data.path's, which it follows (moco_core.config)
            raise ConfigError(f"{err}; the kNN monitor (run.knn_every) reads data.knn_path: set it to a root with "
                              f"labelled train/ and val/, or run.knn_every=0 to turn the monitor off") from None
    steps_per_epoch = len(run.loader)
    progress = Progress(steps_per_epoch * cfg.optim.epochs, done_steps=run.start.step, every=cfg.run.log_every,
                        enabled=main and show_progress)
    step = run.start.step
    watch = SlowdownWatch(torch.get_num_threads()) if device.type == "cpu" else None  # a shared CPU, named
    with StopSignal(device, every=cfg.run.log_every) as stop:
        for epoch in range(run.start.epoch, cfg.optim.epochs):
            lr = learning_rate(cfg.optim, epoch)
            for group in run.optimizer.param_groups:
                group["lr"] = lr
            run.sampler.set_epoch(epoch)
            partial = run.start.partial if epoch == run.start.epoch else None
            run.sampler.start = partial.batches * run.local_batch if partial else 0  # skip what the killed run saw
            torch.manual_seed(epoch_seed(cfg.run.seed, epoch, rank))
            saver = _StepSaver(cfg, run.method, run.optimizer, run_dir, epoch, stop, enabled=main)
            schedule = StepSchedule(cfg.optim, run.method, run.optimizer, epoch=epoch,
                                    steps_per_epoch=steps_per_epoch) if cfg.method == "mocov3" else None
            if schedule is not None:  # the epoch summary's lr: its last step's
                lr = learning_rate(cfg.optim, epoch + (steps_per_epoch - 1) / steps_per_epoch)
            stats = train_one_epoch(run.model, run.method, run.loader, run.optimizer, epoch=epoch,
                                    epochs=cfg.optim.epochs, step=step, lr=lr, device=device, amp=cfg.run.amp,
                                    log_every=cfg.run.log_every, channels_last=run.speed.channels_last,
                                    progress=progress, metrics=metrics, resume=partial, checkpoints=saver,
                                    watch=watch, before_step=schedule)
            run.sampler.start = 0
            step = stats.step
            if main and stats.complete:  # a stop mid-epoch has already written its checkpoint
                _end_epoch(cfg, run.method, run.optimizer, run_dir, epoch, step, lr, stats, monitor, metrics,
                           progress, force_checkpoint=stats.stopped)
                note = run.failures.report(f"epoch {epoch + 1}")
                if note:
                    print_warning(note)
            distributed.barrier()
            if stats.stopped:
                if main:
                    print(f"stopped by {stop.received or 'a signal to another process'} after step {step} (epoch "
                          f"{epoch + 1}); checkpoint written; continue with: {smoke.command_prefix()}moco pretrain "
                          f"--resume --output-dir {shlex.quote(str(run_dir))}",
                          file=sys.stderr, flush=True)
                break


def moved(recorded: str | None, run_dir: Path) -> dict[str, str]:
    """``{"moved_from": recorded}`` when a resumed checkpoint's config names another run directory than this one
    (the run was copied or moved), for run.json; nothing otherwise."""
    if recorded is None or Path(os.path.expanduser(recorded)).resolve() == Path(os.path.expanduser(run_dir)).resolve():
        return {}
    return {"moved_from": recorded}


class _StepSaver:
    """Mid-epoch checkpoints for :func:`train_one_epoch`: every ``run.checkpoint_steps`` steps, and on a stop."""

    def __init__(self, cfg: PretrainConfig, method: Method, optimizer: torch.optim.Optimizer, run_dir: Path,
                 epoch: int, stop: StopSignal, *, enabled: bool) -> None:
        self.every = cfg.run.checkpoint_steps
        self.cfg, self.method, self.optimizer, self.run_dir, self.epoch = cfg, method, optimizer, run_dir, epoch
        self.stop, self.enabled = stop, enabled

    def save(self, step: int, state: EpochState) -> None:
        if self.enabled:
            ckpt = checkpoint_dict(self.cfg, self.method, self.optimizer, epoch=self.epoch, step=step, partial=state)
            checkpoint.save_last(ckpt, self.run_dir / checkpoint.LAST)

    def stop_requested(self, step: int) -> bool:
        return self.stop.requested(step)


def _end_epoch(cfg: PretrainConfig, method: Method, optimizer: torch.optim.Optimizer, run_dir: Path, epoch: int,
               step: int, lr: float, stats: Any, monitor: KnnMonitor | None, metrics: MetricsWriter,
               progress: Progress, *, force_checkpoint: bool) -> None:
    """The main process's work after an epoch: its summary line, the kNN monitor, the epoch checkpoint."""
    metrics.write(step=step, epoch=epoch, epoch_loss=stats.loss, epoch_accuracy=stats.accuracy, lr=lr,
                  images_per_s=stats.images_per_s, data_wait=stats.data_wait)
    scores = "no negatives yet (the queue was empty: loss and accuracy are not measured)" if stats.loss is None \
        else f"loss {stats.loss:.4f} acc {stats.accuracy:.2f}%"
    progress.message(f"epoch {epoch + 1}/{cfg.optim.epochs}: {scores} {stats.images_per_s:.0f} img/s data-wait "
                     f"{stats.data_wait:.0%}")
    if monitor is not None and ((epoch + 1) % cfg.run.knn_every == 0 or epoch + 1 == cfg.optim.epochs):
        with eager_mode():  # other shapes, eval mode: not worth recompiling for
            knn = monitor(method.encoder)
        metrics.write(step=step, epoch=epoch, **{f"knn_{name}": value for name, value in knn.items()})
        progress.message(f"epoch {epoch + 1}: kNN " + " ".join(f"{n} {v:.2f}" for n, v in knn.items()))
    if force_checkpoint or epoch + 1 == cfg.optim.epochs or (epoch + 1) % cfg.run.checkpoint_every == 0:
        path = run_dir / checkpoint.LAST
        checkpoint.save_last(checkpoint_dict(cfg, method, optimizer, epoch=epoch + 1, step=step), path)
        if cfg.run.keep_every and (epoch + 1) % cfg.run.keep_every == 0:
            checkpoint.keep_copy(path, checkpoint.snapshot_name(epoch))
