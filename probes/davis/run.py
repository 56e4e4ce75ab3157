"""One ``moco eval davis``: a backbone's patch features, the first frames' masks propagated through every video,
J and F of each object, and the result record."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from moco_core.config import ConfigError
from moco_core.data.data import DatasetError
from moco_core.errors import UserError
from moco_core.model import backbone
from moco_core.model.backbone import load_backbone
from moco_core.model.taps import DenseTaps, default_dense_tap
from moco_core.model.vit import is_vit
from moco_core.model.weights.formats import Normalisation
from moco_core.model.weights.resnet_names import CIFAR_SUFFIX
from moco_core.run.records import write_record
from moco_core.run.rundir import require_writable
from moco_core.run.runtime import resolve_device
from probes.davis import embedded, metrics
from probes.davis.config import DavisConfig
from probes.davis.layout import Video, check_sizes, davis_root, read_annotations, read_frame, read_videos
from probes.davis.propagate import frame_size, one_hot, propagate, to_prediction


def davis_eval(pretrained: str, cfg: DavisConfig, output_dir: Path,
               extra: dict[str, Any] | None = None) -> tuple[Path, dict[str, float]]:
    """J&F, J and F (percent) of ``pretrained``'s patch features on the videos of ``cfg.data``; writes
    ``output_dir/result.json`` (and the predicted masks, ``cfg.run.save_masks``). ``extra``: more top-level fields
    for the record."""
    require_writable(output_dir)
    device = resolve_device(cfg.run.device)
    weights = backbone.read(pretrained, cfg.run.weights_format)
    root = embedded.ensure_davis() if cfg.data.path == "embedded" else Path(str(cfg.data.path))
    videos = read_videos(root, cfg.data.split)
    for video in videos:  # headers only: a broken file stops the run now, not after the videos before it
        check_sizes(video)
    torch.manual_seed(cfg.run.seed)
    model, info = load_backbone(weights, 1, arch=cfg.arch)  # the head is never run
    if info.arch.endswith(CIFAR_SUFFIX):  # DenseTaps' strides are the ImageNet stem's
        raise UserError(f"{info.source}: a CIFAR-stem ResNet ({info.arch}: 3x3 conv1 of stride 1, no max-pool), whose "
                        f"stage strides the patch grid is not read at; moco eval davis takes ImageNet-stem ResNets "
                        f"and ViTs")
    tap = cfg.tap or default_dense_tap(model)
    reader = FrameFeatures(model.eval().to(device), tap, backbone.input_normalisation(weights), device,
                           cfg.data.short_side, cfg.run.batch_size)
    scores: dict[str, list[tuple[float, float]]] = {}
    for n, video in enumerate(videos, 1):
        predicted, annotated, objects, colours = _segment(video, reader, cfg)
        scores[video.name] = metrics.video_scores(annotated, predicted, objects)
        if cfg.run.save_masks:
            _save_masks(output_dir / "masks" / video.name, video, predicted, colours)
        print(f"davis [{n}/{len(videos)}] {video.name}: " + ", ".join(
            f"object {i} J {100 * j:.1f} F {100 * f:.1f}" for i, (j, f) in enumerate(scores[video.name], 1)),
            file=sys.stderr)
    result = metrics.summary([s for video_scores in scores.values() for s in video_scores])
    record = write_record(
        output_dir / "result.json", task="davis", protocol="label-propagation", metrics=result, backbone=info,
        dataset=_dataset(cfg, root, videos),
        config={"tap": tap, "stride": reader.stride, "short_side": cfg.data.short_side,
                "context": cfg.propagation.context, "topk": cfg.propagation.topk,
                "temperature": cfg.propagation.temperature, "radius": cfg.propagation.radius, "seed": cfg.run.seed},
        extra={"per_object": {f"{name}_{i}": {"J": 100 * j, "F": 100 * f} for name, video_scores in scores.items()
                              for i, (j, f) in enumerate(video_scores, 1)}, **(extra or {})})
    print("davis: " + " ".join(f"{k} {v:.2f}" for k, v in result.items()), file=sys.stderr)
    return record, result


class FrameFeatures:
    """A frozen backbone read at one dense tap: frames (3, H, W) in [0, 1] -> patch features (D, H'/s, W'/s) at
    the size :func:`frame_size` gives, ``batch_size`` frames a forward pass."""

    def __init__(self, model: nn.Module, tap: str, normalisation: Normalisation, device: torch.device,
                 short_side: int, batch_size: int) -> None:
        if is_vit(model):
            _any_grid(model)
        try:
            self.taps = DenseTaps(model, (tap,))
        except ValueError as err:  # a tap this backbone does not have
            raise ConfigError(f"tap: {err}") from None
        self.tap, self.stride = tap, self.taps.stride[tap]
        self.mean = torch.tensor(normalisation.mean, device=device).view(1, 3, 1, 1)
        self.std = torch.tensor(normalisation.std, device=device).view(1, 3, 1, 1)
        self.device, self.short_side, self.batch_size = device, short_side, batch_size

    @torch.no_grad()
    def __call__(self, frames: list[Path], size: tuple[int, int]) -> Iterator[torch.Tensor]:
        grid = frame_size(*size, short_side=self.short_side, stride=self.stride)
        for start in range(0, len(frames), self.batch_size):
            batch = []
            for path in frames[start:start + self.batch_size]:
                frame = read_frame(path)
                if tuple(frame.shape[1:]) != size:
                    raise DatasetError(f"{path}: {frame.shape[2]} x {frame.shape[1]} pixels, its annotation "
                                       f"{size[1]} x {size[0]}")
                batch.append(frame)
            images = F.interpolate(torch.stack(batch).to(self.device), size=grid, mode="bilinear",
                                   align_corners=False)  # DINO: cv2.resize, bilinear, before normalising
            yield from self.taps((images - self.mean) / self.std)[self.tap].float()


def _any_grid(model: nn.Module) -> None:
    """Let a ViT built for one crop read frames of any size, its position embedding resampled to each frame's grid
    at every forward pass, as timm builds it with ``dynamic_img_size`` (DINO's ``interpolate_pos_encoding`` does
    the same, bicubic); the weights are left as they are."""
    from timm.layers import Format

    if not model.dynamic_img_size:
        model.dynamic_img_size = True
        model.patch_embed.strict_img_size = False
        model.patch_embed.flatten = False
        model.patch_embed.output_fmt = Format.NHWC


def _segment(video: Video, reader: FrameFeatures, cfg: DavisConfig
             ) -> tuple[torch.Tensor, torch.Tensor, int, list[int]]:
    """(predicted (T, H, W) uint8 ids, annotated (T, H, W) uint8 ids, objects, palette) of one video; the first
    frame's prediction is its annotation."""
    annotated, objects, colours = read_annotations(video)
    size = (annotated.shape[1], annotated.shape[2])
    features = reader(list(video.frames), size)
    first = next(features)
    grid = first.shape[1:]
    first_ids = F.interpolate(torch.where(annotated[0] == 255, 0, annotated[0])[None, None].float(), size=grid,
                              mode="nearest-exact")[0, 0].long().to(first.device)  # DINO: PIL NEAREST
    labels = one_hot(first_ids, objects + 1)
    p = cfg.propagation
    predicted = [annotated[0]]  # ids < 256 as uint8: a DAVIS video of 100 frames at 480p is 41 MB, not 330
    for soft in propagate(itertools.chain([first], features), labels, context=p.context, topk=p.topk,
                          temperature=p.temperature, radius=p.radius):
        predicted.append(to_prediction(soft, reader.stride, size).to(torch.uint8).cpu())
    return torch.stack(predicted), annotated, objects, colours


def _save_masks(folder: Path, video: Video, predicted: torch.Tensor, colours: list[int]) -> None:
    """The predictions as palette PNGs named as the frames (davis2017-evaluation reads a results folder of them)."""
    folder.mkdir(parents=True, exist_ok=True)
    for frame, ids in zip(video.frames, predicted, strict=True):
        image = Image.fromarray(ids.numpy()).convert("P")
        image.putpalette(colours or embedded.palette())
        image.save(folder / f"{frame.stem}.png")


def _dataset(cfg: DavisConfig, root: Path, videos: list[Video]) -> dict[str, Any]:
    embedded_data = cfg.data.path == "embedded"
    return {"name": "embedded DAVIS-layout videos" if embedded_data else f"DAVIS-2017 {cfg.data.split}",
            "path": str(cfg.data.path) if embedded_data else str(davis_root(root)), "split": cfg.data.split,
            "layout": "davis2017", "videos": len(videos), "frames": sum(len(v.frames) for v in videos),
            **({"version": embedded.dataset_version()} if embedded_data else {})}
