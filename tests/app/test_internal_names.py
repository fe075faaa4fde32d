"""No page shows the code's internal names (a figure's registry key such as `fig8_first_vs_last`, a metric
mode's value such as `diagonal_scaled`): a reader sees their titles. Walks every page of the runs with metric
modes, every view of each, and every registry's names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from damcha.model.mechanisms.damcha.metric import MetricMode
from damcha.views.epoch_figures import EPOCH_FIGURES
from damcha.views.figure_sets import RECORD_FIGURES
from damcha.views.model_figures import MODEL_FIGURES
from damcha.views.run_set_figures import RUN_SET_FIGURES
from tests.support.app_views import RUN_PAGES, every_view, page_app

SHIPPED = Path(__file__).resolve().parents[2] / "checkpoints"
INTERNAL = sorted({name for registry in (RECORD_FIGURES, EPOCH_FIGURES, MODEL_FIGURES, RUN_SET_FIGURES)
                   for name in registry if "_" in name} | {m.value for m in MetricMode if "_" in m.value})


def all_shown_text(at) -> list[str]:
    """Every text a reader sees: headings, paragraphs, captions, notices, metrics, table columns and cells, the
    options of every choice."""
    texts = []
    for kind in ("title", "header", "subheader", "markdown", "caption", "info", "warning", "error", "success", "text"):
        texts += [str(e.value) for e in at.get(kind)]
    texts += [f"{m.label} {m.value}" for m in at.metric]
    for chart in at.get("plotly_chart"):  # a figure's title and its panels' titles
        layout = json.loads(chart.proto.spec).get("layout", {})
        texts += [str(layout.get("title", {}).get("text", ""))] + [str(a.get("text", "")) for a in layout.get("annotations", [])]
    for df in at.dataframe:
        texts += [str(c) for c in df.value.columns]
        texts += [str(v) for column in df.value.columns for v in df.value[column] if isinstance(v, str)]
    for kind in ("selectbox", "radio", "multiselect"):
        for widget in at.get(kind):
            texts += [str(widget.label), *[str(o) for o in widget.options]]
    return texts


@pytest.mark.parametrize("page", RUN_PAGES)
def test_no_page_shows_an_internal_name(page):
    at = page_app(SHIPPED, "digits-damcha", page, compare_with=["digits-damcha", "digits-damcha-static"],
                  compare_more_on="true")
    at.session_state["compare_more_on"] = True
    at.session_state["modes_on"] = True
    at.run()
    found = {name: text[:160] for view in every_view(at) for text in all_shown_text(view) for name in INTERNAL
             if name in text}
    assert not found, found
