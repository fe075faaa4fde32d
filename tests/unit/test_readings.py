"""What pages say in words about computed numbers (damcha/views/readings.py, display_units.py): the
sentences carry the numbers the analysis gives, in the page's unit."""

import re
from pathlib import Path

import numpy as np
import pytest

from damcha.analysis.inspection import inspect_input
from damcha.analysis.interventions import ResidueCheck
from damcha.inputs.model_inputs import validation_input
from damcha.runs.checkpoints import load_model, load_run
from damcha.views.display_units import residue_check_sentence
from damcha.views.readings import decomposition_readings, generator_drift_sentence, off_diagonal_baseline

SHIPPED = Path(__file__).resolve().parents[2] / "checkpoints"


def _record(name: str):
    run = load_run(SHIPPED / name)
    inp = validation_input(run, 1)
    return run, inspect_input(load_model(run), inp.tokens, inp.targets)


@pytest.mark.parametrize("name", ["digits-damcha", "digits-damcha-bilinear"])
def test_the_decomposition_shares_add_to_the_whole_and_the_reading_names_the_score_form(name):
    run, record = _record(name)
    lines = decomposition_readings(record, 0, 40)
    shares = [float(v) / 100 for v in re.findall(r"\*\*([0-9.]+)%\*\*", lines[0])]
    assert len(shares) == 2 and sum(shares) == pytest.approx(1.0, abs=2e-3)  # orthogonal parts, rounded to 0.1%
    share, said = off_diagonal_baseline(record)
    assert share == pytest.approx((record.n_head - 1) / record.n_head)
    assert ("equal blocks" in said) == (run.model_config.setting("score_form") == "bilinear")


def test_the_residue_check_states_the_loss_change_in_the_runs_unit():
    run, _ = _record("digits-damcha")
    sentence = residue_check_sentence(ResidueCheck(1e-7, np.log(2) / 100, False, "row sum", 12.0), run.model_config)
    assert "loss change +0.01 bits per pixel" in sentence and "unchanged up to float rounding" in sentence
    bilinear = residue_check_sentence(ResidueCheck(0.3, 0.0, True, "bilinear"), run.model_config)
    assert "each block row's mean m_i / H" in bilinear and "which this form learns" in bilinear
    assert "learned part" not in bilinear and "residue" not in bilinear  # under the bilinear form every block is learned
    images = load_run(Path(__file__).resolve().parents[2] / "checkpoints" / "images-damcha").model_config
    assert "largest predicted-vector entry change" in residue_check_sentence(ResidueCheck(0.1, 0.0, False, "row sum"), images)
    assert "largest logit change 2.38e-06" in residue_check_sentence(ResidueCheck(2.38e-6, 0.0, False, "row sum"),
                                                                     run.model_config)  # not rounded to "0"
    # within float32 rounding of logits of this size, the bound is said, the same whichever order computed it
    small = residue_check_sentence(ResidueCheck(2.38e-6, 0.0, False, "row sum", 20.0), run.model_config)
    assert "largest logit change below float32 rounding (< 4e-05)" in small and "unchanged up to float rounding" in small


def test_the_generator_drift_sentence_lists_each_epoch_and_says_what_the_row_sum_trains():
    _, record = _record("digits-damcha")
    sentence = generator_drift_sentence({"row_mean": [0.0, 0.5], "residual": [0.0, 1e-9]}, [0, 40], record)
    assert "0: **0**, 40: **0.5**" in sentence and "40: **1e-09**" in sentence and "never trained" in sentence
    alone = generator_drift_sentence({"row_mean": [0.0], "residual": [0.0]}, [40], record)
    assert "one snapshot (epoch 40): there is nothing to compare" in alone and "never trained" not in alone
    later = generator_drift_sentence({"row_mean": [0.0, 0.5], "residual": [0.0, 1e-9]}, [10, 40], record)
    assert "relative distance from epoch 10" in later  # from the first snapshot there is, named


def test_the_unit_check_of_the_page_walks_catches_a_loss_without_its_unit_and_one_in_nats():
    from tests.support.units import losses_without_unit

    assert losses_without_unit(["loss (nats)", "loss", "Δ loss (bits per pixel)", "epoch", "loss (squared error per patch)",
                                "validation nll"]) == ["loss (nats)", "loss", "validation nll"]
