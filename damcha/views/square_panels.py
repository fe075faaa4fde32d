"""Rows of square-celled heatmaps no taller than their panels at the width a figure is exported at. A
heatmap with square cells (scaleanchor) is as high as its width allows; a row laid out for the screen's
height then leaves it small in a tall row, its colour bar as long as the row and far from it. Here such
rows shrink to their panels, the other rows and the gaps between rows keep their pixels, and the
figure is that much shorter."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go


def _keys(fig: go.Figure, prefix: str) -> list[str]:
    return [k for k in fig.layout.to_plotly_json() if k.startswith(prefix)]


def _cells(fig: go.Figure, x_name: str) -> tuple[int, int] | None:
    """(rows, columns) of the heatmap drawn on an x axis, None where it draws none."""
    ref = "x" + x_name[5:]
    for trace in fig.data:
        if trace.type == "heatmap" and (trace.xaxis or "x") == ref and trace.z is not None:
            z = np.asarray(trace.z, dtype=object)
            if z.ndim == 2:
                return z.shape
    return None


def _row_need_px(fig: go.Figure, x_names: list[str], width_px: float, height_px: float) -> float | None:
    """The height a row's square panels take at this width (the tallest of them), None where a panel of
    the row is not a square-celled heatmap (its height is the row's)."""
    need = 0.0
    for x_name in x_names:
        x_axis = fig.layout[x_name]
        y_axis = fig.layout["yaxis" + (x_axis.anchor or "y")[1:]]
        cells = _cells(fig, x_name)
        if cells is None or not y_axis.scaleanchor:
            return None
        (x0, x1), (y0, y1) = x_axis.domain or (0, 1), y_axis.domain or (0, 1)
        rows, cols = cells
        need = max(need, min((y1 - y0) * height_px, (x1 - x0) * width_px * rows / cols))
    return need


def fit_square_rows(fig: go.Figure, width_px: int) -> None:
    """In place: every row of two or more whose panels are all square-celled heatmaps shrunk to the height
    they take at `width_px` (margins as set); y domains, subplot titles, colour bars and paper-placed
    shapes move with their rows."""
    if not fig.layout.height or _keys(fig, "scene"):
        return
    margin = fig.layout.margin
    width = width_px - (margin.l if margin.l is not None else 50) - (margin.r if margin.r is not None else 20)
    plot = fig.layout.height - (margin.t if margin.t is not None else 50) - (margin.b if margin.b is not None else 45)
    rows = _rows(fig)
    if rows is None:
        return
    old, new = [], []  # breakpoints, bottom to top, in pixels from the plot's bottom
    shrunk = 0.0
    for (d0, d1), x_names in sorted(rows.items()):
        need = _row_need_px(fig, x_names, width, plot)
        taken = (d1 - d0) * plot if need is None else min(need + 1, (d1 - d0) * plot)
        old += [d0 * plot, d1 * plot]
        new += [d0 * plot - shrunk, d0 * plot - shrunk + taken]
        shrunk += (d1 - d0) * plot - taken
    if shrunk >= 1:
        move_rows(fig, lambda y: _mapped(y * plot, old, new) / (plot - shrunk))
        fig.layout.height = fig.layout.height - shrunk


def _rows(fig: go.Figure) -> dict[tuple[float, float], list[str]] | None:
    """{y domain: its panels' x axes} of a grid of two rows or more; None for one row (typesetting fits
    that itself) or rows that overlap (not a grid)."""
    rows: dict[tuple[float, float], list[str]] = {}
    for x_name in _keys(fig, "xaxis"):
        d = fig.layout["yaxis" + (fig.layout[x_name].anchor or "y")[1:]].domain or (0.0, 1.0)
        rows.setdefault((round(float(d[0]), 6), round(float(d[1]), 6)), []).append(x_name)
    if len(rows) < 2 or any(a[0] < b[1] - 1e-6 and b[0] < a[1] - 1e-6 for a in rows for b in rows if a != b):
        return None
    return rows


def _mapped(px: float, old: list[float], new: list[float]) -> float:
    """A height in the plot (px from its bottom) where the rows' breakpoints moved from old to new: linear
    inside the rows, shifted in the gaps, above the top and below the bottom."""
    if px >= old[-1]:
        return new[-1] + px - old[-1]
    if px <= old[0]:
        return new[0] - (old[0] - px)
    return float(np.interp(px, old, new))


def move_rows(fig: go.Figure, moved) -> None:
    """Y domains (of axes and 3-D scenes), paper-placed annotations and shapes, and colour bars (centre
    and length) moved by `moved` (a paper y to its new paper y): rows moved apart or shrunk."""
    for name in _keys(fig, "yaxis"):
        d0, d1 = fig.layout[name].domain or (0.0, 1.0)
        fig.layout[name].domain = [max(0.0, moved(d0)), min(1.0, moved(d1))]
    for name in _keys(fig, "scene"):
        d0, d1 = fig.layout[name].domain.y or (0.0, 1.0)
        fig.layout[name].domain.y = [max(0.0, moved(d0)), min(1.0, moved(d1))]
    for annotation in fig.layout.annotations:
        if annotation.yref == "paper" and annotation.y is not None:
            annotation.y = moved(annotation.y)
    for shape in fig.layout.shapes:
        if shape.yref == "paper":
            shape.y0, shape.y1 = moved(shape.y0), moved(shape.y1)
    for trace in fig.data:
        bar = getattr(trace, "colorbar", None)
        if bar is None or bar.y is None or bar.len is None or bar.lenmode not in (None, "fraction") \
                or bar.yanchor not in (None, "middle"):
            continue
        top, bottom = moved(bar.y + bar.len / 2), moved(bar.y - bar.len / 2)
        bar.y, bar.len = (top + bottom) / 2, top - bottom
