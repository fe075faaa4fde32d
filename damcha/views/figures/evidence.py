"""Means with their intervals, as the evidence page draws and writes them."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from damcha.views.figures.style import LOG_AXIS


def interval_cell(mean: float, low: float, high: float) -> str:
    """A mean and its 95% interval as a table cell: '—' where there is no value, the mean alone
    where there is no interval (one seed, or a deterministic number), never 'nan'."""
    if mean is None or mean != mean:
        return "—"
    if low is None or high is None or low != low or high != high:
        return f"{mean:.4g} (no interval)"
    return f"{mean:.4g} [{low:.4g}, {high:.4g}]"


def interval_figure(names: Sequence[str], means: Sequence[float], lows: Sequence[float], highs: Sequence[float],
                    title: str = "", y_title: str = "", paper: Sequence[float | None] | None = None,
                    zero_line: bool = False, log_scale: bool = False, horizontal: bool = False) -> go.Figure:
    """Means over seeds with their 95% intervals (error bars), and the paper's number where it has one
    (on an axis of its own: the paper's numbers come from other data sets and scales). zero_line: a
    dotted line at 0, for differences whose sign is the verdict. log_scale: a log value axis, for ratios
    (their means and intervals are geometric, so one wide interval would flatten every other arm on a
    linear axis). horizontal: one row per name, values along x (many long names stay readable)."""
    centres = np.asarray(means, dtype=float)
    up = np.nan_to_num(np.asarray(highs, dtype=float) - centres)
    down = np.nan_to_num(centres - np.asarray(lows, dtype=float))
    value, category = ("x", "y") if horizontal else ("y", "x")
    bars = dict(type="data", array=up, arrayminus=down, visible=True)
    fig = go.Figure(go.Scatter(**{category: list(names), value: centres, f"error_{value}": bars}, mode="markers",
                               name="ours (mean, 95% interval)", marker=dict(size=9)))
    if paper is not None and any(p is not None for p in paper):  # its own data set and scale: its own axis
        fig.add_trace(go.Scatter(**{category: list(names), value: [np.nan if p is None else p for p in paper],
                                    f"{value}axis": f"{value}2"}, mode="markers", name="paper (own axis)",
                                 marker=dict(symbol="diamond-open", size=11)))
        known = [p for p in paper if p is not None]
        span = (max(known) - min(known)) or abs(max(known)) or 1.0
        fig.update_layout({f"{value}axis2": dict(title="paper (its data set)", overlaying=value,
                                                 side="top" if horizontal else "right", showgrid=False,
                                                 range=[min(known) - 0.15 * span, max(known) + 0.15 * span],
                                                 tickmode="auto", nticks=6, tickformat=".4g")})  # its own ticks, not synced to ours
    if zero_line:
        (fig.add_vline if horizontal else fig.add_hline)(0, line_dash="dot", line_color="grey")
    if horizontal:
        fig.update_yaxes(autorange="reversed", automargin=True)  # the first name on top, as it reads
        fig.update_layout(xaxis_title=y_title, height=140 + 26 * len(names), margin=dict(l=60, r=30, t=80, b=50))
    else:
        long_names = max((len(str(n)) for n in names), default=0) > 12 or len(names) > 8
        fig.update_xaxes(tickangle=-45 if long_names else 0, automargin=True)
        fig.update_layout(yaxis_title=y_title, margin=dict(l=60, r=70, t=60, b=80))
    fig.update_layout(title=title)
    if log_scale:
        fig.update_layout({f"{value}axis": LOG_AXIS})  # our axis only; the paper's stays linear
    return fig
