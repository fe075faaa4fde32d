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
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import torch

from damcha.analysis.inspection import InspectionRecord, expected_digit, inspect_input, next_token_probabilities
from damcha.inputs.modalities import ImagePatches, printable
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
        grey = np.rint(255 - np.asarray(inp.levels, dtype=float) / 16 * 255).astype(np.uint8)  # (8, 8)
        return np.kron(grey, np.ones((8, 8), dtype=np.uint8))  # (64, 64)
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


def build_figure(name: str, record: InspectionRecord, params: dict, epoch: int | None = None) -> go.Figure:
    """params: layer, position (a query position; negative: from the end), part (a grid-matrix structure name),
    shared_scale, attn_layer (attention), next_position (text prediction)."""
    index = structure_index(record, int(params.get("layer", 0)), int(params.get("position", -1)))
    shared = bool(params.get("shared_scale", True))
    at = f", epoch {epoch}" if epoch is not None else ""
    where = record.where(index["position"])
    structure = record.structure(name)
    if structure is not None:
        suffix = f" ({record.metric_mode}){at}" if name == "head_metrics" else at
        return structure_figure(structure, record, index, suffix, shared)
    if name in ("decomposition", "contour", "surface"):
        matrices = grid_matrices(record)
        if not matrices:
            raise ValueError(f"{record.variant} has no matrix with a head grid to draw as {name!r}")
        if name == "decomposition":
            panels = {s.title: s.at(**index) for s in matrices}
            return figures.metric_panels_figure(panels, record.n_head, f"Decomposition at {where}{at}", shared)
        part = _LEGACY_PARTS.get(params.get("part", ""), params.get("part") or matrices[0].name)
        s = record.structure(part)
        if s is None or s.kind is not StructureKind.HEAD_GRID_MATRIX:
            raise ValueError(f"unknown matrix {part!r}; expected one of {[m.name for m in matrices]}")
        style = structure_style(s, record)
        if name == "contour":
            return figures.contour_figure(s.at(**index), record.n_head, f"Contours of {s.title}, {where}{at}", style=style)
        return figures.surface_figure(s.at(**index), f"{s.title} as a surface, {where}{at}", style=style)
    if name == "attention":
        a = int(params.get("attn_layer", 0))
        return figures.attention_figure(record.attention_map(a), record.token_labels, f"Attention, layer {a + 1}{at}")
    if name == "token_loss":
        if record.token_loss is None or record.task == "classification":
            raise ValueError("this input has no per-token loss")
        loss = np.where(np.isnan(record.token_loss), 0.0, record.token_loss)
        vectors = record.task == "next_vector"
        unit = "squared error" if vectors else "bits"
        return figures.token_loss_figure(loss, record.target_labels, f"Loss per position ({unit}){at}", unit)
    if name == "prediction":
        return _prediction_figure(record, params, at)
    if name == "input":  # params: highlight (default True): mark the cell the query position reads
        if not isinstance(record.modality, ImagePatches) and record.modality.name != "digit_image":
            raise ValueError(f"the input figure is drawn for images; this input is {record.modality.title}")
        t = index["token"]
        marked = record.causal and bool(params.get("highlight", True))
        cell = _grid_cell(record, t) if marked else None
        label = (f"query position {t} reads {record.token_labels[t]}" if cell else
                 f"query position {t} reads the start") if marked else ""
        if isinstance(record.modality, ImagePatches):
            return figures.rgb_image_figure(record_image(record), "What the model sees (32x32, 8x8 patches)",
                                            highlight=cell, highlight_label=label)
        return figures.digit_figure(digit_levels(record), "What the model sees (8x8, levels 0..16)", cell, label)
    if name == "attention_grid":
        if not record.modality.grid:
            raise ValueError("attention over the image grid needs an image input")
        a = int(params.get("attn_layer", 0))
        t = index["token"]
        maps = attention_on_grid(record, a, t)
        return figures.grid_maps_figure(maps, [f"head {h + 1}" for h in range(len(maps))],
                                        f"Attention of query position {t} over the image, layer {a + 1}{at}", "weight")
    if name == "patch_error":
        if record.task != "next_vector" or record.token_loss is None:
            raise ValueError("the per-patch error map is drawn for next-patch models")
        rows, cols = record.modality.grid
        return figures.grid_maps_figure(record.token_loss.reshape(1, rows, cols), ["squared error"],
                                        f"Error of each patch given the true ones before it{at}", "MSE")
    raise ValueError(f"unknown figure {name!r}; expected one of {available_figures(record)}")


def prediction_takes_position(record: InspectionRecord) -> bool:
    """Whether the prediction figure shows one position's next-token distribution (text), rather
    than the whole input (a digit's expected pixels, class probabilities)."""
    return record.task == "next_token" and record.modality.name == "byte_text"


def _prediction_figure(record: InspectionRecord, params: dict, at: str) -> go.Figure:
    if record.task == "next_vector" and isinstance(record.modality, ImagePatches):
        if record.modality.next_patch:
            return figures.image_row_figure({"truth": record_image(record), "predicted, each patch from the true ones "
                                             "before it": patches_image(np.clip(record.logits, 0, 1))},
                                            f"Next-patch prediction (teacher forcing){at}")
        return figures.image_row_figure({"truth": record_image(record), "reconstructed, each patch from itself and "
                                         "the ones before it": patches_image(np.clip(record.logits, 0, 1))},
                                        f"Reconstruction in place (causal){at}")
    if record.task == "classification":
        probs = next_token_probabilities(record, 0)
        return figures.probabilities_figure(np.arange(len(probs)), probs, f"Predicted class: {int(probs.argmax())}{at}")
    if record.modality.name == "digit_image" and record.task == "next_token":
        return figures.digit_figure(np.round(expected_digit(record), 1), f"Model's expected pixels{at}")
    if prediction_takes_position(record):
        p = int(params.get("next_position", -1)) % len(record.tokens)
        probs = next_token_probabilities(record, p)
        top = np.argsort(probs)[::-1][:10]
        return figures.probabilities_figure([printable(t) for t in top], probs[top],
                                            f"Most likely next bytes after position {p}{at}")
    raise ValueError(f"no prediction figure for {record.modality.title}")


