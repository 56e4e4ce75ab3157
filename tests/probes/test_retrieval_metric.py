"""Issue 60: revisitop's mAP and mP@k (``compute_map``) against rankings built by hand, every junk / easy / hard
case with its value worked out below, and against a plain transcription of the definition on random rankings."""

from __future__ import annotations

import math

import numpy as np
import pytest

from probes.retrieval.metric import Truth, evaluate

# database indices: 0 easy, 2 hard, 4 junk, the others negatives
TRUTH = Truth(easy=(0,), hard=(2,), junk=(4,))


@pytest.mark.parametrize(("ranking", "protocol", "expected"), [
    # a positive first: precision 1 -> 1 over the whole recall step
    ([0, 5, 2, 4], "easy", 100.0),
    # a negative first: the step goes from precision 0/1 to 1/2, area (0 + 1/2) / 2
    ([5, 0, 2, 4], "easy", 25.0),
    # junk first is taken out: the positive counts as first
    ([4, 0, 5, 2], "easy", 100.0),
    # junk after the positive changes nothing
    ([0, 4, 5, 2], "easy", 100.0),
    # Easy ignores the hard image ranked before its positive
    ([2, 0, 5, 4], "easy", 100.0),
    # Medium: easy at 0, hard at 2: (1 + 1) / 2 / 2 + (1/2 + 2/3) / 2 / 2 = 0.5 + 0.291667
    ([0, 5, 2, 4], "medium", 100 * (0.5 + (0.5 + 2 / 3) / 4)),
    # Medium with junk between: hard at 2 - 1 = 1, both first: 100
    ([0, 4, 2, 5], "medium", 100.0),
    # Medium keeps Hard's images positive: a hard one first, the easy one after a negative: positions 0, 2
    ([2, 5, 0, 4], "medium", 100 * (0.5 + (0.5 + 2 / 3) / 4)),
    # Hard: the easy image ranked first is ignored, the hard one counts as first
    ([0, 2, 5, 4], "hard", 100.0),
    # Hard: easy ignored, then a negative, then the hard one: position 2 - 1 = 1, area (0 + 1/2) / 2
    ([0, 5, 2, 4], "hard", 25.0),
    # Hard: junk and easy both ignored before it
    ([4, 0, 2, 5], "hard", 100.0),
])
def test_average_precision_of_one_query(ranking: list[int], protocol: str, expected: float) -> None:
    assert evaluate(np.array([ranking]), [TRUTH], protocol, kappas=())["map"] == pytest.approx(expected)


def test_a_positive_listed_twice_over_the_found_count() -> None:
    """The recall step is 1 / the positives listed: two easy positives, one ranked last of many negatives."""
    truth = Truth(easy=(0, 1), hard=(), junk=())
    ranking = np.array([[0, 2, 3, 1]])  # positions 0 and 3: 0.5 * (2/2) + 0.5 * (1/3 + 2/4) / 2
    assert evaluate(ranking, [truth], "easy", kappas=())["map"] == pytest.approx(100 * (0.5 + (1 / 3 + 0.5) / 4))


def test_precision_at_k_stops_at_the_last_positive() -> None:
    """Revisitop's mP@k: positives at 1-based positions 2 and 4 (negatives between): P@1 0, P@2 1/2, P@5 counts
    over the first min(5, 4) = 4 results: 2/4, not 2/5; junk first is taken out before counting."""
    truth = Truth(easy=(0,), hard=(2,), junk=(4,))
    scores = evaluate(np.array([[5, 0, 6, 2, 7]]), [truth], "medium", kappas=(1, 2, 5))
    assert (scores["mp@1"], scores["mp@2"], scores["mp@5"]) == pytest.approx((0.0, 50.0, 50.0))
    scores = evaluate(np.array([[4, 0, 5]]), [truth], "easy", kappas=(1,))
    assert scores["mp@1"] == 100.0


def test_a_query_without_positives_is_left_out_of_the_mean() -> None:
    """Revisitop's nempty: the second query has no hard positive, so Hard's mean is the first's 25, not 12.5;
    with no query left the mean is NaN."""
    truths = [TRUTH, Truth(easy=(1,), hard=(), junk=())]
    ranks = np.array([[0, 5, 2, 4, 1, 3], [1, 0, 2, 3, 4, 5]])
    assert evaluate(ranks, truths, "hard", kappas=())["map"] == pytest.approx(25.0)
    assert math.isnan(evaluate(ranks[1:], truths[1:], "hard", kappas=(1,))["mp@1"])


def _transcribed(ranking: list[int], positives: set[int], ignored: set[int], k: int) -> tuple[float, float]:
    """The definition read literally: drop the ignored from the ranking, then walk it."""
    kept = [i for i in ranking if i not in ignored]
    hits = [pos for pos, i in enumerate(kept) if i in positives]
    ap = 0.0
    for j, r in enumerate(hits):
        ap += ((1.0 if r == 0 else j / r) + (j + 1) / (r + 1)) / (2 * len(positives))
    cut = min(hits[-1] + 1, k)
    return 100 * ap, 100 * sum(1 for r in hits if r < cut) / cut


@pytest.mark.parametrize("protocol", ["easy", "medium", "hard"])
def test_random_rankings_match_the_definition(protocol: str) -> None:
    rng = np.random.default_rng(0)
    for _ in range(50):
        labels = rng.integers(0, 4, size=30)  # 0 easy, 1 hard, 2 junk, 3 negative
        truth = Truth(*(tuple(int(i) for i in np.flatnonzero(labels == c)) for c in range(3)))
        positives, ignored = truth.split(protocol)
        if not positives:
            continue
        ranking = rng.permutation(30)
        got = evaluate(ranking[None], [truth], protocol, kappas=(5,))
        ap, p5 = _transcribed(list(ranking), set(positives), set(ignored), 5)
        assert (got["map"], got["mp@5"]) == pytest.approx((ap, p5))
