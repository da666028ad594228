"""One method against the others over a suite of configurations, as a reviewer would score it.

A study (``mjfl study`` with a ``[ratio]`` table) runs methods on several
configurations and seeds; it asks how one method's group time to target
compares with the best other method's, configuration by configuration and
over the whole suite. The rules, written once here:

* **pilot and test seeds.** The pilot seeds choose; the test seeds score. On
  the pilot seeds each configuration's *comparator* is the method of
  ``best_of`` with the least mean group time (ties: the first in ``best_of``'s
  order), and the *single best solver* is the one method of ``best_of`` with
  the least geometric mean, over the configurations, of its mean pilot time.
  Choosing the comparator on the seeds that score it would take the least of
  several noisy means, which flatters it; a study without pilot seeds does
  exactly that (the comparator "in hindsight") and its report says so.
* **a run that misses** (a job of it not at its target when its round budget
  ``max_rounds`` ran out) counts at its *budget's time*: the run's group
  time at its end, the end of the last round of any of its jobs, which is
  never less than its time to target would have been. It is counted as a
  miss, and printed, never left out (leaving it out flatters a method that
  often fails).
* **choosing, a miss costs ``miss_penalty`` (10) times its budget's time.**
  A round budget ends sooner for a fast method than for a slow one, so at
  its budget's time a method that misses can look faster than one that
  reaches the target: Greedy, its 25 rounds over at 1.2 s with a job short
  of its target, would be the comparator of a configuration whose target
  takes the others 2.6 s and more. The judged method is held to reaching
  every target; the method it is compared with must have shown it gets
  there too, so on the seeds that choose (the comparator, the single best
  solver) a miss counts at ``miss_penalty`` times its budget's time, the
  factor of algorithm-selection benchmarks' PAR10 score. Scoring keeps a
  miss at its budget's time (x1): a comparator's miss on a test seed is
  never made dearer than it was.
* **ratios are paired and on the log scale.** Every method meets the same
  fleet and data on a seed, so on configuration ``c`` the method's log
  ratio to its comparator is ``d_s = log(t_method,s / t_comparator,s)`` per
  test seed ``s``; the ratio is ``exp(mean d)`` (a geometric mean over the
  seeds) with the 95% interval ``exp(mean d +- t(0.975, n - 1) sd(d) /
  sqrt(n))``, Student's t on the n seeds (``sd``: the sample standard
  deviation). With one seed there is no interval.
* **configurations are random effects.** The suite's geometric mean is
  ``G = exp(mean_c dbar_c)`` over the C configurations' mean log ratios, and
  its one-sided 95% upper bound is ``exp(mean_c dbar_c + t(0.95, C - 1)
  sd_c(dbar_c) / sqrt(C))``: the spread between configurations' means, which
  holds both the seed noise and how the method's advantage varies from one
  configuration to another, is the error, with C - 1 degrees of freedom (the
  question is the method on configurations like these, not on these
  alone). With one configuration there is no bound.
* **the gap.** The *virtual best* of a configuration is its comparator; the
  single best solver's mean log ratio to it, ``L_sbs``, is the gap between
  running one method everywhere and the best per configuration, and the
  method closes the share ``1 - L_method / L_sbs`` of it (1: at the virtual
  best; 0: no better than the single best solver; below 0: worse). Measured
  on the test seeds, on what ran there; none when ``L_sbs <= 0``.
* **misses, counted and paired.** The method's missed test runs out of those
  it made, with the miss rate's one-sided 95% upper bound (Clopper-Pearson:
  the rate at which so few misses or fewer happen 5% of the time); and, run
  for run on the same (configuration, test seed), its misses against the
  single best solver's and against the comparators': how many runs only the
  method missed and only the other did, with the exact McNemar test's
  two-sided p (``2 P(X <= min)`` for X ~ Binomial(discordant, 1/2), at most
  1). A method that misses no more often than running one method everywhere
  shows it here even when a miss somewhere fails the third verdict.
* **the verdicts**: PASS when the upper bound is at most ``BOUND`` (1.05), no
  configuration's ratio is above ``WORST`` (1.20), and the method missed in
  no run of the test seeds.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from rich.table import Table
from scipy import stats

__all__ = [
    "BOUND", "MISS_PENALTY", "WORST", "LogRatio", "Outcome", "comparator", "compare", "comparison_lines", "comparison_table",
    "geometric_mean", "log_ratio", "miss_rate_bound", "paired_misses", "single_best", "t_quantile", "upper_bound",
]

BOUND = 1.05  # the geometric mean's one-sided 95% upper bound must be at most this
WORST = 1.20  # and no configuration's ratio above this
MISS_PENALTY = 10.0  # choosing, a miss counts at this multiple of its budget's time (the module's rule)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One run's group time: to its targets, or at its budget's end when ``missed`` names jobs (the module's rule)."""

    time_s: float
    missed: tuple[str, ...] = ()

    @property
    def reached(self) -> bool:
        return not self.missed


