"""Each intervention against a direct evaluation written here; the shared model is untouched afterwards."""

import copy

import numpy as np
import pytest
import torch

from damcha import DamchaOptions
from damcha.analysis.attribution import has_hooks
from damcha.analysis.interventions import (
    adaptivity_gap,
    available_interventions,
    batch_losses,
    block_grid,
    block_scale_matrix,
    evaluate,
    input_metric,
    interpolation_curve,
    intervention_options,
    mean_metric,
    residue_check,
    validation_effects,
)
from damcha.model.mechanisms import LayerCall
from damcha.model.mechanisms.damcha.layer import metric_sources
from damcha.model.transformer import build_model
from tests.support.layers import config, perturbed
from tests.support.models import tiny_model

TOKENS = [1, 5, 2, 7, 3, 3, 0, 9]
TARGETS = [5, 2, 7, 3, 3, 0, 9, 4]


def logits(model, tokens=TOKENS, options=None):
    with torch.no_grad():
        return model(torch.tensor([tokens]), options=options, stochastic=False).logits


@pytest.mark.parametrize("variant", ["damcha", "damcha-unshared", "damcha-bilinear"])
def test_zeroing_a_block_equals_a_generator_whose_rows_for_it_are_zero(variant):
    model = tiny_model(variant)
    H, d, D = 4, 4, 16
    i, j = 2, 1
    twin = copy.deepcopy(model)
    with torch.no_grad():
        for src in metric_sources(twin):
            rows = torch.tensor([(i * d + p) * D + j * d + q for p in range(d) for q in range(d)])
            src.generator.out.weight[rows] = 0  # the entries of f's output that form block M_ij
            src.generator.out.bias[rows] = 0
    zeroed = DamchaOptions(block_scales=block_scale_matrix(H, zero=(i, j)))
    assert torch.allclose(logits(model, options=zeroed), logits(twin, options=DamchaOptions(explicit=True)), atol=1e-10)
    assert not torch.allclose(logits(model, options=zeroed), logits(model), atol=1e-6)


def test_swapping_the_metric_with_itself_and_alpha_one_change_nothing():
    model = tiny_model("damcha-unshared")
    own = input_metric(model, TOKENS)  # (L_m, T, D, D)
    assert own.shape == (2, len(TOKENS), 16, 16)
    plain = logits(model)
    assert torch.allclose(logits(model, options=DamchaOptions(reference=own, alpha=0.0)), plain, atol=1e-10)
    other = input_metric(model, [4] * len(TOKENS))
    assert torch.allclose(logits(model, options=DamchaOptions(reference=other, alpha=1.0)), plain, atol=1e-10)
    assert not torch.allclose(logits(model, options=DamchaOptions(reference=other, alpha=0.0)), plain, atol=1e-6)
    curve = interpolation_curve(model, TOKENS, TARGETS, other, alphas=(0.0, 1.0))
    assert curve[1] == pytest.approx(evaluate(model, TOKENS, TARGETS).loss, abs=1e-10)
    assert curve[0] == pytest.approx(evaluate(model, TOKENS, TARGETS,
                                              DamchaOptions(reference=other, alpha=0.0)).loss, abs=1e-12)


def test_drop_residue_keeps_row_sum_outputs_and_changes_bilinear_ones():
    row_sum = residue_check(tiny_model("damcha"), TOKENS, TARGETS)
    assert row_sum.max_logit_change < 1e-10
    bilinear = residue_check(tiny_model("damcha-bilinear"), TOKENS, TARGETS)
    assert bilinear.max_logit_change > 1e-4


def test_an_ablated_head_attends_uniformly_over_its_allowed_keys():
    model = tiny_model("damcha")
    options = DamchaOptions(block_scales=block_scale_matrix(4, head=2))
    with torch.no_grad():
        out = model(torch.tensor([TOKENS]), options=options, need_intermediates=True, stochastic=False)
    T = len(TOKENS)
    uniform = torch.tril(torch.ones(T, T, dtype=torch.float64)) / torch.arange(1, T + 1, dtype=torch.float64)[:, None]
    for layer in out.layers:
        assert torch.allclose(layer.weights[0, 2], uniform, atol=1e-12)
        assert not torch.allclose(layer.weights[0, 1], uniform, atol=1e-3)


