"""The data table of a run's validation inputs: computed once per snapshot, kept on disk (keyed by
the snapshot's content, shared by every session and restart), with progress while it is computed."""

from __future__ import annotations

import streamlit as st

from app.cache import HASH_FUNCS, model_for
from damcha.runs.checkpoints import Run

TABLE_VERSION = 4  # bump when the table's columns change: older entries are then not read


def table_settings(n: int) -> dict:
    from damcha.analysis.interventions import MEAN_INPUTS

    return {"rows": n, "mean_inputs": MEAN_INPUTS, "version": TABLE_VERSION}


def table_cached(run: Run, epoch: int, n: int) -> bool:
    from damcha.runs.disk_cache import is_cached

    return is_cached("validation_table", table_settings(n), [(run, epoch)])


@st.cache_data(show_spinner=False, max_entries=32, hash_funcs=HASH_FUNCS)
def validation_table(run: Run, epoch: int, n: int) -> dict:
    from damcha.analysis.data_table import validation_table as table
    from damcha.inputs.model_inputs import validation_arrays
    from damcha.runs.disk_cache import cached

    def compute() -> dict:
        x, y, labels = validation_arrays(run)
        bar = st.progress(0.0, text="The validation inputs, one by one…")
        result = table(model_for(run, epoch), x[:n], y[:n], None if labels is None else labels[:n],
                       progress=lambda k, m: bar.progress(k / m, text=f"Validation table: step {k}/{m}"))
        bar.empty()
        return result

    return cached("validation_table", table_settings(n), [(run, epoch)], compute)
