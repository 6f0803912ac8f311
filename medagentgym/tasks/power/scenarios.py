"""Clinical scenarios of the N-PowerAI family: parameter samplers and question text per design.

``sample(design, target, rng)`` draws one instance's parameters (rounded, plausible clinical values, several
scenarios per design, effect given raw or standardised); ``question(design, target, params)`` writes the question,
stating every convention the answer depends on: sidedness and alpha, the power method, "per group" or "total",
and "round up to the next integer". Parameters are JSON-serialisable and feed medagentgym/tasks/power/snippets.py.

Example:
    >>> import random
    >>> p = sample("two_sample_t", "size", random.Random(0))
    >>> "per group" in question("two_sample_t", "size", p) or "in total" in question("two_sample_t", "size", p)
    True
"""

from __future__ import annotations

import math
import random
from statistics import NormalDist
from typing import Any

from scipy import special

__all__ = ["question", "sample"]

_ALPHAS = (0.01, 0.05, 0.05, 0.05, 0.1)
_POWERS = (0.8, 0.8, 0.85, 0.9, 0.9, 0.95)

# (setting text, reference-mean choices, |difference| range, SD range, decimals)
_ONE_SAMPLE = (
    (("A hypertension clinic plans a single-arm study of a low-sodium diet. In the reference population mean "
     "systolic blood pressure is {mu0} mmHg (SD {sd} mmHg); on the diet the investigators expect a mean of {mu1} "
     "mmHg."), (128, 130, 132, 135, 138, 140), (2.0, 10.0), (8.0, 20.0), 1),
    (("An endocrinology service asks whether the mean HbA1c of patients using a glucose-monitoring app differs from "
     "the regional average of {mu0} % (SD {sd} %); they expect a mean of {mu1} %."),
     (7.0, 7.2, 7.5, 7.8, 8.0, 8.3), (0.15, 0.8), (0.8, 1.6), 2),
    (("A transplant unit will measure eGFR one year after switching recipients to a new immunosuppressant. The "
     "registry mean is {mu0} mL/min/1.73 m² (SD {sd}); the anticipated mean is {mu1} mL/min/1.73 m²."),
     (45, 50, 55, 60, 65), (2.5, 10.0), (10.0, 20.0), 1),
)
# (setting text, mean-difference range, SD-of-differences range, single-measurement SD range, decimals)
_PAIRED = (
    (("In a before/after study, LDL cholesterol is measured in each patient before and 12 weeks after starting a "
     "new statin. The expected mean reduction is {mean_diff} mg/dL."), (5.0, 25.0), (15.0, 45.0), (25.0, 40.0), 1),
    (("Patients with chronic low-back pain rate their pain (0-10) before and after a 6-week physiotherapy "
     "programme. The expected mean improvement is {mean_diff} points."), (0.4, 2.0), (1.5, 3.5), (1.8, 2.8), 2),
    (("Resting heart rate is recorded in each patient before and after beta-blocker titration. The expected mean "
     "decrease is {mean_diff} beats/min."), (2.0, 10.0), (6.0, 18.0), (9.0, 14.0), 1),
)
# (setting text, group-1 mean choices, |difference| range, SD range, decimals)
_TWO_SAMPLE = (
    (("A trial randomises adults with prediabetes to one of two diets and compares fasting glucose at 6 months. "
     "Expected means are {mean1} mg/dL and {mean2} mg/dL."), (95, 100, 105, 110), (2.0, 12.0), (10.0, 25.0), 1),
    (("A rehabilitation trial compares 6-minute walk distance after a new programme versus usual care. Expected "
     "means are {mean1} m and {mean2} m."), (320, 350, 380, 400), (12.0, 50.0), (50.0, 100.0), 0),
    (("A trial compares HbA1c at 6 months between a new oral agent and the standard agent. Expected means are "
     "{mean1} % and {mean2} %."), (7.0, 7.4, 7.8, 8.1), (0.15, 0.7), (0.8, 1.5), 2),
)
# (setting text, group-mean range, SD range, decimals)
_ANOVA = (
    (("A diabetes education study compares {k} teaching methods on a knowledge score (0-100). Expected mean scores "
     "are {means_text}, with a common within-group SD of {sd}."), (55.0, 75.0), (8.0, 16.0), 1),
    (("A trial compares {k} postoperative analgesic regimens on pain at 24 hours (visual analogue scale, 0-100 mm). "
     "Expected means are {means_text} mm, with a common SD of {sd} mm."), (25.0, 50.0), (12.0, 25.0), 1),
    (("A weight-management study compares {k} diet programmes on weight loss at 6 months. Expected mean losses are "
     "{means_text} kg, with a common SD of {sd} kg."), (2.0, 7.0), (2.5, 6.0), 2),
)
# (setting text, outcome levels, name of group A, name of group B)
_CHISQ = (
    ("A survey compares depression severity ({levels}) between women and men, recruiting equal numbers of each.",
     ("none", "mild", "moderate", "moderately severe", "severe"), "women", "men"),
    (("A study compares self-rated health ({levels}) between patients with and without type 2 diabetes, "
     "recruiting equal numbers of each."), ("poor", "fair", "good", "very good", "excellent"), ("patients with "
     "diabetes"), "patients without diabetes"),
    (("A cross-sectional study compares smoking status ({levels}) between nurses and physicians, recruiting equal "
     "numbers of each."), ("never", "former", "current"), "nurses", "physicians"),
)
# (setting, p0 range, change range, sign of the change)
_ONE_PROP = (
    (("With standard induction chemotherapy, {p0_pct} % of patients reach complete remission. A phase II study of "
     "a new regimen expects a remission rate of {p1_pct} %."), (0.3, 0.55), (0.08, 0.2), 1),
    (("The 6-month abstinence rate with usual smoking-cessation counselling is {p0_pct} %. A single-arm study of a "
     "new programme expects {p1_pct} %."), (0.08, 0.2), (0.05, 0.15), 1),
    (("Seroconversion after the licensed vaccine is {p0_pct} %. A single-arm study of a new adjuvanted vaccine "
     "expects {p1_pct} %."), (0.6, 0.8), (0.06, 0.15), 1),
)
_TWO_PROP = (
    (("A trial compares surgical-site infection with antibiotic-coated versus plain sutures; expected infection "
     "rates are {p1_pct} % and {p2_pct} %."), (0.08, 0.16), (0.03, 0.07), -1),
    (("A transitional-care programme aims to reduce 30-day readmission; expected rates are {p1_pct} % with usual "
     "care and {p2_pct} % with the programme."), (0.15, 0.25), (0.04, 0.1), -1),
    (("A trial compares clinical response to a biologic versus placebo; expected response rates are {p1_pct} % "
     "(placebo) and {p2_pct} % (biologic)."), (0.15, 0.35), (0.1, 0.25), 1),
)
_COX = (
    ("A randomised trial of vitamin A supplementation in retinitis pigmentosa compares time to a 50 % loss of "
    "ERG amplitude between treated and control patients."),
    "An adjuvant-therapy trial after colon-cancer resection compares disease-free survival between arms.",
    ("A cardiovascular trial compares time to the first major adverse cardiac event between a new lipid-lowering "
    "drug and placebo."),
)


