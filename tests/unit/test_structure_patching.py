"""Patching a mechanism's own structure from another input, for every registered variant: the patched
run's structures are the other input's (checked against that input's own record), patching from the
same input changes nothing, DAMCHA's equals its metric-swap intervention, and a mechanism without a
per-input structure says so. Hooks never outlive a call."""

import numpy as np
import pytest
import torch

from damcha.analysis.attribution import has_hooks
from damcha.analysis.inspection import inspect_input
from damcha.analysis.structure_patching import (
    recorded_outputs,
    replaced_outputs,
    structure_patching,
    structure_site_note,
    structure_sites,
)
from tests.support.guide_examples import examples_registered, walked_variants
from tests.support.models import tiny_model

pytestmark = pytest.mark.usefixtures("guide_examples")  # the guide's mechanism walked too

with examples_registered():
    WITH_STRUCTURE = [v for v in walked_variants() if structure_sites(tiny_model(v))]


def inputs(seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 11, (12,), generator=g)
    return x.numpy(), torch.roll(x, -1).numpy()


def trained_like(variant: str):
    """A tiny model with every weight moved off its initialisation: DCMHA's dynamic weights and MoA's
    router start at zero, where another input's structure is the same as this one's."""
    model = tiny_model(variant)
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    return model


def test_the_mechanisms_with_a_per_input_structure_include_the_papers_and_exclude_mha():
    assert {"damcha", "dcmha", "moa"} <= set(WITH_STRUCTURE)
    assert "mha" not in WITH_STRUCTURE and "damcha-static" not in WITH_STRUCTURE


@pytest.mark.parametrize("variant", walked_variants())
def test_the_patched_structures_are_the_other_inputs(variant):
    model = trained_like(variant)
    (x, y), (other, other_y) = inputs(0), inputs(1)
    sites = structure_sites(model)
    if not sites:
        assert structure_site_note(model.config)
        with pytest.raises(ValueError, match="nothing to patch"):
            structure_patching(model, x, y, other)
        return
    assert structure_site_note(model.config) is None
    modules = [m for site in sites.values() for m in site]
    with torch.no_grad(), recorded_outputs(modules) as seen:
        model(torch.as_tensor(other)[None], need_intermediates=True, stochastic=False)
    outputs = [seen[i] for i in range(len(modules))]
    with replaced_outputs(modules, outputs):
        patched = inspect_input(model, x, y)
    assert not has_hooks(model)
    theirs, own = inspect_input(model, other, other_y), inspect_input(model, x, y)
    assert patched.structures and [s.name for s in patched.structures] == [s.name for s in theirs.structures]
    moved = False
    for p, t, o in zip(patched.structures, theirs.structures, own.structures):
        np.testing.assert_allclose(p.values, t.values, atol=1e-10, err_msg=p.name)
        moved |= not np.allclose(o.values, t.values, atol=1e-6)
    assert moved, "the two inputs' structures differ, so the test could fail"
    same = structure_patching(model, x, y, x)
    np.testing.assert_allclose([*same.changes, same.all_sites], 0, atol=1e-12)
    changed = structure_patching(model, x, y, other)
    assert changed.sites == tuple(sites) and abs(changed.all_sites) > 1e-8
    assert not has_hooks(model)


@pytest.mark.parametrize("variant", [v for v in WITH_STRUCTURE if v.startswith("damcha")])
def test_patching_damchas_metric_is_its_metric_swap(variant):
    from damcha.analysis.interventions import metric_swap
    from damcha.model.mechanisms.damcha.interventions import input_metric

    model = trained_like(variant)
    (x, y), (other, _) = inputs(0), inputs(1)
    patch = structure_patching(model, x, y, other)
    swap = metric_swap(model, x, y, input_metric(model, other))
    assert patch.base + patch.all_sites == pytest.approx(swap.loss, abs=1e-10)


def test_a_causal_models_longer_input_gives_its_first_positions_and_other_lengths_are_refused():
    model = trained_like("dcmha")
    (x, y), (other, _) = inputs(0), inputs(1)
    longer = np.concatenate([other, other[:3]])
    cut, same_length = structure_patching(model, x, y, longer), structure_patching(model, x, y, other)
    np.testing.assert_allclose([*cut.changes, cut.all_sites], [*same_length.changes, same_length.all_sites], atol=1e-12)
    with pytest.raises(ValueError, match="one length"):
        structure_patching(model, x, y, x[:8])
    encoder = tiny_model("dcmha", causal=False)
    with pytest.raises(ValueError, match="not causal"):
        structure_patching(encoder, x, np.array([1]), longer)
