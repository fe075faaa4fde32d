"""Library calls cached for every session, keyed by the run's snapshots and the input's hash.

Models are cached with st.cache_resource and shared by every browser session: nothing here or
in a page mutates one (the mechanism's options, dropout and the like are call arguments).
Every cached call takes the run itself; `HASH_FUNCS` keys it by its path and the modification
times of its snapshots (a rewritten snapshot loads afresh), and an input by the hash of what the
model reads. Long calls show their progress."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import streamlit as st

from damcha.analysis.dynamics import generator_weight_drift
from damcha.analysis.familiarity import familiarity, typical_distance
from damcha.analysis.inspection import InspectionRecord, inspect_input
from damcha.analysis.inspection import sequence_profile as profile_of
from damcha.inputs.model_inputs import ModelInput, validation_arrays
from damcha.model.mechanisms import ForwardOptions
from damcha.runs.checkpoints import Run, list_runs, load_model
from damcha.views.epoch_figures import SOURCES, epoch_figure, source_values
from damcha.views.epoch_figures import class_separations as separations
from damcha.views.model_figures import model_figure_values as values
from damcha.views.run_set_figures import RUN_SET_FIGURES


def run_key(run: Run) -> tuple:
    """What identifies a run's weights for caching: its path and its snapshots' modification times
    (-1 for one that vanished since the listing: loading it then says so, for that epoch only)."""
    return str(run.path), tuple((e, _modified(run.snapshot_path(e))) for e in run.epochs)


def _modified(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return -1


HASH_FUNCS = {Run: run_key, ModelInput: ModelInput.key}


@st.cache_data(ttl=60, show_spinner=False)
def cached_runs(root: str) -> tuple[list[Run], list[tuple[Path, str]]]:
    return list_runs(root)


def inference_device() -> str:
    """Where the app runs its models: $DAMCHA_DEVICE (e.g. cuda), else the CPU."""
    return os.environ.get("DAMCHA_DEVICE", "cpu")


@st.cache_resource(show_spinner=False, max_entries=64, hash_funcs=HASH_FUNCS)
def model_for(run: Run, epoch: int):
    """One model per (run, epoch), shared by every session; frozen and in eval mode."""
    return load_model(run, epoch, device=inference_device())


@st.cache_data(show_spinner=False, max_entries=256, hash_funcs=HASH_FUNCS)
def inspection(run: Run, epoch: int, inp: ModelInput, options: ForwardOptions | None = None,
               positions: tuple[int, ...] | None = None, attention_layers: tuple[int, ...] | None = None
               ) -> InspectionRecord:
    """One input's record; positions / attention_layers: take the large per-position matrices and
    attention maps only where viewed (default: all that fit the inspection budget)."""
    return inspect_input(model_for(run, epoch), inp.tokens, inp.targets, positions=positions, options=options,
                         attention_layers=attention_layers)


@st.cache_data(show_spinner=False, max_entries=64, hash_funcs=HASH_FUNCS)
def sequence_profile(run: Run, epoch: int, inp: ModelInput, options: ForwardOptions | None = None):
    """Per-position summaries at every position of the input, in chunks, with a progress bar."""
    bar = st.progress(0.0, text="Summarising every position…")
    result = profile_of(model_for(run, epoch), inp.tokens, options,
                        progress=lambda k, n: bar.progress(k / n, text=f"Positions, chunk {k}/{n}"))
    bar.empty()
    return result


@st.cache_data(show_spinner=False, max_entries=64, hash_funcs=HASH_FUNCS)
def epoch_source(run: Run, inp: ModelInput | None, source: str, key: tuple):
    """What figures across snapshots are drawn from (damcha.views.epoch_figures.SOURCES), computed once
    per run, input (None for a source of no input) and the parameters the source reads (`key`), with a
    progress bar the first time."""
    bar = st.progress(0.0, text="Running every snapshot…")
    result = source_values(source, run, model_for, None if inp is None else inp.tokens,
                           None if inp is None else inp.targets, dict(key),
                           progress=lambda k, n: bar.progress(k / n, text=f"Snapshot {k}/{n}"))
    bar.empty()
    return result


def source_of(run: Run, inp: ModelInput, params: dict) -> Callable[[str], object]:
    """source name -> its cached values for these figure parameters (see epoch_source)."""
    return lambda source: epoch_source(run, inp if SOURCES[source].of_input else None, source,
                                       SOURCES[source].key(params))


@st.cache_data(show_spinner="Class separation at each epoch…", max_entries=32, hash_funcs=HASH_FUNCS)
def class_separations(run: Run, n: int, layer: int) -> dict:
    """{epoch: Separation} of the first n validation inputs' metrics (damcha.views.epoch_figures)."""
    params = {"inputs": n, "layer": layer}
    return separations({"validation_metrics": source_of(run, None, params)("validation_metrics")}, params)


@st.cache_data(show_spinner=False, max_entries=128, hash_funcs=HASH_FUNCS)
def figure_over_epochs(run: Run, inp: ModelInput, name: str, key: tuple):
    """A named figure across snapshots (damcha.views.epoch_figures.EPOCH_FIGURES) from its cached
    sources; key: its parameters as sorted (name, value) pairs."""
    params = dict(key)
    return epoch_figure(name, run, params, source_of(run, inp, params))


@st.cache_data(show_spinner=False, max_entries=32, hash_funcs=HASH_FUNCS)
def weight_drift(run: Run):
    return generator_weight_drift([model_for(run, e) for e in run.epochs])


@st.cache_data(show_spinner="Computing from the model…", max_entries=64, hash_funcs=HASH_FUNCS)
def model_figure_values(run: Run, epoch: int, inp: ModelInput, name: str, params: tuple = ()):
    """What a figure computed from the model itself draws (damcha.views.figure_sets.MODEL_FIGURES),
    with a progress bar for the long ones."""
    bar = st.empty()
    result = values(name, model_for(run, epoch), run, inp.tokens, inp.targets, dict(params),
                    progress=lambda k, n: bar.progress(k / n, text=f"Computing: step {k}/{n}"))
    bar.empty()
    return result


@st.cache_data(show_spinner="The loss of each validation input…", max_entries=64, hash_funcs=HASH_FUNCS)
def validation_losses(run: Run, epoch: int, n: int):
    """(N,) the mean loss in nats of each of the first n validation inputs (damcha.views.run_set_figures)."""
    return RUN_SET_FIGURES["losses_against"].per_run(run, epoch, model_for, None, None, {"inputs": n})


@st.cache_data(show_spinner="Distances between the validation inputs…", max_entries=32, hash_funcs=HASH_FUNCS)
def validation_spread(run: Run) -> float:
    """How far validation inputs lie from their nearest neighbour (once per run, not per upload)."""
    return typical_distance(validation_arrays(run)[0])


@st.cache_data(show_spinner="Comparing with the validation inputs…", max_entries=64, hash_funcs=HASH_FUNCS)
def input_familiarity(run: Run, inp: ModelInput):
    """The input's nearest validation inputs and whether it is out of their range (image runs only)."""
    return familiarity(inp.tokens, validation_arrays(run)[0], typical=validation_spread(run))
