"""Named figures computed from the model itself (interventions, attribution, free-running
completion), not from one inspection record, and the figure set of one input at chosen epochs
(record and model figures, with provenance) that `damcha figures` exports and `regenerate` rebuilds.

A model figure is a name, when it applies (`missing`), what it computes (`values`, which the app
caches) and how it is drawn (`draw`, losses in the run's unit). Nothing here asks which mechanism
or data set made the run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
import torch

from damcha.analysis import interventions
from damcha.analysis.ablation import input_under_modes
from damcha.analysis.attribution import TARGET_NAMES, block_sums, metric_contributions, per_cell, token_attributions
from damcha.analysis.heads import HEAD_TITLES, direct_logit_attribution, head_effects, head_site_note, logit_path_note
from damcha.analysis.inspection import InspectionRecord, inspect_input, mean_structures, sequence_profile
from damcha.analysis.interventions import (
    ALPHAS,
    GAMMAS,
    MEAN_INPUTS,
    available_interventions,
    block_grid,
    block_grid_over,
    intervention_options,
    mean_metric,
    off_diagonal_curve,
)
from damcha.analysis.structure_patching import structure_patching, structure_site_note
from damcha.inputs.modalities import loss_factor, loss_label, modality_named, task_of
from damcha.inputs.modalities.image_patches import patches_image
from damcha.inputs.model_inputs import validation_arrays
from damcha.runs.checkpoints import Run, load_model
from damcha.runs.evaluation import complete_patches
from damcha.views import figures
from damcha.views.export import ExportItem, Provenance
from damcha.views.figure_sets import (
    available_figures,
    build_figure,
    ink_dark,
    positions_only,
    structure_figure,
    structure_index,
    unless,
)


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
    """(changes (L, H), base loss) in nats; params: kind (zero | mean | mean_position | patch), other (the validation
    input a patch is taken from), n_mean (validation inputs a mean is taken over, default 64)."""
    kind = params.get("kind", "zero")
    reference = None
    if kind in ("mean", "mean_position"):
        reference = validation_arrays(run)[0][:int(params.get("n_mean", 64))]
    elif kind == "patch":
        reference = validation_arrays(run)[0][int(params.get("other", 0))]
    effects = head_effects(model, tokens, targets, kind, reference)
    return {"changes": effects.changes, "base": effects.base}


def _structure_patch_values(model, run, tokens, targets, params, progress=None):
    """(loss changes per site, at every site, base loss) in nats with the structure taken from the
    validation input params["other"] (default 1)."""
    other = validation_arrays(run)[0][int(params.get("other", 1))]
    patch = structure_patching(model, tokens, targets, other)
    cut = len(other) > len(tokens)  # a causal model's longer input, cut to this one's length
    return {"sites": list(patch.sites), "changes": patch.changes, "all_sites": patch.all_sites, "base": patch.base,
            "first_positions": len(tokens) if cut else None}


def _structure_patch(values, params, where, factor, unit):
    sites, changes = list(values["sites"]), np.asarray(values["changes"])
    if len(sites) > 1:  # one site patched alone is already all of them
        sites, changes = [*sites, "all at once"], np.append(changes, values["all_sites"])
    first = values.get("first_positions")
    title = (f"Loss change with the structure of validation input {int(params.get('other', 1))}"
             + (f" (its first {first} positions)" if first else "") + f"; loss {values['base'] * factor:.4f} {unit}")
    return figures.named_bars_figure(sites, changes * factor, title, f"Δ loss ({unit})", "structure patched in")


def _needs_structure_sites(record: InspectionRecord, config) -> str | None:
    return structure_site_note(config)


def _head_logit_values(model, run, tokens, targets, params, progress=None):
    return direct_logit_attribution(model, tokens, targets)


def _head_ablation(values, params, where, factor, unit):
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
    truth = modality_named(model.config.modality).seen_picture(np.asarray(tokens), np.asarray(targets), task_of(model.config))
    return {"truth": truth, "outcomes": input_under_modes(model, tokens, targets)}


def _as_rgb(picture: np.ndarray) -> np.ndarray:
    """A drawn picture as RGB uint8: grey levels 0..16 with the ink dark, or an RGB image as it is."""
    picture = np.asarray(picture)
    return picture if picture.ndim == 3 else np.repeat(ink_dark(picture)[..., None], 3, axis=-1)


def _completion_by_mode(values, params, where, factor, unit):
    images = {"truth": _as_rgb(values["truth"])}
    for o in values["outcomes"]:
        if o.completed_patches is not None:
            images[o.title] = patches_image(o.completed_patches)
        elif o.completed is not None:
            images[o.title] = _as_rgb(o.completed)
    return figures.image_row_figure(images, "The bottom half completed from the true top half, under each metric mode")


def _completes(record: InspectionRecord, config) -> str | None:
    kind = record.modality.completion
    if kind not in ("bottom_half_tokens", "bottom_half_patches") or record.task == "classification":
        return f"no bottom half is completed for {record.modality.title}"
    return None if config.mechanism.metric(config) else f"{record.variant} has no metric modes"


def _block_grid_values(model, run, tokens, targets, params, progress=None):
    return block_grid(model, tokens, targets, bool(params.get("keep", False)))


def _block_grid_validation_values(model, run, tokens, targets, params, progress=None):
    """The block grid averaged over the first params["n"] (64) validation inputs (the input is not used)."""
    x, y, _ = validation_arrays(run)
    n = int(params.get("n", 64))
    return block_grid_over(model, x[:n], y[:n], bool(params.get("keep", False)), progress=progress)


def _block_grid_validation(values, params, where, factor, unit):
    return _block_grid(values, params, f"mean of {int(params.get('n', 64))} validation inputs", factor, unit)


def _interpolation_values(model, run, tokens, targets, params, progress=None):
    mbar = interventions.mean_metric(model, validation_arrays(run)[0][:interventions.MEAN_INPUTS])
    return interventions.interpolation_curve(model, tokens, targets, mbar)


def _off_diagonal_values(model, run, tokens, targets, params, progress=None):
    return off_diagonal_curve(model, tokens, targets)


def _completion_values(model, run, tokens, targets, params, progress=None):
    options = _options(model, params)
    x = torch.as_tensor(np.asarray(tokens), dtype=torch.float32)[None]
    return np.stack([np.asarray(targets), complete_patches(model, x, options)[0].numpy()])


def _block_grid(values, params, where, factor, unit):
    what = "keeping only" if params.get("keep") else "zeroing"
    style = figures.MatrixStyle("block row i", "block column j", value_kind="signed", unit=f"Δ loss ({unit})")
    return figures.head_by_head_figure(values * factor, f"Loss change from {what} M_ij, {where}", style=style)


def _interpolation(values, params, where, factor, unit):
    return figures.curve_figure(ALPHAS, {where: values * factor}, "Loss at M-bar + α (M(x) − M-bar)",
                                "α (0: M-bar, 1: M(x))", f"loss ({unit})", marks={"M(x)": 1.0})


def _off_diagonal(values, params, where, factor, unit):
    return figures.curve_figure(GAMMAS, {where: values * factor}, "Loss with the off-diagonal blocks scaled by γ",
                                "γ (0: diagonal-only, 1: the model)", f"loss ({unit})")


def _completion(values, params, where, factor, unit):
    truth, completed = values
    mse = float(((completed[32:] - truth[32:]) ** 2).mean())
    return figures.image_row_figure({"truth": patches_image(truth), "top half given": patches_image(
        np.concatenate([truth[:32], np.zeros_like(truth[32:])])), "completed from the top half": patches_image(completed)},
        f"Completion from the top half (free-running), bottom-half MSE {mse:.4f}")



def contribution_map(model, tokens, targets, params: dict) -> np.ndarray:
    """The contribution of M(x) to the loss in nats, (D, D) at params' layer and query position (an
    int; anything else: summed over positions), by params' method (gradient_x_metric | gradient)
    and per-call choices (`options`)."""
    where = params.get("position")
    contribution = metric_contributions(model, tokens, targets, dict(params.get("options") or {}),
                                        params.get("method", "gradient_x_metric"))
    return contribution.map(int(params.get("layer", 0)), where if isinstance(where, int) else None)


def _metric_contribution_values(model, run, tokens, targets, params, progress=None):
    return {"map": contribution_map(model, tokens, targets, params), "n_head": model.config.n_head}


def contribution_symbol(params: dict) -> str:
    return "∂L/∂M × M" if params.get("method", "gradient_x_metric") == "gradient_x_metric" else "|∂L/∂M|"


def _metric_contribution(values, params, where, factor, unit):
    position = params.get("position")
    at = f"position {position}" if isinstance(position, int) else str(position or "sum over positions")
    return figures.metric_heatmap_figure(values["map"] * factor, values["n_head"], f"{contribution_symbol(params)}, {at}",
                                         colorbar_title=f"contribution ({unit})")


def _contribution_blocks(values, params, where, factor, unit):
    return figures.head_by_head_figure(block_sums(values["map"] * factor, values["n_head"]), "Summed per block (H × H)",
                                       colorbar_title=f"Σ ({unit})")


def _needs_head_sites(record: InspectionRecord, config) -> str | None:
    return head_site_note(config)


def _needs_logit_path(record: InspectionRecord, config) -> str | None:
    return logit_path_note(config) or _needs_head_sites(record, config)


def _of_record(missing: Callable[[InspectionRecord], str | None]) -> Callable[[InspectionRecord, object], str | None]:
    return lambda record, config: missing(record)


_needs_metric = _of_record(unless(lambda r: r.structure("metric") is not None, "{record.variant} has no explicit metric M(x) to intervene on"))


def _options(model, params: dict):
    """The mechanism's options from params' named choices (`options`, as the pages' controls give them)."""
    return model.mechanism.options_from(dict(params.get("options") or {}))


def _structure_mean_values(model, run, tokens, targets, params, progress=None):
    """params["structure"] averaged over the first params["n"] (64) validation inputs (see
    mean_structures), and the input's record with positions for labels (the inputs' tokens differ)."""
    x, y, _ = validation_arrays(run)
    n, positions, options = int(params.get("n", 64)), params.get("positions"), _options(model, params)
    means = {s.name: s for s in mean_structures(model, x[:n], y[:n], options, progress=progress, positions=positions)}
    if params["structure"] not in means:
        raise ValueError(f"no structure {params['structure']!r}; the mechanism has {sorted(means)}")
    return {"structure": means[params["structure"]],
            "record": positions_only(inspect_input(model, tokens, targets, positions=positions, options=options))}


def _sequence_profile_values(model, run, tokens, targets, params, progress=None):
    """params["structure"] of the input's sequence profile (a summary at every query position) and its record."""
    options = _options(model, params)
    profile = {s.name: s for s in sequence_profile(model, tokens, options, progress=progress)}
    if params["structure"] not in profile:
        raise ValueError(f"no summary {params['structure']!r} along the input; there are {sorted(profile)}")
    return {"structure": profile[params["structure"]], "record": inspect_input(model, tokens, targets, options=options)}


def _structure_of_values(values, params, where, factor, unit):
    record = values["record"]
    index = structure_index(record, int(params.get("layer", 0)), int(params.get("position", -1)))
    return structure_figure(values["structure"], record, index, f", {where}" if where != "this input" else "")


def _intervention_values(model, run, tokens, targets, params, progress=None):
    """(record without, record with) the mechanism's intervention params["intervention"] on the input:
    its own parameters by name, another input by its validation index, the mean metric over the
    first MEAN_INPUTS validation inputs."""
    iv = next((i for i in available_interventions(model.config) if i.name == params.get("intervention")), None)
    if iv is None:
        raise ValueError(f"{model.mechanism.title} has no intervention {params.get('intervention')!r}")
    kinds = {p.kind for p in iv.params}
    x = validation_arrays(run)[0] if kinds & {"input", "mean"} else None
    other = next((x[int(params[p.name])] for p in iv.params if p.kind == "input"), None)
    own = {p.name: params[p.name] for p in iv.params if p.kind not in ("input", "mean") and p.name in params}
    options = intervention_options(model, iv, tokens, own, other,
                                   mean_metric(model, x[:MEAN_INPUTS]) if "mean" in kinds else None)
    return inspect_input(model, tokens, targets), inspect_input(model, tokens, targets, options=options)


INTERVENTION_VIEWS = ("prediction", "token_loss")  # what is drawn without and with an intervention, where it applies


def intervention_views(record: InspectionRecord) -> list[str]:
    """The figures drawn without and with an intervention that apply to the record."""
    return [name for name in INTERVENTION_VIEWS if name in available_figures(record)]


def _intervention(values, params, where, factor, unit):
    """params["view"] (prediction | token_loss) without or with (params["applied"]) the intervention,
    both on one y range so their bars compare."""
    view, applied = params.get("view", "prediction"), params.get("applied", "with")
    pair = [build_figure(view, r, {"next_position": -1}) for r in values]
    figures.share_bar_range(pair)
    fig = pair[0 if applied == "without" else 1]
    fig.update_layout(title=f"{fig.layout.title.text} — {'without' if applied == 'without' else 'with the intervention'}")
    return fig


def _interventions_declared(record: InspectionRecord, config) -> str | None:
    return None if available_interventions(config) else f"{record.variant} declares no intervention of its own"


def _needs_structures(record: InspectionRecord, config) -> str | None:
    return None if record.structures else f"{record.variant} exposes no cross-head structure"


MODEL_FIGURES: dict[str, ModelFigure] = {f.name: f for f in (
    ModelFigure("head_ablation", _needs_head_sites, _head_ablation_values, _head_ablation),
    ModelFigure("input_attribution", lambda record, config: None, _input_attribution_values, _input_attribution),
    ModelFigure("completion_by_mode", _completes, _completion_by_mode_values, _completion_by_mode),
    ModelFigure("head_logit_attribution", _needs_logit_path, _head_logit_values, _head_logit),
    ModelFigure("structure_patching", _needs_structure_sites, _structure_patch_values, _structure_patch),
    ModelFigure("metric_contribution", _needs_metric, _metric_contribution_values, _metric_contribution),
    ModelFigure("contribution_blocks", _needs_metric, _metric_contribution_values, _contribution_blocks),
    ModelFigure("block_grid", _needs_metric, _block_grid_values, _block_grid),
    ModelFigure("block_grid_validation", _needs_metric, _block_grid_validation_values, _block_grid_validation),
    ModelFigure("interpolation", _needs_metric, _interpolation_values, _interpolation),
    ModelFigure("off_diagonal", _needs_metric, _off_diagonal_values, _off_diagonal),
    ModelFigure("completion", _of_record(unless(lambda r: r.modality.completion == "bottom_half_patches",
                                                 "free-running completion is drawn for next-patch models")),
                _completion_values, _completion),
    ModelFigure("structure_mean", _needs_structures, _structure_mean_values, _structure_of_values),
    ModelFigure("sequence_profile", _needs_structures, _sequence_profile_values, _structure_of_values),
    ModelFigure("intervention", _interventions_declared, _intervention_values, _intervention),
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
    factor, unit = (loss_factor(config), loss_label(config)) if config is not None else (1.0, "nats")
    return _model_figure_named(name).draw(values, params, where, factor, unit)


def named_figure_applies(name: str, record: InspectionRecord, config) -> bool:
    """Whether a named figure (a structure, a record figure or a model figure) applies to the record
    of a run with this model config."""
    if name in MODEL_FIGURES:
        return MODEL_FIGURES[name].missing(record, config) is None
    return name in available_figures(record)


def figure_set(run: Run, epochs: Sequence[int], tokens: np.ndarray, targets, params: dict | None = None,
               names: Sequence[str] | None = None, input_source: str = "",
               progress: Callable[[int, int], None] | None = None) -> list[ExportItem]:
    """Every named figure (or `names`) of one input at each epoch, with provenance; params' `options`: the
    mechanism's per-call choices by name (as the pages' controls give them)."""
    params = dict(params or {})
    items = []
    for k, epoch in enumerate(epochs):
        model = load_model(run, epoch)
        options = _options(model, params)
        record = inspect_input(model, tokens, targets, options=options)
        for name in names or available_figures(record):
            if name in MODEL_FIGURES:
                why = MODEL_FIGURES[name].missing(record, run.model_config)
                if why:
                    raise ValueError(why)
                values = model_figure_values(name, model, run, tokens, targets, params)
                fig = model_figure(name, values, params, config=run.model_config)
            else:
                fig = build_figure(name, record, params, epoch)
            prov = Provenance.of(name, run, epoch, tokens, targets, input_source, params, regenerable=True)
            items.append(ExportItem(f"{run.name}_e{epoch:04d}_{name}", fig, prov))
        if progress:
            progress(k + 1, len(epochs))
    return items
