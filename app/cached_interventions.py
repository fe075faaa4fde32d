"""Cached interventions and evaluations over many inputs or runs (on request, with progress)."""

from __future__ import annotations

import time

import streamlit as st

from app.cache import HASH_FUNCS, inspection, model_for
from app.run_picker import each_run
from damcha.analysis import interventions
from damcha.analysis.ablation import ABLATION_SETTINGS, ablation_key
from damcha.analysis.ablation import validation_ablation as ablate
from damcha.analysis.inspection import inspect_input
from damcha.analysis.interventions import MEAN_INPUTS, available_interventions, intervention_options
from damcha.analysis.interventions import mean_metric as average
from damcha.inputs.datasets import bundled
from damcha.inputs.model_inputs import ModelInput, validation_arrays
from damcha.runs.checkpoints import Run
from damcha.runs.disk_cache import cached, is_cached
from damcha.views.display_units import LossUnit


def _validation(run: Run, n: int):
    x, y, _ = validation_arrays(run)
    return x[:n], y[:n]


@st.cache_resource(show_spinner="The validation mean metric M-bar…", max_entries=32, hash_funcs=HASH_FUNCS)
def mean_metric(run: Run, epoch: int, n: int = MEAN_INPUTS):
    return average(model_for(run, epoch), _validation(run, n)[0])


def intervention_by_name(run: Run, name: str):
    return next(iv for iv in available_interventions(run.model_config) if iv.name == name)


@st.cache_data(show_spinner="Running the model with the intervention…", max_entries=128, hash_funcs=HASH_FUNCS)
def intervened(run: Run, epoch: int, inp: ModelInput, name: str, params: tuple, other: ModelInput | None = None):
    """(record without, record with) the intervention."""
    model = model_for(run, epoch)
    iv = intervention_by_name(run, name)
    needs_mean = any(p.kind == "mean" for p in iv.params)
    options = intervention_options(model, iv, inp.tokens, dict(params), None if other is None else other.tokens,
                                   mean_metric(run, epoch) if needs_mean else None)
    return inspection(run, epoch, inp, None), inspect_input(model, inp.tokens, inp.targets, options=options)


@st.cache_data(show_spinner=False, max_entries=64, hash_funcs=HASH_FUNCS)
def block_grid(run: Run, epoch: int, inp: ModelInput | None, keep: bool, n: int = 64):
    """Loss change per zeroed (or kept) block M_ij, for the input or averaged over n validation inputs."""
    bar = st.progress(0.0, text="One forward pass per block…")
    tick = lambda k, m: bar.progress(k / m, text=f"Block {k}/{m}")  # noqa: E731
    model = model_for(run, epoch)
    if inp is None:
        x, y = _validation(run, n)
        grid = interventions.block_grid_over(model, x, y, keep, progress=tick)
    else:
        grid = interventions.block_grid(model, inp.tokens, inp.targets, keep, progress=tick)
    bar.empty()
    return grid


@st.cache_data(show_spinner="Loss along the curve…", max_entries=64, hash_funcs=HASH_FUNCS)
def metric_curves(run: Run, epoch: int, inp: ModelInput):
    """Interpolation from M-bar to M(x) (and beyond; None where the app holds no validation inputs to take
    M-bar over), off-diagonal scaling, head ablation, residue check."""
    model = model_for(run, epoch)
    return {
        "interpolation": interventions.interpolation_curve(model, inp.tokens, inp.targets, mean_metric(run, epoch))
        if bundled(run.dataset) else None,
        "off_diagonal": interventions.off_diagonal_curve(model, inp.tokens, inp.targets),
        "heads": interventions.head_ablation(model, inp.tokens, inp.targets),
        "residue": interventions.residue_check(model, inp.tokens, inp.targets),
    }


@st.cache_data(show_spinner=False, max_entries=32, hash_funcs=HASH_FUNCS)
def validation_effects(run: Run, epoch: int, n: int = 128):
    model = model_for(run, epoch)
    ivs = interventions.available_interventions(run.model_config)
    needs_mean = any(p.kind == "mean" for iv in ivs for p in iv.params)
    x, y = _validation(run, n)
    bar = st.progress(0.0, text="Each intervention over the validation inputs…")
    rows = interventions.validation_effects(model, x, y, ivs, mean_metric(run, epoch) if needs_mean else None,
                                            progress=lambda k, m: bar.progress(k / m, text=f"Intervention {k}/{m}"))
    bar.empty()
    return LossUnit.of(run.model_config).rows(rows, ("mean loss change", "95% low", "95% high"))


def ablation_cached(run: Run) -> bool:
    return is_cached("validation_ablation", ablation_key(run.model_config), [(run, run.epochs[-1])])


def ablation_table(runs: list[Run]) -> list[dict]:
    """Each run's validation set under each metric mode at its last snapshot: read from the disk
    cache (keyed by the snapshot's content) where computed before, else computed, with a progress
    bar that estimates the time left. Runs whose snapshot cannot be used are named and left out."""
    bar = st.progress(0.0, text="Validation sets under each metric mode…")
    todo = [r for r in runs if not ablation_cached(r)]
    spent, computed = 0.0, 0

    def compute(r: Run) -> list[dict]:
        nonlocal spent, computed
        t0 = time.perf_counter()
        rows = ablate(r, model_for(r, r.epochs[-1]), **ABLATION_SETTINGS)
        spent, computed = spent + time.perf_counter() - t0, computed + 1
        return rows

    def one(r: Run) -> list[dict]:
        rows = cached("validation_ablation", ablation_key(r.model_config), [(r, r.epochs[-1])], lambda: compute(r))
        left = len(todo) - computed
        eta = f", about {spent / computed * left:.0f} s left" if computed and left > 0 else ""
        bar.progress(min(1.0, (runs.index(r) + 1) / len(runs)), text=f"{r.name} done ({runs.index(r) + 1}/{len(runs)}{eta})")
        return rows

    table = [row for _, rows in each_run(runs, one) for row in rows]
    bar.empty()
    return table