def _r(rng: random.Random, lo: float, hi: float, digits: int) -> float:
    value = round(rng.uniform(lo, hi), digits)
    return int(value) if digits == 0 else value


def _approx_n(scale: float, alpha: float, sides: int, power: float) -> float:
    """Normal-approximation units of information needed: ((z_a + z_b) / scale)^2."""
    z = NormalDist().inv_cdf
    return ((z(1 - alpha / sides) + z(power)) / scale) ** 2


def _chi_lambda(df: int, alpha: float, power: float) -> float:
    """The chi-square noncentrality at which a level-alpha test with ``df`` reaches ``power``."""
    return float(special.chndtrinc(special.chdtri(df, alpha), df, 1 - power))


def _t_params(design: str, rng: random.Random) -> tuple[dict[str, Any], float]:
    """Raw or standardised inputs of a t design, and Cohen's d."""
    p: dict[str, Any] = {}
    if design == "one_sample_t":
        i = rng.randrange(len(_ONE_SAMPLE))
        _, bases, (dlo, dhi), (slo, shi), dig = _ONE_SAMPLE[i]
        mu0, diff = rng.choice(bases), _r(rng, dlo, dhi, dig) * rng.choice((-1, 1))
        p = {"scenario": i, "mu0": mu0, "mu1": round(mu0 + diff, dig), "sd": _r(rng, slo, shi, dig)}
        d = abs(p["mu1"] - mu0) / p["sd"]
    elif design == "paired_t":
        i = rng.randrange(len(_PAIRED))
        _, (dlo, dhi), (slo, shi), (sdlo, sdhi), dig = _PAIRED[i]
        p = {"scenario": i, "mean_diff": _r(rng, dlo, dhi, dig)}
        if rng.random() < 0.4:
            p.update(sd=_r(rng, sdlo, sdhi, dig), rho=rng.choice((0.3, 0.4, 0.5, 0.6, 0.7)))
            d = p["mean_diff"] / (p["sd"] * math.sqrt(2 * (1 - p["rho"])))
        else:
            p["sd_diff"] = _r(rng, slo, shi, dig)
            d = p["mean_diff"] / p["sd_diff"]
    else:
        i = rng.randrange(len(_TWO_SAMPLE))
        _, bases, (dlo, dhi), (slo, shi), dig = _TWO_SAMPLE[i]
        mean1 = rng.choice(bases)
        p = {"scenario": i, "mean1": mean1, "mean2": round(mean1 + _r(rng, dlo, dhi, dig) * rng.choice((-1, 1)), dig)}
        if rng.random() < 0.3:
            p.update(sd1=_r(rng, slo, shi, dig), sd2=_r(rng, slo, shi, dig))
            d = abs(p["mean1"] - p["mean2"]) / math.sqrt((p["sd1"] ** 2 + p["sd2"] ** 2) / 2)
        else:
            p["sd"] = _r(rng, slo, shi, dig)
            d = abs(p["mean1"] - p["mean2"]) / p["sd"]
    if rng.random() < 0.25:  # standardised form: Cohen's d stated directly
        d = round(rng.uniform(0.15, 1.2), 2)
        p = {"scenario": p["scenario"], "d": d}
    return p, d


