"""L2-regularised logistic regression on frozen features, fitted by L-BFGS in torch: the transfer benchmark's
classifier (Kornblith et al., arXiv 1805.08974; SimCLR appendix B.8), with the 45-value sweep of its strength.

**The objective, in scikit-learn's parametrisation** (``LogisticRegression(solver="lbfgs")``, so results compare):

    minimise over W (K, D), b (K,):   C * sum_i CE(W x_i + b, y_i)  +  0.5 * ||W||^2        (b unpenalised)

multinomial (softmax cross-entropy) for single-label data; for multi-label data (VOC07) one binary logistic
regression a class, ``C * sum_i log(1 + exp(-s_ic (w_c x_i + b_c))) + 0.5 ||w_c||^2`` with s = +-1, the classes
independent (fitted together here, one shared C, as ssl-transfer's ``linear.py`` does).

**C and the papers' L2 strength lambda:** the papers sweep "45 logarithmically spaced values between 1e-6 and
1e5" of lambda; ssl-transfer (Ericsson et al., CVPR 2021) passes ``C = 1 / lambda`` to scikit-learn, i.e. it
minimises ``sum_i CE_i + lambda / 2 * ||W||^2`` (the *summed* loss, not the mean: on the mean it would be
``lambda / (2 n)``). :data:`LAMBDAS` are those 45 values; ``C = 1 / lambda`` everywhere here.

The solver minimises the same objective divided by ``C n`` (the mean loss plus ``||W||^2 / (2 C n)``, as
scikit-learn >= 1.1 does internally), stops when the largest gradient entry is at most ``tol`` (scikit-learn's
``tol``, 1e-4) or after ``max_iter`` iterations, and starts from zeros or a given solution (a warm start).
Precision: the two matrix products of each evaluation (``X W^T`` and ``G^T X``, all the cost) in float32 by
default, every sum, softmax, parameter and L-BFGS history in float64; ``precision="float64"`` does everything in
float64. On the GPU when the features are there.

:func:`sweep`: the 45 values from the strongest regularisation to the weakest, each fit warm-started from the one
before (a regularisation path: each solution is close to the next), scored on the validation split; the best
score wins, ties going to the stronger regularisation. :func:`refit`: train + val at the chosen value, then the
test set once. ``solver="sklearn"`` runs the same path with scikit-learn's estimator (warm-started, the same ``C``,
``tol`` and ``max_iter``): the oracle the tests compare against, and an option for users.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

LAMBDAS: tuple[float, ...] = tuple(float(v) for v in torch.logspace(-6, 5, 45, dtype=torch.float64))
SOLVERS = ("torch", "sklearn")
PRECISIONS = ("float32", "float64")


@dataclass
class Fit:
    """A fitted classifier: ``weight`` (K, D) and ``bias`` (K,) in float64 on the CPU, at ``C``."""

    weight: torch.Tensor
    bias: torch.Tensor
    C: float
    iterations: int
    converged: bool
    seconds: float = 0.0
    evaluations: int = 0  # of the objective and its gradient (each two matrix products over the features)

    def scores(self, x: torch.Tensor) -> torch.Tensor:
        """Decision values (N, K) of features ``x`` (N, D): logits, or each class's binary margin, on ``x``'s device
        (features already on the GPU are scored there)."""
        return x.double() @ self.weight.to(x.device).t() + self.bias.to(x.device)


def objective(weight: torch.Tensor, bias: torch.Tensor, x: torch.Tensor, y: torch.Tensor, C: float) -> float:
    """scikit-learn's objective, ``C * sum of the losses + 0.5 ||W||^2``, in float64 (for tests and records).
    ``y``: (N,) class indices (multinomial) or (N, K) 1 / 0 / -1 (binary a class, -1 left out)."""
    z = x.double() @ weight.double().t() + bias.double()
    if y.dim() == 1:
        loss = (torch.logsumexp(z, 1) - z.gather(1, y.view(-1, 1)).squeeze(1)).sum()
    else:
        keep = y >= 0
        loss = torch.nn.functional.softplus(-(2.0 * y.double() - 1.0) * z)[keep].sum()
    return float(C * loss + 0.5 * weight.double().pow(2).sum())


class _Problem:
    """Features and targets on the solver's device, and the scaled objective's value and gradient."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, num_classes: int, device: torch.device,
                 precision: str) -> None:
        self.dtype = torch.float64 if precision == "float64" else torch.float32
        self.x = x.to(device=device, dtype=self.dtype)  # (N, D)
        self.n, self.dim = x.shape
        self.k = num_classes
        self.multilabel = y.dim() == 2
        y = y.to(device)
        if self.multilabel:
            self.mask = (y >= 0).double()  # difficult (-1): in no loss
            self.sign = 2.0 * (y > 0).double() - 1.0  # (N, K) +-1
        else:
            self.onehot = torch.zeros(self.n, self.k, dtype=torch.float64, device=device)
            self.onehot[torch.arange(self.n, device=device), y.long()] = 1.0

    def value_and_grad(self, theta: torch.Tensor, C: float) -> tuple[torch.Tensor, torch.Tensor]:
        """(f, df/dtheta) of f = mean loss + ||W||^2 / (2 C n); ``theta`` = [W.flatten(), b] in float64."""
        k, d, n = self.k, self.dim, self.n
        weight, bias = theta[: k * d].view(k, d), theta[k * d:]
        z = (self.x @ weight.to(self.dtype).t()).double() + bias  # (N, K), the cost of the evaluation
        if self.multilabel:
            margin = self.sign * z
            loss = (torch.nn.functional.softplus(-margin) * self.mask).sum()
            g = -self.sign * torch.sigmoid(-margin) * self.mask  # d loss / d z
        else:
            lse = torch.logsumexp(z, 1, keepdim=True)
            loss = (lse - z).mul(self.onehot).sum()
            g = torch.exp(z - lse) - self.onehot  # softmax - one-hot, (N, K)
        reg = 1.0 / (C * n)
        value = loss / n + 0.5 * reg * weight.pow(2).sum()
        grad_w = (g.t().to(self.dtype) @ self.x).double() / n + reg * weight  # (K, D)
        return value, torch.cat([grad_w.flatten(), g.sum(0) / n])


