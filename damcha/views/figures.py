"""Pure figure functions: arrays in, plotly Figure out. The app, the export CLI and the tests share them."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from damcha.views.display_units import LOSS_COLOUR, loss_colour
from damcha.views.typesetting import has_raw_subscripts, subscripted

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


def matrix_figure(M: np.ndarray, style: MatrixStyle, title: str = "", kind: str = "heatmap") -> go.Figure:
    """Any 2-D array drawn as its style says (axis titles and labels, colour scale, unit, head grid)."""
    M = np.asarray(M, dtype=float)
    scale = colour_scale(style.value_kind, M)
    fig = go.Figure(matrix_trace(M, style, scale, kind))
    fig.update_layout(title=interpolation_noted(title, kind), margin=dict(l=60, r=20, t=60, b=50))
    if kind == "surface":
        fig.update_layout(scene=dict(xaxis_title=style.col_title, yaxis_title=style.row_title, zaxis_title=style.unit,
                                     zaxis=dict(range=[scale["zmin"], scale["zmax"]])), margin=dict(l=0, r=0, t=50, b=0))
        return fig
    if style.grid:
        fig.update_layout(shapes=grid_shapes(style.grid, M.shape[0] // style.grid))
    style_axes(fig, style, M.shape)
    if squarish(M.shape):
        fig.update_yaxes(scaleanchor="x")
    return fig


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


def metric_heatmap_figure(M: np.ndarray, n_head: int, title: str = "M(x)", zmax: float | None = None,
                          colorbar_title: str = "value", style: MatrixStyle | None = None) -> go.Figure:
    """A D x D matrix with its head-block grid and head labels on the axes (signed: diverging scale
    centred at 0, unless the style says otherwise). zmax: a fixed symmetric range (signed only)."""
    style = style or MatrixStyle(grid=n_head, unit=colorbar_title)
    fig = matrix_figure(M, dataclasses.replace(style, grid=n_head))
    if zmax and style.value_kind == "signed":
        fig.update_traces(zmin=-zmax, zmax=zmax)
    D = M.shape[0]
    d = D // n_head
    fig.update_traces(hovertemplate="row %{y} (head %{customdata[0]}), col %{x} (head %{customdata[1]})<br>%{z:.4f}"
                                    "<extra></extra>",
                      customdata=np.stack(np.meshgrid(np.arange(D) // d + 1, np.arange(D) // d + 1)[::-1], axis=-1))
    fig.update_layout(title=title)
    return fig


def metric_panels_figure(panels: dict[str, np.ndarray], n_head: int, title: str = "", shared_scale: bool = True,
                         colorbar_title: str = "metric entry") -> go.Figure:
    """Several D x D matrices side by side (e.g. M, learned part, residue) with the head grid.

    shared_scale: one colour range and one colour bar for all panels, so they compare honestly.
    """
    names = list(panels)
    fig = make_subplots(rows=1, cols=len(names), subplot_titles=names, horizontal_spacing=0.06)
    shared = symmetric_limit(*panels.values())
    D = next(iter(panels.values())).shape[0]
    d = D // n_head
    shapes = []
    for k, name in enumerate(names, start=1):
        z = shared if shared_scale else symmetric_limit(panels[name])
        show_bar = (k == len(names)) if shared_scale else True
        bar = (colour_bar(colorbar_title, x=1.0 + 0.02, len=0.9) if shared_scale
               else colour_bar(colorbar_title, x=(k / len(names)) - 0.02, len=0.6, thickness=10))
        fig.add_trace(go.Heatmap(z=panels[name], zmin=-z, zmax=z, zmid=0, colorscale=DIVERGING, showscale=show_bar,
                                 colorbar=bar, name=name, hovertemplate=f"{name}<br>row %{{y}}, col %{{x}}: %{{z:.4f}}<extra></extra>"),
                      row=1, col=k)
        ax = "" if k == 1 else str(k)
        shapes += grid_shapes(n_head, d, xref=f"x{ax}", yref=f"y{ax}")
        short = len(names) > 2
        fig.update_xaxes(**_head_ticks(n_head, d, short), row=1, col=k, constrain="domain")
        fig.update_yaxes(**_head_ticks(n_head, d, short), autorange="reversed", scaleanchor=f"x{ax}", constrain="domain", row=1, col=k,
                         showticklabels=k == 1)
    fig.update_layout(title=title, shapes=shapes, margin=dict(l=60, r=40, t=70, b=40), height=140 + 260 * 3 // len(names))
    return fig


def head_by_head_figure(values: np.ndarray, title: str = "Block norms ‖M_ij‖", colorbar_title: str = "‖M_ij‖",
                        axis_titles: tuple[str, str] = ("row head i", "column head j"),
                        style: MatrixStyle | None = None) -> go.Figure:
    """H x H values, one per pair of heads (block norms, head-mixing matrices), written in each cell.
    Without a style: non-negative values on a sequential scale from 0, signed ones diverging at 0."""
    H, W = values.shape
    if style is None:
        style = MatrixStyle(axis_titles[0], axis_titles[1], value_kind="signed" if (values < 0).any() else "magnitude",
                            unit=colorbar_title)
    rows = style.row_labels if len(style.row_labels) == H else tuple(f"head {i + 1}" for i in range(H))
    cols = style.col_labels if len(style.col_labels) == W else tuple(f"head {j + 1}" for j in range(W))
    fig = go.Figure(go.Heatmap(z=values, x=list(cols), y=list(rows), **colour_scale(style.value_kind, values),
                               colorbar=colour_bar(style.unit), texttemplate="%{z:.3g}",
                               hovertemplate="%{y}, %{x}: %{z:.4f}<extra></extra>"))
    fig.update_layout(title=title, margin=dict(l=60, r=20, t=50, b=50))
    # Every label listed, so an export thins them to the room a journal's column leaves (typesetting).
    fig.update_xaxes(title=style.col_title, type="category", tickvals=list(cols))
    fig.update_yaxes(title=style.row_title, type="category", autorange="reversed", scaleanchor="x", constrain="domain",
                     tickvals=list(rows))
    return fig


def head_metrics_figure(m: np.ndarray, title: str = "Per-head metrics m_i", shared_scale: bool = True,
                        symbol: str = "m", style: MatrixStyle | None = None,
                        panel_titles: Sequence[str] | None = None) -> go.Figure:
    """Small multiples of one matrix per head, (H, a, b): DAMCHA's m_i (d x d, or d x D rows for the
    bilinear form), MHA's W_Q^h W_K^hᵀ (D x D). Panels are titled panel_titles, else symbol_1 .. symbol_H."""
    H = m.shape[0]
    style = style or MatrixStyle()
    titles = list(panel_titles) if panel_titles is not None and len(panel_titles) == H else \
        [f"{symbol}_{i + 1}" for i in range(H)]
    fig = make_subplots(rows=1, cols=H, subplot_titles=titles, horizontal_spacing=0.03)
    for i in range(H):
        scale = colour_scale(style.value_kind, m) if shared_scale else colour_scale(style.value_kind, m[i])
        fig.add_trace(go.Heatmap(z=m[i], **scale, showscale=(i == H - 1) if shared_scale else False,
                                 colorbar=colour_bar(style.unit),
                                 hovertemplate=f"{titles[i]}[%{{y}}, %{{x}}] = %{{z:.4f}}<extra></extra>"), row=1, col=i + 1)
        fig.update_yaxes(autorange="reversed", scaleanchor=f"x{'' if i == 0 else i + 1}", constrain="domain", row=1, col=i + 1,
                         title=style.row_title if i == 0 else None, **_labelled_ticks(style.row_labels, m.shape[1], 16))
        fig.update_xaxes(constrain="domain", row=1, col=i + 1, title=style.col_title if i == H // 2 else None,
                         **_labelled_ticks(style.col_labels, m.shape[2], 8))
    fig.update_layout(title=title, margin=dict(l=40, r=40, t=70, b=40), height=140 + 900 // max(H, 3))
    return fig


def contour_figure(M: np.ndarray, n_head: int | None = None, title: str = "Contours of M(x)", zmax: float | None = None,
                   style: MatrixStyle | None = None) -> go.Figure:
    """Filled contour map of a matrix (rows downwards) in its style's colour scale (default: signed)."""
    style = style or MatrixStyle(grid=n_head)
    fig = matrix_figure(M, style, title, kind="contour")
    if zmax and style.value_kind == "signed":
        fig.update_traces(zmin=-zmax, zmax=zmax)
    if style.grid:
        fig.update_layout(shapes=grid_shapes(style.grid, M.shape[0] // style.grid))
    return fig


def surface_figure(M: np.ndarray, title: str = "M(x) as a surface", zmax: float | None = None,
                   style: MatrixStyle | None = None) -> go.Figure:
    """3D surface of a matrix: height = entry value, coloured by its style's scale."""
    fig = matrix_figure(M, style or MatrixStyle(), title, kind="surface")
    if zmax:
        fig.update_traces(cmin=-zmax, cmax=zmax)
        fig.update_layout(scene=dict(zaxis=dict(range=[-zmax, zmax])))
    return fig


ATTENTION_PANELS_PER_ROW = 4


def attention_figure(attn: np.ndarray, tick_labels: Sequence[str] | None = None, title: str = "Attention",
                     zmax: float = 1.0, colorbar_title: str = "weight", panel_titles: Sequence[str] | None = None,
                     value_kind: str | None = None) -> go.Figure:
    """Small multiples of H maps (H, T, T) of one layer (attention, or allowed-key masks): rows =
    queries, columns = keys, labelled with the tokens. The axes are categories "position token"
    (unique, so repeated tokens stay apart), which also makes the hover name both tokens without
    sending a label for every cell; the ticks are thinned so they stay readable (every label on hover).
    value_kind: probability (default for non-negative maps), signed (mixed weights can be negative), mask."""
    H, T, _ = attn.shape
    raw = list(tick_labels) if tick_labels is not None and len(tick_labels) == T else [""] * T
    labels = [f"{i} {lab}".strip() for i, lab in enumerate(raw)]
    kind = value_kind or ("signed" if (attn < 0).any() else "probability")
    scale = colour_scale(kind, attn)
    if kind == "probability" and zmax != 1.0:
        scale["zmax"] = zmax
    panels = list(panel_titles) if panel_titles is not None and len(panel_titles) == H else [f"head {i + 1}" for i in range(H)]
    # At most four panels a row: eight in one row leave each 25 px wide at a journal's single column.
    cols = min(H, ATTENTION_PANELS_PER_ROW)
    rows = -(-H // cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=panels, horizontal_spacing=0.03,
                        vertical_spacing=0.3 / rows)
    row_height = 900 // max(cols, 3)
    height = 160 + rows * row_height
    x_ticks = max(4, 24 // max(cols, 1))  # each panel is narrow: fewer key labels the more panels a row holds
    y_ticks = max(6, (row_height - 20) // 18)  # a query label every 18 px of the panel's height at most
    for i in range(H):
        row, col = i // cols + 1, i % cols + 1
        fig.add_trace(go.Heatmap(z=attn[i], x=labels, y=labels, **scale, showscale=i == H - 1,
                                 colorbar=colour_bar(colorbar_title),
                                 hovertemplate="query %{y}, key %{x}: %{z:.3f}<extra></extra>"), row=row, col=col)
        fig.update_yaxes(autorange="reversed", scaleanchor=f"x{'' if i == 0 else i + 1}", constrain="domain", row=row,
                         col=col, showticklabels=col == 1, **_category_ticks(labels, y_ticks))
        fig.update_xaxes(constrain="domain", row=row, col=col, tickangle=-60, **_category_ticks(labels, x_ticks))
    fig.update_layout(title=title, margin=dict(l=50, r=40, t=70, b=70), height=height)
    fig.update_xaxes(title="key", row=rows)
    fig.update_yaxes(title="query", col=1)
    return fig


def _category_ticks(labels: Sequence[str], most: int = 32) -> dict:
    """Ticks of a categorical axis, thinned to at most `most` so they stay readable."""
    step = max(1, -(-len(labels) // most))
    shown = list(labels)[::step]
    return dict(type="category", tickvals=shown, ticktext=shown)


def labelled_matrix_figure(values: np.ndarray, row_labels: Sequence[str], column_labels: Sequence[str],
                           title: str = "", row_title: str = "", column_title: str = "",
                           colorbar_title: str = "value", value_kind: str | None = None) -> go.Figure:
    """(a, b) values with named rows and columns (per-token gates, mixing vectors, ...). value_kind
    decides the colour scale (default: signed when any value is negative, else a magnitude from 0)."""
    rows, cols = values.shape
    style = MatrixStyle(row_title, column_title, tuple(map(str, row_labels)), tuple(map(str, column_labels)),
                        value_kind or ("signed" if (values < 0).any() else "magnitude"), colorbar_title)
    fig = go.Figure(matrix_trace(np.asarray(values, dtype=float), style, colour_scale(style.value_kind, values)))
    fig.update_layout(title=title, margin=dict(l=60, r=20, t=50, b=50))
    style_axes(fig, style, (rows, cols))
    return fig


PROFILE_LINES = 8  # a matrix along the input with at most this many columns reads as lines over positions


def profile_figure(values: np.ndarray, position_labels: Sequence[str], line_names: Sequence[str], title: str = "",
                   y_title: str = "value", line_title: str = "") -> go.Figure:
    """(T, k) values along the input as k lines over the positions (a 64 x 4 heatmap hides them), each
    position's label on hover."""
    values = np.asarray(values, dtype=float)
    fig = go.Figure()
    for j, name in enumerate(line_names):
        fig.add_trace(go.Scatter(x=np.arange(len(values)), y=values[:, j], mode="lines", name=str(name),
                                 customdata=list(position_labels),
                                 hovertemplate=f"{name}, position %{{x}} %{{customdata}}: %{{y:.4g}}<extra></extra>"))
    fig.update_layout(title=title, margin=dict(l=60, r=20, t=50, b=50),
                      legend=dict(orientation="h", y=-0.25, title=dict(text=line_title)))
    fig.update_xaxes(title="position")
    fig.update_yaxes(title=y_title)
    return fig


def token_loss_figure(token_loss: np.ndarray, labels: Sequence[str], title: str = "Loss per token",
                      unit: str = "bits per token") -> go.Figure:
    """Bar chart of the per-token loss in `unit` (already converted), labelled with the target tokens."""
    bits = np.asarray(token_loss, dtype=float)
    fig = go.Figure(go.Bar(x=np.arange(len(bits)), y=bits, customdata=list(labels), marker_color=LOSS_COLOUR,
                           hovertemplate="position %{x}: target %{customdata}<br>%{y:.3f} " + unit + "<extra></extra>"))
    positive = bits[bits > 0]
    spread = float(positive.max() / np.median(positive)) if positive.size else 1.0
    log_y = spread > LOG_AXIS_SPREAD  # one bar (an image's first patch, read from a blank start) would flatten the rest
    if log_y:
        title = f"{title}<br><sup>log axis: the largest bar is {spread:.0f}× the median</sup>"
    fig.update_layout(title=title, margin=dict(l=60, r=20, t=50, b=50))
    fig.update_xaxes(title="position")
    fig.update_yaxes(title=f"loss ({unit})", **(LOG_AXIS if log_y else {"type": "linear"}))
    return fig


LOG_AXIS_SPREAD = 100  # largest / median per-position loss above which the bars are drawn on a log axis


def share_bar_range(figs: Sequence[go.Figure]) -> None:
    """Give bar charts one y range from 0 (figures to compare side by side); others are left alone."""
    tops = [float(np.nanmax(np.asarray(t.y, dtype=float))) for f in figs for t in f.data if t.type == "bar" and len(t.y)]
    fixed = [f.layout.yaxis.range[1] for f in figs if f.layout.yaxis.range]
    if tops:
        for f in figs:
            f.update_yaxes(range=[0, max([max(tops) * 1.05, *fixed])])


def _label_under(fig: go.Figure, text: str) -> None:
    """A line of text under a picture, not on it."""
    fig.add_annotation(text=text, xref="paper", yref="paper", x=0.5, y=-0.02, yanchor="top", showarrow=False)


def _signed_colours(values: np.ndarray) -> list[str]:
    """Red for a value that raises, blue for one that lowers (the diverging scale's ends)."""
    return ["#b2182b" if v > 0 else "#2166ac" for v in values]


def digit_figure(levels: np.ndarray, title: str = "What the model sees (8x8, levels 0..16)",
                 highlight: tuple[int, int] | None = None, highlight_label: str = "") -> go.Figure:
    """An 8x8 digit, ink dark, as in scikit-learn's own plots; optionally one pixel outlined (the
    one a query position reads)."""
    fig = go.Figure(go.Heatmap(z=levels, zmin=0, zmax=16, colorscale=GREYS, colorbar=colour_bar("level"),
                               text=levels, texttemplate="%{text}", hovertemplate="row %{y}, col %{x}: %{z}<extra></extra>"))
    fig.update_layout(title=title, margin=dict(l=30, r=20, t=50, b=40), width=380, height=380)
    if highlight is not None:
        r, c = highlight
        fig.add_shape(type="rect", x0=c - 0.5, x1=c + 0.5, y0=r - 0.5, y1=r + 0.5, line=dict(color="#ff2d2d", width=3))
    if highlight_label:
        _label_under(fig, highlight_label)
    fig.update_yaxes(autorange="reversed", scaleanchor="x", constrain="domain", showticklabels=False)
    fig.update_xaxes(showticklabels=False, constrain="domain")
    return fig


def probabilities_figure(levels: np.ndarray, probs: np.ndarray, title: str) -> go.Figure:
    """Bar chart of a predictive distribution (e.g. class probabilities)."""
    names = [str(v) for v in levels]
    fig = go.Figure(go.Bar(x=names, y=probs, hovertemplate="%{x}: %{y:.3f}<extra></extra>"))
    fig.update_layout(title=title, margin=dict(l=50, r=20, t=50, b=40))
    fig.update_xaxes(type="category", tickmode="array", tickvals=names, ticktext=names)  # every class named
    fig.update_yaxes(title="probability", range=[0, 1])
    return fig


def training_curves_figure(metrics: Sequence[dict], keys: Sequence[str] = ("train_nll", "val_nll"),
                           title: str = "Training curves", marked_epochs: Sequence[int] = (),
                           y_title: str = "nats per token", factor: float = 1.0, log_y: bool = False) -> go.Figure:
    """Curves of metrics.jsonl columns over epochs (times `factor`: nats to bits, say);
    marked_epochs (snapshots) drawn as markers; log_y: a logarithmic loss axis (the initial epoch's
    loss otherwise flattens the rest of an image run's curve)."""
    fig = go.Figure()
    epochs = [m["epoch"] for m in metrics]
    for key in keys:
        ys = [None if m.get(key) is None else m[key] * factor for m in metrics]
        if all(y is None for y in ys):
            continue
        fig.add_trace(go.Scatter(x=epochs, y=ys, mode="lines", name=key, line=dict(color=loss_colour(key))))
        marks = [(e, y) for e, y in zip(epochs, ys) if e in set(marked_epochs) and y is not None]
        if marks:
            fig.add_trace(go.Scatter(x=[e for e, _ in marks], y=[y for _, y in marks], mode="markers",
                                     name=f"{key} (snapshots)", showlegend=False,
                                     marker=dict(size=7, color=loss_colour(key))))
    fig.update_layout(title=title, margin=dict(l=60, r=20, t=50, b=50), legend=dict(orientation="h", y=-0.25))
    fig.update_xaxes(title="epoch")
    fig.update_yaxes(title=y_title, **(LOG_AXIS if log_y else {"type": "linear"}))
    return fig


def epoch_animation_figure(mats: np.ndarray, epochs: Sequence[int], style: MatrixStyle | int | None,
                           kind: str = "heatmap", title: str = "M(x) over training") -> go.Figure:
    """(E, a, b) matrices as animation frames with a play button and an epoch slider, drawn as the
    style says (an int: the head grid of a D x D matrix). One colour range for every frame, so
    frames compare honestly."""
    style = as_style(style)
    mats = np.asarray(mats, dtype=float)
    scale = colour_scale(style.value_kind, mats)
    frames = [go.Frame(data=[matrix_trace(m, style, scale, kind)], name=str(e), layout=dict(title=interpolation_noted(f"{title}: epoch {e}", kind)))
              for m, e in zip(mats, epochs)]
    fig = go.Figure(data=[matrix_trace(mats[0], style, scale, kind)], frames=frames)
    steps = [dict(method="animate", label=str(e), args=[[str(e)], dict(mode="immediate", frame=dict(duration=0, redraw=True))])
             for e in epochs]
    fig.update_layout(
        title=interpolation_noted(f"{title}: epoch {epochs[0]}", kind), margin=dict(l=60, r=20, t=70, b=140),
        updatemenus=[dict(type="buttons", x=0, y=-0.16, xanchor="left", yanchor="top", showactive=False, buttons=[
            dict(label="▶ play", method="animate", args=[None, dict(frame=dict(duration=700, redraw=True), fromcurrent=True)]),
            dict(label="❚❚", method="animate", args=[[None], dict(mode="immediate", frame=dict(duration=0, redraw=False))]),
        ])],
        sliders=[dict(active=0, steps=steps, x=0.15, len=0.85, y=-0.13, currentvalue=dict(prefix="epoch "))],
    )
    if kind != "surface":
        if style.grid:
            fig.update_layout(shapes=grid_shapes(style.grid, mats.shape[-1] // style.grid))
        style_axes(fig, style, mats.shape[-2:])
        if squarish(mats.shape):
            fig.update_yaxes(scaleanchor="x")
    else:
        fig.update_layout(scene=dict(zaxis=dict(range=[scale["zmin"], scale["zmax"]]), xaxis_title=style.col_title,
                                     yaxis_title=style.row_title, zaxis_title=style.unit))
    return fig


def small_multiples_figure(mats: Sequence[np.ndarray], titles: Sequence[str], style: MatrixStyle | int | None,
                           kind: str = "heatmap", title: str = "", cols: int | None = None) -> go.Figure:
    """Matrices in a grid (paper figures 8, 10, 11 style) with one shared colour range and one colour
    bar, drawn as the style says (an int: the head grid of D x D matrices)."""
    style = as_style(style)
    n = len(mats)
    cols = cols or n
    rows = (n + cols - 1) // cols
    specs = [[{"type": "scene" if kind == "surface" else "xy"} for _ in range(cols)] for _ in range(rows)]
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=list(titles), specs=specs,
                        horizontal_spacing=0.03, vertical_spacing=0.08)
    scale = colour_scale(style.value_kind, *mats)
    shapes = []
    for k, M in enumerate(mats):
        r, c = k // cols + 1, k % cols + 1
        fig.add_trace(matrix_trace(np.asarray(M, dtype=float), style, scale, kind, showscale=k == n - 1), row=r, col=c)
        if kind != "surface":
            ax = "" if k == 0 else str(k + 1)
            if style.grid:
                shapes += grid_shapes(style.grid, M.shape[-1] // style.grid, xref=f"x{ax}", yref=f"y{ax}")
            style_axes(fig, style, M.shape, most=16, row=r, col=c)
            fig.update_yaxes(showticklabels=c == 1, row=r, col=c, **({"scaleanchor": f"x{ax}"} if squarish(M.shape) else {}))
            if c != 1:
                fig.update_yaxes(title=None, row=r, col=c)
            if r != rows:
                fig.update_xaxes(title=None, row=r, col=c)
        else:
            fig.update_scenes(zaxis=dict(range=[scale["zmin"], scale["zmax"]]), row=r, col=c)
    fig.update_layout(title=interpolation_noted(title, kind), shapes=shapes, margin=dict(l=50, r=40, t=80, b=30),
                      height=320 * rows + 60)
    return fig


# Each null baseline its own line, so a legend of several tells them apart (Okabe-Ito colours).
BASELINE_LINES = (("dot", "black"), ("dash", "#009E73"), ("dashdot", "#CC79A7"), ("longdash", "#56B4E9"))


def statistic_curves_figure(epochs: Sequence[int], curves: dict[str, Sequence[float]],
                            bands: dict[str, tuple[Sequence[float], Sequence[float], Sequence[float]]] | None = None,
                            losses: dict[str, Sequence[float]] | None = None, title: str = "",
                            baselines: dict[str, tuple[float, str]] | None = None,
                            loss_title: str = "loss (nats)") -> go.Figure:
    """One panel per statistic over epochs (this input as a line, a validation sample as a
    10-90% band with its median dashed), and the training/validation loss in the last panel.
    baselines: statistic -> (value, what gives it), drawn as a dotted line (e.g. the off-diagonal
    share that the block count alone gives)."""
    names = list(curves)
    n = len(names) + (1 if losses else 0)
    cols = 3
    rows = (n + cols - 1) // cols
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=names + ([loss_title] if losses else []),
                        vertical_spacing=0.12, horizontal_spacing=0.07)
    for k, name in enumerate(names):
        r, c = k // cols + 1, k % cols + 1
        if bands and name in bands:
            lo, med, hi = bands[name]
            fig.add_trace(go.Scatter(x=list(epochs), y=list(hi), mode="lines", line=dict(width=0), showlegend=False,
                                     hoverinfo="skip"), row=r, col=c)
            fig.add_trace(go.Scatter(x=list(epochs), y=list(lo), mode="lines", line=dict(width=0), fill="tonexty",
                                     fillcolor="rgba(99,110,250,0.2)", name="validation 10-90%", showlegend=k == 0),
                          row=r, col=c)
            fig.add_trace(go.Scatter(x=list(epochs), y=list(med), mode="lines", line=dict(dash="dash", color="#636efa"),
                                     name="validation median", showlegend=k == 0), row=r, col=c)
        fig.add_trace(go.Scatter(x=list(epochs), y=list(curves[name]), mode="lines+markers", line=dict(color="#d62728"),
                                 name="this input", showlegend=k == 0), row=r, col=c)
        if baselines and name in baselines:
            value, why = baselines[name]
            dash, colour = BASELINE_LINES[list(baselines).index(name) % len(BASELINE_LINES)]
            fig.add_trace(go.Scatter(x=[epochs[0], epochs[-1]], y=[value, value], mode="lines", name=why,
                                     line=dict(dash=dash, color=colour), hovertemplate=f"{why}: {value:.3f}<extra></extra>"),
                          row=r, col=c)
    if losses:
        k = len(names)
        for lname, ys in losses.items():
            fig.add_trace(go.Scatter(x=list(epochs), y=list(ys), mode="lines+markers", name=lname,
                                     line=dict(color=loss_colour(lname))),
                          row=k // cols + 1, col=k % cols + 1)
    fig.update_xaxes(title="epoch")
    fig.update_layout(title=title, height=280 * rows + 80, margin=dict(l=50, r=20, t=80, b=40),
                      legend=dict(orientation="h", y=-0.08))
    return fig


def curve_figure(xs: Sequence[float], curves: dict[str, Sequence[float]], title: str = "", x_title: str = "",
                 y_title: str = "", bands: dict[str, tuple[Sequence[float], Sequence[float]]] | None = None,
                 marks: dict[str, float] | None = None) -> go.Figure:
    """Lines over a common x (loss against alpha, gamma or epoch), optional (low, high) bands per line
    and vertical marks (name -> x)."""
    fig = go.Figure()
    for name, ys in curves.items():
        if bands and name in bands:
            lo, hi = bands[name]
            fig.add_trace(go.Scatter(x=list(xs) + list(xs)[::-1], y=list(hi) + list(lo)[::-1], fill="toself",
                                     fillcolor="rgba(99,110,250,0.2)", line=dict(width=0), hoverinfo="skip",
                                     name=f"{name} (95% interval)"))
        fig.add_trace(go.Scatter(x=list(xs), y=list(ys), mode="lines+markers", name=name))
    for name, x in (marks or {}).items():
        fig.add_vline(x=x, line=dict(color="grey", dash="dot"), annotation_text=name)
    fig.update_layout(title=title, margin=dict(l=60, r=20, t=50, b=50), legend=dict(orientation="h", y=-0.25))
    fig.update_xaxes(title=x_title)
    fig.update_yaxes(title=y_title)
    return fig


def paired_scatter_figure(a: Sequence[float], b: Sequence[float], a_title: str, b_title: str, title: str = "") -> go.Figure:
    """One point per item, a's value across and b's up, with the diagonal a = b and the share of
    points on each side of it (LIT-style: where one model beats the other, item by item)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    low, high = float(min(a.min(), b.min())), float(max(a.max(), b.max()))
    fig = go.Figure(go.Scatter(x=a, y=b, mode="markers", marker=dict(size=5, opacity=0.6), showlegend=False,
                               customdata=np.arange(len(a)),
                               hovertemplate="input %{customdata}<br>%{x:.4g} vs %{y:.4g}<extra></extra>"))
    fig.add_trace(go.Scatter(x=[low, high], y=[low, high], mode="lines", line=dict(color="black", width=1, dash="dot"),
                             showlegend=False, hoverinfo="skip"))
    below = float(np.mean(b < a))
    fig.add_annotation(text=f"{below:.0%} below the diagonal, {float(np.mean(b > a)):.0%} above", xref="paper",
                       yref="paper", x=0.02, y=0.98, showarrow=False, xanchor="left", yanchor="top")
    fig.update_layout(title=title, margin=dict(l=60, r=20, t=60, b=50))
    fig.update_xaxes(title=a_title)
    fig.update_yaxes(title=b_title, scaleanchor="x")
    return fig


def spectrum_figure(epochs: Sequence[int], spectra: Sequence[np.ndarray], title: str = "Spectrum of (M + Mᵀ)/2") -> go.Figure:
    """Sorted eigenvalues of the symmetric part at each epoch: negative values mean M is not PSD."""
    fig = go.Figure()
    for e, ev in zip(epochs, spectra):
        fig.add_trace(go.Scatter(x=np.arange(len(ev)), y=ev, mode="lines", name=f"epoch {e}"))
    fig.add_hline(y=0, line=dict(color="black", width=1))
    fig.update_layout(title=title, margin=dict(l=60, r=20, t=50, b=50))
    fig.update_xaxes(title="eigenvalue index (ascending)")
    fig.update_yaxes(title="eigenvalue")
    return fig


def projection_figure(points: np.ndarray, labels: Sequence, title: str = "Metrics of validation inputs",
                      label_name: str = "class") -> go.Figure:
    """2D projection of per-input metrics, one colour per label."""
    labels = np.asarray(labels)
    fig = go.Figure()
    for lab in sorted(set(labels.tolist()), key=str):
        sel = labels == lab
        fig.add_trace(go.Scatter(x=points[sel, 0], y=points[sel, 1], mode="markers", name=f"{label_name} {lab}",
                                 marker=dict(size=6, opacity=0.8)))
    fig.update_layout(title=title, margin=dict(l=50, r=20, t=50, b=50))
    fig.update_xaxes(title="component 1")
    fig.update_yaxes(title="component 2")
    return fig


def digit_attribution_figure(attr: np.ndarray, levels: np.ndarray, title: str = "Attribution to the pixels") -> go.Figure:
    """(8, 8) signed attributions over the digit, diverging at 0, the grey levels written in each cell."""
    z = symmetric_limit(attr)
    fig = go.Figure(go.Heatmap(z=attr, zmin=-z, zmax=z, zmid=0, colorscale=DIVERGING, colorbar=colour_bar("attribution"),
                               text=levels, texttemplate="%{text}",
                               hovertemplate="row %{y}, col %{x}: %{z:.4g} (level %{text})<extra></extra>"))
    fig.update_layout(title=title, margin=dict(l=30, r=20, t=50, b=30), width=420, height=380)
    fig.update_yaxes(autorange="reversed", scaleanchor="x", constrain="domain", showticklabels=False)
    fig.update_xaxes(showticklabels=False, constrain="domain")
    return fig


def named_bars_figure(names: Sequence[str], values: Sequence[float], title: str = "", y_title: str = "value",
                      x_title: str = "") -> go.Figure:
    """One signed bar per name (a loss change per patched site), red raising and blue lowering, its value
    written on it: a few numbers read better as bars than as a 1 x n heatmap."""
    values = np.asarray(values, dtype=float)
    fig = go.Figure(go.Bar(x=[str(n) for n in names], y=values, marker_color=_signed_colours(values),
                           text=[f"{v:+.3g}" for v in values], textposition="outside", cliponaxis=False,
                           hovertemplate="%{x}: %{y:.4g}<extra></extra>"))
    fig.add_hline(y=0, line=dict(color="black", width=1))
    fig.update_layout(title=title, margin=dict(l=60, r=20, t=60, b=50))
    fig.update_xaxes(title=x_title, type="category")
    fig.update_yaxes(title=y_title)
    return fig


def token_attribution_figure(values: np.ndarray, labels: Sequence[str], title: str = "Attribution per token") -> go.Figure:
    """Bar chart of signed per-token attributions, coloured red (raises) / blue (lowers)."""
    fig = go.Figure(go.Bar(x=np.arange(len(values)), y=values, marker_color=_signed_colours(values), customdata=list(labels),
                           hovertemplate="%{x} '%{customdata}': %{y:.4g}<extra></extra>"))
    fig.update_layout(title=title, margin=dict(l=60, r=20, t=50, b=50))
    fig.update_xaxes(title="token position")
    fig.update_yaxes(title="attribution")
    return fig


def highlighted_text_html(chars: Sequence[str], values: np.ndarray) -> str:
    """Characters with a background whose colour and strength follow a signed attribution."""
    import html

    z = symmetric_limit(values)
    spans = []
    for ch, v in zip(chars, values):
        a = min(1.0, abs(float(v)) / z)
        rgb = "178,24,43" if v > 0 else "33,102,172"
        text = html.escape(ch).replace("\n", "⏎<br>")
        spans.append(f'<span title="{float(v):.4g}" style="background: rgba({rgb},{a:.2f}); padding: 1px 0">{text}</span>')
    return '<div style="font-family: monospace; line-height: 1.8; white-space: pre-wrap">' + "".join(spans) + "</div>"


def _patch_grid_shapes(side: int, cells: int, xref: str = "x", yref: str = "y") -> list[dict]:
    """Thin lines between the cells x cells patches of a side x side image."""
    step = side / cells
    line = dict(color="rgba(255,255,255,0.6)", width=0.5)
    return [dict(type="line", x0=k * step - 0.5, x1=k * step - 0.5, y0=-0.5, y1=side - 0.5, xref=xref, yref=yref,
                 line=line) for k in range(1, cells)] + \
           [dict(type="line", y0=k * step - 0.5, y1=k * step - 0.5, x0=-0.5, x1=side - 0.5, xref=xref, yref=yref,
                 line=line) for k in range(1, cells)]


def rgb_image_figure(image: np.ndarray, title: str = "What the model sees", cells: int | None = 8,
                     highlight: tuple[int, int] | None = None, highlight_label: str = "") -> go.Figure:
    """An RGB image (h, w, 3) uint8 with its patch grid and, optionally, one patch outlined."""
    side = image.shape[0]
    fig = go.Figure(go.Image(z=image, hovertemplate="row %{y}, col %{x}: %{z}<extra></extra>"))
    shapes = _patch_grid_shapes(side, cells) if cells else []
    if highlight is not None and cells:
        step = side / cells
        r, c = highlight
        shapes.append(dict(type="rect", x0=c * step - 0.5, x1=(c + 1) * step - 0.5, y0=r * step - 0.5,
                           y1=(r + 1) * step - 0.5, line=dict(color="#ff2d2d", width=3)))
    fig.update_layout(title=title, shapes=shapes, margin=dict(l=20, r=20, t=50, b=20), width=380, height=400)
    if highlight_label:
        _label_under(fig, highlight_label)
    fig.update_xaxes(showticklabels=False)
    fig.update_yaxes(showticklabels=False)
    return fig


def image_row_figure(images: dict[str, np.ndarray], title: str = "", cells: int | None = 8) -> go.Figure:
    """RGB images side by side (truth, prediction, completion), each with its patch grid."""
    names = list(images)
    fig = make_subplots(rows=1, cols=len(names), subplot_titles=names, horizontal_spacing=0.04)
    shapes = []
    for k, name in enumerate(names, start=1):
        fig.add_trace(go.Image(z=images[name], hovertemplate=f"{name}<br>row %{{y}}, col %{{x}}: %{{z}}<extra></extra>"),
                      row=1, col=k)
        ax = "" if k == 1 else str(k)
        if cells:
            shapes += _patch_grid_shapes(images[name].shape[0], cells, f"x{ax}", f"y{ax}")
        fig.update_xaxes(showticklabels=False, row=1, col=k)
        fig.update_yaxes(showticklabels=False, row=1, col=k)
    fig.update_layout(title=title, shapes=shapes, margin=dict(l=20, r=20, t=70, b=20), height=360)
    return fig


def grid_maps_figure(maps: np.ndarray, titles: Sequence[str], title: str = "", colorbar_title: str = "value",
                     sequential: bool = True) -> go.Figure:
    """Small multiples of (n, rows, cols) maps over an image's patch or pixel grid (attention of each
    head over the keys, error per patch), one colour range; NaN cells are left blank."""
    n = maps.shape[0]
    cols = min(n, ATTENTION_PANELS_PER_ROW)  # as the attention maps: a single column holds four a row
    rows = -(-n // cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=list(titles), horizontal_spacing=0.03,
                        vertical_spacing=0.3 / rows)
    finite = maps[np.isfinite(maps)]
    z = float(np.abs(finite).max()) if finite.size and np.abs(finite).max() > 0 else 1.0
    scale = dict(zmin=0, zmax=z, colorscale=SEQUENTIAL) if sequential else dict(zmin=-z, zmax=z, zmid=0, colorscale=DIVERGING)
    grid_rows, grid_cols = maps.shape[1:]
    for i in range(n):
        row, col = i // cols + 1, i % cols + 1
        # Rows and columns counted from 1, as heads and patches (r1c1) are; labelled on the outer panels.
        fig.add_trace(go.Heatmap(z=maps[i], x=np.arange(1, grid_cols + 1), y=np.arange(1, grid_rows + 1), **scale,
                                 showscale=i == n - 1, colorbar=colour_bar(colorbar_title),
                                 hovertemplate="row %{y}, column %{x}: %{z:.4f}<extra></extra>"), row=row, col=col)
        fig.update_yaxes(autorange="reversed", scaleanchor=f"x{'' if i == 0 else i + 1}", constrain="domain",
                         showticklabels=col == 1, title="row" if col == 1 else None, nticks=4, row=row, col=col)
        last_row = i + cols >= n
        fig.update_xaxes(constrain="domain", showticklabels=last_row, title="column" if last_row else None, nticks=4,
                         row=row, col=col)
    fig.update_layout(title=title, margin=dict(l=50, r=40, t=70, b=40), height=160 + rows * (900 // max(cols, 3)))
    return fig


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
    out = subscripted(go.Figure(fig))  # m_i as m with a subscript i on screen too, as in an export
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
    means = np.asarray(means, dtype=float)
    up = np.nan_to_num(np.asarray(highs, dtype=float) - means)
    down = np.nan_to_num(means - np.asarray(lows, dtype=float))
    value, category = ("x", "y") if horizontal else ("y", "x")
    bars = dict(type="data", array=up, arrayminus=down, visible=True)
    fig = go.Figure(go.Scatter(**{category: list(names), value: means, f"error_{value}": bars}, mode="markers",
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
