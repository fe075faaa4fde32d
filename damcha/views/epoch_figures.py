"""Named figures of one run across its snapshots: how a structure forms over training on one input,
and what validation inputs say about it.

A figure is a name, the sources it is drawn from and a draw function. A source is computed from the
run (through every snapshot) and the figure parameters it reads; figures drawn from one source share
it, so a page computes each source once (the app caches them by those parameters) and `regenerate`
recomputes them from a provenance. Losses are drawn in the run's own unit. Nothing here asks which
mechanism or data set made the run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from damcha.analysis import interventions
from damcha.analysis.dynamics import (
    STATISTICS,
    EpochSweep,
    class_separation,
    dataset_metrics,
    input_groups,
    project,
    spread_epochs,
    statistic_bands,
    statistic_curves,
    sweep_epochs,
    symmetric_spectrum,
    unstructured_baselines,
)
from damcha.inputs.modalities import loss_factor, loss_label
from damcha.inputs.model_inputs import validation_arrays
from damcha.runs.checkpoints import Run, load_model
from damcha.views import figures
from damcha.views.display_units import LossUnit
from damcha.views.export import ExportItem, Provenance
from damcha.views.figure_sets import panel_titles, per_head, structure_index, structure_style
from damcha.views.model_figures import contribution_map, contribution_symbol
from damcha.views.readings import off_diagonal_baseline

Loader = Callable[[Run, int], object]  # (run, epoch) -> the model of that snapshot (cached by the caller)
Progress = Callable[[int, int], None]

# The statistics of M(x) the statistics figure follows, in its panel order.
SHOWN_STATISTICS = ("frobenius", "off_diagonal_share", "residue_share", "asymmetry", "negative_share", "effective_rank")


@dataclass(frozen=True)
class EpochSource:
    """What figures across snapshots are drawn from: `compute(run, load, tokens, targets, params,
    progress)`, depending on the figure parameters named in `reads` only (its cache key) and on the
    input unless `of_input` is False (then tokens and targets are None)."""

    name: str
    reads: tuple[str, ...]
    compute: Callable[[Run, Loader, np.ndarray, object, dict, Progress | None], object]
    of_input: bool = True

    def key(self, params: Mapping) -> tuple:
        """The parameters this source depends on, as a hashable key."""
        return tuple((k, frozen(params.get(k))) for k in self.reads)


def frozen(value):
    if isinstance(value, dict):
        return tuple(sorted((k, frozen(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(frozen(v) for v in value)
    return value


def _sweep(run, load, tokens, targets, params, progress):
    """The input through every snapshot, with the mechanism's per-call choices (`options`) and, for a
    long input, per-position structures at `positions` only."""
    options = run.model_config.mechanism.options_from(dict(params.get("options") or {}))
    positions = params.get("positions")
    return sweep_epochs(run, load, tokens, targets, options, positions=None if positions is None else list(positions),
                        progress=progress)


def _contribution_maps(run, load, tokens, targets, params, progress):
    """(E, D, D) the contribution of M(x) to the loss at every snapshot (one metric layer; one query
    position, or summed over positions)."""
    if targets is None:
        raise ValueError("this input has no target: there is no loss to differentiate")
    maps = []
    for k, epoch in enumerate(run.epochs):
        maps.append(contribution_map(load(run, epoch), tokens, targets, params))
        if progress:
            progress(k + 1, len(run.epochs))
    return np.stack(maps)


def _validation_metrics(run, load, tokens, targets, params, progress):
    """M(x) of the first `inputs` validation inputs at their last position, at every snapshot:
    ({epoch: (n, L_m, D, D)}, labels, label name); inputs without classes are grouped by brightness
    (images) or share of letters (text)."""
    x, _, labels = validation_arrays(run)
    x = x[: int(params.get("inputs", 64))]
    out = {}
    for k, epoch in enumerate(run.epochs):
        out[epoch] = dataset_metrics(load(run, epoch), x)
        if progress:
            progress(k + 1, len(run.epochs))
    if labels is None:
        return out, *input_groups(x, bool(run.model_config.input_dim))
    return out, labels[: len(x)], "class"


def _adaptivity_gaps(run, load, tokens, targets, params, progress):
    """Per snapshot (epoch, mean, low, high): the adaptivity gap loss(M-bar) − loss(M(x)) in nats over
    the first `inputs` validation inputs, M-bar their mean metric at that snapshot (95% bootstrap interval)."""
    x, y, _ = validation_arrays(run)
    n = int(params.get("inputs", interventions.MEAN_INPUTS))
    rows = []
    for k, epoch in enumerate(run.epochs):
        model = load(run, epoch)
        gap = interventions.adaptivity_gap(model, x[:n], y[:n], interventions.mean_metric(model, x[:n]))
        rows.append((epoch, *interventions.interval(gap)))
        if progress:
            progress(k + 1, len(run.epochs))
    return rows


SOURCES = {s.name: s for s in (
    EpochSource("sweep", ("options", "positions"), _sweep),
    EpochSource("contributions", ("options", "method", "layer", "position"), _contribution_maps),
    EpochSource("validation_metrics", ("inputs",), _validation_metrics, of_input=False),
    EpochSource("adaptivity_gaps", ("inputs",), _adaptivity_gaps, of_input=False),
)}


@dataclass(frozen=True)
class EpochFigure:
    """A named figure across snapshots: drawn by `draw(values, run, params)` from the values of its
    `sources` ({source name: value})."""

    name: str
    sources: tuple[str, ...]
    draw: Callable[[dict, Run, dict], go.Figure]


@dataclass(frozen=True)
class FollowedStructure:
    """One structure of a sweep as the figures over epochs draw it: (E, a, b) matrices, their style,
    label and where they were taken."""

    mats: np.ndarray
    style: figures.MatrixStyle
    label: str
    where: str
    index: dict
    head: int | None


def followed_structure(sweep: EpochSweep, params: Mapping) -> FollowedStructure:
    """The structure named in params (structure, layer, position, head) across the sweep's epochs."""
    first = sweep.records[0]
    s = first.named(params["structure"])
    index = structure_index(first, int(params.get("layer", 0)), int(params.get("position", -1)))
    head = int(params.get("head", 0)) if per_head(s) else None
    where = first.where(index["position"]) if "position" in s.index_axes else \
        (f"token {params.get('position', -1)}" if "token" in s.index_axes else "whole input")
    label = s.title + (f", {panel_titles(s, first)[head]}" if head is not None else "")
    return FollowedStructure(sweep.over_epochs(s.name, index, head), structure_style(s, first), label, where, index, head)


