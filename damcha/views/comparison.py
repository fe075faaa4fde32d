"""One input through several runs, side by side: per run its main cross-head structure, the
attention of one layer and head, and the loss per position, each drawn with the run's own labels.

What a run shows is what its record declares (its first structure is its main one; a per-head
structure is taken at the compared head), so no figure here asks which mechanism it draws.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from damcha.analysis.inspection import InspectionRecord
from damcha.model.mechanisms import Identifiability
from damcha.views import figures
from damcha.views.display_units import LOSS_COLOUR, LossUnit
from damcha.views.figure_sets import drawn_matrix, grid_matrices, per_head, structure_index, structure_style

PANELS = ("structure", "attention", "loss")


@dataclass(frozen=True)
class ComparedRun:
    """What one run's row of the comparison draws (2-D arrays and their styles, no model)."""

    label: str
    structure: np.ndarray  # (a, b)
    structure_style: figures.MatrixStyle
    structure_title: str
    attention: np.ndarray | None  # (T, T), None where the run has no such layer or head
    attention_title: str
    token_labels: tuple[str, ...]
    loss: np.ndarray  # (T,) per position, or (1,) for a classifier
    loss_labels: tuple[str, ...]
    loss_unit: str


def main_structure_name(record: InspectionRecord) -> str | None:
    """The structure a mechanism lists first is its main one (DAMCHA's M(x), MHA's W_Q W_Kᵀ forms, …)."""
    return record.structures[0].name if record.structures else None


def metric_parts(records: Sequence[InspectionRecord]) -> dict[str, str]:
    """{structure name: title} of the head-grid matrices the compared records share (DAMCHA: M(x), its
    learned part and its residue), for one choice over every run that has them."""
    grids = [grid_matrices(r) for r in records if grid_matrices(r)]
    if not grids:
        return {}
    shared = set.intersection(*({s.name for s in g} for g in grids))
    # A part's title in every form the runs give it (a row-sum run's "residue (unidentifiable)" is a bilinear
    # run's "deviation from the row mean (learned)"): the choice names what each run will draw.
    titles = {name: " / ".join(dict.fromkeys(s.title for g in grids for s in g if s.name == name)) for name in shared}
    return {s.name: titles[s.name] for s in grids[0] if s.name in shared}


def head_grid_caption(drawn: Sequence[tuple[str, InspectionRecord, str | None]]) -> str | None:
    """What the head-grid panels of a comparison show, run by run, in each run's own words and with what
    training can determine of it (drawn: label, record, structure drawn; None: its main one)."""
    shown, partly = [], False
    for label, record, name in drawn:
        structure = record.structure(name or main_structure_name(record) or "")
        if structure is None or structure not in grid_matrices(record):
            continue
        said = f"({structure.identifiability.value})"  # once: a residue's title already says it is unidentifiable
        shown.append(f"{label}: {structure.title}" + ("" if structure.title.endswith(said) else f" {said}"))
        partly |= structure.identifiability in (Identifiability.PARTLY, Identifiability.UNIDENTIFIABLE)
    if not shown:
        return None
    caveat = (" Differences between the blocks of one row in a panel that is not fully learned come from the "
              "residue, the random split of M(x) that the row sum never trains." if partly else "")
    return "The head-grid panels show " + "; ".join(shown) + "." + caveat


def compared_run(record: InspectionRecord, label: str, layer: int = 0, head: int = 0, position: int = -1,
                 structure: str | None = None) -> ComparedRun:
    """A run's row: `structure` (default its main one) at layer/position (a per-head kind at `head`),
    the attention of `layer` and `head` (None when the record lacks them), and its loss per position."""
    s = record.structure(structure or main_structure_name(record) or "")
    if s is None:
        raise ValueError(f"{record.variant} has no structure {structure!r}: it has {[x.name for x in record.structures]}")
    index = structure_index(record, min(layer, record.structure_layers - 1), position)
    taken_head = min(head, s.at(**index).shape[0] - 1) if per_head(s) else None
    where = f", head {taken_head + 1}" if taken_head is not None else ""
    where += f", {record.where(index['position'])}" if "position" in s.index_axes else ""
    where += f", layer {index['layer'] + 1}" if s.size("layer") > 1 else ""
    attention, attention_title = None, f"no layer {layer + 1} head {head + 1}"
    if layer in record.attention_layers and head < record.n_head:
        attention = record.attention_map(layer)[head]
        attention_title = f"Attention (query × key), layer {layer + 1} head {head + 1}"
    if record.task == "classification":
        loss = np.atleast_1d(record.token_loss if record.token_loss is not None else [np.nan])
        loss_labels: tuple[str, ...] = ("class",)
    else:
        loss = record.token_loss if record.token_loss is not None else np.full(len(record.tokens), np.nan)
        loss_labels = tuple(record.target_labels or record.token_labels)
    unit = LossUnit.of_record(record)
    return ComparedRun(label, np.asarray(drawn_matrix(s, index, taken_head), dtype=float), structure_style(s, record),
                       s.title + where, attention, attention_title, tuple(record.token_labels),
                       unit.value(np.asarray(loss, dtype=float)), tuple(loss_labels), unit.label)


def _attention_style(run: ComparedRun) -> figures.MatrixStyle:
    """Queries and keys named by position and token, as the attention figure names them (a text's
    repeated characters are told apart by where they stand)."""
    labels = tuple(f"{i} {label}".strip() for i, label in enumerate(run.token_labels))
    return figures.MatrixStyle("query", "key", labels, labels, "probability", "weight")


