"""The statistics of a verdict: intervals over seeds, paired tests, Holm's correction, the verdict rule."""

from __future__ import annotations

import functools
import math

import numpy as np

from damcha.analysis.intervals import mean_interval, t_quantile  # noqa: F401 — the evidence's intervals

VERDICT_RULE = ("For each arm compared with the reference arm, paired by seed: the mean difference in the "
                "direction the paper claims, its 95% Student-t interval over seeds (exact quantiles) and its two-sided "
                "paired t-test p-value; ratios (time, memory, FLOPs, parameters, relative errors) are compared as log "
                "ratios, shown as geometric means. A comparison holds when its interval lies wholly on the paper's "
                "side of zero. A claim holds when every counted comparison holds (an intersection-union test: no "
                "correction needed); it does not hold when a counted comparison goes against the paper and stays "
                "significant after Holm's correction over the claim's counted comparisons (family-wise 5%); it has "
                "no verdict when none of its counted comparisons was measured; otherwise it is inconclusive at this "
                "scale, and the minimum difference these seeds could detect (80% power, "
                "5% two-sided, exact on the noncentral t) is shown beside the observed one and, where the paper "
                "gives both numbers, beside the paper's own difference with the seeds needed to detect it. Control "
                "arms, and contrasts between other arms, are reported, never counted. A claim whose task fails a "
                "construction check, or whose instruments (arms that provably represent the easiest level, never "
                "the arm under judgement) do not learn that level, gets no verdict, with the reason; a judged arm "
                "that misses it is a reported finding with its seeds. A claim whose outcome the arithmetic of the "
                "mechanism fixes is counted apart from learned results, in a neutral colour: confirmed or not.")
HOLDS, FAILS, INCONCLUSIVE = "holds", "does not hold", "inconclusive at this scale"
NO_VERDICT = "no verdict"  # a claim with no counted comparison measured: nothing was tested, nothing is unclear
SANITY_FAILED = "not tested: the sanity check failed"
CONFIRMED, NOT_CONFIRMED = "confirmed by construction", "construction not confirmed"  # outcomes fixed in advance
BY_CONSTRUCTION, LEARNED = "by construction", "learned"  # what a claim's verdict is: kept apart in every tally
CHECK_CONFIRMED = ("confirmed", "tie confirmed")  # a construction check's outcomes that confirm its prediction
FAMILY_ALPHA, POWER = 0.05, 0.80


def power_of_paired_t(noncentrality: float, n: int, alpha: float = FAMILY_ALPHA) -> float:
    """The power of the two-sided paired t-test at level alpha over n pairs when the true mean
    difference is `noncentrality` standard errors (exact: the noncentral t)."""
    from scipy.stats import nct, t

    df, critical = n - 1, float(t.ppf(1 - alpha / 2, n - 1))
    wrong_side = float(nct.cdf(-critical, df, noncentrality))  # scipy gives NaN far in this tail, where it is ~0
    return float(nct.sf(critical, df, noncentrality)) + (0.0 if math.isnan(wrong_side) else wrong_side)


@functools.cache
def detectable_in_standard_errors(n: int, power: float = POWER, alpha: float = FAMILY_ALPHA) -> float:
    """The true mean difference, in standard errors, that the two-sided paired t-test over n pairs
    finds with this power: solved exactly on the noncentral t (5.65 at n = 3, where the textbook
    (t_0.975 + t_0.8) approximation's 5.36 gives 76.6% power)."""
    from scipy.optimize import brentq

    high = 8.0
    while power_of_paired_t(high, n, alpha) < power:  # widen the bracket (the noncentral t fails far out)
        high *= 2
    return float(brentq(lambda lam: power_of_paired_t(lam, n, alpha) - power, 0.0, high, xtol=1e-10))


def seeds_to_detect(effect: float, sd: float, most: int = 1000) -> int | None:
    """The fewest seeds at which a true difference `effect` (spread `sd` per seed) is found with 80%
    power; None when it is not positive or more than `most` would be needed."""
    if not (effect > 0 and sd > 0):
        return None
    for n in range(2, most + 1):
        if detectable_in_standard_errors(n) * sd / math.sqrt(n) <= effect:
            return n
    return None


