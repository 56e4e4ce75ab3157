"""DAVIS-2017 in its release layout, read as davis2017-evaluation reads it, every departure one line naming the file.

``DAVIS/ImageSets/2017/<split>.txt`` lists the videos, one a line; each is ``DAVIS/JPEGImages/480p/<video>/
00000.jpg, 00001.jpg, ...`` with ``DAVIS/Annotations/480p/<video>/00000.png, ...``: one annotation a frame in
train and val, each an 8-bit palette PNG of object ids (0 background, 1..n the objects numbered in the first frame,
255 void, read as background). ``--data`` names the folder holding ``DAVIS/`` or ``DAVIS/`` itself.

Refused, in one line: a missing list, video folder or annotation; frames and annotations that do not pair up by
name; an annotation that is not a palette PNG (an RGB or grey PNG, a JPEG renamed), is not the size of its frame,
or, in the first frame, numbers its objects other than 1..n; a video of fewer than 3 frames (the first is given and
the last is not scored, so nothing would be); files whose real path leaves the dataset (``MOCO_FOLLOW_LINKS``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from moco_core.data.data import DatasetError
from moco_core.data.image_files import decode_rgb, open_header, reason
from moco_core.user_files import LINES_LIMIT, LIST_LIMIT, all_within, inside, read_text

RESOLUTION = "480p"
YEAR = "2017"
LAYOUT = ("DAVIS/JPEGImages/480p/<video>/00000.jpg, DAVIS/Annotations/480p/<video>/00000.png (palette PNGs of "
          "object ids), DAVIS/ImageSets/2017/<split>.txt")
MIN_FRAMES = 3  # the first frame is given, the last is not scored (davis2017-evaluation): at least one between


@dataclass(frozen=True)
class Video:
    """One video: its frames and their annotations, paired by name, in order."""

    name: str
    frames: tuple[Path, ...]
    masks: tuple[Path, ...]


def davis_root(path: str | Path) -> Path:
    """The ``DAVIS/`` folder of ``path``: ``path/DAVIS`` where there is one, else ``path`` itself."""
    path = Path(path)
    return path / "DAVIS" if (path / "DAVIS").is_dir() else path


def read_videos(path: str | Path, split: str = "val") -> list[Video]:
    """The videos ``ImageSets/2017/<split>.txt`` lists, with their frames and annotations found and paired."""
    root = davis_root(path)
    listing = root / "ImageSets" / YEAR / f"{split}.txt"
    if not listing.is_file():
        raise DatasetError(f"{root}: no ImageSets/{YEAR}/{split}.txt; expected DAVIS-2017's layout: {LAYOUT}")
    names = [line.strip() for line in read_text(listing, limit=LIST_LIMIT, lines=LINES_LIMIT, what="video list",
                                                 error=DatasetError).splitlines() if line.strip()]
    if not names:
        raise DatasetError(f"{listing}: lists no video")
    frames_root, masks_root = root / "JPEGImages" / RESOLUTION, root / "Annotations" / RESOLUTION
    return [_video(name, frames_root, masks_root, listing) for name in names]


def _video(name: str, frames_root: Path, masks_root: Path, listing: Path) -> Video:
    frame_dir = inside(frames_root, name, what=f"{listing}: video", error=DatasetError)
    mask_dir = inside(masks_root, name, what=f"{listing}: video", error=DatasetError)
    for folder in (frame_dir, mask_dir):
        if not folder.is_dir():
            raise DatasetError(f"{listing} lists {name!r}, but {folder} is not a folder; expected {LAYOUT}")
    frames = sorted(p for p in frame_dir.iterdir() if p.suffix == ".jpg" and not p.name.startswith("."))
    masks = sorted(p for p in mask_dir.iterdir() if p.suffix == ".png" and not p.name.startswith("."))
    if len(frames) != len(masks):
        raise DatasetError(f"{name}: {len(frames)} frames in {frame_dir} but {len(masks)} annotations in {mask_dir}; "
                           f"DAVIS-2017 annotates every frame of train and val (one <frame>.png a <frame>.jpg)")
    unpaired = next(((f, m) for f, m in zip(frames, masks, strict=True) if f.stem != m.stem), None)
    if unpaired is not None:
        raise DatasetError(f"{name}: frame {unpaired[0].name} is paired with annotation {unpaired[1].name}; each "
                           f"frame's annotation has its name (00000.jpg, 00000.png)")
    if len(frames) < MIN_FRAMES:
        raise DatasetError(f"{frame_dir}: {len(frames)} frames; a video needs at least {MIN_FRAMES} (the first is "
                           f"given, the last is not scored)")
    all_within(frames_root, frames, what=f"{name}: frame", error=DatasetError)
    all_within(masks_root, masks, what=f"{name}: annotation", error=DatasetError)
    return Video(name, tuple(frames), tuple(masks))


def check_sizes(video: Video) -> tuple[int, int]:
    """(H, W) of ``video``, from the headers of its files (nothing decoded): every annotation a palette PNG and every
    file of the first annotation's size, checked before any frame is computed on."""
    size = None
    for path in (*video.masks, *video.frames):
        try:
            with open_header(path) as image:
                if path.suffix == ".png":
                    _palette_png(image, path)
                found = (image.height, image.width)
        except DatasetError:
            raise
        except Exception as err:  # a foreign or damaged file fails in many ways
            raise DatasetError(f"{path}: cannot be read ({reason(err)})") from None
        size = size or found
        if found != size:
            raise DatasetError(f"{path}: {found[1]} x {found[0]} pixels, the video's first annotation {size[1]} x "
                               f"{size[0]} ({video.masks[0].name})")
    assert size is not None
    return size


