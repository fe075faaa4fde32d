"""A synthetic configuration's tuning extends its learning rates along the ladder while the choice is an edge
(issue 63), and a tuning unit stopped between its fits resumes from them to exactly what a fresh unit computes."""

import math

import pytest

from damcha.evidence import tuning
from damcha.evidence.synthetic_fits import FitRecord, stored_value, tuning_value
from damcha.inputs import synthetic
from damcha.inputs.synthetic import RateFit, train_synthetic

STEPS = 20
TWO_RATES = (3e-3, 1e-2)


@pytest.fixture
def counted_fits(monkeypatch):
    rates = []
    real = synthetic.fit

    def counting(model_name, task, seed, steps, lr, batch=64):
        rates.append(lr)
        return real(model_name, task, seed, steps, lr, batch)
    monkeypatch.setattr(synthetic, "fit", counting)
    return rates


def test_the_choice_goes_along_the_ladder_until_it_lies_inside_the_rates_tried_and_a_stopped_unit_resumes_to_exactly_the_fresh_value(tmp_path, counted_fits):
    fresh = train_synthetic("mha", "regression", 0.5, 1, STEPS, lrs=TWO_RATES, beyond=tuning.beyond)
    tried = sorted(fresh.validation)
    assert len(tried) > 2 and set(TWO_RATES) <= set(tried) and set(tried) <= set(tuning.LADDER)
    assert tried[0] < fresh.lr < tried[-1] or fresh.lr in (tuning.LADDER[0], tuning.LADDER[-1])
    assert fresh.lr == min(fresh.validation, key=fresh.validation.get)  # the lowest validation error is tested
    assert sorted(counted_fits) == tried  # every rate fitted once, the tested one not again
    counted_fits.clear()
    record = FitRecord(tmp_path, "stopped")
    first = train_synthetic("mha", "regression", 0.5, 1, STEPS, lrs=TWO_RATES, on_fit=record.write)  # stopped there
    assert set(record.read()) == set(TWO_RATES) and first.lr in TWO_RATES
    counted_fits.clear()
    resumed = train_synthetic("mha", "regression", 0.5, 1, STEPS, lrs=TWO_RATES, beyond=tuning.beyond,
                              known=record.read(), on_fit=record.write)
    assert resumed == fresh  # to the last bit: score, parameters, rate and every validation score
    assert set(counted_fits) == set(tried) - set(TWO_RATES) | ({fresh.lr} & set(TWO_RATES) - {first.lr})
    assert set(record.read()) == set(fresh.validation) and record.read()[fresh.lr].test == fresh.score
    assert tuning_value(resumed) == {"lr": fresh.lr, **{k: v for k, v in stored_value(fresh).items() if k.startswith("validation_")}}


def test_a_record_is_the_units_own_and_a_foreign_or_broken_file_is_fitted_afresh(tmp_path):
    record = FitRecord(tmp_path, "unit a")
    record.write(3e-3, RateFit(0.5, 0.4, 10))
    assert record.read() == {3e-3: RateFit(0.5, 0.4, 10)} and FitRecord(tmp_path, "unit b").read() == {}
    record.path.write_text("{not json")
    assert record.read() == {}


def test_a_diverged_fit_is_never_chosen(monkeypatch):
    real = synthetic.evaluate
    monkeypatch.setattr(synthetic, "evaluate", lambda model, task, x, y: math.nan if model.diverged else real(model, task, x, y))
    real_fit = synthetic.fit

    def fit(model_name, task, seed, steps, lr, batch=64):
        model = real_fit(model_name, task, seed, steps, lr, batch)
        model.diverged = lr == TWO_RATES[0]
        return model
    monkeypatch.setattr(synthetic, "fit", fit)
    result = train_synthetic("mha", "regression", 0.5, 0, 2, lrs=TWO_RATES)
    assert result.lr == TWO_RATES[1] and math.isnan(result.validation[TWO_RATES[0]])
