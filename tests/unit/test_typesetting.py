"""Figures typeset for a paper: column presets, titles wrapped to their width with no overlap when
rendered, real subscripts, a PDF that names its figure, and the Python that rebuilds a figure."""

import io
import json
from pathlib import Path

import numpy as np
import pytest

from damcha.views.export import ExportSettings, figure_bytes, paper_style
from damcha.views.typesetting import COLUMN_WIDTHS, with_subscripts, wrapped
from tests.support.browser import CHROMIUM_ARGS, require_chromium, require_static_export
from tests.support.rendered_boxes import clashes, measured

SHIPPED = Path(__file__).resolve().parents[2] / "checkpoints"


@pytest.mark.parametrize(("text", "typeset"), [
    ("Per-head metrics m_i", "Per-head metrics m<sub>i</sub>"),
    ("Loss change from zeroing M_ij", "Loss change from zeroing M<sub>ij</sub>"),
    ("W_Q W_Kᵀ per head", "W<sub>Q</sub> W<sub>K</sub>ᵀ per head"),
    ("W_Q^h W_K^hᵀ", "W<sub>Q</sub><sup>h</sup> W<sub>K</sub><sup>h</sup>ᵀ"),
    ("val_nll and train_mse", "val_nll and train_mse"),  # names joined by underscores stay as they are
    ("metric_mode = head_2_x", "metric_mode = head_2_x"),
    ("Per-head bilinear forms W~_Q diag(m_h) W~_Kᵀ", "Per-head bilinear forms W\u0303<sub>Q</sub> diag(m<sub>h</sub>) "
                                                    "W\u0303<sub>K</sub>ᵀ"),  # ColMHA's W̃: a tilde over, not beside
])
def test_underscore_indices_become_subscripts_and_names_stay(text, typeset):
    assert with_subscripts(text) == typeset


def test_a_long_title_wraps_to_the_width_it_has():
    title = "Contribution of M(x) to the loss (bits per pixel), one colour range for every panel of the figure"
    lines = wrapped(title, 300, 14).split("<br>")
    assert len(lines) > 1 and " ".join(lines) == title
    assert all(len(line) <= 300 / (0.56 * 14) for line in lines)
    assert wrapped("short", 300, 14) == "short"


def _comparison(n_runs: int = 4):
    from damcha.analysis.inspection import inspect_input
    from damcha.inputs.model_inputs import validation_input
    from damcha.runs.checkpoints import load_model, load_run
    from damcha.views.comparison import compared_run, comparison_figure

    rows = []
    for name in ("digits-damcha", "digits-mha", "digits-dcmha", "digits-moa")[:n_runs]:
        run = load_run(SHIPPED / name)
        inp = validation_input(run, 0)
        rows.append(compared_run(inspect_input(load_model(run), inp.tokens, inp.targets), f"{name} @{run.epochs[-1]}"))
    return comparison_figure(rows, "validation input 0 of the digits set: four runs compared side by side")


def test_a_narrow_panels_listed_axis_keeps_its_labels_upright_rather_than_one_of_them():
    """At a single column each panel of a comparison is a few label-widths wide: side by side only "head 1" of
    four fitted under M(x) (and "expert 1", "0 start" under the others). Turned upright they stand a line apart."""
    fig = _comparison()
    listed = {k: len(fig.layout[k].tickvals) for k in fig.layout if k.startswith(("xaxis", "yaxis"))
              and fig.layout[k].tickvals is not None and len(fig.layout[k].tickvals) > 1}
    single = paper_style(fig, ExportSettings.column("single column"))
    kept = {k: len(single.layout[k].tickvals) for k in listed}
    assert all(kept[k] >= min(n, 3) for k, n in listed.items()), (listed, kept)
    heads = next(k for k in listed if list(fig.layout[k].ticktext or ())[:1] == ["head 1"] and k.startswith("x"))
    assert list(single.layout[heads].ticktext) == ["head 1", "head 2", "head 3", "head 4"]
    assert single.layout[heads].tickangle == -90