def sample(design: str, target: str, rng: random.Random) -> dict[str, Any]:
    """Draw the parameters of one instance of ``design``/``target`` (JSON-serialisable)."""
    alpha, sides, power = rng.choice(_ALPHAS), rng.choice((2, 2, 2, 1)), rng.choice(_POWERS)
    goal = rng.uniform(0.15, 0.95)  # the power a power item is sized for, so answers spread over (0, 1)
    common: dict[str, Any] = {"alpha": alpha}
    if design in ("one_sample_t", "paired_t", "two_sample_t"):
        p, d = _t_params(design, rng)
        info = _approx_n(max(d, 1e-3), alpha, sides, goal) * (2 if design == "two_sample_t" else 1)
        common["sides"] = sides
    elif design == "anova":
        i, k = rng.randrange(len(_ANOVA)), rng.choice((3, 4, 5))
        _, (lo, hi), (slo, shi), dig = _ANOVA[i]
        p = {"scenario": i, "k": k, "means": [_r(rng, lo, hi, dig) for _ in range(k)], "sd": _r(rng, slo, shi, dig)}
        grand = sum(p["means"]) / k
        f = math.sqrt(sum((m - grand) ** 2 for m in p["means"]) / k) / p["sd"]
        if rng.random() < 0.3:
            f = round(rng.uniform(0.1, 0.5), 2)
            p = {"scenario": i, "k": k, "f": f}
        info = _chi_lambda(k - 1, alpha, goal) / max(f, 1e-3) ** 2 / k
    elif design == "chisq":
        p, w = _chisq_params(rng)
        info = _chi_lambda(p["df"], alpha, goal) / max(w, 1e-3) ** 2
    elif design in ("one_proportion", "two_proportions"):
        p, h = _prop_params(design, rng)
        info = _approx_n(max(h, 1e-3), alpha, sides, goal) * (2 if design == "two_proportions" else 1)
        common["sides"] = sides
    else:
        p, info = _cox_params(design, rng, alpha, sides, goal)
        common["sides"] = sides
    p.update(common)
    if design in ("two_sample_t", "anova", "two_proportions"):
        p["report"] = rng.choice(("per_group", "total"))
    if target == "power":
        groups = {"two_sample_t": 2, "two_proportions": 2, "anova": p.get("k", 1)}.get(design, 1)
        n = max(3, round(info * rng.uniform(0.9, 1.1)))
        p["n"] = n * groups if p.get("report") == "total" else n
    else:
        p["power"] = power
    return p


