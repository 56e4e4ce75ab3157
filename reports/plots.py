"""PNG plots for the HTML report (matplotlib, Agg backend, no pyplot state): ablations and pretraining curves.

* K against accuracy (log x) and m against accuracy (m values evenly spaced), one line per mechanism (and recipe),
  each point the mean of its trials with their sample standard deviation as error bars; failed runs are a red
  cross on the x axis, labelled "failed".
* Pretraining curves from a run's ``metrics.jsonl``: loss and instance-discrimination accuracy of the logged
  steps, and the kNN monitor's top-1 with the linear protocol's top-1 of the evaluated checkpoints (moco eval
  snapshots), against epochs (steps converted with the steps per epoch the file shows).
"""

from __future__ import annotations

import io
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from matplotlib.figure import Figure  # noqa: E402 - after choosing the backend

from moco_core.errors import UserError  # noqa: E402
from moco_core.user_files import LIST_LIMIT, parse_json_lines, read_bytes  # noqa: E402
from reports.safe_text import printable  # noqa: E402
from reports.tables import METRIC_HEADERS, AblationData, fmt_sweep  # noqa: E402

FAILED_COLOR = "#c62828"


@dataclass
class Curves:
    """Points (epoch, value) read from one metrics.jsonl."""

    loss: list[tuple[float, float]] = field(default_factory=list)
    accuracy: list[tuple[float, float]] = field(default_factory=list)
    knn: list[tuple[float, float]] = field(default_factory=list)
    unreadable: int = 0  # lines that are not JSON objects with numbers a float holds: skipped
    problem: str | None = None  # why the file itself was not read (not a regular file, too large)

    @property
    def empty(self) -> bool:
        return not (self.loss or self.accuracy or self.knn)


def plain(text: str) -> str:
    """Text for matplotlib: control characters shown escaped; "$" would start mathtext, so it is escaped."""
    return printable(text, newlines=False).replace("$", r"\$")


def to_png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    with warnings.catch_warnings():  # a name from a record in a script the font lacks: drawn as a box, no warning
        warnings.filterwarnings("ignore", message="Glyph .* missing from font", category=UserWarning)
        fig.savefig(buf, format="png", dpi=96, bbox_inches="tight", metadata={"Software": None})
    return buf.getvalue()


def ablation_points(data: AblationData) -> int:
    """The values an ablation plot would place along its x axis: one alone is no curve (the report draws none)."""
    return len({p.value for points in data.series.values() for p in points})


def most_points(curves: Curves, linear: tuple[tuple[int, float], ...] = ()) -> int:
    """The most points any panel of a run's curves would show: one alone is no curve (the report draws none)."""
    return max(len(curves.loss), len(curves.accuracy), len(curves.knn), len(linear))


def ablation_png(data: AblationData) -> bytes:
    return to_png(ablation_figure(data))


def ablation_figure(data: AblationData) -> Figure:
    """Accuracy against K (log scale) or m (evenly spaced values), mean ± std of each point's trials; failed runs
    marked on the x axis."""
    fig = Figure(figsize=(7.0, 4.2))
    ax = fig.add_subplot()
    values = sorted({p.value for points in data.series.values() for p in points})
    position = (lambda v: v) if data.param == "queue_size" else (lambda v: float(values.index(v)))
    failed_shown = False
    for label, points in data.series.items():
        ok = sorted((p for p in points if not p.failed and p.mean is not None), key=lambda p: p.value)
        published = label.startswith("published")
        if ok:
            ax.errorbar([position(p.value) for p in ok], [p.mean for p in ok], yerr=[p.std or 0.0 for p in ok],
                        marker="s" if published else "o", linestyle=":" if published else "-", capsize=3,
                        label=plain(label), markerfacecolor="none" if published else None)
        for p in points:
            if p.failed:
                ax.plot(position(p.value), 0.0, marker="x", color=FAILED_COLOR, markersize=10, mew=2, clip_on=False,
                        transform=ax.get_xaxis_transform(), label=None if failed_shown else "failed run")
                ax.annotate("failed", (position(p.value), 0.0), xycoords=ax.get_xaxis_transform(),
                            xytext=(0, 10), textcoords="offset points", ha="center", color=FAILED_COLOR, fontsize=8)
                failed_shown = True
    if data.param == "queue_size":
        ax.set_xscale("log")
        ax.set_xticks(values, [fmt_sweep(v) for v in values])
        ax.minorticks_off()
        ax.set_xlabel("queue size K (log scale)")
    else:
        ax.set_xticks(range(len(values)), [fmt_sweep(v) for v in values])
        ax.set_xlabel("momentum m")
    trials = any(p.n > 1 for points in data.series.values() for p in points)
    ax.set_ylabel(f"{METRIC_HEADERS.get(data.metric, data.metric)} (%)" + (", mean ± std of trials" if trials else ""))
    ax.set_title(plain(data.title), fontsize=9)
    ax.grid(alpha=0.3)
    if data.series:
        ax.legend(fontsize=8)
    return fig


