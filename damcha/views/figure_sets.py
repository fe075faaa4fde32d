"""Named figures of one inspection record: what the inspector shows and what `damcha figures` exports.

A figure is chosen by a name and a few parameters, so a provenance JSON ({figure, run, epoch,
input, params}) regenerates it exactly. The names are the record's own structure names (drawn
by their kind: `metric`, `block_norms`, `head_metrics`, `qk_forms`, ...) and a few views every
record has or a structure kind implies: `decomposition`, `contour`, `surface` (matrices with a
head grid), `attention`, `token_loss`, `prediction`, `input`. Nothing here asks which mechanism
or data set made the record.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import plotly.graph_objects as go

from damcha.analysis.inspection import InspectionRecord, expected_digit, next_token_probabilities
from damcha.inputs.modalities.image_patches import patches_image
from damcha.model.mechanisms import Structure, StructureKind
from damcha.views import figures
from damcha.views.display_units import LossUnit

# Matrix names accepted by `part` as they were before structures had names of their own.
_LEGACY_PARTS = {"M(x)": "metric", "learned part": "metric_learned", "residue": "metric_residue"}


def grid_matrices(record: InspectionRecord) -> list[Structure]:
    """The record's structures drawn as D x D matrices with a head grid (DAMCHA: M, learned, residue)."""
    return [s for s in record.structures if s.kind is StructureKind.HEAD_GRID_MATRIX]


def structure_index(record: InspectionRecord, layer: int, position: int) -> dict:
    """Where to take per-layer and per-position structures: layer, the index of query position
    `position` among the record's positions (negative: from the end), and the token there."""
    p = record.position_index(position)
    token = int(record.positions[p]) if record.causal else position % len(record.tokens)
    return {"layer": layer, "position": p, "token": token}


def positions_only(record: InspectionRecord) -> InspectionRecord:
    """The record with its token labels replaced by position numbers: for structures averaged over
    inputs, whose positions hold different tokens."""
    return dataclasses.replace(record, token_labels=tuple(f"position {i}" for i in range(len(record.token_labels))))


def uses_positions(record: InspectionRecord) -> bool:
    """Whether any structure differs between positions (a query-position control applies)."""
    return any(s.size("position") > 1 or "token" in s.index_axes for s in record.structures)


def predicted_class(record: InspectionRecord) -> tuple[int, float]:
    """A classifier's most probable class and its probability."""
    probs = next_token_probabilities(record, 0)
    return int(probs.argmax()), float(probs.max())


def input_thumbnail(inp) -> np.ndarray | None:
    """What an image input looks like as the model reads it, as an RGB or grey uint8 array large
    enough to see: a digit's 8 x 8 grey levels (ink dark) or a colour crop, each pixel a square."""
    if inp.levels is not None:
        return np.kron(ink_dark(inp.levels), np.ones((8, 8), dtype=np.uint8))  # (64, 64)
    if inp.image is not None:
        return np.kron(np.asarray(inp.image, dtype=np.uint8), np.ones((3, 3, 1), dtype=np.uint8))  # (96, 96, 3)
    return None


def fixed_position_note(record: InspectionRecord) -> str:
    """What the page says where no query-position control applies: one set of structures for the
    whole input, structures drawn along every token at once (MoA's per-token gates), or none that
    depends on the position."""
    if not record.causal:
        return "One set of structures for the whole input."
    along = [s.title for s in record.structures if "token" in s.axes]
    if along:
        return f"{', '.join(along)}: drawn along every position at once."
    return "Its structures are the same at every position."


def per_head(s: Structure) -> bool:
    """Whether the drawn array holds one matrix per head (pick one to draw it as a single matrix)."""
    return s.kind in (StructureKind.PER_HEAD_FORMS, StructureKind.MASK_PATTERN, StructureKind.ATTENTION_MAPS)


def matrix_grid(s: Structure, record: InspectionRecord) -> int | None:
    """n_head when the structure's 2-D matrices are D x D and read in head blocks, else None."""
    return record.n_head if s.kind is StructureKind.HEAD_GRID_MATRIX else None


def structure_style(s: Structure, record: InspectionRecord) -> figures.MatrixStyle:
    """How the structure's 2-D matrices are drawn (one head's, for per-head kinds): its own axis
    titles, labels, value kind and unit, the same in every figure of it."""
    rows, cols = s.values.shape[-2:]
    row_axis, col_axis = s.drawn[-2:]
    tokens = record.token_labels
    return figures.MatrixStyle(s.axis_title(row_axis), s.axis_title(col_axis),
                               tuple(s.axis_labels(row_axis, rows, tokens)), tuple(s.axis_labels(col_axis, cols, tokens)),
                               str(s.value_kind), s.colorbar_title, matrix_grid(s, record))


