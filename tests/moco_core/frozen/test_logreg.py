"""moco_core/frozen/logreg.py against scikit-learn's LogisticRegression(solver="lbfgs") on the same features:
the objective it reaches, the accuracy, and the 45-value sweep's chosen value and test score on three datasets."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from classification.frozen.metrics import map11, mean_per_class, top1
from moco_core.frozen.logreg import LAMBDAS, Fit, _Problem, fit_torch, objective, refit, sweep

sklearn = pytest.importorskip("sklearn")
from sklearn.datasets import load_digits, load_wine  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402


def test_the_45_values() -> None:
    assert len(LAMBDAS) == 45 and LAMBDAS[0] == pytest.approx(1e-6) and LAMBDAS[-1] == pytest.approx(1e5)
    ratios = np.diff(np.log10(LAMBDAS))
    assert np.allclose(ratios, 11 / 44)  # log-spaced, 4 values a decade


def _split(x: np.ndarray, y: np.ndarray, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """train 60% / val 20% / test 20%, shuffled with ``seed``."""
    order = np.random.default_rng(seed).permutation(len(y))
    a, b = int(0.6 * len(y)), int(0.8 * len(y))
    parts = [order[:a], order[a:b], order[b:]]
    return tuple(t for idx in parts for t in (torch.from_numpy(x[idx]).float(), torch.from_numpy(y[idx]).long()))


def _digits() -> tuple[np.ndarray, np.ndarray]:
    x, y = load_digits(return_X_y=True)
    return x / 16.0, y  # pixels in [0, 1], as features go through no standardisation


def _wine() -> tuple[np.ndarray, np.ndarray]:
    x, y = load_wine(return_X_y=True)
    return (x - x.mean(0)) / x.std(0), y


def _multilabel(seed: int = 0, n: int = 600, d: int = 24, k: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """VOC07's form: each image holds a random set of the k classes; its features are the sum of its classes'
    directions plus noise; about 5% of the labels are marked difficult (-1)."""
    rng = np.random.default_rng(seed)
    directions = rng.normal(size=(k, d))
    present = rng.random((n, k)) < 0.3
    x = present @ directions + 1.5 * rng.normal(size=(n, d))
    labels = present.astype(np.int64)
    labels[rng.random((n, k)) < 0.05] = -1
    return x, labels


@pytest.mark.parametrize("C", [1e-3, 1.0, 1e2])
def test_one_fit_reaches_sklearns_objective(C: float) -> None:
    xtr, ytr, _, _, xte, yte = _split(*_digits())
    ours = fit_torch(_Problem(xtr, ytr, 10, torch.device("cpu"), "float64"), C, tol=1e-6)
    ref = LogisticRegression(solver="lbfgs", C=C, tol=1e-6, max_iter=5000).fit(xtr.double().numpy(), ytr.numpy())
    ref_w, ref_b = torch.from_numpy(ref.coef_), torch.from_numpy(ref.intercept_)
    mine, theirs = objective(ours.weight, ours.bias, xtr, ytr, C), objective(ref_w, ref_b, xtr, ytr, C)
    assert ours.converged
    assert mine == pytest.approx(theirs, rel=1e-5) and mine <= theirs * (1 + 1e-9)  # as low, or lower
    accuracy = top1(ours.scores(xte), yte)
    assert accuracy == pytest.approx(100 * ref.score(xte.double().numpy(), yte.numpy()), abs=0.2)


def test_float32_products_reach_the_same_solution() -> None:
    xtr, ytr, *_ = _split(*_digits())
    exact = fit_torch(_Problem(xtr, ytr, 10, torch.device("cpu"), "float64"), 1.0, tol=1e-5)
    mixed = fit_torch(_Problem(xtr, ytr, 10, torch.device("cpu"), "float32"), 1.0, tol=1e-5)
    assert objective(mixed.weight, mixed.bias, xtr, ytr, 1.0) == pytest.approx(
        objective(exact.weight, exact.bias, xtr, ytr, 1.0), rel=1e-5)


def test_multilabel_is_one_binary_regression_a_class() -> None:
    x, labels = _multilabel()
    xt, yt = torch.from_numpy(x).float(), torch.from_numpy(labels)
    ours = fit_torch(_Problem(xt, yt, 5, torch.device("cpu"), "float64"), 0.1, tol=1e-7)
    for c in range(5):
        keep = labels[:, c] >= 0
        ref = LogisticRegression(solver="lbfgs", C=0.1, tol=1e-8, max_iter=5000).fit(x[keep], labels[keep, c])
        torch.testing.assert_close(ours.weight[c], torch.from_numpy(ref.coef_[0]), rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(ours.bias[c], torch.from_numpy(ref.intercept_)[0], rtol=1e-4, atol=1e-4)


def test_a_warm_start_at_the_solution_stops_at_once() -> None:
    xtr, ytr, *_ = _split(*_digits())
    problem = _Problem(xtr, ytr, 10, torch.device("cpu"), "float64")
    first = fit_torch(problem, 1.0, tol=1e-5)
    again = fit_torch(problem, 1.0, init=first, tol=1e-5)
    assert first.iterations > 10 and again.iterations == 0 and again.converged


DATASETS = {"digits": (_digits, top1), "wine": (_wine, mean_per_class), "multilabel": (_multilabel, map11)}


@pytest.mark.parametrize("name", list(DATASETS))
def test_the_sweep_chooses_what_sklearn_chooses(name: str) -> None:
    """Both solvers on the same path (strongest regularisation first, warm-started, tol 1e-4): the same chosen
    lambda, and test scores after the refit on train + val within 0.2 points."""
    make, score = DATASETS[name]
    x, y = make()
    xtr, ytr, xva, yva, xte, yte = _split(x, y)
    k = int(y.max()) + 1 if y.ndim == 1 else y.shape[1]
    results = {}
    for solver in ("torch", "sklearn"):
        path = sweep(xtr, ytr, xva, yva, num_classes=k, score=score, solver=solver, max_iter=1000)
        final = refit(torch.cat([xtr, xva]), torch.cat([ytr, yva]), num_classes=k, lam=path.best_lambda,
                      init=path.fits[path.chosen], solver=solver)
        results[solver] = (path, score(final.scores(xte), yte))
    (ours, ours_test), (ref, ref_test) = results["torch"], results["sklearn"]
    assert ours.best_lambda == ref.best_lambda, (ours.scores, ref.scores)
    assert ours_test == pytest.approx(ref_test, abs=0.2)
    assert max(abs(a - b) for a, b in zip(ours.scores, ref.scores, strict=True)) <= 2.0  # the whole val curve agrees
    curve = ours.curve()
    assert len(curve) == 45 and curve[0]["lambda"] == pytest.approx(1e-6) and curve[0]["C"] == pytest.approx(1e6)


def test_a_fit_scores_features_on_their_own_device() -> None:
    """The weights live on the CPU; features already on an accelerator (the H200 benchmark moves them once) are
    scored there. The meta device stands in for CUDA: the old code multiplied across devices."""
    fit = Fit(torch.tensor([[1.0, 0.0, 2.0], [0.0, 1.0, -1.0]], dtype=torch.float64),
              torch.tensor([0.5, -0.5], dtype=torch.float64), C=1.0, iterations=1, converged=True)
    assert fit.scores(torch.ones(4, 3)).tolist() == [[3.5, -0.5]] * 4  # 1 + 2 + 0.5; 1 - 1 - 0.5
    on_meta = fit.scores(torch.ones(4, 3, device="meta"))
    assert on_meta.device.type == "meta" and on_meta.shape == (4, 2) and on_meta.dtype == torch.float64
