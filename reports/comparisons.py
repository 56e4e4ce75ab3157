"""Each row of a table against a baseline row of the same table: the difference of their means, its standard error
over trials and a test, stated with its direction and size (``reports.tables.comparison_text``: "+3.2 ± 0.8,
p=0.01 (Welch, 3 v 3 trials)").

The baseline is random init by default (the floor every pretraining must clear); ``moco report --baseline LABEL``
chooses "supervised" or any row label a table shows. A row is compared with the random init of its own architecture
(the floor of that network; a ViT row beside an R18's random init only has none), and where a table holds several
rows another baseline matches, with the one of its architecture.

The test: Welch's t-test over the two rows' trials (their means, sample standard deviations and counts: the trials
of a row are pretrainings or evaluations with other seeds, so their spread is the noise a difference must clear);
a one-trial few-shot row's spread is over its tries of the shots drawn, and two such rows are compared over tries.
The Student t distribution's tail is computed here from the regularised incomplete beta function (scipy is not a
dependency of the base install). A row of one trial has no spread: it says "1 trial", never a standard error of 0.
The transfer suite's one-trial rows have their paired tests over the test images (:mod:`reports.linear_transfer.table`).
The line under a table giving each row's margin over random init in standard errors (:func:`margins_over_random`)
reads the same difference and standard error.
Nothing here imports torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from reports.pretraining import Pretraining
from reports.summary import Entry, Stat

COMPARISON_NOTE = (
    "vs: each row's mean minus its baseline row's (random init: of its architecture; another baseline: of its "
    "architecture where there are several), ± "
    "the standard error of that difference over trials (sqrt(s_a^2/n_a + s_b^2/n_b)), and Welch's "
    "t-test over the trials (a one-trial few-shot row: over its tries of the shots drawn); a row of "
    "one trial has no spread and says so. moco report --baseline LABEL compares with another row.")
DEFAULT = "random init"
SUPERVISED = "supervised"


class UnknownBaseline(ValueError):
    """``--baseline`` names no row of the report."""


@dataclass(frozen=True)
class Sample:
    """A row's value of one metric: the mean over ``n`` trials (or a one-trial few-shot row's tries), their sample
    standard deviation (None for one)."""

    mean: float
    std: float | None
    n: int
    unit: str = "trials"  # "trials", or "tries" (of the shots drawn, within one few-shot trial)

    @property
    def trials(self) -> int:
        return 1 if self.unit == "tries" else self.n


@dataclass(frozen=True)
class Comparison:
    """A row against the baseline: mean(row) - mean(baseline), the standard error of that difference
    (sqrt(s_a^2/n_a + s_b^2/n_b)), the test's two-sided p and its name; None where there is none."""

    baseline: str
    difference: float
    se: float | None
    p: float | None
    test: str
    n: int
    baseline_n: int
    unit: str = "trials"

    def csv_fields(self) -> dict[str, str]:
        return {"baseline": self.baseline, "difference": _num(self.difference), "difference_se": _num(self.se),
                "p_value": "" if self.p is None else f"{self.p:.6g}", "test": self.test,
                "baseline_n": str(self.baseline_n)}


def _num(value: float | None) -> str:
    return "" if value is None else repr(round(value, 6))


# --------------------------------------------------------------------------------------------------- Welch's test


def incomplete_beta(x: float, a: float, b: float) -> float:
    """The regularised incomplete beta function I_x(a, b), by its continued fraction (modified Lentz), on the side of
    x where it converges fast, reflected (I_x(a, b) = 1 - I_{1-x}(b, a)) on the other."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - incomplete_beta(1.0 - x, b, a)
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    fraction = d
    for m in range(1, 10_000):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),  # the even step, then the odd one
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            fraction *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return math.exp(log_front) * fraction / a


def t_two_sided(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` (any positive real) degrees of freedom: I_{df/(df+t^2)}(df/2, 1/2)."""
    if math.isinf(t):
        return 0.0
    return min(1.0, incomplete_beta(df / (df + t * t), df / 2.0, 0.5))


def welch(a: Sample, b: Sample, baseline: str) -> Comparison:
    """``a`` against ``b`` by Welch's t-test (Welch-Satterthwaite degrees of freedom); where either has one trial
    (no spread), the difference alone, marked "1 trial"."""
    diff = a.mean - b.mean
    if a.std is None or b.std is None or a.unit != b.unit:
        return Comparison(baseline, diff, None, None, "", a.trials, b.trials)
    va, vb = a.std ** 2 / a.n, b.std ** 2 / b.n
    se = math.sqrt(va + vb)
    test = "Welch" if a.unit == "trials" else "Welch over tries"
    if se == 0:
        return Comparison(baseline, diff, se, None, test, a.n, b.n, a.unit)
    df = (va + vb) ** 2 / (va ** 2 / (a.n - 1) + vb ** 2 / (b.n - 1))
    return Comparison(baseline, diff, se, t_two_sided(diff / se, df), test, a.n, b.n, a.unit)


# ------------------------------------------------------------------------------------------------ baseline rows