def panel_titles(s: Structure, record: InspectionRecord) -> list[str]:
    """The names of the matrices of a per-head kind (its first drawn axis): heads from 1, or its labels."""
    axis = s.drawn[0]
    return s.axis_labels(axis, s.values.shape[-3], record.token_labels)


def drawn_matrix(s: Structure, index: dict, head: int | None = None) -> np.ndarray:
    """The 2-D array a figure of one structure draws at a layer/position index (one head's, for per-head kinds)."""
    values = s.at(**index)
    return values[head] if head is not None and values.ndim == 3 else values


def structure_figure(s: Structure, record: InspectionRecord, index: dict, suffix: str = "",
                     shared_scale: bool = True) -> go.Figure:
    """One structure at a layer/position, drawn by its kind, with its own labels, scale and unit."""
    values = s.at(**index)
    if "token" in s.index_axes:
        t = min(int(index.get("token", 0)), s.size("token") - 1)
        where = f", token {t} '{record.token_labels[t]}'"
    else:
        where = f", {record.where(index.get('position', 0))}" if "position" in s.index_axes else ""
    layer = f", layer {index.get('layer', 0) + 1}" if s.size("layer") > 1 else ""
    title = f"{s.title}{where}{layer}{suffix}"
    style = structure_style(s, record)
    if s.kind is StructureKind.HEAD_GRID_MATRIX:
        return figures.metric_heatmap_figure(values, record.n_head, title, style=style)
    if s.kind is StructureKind.HEAD_BY_HEAD:
        return figures.head_by_head_figure(values, title, style=style)
    if s.kind is StructureKind.PER_HEAD_FORMS:
        return figures.head_metrics_figure(values, title, shared_scale, style=style,
                                           panel_titles=panel_titles(s, record))
    if s.kind is StructureKind.MATRIX and s.drawn[-2] == "token" and values.shape[-1] <= figures.PROFILE_LINES:
        return figures.profile_figure(values, record.token_labels[:len(values)], style.col_labels, title, style.unit,
                                      style.col_title)
    if s.kind in (StructureKind.TOKEN_GATES, StructureKind.MATRIX):
        return figures.labelled_matrix_figure(values, style.row_labels, style.col_labels, title, style.row_title,
                                              style.col_title, style.unit, style.value_kind)
    if s.kind in (StructureKind.MASK_PATTERN, StructureKind.ATTENTION_MAPS):
        return figures.attention_figure(values.astype(float), record.token_labels, title, colorbar_title=style.unit,
                                        panel_titles=panel_titles(s, record), value_kind=style.value_kind)
    raise ValueError(f"no figure for structure kind {s.kind}")


@dataclass(frozen=True)
class NamedFigure:
    """A figure of one record chosen by its name. missing: why it does not apply to a record (None
    when it does). draw(record, params, index, at): index is `structure_index` of the params, at the
    epoch suffix of the title."""

    name: str
    missing: Callable[[InspectionRecord], str | None]
    draw: Callable[[InspectionRecord, dict, dict, str], go.Figure]


def _decomposition(record, params, index, at):
    panels = {s.title: s.at(**index) for s in grid_matrices(record)}
    return figures.metric_panels_figure(panels, record.n_head, f"Decomposition at {record.where(index['position'])}{at}",
                                        bool(params.get("shared_scale", True)), grid_matrices(record)[0].colorbar_title)


def _grid_matrix(record: InspectionRecord, params: dict) -> Structure:
    matrices = grid_matrices(record)
    part = _LEGACY_PARTS.get(params.get("part", ""), params.get("part") or matrices[0].name)
    s = record.structure(part)
    if s is None or s.kind is not StructureKind.HEAD_GRID_MATRIX:
        raise ValueError(f"unknown matrix {part!r}; expected one of {[m.name for m in matrices]}")
    return s


def _contour(record, params, index, at):
    s = _grid_matrix(record, params)
    return figures.contour_figure(s.at(**index), record.n_head, f"Contours of {s.title}, {record.where(index['position'])}{at}",
                                  style=structure_style(s, record))


def _surface(record, params, index, at):
    s = _grid_matrix(record, params)
    return figures.surface_figure(s.at(**index), f"{s.title} as a surface, {record.where(index['position'])}{at}",
                                  style=structure_style(s, record))


def _attention(record, params, index, at):
    a = int(params.get("attn_layer", 0))
    return figures.attention_figure(record.attention_map(a), record.token_labels, f"Attention, layer {a + 1}{at}")


