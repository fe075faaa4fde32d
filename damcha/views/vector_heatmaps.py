"""Heatmaps as vector cells for SVG and PDF export.

Plotly draws a heatmap as one embedded raster image, so an SVG or PDF heatmap blurs or steps when a
journal scales it. `vector_heatmaps` returns a copy of a figure in which each heatmap of at most
MAX_VECTOR_CELLS cells is a rectangle per cell (filled with the colour the heatmap would give it,
from its own colour scale and range), its colour bar kept on an invisible carrier trace that also
keeps the axes' categories, and the numbers it wrote in its cells written as text. Larger heatmaps
stay images (hundreds of thousands of rectangles would make a file no viewer opens quickly).
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.colors import hex_to_rgb, unlabel_rgb

from damcha.views.plotly_arrays import trace_array

MAX_VECTOR_CELLS = 128 * 128  # per figure


def _positions(coords, n: int) -> tuple[np.ndarray, np.ndarray, list | None]:
    """Cell centres and half-widths along one axis (n cells), and the categories when the axis is
    categorical (cells then sit at their category's index)."""
    coords = trace_array(coords)
    if coords is None:
        return np.arange(n, dtype=float), np.full(n, 0.5), None
    values = list(coords)
    if any(isinstance(v, str) for v in values):
        return np.arange(n, dtype=float), np.full(n, 0.5), values
    centres = np.asarray(values, dtype=float)
    steps = np.diff(centres) if n > 1 else np.array([1.0])
    half = np.abs(np.concatenate([steps[:1], steps])) / 2
    return centres, half, None


def _cell_colours(trace: go.Heatmap, z: np.ndarray) -> tuple[np.ndarray, np.ndarray, float, float, object]:
    """The colour of each cell (strings, shape of z; None for missing values) as the heatmap maps them,
    whether each is dark, and the range and colour scale it maps them with."""
    finite = z[np.isfinite(z)]
    low = trace.zmin if trace.zmin is not None else (float(finite.min()) if finite.size else 0.0)
    high = trace.zmax if trace.zmax is not None else (float(finite.max()) if finite.size else 1.0)
    if trace.zmid is not None and trace.zmin is None and trace.zmax is None:
        reach = max(abs(low - trace.zmid), abs(high - trace.zmid))
        low, high = trace.zmid - reach, trace.zmid + reach
    span = high - low if high > low else 1.0
    scale = trace.colorscale or go.Heatmap(colorscale="Plasma").colorscale  # ((position, colour), ...)
    stops = np.array([float(pos) for pos, _ in scale])
    rgb = np.array([hex_to_rgb(c) if str(c).startswith("#") else unlabel_rgb(c) for _, c in scale], dtype=float)
    fractions = np.clip((np.nan_to_num(z, nan=low) - low) / span, 0.0, 1.0).ravel()
    channels = np.stack([np.interp(fractions, stops, rgb[:, k]) for k in range(3)], axis=-1)  # linear in RGB, as plotly.js
    colours = np.array([f"rgb({r:.0f},{g:.0f},{b:.0f})" for r, g, b in channels], dtype=object).reshape(z.shape)
    dark = (channels @ np.array([0.299, 0.587, 0.114]) < 128).reshape(z.shape)  # text on it is written in white
    colours[~np.isfinite(z)] = None
    return colours, dark, low, high, scale


def _cell_texts(trace: go.Heatmap, z: np.ndarray) -> np.ndarray | None:
    """What the heatmap writes in its cells (its text, or z formatted by its texttemplate), or None."""
    template = trace.texttemplate or ""
    if trace.text is not None and "%{text}" in template:
        return np.asarray(trace_array(trace.text), dtype=object).reshape(z.shape).astype(str)
    if "%{z" in template:
        return np.vectorize(lambda v: "" if not np.isfinite(v) else f"{v:.3g}", otypes=[object])(z)
    return None


def _vector_traces(trace: go.Heatmap) -> tuple[list[dict], list[go.Scatter]]:
    """The cell rectangles (layout shapes) and the carrier (colour bar, categories) and text traces
    that draw one heatmap."""
    z = np.asarray(trace_array(trace.z), dtype=float)  # (rows, cols)
    rows, cols = z.shape
    xs, xhalf, xcats = _positions(trace.x, cols)
    ys, yhalf, ycats = _positions(trace.y, rows)
    colours, dark, low, high, scale = _cell_colours(trace, z)
    xref, yref = trace.xaxis or "x", trace.yaxis or "y"
    shapes = [dict(type="rect", xref=xref, yref=yref, layer="below", x0=xs[c] - xhalf[c], x1=xs[c] + xhalf[c],
                   y0=ys[r] - yhalf[r], y1=ys[r] + yhalf[r], fillcolor=colours[r, c],
                   line=dict(width=0.25, color=colours[r, c]))  # a hairline of the same colour: no seams
              for r in range(rows) for c in range(cols) if colours[r, c] is not None]
    carrier_x = list(xcats if xcats is not None else xs) + [xcats[0] if xcats else xs[0]] * rows
    carrier_y = [ycats[0] if ycats else ys[0]] * cols + list(ycats if ycats is not None else ys)
    carrier = go.Scatter(x=carrier_x, y=carrier_y, mode="markers", xaxis=xref, yaxis=yref, hoverinfo="skip",
                         showlegend=False, marker=dict(size=1, opacity=0, color=[low] * len(carrier_x), cmin=low,
                                                       cmax=high, colorscale=scale, showscale=trace.showscale is not False,
                                                       colorbar=trace.colorbar.to_plotly_json()))
    out = [carrier]
    texts = _cell_texts(trace, z)
    if texts is not None:
        at_x = [xcats[c] if xcats else xs[c] for r in range(rows) for c in range(cols)]
        at_y = [ycats[r] if ycats else ys[r] for r in range(rows) for c in range(cols)]
        font = {**trace.textfont.to_plotly_json(), "color": np.where(dark, "white", "black").ravel().tolist()}
        out.append(go.Scatter(x=at_x, y=at_y, mode="text", text=texts.ravel().tolist(), xaxis=xref, yaxis=yref,
                              hoverinfo="skip", showlegend=False, textfont=font))
    return shapes, out


def vector_heatmaps(fig: go.Figure, max_cells: int = MAX_VECTOR_CELLS) -> go.Figure:
    """A copy of the figure with its heatmaps drawn as vector cells (see the module's docstring), or
    the figure itself when its heatmaps hold more than `max_cells` cells together."""
    heatmaps = [t for t in fig.data if t.type == "heatmap" and t.z is not None]
    cells = sum(np.asarray(trace_array(t.z)).size for t in heatmaps)
    if not heatmaps or cells > max_cells:
        return fig
    shapes, traces, extents = list(fig.layout.shapes or ()), [], {}
    for trace in fig.data:
        if trace.type == "heatmap" and trace.z is not None:
            cell_shapes, drawn = _vector_traces(trace)
            shapes = cell_shapes + shapes  # cells below the figure's own overlays (the head grid)
            traces += drawn
            extents.update(_extents(trace, cell_shapes))
        else:
            traces.append(trace)
    layout = {**fig.layout.to_plotly_json(), "shapes": shapes}
    # The axes span the cells exactly, as around a heatmap (the carrier's markers would pad them): the
    # vector figure lays out as the raster one does.
    for name, (low, high) in extents.items():
        axis = layout.setdefault(name, {})
        if axis.get("range") is None:
            axis["range"] = [high, low] if axis.get("autorange") == "reversed" else [low, high]
            axis.pop("autorange", None)
            # a fixed range under square cells (scaleanchor) is kept by shrinking the panel, as an autoranged
            # heatmap's is, not widened past the cells
            axis.setdefault("constrain", "domain")
    return go.Figure(data=traces, layout=layout, frames=fig.frames)


def _extents(trace: go.Heatmap, cells: list[dict]) -> dict[str, tuple[float, float]]:
    """{layout axis name: (low, high)} the heatmap's cells cover."""
    if not cells:
        return {}
    x_name = "xaxis" + (trace.xaxis or "x")[1:]
    y_name = "yaxis" + (trace.yaxis or "y")[1:]
    return {x_name: (min(c["x0"] for c in cells), max(c["x1"] for c in cells)),
            y_name: (min(c["y0"] for c in cells), max(c["y1"] for c in cells))}
