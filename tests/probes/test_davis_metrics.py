"""probes/davis/metrics.py: J, F and J&F against masks and boundaries worked out by hand (davis2017-evaluation's
definitions: the module docstring)."""

from __future__ import annotations

import pytest
import torch

from probes.davis.metrics import (
    boundary_f,
    boundary_map,
    dilated,
    disk,
    region_similarity,
    summary,
    tolerance,
    video_scores,
)


def square(height: int, width: int, rows: tuple[int, int], cols: tuple[int, int]) -> torch.Tensor:
    """(H, W) bool, True on rows[0]..rows[1] and cols[0]..cols[1], both ends included."""
    mask = torch.zeros(height, width, dtype=torch.bool)
    mask[rows[0]:rows[1] + 1, cols[0]:cols[1] + 1] = True
    return mask


def test_j_is_the_iou_and_1_when_both_are_empty() -> None:
    annotated = square(4, 4, (0, 1), (0, 1))  # 4 pixels
    predicted = square(4, 4, (0, 1), (0, 2))  # 6 pixels, the 4 among them: 4 / 6
    assert region_similarity(annotated, predicted) == pytest.approx(2 / 3)
    assert region_similarity(annotated, torch.zeros(4, 4, dtype=torch.bool)) == 0.0
    empty = torch.zeros(4, 4, dtype=torch.bool)
    assert region_similarity(empty, empty) == 1.0


def test_the_boundary_is_offset_half_a_pixel_towards_the_origin() -> None:
    # A 2 x 2 square at rows 1-2, cols 1-2 of 4 x 4. A pixel is on the boundary when it differs from its right,
    # lower or lower-right neighbour: every pixel whose 2 x 2 window (itself, right, below, diagonal) is mixed.
    # Windows at rows 0-2 and cols 0-2 touch the square; the one at (1, 1) lies inside it. The last column is
    # compared downwards only and the last row rightwards only: all 0 there.
    expected = torch.tensor([[1, 1, 1, 0],
                             [1, 0, 1, 0],
                             [1, 1, 1, 0],
                             [0, 0, 0, 0]], dtype=torch.bool)
    assert torch.equal(boundary_map(square(4, 4, (1, 2), (1, 2))), expected)
    # Along the edges: a mask filling the last column's lower half (rows 2-3). (1, 3), in the last column, differs
    # from (2, 3) below: set; (2, 3) equals (3, 3): not. (3, 2), in the last row, differs from (3, 3) to its right:
    # set. (2, 2)'s right neighbour (2, 3) and (1, 2)'s diagonal (2, 3) differ: set. The corner (3, 3) never is.
    edge = torch.zeros(4, 4, dtype=torch.bool)
    edge[2:, 3] = True
    assert boundary_map(edge).nonzero().tolist() == [[1, 2], [1, 3], [2, 2], [3, 2]]


def test_the_tolerance_is_a_disk_of_0_8_percent_of_the_diagonal() -> None:
    assert tolerance(480, 854) == 8  # ceil(0.008 * 979.6) at DAVIS's 480p
    assert tolerance(8, 8) == 1  # ceil(0.008 * 11.3)
    assert disk(1).sum() == 5 and disk(2).sum() == 13  # dy^2 + dx^2 <= r^2: the plus, then 13 pixels
    assert not disk(2)[0, 1] and disk(2)[0, 2]


def test_f_of_a_shifted_square_worked_by_hand() -> None:
    # 8 x 8: the annotation a 2 x 2 square at rows 2-3, cols 2-3; the prediction the same two columns right.
    # Boundaries (as above): annotated {1..3} x {1..3} but (2, 2), predicted {1..3} x {3..5} but (2, 4): 8 each.
    annotated, predicted = square(8, 8, (2, 3), (2, 3)), square(8, 8, (2, 3), (4, 5))
    # Tolerance 1 (a plus): of the predicted boundary, (1,3) (1,4) (2,3) (3,3) (3,4) touch the annotated one, (1,5)
    # (2,5) (3,5) do not: precision 5/8; by symmetry recall 5/8; F = 5/8.
    assert boundary_f(annotated, predicted) == pytest.approx(5 / 8)
    assert region_similarity(annotated, predicted) == 0.0
    # Tolerance 2 (fraction 0.15 of 11.3 px: ceil 1.7): (0, 2) is in the disk, so every pixel is matched: F = 1.
    assert boundary_f(annotated, predicted, fraction=0.15) == 1.0


def test_f_with_an_empty_side() -> None:
    mask, empty = square(8, 8, (2, 3), (2, 3)), torch.zeros(8, 8, dtype=torch.bool)
    assert boundary_f(mask, empty) == 0.0 and boundary_f(empty, mask) == 0.0  # nothing found / nothing to find
    assert boundary_f(empty, empty) == 1.0
    assert boundary_f(mask, mask) == 1.0


def test_a_video_scores_its_middle_frames_and_reads_void_as_background() -> None:
    # 4 frames of 8 x 8, two objects. Scored: frames 1 and 2 (the first is given, the last left out). Object 1 is
    # right in frame 1 (J 1, F 1) and missed in frame 2 (J 0, F 0): (0.5, 0.5). Object 2 is the shifted square of
    # the test above in both frames (predicted two columns right): J 0, F 5/8. Frames 0 and 3 are wrong everywhere
    # and do not count.
    annotated = torch.zeros(4, 8, 8, dtype=torch.long)
    predicted = torch.zeros(4, 8, 8, dtype=torch.long)
    annotated[:, 0:2, 0:2] = 1
    annotated[:, 5, 0] = 255  # void: background, as the official reader sets it
    predicted[1, 0:2, 0:2] = 1  # object 1 found in frame 1 only
    annotated[:, 2:4, 2:4] = 2
    predicted[1:3, 2:4, 4:6] = 2  # object 2 two columns right in frames 1 and 2
    predicted[0], predicted[3] = 3, 3  # not scored
    scores = video_scores(annotated, predicted, objects=2)
    assert scores[0] == pytest.approx((0.5, 0.5))
    assert scores[1] == pytest.approx((0.0, 5 / 8))
    # J-Mean (0.5 + 0) / 2, F-Mean (0.5 + 5/8) / 2, in percent; J&F their mean
    assert summary(scores) == pytest.approx({"J&F_mean": (25 + 56.25) / 2, "J_mean": 25.0, "F_mean": 56.25})


@pytest.mark.parametrize("radius", [1, 3, 8])
def test_the_dilation_is_the_disks(radius: int) -> None:
    """Against the definition: a pixel is set when some set pixel lies at an offset of the disk (past the edge:
    nothing)."""
    g = torch.Generator().manual_seed(radius)
    boundary = torch.rand(23, 31, generator=g) > 0.97
    expected = torch.zeros_like(boundary)
    for y, x in boundary.nonzero().tolist():
        for dy, dx in (disk(radius).nonzero() - radius).tolist():
            if 0 <= y + dy < 23 and 0 <= x + dx < 31:
                expected[y + dy, x + dx] = True
    assert torch.equal(dilated(boundary, radius), expected)
