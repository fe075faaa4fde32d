"""A named figure shown in one call, with the provenance that rebuilds it: a page passes the name,
where it is from (run, epoch, input) and its parameters; the figure comes from its table
(damcha.views: record, model, across snapshots, several runs; damcha.evidence.view), drawn in the
run's unit, and its export rebuilds it with `damcha figures --from-provenance`."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Sequence
from pathlib import Path

import streamlit as st

from app.cache import figure_over_epochs, model_figure_values
from app.export_widgets import provenance, show
from app.roots import checkpoint_root
from damcha.analysis.inspection import InspectionRecord
from damcha.evidence.view import evidence_figures
from damcha.inputs.model_inputs import ModelInput
from damcha.runs.checkpoints import Run
from damcha.views.epoch_figures import frozen
from damcha.views.figure_sets import available_figures, build_figure
from damcha.views.model_figures import model_figure
from damcha.views.run_set_figures import run_set_figure, run_set_params


def show_record_figure(name: str, record: InspectionRecord, run: Run, epoch: int, inp: ModelInput, params: dict,
                       file_name: str | None = None, width: str = "stretch") -> None:
    """A structure of the record or one of RECORD_FIGURES."""
    show(build_figure(name, record, params), file_name or name,
         provenance(name, run, epoch, inp, params, regenerable=True), width)


def show_model_figure(name: str, run: Run, epoch: int, inp: ModelInput, params: dict | None = None, values=None,
                      where: str = "this input", file_name: str | None = None, width: str = "stretch") -> None:
    """One of MODEL_FIGURES: its values computed (and cached) here unless the page has them already."""
    params = dict(params or {})
    if values is None:
        values = model_figure_values(run, epoch, inp, name, frozen(params))
    show(model_figure(name, values, params, where, config=run.model_config), file_name or name,
         provenance(name, run, epoch, inp, params, regenerable=True), width)


def show_epoch_figure(name: str, run: Run, inp: ModelInput | None, params: dict, file_name: str | None = None) -> None:
    """One of EPOCH_FIGURES, from its cached sources (its provenance at the run's last snapshot)."""
    show(figure_over_epochs(run, inp, name, frozen(params)), file_name or name,
         provenance(name, run, run.epochs[-1], inp, params, regenerable=True))


def show_run_set_figure(name: str, taken: Sequence[tuple], inp: ModelInput, params: dict,
                        file_name: str | None = None) -> None:
    """One of RUN_SET_FIGURES from what it took from each run ((run, epoch, values) triples)."""
    runs, epochs = [t[0] for t in taken], [t[1] for t in taken]
    show(run_set_figure(name, taken, params, inp.source), file_name or name,
         provenance(name, runs[0], epochs[0], inp, run_set_params(runs, epochs, params, checkpoint_root()),
                    regenerable=True))


def show_evidence_figures(claim: dict, results_name: str) -> None:
    """Every evidence figure of one claim of the stored results (results_name: the folder as a
    provenance names it)."""
    for name, fig in evidence_figures(claim):
        show(fig, f"{name}_{claim['key']}", provenance(name, None, params={"claim": claim["key"], "results": results_name},
                                                      regenerable=True))


def shown_input(run: Run, epoch: int, record: InspectionRecord, inp: ModelInput) -> None:
    """The input as the model reads it: its picture (the `input` record figure) or its text."""
    st.caption(f"**Input:** {inp.source}")
    if "input" in available_figures(record):
        show_record_figure("input", record, run, epoch, inp, {"highlight": False}, "compared_input", width="content")
    elif inp.text is not None:
        st.code(inp.text[:2000], language=None, wrap_lines=True)


PAGES_FOLDER = Path(__file__).resolve().parent.parent / "pages"


@functools.cache
def placed_by_pages() -> frozenset[str]:
    """The figures the pages place themselves: what each page declares in its PLACED_FIGURES (read from its
    source, the page is not run). Any other string a page writes (a column "input", a panel "attention") places
    nothing: a new figure of that name still goes under "More figures"."""
    return frozenset(name for path in PAGES_FOLDER.glob("*.py") for name in declared_placements(path))


def declared_placements(page: Path) -> tuple[str, ...]:
    """A page's PLACED_FIGURES, as its source assigns it (a tuple of names)."""
    for node in ast.parse(page.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "PLACED_FIGURES" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise ValueError(f"{page.name} declares no PLACED_FIGURES: every page says which named figures it places")


def not_placed(names: Iterable[str]) -> list[str]:
    """The figure names no page places: a page offers those of its table under "More figures", so a
    figure added to a table as docs/extending.md says appears without a page edited."""
    return [name for name in names if name not in placed_by_pages()]
