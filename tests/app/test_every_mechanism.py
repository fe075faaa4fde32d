"""Every view true for every registered mechanism: the suite walks the registry (plus the toy
mechanism of tests/support/toy_mechanism.py), so a mechanism added tomorrow is covered without editing a list.

A tiny run per variant and task (causal next-pixel digits, and a digit classifier where the
mechanism builds one) is trained once for this module; then every page renders under AppTest,
every drawn structure takes its axis titles and labels from the structure, the dynamics page's
difference and comparison arrays equal the records at the epochs chosen, exported CSV equals the
record, and parameter counts equal the parameters built.
"""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

from app.cache import cached_runs
from app.navigation import PAGES as NAVIGATION
from damcha import ModelConfig, build_model, inspect_input, mechanisms, variant_config
from damcha.inputs.model_inputs import validation_input
from damcha.model.mechanisms import StructureKind
from damcha.runs.checkpoints import list_runs, load_model, load_run
from damcha.runs.train import TrainConfig, train
from damcha.views.export import data_csv, figure_data, read_data_csv
from damcha.views.figure_sets import build_figure, per_head, structure_index, structure_style
from damcha.views.typesetting import with_subscripts
from tests.support.app_views import RUN_PAGES, every_view, in_every_view, page_app, z_of
from tests.support.exports import checked_bundle, page_items
from tests.support.guide_examples import guide_mechanism, walked_variants
from tests.support.toy_mechanism import TOY_VARIANT
from tests.support.units import losses_without_unit, shown_texts

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "app" / "streamlit_app.py")
PAGES = [entry.path.stem for entry in NAVIGATION]  # the app's menu, as the app builds it
BASE = ModelConfig(n_layer=2, n_head=4, n_embd=16, attention_options={"generator_widths": (16,)})
TASKS = ("digits", "digits-cls")

VARIANTS = walked_variants()  # the registry with the toy and docs/mechanisms.md's example, for the parametrisation
pytestmark = pytest.mark.usefixtures("guide_examples")  # both registered while the module's tests run


@pytest.fixture(scope="module")
def root(tmp_path_factory, guide_examples) -> Path:
    """The folder of this module's runs: each (task, variant) is trained there the first time a test
    asks for it (`trained`), so `-k tha` trains THA's runs only."""
    return tmp_path_factory.mktemp("every-mechanism")


def trained(root: Path, task: str, variant: str):
    """The tiny run '<task>-<variant>', trained on first use and kept in `root` for the module's other
    tests; a skip when the variant builds no model of that task (it says so by name)."""
    folder = root / f"{task}-{variant}"
    if not (folder / "config.json").is_file() and not (root / f".{task}-{variant}.refused").exists():
        tcfg = TrainConfig(dataset=task, epochs=1, train_limit=64, batch_size=32, completion_images=4,
                           completion_samples=1, device="cpu")
        try:
            train(variant_config(BASE, variant), tcfg, folder, progress=False)
        except ValueError as e:  # a mechanism that refuses this task says so by name
            assert variant in str(e) or "invalid model config" in str(e), e
            (root / f".{task}-{variant}.refused").write_text(str(e))
        cached_runs.clear()  # the app lists a folder once a minute; this one just gained a run
    if not (folder / "config.json").is_file():
        pytest.skip(f"{variant} builds no {task} model")
    return load_run(folder)


def all_trained(root: Path, task: str) -> dict:
    """Every variant's run of a task that builds one (trained where not yet)."""
    runs = {}
    for variant in VARIANTS:
        try:
            runs[f"{task}-{variant}"] = trained(root, task, variant)
        except pytest.skip.Exception:
            continue
    return runs


def specs(at: AppTest) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def titled(figs: list[dict], start: str) -> dict:
    """The first figure whose title starts with `start`, as the screen typesets it (m_i as m<sub>i</sub>)."""
    start = with_subscripts(start)
    hits = [f for f in figs if f["layout"].get("title", {}).get("text", "").startswith(start)]
    assert hits, f"no figure titled {start!r}: {[f['layout'].get('title', {}).get('text') for f in figs]}"
    return hits[0]


def record_of(run, epoch=None):
    inp = validation_input(run, 0)
    return inp, inspect_input(load_model(run, epoch), inp.tokens, inp.targets)


def test_the_registry_walk_covers_the_toy_and_every_variant():
    assert TOY_VARIANT.name in VARIANTS and {"damcha", "mha"} <= set(VARIANTS)
    assert {v.name for v in guide_mechanism()[1]} <= set(VARIANTS)
    assert VARIANTS == mechanisms.variant_names()  # the registry itself, not a copy of it


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_parameter_counts_equal_the_parameters_built(variant, task):
    cfg = variant_config(BASE if task == "digits" else BASE.__class__(**{**BASE.to_dict(), "causal": False,
                                                                         "n_classes": 10}), variant)
    model = build_model(cfg)
    assert cfg.parameter_estimate() == sum(p.numel() for p in model.parameters())
    attention = sum(p.numel() for b in model.blocks for p in b.attn.parameters())
    shared = getattr(model, "metric_source", None)
    attention += sum(p.numel() for p in shared.parameters()) if shared is not None else 0
    assert cfg.mechanism.parameter_count(cfg) == attention