def fit_torch(problem: _Problem, C: float, *, init: Fit | None = None, max_iter: int = 1000,
              tol: float = 1e-4) -> Fit:
    """L-BFGS (strong Wolfe line search, 10 pairs of history as scipy's) on ``problem`` at ``C``."""
    started = time.perf_counter()
    device = problem.x.device
    theta = torch.zeros(problem.k * problem.dim + problem.k, dtype=torch.float64, device=device)
    if init is not None:
        theta.copy_(torch.cat([init.weight.flatten(), init.bias]).to(device))
    theta.requires_grad_(True)
    # tolerance_change: the ftol scikit-learn gives scipy (64 machine epsilons): the gradient decides
    opt = torch.optim.LBFGS([theta], lr=1.0, max_iter=max_iter, max_eval=max_iter * 5 // 4, tolerance_grad=tol,
                            tolerance_change=64 * torch.finfo(torch.float64).eps, history_size=10,
                            line_search_fn="strong_wolfe")

    last: dict[str, torch.Tensor] = {}  # the latest evaluation: where, and its gradient

    def closure() -> torch.Tensor:
        value, grad = problem.value_and_grad(theta.detach(), C)
        theta.grad = grad
        last["theta"], last["grad"] = theta.detach().clone(), grad
        last["evaluations"] = last.get("evaluations", 0) + 1
        return value

    # The step evaluates the start first and stops there when its gradient is within tol (a warm start at the
    # solution: 0 iterations); the line search's last evaluation is usually where it stopped, so no evaluation
    # is repeated only to test convergence.
    opt.step(closure)
    at_end = torch.equal(last["theta"], theta.detach())
    grad = last["grad"] if at_end else problem.value_and_grad(theta.detach(), C)[1]
    iterations = int(opt.state[opt._params[0]].get("n_iter", 0))
    theta = theta.detach().cpu()
    k, d = problem.k, problem.dim
    return Fit(theta[: k * d].view(k, d).clone(), theta[k * d:].clone(), C, iterations,
               float(grad.abs().max()) <= tol, time.perf_counter() - started,
               int(last["evaluations"]) + (not at_end))


class SklearnSolver:
    """scikit-learn's ``LogisticRegression(solver="lbfgs", warm_start=True)`` on the same path: one estimator
    (multinomial), or one binary estimator a class (multi-label), each refitted at every C from its last
    solution."""

    def __init__(self, num_classes: int, *, max_iter: int, tol: float) -> None:
        self.k, self.max_iter, self.tol = num_classes, max_iter, tol
        self.models: list = []

    def fit(self, x: torch.Tensor, y: torch.Tensor, C: float, init: Fit | None = None) -> Fit:
        import warnings

        from sklearn.exceptions import ConvergenceWarning
        from sklearn.linear_model import LogisticRegression

        started = time.perf_counter()
        xs = x.double().numpy()
        targets = [y.numpy()] if y.dim() == 1 else [y[:, c].numpy() for c in range(self.k)]
        if not self.models:
            self.models = [LogisticRegression(solver="lbfgs", C=C, max_iter=self.max_iter, tol=self.tol,
                                              warm_start=True) for _ in targets]
        weights, biases, iterations, converged = [], [], 0, True
        for model, target in zip(self.models, targets, strict=True):
            keep = target >= 0
            model.set_params(C=C)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                model.fit(xs[keep], (target[keep] > 0).astype(int) if y.dim() == 2 else target[keep])
            weights.append(torch.from_numpy(model.coef_).double())
            biases.append(torch.from_numpy(model.intercept_).double())
            steps = int(max(model.n_iter_))
            iterations = max(iterations, steps)
            converged = converged and steps < self.max_iter
        if y.dim() == 1 and len(self.models[0].classes_) != self.k:
            raise ValueError(f"scikit-learn saw {len(self.models[0].classes_)} of the {self.k} classes in train")
        weight, bias = torch.cat(weights), torch.cat(biases)
        return Fit(weight, bias, C, iterations, converged, time.perf_counter() - started)


