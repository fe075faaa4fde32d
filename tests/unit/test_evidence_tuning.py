"""The real-data arms' learning rates: tuned on a hold-out of the training data, one rule for every arm."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from damcha.evidence import tuning
from damcha.evidence.records import Arm, Claim
from damcha.evidence.runner import evidence_claims, reusable_tuning, same_arm
from damcha.evidence.setting import DEMO
from damcha.inputs.datasets import load_dataset
from damcha.inputs.datasets.base import DataSet
from damcha.runs.train import TrainConfig


def test_the_tuning_hold_out_is_a_part_of_the_training_data_and_never_the_reported_splits():
    data = load_dataset("digits")
    held = data.held_out_for_tuning(0.15)
    n = len(data.train_inputs)
    assert len(held.val_inputs) == int(n * 0.15) and len(held.train_inputs) + len(held.val_inputs) == n
    rows = {tuple(r.tolist()) for r in data.train_inputs}
    assert {tuple(r.tolist()) for r in held.val_inputs} <= rows and {tuple(r.tolist()) for r in held.train_inputs} <= rows
    assert not {tuple(r.tolist()) for r in held.val_inputs} & {tuple(r.tolist()) for r in held.train_inputs}
    assert held.test_inputs is None and held.split["tuning_holdout"] == 0.15
    assert torch.equal(data.held_out_for_tuning(0.15).val_inputs, held.val_inputs)  # the same part every time
    stream = DataSet("s", "next_token", 256, 8, train_stream=torch.arange(100) % 256, val_stream=torch.zeros(50))
    cut = stream.held_out_for_tuning(0.2)
    assert torch.equal(cut.train_stream, torch.arange(80)) and torch.equal(cut.val_stream, torch.arange(80, 100))
    with pytest.raises(ValueError):
        data.held_out_for_tuning(1.0)
    with pytest.raises(ValueError):
        TrainConfig(tuning_holdout=1.0)


@pytest.mark.parametrize("quick", [False, True])
def test_every_arm_that_trains_on_a_data_set_gets_the_same_grid_and_fits(quick):
    claims = evidence_claims(quick)
    arms = [a for c in claims for a in c.arms]
    assert all(a.lrs == tuning.grid(quick) for a in arms if a.trains) and any(a.trains for a in arms)
    assert all(not a.lrs or a.kind == "synthetic" for a in arms if not a.trains)  # synthetic grids are their own
    fits = tuning.tuning_arms(claims)
    assert {tuning.configuration(a) for a in arms if a.trains} == set(fits)
    assert all(set(rates) == set(tuning.grid(quick)) for rates in fits.values())
    synthetic = tuning.synthetic_tuning_arms(claims)  # one ladder unit per synthetic model, task and level
    assert set(synthetic) == {tuning.configuration(a) for a in arms if a.kind == "synthetic" and a.lrs}
    first = tuning.tuning_units(claims, quick)  # nothing done: the first tuning seed at every rate
    assert len(first) == len(fits) * len(tuning.grid(quick)) + len(synthetic)
    done = {u: {"tuning_loss": arm.lr} for u, (arm, _) in first.items()}  # every first fit done
    everything = tuning.tuning_units(claims, quick, done)
    assert len(everything) == len(fits) * tuning.fits_per_configuration(quick) + len(synthetic)  # the same for each
    assert not set(tuning.tuning_seeds(quick)) & set(range(16))  # apart from the reported seeds
    if not quick:
        assert set(tuning.GRID) >= {1e-3, 3e-3, 1e-2}


def test_the_lowest_mean_hold_out_loss_chooses_the_rate_and_each_arm_trains_at_its_configurations():
    claims = [c for c in evidence_claims(True) if c.key == "table5_text"]
    fits = tuning.tuning_arms(claims)
    damcha, mha = (next(c for c in fits if c.variant == v and not c.overrides) for v in ("damcha", "mha"))
    losses = {damcha: {1e-3: 1.0, 3e-3: 2.0}, mha: {1e-3: 2.0, 3e-3: 2.0}}  # mha: a tie, the lower rate
    done = {arm.unit(s, True): {"tuning_loss": losses[config][lr]}
            for config in losses for lr, arm in fits[config].items() for s in tuning.tuning_seeds(True)}
    table = tuning.tuning_table(claims, True, done)
    assert {r["run"]: r["chosen"] for r in table} == {"damcha on text": 1e-3, "mha on text": 1e-3}  # the third: not done
    arms = {a.name: a for a in tuning.tuned(claims, table)[0].arms}
    assert arms["damcha"].lr == 1e-3 and arms["mha"].lr == 1e-3
    matched = next(a for a in arms.values() if a.overrides)
    assert matched.lr == 0.0 and matched.lrs == ()  # no chosen rate: untuned, at the default
    assert arms["damcha"].run_name(0, True) != dataclasses.replace(arms["damcha"], lr=3e-3).run_name(0, True)
    fit = fits[damcha][1e-3]
    assert fit.tuning and fit.run_name(1000, True).endswith("-tuning-quick-seed1000")


def test_an_arm_trained_at_the_default_rate_before_tuning_is_the_tuned_arm_at_that_rate():
    """Results stored before the tuning (nine fields, no rate) are taken over where the chosen rate is the
    default they trained at; a synthetic arm's grid still makes it another arm."""
    tuned = Arm("damcha", lrs=tuning.GRID, lr=TrainConfig.lr)
    before = json.loads(json.dumps(dataclasses.astuple(Arm("damcha"))))[:9]
    assert same_arm(tuned, before) and not same_arm(dataclasses.replace(tuned, lr=1e-3), before)
    assert not same_arm(dataclasses.replace(tuned, tuning=True), before)
    synthetic = Arm("mha e=0", kind="synthetic", variant="mha", task="regression", lrs=(3e-3, 1e-2))
    assert not same_arm(synthetic, dataclasses.replace(synthetic, lrs=()).spec())
    tuned_synthetic = dataclasses.replace(synthetic, lr=1e-2)  # a synthetic arm is measured by its rate, as a run is
    assert same_arm(tuned_synthetic, dataclasses.replace(tuned_synthetic, lrs=(1e-2, 3e-2)).spec())
    assert not same_arm(tuned_synthetic, synthetic.spec())  # an older unit that chose its own rate is another arm


