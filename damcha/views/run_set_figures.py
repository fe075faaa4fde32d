"""Named figures of several runs on one input: the Compare page's rows and panels and its per-input
loss of one run against another over the validation set, contribution maps side by side (paper
fig. 9) and the paper's metric figures (figs. 8, 10, 11).

A figure is a name, what it takes from each run at its epoch (`per_run`) and a draw function over
those. Its provenance names every run (relative to the checkpoint folder the app opened them from)
and each run's epoch in its parameters, so `regenerate` rebuilds it. Nothing here asks which
mechanism or data set made a run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from damcha.analysis.dynamics import spread_epochs
from damcha.analysis.inspection import InspectionRecord, inspect_input
from damcha.analysis.interventions import batch_losses
from damcha.inputs.modalities import loss_factor, loss_label
from damcha.inputs.model_inputs import validation_arrays
from damcha.runs.checkpoints import Run, load_model
from damcha.views import figures
from damcha.views.comparison import compared_run, comparison_figure, panel_figure, shared_loss_range
from damcha.views.display_units import LossUnit
from damcha.views.export import ExportItem, Provenance, run_name_in
from damcha.views.model_figures import contribution_map

Loader = Callable[[Run, int], object]  # (run, epoch) -> the model of that snapshot (cached by the caller)
Taken = tuple[Run, int, object]  # a run, its epoch, what the figure took from it


@dataclass(frozen=True)
class RunSetFigure:
    """A named figure of several runs: `per_run(run, epoch, load, tokens, targets, params)` is what it
    takes from each run, `draw(taken, params, input_source)` the figure."""

    name: str
    per_run: Callable[[Run, int, Loader, np.ndarray, object, dict], object]
    draw: Callable[[Sequence[Taken], dict, str], go.Figure]
    title: str  # what a reader sees (the name is the code's, and the export's file name)


def _record(run, epoch, load, tokens, targets, params):
    """The run's inspection record, its attention kept at the compared layer."""
    return inspect_input(load(run, epoch), tokens, targets, attention_layers=(int(params.get("layer", 0)),))


def _compared(taken: Sequence[Taken], params: dict) -> list:
    """Each run with cross-head structures as a row of the comparison (see compared_run)."""
    structures = params.get("structures") or {}
    layer, head, position = int(params.get("layer", 0)), int(params.get("head", 0)), int(params.get("position", -1))
    return [compared_run(rec, f"{run.name} @{epoch}", layer, head, position, structures.get(run.name))
            for run, epoch, rec in taken if isinstance(rec, InspectionRecord) and rec.structures]


def _comparison(taken, params, input_source):
    compared = _compared(taken, params)
    return comparison_figure(compared, f"{input_source}: {len(compared)} runs")


def _comparison_panel(taken, params, input_source):
    compared = _compared(taken, params)
    pick = next((c for c in compared if c.label == params.get("panel_run")), None)
    if pick is None:
        raise ValueError(f"no compared run {params.get('panel_run')!r}; expected one of {[c.label for c in compared]}")
    return panel_figure(pick, params.get("panel", "structure"), shared_loss_range(compared))


def _contribution(run, epoch, load, tokens, targets, params):
    """(D, D) the contribution of the run's M(x) to the loss at one query position (or summed)."""
    return contribution_map(load(run, epoch), tokens, targets, params)


def _contributions_side_by_side(taken, params, input_source):
    cfg = taken[0][0].model_config
    return figures.metric_panels_figure({f"{run.name} (epoch {epoch})": M * loss_factor(cfg) for run, epoch, M in taken},
                                        cfg.n_head, f"Contribution of M(x) to the loss ({loss_label(cfg)}), one colour range",
                                        colorbar_title=f"contribution ({loss_label(cfg)})")


def _metric_snapshots(run, epoch, load, tokens, targets, params):
    """M(x) at the last query position at `snapshots` epochs spread over training: (epochs, (S, D, D))."""
    chosen = spread_epochs(list(run.epochs), int(params.get("snapshots", 5)))
    records = [inspect_input(load(run, e), tokens, targets, positions=[len(tokens) - 1]) for e in chosen]
    if records[0].structure("metric") is None:
        raise ValueError(f"{run.name} has no metric M(x): the paper's metric figures need DAMCHA runs")
    return chosen, np.stack([r.structure("metric").at(layer=0, position=0) for r in records])


def _fig8(taken, params, input_source):
    mats, titles = [], []
    for run, _, (chosen, M) in taken:
        mats += [M[0], M[-1]]
        titles += [f"{run.name}: epoch {chosen[0]}", f"epoch {chosen[-1]}"]
    return figures.small_multiples_figure(mats, titles, taken[0][0].model_config.n_head, "heatmap",
                                          "M(x): first against last snapshot (paper fig. 8)", cols=2)


def _fig10(taken, params, input_source):
    mats, titles = [], []
    for run, _, (chosen, M) in taken:
        mats += list(M)
        titles += [f"{run.name}: epoch {e}" if k == 0 else f"epoch {e}" for k, e in enumerate(chosen)]
    return figures.small_multiples_figure(mats, titles, taken[0][0].model_config.n_head, "contour",
                                          "Contours of M(x) across snapshots (paper fig. 10)", cols=len(taken[0][2][0]))