# configuration -> method -> seed -> the run's outcome
Runs = Mapping[str, Mapping[str, Mapping[int, Outcome]]]


@dataclasses.dataclass(frozen=True)
class LogRatio:
    """A method's paired log ratios to another's over the seeds both ran: their mean, spread and t interval."""

    seeds: tuple[int, ...]
    mean: float  # mean of log(t_own / t_other)
    sd: float | None  # sample standard deviation; None with one seed
    low: float | None  # the ratio's two-sided 95% t interval
    high: float | None

    @property
    def ratio(self) -> float:
        return math.exp(self.mean)

    def figures(self) -> dict[str, Any]:
        return {"ratio": self.ratio, "low": self.low, "high": self.high, "mean_log": self.mean, "sd_log": self.sd,
                "seeds": list(self.seeds)}


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile: ``t_quantile(0.975, 2)`` = 4.303."""
    return float(stats.t.ppf(p, df))


def geometric_mean(values: Sequence[float]) -> float | None:
    """The geometric mean of positive values; None for none."""
    if not values:
        return None
    if any(v <= 0 for v in values):
        raise ValueError(f"values must be positive, got {list(values)}")
    return math.exp(statistics.fmean(math.log(v) for v in values))


def log_ratio(own: Mapping[int, Outcome], other: Mapping[int, Outcome]) -> LogRatio | None:
    """``own``'s paired log ratio to ``other`` over the seeds both ran; None when they share none."""
    seeds = tuple(sorted(set(own) & set(other)))
    if not seeds:
        return None
    d = [math.log(own[s].time_s / other[s].time_s) for s in seeds]
    mean = statistics.fmean(d)
    if len(d) < 2:
        return LogRatio(seeds, mean, None, None, None)
    sd = statistics.stdev(d)
    half = t_quantile(0.975, len(d) - 1) * sd / math.sqrt(len(d))
    return LogRatio(seeds, mean, sd, math.exp(mean - half), math.exp(mean + half))


def miss_rate_bound(misses: int, runs: int) -> float | None:
    """The one-sided 95% Clopper-Pearson upper bound of a miss rate seen as ``misses`` of ``runs``; None for no runs."""
    if runs < 1:
        return None
    return 1.0 if misses >= runs else float(stats.beta.ppf(0.95, misses + 1, runs - misses))


def paired_misses(pairs: Sequence[tuple[Outcome, Outcome]]) -> dict[str, Any]:
    """Misses of two methods run for run (each pair: the same configuration and seed), with the exact McNemar p.

    ``only_own``: the first missed and the second reached; ``only_other``
    the reverse; ``p``: two-sided, ``min(1, 2 P(X <= min(only_own,
    only_other)))`` for X ~ Binomial(only_own + only_other, 1/2), 1 when no
    pair differs.
    """
    only_own = sum(1 for own, other in pairs if own.missed and not other.missed)
    only_other = sum(1 for own, other in pairs if other.missed and not own.missed)
    discordant = only_own + only_other
    p = min(1.0, 2 * float(stats.binom.cdf(min(only_own, only_other), discordant, 0.5))) if discordant else 1.0
    return {"runs": len(pairs), "own": sum(1 for own, _ in pairs if own.missed),
            "other": sum(1 for _, other in pairs if other.missed), "only_own": only_own, "only_other": only_other, "p": p}


def upper_bound(means: Sequence[float]) -> float | None:
    """The one-sided 95% upper bound of ``exp(mean(means))``, configurations as random effects; None under two."""
    if len(means) < 2:
        return None
    spread = statistics.stdev(means) / math.sqrt(len(means))
    return math.exp(statistics.fmean(means) + t_quantile(0.95, len(means) - 1) * spread)


def _mean_time(runs: Mapping[int, Outcome], penalty: float = 1.0) -> float:
    """The mean of the runs' times, a miss at ``penalty`` times its budget's time."""
    return statistics.fmean(o.time_s * (penalty if o.missed else 1.0) for o in runs.values())


def comparator(
    pilot: Mapping[str, Mapping[int, Outcome]], best_of: Sequence[str], *, penalty: float = MISS_PENALTY,
) -> str | None:
    """The method of ``best_of`` with the least mean pilot time (a miss at ``penalty`` x its budget's time); None if none ran."""
    ran = [m for m in best_of if pilot.get(m)]
    return min(ran, key=lambda m: _mean_time(pilot[m], penalty)) if ran else None


