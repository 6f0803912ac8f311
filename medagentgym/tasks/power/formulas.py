"""Power and sample-size formulas, vectorised with scipy: an implementation independent of statsmodels.

The N-PowerAI family computes its gold answers by executing statsmodels-based reference snippets
(medagentgym/tasks/power/snippets.py); these functions re-derive the same numbers from the noncentral distributions and
closed forms, so tests can cross-check the two. Every ``power_*`` accepts numpy arrays (broadcast together).

Conventions (the ones the family's questions state):

* ``sides`` is 2 (two-sided, alpha split over both tails, both rejection regions counted) or 1 (one-sided in
  the direction of the hypothesised effect; effect sizes are taken as absolute values).
* t tests: noncentral t with the usual degrees of freedom; d = |mean difference| / SD.
* one-way ANOVA: noncentral F, df1 = k - 1, df2 = N - k, noncentrality f^2 N (N = k n, equal groups).
* chi-square: noncentral chi-square, noncentrality w^2 N, df given.
* proportions: normal approximation on Cohen's arcsine effect size h.
* Cox (Schoenfeld): events = (z_{1-a/s} + z_{power})^2 / (p (1 - p) log(HR)^2), p = share allocated to one arm;
  Cox (Freedman, equal arms): events = (z_{1-a/s} + z_{power})^2 (1 + HR)^2 / (1 - HR)^2.

Example:
    >>> round(float(power_t_two_sample(0.5, 64, 0.05, 2)), 3)
    0.801
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

__all__ = [
    "cohen_f", "cohen_h", "cohen_w_two_rows", "cox_events_freedman", "cox_events_schoenfeld", "power_anova",
    "power_chisq", "power_cox_freedman", "power_cox_schoenfeld", "power_normal", "power_t_one_sample",
    "power_t_two_sample", "smallest_n",
]


def _t_power(nc, df, alpha, sides):
    nc, df = np.asarray(nc, float), np.asarray(df, float)
    if sides == 2:
        crit = stats.t.ppf(1 - alpha / 2, df)
        # SciPy's nct.cdf returns NaN far in the lower tail for large noncentrality; that tail is below
        # Phi(-|nc|) (T < -crit needs Z < -nc), so it is 0 wherever that bound is negligible.
        lower = np.where(stats.norm.cdf(-np.abs(nc)) > 1e-12, stats.nct.cdf(-crit, df, nc), 0.0)
        return stats.nct.sf(crit, df, nc) + lower
    return stats.nct.sf(stats.t.ppf(1 - alpha, df), df, nc)


def power_t_one_sample(d, n, alpha, sides):
    """Power of a one-sample (or paired) t test with ``n`` observations (pairs) and effect size ``d``."""
    n = np.asarray(n, float)
    return _t_power(np.abs(d) * np.sqrt(n), n - 1, alpha, sides)


def power_t_two_sample(d, n_per_group, alpha, sides):
    """Power of a two-sample t test with equal groups of ``n_per_group`` and pooled-SD effect size ``d``."""
    n = np.asarray(n_per_group, float)
    return _t_power(np.abs(d) * np.sqrt(n / 2), 2 * n - 2, alpha, sides)


def power_anova(f, n_per_group, k, alpha):
    """Power of a one-way ANOVA F test with ``k`` equal groups of ``n_per_group``, Cohen's ``f``."""
    total = np.asarray(n_per_group, float) * k
    df2 = total - k
    crit = stats.f.ppf(1 - alpha, k - 1, df2)
    return stats.ncf.sf(crit, k - 1, df2, np.asarray(f, float) ** 2 * total)


def power_chisq(w, n_total, df, alpha):
    """Power of a chi-square test with ``df`` degrees of freedom, Cohen's ``w`` and ``n_total`` subjects."""
    crit = stats.chi2.ppf(1 - alpha, df)
    return stats.ncx2.sf(crit, df, np.asarray(w, float) ** 2 * np.asarray(n_total, float))