def read_curves(path: Path) -> Curves:
    """Step lines ("loss", "accuracy", "epoch", "step") and kNN lines ("knn_top1") of a pretraining metrics.jsonl.

    The file is read through :mod:`moco_core.user_files` (a regular file, at most LIST_LIMIT bytes); a line that is
    not a JSON object whose numbers fit 64-bit integers and finite floats is counted in ``unreadable`` and skipped,
    as a file that cannot be read is reported in ``problem``: a report is never stopped by a run's log."""
    curves = Curves()
    try:
        text = read_bytes(path, limit=LIST_LIMIT, what="metrics file")
    except UserError as err:
        curves.problem = str(err)
        return curves
    values, curves.unreadable = parse_json_lines(text)
    lines = [v for v in values if isinstance(v, dict)]
    curves.unreadable += len(values) - len(lines)
    per_epoch = _steps_per_epoch(lines)
    for line in lines:
        epoch = line.get("epoch")
        if not _is_number(epoch):
            continue
        if _is_number(line.get("knn_top1")):
            curves.knn.append((epoch + 1.0, float(line["knn_top1"])))
        elif _is_number(line.get("loss")) and _is_number(line.get("accuracy")):
            step = line.get("step")
            x = step / per_epoch if per_epoch and _is_number(step) else epoch + 1.0
            curves.loss.append((x, float(line["loss"])))
            curves.accuracy.append((x, float(line["accuracy"])))
    return curves


def _is_number(value: object) -> bool:
    """A finite int or float (not a bool): NaN and Infinity, which JSON lines may hold, are not plotted."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _steps_per_epoch(lines: list[dict]) -> float | None:
    """From the first end-of-epoch line ("epoch_loss"): its step / (epoch + 1)."""
    for line in lines:
        if "epoch_loss" in line and _is_number(line.get("step")) and _is_number(line.get("epoch")):
            return line["step"] / (line["epoch"] + 1) if line["step"] > 0 and line["epoch"] >= 0 else None
    return None


def curves_png(label: str, curves: Curves, *, supervised: bool = False,
               linear: tuple[tuple[int, float], ...] = (), linear_label: str = "linear") -> bytes:
    """Loss, training accuracy (instance discrimination; class accuracy for a supervised run), and top-1: the kNN
    monitor's, and the linear evaluations' on the checkpoints evaluated (``linear``: (epochs, top-1) pairs, named
    in the legend by ``linear_label``: what they ran)."""
    fig = Figure(figsize=(11.0, 3.2), layout="constrained")
    last = max((x for points in (curves.loss, curves.knn, linear) for x, _ in points), default=1.0)
    accuracy = "training class accuracy (%)" if supervised else "instance accuracy (%)"
    panels = (("loss", curves.loss, "loss"), (accuracy, curves.accuracy, "accuracy (%)"),
              ("top-1 (%): kNN monitor, linear" if linear else "kNN top-1 (%)", curves.knn, "top-1 (%)"))
    for i, (title, points, ylabel) in enumerate(panels):
        ax = fig.add_subplot(1, 3, i + 1)
        if points:
            ax.plot([x for x, _ in points], [y for _, y in points], marker="o" if len(points) < 20 else None,
                    markersize=3, label="kNN monitor" if i == 2 else None)
        if i == 2 and linear:
            ax.plot([x for x, _ in linear], [y for _, y in linear], marker="s", markersize=4, linestyle="--",
                    label=plain(linear_label))
            ax.legend(fontsize=8)
        elif not points:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes, color="grey")
        ax.set_title(title, fontsize=9)
        ax.set_xlim(0, last * 1.02)
        ax.set_xlabel("epoch")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    fig.suptitle(plain(label), fontsize=10)
    return to_png(fig)