# The Inspector's figures in every view, as the page walk below rendered them for a run: the test of
# their labels reads them instead of rendering the same page again (it renders them where the walk
# did not run first, as under -k).
INSPECTOR_FIGURES: dict[str, list[dict]] = {}


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_every_page_renders_for_every_variant(root, variant, task):
    run = trained(root, task, variant)
    for page in RUN_PAGES:
        at = page_app(root, run.name, page)
        assert at.selectbox(key="run").value == run.name
        figures = []
        for view in every_view(at):  # each tab (a hidden one builds nothing)
            assert not view.exception, (page, [e.value for e in view.exception])
            assert not losses_without_unit(shown_texts(view)), (page, losses_without_unit(shown_texts(view)))
            figures += specs(view) if page == "inspector" else []
            checked_bundle(page_items(view), ["csv", "npz"])  # "Export all"'s data of the figures as the page holds them
        if page == "inspector":
            INSPECTOR_FIGURES[run.name] = figures


MATRIX_TRACES = ("heatmap", "contour", "surface")


def _axis_titles(fig: dict) -> tuple[str, str]:
    layout = fig["layout"]
    return layout.get("yaxis", {}).get("title", {}).get("text"), layout.get("xaxis", {}).get("title", {}).get("text")


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_inspector_draws_each_structure_with_its_own_labels(root, variant, task):
    run = trained(root, task, variant)
    _, record = record_of(run)
    figs = INSPECTOR_FIGURES.pop(run.name, None)
    if figs is None:
        at = page_app(root, run.name, "inspector")
        assert not at.exception
        figs = in_every_view(at, specs)
    for s in record.structures:
        fig = titled(figs, s.title)
        assert "~" not in fig["layout"]["title"]["text"], (s.name, "a tilde is drawn over its letter, not beside it")
        style = structure_style(s, record)
        panels = [a["text"] for a in fig["layout"].get("annotations", [])]
        if s.kind in (StructureKind.HEAD_GRID_MATRIX, StructureKind.HEAD_BY_HEAD, StructureKind.MATRIX,
                      StructureKind.TOKEN_GATES):
            assert _axis_titles(fig) == (with_subscripts(style.row_title), with_subscripts(style.col_title)), s.name
        elif s.kind is StructureKind.PER_HEAD_FORMS:
            assert fig["layout"]["yaxis"]["title"]["text"] == with_subscripts(style.row_title), s.name
        if per_head(s):
            expected = [with_subscripts(t) for t in s.axis_labels(s.drawn[0], s.values.shape[-3], record.token_labels)]
            assert panels[:len(expected)] == expected, (s.name, panels)
        if s.kind is StructureKind.HEAD_BY_HEAD:
            trace = fig["data"][0]
            assert trace["x"] == list(style.col_labels) and trace["y"] == list(style.row_labels), s.name
            assert all(not t.startswith("head 0") for t in trace["x"]), "heads are counted from 1"
        if s.kind in (StructureKind.MATRIX, StructureKind.TOKEN_GATES):
            ticks = fig["layout"]["xaxis"]["ticktext"]
            assert set(ticks) <= set(style.col_labels), s.name
        scale = fig["data"][0]
        if s.value_kind.non_negative:
            assert scale["zmin"] == 0 and "zmid" not in scale, (s.name, "magnitudes are drawn from 0")
        else:
            assert scale["zmin"] == -scale["zmax"], (s.name, "signed values on a scale centred at 0")
        bars = [t.get("colorbar", {}).get("exponentformat") for t in fig["data"] if t["type"] in MATRIX_TRACES]
        assert set(bars) == {"power"}, (s.name, "small values as powers of ten, not SI prefixes (100μ)")
        titles = {t.get("colorbar", {}).get("title", {}).get("text") for t in fig["data"] if t["type"] in MATRIX_TRACES}
        assert titles == {with_subscripts(s.colorbar_title)} and "value" not in titles, (s.name, titles,
                                                                                          "a colour bar says what it counts")


