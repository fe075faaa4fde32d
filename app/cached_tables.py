"""The data table of a run's validation inputs: computed once per snapshot, kept on disk (keyed by
the snapshot's content, shared by every session and restart), with progress while it is computed."""

from __future__ import annotations

import streamlit as st

from app.cache import HASH_FUNCS, model_for
from damcha.analysis.data_table import run_validation_table, table_settings
from damcha.inputs.model_inputs import validation_input
from damcha.runs.checkpoints import Run
from damcha.runs.disk_cache import cached
from damcha.views.thumbnails import input_preview


@st.cache_data(show_spinner=False, max_entries=32, hash_funcs=HASH_FUNCS)
def validation_table(run: Run, epoch: int, n: int) -> dict:
    def compute() -> dict:
        bar = st.progress(0.0, text="The validation inputs, one by one…")
        result = run_validation_table(run, model_for(run, epoch), n,
                                      progress=lambda k, m: bar.progress(k / m, text=f"Validation table: step {k}/{m}"))
        bar.empty()
        return result

    return cached("validation_table", table_settings(n), [(run, epoch)], compute)


@st.cache_data(show_spinner=False, max_entries=32, hash_funcs=HASH_FUNCS)
def input_previews(run: Run, n: int) -> tuple[str, list[str]]:
    """The kind ("image", "text" or "none") and a preview per row of the first n validation inputs."""
    previews = [input_preview(validation_input(run, i)) for i in range(n)]
    return (previews[0][0] if previews else "none"), [p for _, p in previews]
