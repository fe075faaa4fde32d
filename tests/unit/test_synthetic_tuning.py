"""A synthetic arm's rate is tuned per configuration (model, task, level) on the tuning seed before its reported
seeds train once at it (issue 63: the per-unit choice cost a fresh run its budget)."""

import dataclasses

from damcha.evidence import tuning
from damcha.evidence.runner import evidence_claims, reusable_tuning
from damcha.evidence.setting import DEMO
from damcha.evidence.synthetic_fits import tuning_value_of_row
from damcha.evidence.units import run_unit
from damcha.inputs import synthetic
from damcha.inputs.synthetic import TEST_INPUT_SEED, VALIDATION_INPUT_SEED, make_task


def _claims(quick=True):
    return [c for c in evidence_claims(quick) if c.key == "within_slice_codes"]


def test_the_tuning_seed_chooses_on_its_validation_set_and_a_reported_seed_trains_once_at_that_rate(tmp_path):
    claims = _claims()
    config, arm = next((c, a) for c, a in tuning.synthetic_tuning_arms(claims).items() if c.variant == "mha")
    seed = tuning.synthetic_tuning_seed(True)
    assert arm.tuning and seed not in range(16)  # apart from the reported seeds
    value = run_unit(arm, seed, True, tmp_path)
    steps = 20  # a quick run's synthetic steps
    teacher = make_task(config.task, config.level, seed)
    x_val, y_val = teacher.sample(128, VALIDATION_INPUT_SEED)
    validation = {lr: synthetic.evaluate(synthetic.fit(config.variant, teacher, seed, steps, lr), teacher, x_val, y_val)
                  for lr in config.lrs}  # recomputed: every rate of the grid on the tuning seed
    assert value == {"lr": min(validation, key=validation.get),
                     **{f"validation_relative_mse_lr={lr:g}": v for lr, v in validation.items()}}

    table = tuning.tuning_table(claims, True, {arm.unit(seed, True): value})
    row = next(r for r in table if r["run"] == tuning.describe(config))
    assert row["chosen"] == value["lr"] and row["seeds"] == [seed] and tuning_value_of_row(row) == value
    reported = next(a for c in tuning.tuned(claims, table) for a in c.arms
                    if a.kind == "synthetic" and tuning.configuration(a) == config)
    assert reported.lr == value["lr"]
    untuned = next(a for c in tuning.tuned(claims, []) for a in c.arms if a.name == reported.name)
    assert untuned.lr == 0.0 and untuned.lrs == ()  # no row: the default rate, said by its empty grid

    result = run_unit(reported, 1, True, tmp_path)
    teacher = make_task(config.task, config.level, 1)
    x, y = teacher.sample(128, TEST_INPUT_SEED)
    model = synthetic.fit(config.variant, teacher, 1, steps, value["lr"])
    assert result["relative_mse"] == synthetic.evaluate(model, teacher, x, y)  # one fit at the tuned rate
    assert result["lr"] == value["lr"] and result["parameters"] == sum(p.numel() for p in model.parameters())
    assert not any(k.startswith("validation_") for k in result)  # the choice lives in the tuning row


def test_synthetic_tuning_rows_are_taken_over_from_an_earlier_document_unless_redone():
    claims = _claims()
    seed = tuning.synthetic_tuning_seed(True)
    done = {arm.unit(seed, True): {"lr": config.lrs[0], **{f"validation_relative_mse_lr={lr:g}": lr for lr in config.lrs}}
            for config, arm in tuning.synthetic_tuning_arms(claims).items()}
    previous = {"quick": True, "tuning": tuning.tuning_table(claims, True, done)}
    assert reusable_tuning(previous, True, (), DEMO, claims) == done
    kept = reusable_tuning(previous, True, ("mha",), DEMO, claims)
    mha = sum(c.variant == "mha" for c in tuning.synthetic_tuning_arms(claims))
    assert mha and len(kept) == len(done) - mha and all('"mha"' not in u for u in kept)
    assert reusable_tuning(previous, True, ("within_slice_codes",), DEMO, claims) == {}
    other_grid = [dict(r, configuration=dataclasses.replace(tuning.configuration(
        next(a for c in claims for a in c.arms if a.kind == "synthetic")), lrs=(1.0,)).spec()) for r in previous["tuning"]]
    assert reusable_tuning({**previous, "tuning": other_grid}, True, (), DEMO, claims) == {}
