"""Per-head quantities: head-by-head blocks, per-head metrics, named bars, and attention maps one head a panel."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from damcha.views.figures.style import (
    MatrixStyle,
    _category_ticks,
    _labelled_ticks,
    _signed_colours,
    colour_bar,
    colour_scale,
)


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


def named_bars_figure(names: Sequence[str], values: Sequence[float], title: str = "", y_title: str = "value",
                      x_title: str = "") -> go.Figure:
    """One signed bar per name (a loss change per patched site), red raising and blue lowering, its value
    written on it: a few numbers read better as bars than as a 1 x n heatmap."""
    bars = np.asarray(values, dtype=float)
    fig = go.Figure(go.Bar(x=[str(n) for n in names], y=bars, marker_color=_signed_colours(bars),
                           text=[f"{v:+.3g}" for v in bars], textposition="outside", cliponaxis=False,
                           hovertemplate="%{x}: %{y:.4g}<extra></extra>"))
    fig.add_hline(y=0, line=dict(color="black", width=1))
    fig.update_layout(title=title, margin=dict(l=60, r=20, t=60, b=50))
    fig.update_xaxes(title=x_title, type="category")
    fig.update_yaxes(title=y_title)
    return fig
