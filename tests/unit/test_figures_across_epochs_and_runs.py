"""Named figures across a run's snapshots and of several runs: every entry of both tables is drawn,
exported with its provenance and rebuilt from it alone, and what it draws is what the model gives."""

import math
from pathlib import Path

import numpy as np
import pytest

from damcha.analysis.inspection import inspect_input
from damcha.evidence.view import EVIDENCE_FIGURES, regenerate
from damcha.inputs.model_inputs import validation_input
from damcha.runs.checkpoints import load_model, load_run
from damcha.views.epoch_figures import EPOCH_FIGURES, epoch_figure_item
from damcha.views.export import Provenance, figure_data
from damcha.views.model_figures import MODEL_FIGURES
from damcha.views.run_set_figures import RUN_SET_FIGURES, run_set_item, taken_from
from tests.support.every_figure import epoch_params, model_params, run_set_params, run_set_runs

SHIPPED = Path(__file__).resolve().parents[2] / "checkpoints"


def _run_and_input(name: str):
    run = load_run(SHIPPED / name)
    return run, validation_input(run, 3)


def _rebuilt_equal(item, root=None) -> None:
    """The item's provenance, through its JSON form, rebuilds the same figure data."""
    prov = Provenance.from_dict(item.provenance.to_dict())
    assert prov.regenerable
    again = regenerate(prov, root)
    assert again.provenance.figure == item.provenance.figure
    data, rebuilt = figure_data(item.figure), figure_data(again.figure)
    assert data and rebuilt.keys() == data.keys()
    for k, v in data.items():
        np.testing.assert_allclose(rebuilt[k], v, rtol=1e-6, atol=1e-9, err_msg=k)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(EPOCH_FIGURES))
def test_every_figure_across_epochs_is_rebuilt_from_its_provenance(name):
    run, inp = _run_and_input("digits-damcha")
    item = epoch_figure_item(name, run, inp.tokens, inp.targets, epoch_params(run), inp.source)
    _rebuilt_equal(item)


def test_the_animation_draws_each_snapshots_metric_and_the_statistics_losses_are_in_bits():
    run, inp = _run_and_input("digits-damcha")
    params = epoch_params(run)
    frames = epoch_figure_item("epoch_animation", run, inp.tokens, inp.targets, params).figure.frames
    assert [f.name for f in frames] == [str(e) for e in run.epochs]
    for frame, epoch in zip(frames, run.epochs):
        record = inspect_input(load_model(run, epoch), inp.tokens, inp.targets)
        expected = record.structure("metric").at(layer=0, position=record.position_index(40))
        np.testing.assert_allclose(np.asarray(frame.data[0].z, dtype=float), expected, rtol=1e-6, atol=1e-9)
    stats = epoch_figure_item("statistics", run, inp.tokens, inp.targets, params).figure
    train = next(t for t in stats.data if t.name == "train")
    logged = [m["train_nll"] / np.log(2) for m in run.metrics if m["epoch"] in run.epochs and m.get("train_nll") is not None]
    np.testing.assert_allclose([y for y in train.y if y is not None], logged, rtol=1e-9)


def test_the_difference_between_two_epochs_is_their_metrics_difference():
    run, inp = _run_and_input("digits-damcha")
    params = epoch_params(run)
    fig = epoch_figure_item("epoch_difference", run, inp.tokens, inp.targets, params).figure
    a, b = (inspect_input(load_model(run, e), inp.tokens, inp.targets) for e in (params["diff_from"], params["diff_to"]))
    at = {"layer": 0, "position": a.position_index(40)}
    np.testing.assert_allclose(np.asarray(fig.data[0].z, dtype=float),
                               b.structure("metric").at(**at) - a.structure("metric").at(**at), rtol=1e-6, atol=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(RUN_SET_FIGURES))
