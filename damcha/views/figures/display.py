"""Copies of figures made lighter for the screen (large heatmaps as block means); exports keep the whole."""

from __future__ import annotations

import warnings

import numpy as np
import plotly.graph_objects as go

from damcha.views.plotly_arrays import figure_copy
from damcha.views.typesetting import has_raw_subscripts, subscripted

# Cells of each kind of grid trace (all such traces of one figure together) that a browser is sent
# to draw: a heatmap is an image, but contours are traced and surfaces meshed in the browser, far slower.
MAX_DISPLAY_CELLS = {"heatmap": 256 * 256, "contour": 96 * 96, "surface": 64 * 64}


def display_copy(fig: go.Figure, max_cells: dict[str, int] | None = None) -> go.Figure:
    """The figure to draw in a browser: when its heatmaps, contours or surfaces hold more cells
    than `max_cells` allows their kind (a 512 x 512 metric, eight 1024 x 1024 attention maps), the
    large panels are replaced by the means of f x f blocks, each with its own f, placed at the
    blocks' centres so overlays drawn in cell coordinates (the head grid) stay where they were.
    Panels of at most SMALL_PANEL_CELLS cells (a 4 x 4 composition map, 8 experts) are never
    pooled: every panel keeps its own resolution. Exports keep the full-resolution original."""
    limits = max_cells or MAX_DISPLAY_CELLS
    factors = pooling_factors([(t.type, np.asarray(t.z).size if t.type in limits and t.z is not None else None)
                               for t in fig.data], limits)
    pools = any(f > 1 for f in factors)
    if not pools and not has_raw_subscripts(fig):
        return fig  # nothing to change: no copy on the way to the screen
    out = subscripted(figure_copy(fig))  # m_i as m with a subscript i on screen too, as in an export
    if not pools:
        return out
    pooled = max(factors)
    for traces in [out.data, *(frame.data for frame in out.frames)]:  # animation frames: as their trace
        for trace, f in zip(traces, factors):
            if f > 1 and trace.type in limits and trace.z is not None:
                _pool_trace(trace, f)
    title = out.layout.title.text or ""
    out.update_layout(title_text=f"{title}<br><sup>display: the largest panels as means of up to {pooled}×{pooled} "
                                 "cells; small panels and exports at full resolution</sup>")
    return out


SMALL_PANEL_CELLS = 64 * 64


def pooling_factors(panels: list[tuple[str, int | None]], limits: dict[str, int]) -> list[int]:
    """One pooling factor per panel (kind, cells): 1 for small panels and kinds that fit; the large
    panels of a kind share what the small ones leave of its budget, each pooled just enough."""
    factors = [1] * len(panels)
    for kind, limit in limits.items():
        mine = [(i, n) for i, (k, n) in enumerate(panels) if k == kind and n]
        if sum(n for _, n in mine) <= limit:
            continue
        large = [(i, n) for i, n in mine if n > SMALL_PANEL_CELLS]
        left = max(limit - sum(n for _, n in mine if n <= SMALL_PANEL_CELLS), limit // 4)
        for i, n in large:
            factors[i] = max(1, int(np.ceil(np.sqrt(n * len(large) / left))))
    return factors


def _pool_trace(trace, f: int) -> None:
    z = np.asarray(trace.z, dtype=float)
    trace.z = block_means(z, f)
    for axis, n in (("x", z.shape[1]), ("y", z.shape[0])):
        given = getattr(trace, axis)
        starts = np.arange(0, n, f)
        centres = starts + (np.minimum(starts + f, n) - 1 - starts) / 2
        setattr(trace, axis, list(given)[::f] if given is not None and len(given) == n else centres)
    trace.customdata = None
    trace.hovertemplate = f"rows %{{y}}, columns %{{x}} (mean of {f}×{f} cells): %{{z:.4f}}<extra></extra>"


def block_means(z: np.ndarray, f: int) -> np.ndarray:
    """Means of f x f blocks of a 2-D array (the last blocks may be smaller). (r, c) -> (ceil(r/f), ceil(c/f))."""
    r, c = z.shape
    padded = np.full((-(-r // f) * f, -(-c // f) * f), np.nan)
    padded[:r, :c] = z
    blocks = padded.reshape(padded.shape[0] // f, f, padded.shape[1] // f, f)
    if not np.isnan(blocks).any():
        return blocks.mean(axis=(1, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a block of NaN only (no key there) stays NaN
        return np.nanmean(blocks, axis=(1, 3))