def _fig11(taken, params, input_source):
    return figures.small_multiples_figure([M[-1] for _, _, (_, M) in taken],
                                          [f"{run.name}: epoch {chosen[-1]}" for run, _, (chosen, _) in taken],
                                          taken[0][0].model_config.n_head, "surface", "M(x) as a surface (paper fig. 11)",
                                          cols=len(taken))


def _validation_losses(run, epoch, load, tokens, targets, params):
    """(N,) each of the first params["inputs"] (256) validation inputs' mean loss in nats (the input
    shown is not used: this compares the runs over the data set)."""
    x, y, _ = validation_arrays(run)
    n = int(params.get("inputs", 256))
    return batch_losses(load(run, epoch), x[:n], y[:n])


def _losses_against(taken, params, input_source):
    if len(taken) != 2:
        raise ValueError(f"the per-input loss scatter compares two runs, not {len(taken)}")
    (a, ea, la), (b, eb, lb) = taken
    if len(la) != len(lb):
        raise ValueError(f"{a.name} and {b.name} have different validation sets ({len(la)} and {len(lb)} inputs)")
    unit = LossUnit.of(a.model_config)
    return figures.paired_scatter_figure(unit.value(la), unit.value(lb), f"{a.name} @{ea} ({unit.label})",
                                         f"{b.name} @{eb} ({unit.label})",
                                         f"Loss of each of {len(la)} validation inputs: below the diagonal "
                                         f"{b.name} does better")


RUN_SET_FIGURES = {f.name: f for f in (
    RunSetFigure("comparison", _record, _comparison, "Each run's cross-head structure"),
    RunSetFigure("comparison_panel", _record, _comparison_panel, "One run's structure, large"),
    RunSetFigure("contribution_side_by_side", _contribution, _contributions_side_by_side,
                 "Gradient contributions side by side"),
    RunSetFigure("losses_against", _validation_losses, _losses_against, "Loss of each validation input, run against run"),
    RunSetFigure("fig8_first_vs_last", _metric_snapshots, _fig8, "M(x): first against last snapshot (paper fig. 8)"),
    RunSetFigure("fig10_contours", _metric_snapshots, _fig10, "Contours of M(x) across snapshots (paper fig. 10)"),
    RunSetFigure("fig11_surfaces", _metric_snapshots, _fig11, "M(x) as a surface (paper fig. 11)"),
)}

# The paper's metric figures, in the paper's order (`damcha figures --paper`).
PAPER_FIGURES = ("fig8_first_vs_last", "fig10_contours", "fig11_surfaces")


def run_set_figure_named(name: str) -> RunSetFigure:
    if name not in RUN_SET_FIGURES:
        raise ValueError(f"unknown figure of several runs {name!r}; expected one of {', '.join(RUN_SET_FIGURES)}")
    return RUN_SET_FIGURES[name]


def run_set_figure(name: str, taken: Sequence[Taken], params: dict, input_source: str = "") -> go.Figure:
    """The named figure from what it took from each run (the app passes its cached records)."""
    if not taken:
        raise ValueError("no runs to draw")
    return run_set_figure_named(name).draw(list(taken), dict(params), input_source)


def run_set_params(runs: Sequence[Run], epochs: Sequence[int], params: dict, root=None) -> dict:
    """The figure parameters with the runs (named relative to `root`, as provenance names a run) and their epochs."""
    return {**params, "runs": [run_name_in(r.path, root) for r in runs], "epochs": [int(e) for e in epochs]}


def taken_from(name: str, runs: Sequence[Run], epochs: Sequence[int], tokens, targets, params: dict,
               load: Loader | None = None) -> list[Taken]:
    """What the named figure takes from each run at its epoch, computed afresh."""
    per_run = run_set_figure_named(name).per_run
    return [(run, int(e), per_run(run, int(e), load or load_model, tokens, targets, dict(params)))
            for run, e in zip(runs, epochs)]


def run_set_item(name: str, taken: Sequence[Taken], tokens, targets, params: dict, input_source: str = "", root=None):
    """The named figure of what it took from each run, with its provenance."""
    runs, epochs = [t[0] for t in taken], [t[1] for t in taken]
    prov = Provenance.of(name, runs[0], epochs[0], tokens, targets, input_source,
                         run_set_params(runs, epochs, params, root), regenerable=True, root=root)
    return ExportItem(name, run_set_figure(name, taken, params, input_source), prov)


def paper_figures(runs: Sequence[Run], tokens, targets, input_source: str = "", snapshots: int = 5) -> list:
    """The paper's metric figures from runs on one input, M(x) at the last query position:
    fig. 8 (each run's M at its first and last snapshot), fig. 10 (contours across snapshots, one row per
    run: w/o f(x) above DAMCHA, as in the paper) and fig. 11 (3D surfaces at the last snapshot, side by side)."""
    params = {"snapshots": snapshots}
    taken = taken_from(PAPER_FIGURES[0], runs, [r.epochs[-1] for r in runs], tokens, targets, params)  # shared by all three
    return [run_set_item(name, taken, tokens, targets, params, input_source) for name in PAPER_FIGURES]


__all__ = ["PAPER_FIGURES", "RUN_SET_FIGURES", "RunSetFigure", "paper_figures", "run_set_figure", "run_set_item",
           "run_set_params", "taken_from"]