def test_mean_metric_and_adaptivity_gap_against_direct_computations():
    model = tiny_model("damcha")
    gen = torch.Generator().manual_seed(3)
    inputs = torch.randint(0, 11, (6, 8), generator=gen).numpy()
    targets = torch.randint(0, 11, (6, 8), generator=gen).numpy()
    mbar = mean_metric(model, inputs, batch_size=4)
    direct = torch.stack([input_metric(model, x) for x in inputs]).mean(0)
    assert torch.allclose(mbar, direct, atol=1e-12)
    gap = adaptivity_gap(model, inputs, targets, mbar)
    for k in range(6):
        with_mean = evaluate(model, inputs[k], targets[k], DamchaOptions(reference=mbar, alpha=0.0)).loss
        assert gap[k] == pytest.approx(with_mean - evaluate(model, inputs[k], targets[k]).loss, abs=1e-10)
    np.testing.assert_allclose(batch_losses(model, inputs, targets),
                               [evaluate(model, x, y).loss for x, y in zip(inputs, targets)], atol=1e-12)


def test_block_grid_is_one_evaluation_per_block():
    model = tiny_model("damcha")
    grid = block_grid(model, TOKENS, TARGETS)
    base = evaluate(model, TOKENS, TARGETS).loss
    for i, j in [(0, 0), (1, 3), (3, 2)]:
        zeroed = evaluate(model, TOKENS, TARGETS, DamchaOptions(block_scales=block_scale_matrix(4, zero=(i, j)))).loss
        assert grid[i, j] == pytest.approx(zeroed - base, abs=1e-12)


def _twin_with(variant, **state_changes):
    model = perturbed(build_model(config(variant), seed=0).double())
    twin = copy.deepcopy(model)
    with torch.no_grad():
        for block in twin.blocks:
            for name, value in state_changes.items():
                getattr(block.attn, name).copy_(value(getattr(block.attn, name)))
    return model, twin


def test_other_mechanisms_interventions_equal_the_changed_model():
    tokens = [1, 2, 3, 4, 5, 6, 7]
    cases = [
        ("tha", "no_talking", dict(logits_mix=lambda p: torch.eye(4), weights_mix=lambda p: torch.eye(4))),
        ("colmha", "concatenate_mixing", dict(mixing=lambda p: torch.kron(torch.eye(4), torch.ones(1, 4)))),
    ]
    for variant, name, changes in cases:
        model, twin = _twin_with(variant, **changes)
        iv = next(iv for iv in available_interventions(model) if iv.name == name)
        options = intervention_options(model, iv, tokens)
        assert torch.allclose(logits(model, tokens, options), logits(twin, tokens), atol=1e-10), variant
    model = perturbed(build_model(config("dcmha"), seed=0).double())
    twin = copy.deepcopy(model)
    with torch.no_grad():
        for block in twin.blocks:
            block.attn.dynamic.out[:, :, 1] = 0  # w2 = 0 and dd = 0: Compose is the identity
            block.attn.dynamic.diagonal.weight.zero_()
    iv = next(iv for iv in available_interventions(model) if iv.name == "without_composition")
    assert torch.allclose(logits(model, tokens, intervention_options(model, iv, tokens)), logits(twin, tokens), atol=1e-10)


