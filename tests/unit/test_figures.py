"""Figure functions are pure: arrays in, a plotly Figure out, with the promised annotations."""

from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest

from damcha.model.mechanisms import variant_names
from damcha.views import figures


def test_metric_heatmap_has_grid_head_labels_and_centred_scale():
    M = np.arange(64.0).reshape(8, 8) - 10
    fig = figures.metric_heatmap_figure(M, n_head=4, title="M")
    (hm,) = fig.data
    assert isinstance(hm, go.Heatmap) and hm.zmid == 0 and hm.zmin == -53 and hm.zmax == 53
    assert len(fig.layout.shapes) == 2 * 3  # 3 inner lines each way
    assert list(fig.layout.xaxis.ticktext) == ["head 1", "head 2", "head 3", "head 4"]
    np.testing.assert_array_equal(hm.z, M)
    assert fig.layout.title.text == "M"
    assert M[0, 0] == -10  # the input was not modified


def test_panels_share_one_scale_and_one_colour_bar():
    a, b = np.ones((4, 4)), -3 * np.ones((4, 4))
    fig = figures.metric_panels_figure({"a": a, "b": b}, n_head=2)
    assert [t.zmax for t in fig.data] == [3, 3]
    assert [bool(t.showscale) for t in fig.data] == [False, True]
    assert fig.data[1].colorbar.title.text == "metric entry", "the one colour bar says what it counts"
    per_panel = figures.metric_panels_figure({"a": a, "b": b}, n_head=2, shared_scale=False)
    assert [t.zmax for t in per_panel.data] == [1, 3]


def test_other_figures_build():
    rng = np.random.default_rng(0)
    M = rng.normal(size=(8, 8))
    assert isinstance(figures.head_by_head_figure(np.abs(rng.normal(size=(4, 4)))), go.Figure)
    fig = figures.head_metrics_figure(rng.normal(size=(4, 2, 2)))
    assert len(fig.data) == 4 and sum(bool(t.showscale) for t in fig.data) == 1
    assert isinstance(figures.contour_figure(M, 4).data[0], go.Contour)
    surf = figures.surface_figure(M).data[0]
    assert isinstance(surf, go.Surface) and surf.cmin == -surf.cmax
    att = figures.attention_figure(rng.random((4, 5, 5)))
    assert len(att.data) == 4 and all(t.zmin == 0 and t.zmax == 1 for t in att.data)
    bars = figures.token_loss_figure(np.array([1.0, 2.0]), ["a", "b"])
    np.testing.assert_allclose(bars.data[0].y, [1, 2])  # drawn in the unit given
    curves = figures.training_curves_figure([{"epoch": 0, "val_nll": 2.0}, {"epoch": 1, "val_nll": 1.0}],
                                            ["train_nll", "val_nll"], marked_epochs=[1])
    assert [t.name for t in curves.data] == ["val_nll", "val_nll (snapshots)"]
    assert figures.digit_figure(np.zeros((8, 8), int)).data[0].zmax == 16


def test_zero_matrix_gets_a_valid_scale():
    fig = figures.metric_heatmap_figure(np.zeros((4, 4)), 2)
    assert fig.data[0].zmax == 1.0


@pytest.mark.parametrize("variant", variant_names())
def test_the_fixed_position_note_is_true_of_every_mechanisms_structures(variant):
    """'The same at every position' is said only where no structure changes with the position: MoA's
    per-token gates are drawn along the tokens, and the page says so."""
    import torch

    from damcha.analysis.inspection import inspect_input
    from damcha.views.figure_sets import fixed_position_note, uses_positions
    from tests.support.models import tiny_model

    model = tiny_model(variant, dtype=torch.float32)
    record = inspect_input(model, torch.randint(0, 11, (12,)).numpy(), None)
    if uses_positions(record):
        return  # a position control applies: the note is not shown
    note = fixed_position_note(record)
    varying = [s.title for s in record.structures if "token" in s.axes or "position" in s.axes]
    assert ("same at every position" in note) == (not varying), (note, varying)


def test_an_interval_cell_never_reads_nan():
    from damcha.views.figures import interval_cell

    assert interval_cell(1.23456, 1.0, 1.5) == "1.235 [1, 1.5]"
    assert interval_cell(2.0, float("nan"), float("nan")) == "2 (no interval)"
    assert interval_cell(float("nan"), float("nan"), float("nan")) == "—"


def test_training_curves_take_a_log_axis():
    rows = [{"epoch": e, "train_nll": 4.0 / (e + 1), "val_nll": 4.2 / (e + 1)} for e in range(5)]
    assert figures.training_curves_figure(rows, log_y=True).layout.yaxis.type == "log"
    assert figures.training_curves_figure(rows).layout.yaxis.type == "linear"


def test_attention_query_labels_are_spaced_to_stay_readable():
    """128 query labels on a 385 px panel were 3 px apart; now at most one per 18 px of height."""
    attn = np.random.default_rng(0).random((4, 128, 128))
    fig = figures.attention_figure(attn, [f"t{i}" for i in range(128)])
    shown = len(fig.layout.yaxis.tickvals)
    assert shown * 18 <= fig.layout.height - 140 + 18 and shown >= 6


