"""A trace's data as numbers, whichever form plotly holds it in.

A figure that went through a pickle (Streamlit's cache hands out copies) or through JSON holds its numpy
arrays in plotly's typed-array form, {"dtype", "bdata", "shape"}; a figure built in this process holds them
as given. Every reader of a trace's data (export, typesetting, vector heatmaps) reads it through here."""

from __future__ import annotations

import base64

import numpy as np


def trace_array(values) -> np.ndarray | list | tuple | None:
    """`values` as given, or decoded from plotly's typed-array form into an array of its shape."""
    if isinstance(values, dict) and "bdata" in values and "dtype" in values:
        flat = np.frombuffer(base64.b64decode(values["bdata"]), dtype=np.dtype(values["dtype"]))
        shape = values.get("shape")
        return flat.reshape(tuple(int(n) for n in str(shape).split(","))) if shape else flat
    return values
