"""A trace's data as numbers, whichever form plotly holds it in; a figure copied safely across threads.

A figure that went through a pickle (Streamlit's cache hands out copies) or through JSON holds its numpy
arrays in plotly's typed-array form, {"dtype", "bdata", "shape"}; a figure built in this process holds them
as given. Every reader of a trace's data (export, typesetting, vector heatmaps) reads it through here."""

from __future__ import annotations

import base64
import threading

import numpy as np
import plotly.graph_objects as go

# go.Figure(fig) takes each trace's type out of the source trace's own properties while it copies it and puts
# it back after: a second copy of the same figure at that moment reads a heatmap without a type, builds a
# Scatter and fails on its colorbar. Streamlit's cache hands one figure to every session (two download
# clicks, two visitors), so every copy of a figure that may be shared goes through one lock.
_copy_lock = threading.Lock()


def figure_copy(fig: go.Figure) -> go.Figure:
    """A copy of `fig` (arrays stay arrays), safe while other threads copy the same figure."""
    with _copy_lock:
        return go.Figure(fig)


def trace_items(values) -> list:
    """The items of a trace's array, as iterating it gives them (none where the trace has none)."""
    decoded = trace_array(values)
    return [] if decoded is None else list(decoded)


def trace_array(values) -> np.ndarray | list | tuple | None:
    """`values` as given, or decoded from plotly's typed-array form into an array of its shape."""
    if isinstance(values, dict) and "bdata" in values and "dtype" in values:
        flat = np.frombuffer(base64.b64decode(values["bdata"]), dtype=np.dtype(values["dtype"]))
        shape = values.get("shape")
        return flat.reshape(tuple(int(n) for n in str(shape).split(","))) if shape else flat
    return values
