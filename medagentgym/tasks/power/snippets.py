"""Reference snippets of the N-PowerAI family: readable Python that computes one instance's answer.

``reference_code(design, target, params)`` returns a self-contained program (statsmodels / scipy only) that sets
the variable ``answer``; the family EXECUTES it to obtain the gold answer. Sample sizes are the smallest integer
whose exact power reaches the target (found by stepping from a normal-approximation start, so a snippet needs
only a handful of power evaluations); powers are rounded to 4 decimals.

Example:
    >>> ns = {}
    >>> exec(reference_code("one_sample_t", "size", {"d": 0.5, "alpha": 0.05, "sides": 2, "power": 0.8}), ns)
    >>> ns["answer"]
    34
"""

from __future__ import annotations

from typing import Any

__all__ = ["DESIGNS", "reference_code"]

#: design -> targets it supports.
DESIGNS: dict[str, tuple[str, ...]] = {
    "one_sample_t": ("size", "power"),
    "paired_t": ("size", "power"),
    "two_sample_t": ("size", "power"),
    "anova": ("size", "power"),
    "chisq": ("size", "power"),
    "one_proportion": ("size", "power"),
    "two_proportions": ("size", "power"),
    "cox_schoenfeld": ("size", "events", "power"),
    "cox_freedman": ("size", "power"),
}

_SEARCH = """
# Start from an approximation, then step to the smallest n whose exact power reaches the target.
n = max({lowest}, {start})
while power_at(n) < target:
    n += 1
while n > {lowest} and power_at(n - 1) >= target:
    n -= 1
"""
_Z = "(norm.ppf(1 - alpha / {sides}) + norm.ppf(target))"


def _alt(p: dict[str, Any]) -> str:
    return "two-sided" if p["sides"] == 2 else "larger"


def _effect_t(design: str, p: dict[str, Any]) -> tuple[list[str], str]:
    """Input lines and the expression of Cohen's d for the t designs."""
    if "d" in p:
        return [f"d = {p['d']!r}  # standardised effect size (Cohen's d)"], "d"
    if design == "one_sample_t":
        return [f"mu0, mu1, sd = {p['mu0']!r}, {p['mu1']!r}, {p['sd']!r}  # reference mean, expected mean, SD",
                "d = abs(mu1 - mu0) / sd"], "d"
    if design == "paired_t":
        if "rho" in p:
            return [f"mean_diff, sd, rho = {p['mean_diff']!r}, {p['sd']!r}, {p['rho']!r}",
                    "sd_diff = sd * math.sqrt(2 * (1 - rho))  # SD of the within-patient differences",
                    "d = abs(mean_diff) / sd_diff"], "d"
        return [f"mean_diff, sd_diff = {p['mean_diff']!r}, {p['sd_diff']!r}", "d = abs(mean_diff) / sd_diff"], "d"
    if "sd1" in p:
        return [f"mean1, mean2 = {p['mean1']!r}, {p['mean2']!r}", f"sd1, sd2 = {p['sd1']!r}, {p['sd2']!r}",
                "sd_pooled = math.sqrt((sd1 ** 2 + sd2 ** 2) / 2)", "d = abs(mean1 - mean2) / sd_pooled"], "d"
    return [f"mean1, mean2, sd = {p['mean1']!r}, {p['mean2']!r}, {p['sd']!r}", "d = abs(mean1 - mean2) / sd"], "d"


#: The exact power of a t test, written with scipy's noncentral t. statsmodels' TTestPower/TTestIndPower return
#: NaN for large effects with the pinned SciPy (its lower tail ``nct.cdf(-crit)`` underflows to NaN), which
#: stopped the size search early and dropped power items; that tail is below Phi(-nc), so it is skipped when
#: negligible.
_T_POWER = """def power_at(n):  # {what}
    df, nc = {df}, d * math.sqrt({scale})
    crit = t_dist.ppf(1 - alpha / {sides}, df)
    {tail}"""
_TWO_TAILS = """# Two-sided: both rejection regions. The far one is below Phi(-nc) (scipy gives NaN there for large nc).
    lower = nct.cdf(-crit, df, nc) if norm.cdf(-nc) > 1e-12 else 0.0
    return nct.sf(crit, df, nc) + lower"""


