"""The ssl-transfer protocol against scikit-learn driven exactly as ssl-transfer's ``linear.py`` drives it: one
``LogisticRegression(solver="lbfgs", warm_start=True)`` with its defaults (100 iterations), ``wd`` over
``torch.logspace(-6, 5, 45)`` in that order, ``C = 1 / wd``, the best val score kept with a strict ``>`` from 0,
the refit on train + val with ``set_params(C=best)`` on the same estimator; for multi-label data one ``fit`` a
class on that one estimator, each scored by the 11-point VOC AP. The oracle below is written from that
description, not from our code. The data: scikit-learn's digits (real scans no one here made), as 10 classes and
as 5 binary attributes a digit (a VOC-form multi-label problem)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

sklearn = pytest.importorskip("sklearn")
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.exceptions import ConvergenceWarning  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.metrics import precision_recall_curve  # noqa: E402

from classification.frozen import ssl_transfer  # noqa: E402
from classification.frozen.metrics import metric  # noqa: E402
from classification.linear_transfer.readers import Split  # noqa: E402
from classification.linear_transfer.splits import hold_out_plain  # noqa: E402
from moco_core.frozen import logreg  # noqa: E402

# Five attributes of a digit, each a binary label: even; 5 or more; has a closed loop; prime; straight strokes only
ATTRIBUTES = ({0, 2, 4, 6, 8}, {5, 6, 7, 8, 9}, {0, 6, 8, 9}, {2, 3, 5, 7}, {1, 4, 7})


def _digits(multilabel: bool) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """train / val / test: a fixed test fifth, then ssl-transfer's val draw (seed 0, the first 20% of a legacy
    shuffle) from the rest (multi-label: 200 of the rest, so that the val scores peak clearly: where they are flat
    within the last digits, the first best is a coin toss for any two builds of the same optimiser)."""
    x, digit = load_digits(return_X_y=True)
    x = x / 16.0
    y = np.stack([np.isin(digit, list(a)).astype(int) for a in ATTRIBUTES], 1) if multilabel else digit
    order = np.random.RandomState(1).permutation(len(x))
    test, rest = order[:360], order[360:560 if multilabel else None]
    index = list(range(len(rest)))
    np.random.seed(0)
    np.random.shuffle(index)
    cut = int(np.floor(0.2 * len(rest)))
    train, val = rest[index[cut:]], rest[index[:cut]]
    return {"train": (x[train], y[train]), "val": (x[val], y[val]), "test": (x[test], y[test])}


def _voc_ap(truth: np.ndarray, decision: np.ndarray) -> float:
    precision, recall, _ = precision_recall_curve(truth, decision)
    return sum(np.max(precision[recall >= t]) if np.any(recall >= t) else 0.0 for t in np.linspace(0, 1, 11)) / 11


def _oracle_score(clf: LogisticRegression, x: np.ndarray, y: np.ndarray, xs: np.ndarray, ys: np.ndarray,
                  multilabel: bool) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        if not multilabel:
            clf.fit(x, y)
            return 100.0 * clf.score(xs, ys)
        aps = []
        for c in range(y.shape[1]):
            clf.fit(x, y[:, c])
            aps.append(_voc_ap(ys[:, c], clf.decision_function(xs)))
        return 100.0 * float(np.mean(aps))


def _oracle(data: dict[str, tuple[np.ndarray, np.ndarray]], multilabel: bool) -> tuple[float, float, list[float]]:
    """(C chosen, test score, val scores) as linear.py's LinearTester.validate and .evaluate compute them."""
    clf = LogisticRegression(solver="lbfgs", warm_start=True)
    best, best_c, scores = 0.0, None, []
    for wd in torch.logspace(-6, 5, 45):
        C = 1.0 / wd.item()
        clf.set_params(C=C)
        score = _oracle_score(clf, *data["train"], *data["val"], multilabel)
        scores.append(score)
        if score > best:
            best, best_c = score, C
    clf.set_params(C=best_c)
    trainval = (np.concatenate([data["train"][0], data["val"][0]]), np.concatenate([data["train"][1],
                                                                                     data["val"][1]]))
    return float(best_c), _oracle_score(clf, *trainval, *data["test"], multilabel), scores


@pytest.mark.parametrize("multilabel", [False, True], ids=["10 classes", "5 binary attributes"])
def test_the_protocol_chooses_what_ssl_transfers_code_chooses(multilabel: bool) -> None:
    data = _digits(multilabel)
    tensors = {part: (torch.from_numpy(x).float(), torch.from_numpy(y)) for part, (x, y) in data.items()}
    score = metric("map11" if multilabel else "top1")
    path, fit = ssl_transfer.sweep_and_refit(*tensors["train"], *tensors["val"], num_classes=5 if multilabel else 10,
                                             score=score)
    test = score(fit.scores(tensors["test"][0]), tensors["test"][1])
    oracle_c, oracle_test, oracle_scores = _oracle(data, multilabel)
    assert 1.0 / path.best_lambda == pytest.approx(oracle_c, rel=1e-6)
    assert abs(test - oracle_test) <= 0.2, (test, oracle_test)
    # the whole path, not only its end: every value's val score within one val image's worth (0.35 points of
    # top-1; an AP moves more for one image, and ties among the strongest fits' scores are ranked differently)
    assert max(abs(a - b) for a, b in zip(path.scores, oracle_scores, strict=True)) <= (1.0 if multilabel else 0.35)
    assert path.lambdas == sorted(path.lambdas) and len(path.lambdas) == 45  # weakest first, the papers' 45


