"""``moco eval transfer``'s config: the transfer protocol's values as defaults (Kornblith et al., arXiv 1805.08974;
SimCLR appendix B.8), every one a ``--set`` away."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from classification.frozen import ssl_transfer
from classification.frozen.fewshot import fewshot_checks
from moco_core.config import ConfigError, cpu_workers, did_you_mean, extra_problem, load_config, require, run_checks
from moco_core.frozen.logreg import PRECISIONS, SOLVERS
from moco_core.model.weights.formats import format_checks
from moco_core.solver_protocols import CONVERGED, PROTOCOLS


@dataclass(frozen=True)
class SuiteDataConfig:
    path: str | None = None  # ROOT holding the datasets as torchvision downloads them, or "embedded"
    datasets: tuple[str, ...] = ()  # () : every dataset (the catalog's 12, or the embedded suite's)
    resize: int = 224  # shorter side, bicubic (the protocol: resize to 224, centre crop 224, no augmentation)
    crop_size: int = 224
    interpolation: str = "bicubic"
    workers: int = field(default_factory=lambda: cpu_workers(4))  # at most the CPUs
    val_fraction: float = 0.2  # of train, where a dataset ships no val (ssl-transfer: 20%)
    split_seed: int = 0  # draws the splits not shipped (ssl-transfer: seed 0)


@dataclass(frozen=True)
class SuiteFeaturesConfig:
    tap: str | None = None  # None: the backbone's default (a ResNet's pooled layer4, a ViT's class token)
    batch_size: int = 256
    amp: bool = True  # bf16 autocast on CUDA
    cache_dir: str | None = None  # None: <output_dir>/features


SSL_NEEDS = "solver.protocol ssl-transfer (scipy's L-BFGS-B, driven as scikit-learn drives it)"


@dataclass(frozen=True)
class SolverConfig:
    # "converged": strongest regularisation first, each fit to convergence, ties to the stronger value, the refit
    # from the chosen fit, val a stratified draw; "ssl-transfer": as ssl-transfer's linear.py (Ericsson et al.
    # Table 1): weakest first, 100 iterations, ties to the weaker, the refit from the last fit, val a plain
    # random draw (classification/frozen/ssl_transfer.py)
    protocol: str = CONVERGED
    name: str = "torch"  # or "sklearn": scikit-learn's LogisticRegression(solver="lbfgs"), warm-started
    # of the matrix products (float64 elsewhere); "float64": everything. None: the protocol's (converged:
    # float32; ssl-transfer: float64, whose unconverged fits then follow scikit-learn's step for step)
    precision: str | None = None
    max_iter: int | None = None  # L-BFGS iterations a value; None: the protocol's (converged 1000, ssl-transfer 100)
    tol: float = 1e-4  # largest gradient entry of the mean objective (scikit-learn's tol)
    lambda_min: float = 1e-6  # the sweep: `lambdas` log-spaced L2 strengths (C = 1 / lambda), 1e-6 ... 1e5
    lambda_max: float = 1e5
    lambdas: int = 45


@dataclass(frozen=True)
class FewShotConfig:
    shots: tuple[int, ...] = ()  # e.g. (1, 5, 10, 25): k labelled images a class; () : no few-shot
    tries: int = 5
    seed: int = 0


@dataclass(frozen=True)
class SuiteRunConfig:
    output_dir: str | None = None  # None: runs/<preset>/<weights>
    device: str = "auto"
    seed: int = 0  # draws the weights of "random"
    weights_format: str | None = None  # the method of weights whose file does not say (--weights-format)


@dataclass(frozen=True)
class TransferSuiteConfig:
    """``moco eval transfer``: frozen features, the 45-value logistic-regression sweep, each dataset's metric."""

    arch: str | None = None  # None: read from the weights ("random" needs it)
    data: SuiteDataConfig = field(default_factory=SuiteDataConfig)
    features: SuiteFeaturesConfig = field(default_factory=SuiteFeaturesConfig)
    solver: SolverConfig = field(default_factory=SolverConfig)
    fewshot: FewShotConfig = field(default_factory=FewShotConfig)
    run: SuiteRunConfig = field(default_factory=SuiteRunConfig)

    def solver_options(self, protocol: str | None = None) -> dict[str, Any]:
        """The solver's settings with the protocol's defaults filled in (``protocol``: the config's unless given):
        what runs, and what the record says."""
        s = self.solver
        protocol = protocol or s.protocol
        ssl = protocol == ssl_transfer.NAME
        return {"protocol": protocol, "solver": s.name,
                "precision": s.precision or ("float64" if ssl else "float32"),
                "max_iter": s.max_iter or (ssl_transfer.MAX_ITER if ssl else 1000), "tol": s.tol}

    def lambda_values(self) -> tuple[float, ...]:
        s = self.solver
        if s.lambdas == 1:
            return (s.lambda_min,)
        step = (math.log10(s.lambda_max) - math.log10(s.lambda_min)) / (s.lambdas - 1)
        return tuple(10 ** (math.log10(s.lambda_min) + i * step) for i in range(s.lambdas))