def test_the_paper_style_wraps_subplot_titles_at_a_single_column_and_less_at_a_double_one():
    fig = _comparison()
    single = paper_style(fig, ExportSettings.column("single column"))
    double = paper_style(fig, ExportSettings.column("double column"))
    breaks = [sum(a.text.count("<br>") for a in f.layout.annotations) for f in (single, double)]
    assert breaks[0] > breaks[1] >= 0
    assert "<br>" in single.layout.title.text
    assert COLUMN_WIDTHS == {"single column": 460, "double column": 940}
    with pytest.raises(ValueError, match="unknown column preset"):
        ExportSettings.column("triple column")


@pytest.fixture(scope="module")
def every_figure():
    """Every named figure, docs/extending.md's example figure included (a guide that drifts fails here too)."""
    from tests.support.every_figure import every_named_figure
    from tests.support.guide_examples import guide_figure_registered

    require_chromium()
    with guide_figure_registered() as added:
        figures = every_named_figure()
    assert added and any(name.endswith(f":{added[0]}") for name, _ in figures)
    return figures


@pytest.mark.slow
@pytest.mark.parametrize("column", list(COLUMN_WIDTHS))
def test_every_named_figure_lays_out_at_either_column_width_with_no_text_on_another_or_on_a_panel(every_figure,
                                                                                                 column):
    """Every entry of every figure table, drawn from the shipped runs for each modality and mechanism
    shape, typeset for a journal's column: no title, tick label, colour-bar title or tick or legend entry
    on another, on a neighbouring panel, or off the page (at a single column the comparison's colour
    bars sat on the next panel, a loss axis title ran into a colour bar, subplot titles on the ticks of
    the row above, long arm names off the page)."""
    settings = ExportSettings.column(column)
    drawn = measured([paper_style(f, settings) for _, f in every_figure], settings.width)
    assert len(drawn) >= 150
    kinds = {b["kind"] for d in drawn for b in d.get("boxes", ())}
    assert {"title", "tick", "colour bar", "colour bar tick", "legend", "label"} <= kinds
    failures = {name: d.get("error") or clashes(d) for (name, _), d in zip(every_figure, drawn)}
    assert not {name: f for name, f in failures.items() if f}


@pytest.mark.slow
def test_vector_heatmaps_lay_out_as_the_raster_figure_does(every_figure):
    """A PDF with vector cells draws its panels where the raster export draws them (the carrier trace's
    markers padded the axes and moved every panel; a fixed range on a category axis under square cells
    widened it instead of shrinking the panel: MoA's co-selection stood 25 px shorter)."""
    from damcha.views.vector_heatmaps import vector_heatmaps

    settings = ExportSettings.column("single column")
    def small_heatmaps(fig) -> bool:  # cells as shapes: thousands make plotly.js slow, not different
        maps = [t for t in fig.data if t.type == "heatmap"]
        return bool(maps) and sum(np.size(t.z) for t in maps) <= 1100

    def categorical_with_numbers(fig) -> bool:
        return any(t.type == "heatmap" and t.texttemplate for t in fig.data) and fig.layout.xaxis.type == "category"

    chosen = sorted((f for _, f in every_figure if small_heatmaps(f)), key=lambda f: not categorical_with_numbers(f))
    styled = [paper_style(f, settings) for f in chosen[:16]]
    assert len(styled) >= 6 and any(categorical_with_numbers(f) for f in styled)
    raster, vector = measured(styled, settings.width), measured([vector_heatmaps(f) for f in styled], settings.width)
    for r, v in zip(raster, vector):
        assert len(r["areas"]) == len(v["areas"])
        for a, b in zip(r["areas"], v["areas"]):
            assert all(abs(a[k] - b[k]) <= 2 for k in ("x0", "x1", "y0", "y1")), (a, b)
        assert not clashes(v)