def _shown_epochs(sweep: EpochSweep, params: Mapping) -> list[int]:
    """Indices into the sweep of the epochs a grid shows (`shown`, default five spread over training)."""
    epochs = list(sweep.epochs)
    shown = params.get("shown") or spread_epochs(epochs)
    return [epochs.index(e) for e in sorted(shown) if e in epochs]


def _animation(values, run, params):
    f = followed_structure(values["sweep"], params)
    return figures.epoch_animation_figure(f.mats, list(values["sweep"].epochs), f.style, params.get("view", "heatmap"),
                                          f"{f.label}, {f.where}")


def _grid(kind: str, title: str, first_and_last: bool = False):
    def draw(values, run, params):
        sweep = values["sweep"]
        f = followed_structure(sweep, params)
        idx = _shown_epochs(sweep, params)
        if first_and_last:
            idx = [idx[0], idx[-1]]
        return figures.small_multiples_figure([f.mats[i] for i in idx], [f"epoch {sweep.epochs[i]}" for i in idx],
                                              f.style, kind, f"{f.label}: {title}")
    return draw


def _difference(values, run, params):
    sweep = values["sweep"]
    f = followed_structure(sweep, params)
    first, last = params.get("diff_from", sweep.epochs[0]), params.get("diff_to", sweep.epochs[-1])
    diff = sweep.difference(params["structure"], f.index, f.head, first, last)
    changed = " (1: changed, 0: unchanged)" if f.style.value_kind == "mask" else ""
    return figures.matrix_figure(diff, f.style.difference(), f"{f.label}: epoch {last} − epoch {first}{changed}")


