"""captum attributions: finite differences, completeness, hooks that never outlive a call."""

from pathlib import Path

import numpy as np
import pytest
import torch

from damcha.analysis.attribution import has_hooks, metric_contributions, token_attributions
from damcha.model.mechanisms.damcha.layer import metric_sources
from tests.support.models import tiny_model

ROOT = Path(__file__).resolve().parents[2]


def _loss(model, tok, tgt):
    with torch.no_grad():
        return float(model(torch.as_tensor(tok)[None], targets=torch.as_tensor(tgt)[None], stochastic=False).loss)


@pytest.mark.parametrize("variant", ["damcha", "damcha-unshared"])
def test_metric_gradient_matches_finite_differences_of_the_generator_bias(variant):
    """The bias of f's last layer adds to every entry of M at every position, so
    dL/db[k] = sum over positions of dL/dM[p, k]: a finite-difference check of the captum gradient."""
    model = tiny_model(variant, True)
    tok, tgt = np.array([1, 4, 2, 8, 5, 7]), np.array([4, 2, 8, 5, 7, 1])
    grads = metric_contributions(model, tok, tgt, method="gradient").values  # (L_m, P, D, D)
    D = model.config.n_embd
    rng = np.random.default_rng(0)
    for layer, src in enumerate(metric_sources(model)):
        bias = src.generator.out.bias
        for k in rng.choice(D * D, 6, replace=False):
            eps = 1e-6
            with torch.no_grad():
                bias[k] += eps
                up = _loss(model, tok, tgt)
                bias[k] -= 2 * eps
                down = _loss(model, tok, tgt)
                bias[k] += eps
            fd = (up - down) / (2 * eps)
            assert grads[layer, :, k // D, k % D].sum() == pytest.approx(fd, rel=1e-5, abs=1e-9)


def test_static_metric_gradient_matches_finite_differences():
    model = tiny_model("damcha-static", True)
    tok, tgt = np.array([1, 4, 2, 8, 5]), np.array([4, 2, 8, 5, 7])
    c = metric_contributions(model, tok, tgt, method="gradient_x_metric").values[0, 0]  # (D, D)
    W = metric_sources(model)[0].generator.weight
    for (a, b) in [(0, 0), (3, 9), (15, 2)]:
        eps = 1e-6
        with torch.no_grad():
            W[a, b] += eps
            up = _loss(model, tok, tgt)
            W[a, b] -= 2 * eps
            down = _loss(model, tok, tgt)
            W[a, b] += eps
        assert c[a, b] == pytest.approx((up - down) / (2 * eps) * W[a, b].item(), rel=1e-5, abs=1e-10)


@pytest.mark.parametrize("target, kw", [("loss", {}), ("off_diagonal_energy", {"position": 4}),
                                        ("block_norm", {"position": 2, "block": (1, 3)}),
                                        ("head_metric_norm", {"position": 5, "head": 2})])
def test_integrated_gradients_are_complete_within_the_reported_delta(target, kw):
    model = tiny_model("damcha", True)
    tok, tgt = np.array([1, 4, 2, 8, 5, 7]), np.array([4, 2, 8, 5, 7, 1])
    a = token_attributions(model, tok, 0, target, tgt, n_steps=24, **kw)
    assert a.values.shape == (6,)
    assert abs(a.values.sum() - (a.value - a.baseline_value)) <= abs(a.delta) + 1e-9
    assert abs(a.delta) < 1e-3 * max(1.0, abs(a.value - a.baseline_value))


def test_no_hook_remains_even_on_error_and_the_shared_model_is_untouched():
    model = tiny_model("damcha", True)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    metric_contributions(model, [1, 2, 3], [2, 3, 4])
    token_attributions(model, [1, 2, 3], 0, "loss", [2, 3, 4], n_steps=4)
    with pytest.raises(ValueError):
        token_attributions(model, [1, 2, 3], 0, "no-such-target", [2, 3, 4], n_steps=4)
    assert not has_hooks(model)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())