def _palette_png(image: Image.Image, path: Path) -> None:
    if image.format != "PNG" or image.mode != "P":
        raise DatasetError(f"{path}: a {image.format} image of mode {image.mode}, not a palette PNG of object ids "
                           f"(DAVIS's annotations are 8-bit palette PNGs: 0 background, 1..n the objects)")


def read_mask(path: Path) -> tuple[torch.Tensor, list[int]]:
    """((H, W) uint8 object ids, the palette) of a DAVIS annotation: an 8-bit palette PNG, else DatasetError."""
    try:
        with open_header(path) as image:
            _palette_png(image, path)
            ids = np.asarray(image, dtype=np.uint8)
            palette = image.getpalette() or []
    except DatasetError:
        raise
    except Exception as err:  # a truncated or foreign file fails in many ways
        raise DatasetError(f"{path}: cannot be read as an annotation ({reason(err)})") from None
    return torch.from_numpy(ids.copy()), palette


def first_objects(ids: torch.Tensor, path: Path) -> int:
    """The number of objects the first frame's annotation ``ids`` numbers 1..n (255, void, left out)."""
    found = sorted(set(torch.unique(ids).tolist()) - {0, 255})
    if not found:
        raise DatasetError(f"{path}: the first frame's annotation holds no object (all 0); DAVIS numbers a video's "
                           f"objects 1..n in its first frame")
    if found != list(range(1, len(found) + 1)):
        shown = ", ".join(map(str, found[:6])) + (", ..." if len(found) > 6 else "")
        raise DatasetError(f"{path}: object ids {shown}; DAVIS numbers a video's objects 1..n in its first frame "
                           f"(is it an image saved as a palette PNG?)")
    return len(found)


def read_frame(path: Path) -> torch.Tensor:
    """(3, H, W) float RGB in [0, 1] of a frame; one that does not decode is a DatasetError (a video has no frame to
    put in its place)."""
    try:
        with open_header(path) as image:
            array = np.asarray(decode_rgb(image))
    except Exception as err:  # a truncated or foreign file fails in many ways
        raise DatasetError(f"{path}: cannot be read as a frame ({reason(err)})") from None
    return torch.from_numpy(array.copy()).permute(2, 0, 1).float().div_(255)


def read_annotations(video: Video) -> tuple[torch.Tensor, int, list[int]]:
    """((T, H, W) uint8 ids of every frame, the number of objects, the first annotation's palette), each
    annotation checked as :func:`read_mask` does and of the first one's size."""
    first, palette = read_mask(video.masks[0])
    objects = first_objects(first, video.masks[0])
    masks = [first]
    for path in video.masks[1:]:
        ids, _ = read_mask(path)
        if ids.shape != first.shape:
            raise DatasetError(f"{path}: {ids.shape[1]} x {ids.shape[0]} pixels, the video's first annotation "
                               f"{first.shape[1]} x {first.shape[0]}")
        masks.append(ids)
    return torch.stack(masks), objects, palette