def losses_by_epoch(run: Run, epochs) -> dict[str, list[float | None]]:
    """The run's training and validation loss at each epoch, in the run's unit (None where not logged)."""
    factor = loss_factor(run.model_config)
    metrics = {m["epoch"]: m for m in run.metrics}
    return {split: [None if metrics.get(e, {}).get(key) is None else metrics[e][key] * factor for e in epochs]
            for split, key in (("train", "train_nll"), ("validation", "val_nll"))}


def _statistics(values, run, params):
    sweep = values["sweep"]
    first = sweep.records[0]
    index = structure_index(first, int(params.get("layer", 0)), int(params.get("position", -1)))
    full = sweep.over_epochs("metric", index)  # (E, D, D)
    epochs = list(sweep.epochs)
    bands = None
    if "validation_metrics" in values:
        mats = values["validation_metrics"][0]
        bands = statistic_bands([mats[e][:, index["layer"]] for e in epochs], first.n_head, SHOWN_STATISTICS)
    unstructured = unstructured_baselines(full.shape[-1], first.n_head)
    where = first.where(index["position"])
    return figures.statistic_curves_figure(
        epochs, statistic_curves(full, first.n_head, SHOWN_STATISTICS), bands, losses_by_epoch(run, epochs),
        f"M(x) statistics, {where}",
        {STATISTICS["off_diagonal_share"]: off_diagonal_baseline(first),
         **{STATISTICS[k]: (unstructured[k], f"{unstructured[k]:.2f}: a random matrix") for k in ("asymmetry", "negative_share")}},
        f"loss ({loss_label(run.model_config)})")


def _spectrum(values, run, params):
    sweep = values["sweep"]
    index = structure_index(sweep.records[0], int(params.get("layer", 0)), int(params.get("position", -1)))
    return figures.spectrum_figure(list(sweep.epochs), [symmetric_spectrum(M) for M in sweep.over_epochs("metric", index)])


def _contribution_epochs(values, run, params):
    cfg = run.model_config
    signed = params.get("method", "gradient_x_metric") == "gradient_x_metric"
    style = figures.MatrixStyle(value_kind="signed" if signed else "magnitude", unit=f"contribution ({loss_label(cfg)})",
                                grid=cfg.n_head)
    return figures.epoch_animation_figure(values["contributions"] * loss_factor(cfg), list(run.epochs), style, "heatmap",
                                          contribution_symbol(params))


def projected_metrics(values, params) -> tuple[np.ndarray, np.ndarray, str]:
    """2D points of the validation metrics at params' epoch and layer, their labels and label name."""
    mats, labels, label_name = values["validation_metrics"]
    return project(mats[params["epoch"]][:, int(params.get("layer", 0))], params.get("projection", "pca")), labels, label_name


def class_separations(values, params) -> dict:
    """{epoch: Separation} of the validation metrics' labels at params' layer (see class_separation)."""
    mats, labels, _ = values["validation_metrics"]
    return {e: class_separation(m[:, int(params.get("layer", 0))], labels) for e, m in mats.items()}


def _projection(values, run, params):
    points, labels, label_name = projected_metrics(values, params)
    return figures.projection_figure(points, labels, f"M(x) of {len(points)} validation inputs, epoch {params['epoch']} "
                                                     f"({params.get('projection', 'pca')})", label_name)