def test_hooks_on_the_private_copy_are_removed_when_the_forward_fails(monkeypatch):
    """captum removes its hooks in `finally`: make the forward fail mid-attribution and look."""
    import damcha.analysis.attribution as attribution

    seen = []
    real_copy = attribution._private_copy

    def spying_copy(model):
        clone = real_copy(model)
        seen.append(clone)
        return clone

    monkeypatch.setattr(attribution, "_private_copy", spying_copy)
    model = tiny_model("damcha", True)
    with pytest.raises(IndexError):
        metric_contributions(model, [1, 2, 3], [2, 3, 99])  # a target outside the vocabulary fails in the forward
    assert seen and not has_hooks(seen[0])


def test_static_metrics_refuse_metric_targets():
    with pytest.raises(ValueError, match="does not depend on the input"):
        token_attributions(tiny_model("damcha-static"), [1, 2], 0, "off_diagonal_energy")


def test_the_attributed_loss_is_the_models_loss_at_every_input_length():
    """A text shorter than the context has no target at its last position: the scalar IG explains
    must be the model's own loss (the mean over positions with a target), not diluted by that zero."""
    from damcha.analysis.attribution import metric_scalar
    from damcha.inputs.model_inputs import input_from_text
    from damcha.runs.checkpoints import load_model, load_run

    run = load_run(ROOT / "checkpoints" / "text-damcha")
    model = load_model(run)
    for n in (2, 5, 17, 60, run.model_config.block_size + 10):
        inp = input_from_text(run, ("The metric depends on the input itself. " * 4)[:n].encode(), "typed")
        tokens, targets = torch.as_tensor(inp.tokens)[None], torch.as_tensor(inp.targets)[None]
        with torch.no_grad():
            expected = model(tokens, targets=targets).task_loss
            got = metric_scalar(model, tokens, "loss", targets=targets)
        assert float(got[0]) == pytest.approx(float(expected), rel=1e-6), n


@pytest.mark.parametrize("run_name", ["digits-damcha", "text-mha", "images-damcha"])
def test_the_input_attribution_is_a_named_figure_in_the_runs_unit_rebuilt_from_its_provenance(run_name):
    """The Gradient contributions page's Integrated Gradients figure: the attribution of the loss from
    the modality's blank input, per token or per pixel/patch, in bits for likelihood runs, and its
    provenance rebuilds the same numbers."""
    from pathlib import Path

    from damcha.analysis.attribution import per_cell
    from damcha.inputs.modalities import loss_factor, modality_named
    from damcha.inputs.model_inputs import validation_input
    from damcha.runs.checkpoints import load_model, load_run
    from damcha.views.model_figures import figure_set
    from damcha.views.regeneration import regenerate

    run = load_run(Path(__file__).resolve().parents[2] / "checkpoints" / run_name)
    inp = validation_input(run, 1)
    params = {"target": "loss", "n_steps": 4}
    (item,) = figure_set(run, [run.epochs[-1]], inp.tokens, inp.targets, params=params, names=["input_attribution"])
    modality = modality_named(run.model_config.modality)
    attr = token_attributions(load_model(run), inp.tokens, modality.blank_token, "loss", inp.targets, n_steps=4)
    expected = attr.values * loss_factor(run.model_config)
    trace = item.figure.data[0]
    if modality.grid:
        cells = per_cell(expected, inp.tokens, modality)
        np.testing.assert_allclose(np.asarray(trace.z, dtype=float).ravel(), np.nan_to_num(cells).ravel()
                                   if modality.picture == "grey_levels" else cells.ravel(), rtol=1e-5, atol=1e-7)
    else:
        np.testing.assert_allclose(np.asarray(trace.y, dtype=float), expected, rtol=1e-5, atol=1e-7)
    assert item.provenance.regenerable
    again = regenerate(item.provenance).figure.data[0]
    np.testing.assert_array_equal(np.asarray(again.z if modality.grid else again.y, dtype=float),
                                  np.asarray(trace.z if modality.grid else trace.y, dtype=float))