def test_a_loss_bar_that_dwarfs_the_rest_puts_the_chart_on_a_log_axis():
    flat = figures.token_loss_figure(np.full(63, 0.02), [""] * 63, unit="squared error")
    assert flat.layout.yaxis.type == "linear"
    first_patch = np.r_[5.0, np.full(62, 0.02)]  # an image's first patch, predicted from the blank start
    spiky = figures.token_loss_figure(first_patch, [""] * 63, unit="squared error")
    assert spiky.layout.yaxis.type == "log" and "250× the median" in spiky.layout.title.text


def test_the_screen_shows_real_subscripts_as_an_export_does_and_leaves_the_figure_as_it_was():
    fig = figures.head_metrics_figure(np.random.default_rng(0).normal(size=(4, 2, 2)))
    fig.update_layout(title="Per-head metrics m_i of W~_Q")
    shown = figures.display_copy(fig)
    assert shown.layout.title.text == "Per-head metrics m<sub>i</sub> of W\u0303<sub>Q</sub>"  # the tilde over its letter
    assert [a.text for a in shown.layout.annotations] == [f"m<sub>{i}</sub>" for i in (1, 2, 3, 4)]
    assert fig.layout.title.text == "Per-head metrics m_i of W~_Q"  # the figure itself (cached, exported) unchanged


def test_losses_share_one_palette_and_the_comparison_draws_a_classifier_loss_as_one_named_bar():
    """One palette for losses on every page and export (the training curves took the theme's colours,
    the comparison its own blue); a classifier's one loss stood as a bar on a numeric axis from -0.5 to
    0.5, and 64 positions' bars were hairlines at a journal's column."""
    from damcha.analysis.inspection import inspect_input
    from damcha.inputs.model_inputs import validation_input
    from damcha.runs.checkpoints import load_model, load_run
    from damcha.views.comparison import compared_run, comparison_figure
    from damcha.views.display_units import LOSS_COLOURS
    from damcha.views.figures import token_loss_figure, training_curves_figure

    curves = training_curves_figure([{"epoch": 0, "train_nll": 2.0, "val_nll": 2.1}])
    assert [t.line.color for t in curves.data] == [LOSS_COLOURS["train"], LOSS_COLOURS["validation"]]
    assert token_loss_figure(np.ones(4), list("abcd")).data[0].marker.color == LOSS_COLOURS["train"]
    rows = []
    for name in ("digits-cls-damcha", "digits-damcha"):
        run = load_run(Path(__file__).resolve().parents[2] / "checkpoints" / name)
        inp = validation_input(run, 0)
        record = inspect_input(load_model(run), inp.tokens, inp.targets)
        rows.append(compared_run(record, name))
    fig = comparison_figure(rows)
    classifier, sequence = fig.data[2], fig.data[5]
    assert classifier.type == "bar" and list(classifier.y) == ["this input"] and len(rows[0].loss) == 1
    assert classifier.orientation == "h" and list(classifier.x) == list(rows[0].loss)
    assert sequence.type == "scatter" and sequence.fill == "tozeroy" and len(sequence.x) == len(rows[1].loss)
    np.testing.assert_allclose(np.asarray(sequence.y, dtype=float), np.nan_to_num(rows[1].loss))
    assert {classifier.marker.color, sequence.line.color} == {LOSS_COLOURS["train"]}


def test_values_along_the_input_are_lines_baselines_differ_and_interpolating_views_say_so():
    """'Along the input' was a 64 x 4 heatmap; three null baselines were one dotted black line each in
    one legend; contours drew shapes between unordered coordinates without a word; patch grids had no
    axis labels and counted from 0."""
    from damcha.analysis.inspection import sequence_profile
    from damcha.inputs.model_inputs import validation_input
    from damcha.runs.checkpoints import load_model, load_run
    from damcha.views import figures
    from damcha.views.model_figures import figure_set

    run = load_run(Path(__file__).resolve().parents[2] / "checkpoints" / "digits-damcha")
    inp = validation_input(run, 0)
    (profile,) = sequence_profile(load_model(run), inp.tokens)[:1]
    (item,) = figure_set(run, [run.epochs[-1]], inp.tokens, inp.targets, params={"structure": profile.name},
                         names=["sequence_profile"])
    values = profile.at(layer=0)  # (T, k)
    assert [t.type for t in item.figure.data] == ["scatter"] * values.shape[1]
    for j, trace in enumerate(item.figure.data):
        np.testing.assert_allclose(np.asarray(trace.y, dtype=float), values[:, j], rtol=1e-6)

    baselines = {"a": (0.5, "first"), "b": (1.4, "second"), "c": (0.75, "third")}
    fig = figures.statistic_curves_figure([0, 1], {k: [1.0, 2.0] for k in baselines}, baselines=baselines)
    lines = {(t.line.dash, t.line.color) for t in fig.data if t.name in ("first", "second", "third")}
    assert len(lines) == 3

    M = np.arange(16.0).reshape(4, 4) - 8
    assert figures.INTERPOLATION_NOTE in figures.contour_figure(M).layout.title.text
    assert figures.INTERPOLATION_NOTE not in (figures.matrix_figure(M, figures.MatrixStyle()).layout.title.text or "")

    grid = figures.grid_maps_figure(np.ones((2, 3, 4)), ["a", "b"])
    assert list(grid.data[0].x) == [1, 2, 3, 4] and list(grid.data[0].y) == [1, 2, 3]
    assert grid.layout.xaxis.title.text == "column" and grid.layout.yaxis.title.text == "row"