def test_mma_and_moa_interventions():
    model = perturbed(build_model(config("mma", False), seed=0).double())
    iv = next(iv for iv in available_interventions(model) if iv.name == "backward_as_global")
    with torch.no_grad():
        out = model(torch.tensor([[1, 2, 3, 4, 5]]), options=intervention_options(model, iv, None), need_intermediates=True)
    assert (out.layers[0].weights[0, 3] > 0).all()  # the backward head now sees every key
    model = perturbed(build_model(config("moa"), seed=0).double())
    iv = next(iv for iv in available_interventions(model) if iv.name == "uniform_gates")
    with torch.no_grad():
        gates = model.blocks[0].attn(torch.randn(1, 5, 16, dtype=torch.float64), LayerCall(None, None, True,
                                     intervention_options(model, iv, None), need_weights=True)).internals["gates"][0]
    assert torch.allclose(gates[gates > 0], torch.full_like(gates[gates > 0], 0.25))


def test_interventions_leave_the_shared_model_untouched():
    model = tiny_model("damcha").requires_grad_(False).eval()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    inputs = np.array([TOKENS, TOKENS[::-1]])
    targets = np.array([TARGETS, TARGETS[::-1]])
    mbar = mean_metric(model, inputs)
    rows = validation_effects(model, inputs, targets, available_interventions(model), mbar)
    assert {r["intervention"] for r in rows} >= {"Zero one block M_ij", "The validation mean M-bar"}
    block_grid(model, TOKENS, TARGETS, keep=True)
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    assert not model.training and not has_hooks(model)
    assert all(not p.requires_grad and p.grad is None for p in model.parameters())


def test_a_reference_of_another_length_is_aligned_by_position_and_says_so():
    """Regression: M-bar of 128-position validation windows on a 53-byte typed text used to fail."""
    from damcha.analysis.interventions import align_reference, input_metric, metric_swap

    model = tiny_model("damcha")
    longer = input_metric(model, TOKENS + [4, 4, 4])  # (L_m, 11, D, D)
    cut, note = align_reference(model, TOKENS, longer)
    torch.testing.assert_close(cut, longer[:, :len(TOKENS)])  # position t uses the reference at t
    assert "same position" in note
    shorter = input_metric(model, TOKENS[:3])
    grown, note = align_reference(model, TOKENS, shorter)
    torch.testing.assert_close(grown[:, :3], shorter)
    torch.testing.assert_close(grown[:, 3:], shorter[:, -1:].expand(-1, len(TOKENS) - 3, -1, -1))
    assert "no reference input reaches" in note
    assert align_reference(model, TOKENS, input_metric(model, TOKENS))[1] == ""
    iv = next(iv for iv in available_interventions(model) if iv.name == "swap_metric")
    options = intervention_options(model, iv, TOKENS, other_tokens=[1, 2, 3])
    assert options.reference.shape[1] == len(TOKENS)
    assert np.isfinite(metric_swap(model, TOKENS, TARGETS, shorter).loss)


def test_model_figures_are_named_figures_the_cli_can_rebuild():
    from pathlib import Path

    from damcha.inputs.model_inputs import validation_arrays, validation_input
    from damcha.runs.checkpoints import load_run
    from damcha.views.export import figure_data
    from damcha.views.model_figures import figure_set
    from damcha.views.regeneration import regenerate

    run = load_run(Path(__file__).resolve().parents[2] / "checkpoints" / "digits-damcha")
    inp = validation_input(run, 2)
    (item,) = figure_set(run, [run.epochs[-1]], inp.tokens, inp.targets, names=["interpolation"])
    model = __import__("damcha.runs.checkpoints", fromlist=["load_model"]).load_model(run)
    expected = interpolation_curve(model, inp.tokens, inp.targets, mean_metric(model, validation_arrays(run)[0][:256]))
    expected = expected / np.log(2)  # drawn in the run's unit, bits per pixel
    shown = [v for k, v in figure_data(item.figure).items() if k.endswith("_y")][0]
    np.testing.assert_allclose(shown, expected)
    assert "bits per pixel" in item.figure.layout.yaxis.title.text
    again = regenerate(item.provenance)
    np.testing.assert_allclose([v for k, v in figure_data(again.figure).items() if k.endswith("_y")][0], expected)
