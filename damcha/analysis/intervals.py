"""Student-t intervals of a mean: over seeds (the evidence) or over validation inputs (paired
differences of the metric ablation table)."""

from __future__ import annotations

import math

import numpy as np


def t_quantile(q: float, df: int) -> float:
    """The q quantile of Student's t with df degrees of freedom (exact, scipy)."""
    from scipy.stats import t

    return float(t.ppf(q, df))


def mean_interval(values) -> tuple[float, float, float]:
    """(mean, low, high): the mean and its 95% Student-t interval (NaN width for one value)."""
    v = np.asarray(values, dtype=float)
    m = float(v.mean())
    if len(v) < 2:
        return m, float("nan"), float("nan")
    half = t_quantile(0.975, len(v) - 1) * float(v.std(ddof=1)) / math.sqrt(len(v))
    return m, m - half, m + half
