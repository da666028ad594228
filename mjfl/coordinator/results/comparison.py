"""One method against the best of others over a suite of configurations: its time ratio and their geometric mean.

A suite (``mjfl study`` with a ``[ratio]`` table) runs every method on each
configuration for several seeds; what the suite asks is how Meta-Greedy's
group time to target compares with the best single method's, configuration
by configuration, and over the whole suite.

The rules, written once here:

* a method's time on a configuration is the mean of its group time to
  target over the seeds, and exists only when **every** seed reached the
  target (a mean over the seeds that happened to reach would flatter a
  method that often fails); otherwise it is "not reached", with how many
  seeds did;
* the best single method of a configuration is the one of ``best_of`` with
  the shortest time (ties: the first in ``best_of``'s order);
* the ratio is the method's time over the best single's; below 1 the method
  was faster;
* a configuration where no method of ``best_of`` reached, or where the method
  itself did not, has no ratio: it is left out of the geometric mean and
  listed with the reason (an infinite or undefined ratio would make the mean
  meaningless, and hiding such a configuration would flatter the method);
* each ratio comes with its standard error over the seeds, so that a ratio
  can be told from seed noise. Every method of a study runs on the same
  seeds (the same fleet and data), so their times are paired by seed and
  correlated; with ``a`` the method's times and ``b`` the best single
  method's over the ``n`` seeds, ``se = ratio * sqrt((cv_a^2 + cv_b^2 - 2
  cov(a, b) / (mean_a mean_b)) / n)`` (the delta method for a ratio of two
  means, sample (co)variances, ``cv`` the coefficient of variation; a
  negative estimate counts as 0). The geometric mean's is ``geomean *
  sqrt(sum (se_i / ratio_i)^2) / N`` over its N ratios (configurations are
  run apart). Both are None with one seed. They leave out that the best
  single method is picked as the least of several noisy means, which
  flatters it, and three seeds estimate a covariance only roughly.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from rich.table import Table

__all__ = ["compare", "comparison_lines", "comparison_table", "geometric_mean", "mean_time", "ratio_se", "seed_sd"]

NO_SINGLE = "no method of best_of reached in every seed"


def mean_time(times: Sequence[float | None]) -> float | None:
    """The mean group time to target over the seeds; None unless every seed reached (None: not reached)."""
    if not times or any(t is None for t in times):
        return None
    return statistics.fmean(t for t in times if t is not None)


def seed_sd(times: Sequence[float | None]) -> float | None:
    """The sample standard deviation of the group times over the seeds; None unless every seed of two or more reached."""
    if len(times) < 2 or any(t is None for t in times):
        return None
    return statistics.stdev(t for t in times if t is not None)


def ratio_se(own: Sequence[float], best: Sequence[float]) -> float | None:
    """The standard error of ``mean(own) / mean(best)``, times paired by seed (the module docstring's rule)."""
    n = len(own)
    if n < 2 or len(best) != n:
        return None
    mean_a, mean_b = statistics.fmean(own), statistics.fmean(best)
    cov = sum((x - mean_a) * (y - mean_b) for x, y in zip(own, best)) / (n - 1)
    rel = statistics.variance(own) / mean_a**2 + statistics.variance(best) / mean_b**2 - 2 * cov / (mean_a * mean_b)
    return mean_a / mean_b * math.sqrt(max(rel, 0.0) / n)


def geometric_mean(ratios: Sequence[float]) -> float | None:
    """The geometric mean of positive ratios; None for none."""
    if not ratios:
        return None
    if any(r <= 0 for r in ratios):
        raise ValueError(f"ratios must be positive, got {list(ratios)}")
    return math.exp(statistics.fmean(math.log(r) for r in ratios))


def compare(
    times: Mapping[str, Mapping[str, Sequence[float | None]]], *, method: str, best_of: Sequence[str],
) -> dict[str, Any]:
    """``times[configuration][method]``: the group times to target of each seed (None: not reached).

    Returns ``{"method", "best_of", "configurations": {name: {"methods": {m:
    {"mean_s", "sd_s", "reached", "runs"}}, "best": m | None, "ratio": r | None,
    "ratio_se": se | None, "left_out": reason | None}}, "geomean": g | None,
    "geomean_se": se | None, "counted": n, "left_out": {name: reason}}`` (the
    module docstring's rules).
    """
    configurations: dict[str, Any] = {}
    left_out: dict[str, str] = {}
    ratios, errors = [], []
    for name, by_method in times.items():
        methods = {
            m: {"mean_s": mean_time(ts), "sd_s": seed_sd(ts), "reached": sum(t is not None for t in ts), "runs": len(ts)}
            for m, ts in by_method.items()
        }
        singles = [(methods[m]["mean_s"], m) for m in best_of if m in methods and methods[m]["mean_s"] is not None]
        best = min(singles, key=lambda pair: pair[0])[1] if singles else None
        own = methods.get(method, {}).get("mean_s")
        ratio = se = None
        reason = None
        if best is None:
            reason = NO_SINGLE
        elif own is None:
            reason = f"{method} did not reach in every seed"
        else:
            ratio = own / methods[best]["mean_s"]
            se = ratio_se(by_method[method], by_method[best])  # type: ignore[arg-type]  # every seed reached
            ratios.append(ratio)
            errors.append(se)
        if reason is not None:
            left_out[name] = reason
        configurations[name] = {"methods": methods, "best": best, "ratio": ratio, "ratio_se": se, "left_out": reason}
    geomean = geometric_mean(ratios)
    geomean_se = None
    if geomean is not None and all(e is not None for e in errors):
        geomean_se = geomean * math.sqrt(sum((e / r) ** 2 for e, r in zip(errors, ratios))) / len(ratios)
    return {
        "method": method,
        "best_of": list(best_of),
        "configurations": configurations,
        "geomean": geomean,
        "geomean_se": geomean_se,
        "counted": len(ratios),
        "left_out": left_out,
    }


def comparison_table(figures: Mapping[str, Any], methods: Sequence[str]) -> Table:
    """Per configuration each method's mean group time to target, the best single method and the ratio."""
    method = figures["method"]
    table = Table(title=f"Group time to target, s (mean over seeds); {method} over the best single method")
    table.add_column("configuration", min_width=16)
    for m in methods:
        table.add_column(m, justify="right")
    table.add_column("best single")
    table.add_column("ratio ± se", justify="right")
    for name, row in figures["configurations"].items():
        cells = []
        for m in methods:
            entry = row["methods"].get(m)
            if entry is None:
                cells.append("")
            elif entry["mean_s"] is None:
                cells.append(f"not reached ({entry['reached']}/{entry['runs']})")
            else:
                cells.append(f"{entry['mean_s']:.1f}")
        ratio = f"{row['ratio']:.3f}" if row["ratio"] is not None else "left out"
        if row.get("ratio_se") is not None:
            ratio += f" ± {row['ratio_se']:.2f}"
        table.add_row(name, *cells, row["best"] or "none", ratio)
    return table


def comparison_lines(figures: Mapping[str, Any]) -> list[str]:
    """The suite's verdict: the geometric mean of the ratio, and each configuration left out and why."""
    method = figures["method"]
    geomean = figures["geomean"]
    lines = [
        f"geometric mean of {method}'s ratio to the best single method over {figures['counted']} configuration(s): "
        + (f"{geomean:.3f}" if geomean is not None else "none (no configuration has a ratio)")
        + (f" ± {figures['geomean_se']:.3f} (standard error over the seeds)" if figures.get("geomean_se") is not None else "")
    ]
    lines += [f"left out: {name} ({reason})" for name, reason in figures["left_out"].items()]
    return lines