def test_tuning_fits_are_taken_over_from_an_earlier_document_unless_redone():
    claims = [c for c in evidence_claims(True) if c.key == "table5_text"]
    fits = tuning.tuning_arms(claims)
    done = {arm.unit(s, True): {"tuning_loss": lr} for rates in fits.values() for lr, arm in rates.items()
            for s in tuning.tuning_seeds(True)}
    previous = {"quick": True, "tuning": tuning.tuning_table(claims, True, done)}
    assert reusable_tuning(previous, True, (), DEMO, claims).keys() == done.keys()
    kept = reusable_tuning(previous, True, ("mha",), DEMO, claims)
    assert {json.loads(u)[0][2] for u in kept} == {"damcha"}
    assert not reusable_tuning({**previous, "quick": False}, True, (), DEMO, claims)
    two_seeds = [{**row, "seeds": [1000, 1001], "losses": {lr: [*v, 9.0] for lr, v in row["losses"].items()}}
                 for row in previous["tuning"]]  # a document tuned on two seeds: only the seed tuned on now
    assert reusable_tuning({**previous, "tuning": two_seeds}, True, (), DEMO, claims) == \
        reusable_tuning(previous, True, (), DEMO, claims)


def test_a_rate_chosen_at_the_grids_edge_is_named_as_possibly_under_tuned():
    from damcha.evidence.view import grid_edge_warning

    def row(run, losses):
        return {"run": run, "losses": {f"{lr:g}": [v] for lr, v in losses.items()},
                "chosen": min(losses, key=losses.get)}
    inside = row("damcha on digits", {1e-3: 1.5, 3e-3: 1.4, 1e-2: 1.6})
    assert grid_edge_warning({"tuning": [inside]}) is None and grid_edge_warning({}) is None
    top, bottom = row("mha on text", {1e-3: 2.0, 3e-3: 1.9, 1e-2: 1.8}), row("moa on digits", {1e-3: 1.3, 3e-3: 1.4, 1e-2: 1.5})
    said = grid_edge_warning({"tuning": [inside, top, bottom]})
    assert said.startswith("2 of 3 tuned configurations") and "the top rate: mha on text (0.01)" in said
    assert "the bottom rate: moa on digits (0.001)" in said and "damcha on digits" not in said


def test_later_tuning_seeds_fit_the_best_rates_so_far_and_the_lower_mean_of_those_chooses():
    claims = [c for c in evidence_claims(False) if c.key == "table5_text"]
    rates = next(r for c, r in tuning.tuning_arms(claims).items() if c.variant == "damcha" and not c.overrides)
    first = {1e-3: 1.0, 3e-3: 1.1, 1e-2: 1.5}  # seed 1000: 1e-2 is dropped
    done = {rates[lr].unit(1000, False): {"tuning_loss": v} for lr, v in first.items()}
    needed = {(arm.lr, seed) for arm, seed in tuning.tuning_units(claims, False, done).values() if arm.variant == "damcha"
              and not arm.overrides}
    assert needed == {(1e-3, 1000), (3e-3, 1000), (1e-2, 1000), (1e-3, 1001), (3e-3, 1001)}
    assert not [r for r in tuning.tuning_table(claims, False, done) if r["run"] == "damcha on text"]  # not yet
    done |= {rates[1e-3].unit(1001, False): {"tuning_loss": 1.4}, rates[3e-3].unit(1001, False): {"tuning_loss": 1.0}}
    row = next(r for r in tuning.tuning_table(claims, False, done) if r["run"] == "damcha on text")
    assert row["chosen"] == 3e-3  # means 1.2 and 1.05: the second seed overturned the first
    assert row["losses"] == {"0.001": [1.0, 1.4], "0.003": [1.1, 1.0], "0.01": [1.5]}