@pytest.mark.slow
def test_the_negative_controls_a_title_above_a_colour_bar_and_unwrapped_titles_clash():
    """What the layout test can catch: a colour-bar title above the bar (plotly's default) runs into
    its top tick; the comparison without the paper style runs its titles together at a single column."""
    require_chromium()
    fig = _named("digits-damcha", "attention")
    fig.update_traces(colorbar_title_side="top")
    settings = ExportSettings.column("single column")
    above, unstyled = measured([paper_style(fig, settings), _comparison()], settings.width)
    assert any("colour bar" in c for c in clashes(above))
    assert clashes(unstyled)


def _named(run: str, name: str):
    from damcha.inputs.model_inputs import validation_input
    from damcha.runs.checkpoints import load_run
    from damcha.views.model_figures import figure_set

    loaded = load_run(SHIPPED / run)
    inp = validation_input(loaded, 0)
    return figure_set(loaded, [loaded.epochs[-1]], inp.tokens, inp.targets, names=[name])[0].figure


def test_a_pdf_names_its_figure_in_its_document_information():
    from pypdf import PdfReader

    require_static_export()
    import plotly.graph_objects as go

    fig = go.Figure(go.Heatmap(z=np.eye(3)), layout=dict(title="Per-head metrics m_i, epoch 40"))
    info = PdfReader(io.BytesIO(figure_bytes(fig, "pdf", name="digits-damcha_e0040_head_metrics"))).metadata
    assert info.title == "Per-head metrics m_i, epoch 40" and info.subject == "digits-damcha_e0040_head_metrics"


def test_the_python_shown_beside_an_export_rebuilds_the_figure(tmp_path, monkeypatch):
    from damcha.inputs.model_inputs import validation_input
    from damcha.runs.checkpoints import load_run
    from damcha.views.export import figure_data, item_files
    from damcha.views.model_figures import figure_set
    from damcha.views.regeneration import python_to_rebuild

    run = load_run(SHIPPED / "digits-damcha")
    inp = validation_input(run, 2)
    (item,) = figure_set(run, [run.epochs[-1]], inp.tokens, inp.targets, names=["metric"])
    files = item_files(item, ["csv"])
    for name, raw in files.items():
        (tmp_path / name).write_bytes(raw)
    from damcha.views.export import ExportSettings

    shown = python_to_rebuild(item.provenance, f"{item.name}.provenance.json", "/data/my-runs",
                              ExportSettings.column("single column", vector_heatmaps=True))
    assert "run_root='/data/my-runs'" in shown  # the folder in use, not a fixed "checkpoints"
    assert "ExportSettings(width=460," in shown and "vector_heatmaps=True" in shown  # the layout in use
    assert "ExportSettings(width=460," in python_to_rebuild(item.provenance, "p.json")  # default: single column
    code = python_to_rebuild(item.provenance, f"{item.name}.provenance.json")
    code = "\n".join(line for line in code.splitlines() if not line.startswith(("item.figure.show", "write_item")))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "checkpoints").symlink_to(SHIPPED)
    scope: dict = {}
    exec(compile(code, "rebuild.py", "exec"), scope)
    rebuilt, original = figure_data(scope["item"].figure), figure_data(item.figure)
    assert rebuilt.keys() == original.keys()
    for k in original:
        np.testing.assert_array_equal(rebuilt[k], original[k])
    assert json.loads(files[f"{item.name}.provenance.json"])["regenerable"]


def test_eight_heads_of_attention_stand_four_a_row_with_labels_a_line_apart_at_a_single_column():
    from damcha.views import figures

    labels = [f"{i} r{i // 8 + 1}c{i % 8 + 1}" for i in range(64)]
    fig = figures.attention_figure(np.random.default_rng(0).random((8, 64, 64)), labels)
    assert {(t.xaxis, t.yaxis) for t in fig.data} == {(f"x{i}" if i > 1 else "x", f"y{i}" if i > 1 else "y")
                                                     for i in range(1, 9)}
    assert len({round(fig.layout[f"yaxis{i}"].domain[0], 3) for i in range(2, 9)} | {round(fig.layout.yaxis.domain[0], 3)}) == 2
    settings = ExportSettings.column("single column")
    styled = paper_style(fig, settings)
    square = 0.85 * settings.width * (styled.layout.xaxis.domain[1] - styled.layout.xaxis.domain[0])  # px a panel
    for name in ("xaxis", "yaxis"):
        shown = len(styled.layout[name].tickvals)
        assert 2 <= shown and shown * 1.3 * settings.font_size <= square + 1.3 * settings.font_size, (name, shown)
    assert len(fig.layout.yaxis.tickvals) > len(styled.layout.yaxis.tickvals)  # the screen keeps more