def test_every_figure_of_several_runs_is_rebuilt_from_its_provenance(name):
    runs = run_set_runs(name)
    inp = validation_input(runs[0], 3)
    params = run_set_params(runs)
    taken = taken_from(name, runs, [r.epochs[-1] for r in runs], inp.tokens, inp.targets, params)
    item = run_set_item(name, taken, inp.tokens, inp.targets, params, inp.source, root=SHIPPED)
    assert item.provenance.params["runs"] == [r.name for r in runs]  # named relative to the folder, as the app does
    _rebuilt_equal(item, SHIPPED)


def test_the_comparison_draws_each_runs_main_structure_and_a_missing_panel_run_is_refused():
    runs = run_set_runs("comparison")
    inp = validation_input(runs[0], 3)
    params = {"layer": 0, "head": 0, "position": 40}
    taken = taken_from("comparison", runs, [r.epochs[-1] for r in runs], inp.tokens, inp.targets, params)
    fig = run_set_item("comparison", taken, inp.tokens, inp.targets, params).figure
    for row, (_, _, record) in enumerate(taken):
        main = record.structures[0]
        drawn = np.asarray(fig.data[row * 3].z, dtype=float)
        expected = main.at(layer=0, position=record.position_index(40))
        np.testing.assert_allclose(drawn, expected[0] if expected.ndim == 3 else expected, rtol=1e-6, atol=1e-9)
    with pytest.raises(ValueError, match="no compared run"):
        run_set_item("comparison_panel", taken, inp.tokens, inp.targets, {**params, "panel_run": "nobody @0"})


def test_a_figure_name_in_no_table_is_refused_in_words():
    from damcha.views.epoch_figures import epoch_figure
    from damcha.views.run_set_figures import run_set_figure

    with pytest.raises(ValueError, match="unknown figure across epochs"):
        epoch_figure("nothing", None, {}, lambda s: None)
    with pytest.raises(ValueError, match="unknown figure of several runs"):
        run_set_figure("nothing", [(None, 0, None)], {})


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODEL_FIGURES))
def test_every_model_figure_that_applies_is_rebuilt_from_its_provenance(name):
    from damcha.views.model_figures import figure_set

    for run_name in ("digits-damcha", "images-damcha", "digits-mha"):
        run, inp = _run_and_input(run_name)
        record = inspect_input(load_model(run), inp.tokens, inp.targets)
        if MODEL_FIGURES[name].missing(record, run.model_config) is None:
            break
    else:
        pytest.fail(f"{name} applies to none of the shipped runs tried")
    params = model_params(name, run, record, inp)
    (item,) = figure_set(run, [run.epochs[-1]], inp.tokens, inp.targets, params=params, names=[name])
    _rebuilt_equal(item)


def test_losses_are_shown_in_the_runs_unit_and_tables_name_it():
    from damcha.views.display_units import LossUnit

    bits = LossUnit.of(load_run(SHIPPED / "digits-damcha").model_config)
    assert bits.label == "bits per pixel" and bits.text(np.log(2)) == "1.0000" and bits.text(None) == "—"
    assert bits.text(-np.log(2) / 2, signed=True) == "-0.5000"
    assert bits.rows([{"mode": "full", "loss": np.log(4)}], ("loss",)) == [{"mode": "full", "loss (bits per pixel)": 2.0}]
    squared = LossUnit.of(load_run(SHIPPED / "images-damcha").model_config)
    assert squared.factor == 1.0 and squared.value(0.25) == 0.25


@pytest.mark.parametrize("name", list(EVIDENCE_FIGURES))
def test_every_evidence_figure_is_rebuilt_from_its_provenance_and_draws_the_stored_intervals(name):
    from damcha.evidence.documents import load_results
    from damcha.evidence.view import evidence_item

    doc = load_results(SHIPPED / "evidence")
    claim = next(c for c in doc["claims"] if EVIDENCE_FIGURES[name].missing(c) is None)
    item = evidence_item(name, SHIPPED / "evidence", claim["key"], root=SHIPPED)
    assert item.provenance.params == {"claim": claim["key"], "results": "evidence"}  # no absolute path handed out
    _rebuilt_equal(item, SHIPPED)
    if name == "evidence_summary":  # in the unit drawn (an NLL stored in nats, drawn in bits)
        from damcha.evidence.view import shown_factor

        means = [float(m) for m in item.figure.data[0].y]
        np.testing.assert_allclose(means, [r["mean"] * shown_factor(claim["metric"]) for r in claim["summary"]])


