"""Named figures of one inspection record: what the inspector shows and what `damcha figures` exports.

A figure is chosen by a name and a few parameters, so a provenance JSON ({figure, run, epoch,
input, params}) regenerates it exactly. The names are the record's own structure names (drawn
by their kind: `metric`, `block_norms`, `head_metrics`, `qk_forms`, ...) and a few views every
record has or a structure kind implies: `decomposition`, `contour`, `surface` (matrices with a
head grid), `attention`, `token_loss`, `prediction`, `input`. Nothing here asks which mechanism
or data set made the record.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import torch

from damcha.analysis.inspection import InspectionRecord, expected_digit, inspect_input, next_token_probabilities
from damcha.inputs.modalities.image_patches import patches_image
from damcha.model.mechanisms import Structure, StructureKind
from damcha.runs.checkpoints import Run, load_model, load_run
from damcha.views import figures
from damcha.views.export import ExportItem, Provenance, library_params

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
    import dataclasses

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
        return np.kron(_ink(inp.levels), np.ones((8, 8), dtype=np.uint8))  # (64, 64)
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
                                        bool(params.get("shared_scale", True)))


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
    unit = "squared error" if record.task == "next_vector" else "bits"  # token_loss_figure converts nats to bits
    loss = np.where(np.isnan(record.token_loss), 0.0, record.token_loss)
    return figures.token_loss_figure(loss, record.target_labels, f"Loss per position ({unit}){at}", unit)


def _input(record, params, index, at):  # params: highlight (default True): mark the cell the query position reads
    t = index["token"]
    marked = record.causal and bool(params.get("highlight", True))
    cell = _grid_cell(record, t) if marked else None
    label = (f"query position {t} reads {record.token_labels[t]}" if cell else
             f"query position {t} reads the start") if marked else ""
    return PICTURE_FIGURES[record.modality.picture](seen_picture(record), record.modality.picture_caption, cell, label)


def _attention_grid(record, params, index, at):
    a, t = int(params.get("attn_layer", 0)), index["token"]
    maps = attention_on_grid(record, a, t)
    return figures.grid_maps_figure(maps, [f"head {h + 1}" for h in range(len(maps))],
                                    f"Attention of query position {t} over the image, layer {a + 1}{at}", "weight")


def _patch_error(record, params, index, at):
    rows, cols = record.modality.grid
    return figures.grid_maps_figure(record.token_loss.reshape(1, rows, cols), ["squared error"],
                                    f"Error of each patch given the true ones before it{at}", "MSE")


def _unless(condition: Callable[[InspectionRecord], bool], why: str) -> Callable[[InspectionRecord], str | None]:
    return lambda record: None if condition(record) else why.format(record=record)


# Every named figure of a record besides its structures: what the inspector shows, `damcha figures`
# exports and a provenance regenerates. A new figure is one entry here and its test.
RECORD_FIGURES: dict[str, NamedFigure] = {f.name: f for f in (
    NamedFigure("decomposition", _unless(lambda r: len(grid_matrices(r)) > 1,
                                         "{record.variant} has no matrix with a head grid to decompose"), _decomposition),
    NamedFigure("contour", _unless(lambda r: bool(grid_matrices(r)),
                                   "{record.variant} has no matrix with a head grid to draw as contours"), _contour),
    NamedFigure("surface", _unless(lambda r: bool(grid_matrices(r)),
                                   "{record.variant} has no matrix with a head grid to draw as a surface"), _surface),
    NamedFigure("attention", lambda record: None, _attention),
    NamedFigure("attention_grid", _unless(lambda r: bool(r.modality.grid), "attention over the image grid needs an "
                                          "image input"), _attention_grid),
    NamedFigure("token_loss", _unless(lambda r: r.token_loss is not None and r.task != "classification",
                                      "this input has no per-token loss"), _token_loss),
    NamedFigure("patch_error", _unless(lambda r: r.task == "next_vector" and r.token_loss is not None and bool(r.modality.grid),
                                       "the per-patch error map is drawn for next-patch models"), _patch_error),
    NamedFigure("prediction", _unless(lambda r: has_prediction(r), "no prediction figure for {record.modality.title}"),
                lambda record, params, index, at: _prediction_figure(record, params, at)),
    NamedFigure("input", _unless(lambda r: bool(r.modality.picture), "the input figure is drawn for images; this "
                                 "input is {record.modality.title}"), _input),
)}


def build_figure(name: str, record: InspectionRecord, params: dict, epoch: int | None = None) -> go.Figure:
    """A structure of the record by its name, or one of RECORD_FIGURES. params: layer, position (a
    query position; negative: from the end), part (a grid-matrix structure name), shared_scale,
    attn_layer (attention), next_position (text prediction), highlight (input). The title names the
    epoch of the record's snapshot (or `epoch`, for a record of a model not loaded from a run)."""
    if epoch is None and record.source is not None:
        epoch = record.source.epoch
    index = structure_index(record, int(params.get("layer", 0)), int(params.get("position", -1)))
    at = f", epoch {epoch}" if epoch is not None else ""
    structure = record.structure(name)
    if structure is not None:
        suffix = f" ({record.metric_mode}){at}" if name == "head_metrics" else at
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
    return record.modality.seen_picture(record.tokens, record.targets, record.task)


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
    "grey_levels": lambda levels, title, cell, label: figures.digit_figure(levels, title, cell, label),
    "rgb": lambda image, title, cell, label: figures.rgb_image_figure(image, title, highlight=cell, highlight_label=label),
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
    return PREDICTION_FIGURES[record.modality.prediction](record, params, at)