def power_normal(h, n, alpha, sides, *, two_sample):
    """Power of a z test on Cohen's ``h``: one sample of ``n``, or two equal groups of ``n`` each."""
    n = np.asarray(n, float)
    shift = np.abs(h) * np.sqrt(n / 2 if two_sample else n)
    if sides == 2:
        z = stats.norm.ppf(1 - alpha / 2)
        return stats.norm.cdf(shift - z) + stats.norm.cdf(-shift - z)
    return stats.norm.cdf(shift - stats.norm.ppf(1 - alpha))


def cohen_h(p1: float, p0: float) -> float:
    """Cohen's arcsine effect size between two proportions (absolute value)."""
    return abs(2 * math.asin(math.sqrt(p1)) - 2 * math.asin(math.sqrt(p0)))


def cohen_f(means: list[float], sd: float) -> float:
    """Cohen's f: population SD of the group means (divide by k) over the common within-group SD."""
    grand = sum(means) / len(means)
    return math.sqrt(sum((m - grand) ** 2 for m in means) / len(means)) / sd


def cohen_w_two_rows(row_a: list[float], row_b: list[float]) -> float:
    """Cohen's w of a 2 x c table with two equally sized groups and outcome distributions ``row_a``, ``row_b``."""
    total = 0.0
    for a, b in zip(row_a, row_b):
        col = 0.5 * a + 0.5 * b
        for cell in (0.5 * a, 0.5 * b):
            expected = 0.5 * col
            total += (cell - expected) ** 2 / expected
    return math.sqrt(total)


def _z(alpha: float, sides: int, power: float) -> float:
    return stats.norm.ppf(1 - alpha / sides) + stats.norm.ppf(power)


def cox_events_schoenfeld(hr: float, alpha: float, sides: int, power: float, p_alloc: float) -> float:
    """Schoenfeld's required number of events (continuous, before rounding)."""
    return _z(alpha, sides, power) ** 2 / (p_alloc * (1 - p_alloc) * math.log(hr) ** 2)


def cox_events_freedman(hr: float, alpha: float, sides: int, power: float) -> float:
    """Freedman's required number of events for equal arms (continuous, before rounding)."""
    return _z(alpha, sides, power) ** 2 * (1 + hr) ** 2 / (1 - hr) ** 2


def power_cox_schoenfeld(hr, events, alpha, sides, p_alloc):
    """Power from Schoenfeld's formula with ``events`` expected events (the far tail is ignored)."""
    shift = np.sqrt(np.asarray(events, float) * p_alloc * (1 - p_alloc)) * np.abs(np.log(hr))
    return stats.norm.cdf(shift - stats.norm.ppf(1 - alpha / sides))


def power_cox_freedman(hr, events, alpha, sides):
    """Power from Freedman's formula for equal arms with ``events`` expected events."""
    shift = np.sqrt(np.asarray(events, float)) * np.abs(1 - np.asarray(hr)) / (1 + np.asarray(hr))
    return stats.norm.cdf(shift - stats.norm.ppf(1 - alpha / sides))


def smallest_n(power_at, target: float, lo: int = 2, hi: int = 1_000_000) -> int:
    """The smallest integer ``n`` in [lo, hi] with ``power_at(n) >= target`` (power increasing in n).

    Gallops up from ``lo`` (doubling) to bracket the answer, then bisects; huge ``n`` are never evaluated
    (scipy's noncentral t loses accuracy at very large noncentrality).

    Raises:
        ValueError: Even ``hi`` does not reach the target.
    """
    top = lo
    while float(power_at(top)) < target:
        if top >= hi:
            raise ValueError(f"power at n={hi} is below the target {target}; the effect is too small")
        lo, top = top + 1, min(hi, top * 2)
    while lo < top:
        mid = (lo + top) // 2
        if float(power_at(mid)) >= target:
            top = mid
        else:
            lo = mid + 1
    return lo