def _chisq_params(rng: random.Random) -> tuple[dict[str, Any], float]:
    i = rng.randrange(len(_CHISQ))
    levels = len(_CHISQ[i][1]) if i != 0 else rng.choice((3, 4, 5))
    if rng.random() < 0.3:
        r = rng.choice((2, 3, 4))
        w = round(rng.uniform(0.1, 0.45), 2)
        return {"scenario": i, "w": w, "df": (r - 1) * (levels - 1), "arms": r, "levels": levels}, w
    while True:
        cuts = sorted(rng.sample(range(5, 96), levels - 1))
        row_a = [b - a for a, b in zip([0] + cuts, cuts + [100])]
        row_b = [max(1, x + rng.randint(-12, 12)) for x in row_a]
        row_b[-1] += 100 - sum(row_b)
        if row_b[-1] >= 1 and min(row_a) >= 2:
            break
    row_a, row_b = [x / 100 for x in row_a], [x / 100 for x in row_b]
    total = 0.0
    for a, b in zip(row_a, row_b):
        col = 0.5 * a + 0.5 * b
        total += sum((cell - 0.5 * col) ** 2 / (0.5 * col) for cell in (0.5 * a, 0.5 * b))
    return {"scenario": i, "row_a": row_a, "row_b": row_b, "df": levels - 1, "levels": levels}, math.sqrt(total)


def _prop_params(design: str, rng: random.Random) -> tuple[dict[str, Any], float]:
    table = _ONE_PROP if design == "one_proportion" else _TWO_PROP
    i = rng.randrange(len(table))
    _, (lo, hi), (clo, chi), sign = table[i]
    base = round(rng.uniform(lo, hi), 2)
    other = round(base + sign * rng.uniform(clo, chi), 2)
    keys = ("p0", "p1") if design == "one_proportion" else ("p1", "p2")
    h = abs(2 * math.asin(math.sqrt(other)) - 2 * math.asin(math.sqrt(base)))
    return {"scenario": i, keys[0]: base, keys[1]: other}, h


def _cox_params(design: str, rng: random.Random, alpha: float, sides: int, goal: float) -> tuple[dict, float]:
    i, hr = rng.randrange(len(_COX)), round(rng.uniform(0.5, 0.85), 2)
    if design == "cox_schoenfeld":
        alloc = rng.choice(((1, 1), (1, 1), (2, 1), (3, 2)))
        p = {"scenario": i, "hr": hr, "alloc": list(alloc), "p_event": round(rng.uniform(0.2, 0.8), 2)}
        share = alloc[0] / sum(alloc)
        events = _approx_n(abs(math.log(hr)) * math.sqrt(share * (1 - share)), alpha, sides, goal)
        return p, events / p["p_event"]
    p_control = round(rng.uniform(0.3, 0.8), 2)
    p_treated = round(1 - (1 - p_control) ** hr, 2)  # proportional hazards: S_t = S_c ** HR
    p = {"scenario": i, "hr": hr, "p_control": p_control, "p_treated": p_treated}
    events = _approx_n(abs(1 - hr) / (1 + hr), alpha, sides, goal)
    return p, events / ((p_control + p_treated) / 2)


_CHISQ_OUTCOMES = ("depression severity", "self-rated health", "smoking status")


def _pct(x: float) -> str:
    return f"{x * 100:g}"


def _sides_text(p: dict[str, Any], direction: str) -> str:
    if p["sides"] == 2:
        return f"a two-sided test at significance level alpha = {p['alpha']}"
    return f"a one-sided test (in the direction of the expected {direction}) at significance level alpha = {p['alpha']}"