def _token_loss(record, params, index, at):
    unit = LossUnit.of_record(record)
    loss = unit.value(np.where(np.isnan(record.token_loss), 0.0, record.token_loss))
    return figures.token_loss_figure(loss, record.target_labels, f"Loss per position ({unit.label}){at}", unit.label)


def _input(record, params, index, at):  # params: highlight (default True): mark the cell the query position reads
    t = index["token"]
    marked = record.causal and bool(params.get("highlight", True))
    cell = _grid_cell(record, t) if marked else None
    label = (f"query position {t} reads {record.token_labels[t]}" if cell else
             f"query position {t} reads the start") if marked else ""
    m = record.modality
    return PICTURE_FIGURES[m.picture](seen_picture(record), m.picture_caption, cell, label, m.grid)


def _attention_grid(record, params, index, at):
    a, t = int(params.get("attn_layer", 0)), index["token"]
    maps = attention_on_grid(record, a, t)
    return figures.grid_maps_figure(maps, [f"head {h + 1}" for h in range(len(maps))],
                                    f"Attention of query position {t} over the image, layer {a + 1}{at}", "weight")


def _patch_error(record, params, index, at):
    rows, cols = record.modality.grid
    return figures.grid_maps_figure(record.token_loss.reshape(1, rows, cols), ["squared error"],
                                    f"Error of each patch given the true ones before it{at}", "MSE")


def unless(condition: Callable[[InspectionRecord], bool], why: str) -> Callable[[InspectionRecord], str | None]:
    return lambda record: None if condition(record) else why.format(record=record)


# Every named figure of a record besides its structures: what the inspector shows, `damcha figures`
# exports and a provenance regenerates. A new figure is one entry here and its test.
RECORD_FIGURES: dict[str, NamedFigure] = {f.name: f for f in (
    NamedFigure("decomposition", unless(lambda r: len(grid_matrices(r)) > 1,
                                         "{record.variant} has no matrix with a head grid to decompose"), _decomposition),
    NamedFigure("contour", unless(lambda r: bool(grid_matrices(r)),
                                   "{record.variant} has no matrix with a head grid to draw as contours"), _contour),
    NamedFigure("surface", unless(lambda r: bool(grid_matrices(r)),
                                   "{record.variant} has no matrix with a head grid to draw as a surface"), _surface),
    NamedFigure("attention", lambda record: None, _attention),
    NamedFigure("attention_grid", unless(lambda r: bool(r.modality.grid), "attention over the image grid needs an "
                                          "image input"), _attention_grid),
    NamedFigure("token_loss", unless(lambda r: r.token_loss is not None and r.task != "classification",
                                      "this input has no per-token loss"), _token_loss),
    NamedFigure("patch_error", unless(lambda r: r.task == "next_vector" and r.token_loss is not None and bool(r.modality.grid),
                                       "the per-patch error map is drawn for next-patch models"), _patch_error),
    NamedFigure("prediction", unless(lambda r: has_prediction(r), "no prediction figure for {record.modality.title}"),
                lambda record, params, index, at: _prediction_figure(record, params, at)),
    NamedFigure("input", unless(lambda r: bool(r.modality.picture), "the input figure is drawn for images; this "
                                 "input is {record.modality.title}"), _input),
)}


def build_figure(name: str, record: InspectionRecord, params: dict, epoch: int | None = None) -> go.Figure:
    """A structure of the record by its name, or one of RECORD_FIGURES. params: layer, position (a
    query position; negative: from the end), part (a grid-matrix structure name), shared_scale,
    attn_layer (attention), next_position (text prediction), highlight (input), named_run (the title
    names the run, for figures shown beside another run's). The title names the epoch of the record's
    snapshot (or `epoch`, for a record of a model not loaded from a run)."""
    if epoch is None and record.source is not None:
        epoch = record.source.epoch
    index = structure_index(record, int(params.get("layer", 0)), int(params.get("position", -1)))
    run = f" {Path(record.source.run).name}" if params.get("named_run") and record.source and record.source.run else ""
    at = f",{run} epoch {epoch}" if epoch is not None else ""
    structure = record.structure(name)
    if structure is not None:
        suffix = f" ({structure.drawn_under}){at}" if structure.drawn_under else at
        return structure_figure(structure, record, index, suffix, bool(params.get("shared_scale", True)))
    if name not in RECORD_FIGURES:
        raise ValueError(f"unknown figure {name!r}; expected one of {available_figures(record)}")
    why = RECORD_FIGURES[name].missing(record)
    if why:
        raise ValueError(why)
    return RECORD_FIGURES[name].draw(record, params, index, at)