def _adaptivity_gap(values, run, params):
    unit = LossUnit.of(run.model_config)
    epochs, means, lows, highs = zip(*values["adaptivity_gaps"])
    return figures.curve_figure(list(epochs), {"adaptivity gap": list(unit.value(np.array(means)))},
                                "Adaptivity gap over training", "epoch", f"Δ loss ({unit.label})",
                                bands={"adaptivity gap": (list(unit.value(np.array(lows))), list(unit.value(np.array(highs))))})


def _training_curves(values, run, params):
    unit = LossUnit.of(run.model_config)
    keys = ["train_mse", "val_mse"] if run.model_config.input_dim else ["train_nll", "val_nll"]
    return figures.training_curves_figure(run.metrics, keys, f"{run.name}: loss per epoch", run.epochs, unit.label,
                                          unit.factor, bool(params.get("log_y", False)))


EPOCH_FIGURES = {f.name: f for f in (
    EpochFigure("epoch_animation", ("sweep",), _animation),
    EpochFigure("first_vs_last", ("sweep",), _grid("heatmap", "first vs last epoch", first_and_last=True)),
    EpochFigure("contours_grid", ("sweep",), _grid("contour", "contours")),
    EpochFigure("surfaces_grid", ("sweep",), _grid("surface", "surfaces")),
    EpochFigure("epoch_difference", ("sweep",), _difference),
    EpochFigure("statistics", ("sweep",), _statistics),
    EpochFigure("statistics_with_band", ("sweep", "validation_metrics"), _statistics),
    EpochFigure("spectrum", ("sweep",), _spectrum),
    EpochFigure("contribution_epochs", ("contributions",), _contribution_epochs),
    EpochFigure("projection", ("validation_metrics",), _projection),
    EpochFigure("adaptivity_gap", ("adaptivity_gaps",), _adaptivity_gap),
    EpochFigure("training_curves", (), _training_curves),
)}


def needs_input(name: str) -> bool:
    """Whether the named figure across snapshots is drawn from an input (else from the run alone)."""
    return any(SOURCES[s].of_input for s in epoch_figure_named(name).sources)


def epoch_figure_named(name: str) -> EpochFigure:
    if name not in EPOCH_FIGURES:
        raise ValueError(f"unknown figure across epochs {name!r}; expected one of {', '.join(EPOCH_FIGURES)}")
    return EPOCH_FIGURES[name]


def source_values(name: str, run: Run, load: Loader, tokens, targets, params: Mapping,
                  progress: Progress | None = None):
    """What the source `name` computes for the run on an input (see SOURCES)."""
    source = SOURCES[name]
    if not source.of_input:
        tokens = targets = None
    return source.compute(run, load, tokens, targets, dict(params), progress)


def epoch_figure(name: str, run: Run, params: Mapping, values_of: Callable[[str], object]) -> go.Figure:
    """The named figure across snapshots; values_of(source name) gives each source's values (the app
    its cached ones, `epoch_figure_item` fresh ones)."""
    figure = epoch_figure_named(name)
    return figure.draw({s: values_of(s) for s in figure.sources}, run, dict(params))


def epoch_figure_item(name: str, run: Run, tokens, targets, params: Mapping, input_source: str = "",
                      load: Loader | None = None, progress: Progress | None = None):
    """The named figure with its provenance (at the run's last epoch, which its sources reach), every
    source computed afresh from the run."""
    load = load or load_model
    fig = epoch_figure(name, run, params, lambda s: source_values(s, run, load, tokens, targets, params, progress))
    prov = Provenance.of(name, run, run.epochs[-1], tokens, targets, input_source, dict(params), regenerable=True)
    return ExportItem(f"{run.name}_{name}", fig, prov)


__all__ = ["EPOCH_FIGURES", "SOURCES", "EpochFigure", "EpochSource", "class_separations",
           "epoch_figure", "epoch_figure_item", "followed_structure", "needs_input", "losses_by_epoch",
           "projected_metrics", "source_values"]
