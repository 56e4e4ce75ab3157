"""probes/davis/layout.py on DAVIS-2017's release layout (tests/probes/davis_layouts.py), and each way a layout
or an annotation can be wrong, refused in one line naming the file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from moco_core.data.data import DatasetError
from probes.davis.layout import check_sizes, read_annotations, read_videos
from tests.probes.davis_layouts import FRAMES, SIZE, VIDEOS, davis_layout, ids_of, save_mask

DAVIS = Path("DAVIS")
MASKS = DAVIS / "Annotations" / "480p" / "blackswan"
FRAMES_DIR = DAVIS / "JPEGImages" / "480p" / "blackswan"


def test_the_release_layout_is_read(tmp_path: Path) -> None:
    root = davis_layout(tmp_path)
    videos = read_videos(root)
    assert [v.name for v in videos] == list(VIDEOS)
    assert [p.name for p in videos[0].frames] == [f"{t:05d}.jpg" for t in range(FRAMES)]
    assert [p.name for p in videos[0].masks] == [f"{t:05d}.png" for t in range(FRAMES)]
    annotated, objects, palette = read_annotations(videos[0])
    assert objects == 2 and annotated.shape == (FRAMES, *SIZE) and palette[3:6] == [128, 0, 0]  # DAVIS's object 1
    assert np.array_equal(annotated[2].numpy(), ids_of(2, 2))
    assert read_videos(root / "DAVIS") == videos  # DAVIS/ itself
    with pytest.raises(DatasetError, match="train.txt lists 'bear'"):  # data.split: the list read is its own
        read_videos(root, "train")


def _write_rgb_mask(root: Path) -> None:
    Image.fromarray(np.zeros((*SIZE, 3), dtype=np.uint8)).save(root / MASKS / "00001.png")


def _write_jpeg_as_png(root: Path) -> None:
    Image.fromarray(np.zeros(SIZE, dtype=np.uint8)).save(root / MASKS / "00001.png", format="JPEG")


def _write_quantised_first(root: Path) -> None:  # an image saved as a palette PNG: ids far from 1..n
    ids = ids_of(1, 0)
    ids[0, 0], ids[0, 1] = 2, 137
    save_mask(ids, root / MASKS / "00000.png")


def _write_truncated(root: Path) -> None:
    path = root / MASKS / "00002.png"
    path.write_bytes(path.read_bytes()[:60])


BROKEN: dict[str, tuple[Callable[[Path], object], str]] = {
    "no list": (lambda r: (r / DAVIS / "ImageSets" / "2017" / "val.txt").unlink(), "no ImageSets/2017/val.txt"),
    "empty list": (lambda r: (r / DAVIS / "ImageSets" / "2017" / "val.txt").write_text("\n"), "lists no video"),
    "unknown video": (lambda r: (r / DAVIS / "ImageSets" / "2017" / "val.txt").write_text("dogs-jump\n"),
                      "lists 'dogs-jump', but"),
    "a name out of the dataset": (lambda r: (r / DAVIS / "ImageSets" / "2017" / "val.txt").write_text("../../x\n"),
                                  "leaves"),
    "an annotation missing": (lambda r: (r / MASKS / "00003.png").unlink(), "4 frames in"),
    "misnamed": (lambda r: (r / MASKS / "00003.png").rename(r / MASKS / "00007.png"),
                 "frame 00003.jpg is paired with annotation 00007.png"),
    "too short": (lambda r: [(r / d / f"0000{t}.{e}").unlink() for t in (2, 3) for d, e in ((MASKS, "png"),
                                                                                            (FRAMES_DIR, "jpg"))],
                  "2 frames; a video needs at least 3"),
    "an RGB annotation": (_write_rgb_mask, "a PNG image of mode RGB, not a palette PNG of object ids"),
    "a JPEG named .png": (_write_jpeg_as_png, "a JPEG image of mode L, not a palette PNG"),
    "no object first": (lambda r: save_mask(np.zeros(SIZE, np.uint8), r / MASKS / "00000.png"), "holds no object"),
    "ids not 1..n": (_write_quantised_first, "object ids 1, 2, 137; DAVIS numbers"),
    "another size": (lambda r: save_mask(np.zeros((8, 8), np.uint8), r / MASKS / "00002.png"),
                     "8 x 8 pixels, the video's first annotation 40 x 24"),
    "truncated": (_write_truncated, "00002.png: cannot be read"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_layout_is_one_line_naming_the_file(case: str, tmp_path: Path) -> None:
    root = davis_layout(tmp_path)
    breaks, says = BROKEN[case]
    breaks(root)
    with pytest.raises(DatasetError) as err:
        for video in read_videos(root):  # as the run reads them: the headers first, then the ids
            check_sizes(video)
            read_annotations(video)
    message = str(err.value)
    assert says in message and "\n" not in message, message
    assert str(tmp_path) in message or "blackswan" in message or "../../x" in message, message


def test_a_link_out_of_the_dataset_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = davis_layout(tmp_path / "data")
    outside = tmp_path / "elsewhere.jpg"
    (root / FRAMES_DIR / "00001.jpg").rename(outside)
    (root / FRAMES_DIR / "00001.jpg").symlink_to(outside)
    with pytest.raises(DatasetError, match="elsewhere.jpg"):
        read_videos(root)
    monkeypatch.setenv("MOCO_FOLLOW_LINKS", "1")
    assert len(read_videos(root)) == 2