def _t_code(design: str, target: str, p: dict[str, Any]) -> list[str]:
    lines, _ = _effect_t(design, p)
    two = design == "two_sample_t"
    lines = ["from scipy.stats import nct", "from scipy.stats import t as t_dist", "", *lines, _common(p, target)]
    lines.append(_T_POWER.format(
        what=("two equal groups of n (pooled-SD t test)" if two else "n observations (one-sample / paired t test)")
        + f", {_alt(p)}", df="2 * n - 2" if two else "n - 1", scale="n / 2" if two else "n", sides=p["sides"],
        tail=_TWO_TAILS if p["sides"] == 2 else "return nct.sf(crit, df, nc)  # one-sided, in the effect's direction"))
    z = _Z.format(sides=p["sides"])
    # Normal approximation plus Guenther's small-sample correction: usually exact, at most a step or two away.
    start = (f"math.ceil(2 * ({z} / d) ** 2 + norm.ppf(1 - alpha / {p['sides']}) ** 2 / 4)" if two
             else f"math.ceil(({z} / d) ** 2 + norm.ppf(1 - alpha / {p['sides']}) ** 2 / 2)")
    return lines + _finish(p, target, start=start, lowest=2, groups=2 if two else 1)


def _common(p: dict[str, Any], target: str) -> str:
    goal = f"target = {p['power']!r}  # required power" if target != "power" else f"n = {p['n']!r}"
    return f"alpha = {p['alpha']!r}\n{goal}\n"


def _finish(p: dict[str, Any], target: str, *, start: str, lowest: int, groups: int) -> list[str]:
    """Size: search and apply the reporting convention; power: evaluate at the given size."""
    if target == "power":
        lines = []
        if p.get("report") == "total":
            lines = [f"n = n // {groups}  # the stated total is split equally over {groups} groups"]
        return lines + ["answer = round(float(power_at(n)), 4)"]
    lines = [_SEARCH.format(lowest=lowest, start=start).rstrip()]
    if p.get("report") == "total":
        lines.append(f"answer = {groups} * n  # total over {groups} equal groups")
    else:
        lines.append("answer = n")
    return lines


def _anova_code(target: str, p: dict[str, Any]) -> list[str]:
    k = p["k"]
    if "f" in p:
        inputs = [f"f, k = {p['f']!r}, {k}  # Cohen's f, number of groups"]
    else:
        # Cohen's f divides by k (population SD of the means); N-PowerAI's questions use the sample SD (k - 1).
        sample = p.get("f_sd") == "sample"
        inputs = [f"means, sd = {p['means']!r}, {p['sd']!r}", "k = len(means)",
                  "grand = sum(means) / k",
                  (f"f = math.sqrt(sum((m - grand) ** 2 for m in means) / {'(k - 1)' if sample else 'k'}) / sd  "
                   f"# Cohen's f ({'sample' if sample else 'population'} SD of the means)")]
    lines = ["from scipy.special import chdtri, chndtrinc, fdtri, ncfdtrinc",
             "from statsmodels.stats.power import FTestAnovaPower", "", *inputs, _common(p, target),
             "def power_at(n):  # n per group; statsmodels takes the total",
             "    return FTestAnovaPower().power(effect_size=f, nobs=k * n, alpha=alpha, k_groups=k)"]
    if target == "size":
        lines += ["# Start: the noncentrality that gives the target power, refined twice for the F test's df2.",
                  "lam = chndtrinc(chdtri(k - 1, alpha), k - 1, 1 - target)",
                  "for _ in range(2):",
                  "    df2 = max(k * (math.ceil(lam / (f ** 2 * k)) - 1), 1)",
                  "    lam = ncfdtrinc(k - 1, df2, 1 - target, fdtri(k - 1, df2, 1 - alpha))"]
    return lines + _finish(p, target, start="math.ceil(lam / (f ** 2 * k))", lowest=2, groups=k)


def _chisq_code(target: str, p: dict[str, Any]) -> list[str]:
    if "w" in p:
        inputs = [f"w, dof = {p['w']!r}, {p['df']}  # Cohen's w, degrees of freedom"]
    else:
        inputs = [f"row_a = {p['row_a']!r}  # outcome distribution in group A (sums to 1)",
                  f"row_b = {p['row_b']!r}  # outcome distribution in group B (sums to 1)",
                  "# Equal group sizes: joint cell probability = 0.5 * row probability.",
                  "w = 0.0", "for a, b in zip(row_a, row_b):", "    col = 0.5 * a + 0.5 * b",
                  "    for cell in (0.5 * a, 0.5 * b):", "        w += (cell - 0.5 * col) ** 2 / (0.5 * col)",
                  "w = math.sqrt(w)", "dof = len(row_a) - 1  # (2 - 1) * (columns - 1)"]
    lines = ["from scipy.special import chdtri, chndtrinc",
             "from statsmodels.stats.power import GofChisquarePower", "", *inputs, _common(p, target),
             "def power_at(n):  # n = total subjects; n_bins = dof + 1 gives the stated degrees of freedom",
             "    return GofChisquarePower().power(effect_size=w, nobs=n, alpha=alpha, n_bins=dof + 1)"]
    if target == "size":
        lines += ["lam = chndtrinc(chdtri(dof, alpha), dof, 1 - target)  # noncentrality giving the target power"]
    return lines + _finish(p, target, start="math.ceil(lam / w ** 2)", lowest=2, groups=1)