def test_a_log_axis_labels_every_tick_with_its_whole_value():
    """Plotly's default prints mantissas between decades ('2, 5, 0.1, 2'): a '2' that may mean 20 or 0.02."""
    from playwright.sync_api import sync_playwright

    from damcha.views import figures

    require_static_export()
    fig = figures.token_loss_figure(np.r_[5.0, np.full(62, 0.02)], [""] * 63, unit="squared error")
    svg = figure_bytes(fig, "svg", ExportSettings.column("single column")).decode()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=require_chromium(), args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.set_content(f"<html><body>{svg}</body></html>")
        ticks = page.evaluate("() => [...document.querySelectorAll('.ytick text')].map(t => t.textContent)")
        browser.close()
    values = [float(t.replace("−", "-")) for t in ticks]
    assert len(values) >= 3 and values == sorted(values) and len(set(values)) == len(values), ticks
    assert min(values) < 0.1 and max(values) >= 1, ticks  # decades apart, each read as itself


def test_a_grid_with_array_data_is_spaced_and_long_names_on_a_y_axis_are_wrapped():
    """Figures built with numpy arrays (not only their JSON round trip) are typeset: two panels set
    apart by the colour bar between them, and a long arm name wrapped to 40% of the page."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from damcha.views.typesetting import typeset

    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.02)
    fig.add_trace(go.Heatmap(z=np.eye(4) - 0.5, colorbar=dict(x=0.5, title="metric entry")), row=1, col=1)
    fig.add_trace(go.Bar(x=np.arange(4), y=np.ones(4)), row=1, col=2)
    typeset(fig, 460, 14)
    gap_px = (fig.layout.xaxis2.domain[0] - fig.layout.xaxis.domain[1]) * (460 - fig.layout.margin.l - fig.layout.margin.r)
    assert gap_px > 60  # the bar (10), its ticks and its title stand there
    named = go.Figure(go.Scatter(x=np.ones(1), y=["full-token MHA against the bilinear form: mha e=1.0 vs damcha"]))
    named.update_layout(height=200)
    typeset(named, 460, 14)
    assert "<br>" in named.layout.yaxis.ticktext[0] and named.layout.height > 200


def test_a_panel_under_two_columns_spans_both_after_the_columns_are_set_apart():
    """A panel spanning two columns (the comparison's loss under its two heatmaps) was taken for a third
    column: the grid was spaced as three and its panels squeezed to strips."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from damcha.views.typesetting import typeset

    fig = make_subplots(rows=2, cols=2, specs=[[{}, {}], [{"colspan": 2}, None]], horizontal_spacing=0.02)
    fig.add_trace(go.Heatmap(z=np.eye(4), colorbar=dict(x=0.5, title="weight")), row=1, col=1)
    fig.add_trace(go.Heatmap(z=np.eye(4), showscale=False), row=1, col=2)
    fig.add_trace(go.Scatter(x=np.arange(4), y=np.ones(4)), row=2, col=1)
    typeset(fig, 460, 14)
    left, right, under = fig.layout.xaxis.domain, fig.layout.xaxis2.domain, fig.layout.xaxis3.domain
    assert under[0] == pytest.approx(left[0]) and under[1] == pytest.approx(right[1])
    assert (right[0] - left[1]) * (460 - fig.layout.margin.l - fig.layout.margin.r) > 40  # the colour bar's room
    assert right[1] - right[0] > 0.3  # two columns share the width, not three


def test_rows_of_square_heatmaps_shrink_to_their_panels_and_the_other_rows_keep_their_height():
    """A row laid out for the screen's height left a square heatmap, as high as a column's width allows,
    small in a tall row, its colour bar the row's length; the figure is that much shorter."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from damcha.views.square_panels import fit_square_rows

    fig = make_subplots(rows=3, cols=1, vertical_spacing=0.05)
    for row in (1, 3):
        d0, d1 = fig.get_subplot(row, 1).yaxis.domain  # each colour bar beside its panel, as long as the row
        fig.add_trace(go.Heatmap(z=np.eye(8), colorbar=dict(y=(d0 + d1) / 2, len=d1 - d0)), row=row, col=1)
        fig.update_yaxes(scaleanchor=f"x{'' if row == 1 else row}", row=row, col=1)
    fig.add_scatter(x=[0, 1], y=[0, 1], row=2, col=1)
    fig.update_layout(height=1500, width=400, margin=dict(l=50, r=50, t=50, b=50))
    plot, width = 1400, 300
    before = {n: tuple(fig.layout[n].domain) for n in ("yaxis", "yaxis2", "yaxis3")}
    fit_square_rows(fig, 400)
    grown = fig.layout.height - 100
    for name in ("yaxis", "yaxis3"):
        d0, d1 = fig.layout[name].domain
        assert (d1 - d0) * grown == pytest.approx(width, abs=1.5)  # as high as the panel is wide
    d0, d1 = fig.layout.yaxis2.domain
    assert (d1 - d0) * grown == pytest.approx((before["yaxis2"][1] - before["yaxis2"][0]) * plot)
    assert fig.layout.height == pytest.approx(1500 - 2 * ((before["yaxis"][1] - before["yaxis"][0]) * plot - width - 1))
    for bar, name in ((fig.data[0].colorbar, "yaxis"), (fig.data[1].colorbar, "yaxis3")):  # bars shrink with their rows
        d0, d1 = fig.layout[name].domain
        assert bar.len == pytest.approx(d1 - d0) and bar.y == pytest.approx((d0 + d1) / 2)


@pytest.mark.slow
def test_the_comparison_at_a_single_column_draws_its_heatmaps_square_and_no_smaller_than_the_column_allows():
    """Compare's export at a single column squeezed M(x) and attention into 60 x 360 px strips, three
    panels abreast under titles of seven lines."""
    require_chromium()
    settings = ExportSettings.column("single column")
    fig = _comparison(2)
    (drawn,) = measured([paper_style(fig, settings)], settings.width)
    maps = {(t.xaxis or "x") + (t.yaxis or "y") for t in fig.data if t.type == "heatmap"}
    areas = [a for a in drawn["areas"] if a["name"] in maps]
    assert len(areas) == 4
    for a in areas:
        w, h = a["x1"] - a["x0"], a["y1"] - a["y0"]
        assert abs(w - h) <= 2 and w >= 80, a
    assert not clashes(drawn)


@pytest.mark.slow
def test_every_named_figure_as_the_apps_cache_hands_it_out_exports_and_lays_out_as_drawn(every_figure):
    """Streamlit's cache hands out pickled copies, whose arrays plotly holds as {"dtype", "bdata", "shape"}:
    such a copy exports the same data (Training dynamics' "Export all" failed on it with "float() argument
    must be ... not 'dict'") and is typeset with the same margins (its numbers read as three category names)."""
    import pickle

    from damcha.views.export import figure_data

    settings = ExportSettings.column("single column")
    for name, fig in every_figure:
        cached = pickle.loads(pickle.dumps(fig))
        drawn, handed_out = figure_data(fig), figure_data(cached)
        assert drawn.keys() == handed_out.keys(), name
        for key, values in drawn.items():
            np.testing.assert_array_equal(handed_out[key], values, err_msg=f"{name}: {key}")
        assert paper_style(cached, settings).layout.margin == paper_style(fig, settings).layout.margin, name