def prediction_takes_position(record: InspectionRecord) -> bool:
    """Whether the prediction figure shows one position's next-token distribution (text), rather
    than the whole input (a digit's expected pixels, class probabilities)."""
    return record.task == "next_token" and record.modality.prediction == "next_token_distribution"


def has_prediction(record: InspectionRecord) -> bool:
    """Whether a prediction figure applies: class probabilities, or the prediction the modality declares
    for its task (next-token kinds for decoders, the image kind for vector models)."""
    if record.task == "classification":
        return True
    kind = record.modality.prediction
    return kind is not None and (kind == "image_from_patches") == (record.task == "next_vector")


def seen_picture(record: InspectionRecord) -> np.ndarray:
    """What the model sees, as the modality's picture kind names it."""
    picture = record.modality.seen_picture(record.tokens, record.targets, record.task)
    if picture is None:
        raise ValueError(f"a {record.modality.name} input is not a picture")
    return picture


def _predicted_image(record: InspectionRecord, at: str) -> go.Figure:
    m = record.modality
    return figures.image_row_figure({"truth": seen_picture(record), m.prediction_caption: patches_image(record.logits)},
                                    f"{m.prediction_title}{at}")


def _expected_levels(record: InspectionRecord, at: str) -> go.Figure:
    return figures.digit_figure(np.round(expected_digit(record), 1), f"{record.modality.prediction_title}{at}")


def _next_token_distribution(record: InspectionRecord, at: str, next_position: int = -1) -> go.Figure:
    p = int(next_position) % len(record.tokens)
    probs = next_token_probabilities(record, p)
    top = np.argsort(probs)[::-1][:10]
    return figures.probabilities_figure([record.modality.token_text(t) for t in top], probs[top],
                                        f"{record.modality.prediction_title} after position {p}{at}")


# How each kind a modality declares is drawn (damcha.inputs.modalities.base: PICTURES, PREDICTIONS).
PICTURE_FIGURES = {
    "grey_levels": lambda levels, title, cell, label, grid: figures.digit_figure(levels, title, cell, label),
    "rgb": lambda image, title, cell, label, grid: figures.rgb_image_figure(image, title, grid[0], cell, label),
}
PREDICTION_FIGURES = {
    "image_from_patches": lambda record, params, at: _predicted_image(record, at),
    "expected_levels": lambda record, params, at: _expected_levels(record, at),
    "next_token_distribution": lambda record, params, at: _next_token_distribution(record, at,
                                                                                   params.get("next_position", -1)),
}


def _prediction_figure(record: InspectionRecord, params: dict, at: str) -> go.Figure:
    if record.task == "classification":
        probs = next_token_probabilities(record, 0)
        return figures.probabilities_figure(np.arange(len(probs)), probs, f"Predicted class: {int(probs.argmax())}{at}")
    kind = record.modality.prediction
    if kind is None:
        raise ValueError(f"a {record.modality.name} model declares no prediction figure")
    return PREDICTION_FIGURES[kind](record, params, at)


def _grid(record: InspectionRecord) -> tuple[int, int]:
    grid = record.modality.grid
    if grid is None:
        raise ValueError(f"a {record.modality.name} input's positions tile no image")
    return grid


def _grid_cell(record: InspectionRecord, position: int) -> tuple[int, int] | None:
    """The (row, col) of the patch or pixel an input position holds (None for a start token)."""
    rows, cols = _grid(record)
    offset = 1 if record.token_labels and record.token_labels[0] == "start" else 0
    k = position - offset
    return None if k < 0 or k >= rows * cols else (k // cols, k % cols)


def attention_on_grid(record: InspectionRecord, layer: int, query: int) -> np.ndarray:
    """(H, rows, cols) attention of one query position to every key, each key placed at the patch or
    pixel it holds (cells that are no key of this query, or no input at all, are NaN)."""
    rows, cols = _grid(record)
    attn = record.attention_map(layer)[:, query]  # (H, T)
    maps = np.full((attn.shape[0], rows * cols), np.nan)
    for s in range(attn.shape[1]):
        cell = _grid_cell(record, s)
        if cell is not None:
            maps[:, cell[0] * cols + cell[1]] = attn[:, s]
    return maps.reshape(-1, rows, cols)


def available_figures(record: InspectionRecord) -> list[str]:
    """The record's structures, then every named figure that applies to it."""
    return [s.name for s in record.structures] + [n for n, f in RECORD_FIGURES.items() if f.missing(record) is None]


def ink_dark(levels: np.ndarray) -> np.ndarray:
    """Grey levels 0..16 as a grey uint8 image with the ink dark (16: black)."""
    return np.rint(255 - np.clip(np.asarray(levels, dtype=float), 0, 16) / 16 * 255).astype(np.uint8)
