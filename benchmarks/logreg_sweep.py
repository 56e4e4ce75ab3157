"""The transfer protocol's 45-value logistic-regression sweep, ours beside scikit-learn's, on the same features;
and the frozen feature extraction's images/s.

Problems (generated, with class structure so that accuracy means something): ``food101`` is Food-101's shape
(75,750 train images, 25,250 test, 2,048-d features as a ResNet-50's, 101 classes), ``small`` a Flowers-sized one
(2,040 / 6,149, 512-d, 102 classes). Each class has a centre in a 64-d subspace; a feature is its class's centre
plus noise in that subspace, mapped to D dimensions, plus isotropic noise, through a ReLU (features of a pooled
ResNet are non-negative). The protocol on each: a seeded 20% of train held out as val, the sweep over 45 L2 values
(1e-6 to 1e5) on the rest, the chosen value refitted on all of train, the test set once (top-1).

- ours: :func:`moco_core.frozen.logreg.sweep` and ``refit`` as ``moco eval transfer`` runs them (strongest
  regularisation first, warm-started, float32 products, tol 1e-4, at most 1000 iterations a value), on
  ``--device``;
- scikit-learn: ssl-transfer's setting (linusericsson/ssl-transfer ``linear.py``):
  ``LogisticRegression(solver="lbfgs", warm_start=True)`` with its defaults (tol 1e-4, max_iter 100), C = 1 /
  lambda, the values in its order (weakest regularisation first), on the CPU in float64.

``--every K``: both sweeps fit every K-th of the 45 values only (a coarser warm-started path, for a CPU that cannot
run the Food-101-sized one whole in an hour); each side's 45-value time is extrapolated (times 45 / values
fitted), said so in the output. ``--budget S``: scikit-learn's sweep also stops after S seconds, its time then
extrapolated from the values done (``values_done``).
Extraction: ``extract_features`` of a ResNet-50 (random weights) over synthetic 224-px images, bf16 on CUDA.

One JSON line with every figure goes to stdout. On a GPU (the lead's H200 run):
    python benchmarks/logreg_sweep.py --device cuda --problems food101,small --budget 1800
On the CPU here:
    python benchmarks/logreg_sweep.py --device cpu --problems small,food101 --budget 900 --every 4
Dry run (tests/benchmarks/test_logreg_sweep.py): --train 200 --test 100 --dim 16 --classes 4 --images 8
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from a checkout

from classification.frozen.metrics import top1  # noqa: E402
from moco_core.frozen.logreg import LAMBDAS, refit, sweep  # noqa: E402
from moco_core.run.features import extract_features  # noqa: E402

PROBLEMS = {"food101": (75_750, 25_250, 2048, 101), "small": (2_040, 6_149, 512, 102)}


def make_problem(train: int, test: int, dim: int, classes: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Features (float32) and labels with class structure (see the module docstring); val is 20% of train."""
    rng = np.random.default_rng(seed)
    latent = min(64, dim)
    centres = rng.normal(size=(classes, latent)).astype(np.float32)
    lift = rng.normal(size=(latent, dim)).astype(np.float32) / np.sqrt(latent)
    out = {}
    for name, n in (("train", train), ("test", test)):
        y = rng.integers(0, classes, n)
        z = centres[y] + 2.2 * rng.normal(size=(n, latent)).astype(np.float32)
        x = z @ lift + 0.5 * rng.normal(size=(n, dim)).astype(np.float32)
        out[f"x_{name}"], out[f"y_{name}"] = np.maximum(x, 0.0).astype(np.float32), y
    order = rng.permutation(train)
    cut = train // 5
    out["val_index"], out["fit_index"] = order[:cut], order[cut:]
    return out


def ours(p: dict[str, np.ndarray], classes: int, device: str, every: int = 1) -> dict[str, Any]:
    x, y = torch.from_numpy(p["x_train"]), torch.from_numpy(p["y_train"])
    fit, val = torch.from_numpy(p["fit_index"]), torch.from_numpy(p["val_index"])
    dev = torch.device(device)
    started = time.perf_counter()
    x_dev, y_dev = x.to(dev), y.to(dev)  # the cached features, moved to the solver's device once
    values = LAMBDAS[::every]
    path = sweep(x_dev[fit], y_dev[fit], x_dev[val], y_dev[val], num_classes=classes, score=top1, device=dev,
                 lambdas=values)
    swept = time.perf_counter() - started
    final = refit(x_dev, y_dev, num_classes=classes, lam=path.best_lambda, init=path.fits[path.chosen], device=dev)
    total = time.perf_counter() - started
    test = top1(final.scores(torch.from_numpy(p["x_test"])), torch.from_numpy(p["y_test"]))
    extrapolated = swept * len(LAMBDAS) / len(values)
    return {"sweep_s_measured": swept, "values_done": len(values), "sweep_s_extrapolated_45": extrapolated,
            "refit_s": total - swept, "total_s_extrapolated": extrapolated + total - swept,
            "lambda": path.best_lambda, "val_top1": path.scores[path.chosen], "test_top1": test,
            "iterations": sum(path.iterations) + final.iterations,
            "evaluations": sum(path.evaluations) + final.evaluations,
            "unconverged_values": sum(not c for c in path.converged)}