def test_ties_go_to_the_first_value_tried_in_each_protocol() -> None:
    """ssl-transfer keeps the first best in its order (the weakest regularisation); ours the strongest."""
    x = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.5, 0.5], [1.0, 1.0]])
    y = torch.tensor([0, 1, 0, 1])

    def flat(scores: torch.Tensor, labels: torch.Tensor) -> float:
        return 50.0

    lambdas = (1e-2, 1.0, 1e2)
    path, _ = ssl_transfer.sweep_and_refit(x, y, x, y, num_classes=2, score=flat, lambdas=lambdas)
    assert path.best_lambda == 1e-2 and path.at_edge == "weakest"  # flagged: the best may lie beyond the sweep
    ours = logreg.sweep(x, y, x, y, num_classes=2, score=flat, lambdas=lambdas)
    assert ours.best_lambda == 1e2 and ours.at_edge == "strongest"

    calls: list[int] = []

    def middle(scores: torch.Tensor, labels: torch.Tensor) -> float:  # the second value tried scores best
        calls.append(1)
        return 60.0 if len(calls) == 2 else 50.0

    inside = logreg.sweep(x, y, x, y, num_classes=2, score=middle, lambdas=(1e-6, 1.0, 1e5))
    assert inside.best_lambda == 1.0 and inside.at_edge is None


def test_the_refit_starts_from_the_last_fit_of_the_sweep_not_the_chosen_one(monkeypatch: pytest.MonkeyPatch
                                                                             ) -> None:
    """Each fit's start, as the optimiser is handed it: the sweep's first from zeros, each next from the one
    before, and the refit (at the chosen, weakest value) from the last fit of the sweep, the strongest."""
    starts: list[tuple[float, torch.Tensor | None]] = []
    ends: list[torch.Tensor] = []
    fit_lbfgsb = ssl_transfer.fit_lbfgsb

    def recorded(problem: logreg._Problem, C: float, **kwargs: object) -> logreg.Fit:
        starts.append((C, kwargs["init"]))  # type: ignore[arg-type]
        fit = fit_lbfgsb(problem, C, **kwargs)  # type: ignore[arg-type]
        ends.append(torch.cat([fit.weight.flatten(), fit.bias]))
        return fit

    monkeypatch.setattr(ssl_transfer, "fit_lbfgsb", recorded)
    data = _digits(False)
    x, y = (torch.from_numpy(v) for v in data["train"])
    path, _ = ssl_transfer.sweep_and_refit(x.float(), y, x.float(), y, num_classes=10, score=metric("top1"),
                                           lambdas=(1e-6, 1e-2, 1e5))
    assert path.best_lambda == 1e-6 and [c for c, _ in starts] == pytest.approx([1e6, 1e2, 1e-5, 1e6])
    assert starts[0][1] is None
    assert torch.equal(starts[1][1], ends[0]) and torch.equal(starts[2][1], ends[1])
    assert torch.equal(starts[3][1], ends[2])  # the refit: from lambda 1e5's fit, not from the chosen 1e-6's


def test_the_val_draw_is_numpys_legacy_shuffle() -> None:
    """np.random.seed(0); np.random.shuffle(list(range(10))) gives [2, 8, 4, 9, 1, 6, 7, 3, 0, 5] (numpy's legacy
    generator, stable across releases): 20% of 10 images is images 2 and 8."""
    train = Split([(f"image_{i}.jpg", i % 2) for i in range(10)])
    rest, val = hold_out_plain(train, 0.2, 0)
    assert [p for p, _ in val.samples] == ["image_2.jpg", "image_8.jpg"]
    assert len(rest.samples) == 8 and not {p for p, _ in rest.samples} & {p for p, _ in val.samples}


def test_the_protocols_defaults_and_what_the_user_sets() -> None:
    from classification.linear_transfer.config import load_suite_config

    ssl = load_suite_config(None, ["data.path=embedded", "solver.protocol=ssl-transfer"]).solver_options()
    assert (ssl["max_iter"], ssl["precision"], ssl["protocol"]) == (100, "float64", "ssl-transfer")
    plain = load_suite_config(None, ["data.path=embedded"]).solver_options()
    assert (plain["max_iter"], plain["precision"], plain["protocol"]) == (1000, "float32", "converged")
    mine = load_suite_config(None, ["data.path=embedded", "solver.protocol=ssl-transfer", "solver.max_iter=50"])
    assert mine.solver_options()["max_iter"] == 50


def test_without_scipy_the_protocol_is_refused_when_the_config_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    from classification.linear_transfer.config import load_suite_config
    from moco_core.config import ConfigError

    monkeypatch.setitem(__import__("sys").modules, "scipy", None)
    with pytest.raises(ConfigError, match=r"solver.protocol.*needs scipy: pip install 'moco\[sklearn\]'"):
        load_suite_config(None, ["data.path=embedded", "solver.protocol=ssl-transfer"])
    load_suite_config(None, ["data.path=embedded"])  # the converged protocol needs none
