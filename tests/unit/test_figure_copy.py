"""Copies of one figure made by many threads at once (Streamlit's cache hands one figure to every session)."""

import threading

import numpy as np
import plotly.graph_objects as go

from damcha.views.plotly_arrays import figure_copy


def test_a_figure_copied_from_many_threads_at_once_keeps_every_trace_its_type():
    """plotly's copy takes a trace's type out of the source while it copies it: unguarded, a second thread
    reading the same figure then builds a Scatter from a heatmap and fails on its colorbar."""
    fig = go.Figure([go.Heatmap(z=np.eye(4), colorbar=dict(title="M"), name=f"h{k}") for k in range(6)])
    threads_n, copies_each = 4, 40
    start = threading.Barrier(threads_n)
    failures: list[BaseException] = []
    types: set[tuple[str, ...]] = set()

    def copy_many() -> None:
        start.wait()
        for _ in range(copies_each):
            try:
                types.add(tuple(t.type for t in figure_copy(fig).data))
            except ValueError as err:
                failures.append(err)

    threads = [threading.Thread(target=copy_many) for _ in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not failures, f"{len(failures)} of {threads_n * copies_each} copies failed: {failures[0]}"
    assert types == {("heatmap",) * 6}
    assert [t.type for t in fig.data] == ["heatmap"] * 6  # the source is as it was