def scikit(p: dict[str, np.ndarray], budget: float, every: int) -> dict[str, Any]:
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    x, y = p["x_train"].astype(np.float64), p["y_train"]
    xf, yf, xv, yv = x[p["fit_index"]], y[p["fit_index"]], x[p["val_index"]], y[p["val_index"]]
    values = list(LAMBDAS)[::every]  # ssl-transfer's order: 1e-6 first
    model = LogisticRegression(solver="lbfgs", warm_start=True)  # ssl-transfer: tol 1e-4, max_iter 100
    started = time.perf_counter()
    scores, done = [], 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for lam in values:
            model.set_params(C=1.0 / lam)
            model.fit(xf, yf)
            scores.append(100.0 * model.score(xv, yv))
            done += 1
            if time.perf_counter() - started > budget:
                break
        swept = time.perf_counter() - started
        best = max(range(done), key=lambda i: (scores[i], -i))  # ssl-transfer keeps the first best (weakest)
        model.set_params(C=1.0 / values[best])
        refit_started = time.perf_counter()
        model.fit(x, y)
        refit_s = time.perf_counter() - refit_started
    extrapolated = swept * len(LAMBDAS) / done
    return {"sweep_s_measured": swept, "values_done": done, "values_planned": len(values), "every": every,
            "sweep_s_extrapolated_45": extrapolated, "refit_s": refit_s, "total_s_extrapolated": extrapolated + refit_s,
            "lambda": values[best], "val_top1": scores[best],
            "test_top1": 100.0 * model.score(p["x_test"].astype(np.float64), p["y_test"]),
            "note": (f"sklearn fitted {done} of the 45 values"
                     f"{f' (every {every}th)' if every > 1 else ''}; its 45-value time is extrapolated "
                     f"x{len(LAMBDAS) / done:.2f}") if done < len(LAMBDAS) else "all 45 values fitted"}


def extraction(device: str, arch: str, size: int, images: int, batch: int) -> dict[str, Any]:
    import torchvision

    model = getattr(torchvision.models, arch)()
    data = torch.utils.data.TensorDataset(torch.randn(images, 3, size, size), torch.zeros(images, dtype=torch.long))
    warm_up = torch.utils.data.Subset(data, range(min(batch, images)))  # cuDNN's choice, the first allocation
    extract_features(model, {"warm-up": warm_up}, taps=("layer4",), what="warm-up", batch_size=batch, device=device,
                     amp=True)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    got = extract_features(model, {"features": data}, taps=("layer4",), what="features", batch_size=batch,
                           device=device, amp=True)["features"]
    return {"arch": arch, "image_size": size, "images": images, "batch": batch, "seconds": got.seconds,
            "images_per_s": images / got.seconds, "precision": "bf16" if device.startswith("cuda") else "fp32"}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--problems", default="small,food101", help="comma-separated: food101, small")
    p.add_argument("--budget", type=float, default=900.0, help="seconds of scikit-learn's sweep a problem, at most")
    p.add_argument("--every", type=int, default=1, help="both sweeps fit every K-th value only")
    p.add_argument("--skip-sklearn", action="store_true")
    p.add_argument("--train", type=int, help="override the problem's shape (dry runs)")
    p.add_argument("--test", type=int)
    p.add_argument("--dim", type=int)
    p.add_argument("--classes", type=int)
    p.add_argument("--arch", default="resnet50")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--images", type=int, default=256, help="synthetic images timed through the extraction (0: none)")
    p.add_argument("--batch", type=int, default=64)
    args = p.parse_args(argv)
    out: dict[str, Any] = {"device": args.device, "torch": torch.__version__, "python": platform.python_version(),
                           "cpu_threads": torch.get_num_threads(), "host_cpus": os.cpu_count(), "problems": {}}
    if args.device.startswith("cuda"):
        out["gpu"] = torch.cuda.get_device_name()
    for name in [n.strip() for n in args.problems.split(",") if n.strip()]:
        train, test, dim, classes = PROBLEMS[name]
        shape = (args.train or train, args.test or test, args.dim or dim, args.classes or classes)
        problem = make_problem(*shape)
        row: dict[str, Any] = {"train": shape[0], "test": shape[1], "dim": shape[2], "classes": shape[3],
                               "ours": ours(problem, shape[3], args.device, args.every)}
        if not args.skip_sklearn:
            import sklearn

            row["sklearn"] = {"version": sklearn.__version__, **scikit(problem, args.budget, args.every)}
            row["speedup"] = row["sklearn"]["total_s_extrapolated"] / row["ours"]["total_s_extrapolated"]
            row["test_top1_difference"] = row["ours"]["test_top1"] - row["sklearn"]["test_top1"]
        out["problems"][name] = row
        print(f"{name}: {json.dumps(row)}", file=sys.stderr, flush=True)
    if args.images:
        out["extraction"] = extraction(args.device, args.arch, args.image_size, args.images, args.batch)
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