def is_baseline(wanted: str | None, pretraining: Pretraining, label: str) -> bool:
    """Whether a row is the baseline ``wanted`` names: random init (the default, or "random init"), any supervised
    row ("supervised"), else the row whose label is ``wanted`` (case aside)."""
    name = (wanted or DEFAULT).strip().casefold()
    if name in (DEFAULT, "random"):
        return pretraining.kind == "random"
    if name == SUPERVISED:
        return pretraining.is_supervised
    return label.strip().casefold() == name


def baselines(rows: list[tuple[Pretraining, str]], wanted: str | None) -> list[int | None]:
    """For each row (its pretraining and label), the index of its baseline row: the one row ``wanted`` matches, or
    where several match, the one of its architecture (random init: always the one of its architecture, the floor
    of that network); None where there is none (or it is the baseline itself)."""
    found = [i for i, (p, label) in enumerate(rows) if is_baseline(wanted, p, label)]
    floor = (wanted or DEFAULT).strip().casefold() in (DEFAULT, "random")  # random init is a floor of one arch
    out: list[int | None] = []
    for i, (p, _) in enumerate(rows):
        same = found if len(found) == 1 and not floor else [j for j in found if rows[j][0].arch == p.arch]
        out.append(same[0] if len(same) == 1 and same[0] != i else None)
    return out


def check_baseline(wanted: str | None, rows: list[tuple[Pretraining, str]]) -> None:
    """:class:`UnknownBaseline` where ``wanted`` (given by the user) matches no row of the report."""
    if wanted is None or any(is_baseline(wanted, p, label) for p, label in rows):
        return
    labels = ", ".join(repr(label) for label in dict.fromkeys(label for _, label in rows))
    raise UnknownBaseline(f"--baseline: no row is {wanted!r}; give 'random init', 'supervised' or one of the row "
                          f"labels: {labels}")


def entry_sample(entry: Entry, metric: str) -> Sample | None:
    """``entry``'s ``metric`` as a sample: over its trials; a one-trial few-shot row's over its tries."""
    stat: Stat | None = entry.metrics.get(metric)
    if stat is None or stat.n == 0:
        return None
    if stat.n == 1 and metric in entry.spread:
        std, tries = entry.spread[metric]
        return Sample(stat.mean, std if tries > 1 else None, tries, "tries")
    return Sample(stat.mean, stat.std, stat.n)


def compare_entries(entry: Entry, base: Entry | None, metric: str) -> Comparison | None:
    """``entry`` against ``base`` on ``metric`` (None where either lacks it, or there is no baseline)."""
    if base is None:
        return None
    a, b = entry_sample(entry, metric), entry_sample(base, metric)
    if a is None or b is None:
        return None
    return welch(a, b, base.pretraining.label)


def entry_baselines(entries: list[Entry], wanted: str | None) -> list[Entry | None]:
    """Each entry's baseline entry in its table (failed rows are no baseline)."""
    usable = [e for e in entries if not e.failed]
    index = baselines([(e.pretraining, e.pretraining.label) for e in usable], wanted)
    chosen = {id(e): usable[i] if i is not None else None for e, i in zip(usable, index, strict=True)}
    return [chosen.get(id(e)) for e in entries]


def column_header(wanted: str | None, what: str) -> str:
    """"vs random init (top-1)", "vs supervised (5-shot linear)"."""
    return f"vs {wanted or DEFAULT} ({what})"


@dataclass(frozen=True)
class Margin:
    """How far a row's mean lies above random init's, against the noise of the two means."""

    entry: Entry
    metric: str
    difference: float  # mean(entry) - mean(random init)
    standard_error: float  # of that difference: sqrt(s1^2 / n1 + s2^2 / n2), the trials' sample variances

    @property
    def ratio(self) -> float:
        """The difference in standard errors (infinite where both rows' trials agreed exactly, 0 for no difference)."""
        if self.standard_error > 0:
            return self.difference / self.standard_error
        return math.copysign(math.inf, self.difference) if self.difference else 0.0


def margins_over_random(entries: list[Entry], metric: str) -> list[Margin]:
    """Each row's margin over the random-init row of its arch on ``metric`` (a table of R18 and ViT rows has a
    floor for each), for rows of 2+ trials where that random-init row has 2+ trials too; none for an arch with no
    such random-init row, or several. The difference and its standard error are the comparisons column's
    (:func:`compare_entries`); the floor is chosen here, among the random-init rows with trials (the column
    chooses among the rows that did not fail)."""
    randoms: dict[str | None, list[Entry]] = {}
    for e in entries:
        if e.pretraining.kind == "random" and e.n > 0:
            randoms.setdefault(e.pretraining.arch, []).append(e)
    out = []
    for entry in entries:
        floor = randoms.get(entry.pretraining.arch, [])
        stat = entry.metrics.get(metric)
        if len(floor) != 1 or entry is floor[0] or stat is None or stat.n < 2:
            continue
        base = floor[0].metrics.get(metric)
        found = compare_entries(entry, floor[0], metric) if base is not None and base.n >= 2 else None
        if found is not None and found.se is not None:  # 2+ trials on both sides: a standard error
            out.append(Margin(entry, metric, found.difference, found.se))
    return out
