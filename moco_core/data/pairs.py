"""The (image, label map) pairs of the segmentation readers (``moco eval semseg``, the dense probes of
:mod:`dense`), checked before anything trains, as the classification and detection images are: a pair that cannot
be used is skipped with one counted warning, and a set with nothing usable left stops in one line.

:func:`pair_problem` reads headers only (nothing is decoded): the image and the label map must each pass
:func:`moco_core.data.image_files.open_header` (not empty, identified by PIL, not of zero size, within PIL's
decompression-bomb limit: a 20000 x 20000 label PNG of 388 KB is refused from its header), the label map must be
an 8-bit palette or grey image (class indices, not a colour picture) and of the image's size once the image's
EXIF orientation is applied (as :func:`transfer.engine.read_rgb` reads it; a PNG's only where its header holds it,
which spares decoding every PNG here). A file that passes and still fails to
decode (cut short after its header) is handled where it is read: a training pair is replaced by the next one, a
test pair is left out of the score, each counted (``moco eval semseg``'s dataset, the dense probes' extraction).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from moco_core.data.data import DatasetError
from moco_core.data.image_files import open_header, reason

LABEL_MODES = ("P", "L")  # 8-bit palette (VOC's SegmentationClass) or grey (SBD's, Cityscapes' trainIds)
_EXIF_ORIENTATION = 0x0112
_QUARTER_TURNS = (5, 6, 7, 8)  # orientations that swap width and height


@dataclass(frozen=True)
class Sample:
    image: Path
    label: Path


def pair_problem(sample: Sample) -> tuple[str, str] | None:
    """(the file at fault, why) when the pair cannot be used, from its headers; None when it can."""
    try:
        with open_header(sample.image) as image:
            size = image.size
            # A PNG's EXIF is read by decoding it whole unless its eXIf chunk came before the pixels: only then
            if (image.format != "PNG" or "exif" in image.info) and \
                    image.getexif().get(_EXIF_ORIENTATION) in _QUARTER_TURNS:
                size = size[::-1]
    except Exception as err:  # a file can fail to open in many ways: each is a reason to skip it
        return str(sample.image), reason(err)
    try:
        with open_header(sample.label) as label:
            mode, label_size = label.mode, label.size
    except Exception as err:
        return str(sample.label), f"label map: {reason(err)}"
    if mode not in LABEL_MODES:
        return str(sample.label), f"a {mode} image, not a label map (8-bit palette or grey PNG of class indices)"
    if label_size != size:
        return str(sample.label), f"label map {label_size[0]}x{label_size[1]}, its image {size[0]}x{size[1]}"
    return None


def verify_pairs(samples: Sequence[Sample], where: str, *,
                 workers: int = 8) -> tuple[list[Sample], list[tuple[str, str]]]:
    """The usable samples, in order, and the skipped ``(file, reason)``; DatasetError when none is usable."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        problems = list(pool.map(pair_problem, samples, chunksize=16))
    kept = [s for s, problem in zip(samples, problems, strict=True) if problem is None]
    skipped = [problem for problem in problems if problem is not None]
    if not kept:
        raise DatasetError(f"{where}: none of its {len(samples)} image and label pairs can be read: "
                           f"{_named(skipped, 3)}")
    return kept, skipped


def skipped_warning(skipped: Sequence[tuple[str, str]], where: str, total: int) -> str | None:
    """One line on the pairs :func:`verify_pairs` skipped (None: none), naming the first few files and why."""
    if not skipped:
        return None
    return f"{where}: skipped {len(skipped)} of its {total} image and label pairs, unreadable: {_named(skipped, 5)}"


def _named(skipped: Sequence[tuple[str, str]], limit: int) -> str:
    """"folder/file (why), ..." for the first ``limit`` files, and how many more."""
    shown = [f"{os.path.join(Path(p).parent.name, Path(p).name)[-100:]} ({why})" for p, why in skipped[:limit]]
    return ", ".join(shown) + (f" and {len(skipped) - limit} more" if len(skipped) > limit else "")