def paired_test(gains) -> dict:
    """Mean, 95% interval, two-sided p-value, spread and minimum detectable difference of per-seed
    differences (the smallest true mean difference a two-sided 5% test finds with 80% power at this
    n, exact on the noncentral t)."""
    from scipy.stats import t

    g = np.asarray(gains, dtype=float)
    m, lo, hi = mean_interval(g)
    n = len(g)
    if n < 2:
        return {"mean": m, "low": lo, "high": hi, "p": float("nan"), "sd": float("nan"), "mdd": float("nan"), "n": n}
    sd = float(g.std(ddof=1))
    se = sd / math.sqrt(n)
    p = float(2 * t.sf(abs(m) / se, n - 1)) if se > 0 else (0.0 if m != 0 else 1.0)
    mdd = detectable_in_standard_errors(n) * se
    return {"mean": m, "low": lo, "high": hi, "p": p, "sd": sd, "mdd": mdd, "n": n}


def verdict(gains) -> tuple[str, float, float, float]:
    """gains: per-seed improvements in the paper's direction (> 0: as the paper claims).
    Returns (verdict, mean, low, high) of this one comparison (its own 95% interval)."""
    m, lo, hi = mean_interval(gains)
    if math.isnan(lo):
        return INCONCLUSIVE, m, lo, hi
    if lo > 0:
        return HOLDS, m, lo, hi
    if hi < 0:
        return FAILS, m, lo, hi
    return INCONCLUSIVE, m, lo, hi


def holm(p_values: list[float], alpha: float = FAMILY_ALPHA) -> list[bool]:
    """Holm's step-down: which hypotheses are rejected at family-wise level alpha (NaN: never)."""
    return [adjusted <= alpha for adjusted in holm_adjusted(p_values)]


def equivalence_p(mean: float, sd: float, n: int, margin: float) -> float:
    """Two one-sided t-tests (TOST) that the true mean difference lies within ±margin: the larger p."""
    from scipy.stats import t

    if n < 2 or not margin > 0:
        return float("nan")
    se = sd / math.sqrt(n)
    if se == 0:
        return 0.0 if abs(mean) < margin else 1.0
    return float(max(t.sf((mean + margin) / se, n - 1), t.sf((margin - mean) / se, n - 1)))


def construction_outcome(comparison: dict, predicted: str, margin: float) -> tuple[str, float]:
    """Whether a comparison came out as its construction predicts, and the p-value of that check:
    ahead / behind: the 95% interval wholly on that side of zero; tie: TOST within ±margin at 5%."""
    if predicted == "tie":
        p = equivalence_p(comparison["gain"], comparison["sd"], comparison["n"], margin)
        return ("tie confirmed" if p < FAMILY_ALPHA else "tie not confirmed"), p
    if predicted not in ("ahead", "behind"):
        raise ValueError(f"unknown prediction {predicted!r}; expected ahead, behind or tie")
    seen = comparison["low"] > 0 if predicted == "ahead" else comparison["high"] < 0
    return ("confirmed" if seen else "not confirmed"), comparison["p"]


def holm_adjusted(p_values: list[float]) -> list[float]:
    """Holm's adjusted p-values (the smallest family-wise level at which each is rejected; NaN stays NaN)."""
    order = sorted((i for i in range(len(p_values)) if not math.isnan(p_values[i])), key=lambda i: p_values[i])
    adjusted, running = [float("nan")] * len(p_values), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(order) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def reading(comparison: dict) -> str:
    """How a counted comparison may be worded: ahead / behind only where the interval excludes zero and
    Holm's correction over the claim's counted comparisons still rejects; "nominally" where only the
    unadjusted interval does; "within noise" otherwise. A comparison with no spread over seeds (a
    deterministic metric: parameters, FLOPs) is compared directly."""
    if comparison.get("sd") == 0:
        return "ahead (exact)" if comparison["gain"] > 0 else "behind (exact)" if comparison["gain"] < 0 else "equal (exact)"
    side = "ahead" if comparison["low"] > 0 else "behind" if comparison["high"] < 0 else None
    if side is None:
        return "within noise"
    adjusted = comparison.get("holm_p", float("nan"))
    return side if adjusted < FAMILY_ALPHA else f"nominally {side} (Holm-adjusted p {adjusted:.2g})"


def claim_verdict(comparisons: list[dict]) -> str:
    """comparisons: the counted ones, each with its verdict, mean gain and p. None -> no verdict; all
    hold -> holds; one against the paper and rejected under Holm -> does not hold; else inconclusive."""
    if not comparisons:
        return NO_VERDICT
    if all(c["verdict"] == HOLDS for c in comparisons):
        return HOLDS
    rejected = holm([c["p"] for c in comparisons])
    if any(r and c["gain"] < 0 for r, c in zip(rejected, comparisons)):
        return FAILS
    return INCONCLUSIVE