def _grid_cell(record: InspectionRecord, position: int) -> tuple[int, int] | None:
    """The (row, col) of the patch or pixel an input position holds (None for a start token)."""
    rows, cols = record.modality.grid
    offset = 1 if record.token_labels and record.token_labels[0] == "start" else 0
    k = position - offset
    return None if k < 0 or k >= rows * cols else (k // cols, k % cols)


def attention_on_grid(record: InspectionRecord, layer: int, query: int) -> np.ndarray:
    """(H, rows, cols) attention of one query position to every key, each key placed at the patch or
    pixel it holds (cells that are no key of this query, or no input at all, are NaN)."""
    rows, cols = record.modality.grid
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


@dataclass(frozen=True)
class ModelFigure:
    """A figure computed from the model itself (interventions, free-running completion), not from one
    record. missing(record, config): why it does not apply to a record of a run with this model
    config (None when it does).
    values(model, run, tokens, targets, params) -> array; draw(values, params, where, factor, unit):
    losses shown times `factor` in `unit`."""

    name: str
    missing: Callable[[InspectionRecord, object], str | None]
    values: Callable[..., object]
    draw: Callable[..., go.Figure]


def _head_ablation_values(model, run, tokens, targets, params, progress=None):
    """(changes (L, H), base loss) in nats; params: kind (zero | mean | patch), other (the validation
    input a patch is taken from), n_mean (validation inputs a mean is taken over, default 64)."""
    from damcha.analysis.heads import head_effects
    from damcha.inputs.model_inputs import validation_arrays

    kind = params.get("kind", "zero")
    reference = None
    if kind == "mean":
        reference = validation_arrays(run)[0][:int(params.get("n_mean", 64))]
    elif kind == "patch":
        reference = validation_arrays(run)[0][int(params.get("other", 0))]
    effects = head_effects(model, tokens, targets, kind, reference)
    return {"changes": effects.changes, "base": effects.base}


def _head_logit_values(model, run, tokens, targets, params, progress=None):
    from damcha.analysis.heads import direct_logit_attribution

    return direct_logit_attribution(model, tokens, targets)


def _head_ablation(values, params, where, factor, unit):
    from damcha.analysis.heads import HEAD_TITLES

    changes = np.asarray(values["changes"]) * factor  # (L, H)
    style = figures.MatrixStyle("layer", "head", tuple(f"layer {i + 1}" for i in range(len(changes))), (), "signed",
                                f"Δ loss ({unit})")
    title = f"Loss change per head, {HEAD_TITLES[params.get('kind', 'zero')]}; loss {values['base'] * factor:.4f} {unit}"
    return figures.head_by_head_figure(changes, title, style=style)


def _head_logit(values, params, where, factor, unit):
    style = figures.MatrixStyle("layer", "head", tuple(f"layer {i + 1}" for i in range(len(values))), (), "signed",
                                "logit")
    return figures.head_by_head_figure(values, "Direct logit attribution per head (the right answer's logit)",
                                       style=style)


def _input_attribution_values(model, run, tokens, targets, params, progress=None):
    """Integrated Gradients of params["target"] (default: the loss, in nats) per input position,
    from the modality's blank input; params: n_steps (16), and for a scalar of M(x) its position,
    block (i, j) or head. With the attribution: the token labels, and for an image the attribution
    per pixel or patch and the picture it is drawn over."""
    from damcha.analysis.attribution import per_cell, token_attributions
    from damcha.inputs.modalities import modality_named, task_of

    modality = modality_named(model.config.modality)
    scalar = {k: tuple(v) if k == "block" else v for k, v in params.items() if k in ("position", "block", "head")}
    attr = token_attributions(model, tokens, modality.blank_token, params.get("target", "loss"), targets,
                              int(params.get("n_steps", 16)), progress=progress, **scalar)
    tokens = np.asarray(tokens)
    truth = None if targets is None else np.asarray(targets)
    return {"attribution": attr, "labels": modality.token_labels(tokens), "picture_kind": modality.picture,
            "cells": per_cell(attr.values, tokens, modality) if modality.grid else None,
            "picture": modality.seen_picture(tokens, truth, task_of(model.config)) if modality.picture else None}


def _input_attribution(values, params, where, factor, unit):
    from damcha.analysis.attribution import TARGET_NAMES

    target = params.get("target", "loss")
    scale = factor if target == "loss" else 1.0  # IG is linear in F: the loss's attributions in the page's unit
    what = TARGET_NAMES[target]
    if values["cells"] is None:
        return figures.token_attribution_figure(values["attribution"].values * scale, values["labels"],
                                                f"Which tokens drive {what}")
    cells = values["cells"] * scale
    if values["picture_kind"] == "grey_levels":  # a digit: its grey levels written in the cells
        return figures.digit_attribution_figure(np.nan_to_num(cells), values["picture"], f"Which pixels drive {what}")
    return figures.grid_maps_figure(cells[None], ["attribution per patch"], f"Which patches drive {what}", "attribution",
                                    sequential=False)


def _completion_by_mode_values(model, run, tokens, targets, params, progress=None):
    """The input under each metric mode (damcha.analysis.ablation.ModeOutcome: loss, completion,
    continuation, predicted class) and the picture of the truth the completions are drawn beside."""
    from damcha.analysis.ablation import input_under_modes
    from damcha.inputs.modalities import modality_named, task_of

    truth = modality_named(model.config.modality).seen_picture(np.asarray(tokens), np.asarray(targets), task_of(model.config))
    return {"truth": truth, "outcomes": input_under_modes(model, tokens, targets)}


def _as_rgb(picture: np.ndarray) -> np.ndarray:
    """A drawn picture as RGB uint8: grey levels 0..16 with the ink dark, or an RGB image as it is."""
    picture = np.asarray(picture)
    return picture if picture.ndim == 3 else np.repeat(_ink(picture)[..., None], 3, axis=-1)


def _ink(levels: np.ndarray) -> np.ndarray:
    """Grey levels 0..16 as a grey uint8 image with the ink dark (16: black)."""
    return np.rint(255 - np.clip(np.asarray(levels, dtype=float), 0, 16) / 16 * 255).astype(np.uint8)


def _completion_by_mode(values, params, where, factor, unit):
    images = {"truth": _as_rgb(values["truth"])}
    for o in values["outcomes"]:
        if o.completed_patches is not None:
            images[o.mode] = patches_image(o.completed_patches)
        elif o.completed is not None:
            images[o.mode] = _as_rgb(o.completed)
    return figures.image_row_figure(images, "The bottom half completed from the true top half, under each metric mode")


def _completes(record: InspectionRecord, config) -> str | None:
    kind = record.modality.completion
    if kind not in ("bottom_half_tokens", "bottom_half_patches") or record.task == "classification":
        return f"no bottom half is completed for {record.modality.title}"
    return None if config.mechanism.metric(config) else f"{record.variant} has no metric modes"


def _block_grid_values(model, run, tokens, targets, params, progress=None):
    from damcha.analysis.interventions import block_grid

    return block_grid(model, tokens, targets, bool(params.get("keep", False)))


def _interpolation_values(model, run, tokens, targets, params, progress=None):
    from damcha.analysis import interventions
    from damcha.inputs.model_inputs import validation_arrays

    mbar = interventions.mean_metric(model, validation_arrays(run)[0][:interventions.MEAN_INPUTS])
    return interventions.interpolation_curve(model, tokens, targets, mbar)


def _off_diagonal_values(model, run, tokens, targets, params, progress=None):
    from damcha.analysis.interventions import off_diagonal_curve

    return off_diagonal_curve(model, tokens, targets)


def _completion_values(model, run, tokens, targets, params, progress=None):
    from damcha.runs.evaluation import complete_patches

    options = model.mechanism.options_from({"metric_mode": params.get("mode", "full")})
    x = torch.as_tensor(np.asarray(tokens), dtype=torch.float32)[None]
    return np.stack([np.asarray(targets), complete_patches(model, x, options)[0].numpy()])


def _block_grid(values, params, where, factor, unit):
    what = "keeping only" if params.get("keep") else "zeroing"
    style = figures.MatrixStyle("block row i", "block column j", value_kind="signed", unit=f"Δ loss ({unit})")
    return figures.head_by_head_figure(values * factor, f"Loss change from {what} M_ij, {where}", style=style)


def _interpolation(values, params, where, factor, unit):
    from damcha.analysis.interventions import ALPHAS

    return figures.curve_figure(ALPHAS, {where: values * factor}, "Loss at M-bar + α (M(x) − M-bar)",
                                "α (0: M-bar, 1: M(x))", f"loss ({unit})", marks={"M(x)": 1.0})


def _off_diagonal(values, params, where, factor, unit):
    from damcha.analysis.interventions import GAMMAS

    return figures.curve_figure(GAMMAS, {where: values * factor}, "Loss with the off-diagonal blocks scaled by γ",
                                "γ (0: diagonal-only, 1: the model)", f"loss ({unit})")


def _completion(values, params, where, factor, unit):
    truth, completed = values
    mse = float(((completed[32:] - truth[32:]) ** 2).mean())
    return figures.image_row_figure({"truth": patches_image(truth), "top half given": patches_image(
        np.concatenate([truth[:32], np.zeros_like(truth[32:])])), "completed from the top half": patches_image(completed)},
        f"Completion from the top half (free-running), bottom-half MSE {mse:.4f}")



def _needs_head_sites(record: InspectionRecord, config) -> str | None:
    from damcha.analysis.heads import head_site_note

    return head_site_note(config)


def _of_record(missing: Callable[[InspectionRecord], str | None]) -> Callable[[InspectionRecord, object], str | None]:
    return lambda record, config: missing(record)


_needs_metric = _of_record(_unless(lambda r: r.has_metric, "{record.variant} has no explicit metric M(x) to intervene on"))


MODEL_FIGURES: dict[str, ModelFigure] = {f.name: f for f in (
    ModelFigure("head_ablation", _needs_head_sites, _head_ablation_values, _head_ablation),
    ModelFigure("input_attribution", lambda record, config: None, _input_attribution_values, _input_attribution),
    ModelFigure("completion_by_mode", _completes, _completion_by_mode_values, _completion_by_mode),
    ModelFigure("head_logit_attribution", _needs_head_sites, _head_logit_values, _head_logit),
    ModelFigure("block_grid", _needs_metric, _block_grid_values, _block_grid),
    ModelFigure("interpolation", _needs_metric, _interpolation_values, _interpolation),
    ModelFigure("off_diagonal", _needs_metric, _off_diagonal_values, _off_diagonal),
    ModelFigure("completion", _of_record(_unless(lambda r: r.modality.completion == "bottom_half_patches",
                                                 "free-running completion is drawn for next-patch models")),
                _completion_values, _completion),
)}


def _model_figure_named(name: str) -> ModelFigure:
    if name not in MODEL_FIGURES:
        raise ValueError(f"unknown model figure {name!r}; expected one of {', '.join(MODEL_FIGURES)}")
    return MODEL_FIGURES[name]


def model_figure_values(name: str, model, run: Run, tokens, targets, params: dict,
                        progress: Callable[[int, int], None] | None = None):
    """What a model figure draws (each MODEL_FIGURES entry's values function says what); progress(k, n)
    hears of long computations (Integrated Gradients' steps)."""
    return _model_figure_named(name).values(model, run, tokens, targets, params, progress)


def model_figure(name: str, values: np.ndarray, params: dict, where: str = "this input", config=None) -> go.Figure:
    """The figure of a model figure's values (see model_figure_values); the app and the CLI share it.
    config: the run's model config, whose loss unit the losses are shown in (default: nats)."""
    from damcha.inputs.modalities import loss_factor, loss_label

    factor, unit = (loss_factor(config), loss_label(config)) if config is not None else (1.0, "nats")
    return _model_figure_named(name).draw(values, params, where, factor, unit)


def named_figure_applies(name: str, record: InspectionRecord, config) -> bool:
    """Whether a named figure (a structure, a record figure or a model figure) applies to the record
    of a run with this model config."""
    if name in MODEL_FIGURES:
        return MODEL_FIGURES[name].missing(record, config) is None
    return name in available_figures(record)


def figure_set(run: Run, epochs: Sequence[int], tokens: np.ndarray, targets, mode: str = "full",
               params: dict | None = None, names: Sequence[str] | None = None, input_source: str = "",
               progress: Callable[[int, int], None] | None = None) -> list[ExportItem]:
    """Every named figure (or `names`) of one input at each epoch, with provenance."""
    params = dict(params or {})
    items = []
    for k, epoch in enumerate(epochs):
        model = load_model(run, epoch)
        options = model.mechanism.options_from({"metric_mode": mode})
        record = inspect_input(model, tokens, targets, options=options)
        for name in names or available_figures(record):
            if name in MODEL_FIGURES:
                why = MODEL_FIGURES[name].missing(record, run.model_config)
                if why:
                    raise ValueError(why)
                values = model_figure_values(name, model, run, tokens, targets, {**params, "mode": mode})
                fig = model_figure(name, values, params, config=run.model_config)
            else:
                fig = build_figure(name, record, params, epoch)
            prov = Provenance.of(name, run, epoch, tokens, targets, input_source, {**params, "mode": mode},
                                 regenerable=True)
            items.append(ExportItem(f"{run.name}_e{epoch:04d}_{name}", fig, prov))
        if progress:
            progress(k + 1, len(epochs))
    return items


def paper_figures(runs: Sequence[Run], tokens, targets, input_source: str = "", epochs: int = 5) -> list[ExportItem]:
    """The paper's metric figures from runs on one input, M(x) at the last query position:
    fig. 8 (each run's M at its first and last snapshot), fig. 10 (contours across snapshots, one row per
    run: w/o f(x) above DAMCHA, as in the paper) and fig. 11 (3D surfaces at the last snapshot, side by side)."""
    from damcha.analysis.dynamics import spread_epochs

    mats, titles, last = {}, {}, {}
    for run in runs:
        chosen = spread_epochs(list(run.epochs), epochs)
        records = [inspect_input(load_model(run, e), tokens, targets, positions=[len(tokens) - 1]) for e in chosen]
        if not records[0].has_metric:
            raise ValueError(f"{run.name} has no metric M(x): the paper's metric figures need DAMCHA runs")
        mats[run.name] = [r.structure("metric").at(layer=0, position=0) for r in records]
        titles[run.name] = [f"{run.name}: epoch {e}" if k == 0 else f"epoch {e}" for k, e in enumerate(chosen)]
        last[run.name] = chosen[-1]
    H = runs[0].model_config.n_head
    names = [r.name for r in runs]
    fig8 = figures.small_multiples_figure([m for n in names for m in (mats[n][0], mats[n][-1])],
                                          [t for n in names for t in (titles[n][0], f"epoch {last[n]}")], H, "heatmap",
                                          "M(x): first against last snapshot (paper fig. 8)", cols=2)
    fig10 = figures.small_multiples_figure([m for n in names for m in mats[n]], [t for n in names for t in titles[n]], H,
                                           "contour", "Contours of M(x) across snapshots (paper fig. 10)",
                                           cols=len(mats[names[0]]))
    fig11 = figures.small_multiples_figure([mats[n][-1] for n in names], [f"{n}: epoch {last[n]}" for n in names], H, "surface",
                                           "M(x) as a surface (paper fig. 11)", cols=len(names))
    items = []
    for name, fig in (("fig8_first_vs_last", fig8), ("fig10_contours", fig10), ("fig11_surfaces", fig11)):
        prov = Provenance.of(name, runs[0], last[runs[0].name], tokens, targets, input_source,
                             {"runs": [str(r.path) for r in runs]})
        items.append(ExportItem(name, fig, prov))
    return items


def regenerate(prov: Provenance, run_root: str | Path | None = None) -> ExportItem:
    """The figure a provenance describes, rebuilt from its run, epoch and input."""
    if not prov.regenerable or prov.run is None or prov.epoch is None:
        raise ValueError(f"figure {prov.figure!r} is not a named figure of a run: it cannot be rebuilt from its provenance")
    run_path = Path(prov.run)
    if run_root is not None and not run_path.is_absolute():
        run_path = Path(run_root) / run_path
    run = load_run(run_path)
    if prov.input_tokens is None:
        raise ValueError("this provenance does not carry its input tokens (input too large); pass the input instead")
    params = library_params(prov.params)
    mode = params.pop("mode", "full")
    (item,) = figure_set(run, [prov.epoch], prov.tokens_array(), prov.targets_array(), mode, params, [prov.figure],
                         prov.input_source)
    return item
