"""Matrices as heatmaps, contours and surfaces: one, a head grid's panels, small multiples, an animation over epochs."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from damcha.views.figures.style import (
    DIVERGING,
    MatrixStyle,
    _head_ticks,
    as_style,
    colour_bar,
    colour_scale,
    grid_shapes,
    interpolation_noted,
    matrix_trace,
    squarish,
    style_axes,
    symmetric_limit,
)


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