def test_the_arm_table_has_every_arm_with_its_interval_cells_and_the_papers_number():
    from damcha.evidence.documents import load_results
    from damcha.evidence.view import arm_table, metric_label

    claim = load_results(SHIPPED / "evidence")["claims"][0]
    rows = arm_table(claim)
    assert [r["arm"] for r in rows] == [s["arm"] for s in claim["summary"]]
    first = claim["summary"][0]
    assert rows[0][metric_label(claim["metric"])].startswith(f"{first['mean'] / math.log(2):.4g} [")
    assert "val_nll (bits per token)" in rows[0]  # the first claim's NLL (stored in nats), in the app's unit


@pytest.mark.slow
def test_the_command_line_rebuilds_exports_of_several_runs_and_of_the_evidence_as_the_app_names_them(tmp_path):
    """Files the app hands out name runs and the evidence folder relative to the shipped folder; the
    command line finds them there and writes the same data."""
    import json
    import subprocess
    import sys

    from damcha.evidence.view import evidence_item
    from damcha.views.export import read_data_csv, write_item

    runs = run_set_runs("comparison")
    inp = validation_input(runs[0], 3)
    params = {"layer": 0, "head": 0, "position": 40}
    taken = taken_from("comparison", runs, [r.epochs[-1] for r in runs], inp.tokens, inp.targets, params)
    claim = load_results_claims()[0]
    items = [run_set_item("comparison", taken, inp.tokens, inp.targets, params, inp.source, root=SHIPPED),
             evidence_item("evidence_summary", SHIPPED / "evidence", claim["key"], root=SHIPPED)]
    for item in items:
        write_item(item, tmp_path / "app", ["csv"])
        again = tmp_path / f"again_{item.name}"
        result = subprocess.run([sys.executable, "-m", "damcha", "figures", "--from-provenance",
                                 str(tmp_path / "app" / f"{item.name}.provenance.json"), "--formats", "csv",
                                 "--out", str(again)], capture_output=True, text=True, cwd=SHIPPED.parent, timeout=300)
        assert result.returncode == 0, result.stderr
        assert json.loads((tmp_path / "app" / f"{item.name}.provenance.json").read_text())["regenerable"]
        first = read_data_csv((tmp_path / "app" / f"{item.name}.csv").read_bytes())
        (rebuilt,) = again.glob("*.csv")
        second = read_data_csv(rebuilt.read_bytes())
        assert first.keys() == second.keys()
        for k in first:
            np.testing.assert_allclose(second[k], first[k], rtol=1e-6)


def load_results_claims() -> list[dict]:
    from damcha.evidence.documents import load_results

    return load_results(SHIPPED / "evidence")["claims"]


def test_the_per_input_loss_scatter_draws_each_validation_inputs_loss_in_bits_under_both_runs():
    from damcha.analysis.interventions import batch_losses
    from damcha.inputs.model_inputs import validation_arrays

    runs = run_set_runs("comparison")
    inp = validation_input(runs[0], 0)
    taken = taken_from("losses_against", runs, [r.epochs[-1] for r in runs], inp.tokens, inp.targets, {"inputs": 32})
    fig = run_set_item("losses_against", taken, inp.tokens, inp.targets, {"inputs": 32}).figure
    x, y, _ = validation_arrays(runs[0])
    for axis, run in zip((fig.data[0].x, fig.data[0].y), runs):
        np.testing.assert_allclose(axis, batch_losses(load_model(run), x[:32], y[:32]) / np.log(2), rtol=1e-6)
    assert "bits per pixel" in fig.layout.xaxis.title.text
    with pytest.raises(ValueError, match="compares two runs"):
        run_set_item("losses_against", taken[:1], inp.tokens, inp.targets, {})