def single_best(pilot: Runs, best_of: Sequence[str], *, penalty: float = MISS_PENALTY) -> str | None:
    """The method of ``best_of`` with the least geometric mean over configurations of its mean pilot time (as ``comparator``'s)."""
    everywhere = [m for m in best_of if all(by.get(m) for by in pilot.values())]
    if not pilot or not everywhere:
        return None
    return min(everywhere, key=lambda m: geometric_mean([_mean_time(by[m], penalty) for by in pilot.values()]) or math.inf)


def compare(
    pilot: Runs | None, test: Runs, *, method: str, best_of: Sequence[str], penalty: float = MISS_PENALTY,
) -> dict[str, Any]:
    """The module's statistics: ``pilot`` chooses the comparators and the single best solver, ``test`` scores.

    ``pilot`` None: ``test`` chooses too (the comparator in hindsight).
    ``penalty``: choosing, a miss counts at this multiple of its budget's
    time; scoring, at its budget's time.
    Returns the figures of study.json's ``"ratio"``: per configuration the
    comparator, the method's ratio to it and to the single best solver (each
    ``LogRatio.figures``), every method's test runs and misses; over them the
    geometric mean, its upper bound, the gap share and the verdicts.
    """
    hindsight = pilot is None
    pilot = test if pilot is None else pilot
    sbs = single_best(pilot, best_of, penalty=penalty)
    configurations: dict[str, Any] = {}
    means, sbs_means = [], []
    with_sbs: list[tuple[Outcome, Outcome]] = []  # (the method's run, the other's) on the same configuration and seed
    with_comparator: list[tuple[Outcome, Outcome]] = []
    for name, by_method in test.items():
        chosen = comparator(pilot.get(name, {}), best_of, penalty=penalty)
        own = by_method.get(method, {})
        for other, pairs in ((by_method.get(sbs, {}), with_sbs), (by_method.get(chosen, {}), with_comparator)):
            pairs.extend((own[s], other[s]) for s in sorted(set(own) & set(other)))
        against = log_ratio(own, by_method[chosen]) if chosen in by_method else None
        to_sbs = log_ratio(by_method[sbs], by_method[chosen]) if sbs in by_method and chosen in by_method else None
        if against is not None:
            means.append(against.mean)
        if to_sbs is not None:
            sbs_means.append(to_sbs.mean)
        configurations[name] = {
            "comparator": chosen,
            "ratio": against.figures() if against else None,
            "sbs_to_comparator": to_sbs.figures() if to_sbs else None,
            "methods": {m: _runs(runs) for m, runs in by_method.items()},
        }
    reliability = {"runs": sum(len(by_method.get(method, {})) for by_method in test.values()),
                   "single_best": paired_misses(with_sbs) if with_sbs else None,
                   "comparators": paired_misses(with_comparator) if with_comparator else None}
    return _overall(configurations, means, sbs_means, reliability, method=method, best_of=best_of, sbs=sbs,
                    hindsight=hindsight, penalty=penalty)


def _runs(runs: Mapping[int, Outcome]) -> dict[str, Any]:
    return {"mean_s": _mean_time(runs) if runs else None, "runs": len(runs),
            "missed": {str(s): list(o.missed) for s, o in runs.items() if o.missed}}


def _overall(
    configurations: dict[str, Any], means: list[float], sbs_means: list[float], reliability: dict[str, Any], *, method: str,
    best_of: Sequence[str], sbs: str | None, hindsight: bool, penalty: float,
) -> dict[str, Any]:
    geomean = math.exp(statistics.fmean(means)) if means else None
    bound = upper_bound(means)
    worst = max((c["ratio"]["ratio"] for c in configurations.values() if c["ratio"]), default=None)
    misses = sum(len(c["methods"].get(method, {}).get("missed", {})) for c in configurations.values())
    gap = statistics.fmean(sbs_means) if sbs_means and len(sbs_means) == len(means) else None
    share = 1 - statistics.fmean(means) / gap if gap is not None and gap > 0 else None
    unscored = [n for n, c in configurations.items() if c["ratio"] is None]
    verdicts = {
        "bound": bound is not None and bound <= BOUND and not unscored,
        "worst": worst is not None and worst <= WORST and not unscored,
        "reached": misses == 0 and not unscored,
    }
    return {
        "method": method, "best_of": list(best_of), "hindsight": hindsight, "miss_penalty": penalty,
        "configurations": configurations,
        "counted": len(means), "unscored": unscored, "geomean": geomean, "upper_bound": bound, "worst": worst,
        "misses": misses, "single_best": sbs, "single_best_gap": math.exp(gap) if gap is not None else None,
        "gap_share": share, "verdicts": verdicts, "limits": {"bound": BOUND, "worst": WORST},
        "reliability": {**reliability, "misses": misses, "rate_bound": miss_rate_bound(misses, reliability["runs"])},
    }


