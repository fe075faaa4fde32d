"""Pure figure functions: arrays in, plotly Figure out. The app, the export CLI and the tests share them."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

DIVERGING = "RdBu_r"  # ColorBrewer RdBu: colour-blind safe, reversed so positive is red
SEQUENTIAL = "Viridis"
GREYS = "Greys"


def symmetric_limit(*arrays: np.ndarray) -> float:
    """max |value| over the arrays, so a diverging scale is centred at 0 (1.0 when all are 0)."""
    m = max((float(np.nanmax(np.abs(a))) for a in arrays if a is not None and np.size(a)), default=0.0)
    return m if m > 0 else 1.0


def _head_ticks(n_head: int, head_dim: int, short: bool = False) -> dict:
    return dict(tickvals=[i * head_dim + (head_dim - 1) / 2 for i in range(n_head)],
                ticktext=[f"{'h' if short else 'head '}{i + 1}" for i in range(n_head)])


def _grid_shapes(n_head: int, head_dim: int, xref: str = "x", yref: str = "y") -> list[dict]:
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
                          colorbar_title: str = "value") -> go.Figure:
    """A D x D metric with its head-block grid, diverging scale centred at 0, head labels on the axes."""
    D = M.shape[0]
    d = D // n_head
    z = zmax or symmetric_limit(M)
    fig = go.Figure(go.Heatmap(
        z=M, zmin=-z, zmax=z, zmid=0, colorscale=DIVERGING, colorbar=dict(title=colorbar_title),
        hovertemplate="row %{y} (head %{customdata[0]}), col %{x} (head %{customdata[1]})<br>%{z:.4f}<extra></extra>",
        customdata=np.stack(np.meshgrid(np.arange(D) // d + 1, np.arange(D) // d + 1)[::-1], axis=-1),
    ))
    fig.update_layout(title=title, shapes=_grid_shapes(n_head, d), margin=dict(l=60, r=20, t=50, b=50))
    fig.update_xaxes(title="column (key side)", **_head_ticks(n_head, d), constrain="domain")
    fig.update_yaxes(title="row (query side)", autorange="reversed", scaleanchor="x", constrain="domain", **_head_ticks(n_head, d))
    return fig


def metric_panels_figure(panels: dict[str, np.ndarray], n_head: int, title: str = "", shared_scale: bool = True) -> go.Figure:
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
        bar = dict(x=1.0 + 0.02, len=0.9) if shared_scale else dict(x=(k / len(names)) - 0.02, len=0.6, thickness=10)
        fig.add_trace(go.Heatmap(z=panels[name], zmin=-z, zmax=z, zmid=0, colorscale=DIVERGING, showscale=show_bar,
                                 colorbar=bar, name=name, hovertemplate=f"{name}<br>row %{{y}}, col %{{x}}: %{{z:.4f}}<extra></extra>"),
                      row=1, col=k)
        ax = "" if k == 1 else str(k)
        shapes += _grid_shapes(n_head, d, xref=f"x{ax}", yref=f"y{ax}")
        short = len(names) > 2
        fig.update_xaxes(**_head_ticks(n_head, d, short), row=1, col=k, constrain="domain")
        fig.update_yaxes(**_head_ticks(n_head, d, short), autorange="reversed", scaleanchor=f"x{ax}", constrain="domain", row=1, col=k,
                         showticklabels=k == 1)
    fig.update_layout(title=title, shapes=shapes, margin=dict(l=60, r=40, t=70, b=40), height=140 + 260 * 3 // len(names))
    return fig


def head_by_head_figure(values: np.ndarray, title: str = "Block norms ‖M_ij‖", colorbar_title: str = "‖M_ij‖",
                        axis_titles: tuple[str, str] = ("row head i", "column head j")) -> go.Figure:
    """H x H values, one per pair of heads (block norms, head-mixing matrices), written in each cell.
    Non-negative values use a sequential scale from 0; signed ones a diverging scale centred at 0."""
    H = values.shape[0]
    labels = [f"head {i + 1}" for i in range(H)]
    signed = bool((values < 0).any())
    z = symmetric_limit(values)
    scale = dict(colorscale=DIVERGING, zmin=-z, zmax=z, zmid=0) if signed else dict(colorscale=SEQUENTIAL, zmin=0)
    fig = go.Figure(go.Heatmap(z=values, x=labels, y=labels, **scale,
                               colorbar=dict(title=colorbar_title), texttemplate="%{z:.3g}",
                               hovertemplate="%{y}, %{x}: %{z:.4f}<extra></extra>"))
    fig.update_layout(title=title, margin=dict(l=60, r=20, t=50, b=50))
    fig.update_xaxes(title=axis_titles[1])
    fig.update_yaxes(title=axis_titles[0], autorange="reversed", scaleanchor="x", constrain="domain")
    return fig


def head_metrics_figure(m: np.ndarray, title: str = "Per-head metrics m_i", shared_scale: bool = True,
                        symbol: str = "m") -> go.Figure:
    """Small multiples of one matrix per head, (H, a, b): DAMCHA's m_i (d x d, or d x D rows for the
    bilinear form), MHA's W_Q^h W_K^hᵀ (D x D). Panels are titled symbol_1 .. symbol_H."""
    H = m.shape[0]
    fig = make_subplots(rows=1, cols=H, subplot_titles=[f"{symbol}_{i + 1}" for i in range(H)], horizontal_spacing=0.03)
    shared = symmetric_limit(m)
    for i in range(H):
        z = shared if shared_scale else symmetric_limit(m[i])
        fig.add_trace(go.Heatmap(z=m[i], zmin=-z, zmax=z, zmid=0, colorscale=DIVERGING,
                                 showscale=(i == H - 1) if shared_scale else False,
                                 hovertemplate=f"{symbol}_{i + 1}[%{{y}}, %{{x}}] = %{{z:.4f}}<extra></extra>"), row=1, col=i + 1)
        fig.update_yaxes(autorange="reversed", scaleanchor=f"x{'' if i == 0 else i + 1}", constrain="domain", row=1, col=i + 1)
        fig.update_xaxes(constrain="domain", row=1, col=i + 1)
    fig.update_layout(title=title, margin=dict(l=40, r=40, t=70, b=30), height=120 + 900 // max(H, 3))
    return fig


def contour_figure(M: np.ndarray, n_head: int | None = None, title: str = "Contours of M(x)", zmax: float | None = None) -> go.Figure:
    """Filled contour map of a matrix (rows downwards), diverging and centred at 0."""
    z = zmax or symmetric_limit(M)
    fig = go.Figure(go.Contour(z=M, zmin=-z, zmax=z, colorscale=DIVERGING, contours=dict(coloring="heatmap"),
                               line=dict(width=0.5), colorbar=dict(title="value")))
    layout = dict(title=title, margin=dict(l=60, r=20, t=50, b=50))
    if n_head:
        d = M.shape[0] // n_head
        layout["shapes"] = _grid_shapes(n_head, d)
        fig.update_xaxes(**_head_ticks(n_head, d))
        fig.update_yaxes(**_head_ticks(n_head, d))
    fig.update_yaxes(autorange="reversed", scaleanchor="x", constrain="domain")
    fig.update_layout(**layout)
    return fig


def surface_figure(M: np.ndarray, title: str = "M(x) as a surface", zmax: float | None = None) -> go.Figure:
    """3D surface of a matrix: height = entry value."""
    z = zmax or symmetric_limit(M)
    fig = go.Figure(go.Surface(z=M, cmin=-z, cmax=z, colorscale=DIVERGING, colorbar=dict(title="value")))
    fig.update_layout(title=title, margin=dict(l=0, r=0, t=50, b=0),
                      scene=dict(xaxis_title="column", yaxis_title="row", zaxis_title="value",
                                 zaxis=dict(range=[-z, z])))
    return fig


def _position_ticks(labels: Sequence[str], most: int = 32) -> dict:
    """Tick labels for a position axis, thinned to at most `most` so they stay readable."""
    step = max(1, -(-len(labels) // most))
    idx = list(range(0, len(labels), step))
    return dict(tickvals=idx, ticktext=[labels[i] for i in idx])


def attention_figure(attn: np.ndarray, tick_labels: Sequence[str] | None = None, title: str = "Attention",
                     zmax: float = 1.0, colorbar_title: str = "weight", panel_titles: Sequence[str] | None = None) -> go.Figure:
    """Small multiples of H maps (H, T, T) of one layer (attention, or allowed-key masks): rows =
    queries, columns = keys, labelled with the tokens. The axes are categories "position token"
    (unique, so repeated tokens stay apart), which also makes the hover name both tokens without
    sending a label for every cell."""
    H, T, _ = attn.shape
    raw = list(tick_labels) if tick_labels is not None and len(tick_labels) == T else [""] * T
    labels = [f"{i} {lab}".strip() for i, lab in enumerate(raw)]
    if (attn < 0).any():  # mixed weights (talking heads, composed heads) can be negative
        z = symmetric_limit(attn)
        scale = dict(zmin=-z, zmax=z, zmid=0, colorscale=DIVERGING)
    else:
        scale = dict(zmin=0, zmax=zmax, colorscale=SEQUENTIAL)
    panels = list(panel_titles) if panel_titles is not None and len(panel_titles) == H else [f"head {i + 1}" for i in range(H)]
    fig = make_subplots(rows=1, cols=H, subplot_titles=panels, horizontal_spacing=0.03)
    for i in range(H):
        fig.add_trace(go.Heatmap(z=attn[i], x=labels, y=labels, **scale, showscale=i == H - 1,
                                 colorbar=dict(title=colorbar_title),
                                 hovertemplate="query %{y}, key %{x}: %{z:.3f}<extra></extra>"), row=1, col=i + 1)
        fig.update_yaxes(autorange="reversed", scaleanchor=f"x{'' if i == 0 else i + 1}", constrain="domain", row=1, col=i + 1,
                         showticklabels=i == 0, **_category_ticks(labels))
        fig.update_xaxes(constrain="domain", row=1, col=i + 1, **_category_ticks(labels, 16))
    fig.update_layout(title=title, margin=dict(l=50, r=40, t=70, b=50), height=140 + 900 // max(H, 3))
    fig.update_xaxes(title="key")
    fig.update_yaxes(title="query", col=1)
    return fig


def _category_ticks(labels: Sequence[str], most: int = 32) -> dict:
    """Ticks of a categorical axis, thinned to at most `most` so they stay readable."""
    step = max(1, -(-len(labels) // most))
    shown = list(labels)[::step]
    return dict(type="category", tickvals=shown, ticktext=shown)


def labelled_matrix_figure(values: np.ndarray, row_labels: Sequence[str], column_labels: Sequence[str],
                           title: str = "", row_title: str = "", column_title: str = "",
                           colorbar_title: str = "value") -> go.Figure:
    """(a, b) values with named rows and columns (per-token gates, mixing vectors, ...): a sequential
    scale from 0 for non-negative values, a diverging one centred at 0 otherwise."""
    rows, cols = values.shape
    row_labels = list(row_labels) if len(row_labels) == rows else [str(i) for i in range(rows)]
    column_labels = list(column_labels) if len(column_labels) == cols else [str(i) for i in range(cols)]
    z = symmetric_limit(values)
    scale = dict(colorscale=DIVERGING, zmin=-z, zmax=z, zmid=0) if (values < 0).any() else \
        dict(colorscale=SEQUENTIAL, zmin=0)
    hover = np.array([[r, c] for r in row_labels for c in column_labels], dtype=object).reshape(rows, cols, 2)
    fig = go.Figure(go.Heatmap(z=values, **scale, colorbar=dict(title=colorbar_title), customdata=hover,
                               hovertemplate="%{customdata[0]}, %{customdata[1]}: %{z:.4f}<extra></extra>"))
    fig.update_layout(title=title, margin=dict(l=60, r=20, t=50, b=50))
    fig.update_xaxes(title=column_title, **_position_ticks(column_labels, 16))
    fig.update_yaxes(title=row_title, autorange="reversed", **_position_ticks(row_labels))
    return fig


def token_loss_figure(token_loss: np.ndarray, labels: Sequence[str], title: str = "Loss per token",
                      unit: str = "bits") -> go.Figure:
    """Bar chart of the per-token loss, labelled with the target tokens: nats converted to bits
    (unit "bits"), or drawn as given (any other unit, e.g. a squared error)."""
    bits = np.asarray(token_loss, dtype=float) / (np.log(2) if unit == "bits" else 1.0)
    fig = go.Figure(go.Bar(x=np.arange(len(bits)), y=bits, customdata=list(labels),
                           hovertemplate="position %{x}: target %{customdata}<br>%{y:.3f} " + unit + "<extra></extra>"))
    fig.update_layout(title=title, margin=dict(l=60, r=20, t=50, b=50))
    fig.update_xaxes(title="position")
    fig.update_yaxes(title=f"loss ({unit})")
    return fig


def digit_figure(levels: np.ndarray, title: str = "What the model sees (8x8, levels 0..16)") -> go.Figure:
    """An 8x8 digit, ink dark, as in scikit-learn's own plots."""
    fig = go.Figure(go.Heatmap(z=levels, zmin=0, zmax=16, colorscale=GREYS, colorbar=dict(title="level"),
                               text=levels, texttemplate="%{text}", hovertemplate="row %{y}, col %{x}: %{z}<extra></extra>"))
    fig.update_layout(title=title, margin=dict(l=30, r=20, t=50, b=30), width=380, height=360)
    fig.update_yaxes(autorange="reversed", scaleanchor="x", constrain="domain", showticklabels=False)
    fig.update_xaxes(showticklabels=False, constrain="domain")
    return fig


def probabilities_figure(levels: np.ndarray, probs: np.ndarray, title: str) -> go.Figure:
    """Bar chart of a predictive distribution (e.g. class probabilities)."""
    fig = go.Figure(go.Bar(x=[str(v) for v in levels], y=probs, hovertemplate="%{x}: %{y:.3f}<extra></extra>"))
    fig.update_layout(title=title, margin=dict(l=50, r=20, t=50, b=40))
    fig.update_yaxes(title="probability", range=[0, 1])
    return fig


def training_curves_figure(metrics: Sequence[dict], keys: Sequence[str] = ("train_nll", "val_nll"),
                           title: str = "Training curves", marked_epochs: Sequence[int] = (),
                           y_title: str = "nats per token") -> go.Figure:
    """Curves of metrics.jsonl columns over epochs; marked_epochs (snapshots) drawn as markers."""
    fig = go.Figure()
    epochs = [m["epoch"] for m in metrics]
    for key in keys:
        ys = [m.get(key) for m in metrics]
        if all(y is None for y in ys):
            continue
        fig.add_trace(go.Scatter(x=epochs, y=ys, mode="lines", name=key))
        marks = [(e, y) for e, y in zip(epochs, ys) if e in set(marked_epochs) and y is not None]
        if marks:
            fig.add_trace(go.Scatter(x=[e for e, _ in marks], y=[y for _, y in marks], mode="markers",
                                     name=f"{key} (snapshots)", showlegend=False, marker=dict(size=7)))
    fig.update_layout(title=title, margin=dict(l=60, r=20, t=50, b=50), legend=dict(orientation="h", y=-0.25))
    fig.update_xaxes(title="epoch")
    fig.update_yaxes(title=y_title)
    return fig


def _matrix_trace(kind: str, M: np.ndarray, z: float, showscale: bool = True, **kw):
    if kind == "heatmap":
        return go.Heatmap(z=M, zmin=-z, zmax=z, zmid=0, colorscale=DIVERGING, showscale=showscale, **kw)
    if kind == "contour":
        return go.Contour(z=M, zmin=-z, zmax=z, colorscale=DIVERGING, contours=dict(coloring="heatmap"),
                          line=dict(width=0.5), showscale=showscale, **kw)
    if kind == "surface":
        return go.Surface(z=M, cmin=-z, cmax=z, colorscale=DIVERGING, showscale=showscale, **kw)
    raise ValueError(f"unknown matrix view {kind!r}; expected heatmap, contour or surface")


def epoch_animation_figure(mats: np.ndarray, epochs: Sequence[int], n_head: int | None, kind: str = "heatmap",
                           title: str = "M(x) over training") -> go.Figure:
    """(E, a, b) matrices as animation frames with a play button and an epoch slider.
    One colour range for every frame, so frames compare honestly. n_head: draw the head grid of a
    D x D matrix (None: no grid)."""
    mats = np.asarray(mats)
    z = symmetric_limit(mats)
    frames = [go.Frame(data=[_matrix_trace(kind, m, z)], name=str(e), layout=dict(title=f"{title}: epoch {e}"))
              for m, e in zip(mats, epochs)]
    fig = go.Figure(data=[_matrix_trace(kind, mats[0], z)], frames=frames)
    steps = [dict(method="animate", label=str(e), args=[[str(e)], dict(mode="immediate", frame=dict(duration=0, redraw=True))])
             for e in epochs]
    fig.update_layout(
        title=f"{title}: epoch {epochs[0]}", margin=dict(l=60, r=20, t=60, b=90),
        updatemenus=[dict(type="buttons", x=0, y=-0.08, xanchor="left", yanchor="top", showactive=False, buttons=[
            dict(label="▶ play", method="animate", args=[None, dict(frame=dict(duration=700, redraw=True), fromcurrent=True)]),
            dict(label="❚❚", method="animate", args=[[None], dict(mode="immediate", frame=dict(duration=0, redraw=False))]),
        ])],
        sliders=[dict(active=0, steps=steps, x=0.15, len=0.85, y=-0.05, currentvalue=dict(prefix="epoch "))],
    )
    if kind != "surface":
        if n_head:
            d = mats.shape[-1] // n_head
            fig.update_layout(shapes=_grid_shapes(n_head, d))
            fig.update_xaxes(**_head_ticks(n_head, d))
            fig.update_yaxes(**_head_ticks(n_head, d))
        fig.update_xaxes(constrain="domain")
        fig.update_yaxes(autorange="reversed", scaleanchor="x", constrain="domain")
    else:
        fig.update_layout(scene=dict(zaxis=dict(range=[-z, z]), xaxis_title="column", yaxis_title="row"))
    return fig


def small_multiples_figure(mats: Sequence[np.ndarray], titles: Sequence[str], n_head: int | None, kind: str = "heatmap",
                           title: str = "", cols: int | None = None) -> go.Figure:
    """Matrices in a grid (paper figures 8, 10, 11 style) with one shared colour range and one colour bar.
    n_head: draw the head grid of D x D matrices (None: no grid)."""
    n = len(mats)
    cols = cols or n
    rows = (n + cols - 1) // cols
    specs = [[{"type": "scene" if kind == "surface" else "xy"} for _ in range(cols)] for _ in range(rows)]
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=list(titles), specs=specs,
                        horizontal_spacing=0.03, vertical_spacing=0.08)
    z = symmetric_limit(*mats)
    grid = n_head or 1
    d = mats[0].shape[-1] // grid
    ticks = _head_ticks(grid, d) if n_head else {}
    shapes = []
    for k, M in enumerate(mats):
        r, c = k // cols + 1, k % cols + 1
        fig.add_trace(_matrix_trace(kind, M, z, showscale=k == n - 1), row=r, col=c)
        if kind != "surface":
            ax = "" if k == 0 else str(k + 1)
            shapes += _grid_shapes(grid, d, xref=f"x{ax}", yref=f"y{ax}")
            fig.update_yaxes(autorange="reversed", scaleanchor=f"x{ax}", constrain="domain", showticklabels=c == 1, row=r, col=c,
                             **ticks)
            fig.update_xaxes(constrain="domain", row=r, col=c, **ticks)
        else:
            fig.update_scenes(zaxis=dict(range=[-z, z]), row=r, col=c)
    fig.update_layout(title=title, shapes=shapes, margin=dict(l=50, r=40, t=70, b=30), height=320 * rows + 60)
    return fig


def statistic_curves_figure(epochs: Sequence[int], curves: dict[str, Sequence[float]],
                            bands: dict[str, tuple[Sequence[float], Sequence[float], Sequence[float]]] | None = None,
                            losses: dict[str, Sequence[float]] | None = None, title: str = "") -> go.Figure:
    """One panel per statistic over epochs (this input as a line, a validation sample as a
    10-90% band with its median dashed), and the training/validation loss in the last panel."""
    names = list(curves)
    n = len(names) + (1 if losses else 0)
    cols = 3
    rows = (n + cols - 1) // cols
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=names + (["loss (nats)"] if losses else []),
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
    if losses:
        k = len(names)
        for lname, ys in losses.items():
            fig.add_trace(go.Scatter(x=list(epochs), y=list(ys), mode="lines+markers", name=lname),
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
    fig = go.Figure(go.Heatmap(z=attr, zmin=-z, zmax=z, zmid=0, colorscale=DIVERGING, colorbar=dict(title="attribution"),
                               text=levels, texttemplate="%{text}",
                               hovertemplate="row %{y}, col %{x}: %{z:.4g} (level %{text})<extra></extra>"))
    fig.update_layout(title=title, margin=dict(l=30, r=20, t=50, b=30), width=420, height=380)
    fig.update_yaxes(autorange="reversed", scaleanchor="x", constrain="domain", showticklabels=False)
    fig.update_xaxes(showticklabels=False, constrain="domain")
    return fig


def token_attribution_figure(values: np.ndarray, labels: Sequence[str], title: str = "Attribution per token") -> go.Figure:
    """Bar chart of signed per-token attributions, coloured red (raises) / blue (lowers)."""
    colours = ["#b2182b" if v > 0 else "#2166ac" for v in values]
    fig = go.Figure(go.Bar(x=np.arange(len(values)), y=values, marker_color=colours, customdata=list(labels),
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
        fig.add_annotation(text=highlight_label, xref="paper", yref="paper", x=0.5, y=-0.04, showarrow=False)
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
    fig = make_subplots(rows=1, cols=n, subplot_titles=list(titles), horizontal_spacing=0.03)
    finite = maps[np.isfinite(maps)]
    z = float(np.abs(finite).max()) if finite.size and np.abs(finite).max() > 0 else 1.0
    scale = dict(zmin=0, zmax=z, colorscale=SEQUENTIAL) if sequential else dict(zmin=-z, zmax=z, zmid=0, colorscale=DIVERGING)
    for i in range(n):
        fig.add_trace(go.Heatmap(z=maps[i], **scale, showscale=i == n - 1, colorbar=dict(title=colorbar_title),
                                 hovertemplate="row %{y}, col %{x}: %{z:.4f}<extra></extra>"), row=1, col=i + 1)
        fig.update_yaxes(autorange="reversed", scaleanchor=f"x{'' if i == 0 else i + 1}", constrain="domain",
                         showticklabels=False, row=1, col=i + 1)
        fig.update_xaxes(constrain="domain", showticklabels=False, row=1, col=i + 1)
    fig.update_layout(title=title, margin=dict(l=20, r=40, t=70, b=20), height=120 + 900 // max(n, 3))
    return fig


# Cells of each kind of grid trace (all such traces of one figure together) that a browser is sent
# to draw: a heatmap is an image, but contours are traced and surfaces meshed in the browser, far slower.
MAX_DISPLAY_CELLS = {"heatmap": 256 * 256, "contour": 96 * 96, "surface": 64 * 64}


def display_copy(fig: go.Figure, max_cells: dict[str, int] | None = None) -> go.Figure:
    """The figure to draw in a browser: when its heatmaps, contours or surfaces hold more cells
    than `max_cells` allows their kind (a 512 x 512 metric, eight 1024 x 1024 attention maps), each
    is replaced by the means of f x f blocks, placed at the blocks' centres so overlays drawn in cell
    coordinates (the head grid) stay where they were. Exports keep the full-resolution original."""
    limits = max_cells or MAX_DISPLAY_CELLS
    cells: dict[str, int] = {}
    for t in fig.data:
        if t.type in limits and t.z is not None:
            cells[t.type] = cells.get(t.type, 0) + np.asarray(t.z).size
    f = max((int(np.ceil(np.sqrt(n / limits[kind]))) for kind, n in cells.items()), default=1)
    if f <= 1:
        return fig
    out = go.Figure(fig)
    for trace in [*out.data, *(t for frame in out.frames for t in frame.data)]:  # animation frames too
        if trace.type not in limits or trace.z is None:
            continue
        z = np.asarray(trace.z, dtype=float)
        trace.z = block_means(z, f)
        for axis, n in (("x", z.shape[1]), ("y", z.shape[0])):
            given = getattr(trace, axis)
            centres = np.arange(0, n, f) + (np.minimum(np.arange(0, n, f) + f, n) - 1 - np.arange(0, n, f)) / 2
            setattr(trace, axis, list(given)[::f] if given is not None and len(given) == n else centres)
        trace.customdata = None
        trace.hovertemplate = f"rows %{{y}}, columns %{{x}} (mean of {f}×{f} cells): %{{z:.4f}}<extra></extra>"
    title = out.layout.title.text or ""
    out.update_layout(title_text=f"{title}<br><sup>display: means of {f}×{f} cells; exports keep full resolution</sup>")
    return out


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


def interval_figure(names: Sequence[str], means: Sequence[float], lows: Sequence[float], highs: Sequence[float],
                    title: str = "", y_title: str = "", paper: Sequence[float | None] | None = None,
                    zero_line: bool = False) -> go.Figure:
    """Means over seeds with their 95% intervals (error bars), and the paper's number where it has one
    (on a right-hand axis: the paper's numbers come from other data sets and scales). zero_line: a dotted line at 0, for differences whose sign is the verdict."""
    means = np.asarray(means, dtype=float)
    up = np.nan_to_num(np.asarray(highs, dtype=float) - means)
    down = np.nan_to_num(means - np.asarray(lows, dtype=float))
    fig = go.Figure(go.Scatter(x=list(names), y=means, mode="markers", name="ours (mean, 95% interval)",
                               error_y=dict(type="data", array=up, arrayminus=down, visible=True),
                               marker=dict(size=9)))
    if paper is not None and any(p is not None for p in paper):  # its own data set and scale: its own axis
        fig.add_trace(go.Scatter(x=list(names), y=[np.nan if p is None else p for p in paper], mode="markers",
                                 name="paper (right axis)", yaxis="y2", marker=dict(symbol="diamond-open", size=11)))
        fig.update_layout(yaxis2=dict(title="paper (its data set)", overlaying="y", side="right", showgrid=False))
    if zero_line:
        fig.add_hline(y=0, line_dash="dot", line_color="grey")
    fig.update_layout(title=title, yaxis_title=y_title, margin=dict(l=60, r=20, t=50, b=80))
    return fig