def _fit_losses(claims, losses_at, quick=False):
    """Every fit the tuning asks for, done with the loss `losses_at(rate, seed)`, until it asks for no more."""
    done: dict[str, dict] = {}
    while True:
        new = {u: (arm, seed) for u, (arm, seed) in tuning.tuning_units(claims, quick, done).items() if u not in done}
        if not new:
            return done
        done |= {u: {"tuning_loss": losses_at(arm.lr, seed), "lr": arm.lr} for u, (arm, seed) in new.items()}


@pytest.mark.parametrize("best, chosen, tried", [
    (0.03, 0.03, {1e-3, 3e-3, 1e-2, 3e-2, 1e-1}),  # past the grid's top: 1e-1 is tried, 3e-2 is inside
    (1.0, 0.1, {1e-3, 3e-3, 1e-2, 3e-2, 1e-1}),  # still falling at 1e-1: the ladder's end, a stated bound
    (3e-4, 3e-4, {1e-4, 3e-4, 1e-3, 3e-3, 1e-2}),  # past the bottom
    (3e-3, 3e-3, {1e-3, 3e-3, 1e-2}),  # inside the grid: no fit beyond it
])
def test_a_choice_at_the_edge_of_the_rates_tried_fits_the_next_rate_beyond_until_it_lies_inside(best, chosen, tried):
    import math

    from damcha.evidence.view import grid_edge_warning

    claims = [c for c in evidence_claims(False) if c.key == "table5_text"]
    done = _fit_losses(claims, lambda lr, seed: abs(math.log(lr / best)) + seed * 1e-6)
    row = next(r for r in tuning.tuning_table(claims, False, done) if r["run"] == "damcha on text")
    assert row["chosen"] == chosen and {float(lr) for lr in row["losses"]} == tried
    beyond = {float(lr) for lr in row["losses"]} - set(tuning.GRID)
    assert all(len(row["losses"][f"{lr:g}"]) == len(tuning.TUNING_SEEDS) for lr in beyond)  # on every tuning seed
    said = grid_edge_warning({"tuning": [row]})
    if chosen == 0.1:
        assert said.startswith("1 of 1 tuned configurations chose a bound of the tuning ladder") and "under-tuned" not in said
    else:
        assert said is None  # inside the rates tried
    previous = {"quick": False, "tuning": tuning.tuning_table(claims, False, done)}
    taken = reusable_tuning(previous, False, (), DEMO, claims)
    assert len(taken) == len(done) and not tuning.tuning_units(claims, False, taken).keys() - taken.keys()


def test_a_quick_run_keeps_its_two_rate_grid():
    claims = [c for c in evidence_claims(True) if c.key == "table5_text"]
    done = _fit_losses(claims, lambda lr, seed: -lr, quick=True)  # the highest rate is best
    assert {arm.lr for arm, _ in tuning.tuning_units(claims, True, done).values()} == set(tuning.QUICK_GRID)


def test_a_units_key_leaves_out_fields_appended_since_at_their_defaults():
    """A work folder written before `train_overrides` existed keeps its units (their keys are unchanged)."""
    import json

    from damcha.evidence.records import KEYED_FIELDS

    before = json.dumps([["mha", "train", "mha", "digits", [], "full", "", 0.0, [], 0.003, False], 2, False])
    assert Arm("mha", variant="mha", lr=0.003).unit(2, False) == before
    longer = Arm("mha", variant="mha", lr=0.003, train_overrides=(("epochs", 26),))
    assert longer.unit(2, False) != before and json.loads(longer.unit(2, False))[0][KEYED_FIELDS:] == [[["epochs", 26]]]


def test_a_rate_chosen_in_a_document_stored_before_fields_were_appended_still_applies():
    """A tuning row stores its configuration's fields as they were; one stored before `train_overrides`
    existed must still give its arm the chosen rate, never the default (a silent retraining at 3e-3)."""
    from damcha.evidence.records import KEYED_FIELDS

    arm = Arm("w/o f(x)", variant="damcha-static", lrs=tuning.GRID)
    stored = tuning.configuration(arm).spec()[:KEYED_FIELDS]
    [at_rate] = tuning.tuned([Claim("k", "t", "s", "val_nll", True, (arm,), arm.name)],
                             [{"configuration": stored, "chosen": 0.01}])[0].arms
    assert at_rate.lr == 0.01 and at_rate.lrs == tuning.GRID