def _prop_code(design: str, target: str, p: dict[str, Any]) -> list[str]:
    two = design == "two_proportions"
    if two:
        inputs = [f"p1, p2 = {p['p1']!r}, {p['p2']!r}  # event proportions in the two groups",
                  "h = abs(proportion_effectsize(p1, p2))  # Cohen's h (arcsine)"]
    else:
        inputs = [f"p0, p1 = {p['p0']!r}, {p['p1']!r}  # reference and expected proportions",
                  "h = abs(proportion_effectsize(p1, p0))  # Cohen's h (arcsine)"]
    ratio = "1.0" if two else "0"
    lines = ["from statsmodels.stats.power import NormalIndPower",
             "from statsmodels.stats.proportion import proportion_effectsize", "", *inputs, _common(p, target),
             f"def power_at(n):  # ratio={ratio}: {'two equal groups of n' if two else 'one sample of n'}",
             (f"    return NormalIndPower().power(effect_size=h, nobs1=n, alpha=alpha, ratio={ratio}, "
              f"alternative={_alt(p)!r})")]
    start = ("math.ceil(2 * (" if two else "math.ceil((") + _Z.format(sides=p["sides"]) + " / h) ** 2)"
    return lines + _finish(p, target, start=start, lowest=2 if two else 1, groups=2 if two else 1)


def _cox_code(design: str, target: str, p: dict[str, Any]) -> list[str]:
    lines = [f"hr = {p['hr']!r}  # hypothesised hazard ratio", f"alpha, sides = {p['alpha']!r}, {p['sides']}"]
    if design == "cox_schoenfeld":
        lines += [f"share = {p['alloc'][0]} / ({p['alloc'][0]} + {p['alloc'][1]})  # share randomised to treatment",
                  f"p_event = {p['p_event']!r}  # probability of an event during follow-up"]
        factor = "share * (1 - share) * math.log(hr) ** 2"
        shift = "math.sqrt(events * share * (1 - share)) * abs(math.log(hr))"
    else:
        lines += [f"p_control, p_treated = {p['p_control']!r}, {p['p_treated']!r}",
                  "p_event = (p_control + p_treated) / 2  # equal arms: average event probability"]
        factor = "(1 - hr) ** 2 / (1 + hr) ** 2"
        shift = "math.sqrt(events) * abs(1 - hr) / (1 + hr)"
    if target == "power":
        return lines + [f"n = {p['n']!r}  # total participants", "events = n * p_event  # expected events",
                        f"answer = round(float(norm.cdf({shift} - norm.ppf(1 - alpha / sides))), 4)"]
    lines.append(f"target = {p['power']!r}")
    if p.get("report") == "per_group":  # N-PowerAI's convention: events not rounded, half the total per arm
        return lines + [f"events = (norm.ppf(1 - alpha / sides) + norm.ppf(target)) ** 2 / ({factor})",
                        "answer = math.ceil(events / p_event / 2)  # participants per group (equal arms)"]
    lines.append(f"events = math.ceil((norm.ppf(1 - alpha / sides) + norm.ppf(target)) ** 2 / ({factor}))")
    if target == "events":
        return lines + ["answer = events"]
    return lines + ["answer = math.ceil(events / p_event)  # total participants"]


def reference_code(design: str, target: str, params: dict[str, Any]) -> str:
    """The reference program of one instance; executing it sets ``answer``.

    Args:
        design: A key of :data:`DESIGNS`.
        target: ``"size"``, ``"power"`` (or ``"events"`` for Cox/Schoenfeld).
        params: The instance's parameters (see medagentgym/tasks/power/scenarios.py).

    Raises:
        ValueError: Unknown design or target.
    """
    if target not in DESIGNS.get(design, ()):
        raise ValueError(f"unknown design/target {design}/{target}; known: {sorted(DESIGNS)}")
    if design in ("one_sample_t", "paired_t", "two_sample_t"):
        body = _t_code(design, target, params)
    elif design == "anova":
        body = _anova_code(target, params)
    elif design == "chisq":
        body = _chisq_code(target, params)
    elif design in ("one_proportion", "two_proportions"):
        body = _prop_code(design, target, params)
    else:
        body = _cox_code(design, target, params)
    head = ["import math", "from scipy.stats import norm"]
    return "\n".join(head + body) + "\n"
