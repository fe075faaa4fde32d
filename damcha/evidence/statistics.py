"""The statistics of a verdict: intervals over seeds, paired tests, Holm's correction, the verdict rule."""

from __future__ import annotations

import math

import numpy as np

from damcha.analysis.intervals import mean_interval, t_quantile  # noqa: F401 — the evidence's intervals

VERDICT_RULE = ("For each arm compared with the reference arm, paired by seed: the mean difference in the "
                "direction the paper claims, its 95% Student-t interval over seeds (exact quantiles) and its two-sided "
                "paired t-test p-value; ratios (time, memory, FLOPs, parameters, relative errors) are compared as log "
                "ratios, shown as geometric means. A comparison holds when its interval lies wholly on the paper's "
                "side of zero. A claim holds when every counted comparison holds (an intersection-union test: no "
                "correction needed); it does not hold when a counted comparison goes against the paper and stays "
                "significant after Holm's correction over the claim's counted comparisons (family-wise 5%); otherwise "
                "it is inconclusive at this scale, and the minimum difference these seeds could detect (80% power, "
                "5% two-sided) is shown beside the observed one. Control arms, and contrasts between other arms, are "
                "reported, never counted. A claim whose task fails a construction check or whose easiest level its "
                "named models do not learn gets no verdict, with the reason. A claim that holds by the arithmetic of "
                "the mechanism rather than by anything learned says so.")
HOLDS, FAILS, INCONCLUSIVE = "holds", "does not hold", "inconclusive at this scale"
SANITY_FAILED = "not tested: the sanity check failed"
FAMILY_ALPHA, POWER = 0.05, 0.80


def paired_test(gains) -> dict:
    """Mean, 95% interval, two-sided p-value, spread and minimum detectable difference of per-seed
    differences (the smallest true mean difference a two-sided 5% test finds with 80% power at this n)."""
    from scipy.stats import t

    g = np.asarray(gains, dtype=float)
    m, lo, hi = mean_interval(g)
    n = len(g)
    if n < 2:
        return {"mean": m, "low": lo, "high": hi, "p": float("nan"), "sd": float("nan"), "mdd": float("nan"), "n": n}
    sd = float(g.std(ddof=1))
    se = sd / math.sqrt(n)
    p = float(2 * t.sf(abs(m) / se, n - 1)) if se > 0 else (0.0 if m != 0 else 1.0)
    mdd = (t_quantile(0.975, n - 1) + t_quantile(POWER, n - 1)) * se
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
    order = sorted(range(len(p_values)), key=lambda i: (math.isnan(p_values[i]), p_values[i]))
    rejected = [False] * len(p_values)
    for rank, i in enumerate(order):
        if math.isnan(p_values[i]) or p_values[i] > alpha / (len(p_values) - rank):
            break
        rejected[i] = True
    return rejected


def claim_verdict(comparisons: list[dict]) -> str:
    """comparisons: the counted ones, each with its verdict, mean gain and p. All hold -> holds; one
    against the paper and rejected under Holm -> does not hold; else inconclusive."""
    if comparisons and all(c["verdict"] == HOLDS for c in comparisons):
        return HOLDS
    rejected = holm([c["p"] for c in comparisons])
    if any(r and c["gain"] < 0 for r, c in zip(rejected, comparisons)):
        return FAILS
    return INCONCLUSIVE