def _setting(design: str, p: dict[str, Any]) -> str:
    i = p["scenario"]
    if design == "one_sample_t":
        text = _ONE_SAMPLE[i][0]
        if "d" in p:
            head = text.split(". ")[0] if i == 0 else text.split(" differs")[0] + " differs from the regional average"
            return (head.rstrip(".") + f". The investigators expect a standardised effect size (Cohen's d, mean "
                    f"difference / SD) of {p['d']}.")
        return text.format(**p)
    if design == "paired_t":
        text = _PAIRED[i][0].format(mean_diff=p.get("mean_diff", "?"))
        if "d" in p:
            return text.split(" The expected")[0] + (f" The expected effect size is Cohen's d = {p['d']} "
                                                     "(mean difference / SD of the within-patient differences).")
        if "rho" in p:
            return text + (f" The SD of single measurements is {p['sd']} and the correlation between the two "
                           f"measurements of a patient is {p['rho']}; the SD of the differences is "
                           "SD * sqrt(2 * (1 - correlation)).")
        return text + f" The SD of the within-patient differences is {p['sd_diff']}."
    if design == "two_sample_t":
        text = _TWO_SAMPLE[i][0]
        if "d" in p:
            return text.split(" Expected")[0] + f" The expected effect size is Cohen's d = {p['d']} (pooled SD)."
        text = text.format(**p)
        if "sd1" in p:
            return text + (f" The SDs are {p['sd1']} and {p['sd2']}; use the pooled SD "
                           "sqrt((SD1^2 + SD2^2) / 2).")
        return text + f" The common SD is {p['sd']}."
    if design == "anova":
        text = _ANOVA[i][0]
        if "f" in p:
            return text.split(" Expected")[0].format(k=p["k"]) + f" The anticipated effect size is Cohen's f = {p['f']}."
        return text.format(k=p["k"], sd=p["sd"], means_text=", ".join(f"{m:g}" for m in p["means"])) + (
            " Cohen's f is the standard deviation of the group means (dividing by the number of groups) over the "
            "common SD.")
    if design == "chisq":
        levels = _CHISQ[i][1][: p["levels"]] if i == 0 else _CHISQ[i][1]
        if "w" in p:
            return (f"A study compares {_CHISQ_OUTCOMES[i]} ({', '.join(levels)}) across {p['arms']} equally sized "
                    f"groups with a chi-square test of independence. The anticipated effect size is Cohen's w = "
                    f"{p['w']}, with {p['df']} degrees of freedom.")
        text, _, name_a, name_b = _CHISQ[i]
        dist = "; ".join(f"{name}: " + ", ".join(f"{lv} {_pct(x)} %" for lv, x in zip(levels, row))
                         for name, row in ((name_a, p["row_a"]), (name_b, p["row_b"])))
        return (text.format(levels=", ".join(levels)) + f" Expected distributions: {dist}. Use a chi-square test of "
                "independence; compute Cohen's w from the expected joint cell proportions (equal group sizes).")
    if design == "one_proportion":
        return _ONE_PROP[i][0].format(p0_pct=_pct(p["p0"]), p1_pct=_pct(p["p1"]))
    if design == "two_proportions":
        return _TWO_PROP[i][0].format(p1_pct=_pct(p["p1"]), p2_pct=_pct(p["p2"]))
    text = _COX[i] + f" The hypothesised hazard ratio is {p['hr']}."
    if design == "cox_schoenfeld":
        a, b = p["alloc"]
        alloc = "equally" if a == b else f"{a}:{b} (treatment:control)"
        return text + (f" Patients are randomised {alloc}, and the probability that a patient has an event during "
                       f"follow-up is {p['p_event']}.")
    return text + (f" Randomisation is 1:1; the probability of an event during follow-up is {p['p_control']} in the "
                   f"control arm and {p['p_treated']} in the treatment arm.")


