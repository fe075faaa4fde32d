"""Shared by every figure: colour scales, a matrix's style and axes, colour bars, head-grid lines, the notes figures carry."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

DIVERGING = "RdBu_r"  # ColorBrewer RdBu: colour-blind safe, reversed so positive is red


SEQUENTIAL = "Viridis"


GREYS = "Greys"


def symmetric_limit(*arrays: np.ndarray) -> float:
    """max |value| over the arrays, so a diverging scale is centred at 0 (1.0 when all are 0)."""
    m = max((float(np.nanmax(np.abs(a))) for a in arrays if a is not None and np.size(a)), default=0.0)
    return m if m > 0 else 1.0


@dataclass(frozen=True)
class MatrixStyle:
    """How to draw a 2-D array, taken from what the array is (a Structure says it of itself):
    axis titles, one label per row and column (empty: index numbers), the value kind that decides
    the colour scale (signed, magnitude, probability, mask, count), the unit on the colour bar, and
    grid = n_head when the array is D x D read in H x H head blocks (ticks at the blocks)."""

    row_title: str = "row"
    col_title: str = "column"
    row_labels: tuple[str, ...] = ()
    col_labels: tuple[str, ...] = ()
    value_kind: str = "signed"
    unit: str = "value"
    grid: int | None = None

    def difference(self) -> MatrixStyle:
        """The style of a difference of two such arrays: signed, or changed/unchanged for masks."""
        if self.value_kind == "mask":
            return dataclasses.replace(self, unit="changed")
        return dataclasses.replace(self, value_kind="signed", unit=f"Δ {self.unit}")


# A log axis labels every tick with its whole value (0.02, 0.05, 0.1, 20): plotly's default prints the
# mantissa alone between decades ("2, 5, 0.1, 2"), where a "2" may mean 20 or 0.02.
LOG_AXIS = {"type": "log", "tickformat": "~g"}


def colour_bar(title: str | None = None, **kw) -> dict:
    """A colour bar whose small numbers read as powers of ten (1×10⁻⁴), not SI prefixes (100μ), its title
    along the bar's right side (above it, the default, a title wider than the bar runs into the top tick
    label and the neighbouring panel)."""
    return dict(title=dict(text=title, side="right"), exponentformat="power", **kw)


def as_style(style: MatrixStyle | int | None) -> MatrixStyle:
    """A style from an older argument: n_head (a head grid) or None (a plain signed matrix)."""
    if isinstance(style, MatrixStyle):
        return style
    return MatrixStyle(grid=style or None)


def colour_scale(value_kind: str, *arrays: np.ndarray) -> dict:
    """Heatmap/contour colour arguments for a value kind: signed values on a diverging scale centred
    at 0, magnitudes and counts on a sequential scale from 0, probabilities on [0, 1], masks in two
    colours. One range over all `arrays` (frames or panels compare honestly)."""
    if value_kind == "signed":
        z = symmetric_limit(*arrays)
        return dict(colorscale=DIVERGING, zmin=-z, zmax=z, zmid=0)
    if value_kind in ("probability", "mask"):
        return dict(colorscale=GREYS if value_kind == "mask" else SEQUENTIAL, zmin=0.0, zmax=1.0)
    top = max((float(np.nanmax(a)) for a in arrays if a is not None and np.size(a)), default=0.0)
    return dict(colorscale=SEQUENTIAL, zmin=0.0, zmax=top if top > 0 else 1.0)


def _labelled_ticks(labels: Sequence[str], n: int, most: int) -> dict:
    """Ticks at integer positions 0..n-1 named by `labels` (index numbers without), thinned to at most `most`."""
    labels = list(labels) if len(labels) == n else [str(i) for i in range(n)]
    step = max(1, -(-n // most))
    idx = list(range(0, n, step))
    return dict(tickvals=idx, ticktext=[labels[i] for i in idx])


def squarish(shape: tuple[int, ...]) -> bool:
    """Whether a matrix is drawn with square cells (a long one, 65 tokens x 8 experts, is not: it would be a strip)."""
    rows, cols = shape[-2:]
    return max(rows, cols) <= 2 * min(rows, cols)


def style_axes(fig: go.Figure, style: MatrixStyle, shape: tuple[int, int], most: int = 32, **where) -> None:
    """Axis titles and ticks of one heatmap panel from its style (head ticks for a head grid)."""
    rows, cols = shape
    if style.grid:
        ticks_y = _head_ticks(style.grid, rows // style.grid)
        ticks_x = _head_ticks(style.grid, cols // style.grid)
    else:
        ticks_y = _labelled_ticks(style.row_labels, rows, most)
        ticks_x = _labelled_ticks(style.col_labels, cols, max(4, most // 2))
    fig.update_xaxes(title=style.col_title, constrain="domain", **ticks_x, **where)
    fig.update_yaxes(title=style.row_title, autorange="reversed", constrain="domain", **ticks_y, **where)


def _hover_labels(style: MatrixStyle, shape: tuple[int, int]) -> np.ndarray | None:
    """(rows, cols, 2) names of each cell for the hover, when the matrix is small enough to carry them."""
    rows, cols = shape
    if rows * cols > 64 * 64 or not (style.row_labels or style.col_labels):
        return None
    r = list(style.row_labels) if len(style.row_labels) == rows else [str(i) for i in range(rows)]
    c = list(style.col_labels) if len(style.col_labels) == cols else [str(j) for j in range(cols)]
    return np.array([[a, b] for a in r for b in c], dtype=object).reshape(rows, cols, 2)


def matrix_trace(M: np.ndarray, style: MatrixStyle, scale: dict, kind: str = "heatmap", showscale: bool = True,
                 **kw):
    """One 2-D array as a heatmap, filled contour or surface trace in a given colour scale."""
    hover = _hover_labels(style, M.shape) if kind == "heatmap" else None
    bar = colour_bar(style.unit)
    if kind == "heatmap":
        if hover is not None:
            kw.update(customdata=hover, hovertemplate=f"%{{customdata[0]}}, %{{customdata[1]}}: %{{z:.4f}} {style.unit}"
                                                      "<extra></extra>")
        return go.Heatmap(z=M, **scale, showscale=showscale, colorbar=bar, **kw)
    if kind == "contour":
        return go.Contour(z=M, **{k: v for k, v in scale.items() if k != "zmid"}, contours=dict(coloring="heatmap"),
                          line=dict(width=0.5), showscale=showscale, colorbar=bar, **kw)
    if kind == "surface":
        return go.Surface(z=M, colorscale=scale["colorscale"], cmin=scale["zmin"], cmax=scale["zmax"],
                          showscale=showscale, colorbar=bar, **kw)
    raise ValueError(f"unknown matrix view {kind!r}; expected heatmap, contour or surface")


# Contours and surfaces draw between neighbouring rows and columns as if they were ordered; heads and
# the coordinates of a head have no order, so the shapes between them are the drawing's, not the model's
# (positions do have one: the note says where it matters, not that it always does).
INTERPOLATION_NOTE = ("contours and surfaces interpolate between neighbouring rows and columns: where their order is "
                      "arbitrary (heads, a head's coordinates), so are the shapes between them")


def interpolation_noted(title: str, kind: str) -> str:
    """The title, with the interpolation note under it for the kinds that interpolate."""
    return f"{title}<br><sup>{INTERPOLATION_NOTE}</sup>" if kind in ("contour", "surface") else title


def _head_ticks(n_head: int, head_dim: int, short: bool = False) -> dict:
    return dict(tickvals=[i * head_dim + (head_dim - 1) / 2 for i in range(n_head)],
                ticktext=[f"{'h' if short else 'head '}{i + 1}" for i in range(n_head)])


def grid_shapes(n_head: int, head_dim: int, xref: str = "x", yref: str = "y") -> list[dict]:
    """Lines between the H x H head blocks of a D x D matrix."""
    D = n_head * head_dim
    shapes = []
    for i in range(1, n_head):
        c = i * head_dim - 0.5
        line = dict(color="black", width=1)
        shapes.append(dict(type="line", x0=c, x1=c, y0=-0.5, y1=D - 0.5, xref=xref, yref=yref, line=line))
        shapes.append(dict(type="line", x0=-0.5, x1=D - 0.5, y0=c, y1=c, xref=xref, yref=yref, line=line))
    return shapes


def _category_ticks(labels: Sequence[str], most: int = 32) -> dict:
    """Ticks of a categorical axis, thinned to at most `most` so they stay readable."""
    step = max(1, -(-len(labels) // most))
    shown = list(labels)[::step]
    return dict(type="category", tickvals=shown, ticktext=shown)


def _label_under(fig: go.Figure, text: str) -> None:
    """A line of text under a picture, not on it."""
    fig.add_annotation(text=text, xref="paper", yref="paper", x=0.5, y=-0.02, yanchor="top", showarrow=False)


def _signed_colours(values: np.ndarray) -> list[str]:
    """Red for a value that raises, blue for one that lowers (the diverging scale's ends)."""
    return ["#b2182b" if v > 0 else "#2166ac" for v in values]