def _interval(figures: Mapping[str, Any] | None) -> str:
    if figures is None:
        return "none"
    text = f"{figures['ratio']:.3f}"
    return text + (f" [{figures['low']:.3f}, {figures['high']:.3f}]" if figures["low"] is not None else "")


def comparison_table(figures: Mapping[str, Any], methods: Sequence[str]) -> Table:
    """Per configuration each method's mean test time (misses at budget), the comparator and the ratio with its interval."""
    method = figures["method"]
    table = Table(title=f"Group time to target, s (mean over the test seeds; misses at their budget's time);"
                        f" {method} over the comparator, 95% t interval")
    table.add_column("configuration", min_width=16)
    for m in methods:
        table.add_column(m, justify="right")
    table.add_column("comparator")
    table.add_column("ratio [95%]", justify="right")
    table.add_column(f"vs {figures['single_best'] or 'single best'}", justify="right")
    for name, row in figures["configurations"].items():
        cells = []
        for m in methods:
            entry = row["methods"].get(m)
            if entry is None or entry["mean_s"] is None:
                cells.append("")
            else:
                missed = len(entry["missed"])
                cells.append(f"{entry['mean_s']:.2f}" + (f" ({missed}/{entry['runs']} missed)" if missed else ""))
        to_sbs = row["sbs_to_comparator"]
        versus = row["ratio"]["mean_log"] - to_sbs["mean_log"] if row["ratio"] and to_sbs else None
        table.add_row(name, *cells, row["comparator"] or "none", _interval(row["ratio"]),
                      f"{math.exp(versus):.3f}" if versus is not None else "")
    return table


def _miss_lines(figures: Mapping[str, Any]) -> list[str]:
    """How often the method missed, the rate's bound, and its misses paired with the single best solver's and the comparators'."""
    method, reliability = figures["method"], figures["reliability"]
    bound = reliability["rate_bound"]
    lines = [f"{method} missed its targets in {reliability['misses']} of {reliability['runs']} test run(s)"
             " (counted at their budget's time)" + (f"; the miss rate's one-sided 95% upper bound {bound:.3f}" if bound is not None else "")]
    for key, other in (("single_best", f"the single best solver ({figures['single_best']})"), ("comparators", "the comparators")):
        paired = reliability[key]
        if paired is not None:
            p = "p < 0.01" if paired["p"] < 0.01 else f"p = {paired['p']:.2f}"
            lines.append(f"misses run for run against {other}: {paired['own']} and {paired['other']} of {paired['runs']};"
                         f" {paired['only_own']} missed by {method} alone, {paired['only_other']} by the other alone"
                         f" (exact McNemar {p})")
    return lines


def comparison_lines(figures: Mapping[str, Any]) -> list[str]:
    """The verdict: the geometric mean and its bound, the single best solver and the gap, PASS/FAIL lines."""
    method, limits, verdicts = figures["method"], figures["limits"], figures["verdicts"]
    geomean, bound = figures["geomean"], figures["upper_bound"]
    chosen = ("comparators chosen on the same seeds (in hindsight: biased in the method's disfavour, no pilot seeds)"
              if figures["hindsight"] else "comparators chosen on the pilot seeds, scored on the test seeds")
    chosen += f"; choosing, a miss counted at {figures['miss_penalty']:g}x its budget's time"
    lines = [
        f"geometric mean of {method}'s ratio to the comparator over {figures['counted']} configuration(s): "
        + (f"{geomean:.3f}" if geomean is not None else "none")
        + (f", one-sided 95% upper bound {bound:.3f} (configurations as random effects)" if bound is not None else ""),
        chosen,
        *_miss_lines(figures),
    ]
    if figures["single_best"] is not None:
        gap, share = figures["single_best_gap"], figures["gap_share"]
        lines.append(
            f"single best solver: {figures['single_best']}"
            + (f", {gap:.3f}x the per-configuration best" if gap is not None else "")
            + (f"; {method} closes {share:.0%} of that gap" if share is not None else "")
        )
    lines += [f"not scored: {name} (no comparator, or {method} did not run)" for name in figures["unscored"]]
    lines += [
        f"{'PASS' if verdicts['bound'] else 'FAIL'}: upper bound <= {limits['bound']:.2f}"
        + (f" ({bound:.3f})" if bound is not None else " (none)"),
        f"{'PASS' if verdicts['worst'] else 'FAIL'}: no configuration above {limits['worst']:.2f}"
        + (f" (worst {figures['worst']:.3f})" if figures["worst"] is not None else " (none)"),
        f"{'PASS' if verdicts['reached'] else 'FAIL'}: every job of every configuration reaches its target in"
        + f" every test seed ({figures['misses']} miss(es))",
    ]
    return lines
