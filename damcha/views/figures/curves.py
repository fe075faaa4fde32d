"""Curves and bars: values along the input, losses per token, training curves, statistics over epochs, spectra, projections, scatters."""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from damcha.views.display_units import LOSS_COLOUR, loss_colour
from damcha.views.figures.style import LOG_AXIS, _signed_colours, symmetric_limit

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
    xs, ys = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    low, high = float(min(xs.min(), ys.min())), float(max(xs.max(), ys.max()))
    fig = go.Figure(go.Scatter(x=xs, y=ys, mode="markers", marker=dict(size=5, opacity=0.6), showlegend=False,
                               customdata=np.arange(len(xs)),
                               hovertemplate="input %{customdata}<br>%{x:.4g} vs %{y:.4g}<extra></extra>"))
    fig.add_trace(go.Scatter(x=[low, high], y=[low, high], mode="lines", line=dict(color="black", width=1, dash="dot"),
                             showlegend=False, hoverinfo="skip"))
    below = float(np.mean(ys < xs))
    fig.add_annotation(text=f"{below:.0%} below the diagonal, {float(np.mean(ys > xs)):.0%} above", xref="paper",
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
    named = np.asarray(labels)
    fig = go.Figure()
    for lab in sorted(set(named.tolist()), key=str):
        sel = named == lab
        fig.add_trace(go.Scatter(x=points[sel, 0], y=points[sel, 1], mode="markers", name=f"{label_name} {lab}",
                                 marker=dict(size=6, opacity=0.8)))
    fig.update_layout(title=title, margin=dict(l=50, r=20, t=50, b=50))
    fig.update_xaxes(title="component 1")
    fig.update_yaxes(title="component 2")
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
    z = symmetric_limit(values)
    spans = []
    for ch, v in zip(chars, values):
        a = min(1.0, abs(float(v)) / z)
        rgb = "178,24,43" if v > 0 else "33,102,172"
        text = html.escape(ch).replace("\n", "⏎<br>")
        spans.append(f'<span title="{float(v):.4g}" style="background: rgba({rgb},{a:.2f}); padding: 1px 0">{text}</span>')
    return '<div style="font-family: monospace; line-height: 1.8; white-space: pre-wrap">' + "".join(spans) + "</div>"