@dataclass
class SweepResult:
    """The path: ``lambdas`` (strongest first), the val ``scores``, each fit's iterations, the chosen value."""

    lambdas: list[float]
    scores: list[float]
    iterations: list[int]
    converged: list[bool]
    chosen: int
    evaluations: list[int] = field(default_factory=list)
    fits: dict[int, Fit] = field(default_factory=dict)  # the chosen value's fit (a warm start for the refit)
    seconds: float = 0.0

    @property
    def best_lambda(self) -> float:
        return self.lambdas[self.chosen]

    @property
    def at_edge(self) -> str | None:
        """"weakest" or "strongest" where the chosen value is an end of the sweep (the best may lie beyond it: a
        wider sweep could choose better), else None."""
        if len(set(self.lambdas)) < 2:
            return None
        return ("weakest" if self.best_lambda == min(self.lambdas) else
                "strongest" if self.best_lambda == max(self.lambdas) else None)

    def curve(self) -> list[dict[str, float]]:
        """The record's curve: one entry a value, weakest regularisation first (the papers' order)."""
        rows = [{"lambda": lam, "C": 1.0 / lam, "val": s, "iterations": it, "converged": c}
                for lam, s, it, c in zip(self.lambdas, self.scores, self.iterations, self.converged, strict=True)]
        return sorted(rows, key=lambda r: r["lambda"])


Score = Callable[[torch.Tensor, torch.Tensor], float]


def _fitter(solver: str, x: torch.Tensor, y: torch.Tensor, num_classes: int, device: torch.device | str,
            precision: str, max_iter: int, tol: float) -> Callable[[float, Fit | None], Fit]:
    if solver not in SOLVERS:
        raise ValueError(f"unknown solver {solver!r}; expected one of {', '.join(SOLVERS)}")
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; expected one of {', '.join(PRECISIONS)}")
    if solver == "sklearn":
        sk = SklearnSolver(num_classes, max_iter=max_iter, tol=tol)
        return lambda C, init: sk.fit(x, y, C, init)
    problem = _Problem(x, y, num_classes, torch.device(device), precision)
    return lambda C, init: fit_torch(problem, C, init=init, max_iter=max_iter, tol=tol)


def sweep(train_x: torch.Tensor, train_y: torch.Tensor, val_x: torch.Tensor, val_y: torch.Tensor, *,
          num_classes: int, score: Score, lambdas: tuple[float, ...] = LAMBDAS, solver: str = "torch",
          device: torch.device | str = "cpu", precision: str = "float32", max_iter: int = 1000,
          tol: float = 1e-4, progress: Callable[[int, int, float], None] | None = None) -> SweepResult:
    """Fit at every ``lambdas`` value (C = 1 / lambda) on train, strongest first, each from the last solution;
    score each on val with ``score(decision values (N, K), labels) -> float`` (higher is better)."""
    fit = _fitter(solver, train_x, train_y, num_classes, device, precision, max_iter, tol)
    last: Fit | None = None

    def fit_at(C: float) -> Fit:
        nonlocal last
        last = fit(C, last)
        return last

    return sweep_path(sorted(lambdas, reverse=True), fit_at, val_x, val_y, score=score, progress=progress)


def sweep_path(order: list[float], fit_at: Callable[[float], Fit], val_x: torch.Tensor, val_y: torch.Tensor, *,
               score: Score, progress: Callable[[int, int, float], None] | None = None) -> SweepResult:
    """Fit at each value of ``order`` in turn (``fit_at(C)`` warm-starts as its solver does) and score it on val;
    the first best in that order is chosen: ties go to the value swept first (the stronger regularisation in the
    converged protocol's order, the weaker in ssl-transfer's, whose strict ``>`` keeps the first best too)."""
    started = time.perf_counter()
    scores, iterations, converged, fits, evaluations = [], [], [], [], []
    for i, lam in enumerate(order):
        fit = fit_at(1.0 / lam)
        scores.append(float(score(fit.scores(val_x), val_y)))
        iterations.append(fit.iterations)
        converged.append(fit.converged)
        evaluations.append(fit.evaluations)
        fits.append(fit)
        if progress is not None:
            progress(i + 1, len(order), lam)
    best = max(scores)
    chosen = next(i for i, s in enumerate(scores) if s == best)
    return SweepResult(order, scores, iterations, converged, chosen, evaluations, {chosen: fits[chosen]},
                       time.perf_counter() - started)


def refit(x: torch.Tensor, y: torch.Tensor, *, num_classes: int, lam: float, init: Fit | None = None,
          solver: str = "torch", device: torch.device | str = "cpu", precision: str = "float32",
          max_iter: int = 1000, tol: float = 1e-4) -> Fit:
    """The classifier at ``lam`` on ``x`` (train + val), from ``init`` (the sweep's fit at that value)."""
    if not (lam > 0 and math.isfinite(lam)):
        raise ValueError(f"lambda must be finite and > 0, got {lam}")
    return _fitter(solver, x, y, num_classes, device, precision, max_iter, tol)(1.0 / lam, init)