_METHOD = {
    "one_sample_t": "Use the exact power of the one-sample t test (noncentral t distribution).",
    "paired_t": "Use the exact power of the paired t test (noncentral t distribution on the differences).",
    "two_sample_t": "Use the exact power of the two-sample t test with equal group sizes (noncentral t).",
    "anova": "Use the exact power of the one-way ANOVA F test with equal group sizes (noncentral F, "
             "noncentrality f^2 times the total sample size).",
    "chisq": "Use the noncentral chi-square distribution with noncentrality w^2 times the total sample size.",
    "one_proportion": "Use the normal approximation with Cohen's arcsine effect size "
                      "h = |2 asin(sqrt(p1)) - 2 asin(sqrt(p0))|.",
    "two_proportions": "Use the normal approximation with Cohen's arcsine effect size "
                       "h = |2 asin(sqrt(p1)) - 2 asin(sqrt(p2))| and equal group sizes.",
}
_UNIT = {"one_sample_t": "patients", "paired_t": "patients (pairs of measurements)", "one_proportion": "patients"}


def _cox_method(design: str, p: dict[str, Any], target: str) -> str:
    z = "z_(1-alpha/2)" if p["sides"] == 2 else "z_(1-alpha)"
    if design == "cox_schoenfeld":
        formula = f"events = ({z} + z_(power))^2 / (p (1 - p) ln(HR)^2), with p the share randomised to treatment"
        shift = "sqrt(events p (1 - p)) |ln HR|"
    else:
        formula = f"events = ({z} + z_(power))^2 (1 + HR)^2 / (1 - HR)^2"
        shift = "sqrt(events) |1 - HR| / (1 + HR)"
        formula += ", and the average of the two arms' event probabilities as the probability of an event"
    name = "Schoenfeld" if design == "cox_schoenfeld" else "Freedman"
    if target == "power":
        return (f"Use {name}'s formula: with expected events = N x P(event) (not rounded), power = "
                f"Phi({shift} - {z}), ignoring the opposite tail.")
    return f"Use {name}'s formula for the required number of events: {formula}."


def question(design: str, target: str, p: dict[str, Any]) -> str:
    """The question text of one instance, with its conventions stated."""
    direction = "change" if design not in ("cox_schoenfeld", "cox_freedman") else "benefit"
    parts = [_setting(design, p)]
    if "sides" in p:
        parts.append(f"The analysis uses {_sides_text(p, direction)}.")
    else:
        parts.append(f"The test uses significance level alpha = {p['alpha']}.")
    if design in ("cox_schoenfeld", "cox_freedman"):
        parts.append(_cox_method(design, p, target))
    else:
        parts.append(_METHOD[design])
    groups = {"two_sample_t": "2 groups", "two_proportions": "2 groups", "anova": f"{p.get('k')} groups"}.get(design)
    if target == "power":
        if design in ("cox_schoenfeld", "cox_freedman"):
            size = f"{p['n']} patients in total"
        elif groups:
            size = (f"{p['n']} patients in total, split equally over the {groups}" if p["report"] == "total"
                    else f"{p['n']} patients per group ({groups})")
        else:
            size = f"{p['n']} {'subjects in total' if design == 'chisq' else _UNIT[design]}"
        parts.append(f"With {size}, what is the statistical power? Report the power as a proportion between 0 and 1 "
                     "(for example 0.83), not as a percentage.")
        return " ".join(parts)
    goal = f"{p['power'] * 100:g} % power"
    if target == "events":
        parts.append(f"How many events are required for {goal}? Round the number of events up to the next integer.")
    elif design in ("cox_schoenfeld", "cox_freedman"):
        parts.append(f"How many patients in total are required for {goal}? Round the number of events up to the next "
                     "integer first, then divide by the probability of an event and round up to the next integer.")
    elif groups:
        per = "per group" if p["report"] == "per_group" else f"in total (all {groups} together, equal sizes)"
        parts.append(f"How many patients are required {per} for {goal}? Report the smallest integer group size "
                     f"that reaches the target power (round up to the next integer)"
                     + (", then multiply by the number of groups." if p["report"] == "total" else "."))
    else:
        unit = "subjects in total" if design == "chisq" else _UNIT[design]
        parts.append(f"How many {unit} are required for {goal}? Report the smallest integer sample size that reaches "
                     "the target power (round up to the next integer).")
    return " ".join(parts)