@pytest.mark.parametrize("variant", VARIANTS)
def test_dynamics_difference_and_comparison_equal_the_records(root, variant):
    run = trained(root, "digits", variant)
    trained(root, "digits", "damcha" if variant == "mha" else "mha")  # the page compares with another run (`-k one`)
    first_epoch, last_epoch = run.epochs[0], run.epochs[-1]
    inp, first = record_of(run, first_epoch)
    _, last = record_of(run, last_epoch)
    at = page_app(root, run.name, "dynamics")
    assert not at.exception, [e.value for e in at.exception]
    if not first.structures:
        return
    name = at.selectbox(key="structure").value
    s0, s1 = first.structure(name), last.structure(name)
    T = len(inp.tokens)
    pos = T - 1 if s0.size("position") > 1 or "token" in s0.index_axes else 0
    index = structure_index(first, 0, pos)
    head = 0 if per_head(s0) else None
    a, b = s0.at(**index), s1.at(**index)
    if head is not None:
        a, b = a[head], b[head]
    expected = (a != b).astype(float) if a.dtype == bool else b - a
    figs = specs(at)
    diff = next(f for f in figs if "− epoch" in f["layout"].get("title", {}).get("text", ""))
    np.testing.assert_allclose(z_of(diff), expected, atol=1e-6)
    this = next(f for f in figs if f"{run.name} epoch {last_epoch}" in f["layout"].get("title", {}).get("text", ""))
    drawn = s1.at(**index)
    np.testing.assert_allclose(z_of(this), (drawn[0] if per_head(s1) else drawn).astype(float), atol=1e-6)


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_exported_data_of_each_structure_equals_the_record(root, variant, task):
    run = trained(root, task, variant)
    _, record = record_of(run)
    index = structure_index(record, 0, -1)
    for s in record.structures:
        fig = build_figure(s.name, record, {"position": -1})
        arrays = read_data_csv(data_csv(figure_data(fig)))
        values = s.at(**index).astype(float)
        drawn = [values[h] for h in range(values.shape[0])] if values.ndim == 3 else [values]
        assert len(arrays) == len(drawn), s.name
        for got, want in zip(arrays.values(), drawn):
            np.testing.assert_array_equal(got, np.atleast_2d(want), err_msg=s.name)


def test_a_mask_difference_is_changed_or_unchanged_not_a_subtraction():
    """Regression: /dynamics?run=digits-mma raised numpy's boolean-subtract TypeError."""
    from damcha.analysis.dynamics import EpochSweep

    cfg = variant_config(BASE.__class__(**{**BASE.to_dict(), "vocab_size": 11, "block_size": 16}), "mma")
    model = build_model(cfg).eval()
    record = inspect_input(model, [1, 2, 3, 4], [2, 3, 4, 5])
    sweep = EpochSweep((0, 1), (record, record))
    diff = sweep.difference("head_masks", {"layer": 0, "position": 0}, 0, 0, 1)
    assert diff.dtype == float and not diff.any()
    assert torch.is_tensor(torch.as_tensor(diff))


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_declared_setting_is_validated_from_its_declaration(variant):
    cfg = variant_config(BASE, variant)
    mechanism = cfg.mechanism
    for s in mechanism.declared_settings:
        assert s.help and s.describe().startswith(s.name)
        assert mechanism.settings(cfg) is not None
        bad = "not one of the choices" if s.choices else ("x" if s.kind is not str else None)
        if bad is None:
            continue
        with pytest.raises(ValueError, match=s.name):
            cfg.with_settings(**{s.name: bad})
    for c in mechanism.option_choices:  # per-call choices: the model as trained first, a URL key, help
        assert c.values and c.help and c.url_key
        mechanism.options_from({c.name: c.values[0]})


@pytest.mark.parametrize("task", TASKS)
def test_the_comparison_page_draws_every_run_of_the_task_from_its_record(root, task):
    """Every run of the data set in the table and as a row of the side-by-side figure, whose first
    panel is the run's main structure (the first it declares) as its own record has it."""
    from damcha.views.comparison import main_structure_name
    from damcha.views.figure_sets import drawn_matrix, per_head, structure_index
    from damcha.views.figures import block_means

    runs = all_trained(root, task)
    same_task = sorted(runs)
    at = page_app(root, same_task[0], "compare", compare_with=same_task)
    assert not at.exception, [e.value for e in at.exception]
    assert sorted(at.dataframe[0].value["run"]) == same_task
    fig = titled(specs(at), "validation sample 0")
    heatmaps = {t.get("xaxis", "x"): t for t in fig["data"] if t["type"] == "heatmap"}
    listed = [r.name for r in list_runs(root)[0]]  # the order the app lists runs in
    for row, name in enumerate(sorted(same_task, key=listed.index)):
        _, record = record_of(runs[name])
        s = record.structure(main_structure_name(record))
        index = structure_index(record, 0, -1)
        k = 3 * row + 1
        z = z_of({"data": [heatmaps["x" if k == 1 else f"x{k}"]]})
        expected = drawn_matrix(s, index, 0 if per_head(s) else None)
        f = expected.shape[0] // z.shape[0]  # a figure this large is displayed as block means (exported whole)
        np.testing.assert_allclose(z, block_means(expected, f) if f > 1 else expected, rtol=1e-5, atol=1e-6,
                                   err_msg=name)
