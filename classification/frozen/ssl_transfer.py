"""The ``ssl-transfer`` protocol: the logistic-regression sweep as Ericsson et al. (CVPR 2021, arXiv 2011.13377)
ran it in ssl-transfer's ``linear.py``, so that a row of ours compares with their Table 1 like for like.

What their code does (``../shared/reference/published_rows.md`` section 1; read from the repository), and what
this module does the same way:

- one scikit-learn ``LogisticRegression(solver="lbfgs", warm_start=True)`` with its defaults otherwise:
  ``max_iter=100`` (fits stop there unconverged; the warning is silenced), ``tol=1e-4``;
- the 45 values of lambda from the weakest regularisation (1e-6) to the strongest (1e5), ``C = 1 / lambda``,
  each fit warm-started from the estimator's last solution;
- the best validation score kept with a strict ``>`` from 0: ties go to the first, weaker value;
- the refit on train + val at the chosen C, warm-started from the last fit of the sweep (lambda 1e5), capped at
  100 iterations again; then the test set once;
- multi-label data (VOC 2007): one binary fit a class on the same estimator, in class order, so each class's
  fit starts from the previous class's solution (and the first class from the last class of the value before).

The default protocol (:mod:`moco_core.frozen.logreg`: strongest first, to convergence, ties to the stronger
value, the refit from the chosen fit) differs in all of these; on real features the two test scores differ by
about a point.

**The optimiser.** scikit-learn drives scipy's L-BFGS-B (``maxls=50``, ``gtol=tol``, ``ftol=64 eps``) over the
mean loss plus ``||W||^2 / (2 C n)``; an unconverged fit depends on every step of that optimiser, so this module
drives the same scipy routine with the same options over the same objective, whose value and gradient (all the
cost: two matrix products over the features) are :class:`moco_core.frozen.logreg._Problem`'s, on the
features' device (the GPU when they are there). scipy comes with scikit-learn (the ``sklearn`` extra).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch

from moco_core.frozen.logreg import LAMBDAS, Fit, Score, SklearnSolver, SweepResult, _Problem, sweep_path
from moco_core.solver_protocols import SSL_TRANSFER

NAME = SSL_TRANSFER
MAX_ITER = 100  # scikit-learn's default, which ssl-transfer's linear.py leaves as it is
TOL = 1e-4


def fit_lbfgsb(problem: _Problem, C: float, *, init: torch.Tensor | None, max_iter: int, tol: float) -> Fit:
    """One fit at ``C`` by scipy's L-BFGS-B with scikit-learn's options, from ``init`` ([W.flatten(), b]) or 0."""
    from scipy.optimize import minimize

    started = time.perf_counter()
    device = problem.x.device
    size = problem.k * problem.dim + problem.k
    start = np.zeros(size) if init is None else init.double().cpu().numpy().copy()
    evaluations = 0

    def value_and_grad(theta: np.ndarray) -> tuple[float, np.ndarray]:
        nonlocal evaluations
        evaluations += 1
        value, grad = problem.value_and_grad(torch.from_numpy(theta).to(device), C)
        return float(value), grad.cpu().numpy()

    result = minimize(value_and_grad, start, method="L-BFGS-B", jac=True,
                      options={"maxiter": max_iter, "maxls": 50, "gtol": tol, "ftol": 64 * np.finfo(float).eps})
    theta = torch.from_numpy(result.x)
    k, d = problem.k, problem.dim
    return Fit(theta[: k * d].view(k, d).clone(), theta[k * d:].clone(), C, int(result.nit),
               int(result.nit) < max_iter, time.perf_counter() - started, evaluations)


def _flat(fit: Fit) -> torch.Tensor:
    return torch.cat([fit.weight.flatten(), fit.bias])


class _Estimator:
    """One warm-started estimator, as ssl-transfer's: its last solution starts the next fit, whatever the data
    (multinomial: one fit; multi-label: one binary fit a class, in order, each from the one before)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, num_classes: int, *, solver: str,
                 device: torch.device | str, precision: str, max_iter: int, tol: float) -> None:
        self.multilabel = y.dim() == 2
        self.max_iter, self.tol, self.num_classes = max_iter, tol, num_classes
        self.last: torch.Tensor | None = None  # the estimator's coefficients: [W.flatten(), b] of its last fit
        if solver == "sklearn":
            # the oracle: scikit-learn's own estimator (one, warm-started across values and classes)
            self.sklearn: SklearnSolver | None = SklearnSolver(1 if self.multilabel else num_classes,
                                                               max_iter=max_iter, tol=tol)
            self.x, self.y = x, y
            self.problems: list[_Problem] = []
            return
        self.sklearn = None
        dev = torch.device(device)
        if self.multilabel:  # each class its own binary problem over the images labelled for it (-1: left out)
            self.problems = [_Problem(x[y[:, c] >= 0], y[y[:, c] >= 0][:, c:c + 1], 1, dev, precision)
                             for c in range(num_classes)]
        else:
            self.problems = [_Problem(x, y, num_classes, dev, precision)]

    def fit(self, C: float) -> Fit:
        """The fit at ``C`` on every class, from the estimator's last solution."""
        fits = []
        for c in range(self.num_classes if self.multilabel else 1):
            if self.sklearn is not None:  # multi-label: class c's binary problem over the images labelled for it
                keep = self.y[:, c] >= 0 if self.multilabel else slice(None)
                target = self.y[:, c:c + 1] if self.multilabel else self.y
                fit = self.sklearn.fit(self.x[keep], target[keep], C)
            else:
                fit = fit_lbfgsb(self.problems[c], C, init=self.last, max_iter=self.max_iter, tol=self.tol)
            self.last = _flat(fit)
            fits.append(fit)
        return Fit(torch.cat([f.weight for f in fits]), torch.cat([f.bias for f in fits]), C,
                   max(f.iterations for f in fits), all(f.converged for f in fits),
                   sum(f.seconds for f in fits), sum(f.evaluations for f in fits))


def sweep_and_refit(train_x: torch.Tensor, train_y: torch.Tensor, val_x: torch.Tensor, val_y: torch.Tensor, *,
                    num_classes: int, score: Score, lambdas: tuple[float, ...] = LAMBDAS, solver: str = "torch",
                    device: torch.device | str = "cpu", precision: str = "float64", max_iter: int = MAX_ITER,
                    tol: float = TOL, progress: Callable[[int, int, float], None] | None = None
                    ) -> tuple[SweepResult, Fit]:
    """The sweep on train scored on val (weakest first, one estimator warm-started throughout, the first best
    kept), then the refit on train + val at the chosen value, from the sweep's last fit."""
    estimator = _Estimator(train_x, train_y, num_classes, solver=solver, device=device, precision=precision,
                           max_iter=max_iter, tol=tol)
    path = sweep_path(sorted(lambdas), estimator.fit, val_x, val_y, score=score, progress=progress)  # weakest first
    last = estimator.last
    refit_estimator = _Estimator(torch.cat([train_x, val_x]), torch.cat([train_y, val_y]), num_classes,
                                 solver=solver, device=device, precision=precision, max_iter=max_iter, tol=tol)
    refit_estimator.last = last
    if refit_estimator.sklearn is not None:
        refit_estimator.sklearn = estimator.sklearn  # the same scikit-learn estimator, refitted from where it is
    return path, refit_estimator.fit(1.0 / path.best_lambda)
