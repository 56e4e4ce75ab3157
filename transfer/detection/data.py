"""Detection data for torchvision's detectors: dataset dicts to (image, target) samples, COCO polygons to masks,
and the converters that turn each test image's detections into evaluation records (VOC tuples, COCO result dicts)
for :func:`transfer.engine.predict`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from moco_core.data.data import DatasetError
from moco_core.data.image_files import reason
from transfer.detection.keypoints import flip_keypoints, keypoint_targets
from transfer.engine import read_rgb


def polygon_masks(segmentations: Sequence[Any], height: int, width: int) -> torch.Tensor:
    """COCO segmentations (lists of flat polygons, or RLE dicts) -> (n, H, W) uint8 masks."""
    from pycocotools import mask as mask_utils  # the 'transfer' extra

    masks = np.zeros((len(segmentations), height, width), dtype=np.uint8)
    for k, segmentation in enumerate(segmentations):
        if isinstance(segmentation, list):
            rle = mask_utils.merge(mask_utils.frPyObjects(segmentation, height, width))
        elif isinstance(segmentation.get("counts"), list):  # uncompressed RLE
            rle = mask_utils.frPyObjects(segmentation, height, width)
        else:
            rle = segmentation
        with warnings.catch_warnings():  # pycocotools' NumPy 2 copy-keyword notice, once per call
            warnings.simplefilter("ignore", DeprecationWarning)
            masks[k] = mask_utils.decode(rle)
    return torch.from_numpy(masks)


class DetectionDataset(Dataset):
    """Dataset dicts -> (image (3, H, W) in [0, 1], target, index) for torchvision's detectors.

    Training targets keep no crowd object and no zero-area box, but keep VOC's difficult objects, as detectron2's
    VOC loader (the paper's engine) does; ``labels`` are ``category_id + 1`` (0 is torchvision's background);
    ``masks`` (n, H, W) are added when asked for, and ``keypoints`` (n, K, 3) when ``keypoint_flip`` (the
    keypoint set's flip indices) is given; images are flipped horizontally with ``flip_prob``, left and right
    keypoints exchanged. Test targets are empty.
    """

    def __init__(self, dicts: Sequence[dict[str, Any]], *, train: bool, flip_prob: float = 0.0,
                 masks: bool = False, keypoint_flip: Sequence[int] | None = None) -> None:
        self.dicts = list(dicts)
        self.train = train
        self.flip_prob = flip_prob
        self.masks = masks
        self.keypoint_flip = keypoint_flip

    def __len__(self) -> int:
        return len(self.dicts)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, dict[str, torch.Tensor], int]:
        record = self.dicts[index]
        try:
            image = read_rgb(record["file_name"])
        except Exception as err:  # passed the header check (check_image_sizes), fails to decode: cut short
            raise DatasetError(f"{record['file_name']} does not decode ({reason(err)}); the detection sets stop "
                               f"at an unreadable image, as at start-up: replace or remove it") from None
        if not self.train:
            return image, {}, index
        objects = [a for a in record["annotations"] if not a.get("iscrowd")
                   and a["bbox"][2] > a["bbox"][0] and a["bbox"][3] > a["bbox"][1]]
        height, width = image.shape[1:]
        target = {"boxes": torch.tensor([a["bbox"] for a in objects], dtype=torch.float32).reshape(-1, 4),
                  "labels": torch.tensor([a["category_id"] + 1 for a in objects], dtype=torch.int64)}
        if self.masks:
            target["masks"] = polygon_masks([a["segmentation"] for a in objects], height, width)
        if self.keypoint_flip is not None:
            target["keypoints"] = torch.from_numpy(keypoint_targets(objects)).reshape(len(objects), -1, 3)
        if torch.rand(()) < self.flip_prob:
            image = image.flip(-1)
            target["boxes"] = torch.stack([width - target["boxes"][:, 2], target["boxes"][:, 1],
                                           width - target["boxes"][:, 0], target["boxes"][:, 3]], dim=1)
            if self.masks:
                target["masks"] = target["masks"].flip(-1)
            if self.keypoint_flip is not None:
                target["keypoints"] = flip_keypoints(target["keypoints"], width, self.keypoint_flip)
        return image, target, index


def voc_detections(dicts: Sequence[dict[str, Any]]) -> Callable[[int, dict[str, torch.Tensor]], list]:
    """A ``predict`` converter: (class index, (image_id, score, x0, y0, x1, y1)) per detection."""

    def convert(index: int, output: dict[str, torch.Tensor]) -> list:
        image_id = dicts[index]["image_id"]
        return [(int(label) - 1, (image_id, float(score), *map(float, box)))
                for box, label, score in zip(output["boxes"], output["labels"], output["scores"], strict=True)]

    return convert


def coco_results(dicts: Sequence[dict[str, Any]], contiguous_to_original: dict[int, int],
                 masks: bool) -> Callable[[int, dict[str, torch.Tensor]], list]:
    """A ``predict`` converter: COCO result dicts (original category ids, XYWH boxes, masks as RLE at 0.5)."""
    from pycocotools import mask as mask_utils  # the 'transfer' extra

    def convert(index: int, output: dict[str, torch.Tensor]) -> list:
        results = []
        for k, (box, label, score) in enumerate(zip(output["boxes"], output["labels"], output["scores"],
                                                     strict=True)):
            x0, y0, x1, y1 = map(float, box)
            result = {"image_id": dicts[index]["image_id"], "category_id": contiguous_to_original[int(label) - 1],
                      "bbox": [x0, y0, x1 - x0, y1 - y0], "score": float(score)}
            if masks:
                binary = np.asfortranarray((output["masks"][k, 0] > 0.5).numpy().astype(np.uint8))
                rle = mask_utils.encode(binary)
                result["segmentation"] = {"size": list(rle["size"]), "counts": rle["counts"].decode("ascii")}
            results.append(result)
        return results

    return convert