def patches_image(patches: np.ndarray) -> np.ndarray:
    """(64, 48) patches in [0, 1] -> (32, 32, 3) uint8 image."""
    from damcha.inputs.datasets import patches_to_image

    return np.rint(patches_to_image(np.clip(patches, 0, 1)) * 255).astype(np.uint8)


def record_image(record: InspectionRecord) -> np.ndarray:
    """The image a next-patch record is about (its targets are all 64 patches)."""
    return patches_image(record.targets)


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


def digit_levels(record: InspectionRecord) -> np.ndarray:
    """(8, 8) grey levels of a digit record: the targets of a decoder, the tokens of a classifier."""
    pixels = record.targets if record.task == "next_token" else record.tokens
    return np.asarray(pixels)[-64:].reshape(8, 8)


def available_figures(record: InspectionRecord) -> list[str]:
    names = [s.name for s in record.structures]
    matrices = grid_matrices(record)
    if len(matrices) > 1:
        names.append("decomposition")
    if matrices:
        names += ["contour", "surface"]
    names.append("attention")
    if record.modality.grid:
        names.append("attention_grid")
    if record.token_loss is not None and record.task != "classification":
        names.append("token_loss")
    if record.task == "next_vector" and record.modality.grid:
        names.append("patch_error")
    image = isinstance(record.modality, ImagePatches) or record.modality.name == "digit_image"
    if record.task == "classification" or image or record.modality.name == "byte_text":
        names.append("prediction")
    if image:
        names.append("input")
    return names


# Figures computed from the model itself (interventions, free-running completion), not from one record.
MODEL_FIGURES = ("block_grid", "interpolation", "off_diagonal", "completion")


def model_figure_values(name: str, model, run: Run, tokens, targets, params: dict) -> np.ndarray:
    """What a model figure draws: the block grid (params: keep), the loss along M-bar + alpha (M(x) -
    M-bar) (M-bar over the run's first 256 validation inputs), the loss with the off-diagonal blocks
    scaled by gamma, or (truth, completion from the top half) of a next-patch input."""
    from damcha.analysis import interventions
    from damcha.inputs.model_inputs import validation_arrays

    if name == "block_grid":
        return interventions.block_grid(model, tokens, targets, bool(params.get("keep", False)))
    if name == "interpolation":
        mbar = interventions.mean_metric(model, validation_arrays(run)[0][:interventions.MEAN_INPUTS])
        return interventions.interpolation_curve(model, tokens, targets, mbar)
    if name == "off_diagonal":
        return interventions.off_diagonal_curve(model, tokens, targets)
    if name == "completion":
        from damcha.runs.evaluation import complete_patches

        options = model.mechanism.options_from({"metric_mode": params.get("mode", "full")})
        x = torch.as_tensor(np.asarray(tokens), dtype=torch.float32)[None]
        return np.stack([np.asarray(targets), complete_patches(model, x, options)[0].numpy()])
    raise ValueError(f"unknown model figure {name!r}; expected one of {MODEL_FIGURES}")


def model_figure(name: str, values: np.ndarray, params: dict, where: str = "this input", config=None) -> go.Figure:
    """The figure of a model figure's values (see model_figure_values); the app and the CLI share it.
    config: the run's model config, whose loss unit the losses are shown in (default: nats)."""
    from damcha.analysis.interventions import ALPHAS, GAMMAS
    from damcha.inputs.modalities import loss_factor, loss_label

    factor, unit = (loss_factor(config), loss_label(config)) if config is not None else (1.0, "nats")
    if name == "block_grid":
        what = "keeping only" if params.get("keep") else "zeroing"
        style = figures.MatrixStyle("block row i", "block column j", value_kind="signed", unit=f"Δ loss ({unit})")
        return figures.head_by_head_figure(values * factor, f"Loss change from {what} M_ij, {where}", style=style)
    if name == "interpolation":
        return figures.curve_figure(ALPHAS, {where: values * factor}, "Loss at M-bar + α (M(x) − M-bar)",
                                    "α (0: M-bar, 1: M(x))", f"loss ({unit})", marks={"M(x)": 1.0})
    if name == "off_diagonal":
        return figures.curve_figure(GAMMAS, {where: values * factor}, "Loss with the off-diagonal blocks scaled by γ",
                                    "γ (0: diagonal-only, 1: the model)", f"loss ({unit})")
    if name == "completion":
        truth, completed = values
        mse = float(((completed[32:] - truth[32:]) ** 2).mean())
        return figures.image_row_figure({"truth": patches_image(truth), "top half given": patches_image(
            np.concatenate([truth[:32], np.zeros_like(truth[32:])])), "completed from the top half": patches_image(completed)},
            f"Completion from the top half (free-running), bottom-half MSE {mse:.4f}")
    raise ValueError(f"unknown model figure {name!r}; expected one of {MODEL_FIGURES}")


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
                values = model_figure_values(name, model, run, tokens, targets, {**params, "mode": mode})
                fig = model_figure(name, values, params, config=run.model_config)
            else:
                fig = build_figure(name, record, params, epoch)
            prov = Provenance.of(name, run, epoch, tokens, targets, input_source, {**params, "mode": mode})
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
                             {"runs": [str(r.path) for r in runs]}, regenerable=False)
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
