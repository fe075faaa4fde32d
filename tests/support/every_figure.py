"""Every named figure of every table, drawn from the shipped runs as the app and the export CLI draw them:
the record's structures and figures and the model figures for each modality's run, the figures across
epochs, of several runs and of the evidence. Walks the tables, so a figure added to one is included."""

from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go

from damcha.analysis.inspection import inspect_input
from damcha.evidence.documents import load_results
from damcha.evidence.view import EVIDENCE_FIGURES, evidence_item
from damcha.inputs.model_inputs import validation_input
from damcha.runs.checkpoints import load_model, load_run
from damcha.views.epoch_figures import EPOCH_FIGURES, epoch_figure_item
from damcha.views.figure_sets import available_figures, build_figure
from damcha.views.model_figures import MODEL_FIGURES, model_figure, model_figure_values
from damcha.views.run_set_figures import RUN_SET_FIGURES, run_set_item, taken_from

SHIPPED = Path(__file__).resolve().parents[2] / "checkpoints"
# One run a modality and task, and the mechanisms whose structures differ most in shape.
RECORD_RUNS = ("digits-damcha", "digits-mha", "digits-moa", "digits-mma", "digits-cls-damcha", "images-damcha",
               "text-damcha")


def model_params(name: str, run, record, inp) -> dict:
    """A model figure's parameters for this input, with what the run itself declares (a summary along
    the input, an intervention taking another input by its validation index); {} where it declares none."""
    params = {"n_steps": 4, "n": 8, "layer": 0, "position": 40, "kind": "zero", "structure": record.structures[0].name}
    if name == "sequence_profile":
        from damcha.analysis.inspection import sequence_profile

        profiles = sequence_profile(load_model(run), inp.tokens)
        if not profiles:
            return {}
        params["structure"] = profiles[0].name
    if name == "intervention":
        from damcha.analysis.interventions import available_interventions
        from damcha.views.model_figures import intervention_views

        iv = next((i for i in available_interventions(run.model_config) if any(p.kind == "input" for p in i.params)), None)
        if iv is None:
            return {}
        params.update(intervention=iv.name, other=5, view=intervention_views(record)[-1], applied="with")
    return params


def record_and_model_figures() -> list[tuple[str, go.Figure]]:
    out = []
    for run_name in RECORD_RUNS:
        run = load_run(SHIPPED / run_name)
        inp = validation_input(run, 0)
        model = load_model(run)
        record = inspect_input(model, inp.tokens, inp.targets)
        out += [(f"{run_name}:{name}", build_figure(name, record, {})) for name in available_figures(record)]
        for name, figure in MODEL_FIGURES.items():
            params = model_params(name, run, record, inp)
            if figure.missing(record, run.model_config) is None and params:
                values = model_figure_values(name, model, run, inp.tokens, inp.targets, {**params, "options": {}})
                out.append((f"{run_name}:{name}", model_figure(name, values, params, config=run.model_config)))
    return out


def epoch_params(run) -> dict:
    """The parameters every figure across a run's snapshots is drawn with."""
    epochs = list(run.epochs)
    return {"structure": "metric", "layer": 0, "position": 40, "head": 0, "options": {"metric_mode": "full"},
            "positions": None, "view": "heatmap", "shown": epochs[::3], "diff_from": epochs[0], "diff_to": epochs[-1],
            "inputs": 16, "projection": "pca", "epoch": epochs[-1], "method": "gradient_x_metric"}


def epoch_figures() -> list[tuple[str, go.Figure]]:
    run = load_run(SHIPPED / "digits-damcha")
    inp = validation_input(run, 3)
    return [(f"epochs:{name}", epoch_figure_item(name, run, inp.tokens, inp.targets, epoch_params(run)).figure)
            for name in EPOCH_FIGURES]


def run_set_runs(name: str) -> list:
    """Runs for each figure of several runs: metric figures need two DAMCHA runs; the comparison any two."""
    names = ("digits-damcha", "digits-mha") if name.startswith("comparison") else ("digits-damcha-static",
                                                                                    "digits-damcha")
    return [load_run(SHIPPED / n) for n in names]


def run_set_params(runs) -> dict:
    return {"layer": 0, "head": 1, "position": 40, "options": {}, "method": "gradient_x_metric", "snapshots": 3,
            "panel": "structure", "panel_run": f"{runs[1].name} @{runs[1].epochs[-1]}"}


def run_set_figures() -> list[tuple[str, go.Figure]]:
    out = []
    for name in RUN_SET_FIGURES:
        runs = run_set_runs(name)
        inp = validation_input(runs[0], 3)
        params = run_set_params(runs)
        taken = taken_from(name, runs, [r.epochs[-1] for r in runs], inp.tokens, inp.targets, params)
        out.append((f"runs:{name}", run_set_item(name, taken, inp.tokens, inp.targets, params).figure))
    return out


def evidence_figures() -> list[tuple[str, go.Figure]]:
    doc = load_results(SHIPPED / "evidence")
    out = []
    for name, figure in EVIDENCE_FIGURES.items():
        claim = next(c for c in doc["claims"] if figure.missing(c) is None)
        out.append((f"evidence:{name}", evidence_item(name, SHIPPED / "evidence", claim["key"]).figure))
    return out


def every_named_figure() -> list[tuple[str, go.Figure]]:
    return record_and_model_figures() + epoch_figures() + run_set_figures() + evidence_figures()
