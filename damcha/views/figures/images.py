"""Images: a digit's grey levels, a colour image and its patch grid, maps over a patch or pixel grid, attributions drawn on them."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from damcha.views.figures.heads import ATTENTION_PANELS_PER_ROW
from damcha.views.figures.style import DIVERGING, GREYS, SEQUENTIAL, _label_under, colour_bar, symmetric_limit


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


def probabilities_figure(levels: Sequence | np.ndarray, probs: np.ndarray, title: str) -> go.Figure:
    """Bar chart of a predictive distribution (e.g. class probabilities)."""
    names = [str(v) for v in levels]
    fig = go.Figure(go.Bar(x=names, y=probs, hovertemplate="%{x}: %{y:.3f}<extra></extra>"))
    fig.update_layout(title=title, margin=dict(l=50, r=20, t=50, b=40))
    fig.update_xaxes(type="category", tickmode="array", tickvals=names, ticktext=names)  # every class named
    fig.update_yaxes(title="probability", range=[0, 1])
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
    """An RGB image (h, w, 3) uint8 read as cells x cells tokens (patches, or its pixels when cells is its side): the
    patches' grid drawn, and optionally one cell outlined."""
    side = image.shape[0]
    fig = go.Figure(go.Image(z=image, hovertemplate="row %{y}, col %{x}: %{z}<extra></extra>"))
    shapes = _patch_grid_shapes(side, cells) if cells and cells < side else []
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