def panel_figure(run: ComparedRun, panel: str, loss_range: Sequence[float] | None = None) -> go.Figure:
    """One panel of a run's row as a figure of its own (for export one by one)."""
    if panel == "structure":
        return figures.matrix_figure(run.structure, run.structure_style, f"{run.label}: {run.structure_title}")
    if panel == "attention":
        if run.attention is None:
            raise ValueError(f"{run.label}: {run.attention_title}")
        return figures.matrix_figure(run.attention, _attention_style(run), f"{run.label}: {run.attention_title}")
    if panel == "loss":
        fig = go.Figure(_loss_bars(run))
        fig.update_layout(title=f"{run.label}: loss per position ({run.loss_unit})", margin=dict(l=60, r=20, t=50, b=50))
        _loss_axes(fig, run, loss_range, title=f"loss ({run.loss_unit})")
        return fig
    raise ValueError(f"unknown panel {panel!r}; expected one of {PANELS}")


MOST_BARS = 16  # more positions than this read as a filled profile: single bars become hairlines in a column


def _loss_bars(run: ComparedRun) -> go.Bar | go.Scatter:
    """The loss at each position (0 where there is no target), the target named on hover: bars for a few
    positions, a filled step profile for many; a classifier's one loss as one bar named, not numbered."""
    hover = f"position %{{x}}: target %{{customdata}}<br>%{{y:.3f}} {run.loss_unit}<extra></extra>"
    y = np.nan_to_num(run.loss)
    if len(run.loss) == 1:  # lying along the panel's width, as long as the loss
        return go.Bar(y=["this input"], x=y, orientation="h", showlegend=False, marker_color=LOSS_COLOUR, width=0.5,
                      hovertemplate=f"%{{y}}: %{{x:.3f}} {run.loss_unit}<extra></extra>")
    if len(run.loss) <= MOST_BARS:
        return go.Bar(x=np.arange(len(run.loss)), y=y, customdata=list(run.loss_labels), showlegend=False,
                      marker_color=LOSS_COLOUR, hovertemplate=hover)
    return go.Scatter(x=np.arange(len(run.loss)), y=y, customdata=list(run.loss_labels), showlegend=False,
                      mode="lines", line=dict(shape="hvh", width=1, color=LOSS_COLOUR), fill="tozeroy",
                      hovertemplate=hover)


def _loss_axes(fig: go.Figure, run: ComparedRun, loss_range: Sequence[float] | None, title: str = "", **where) -> None:
    """The loss axis (y over positions, x along a classifier's one bar) on the shared range, named by
    `title` (the comparison's subplot title names it there)."""
    loss_axis = dict(title=title, **({"range": list(loss_range)} if loss_range else {}))
    if len(run.loss) == 1:
        fig.update_xaxes(**loss_axis, **where)
    else:
        fig.update_xaxes(title="position", **where)
        fig.update_yaxes(**loss_axis, **where)


def shared_loss_range(runs: Sequence[ComparedRun]) -> tuple[float, float]:
    """One y range for every run's loss bars, so their heights compare."""
    top = max((float(np.nanmax(r.loss)) for r in runs if np.isfinite(r.loss).any()), default=1.0)
    return 0.0, top * 1.05 if top > 0 else 1.0


def comparison_figure(runs: Sequence[ComparedRun], title: str = "") -> go.Figure:
    """Every run as two square panels (structure, attention), each heatmap with its own colour bar beside
    it, over the run's loss per position drawn the whole width and on one scale for every run. Two
    columns, not three: at a journal's single column three panels abreast left each heatmap a strip."""
    n = len(runs)
    if not n:
        raise ValueError("no runs to compare")
    titles = [t for r in runs for t in (f"{r.label}: {r.structure_title}", r.attention_title, f"loss ({r.loss_unit})")]
    height = 120 + 520 * n
    # Between the two panels stand the left one's colour bar and the right one's tick labels (export widths
    # set this gap in pixels: damcha.views.panel_spacing); each run's loss spans both columns.
    fig = make_subplots(rows=2 * n, cols=2, subplot_titles=titles, horizontal_spacing=0.2,
                        vertical_spacing=110 / height, row_heights=[1.0, 0.3] * n,
                        specs=[[{}, {}], [{"colspan": 2}, None]] * n)
    loss_range = shared_loss_range(runs)
    for i, r in enumerate(runs):
        row = 2 * i + 1
        cells = [(r.structure, r.structure_style), (r.attention, _attention_style(r) if r.attention is not None else None)]
        for col, (M, style) in enumerate(cells, start=1):
            if M is None or style is None:
                continue
            sub = fig.get_subplot(row, col)
            y0, y1 = sub.yaxis.domain
            trace = figures.matrix_trace(M, style, figures.colour_scale(style.value_kind, M))
            trace.colorbar = figures.colour_bar(style.unit, x=sub.xaxis.domain[1] + 0.005, y=(y0 + y1) / 2, len=y1 - y0,
                                                thickness=10)
            fig.add_trace(trace, row=row, col=col)
            figures.style_axes(fig, style, M.shape, most=16, row=row, col=col)
            if figures.squarish(M.shape):  # square cells, as every other heatmap of a matrix
                fig.update_yaxes(scaleanchor=sub.yaxis.anchor, row=row, col=col)
            if col == 2:  # the subplot title says query × key
                fig.update_yaxes(title="", row=row, col=col)
            if style.grid:
                x, y = sub.yaxis.anchor, sub.xaxis.anchor
                for shape in figures.grid_shapes(style.grid, M.shape[0] // style.grid, x, y):
                    fig.add_shape(shape)
        fig.add_trace(_loss_bars(r), row=row + 1, col=1)
        _loss_axes(fig, r, loss_range, row=row + 1, col=1)
    fig.update_layout(title=title, height=height, margin=dict(l=60, r=30, t=80, b=40))
    fig.update_annotations(font_size=11)
    return fig