def parse_names(text: str | None) -> tuple[str, ...] | None:
    """``--datasets dtd,pets`` as a tuple; None when not given."""
    if text is None:
        return None
    return tuple(part.strip() for part in text.split(",") if part.strip())


def check_datasets(names: tuple[str, ...], known: tuple[str, ...]) -> None:
    for name in names:
        if name not in known:
            raise ConfigError(f"data.datasets: unknown dataset {name!r}{did_you_mean(name, known)}; known: "
                              f"{', '.join(known)}")


def load_suite_config(config: str | None, overrides: list[str],
                      flags: dict[str, Any] | None = None) -> TransferSuiteConfig:
    """Defaults < YAML < ``--set`` < explicit flags, validated: one-line errors naming the key."""
    cfg: TransferSuiteConfig = load_config(TransferSuiteConfig, config, overrides, flags=flags)
    d, f, s, k = cfg.data, cfg.features, cfg.solver, cfg.fewshot
    require([
        (d.path is not None, "data.path", "not set: pass --data ROOT (the datasets as torchvision downloads them) "
         "or --data embedded"),
        (8 <= d.crop_size <= d.resize, "data.crop_size", f"need 8 <= crop_size <= resize, got {d.crop_size} and "
         f"{d.resize}"),
        (d.interpolation in ("bicubic", "bilinear", "nearest"), "data.interpolation",
         f"bicubic, bilinear or nearest, got {d.interpolation!r}"),
        (d.workers >= 0, "data.workers", f"must be >= 0, got {d.workers}"),
        (0 < d.val_fraction < 1, "data.val_fraction", f"must be in (0, 1), got {d.val_fraction}"),
        (d.split_seed >= 0, "data.split_seed", f"must be >= 0, got {d.split_seed}"),
        (f.batch_size >= 1, "features.batch_size", f"must be >= 1, got {f.batch_size}"),
        (s.protocol in PROTOCOLS, "solver.protocol", f"{s.protocol!r}: expected one of {', '.join(PROTOCOLS)}"),
        (s.protocol != ssl_transfer.NAME or extra_problem(SSL_NEEDS, "scipy", "sklearn") is None, "solver.protocol",
         extra_problem(SSL_NEEDS, "scipy", "sklearn")),
        (s.name in SOLVERS, "solver.name", f"{s.name!r}: expected one of {', '.join(SOLVERS)}"),
        (s.name != "sklearn" or extra_problem("solver sklearn", "sklearn", "sklearn", "scikit-learn") is None,
         "solver.name", extra_problem("solver sklearn", "sklearn", "sklearn", "scikit-learn")),
        (s.precision is None or s.precision in PRECISIONS, "solver.precision",
         f"{s.precision!r}: expected one of {', '.join(PRECISIONS)}"),
        (s.max_iter is None or s.max_iter >= 1, "solver.max_iter", f"must be >= 1, got {s.max_iter}"),
        (0 < s.tol < math.inf, "solver.tol", f"must be finite and > 0, got {s.tol}"),
        (0 < s.lambda_min <= s.lambda_max < math.inf, "solver.lambda_min",
         f"need 0 < lambda_min <= lambda_max, got {s.lambda_min} and {s.lambda_max}"),
        (s.lambdas >= 1, "solver.lambdas", f"must be >= 1, got {s.lambdas}"),
        *fewshot_checks(k.shots, k.tries, k.seed),
        *run_checks(cfg.run.device, cfg.run.seed),
        *format_checks(cfg.run.weights_format),
    ])
    return cfg
