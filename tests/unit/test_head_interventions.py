"""Head-level interventions for every registered mechanism (zero- and mean-ablation, patching),
checked against independent recomputations: zeroing a head equals zeroing its columns of the
output projection; patching a head from the same input changes nothing; hooks never outlive a call."""

import numpy as np
import pytest
import torch

from damcha.analysis.attribution import has_hooks
from damcha.analysis.heads import head_effects, head_sites, sequence_loss
from tests.support.guide_examples import examples_registered, walked_variants
from tests.support.models import tiny_model

pytestmark = pytest.mark.usefixtures("guide_examples")  # the guide's mechanism walked too

# Every registered variant whose heads meet at a projection (the others refuse in words: the zeroing test checks it).
with examples_registered():
    WITH_HEAD_SITES = [v for v in walked_variants() if head_sites(tiny_model(v)) is not None]


def inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 11, (12,), generator=g)
    return x.numpy(), torch.roll(x, -1).numpy()


@pytest.mark.parametrize("variant", walked_variants())
def test_zeroing_a_head_equals_zeroing_its_columns_of_the_output_projection(variant):
    model = tiny_model(variant, dtype=torch.float64)
    x, y = inputs()
    sites = head_sites(model)
    if sites is None:
        note = model.mechanism.head_site_note(model.config)
        assert note and model.mechanism.interventions(model.config), "a mechanism without head sites offers its own"
        with pytest.raises(ValueError, match="experts|projection|heads"):
            head_effects(model, x, y, "zero")
        return
    effects = head_effects(model, x, y, "zero")
    assert effects.changes.shape == (model.config.n_layer, model.config.n_head)
    assert not has_hooks(model)
    layer, head = model.config.n_layer - 1, 1
    edited = tiny_model(variant, dtype=torch.float64)
    site = head_sites(edited)[layer]
    w = site.in_features // model.config.n_head
    with torch.no_grad():
        site.weight[:, head * w:(head + 1) * w] = 0
        expected = sequence_loss(edited, torch.as_tensor(x)[None], torch.as_tensor(y)[None]) - effects.base
    assert effects.changes[layer, head] == pytest.approx(expected, abs=1e-10)
    assert np.abs(effects.changes).max() > 1e-6  # some head matters


@pytest.mark.parametrize("variant", WITH_HEAD_SITES)
def test_patching_from_the_same_input_changes_nothing_and_from_another_does(variant):
    model = tiny_model(variant, dtype=torch.float64)
    x, y = inputs(0)
    same = head_effects(model, x, y, "patch", reference=x)
    np.testing.assert_allclose(same.changes, 0, atol=1e-12)
    other = head_effects(model, x, y, "patch", reference=inputs(1)[0])
    assert np.abs(other.changes).max() > 1e-6
    mean = head_effects(model, x, y, "mean", reference=np.stack([inputs(s)[0] for s in range(4)]))
    assert np.isfinite(mean.changes).all() and not has_hooks(model)


def test_patching_refuses_inputs_of_another_length():
    model = tiny_model("mha")
    x, y = inputs()
    with pytest.raises(ValueError, match="one length"):
        head_effects(model, x, y, "patch", reference=x[:5])


def test_a_classifier_and_a_vector_model_are_measured_too():
    classifier = tiny_model("mha", causal=False)
    x, _ = inputs()
    effects = head_effects(classifier, x, np.array(2), "zero")
    assert effects.changes.shape == (2, 4)
    vectors = tiny_model("damcha", input_dim=6, vocab_size=1)
    patches = np.random.default_rng(0).random((12, 6))
    assert head_effects(vectors, patches, np.roll(patches, -1, 0), "zero").changes.shape == (2, 4)


def answer_logit(model, x, y) -> float:
    logits = model(torch.as_tensor(x)[None], stochastic=False).logits[0]  # (T, V)
    known = torch.as_tensor(y) != -100
    return float(logits[torch.arange(len(y))[known], torch.as_tensor(y)[known]].mean())


@pytest.mark.parametrize("variant", WITH_HEAD_SITES)
def test_direct_logit_attribution_of_the_last_layer_is_what_removing_the_head_takes_from_the_logit(variant):
    """Without a final norm, and with the last MLP held at its clean output, a last-layer head's direct
    effect is its whole effect on the logit: its DLA equals the drop of the right answer's logit when
    that head's output is zeroed (an independent recomputation through the model itself)."""
    from damcha.analysis.heads import direct_logit_attribution, replaced_head

    model = tiny_model(variant, final_norm=False)
    x, y = inputs()
    y[-1] = -100  # one position without a target
    dla = direct_logit_attribution(model, x, y)
    site, H = head_sites(model)[-1], model.config.n_head
    mlp = model.blocks[-1].mlp
    clean = {}
    handle = mlp.register_forward_hook(lambda _m, _a, out: clean.setdefault("out", out))
    with torch.no_grad():
        with_head = answer_logit(model, x, y)
    handle.remove()
    handle = mlp.register_forward_hook(lambda _m, _a, _out: clean["out"])  # the MLP's input changes, not its output
    try:
        for head in range(H):
            with torch.no_grad(), replaced_head(site, head, H, torch.zeros_like):
                without = answer_logit(model, x, y)
            assert dla[-1, head] == pytest.approx(with_head - without, abs=1e-9)
    finally:
        handle.remove()
    with_norm = direct_logit_attribution(tiny_model(variant), x, y)  # with the final LayerNorm: finite, per head
    assert with_norm.shape == (2, 4) and np.isfinite(with_norm).all()


def test_direct_logit_attribution_is_refused_where_it_is_undefined():
    from damcha.analysis.heads import direct_logit_attribution

    vectors = tiny_model("damcha", input_dim=6, vocab_size=1)
    patches = np.random.default_rng(0).random((12, 6))
    with pytest.raises(ValueError, match="pre-LN model with a token or class head"):
        direct_logit_attribution(vectors, patches, np.roll(patches, -1, 0))
    classifier = tiny_model("mha", causal=False)
    assert direct_logit_attribution(classifier, inputs()[0], np.array(3)).shape == (2, 4)


@pytest.mark.parametrize("kind, params", [("zero", {}), ("mean", {"n_mean": 8}), ("patch", {"other": 5})])
def test_the_head_figures_are_named_figures_rebuilt_from_their_provenance_in_the_runs_unit(kind, params):
    """What the Interventions page shows of heads is exported with a provenance that rebuilds it: the
    same changes, in bits for a digits run (the library's nats / ln 2)."""
    from pathlib import Path

    from damcha.analysis.heads import head_effects
    from damcha.inputs.model_inputs import validation_arrays, validation_input
    from damcha.runs.checkpoints import load_model, load_run
    from damcha.views.export import figure_data
    from damcha.views.model_figures import figure_set
    from damcha.views.regeneration import regenerate

    run = load_run(Path(__file__).resolve().parents[2] / "checkpoints" / "digits-mha")
    inp = validation_input(run, 2)
    (item,) = figure_set(run, [run.epochs[-1]], inp.tokens, inp.targets, params={"kind": kind, **params},
                         names=["head_ablation"])
    x = validation_arrays(run)[0]
    reference = {"zero": None, "mean": x[:8], "patch": x[5]}[kind]
    expected = head_effects(load_model(run), inp.tokens, inp.targets, kind, reference).changes / np.log(2)
    shown = figure_data(item.figure)["trace0_heatmap"]
    np.testing.assert_allclose(shown, expected, rtol=1e-6, atol=1e-9)
    assert "bits per pixel" in item.figure.to_json() and item.provenance.regenerable
    again = figure_data(regenerate(item.provenance).figure)["trace0_heatmap"]
    np.testing.assert_array_equal(again, shown)


@pytest.mark.parametrize("variant", WITH_HEAD_SITES)
def test_the_two_mean_ablations_replace_a_head_by_what_they_say_they_average(variant):
    """Recomputed by hand: the head's output on the references, averaged over inputs and positions (one
    vector) or over inputs only (one vector per position), written in by a hook of our own."""
    model = tiny_model(variant, dtype=torch.float64)
    x, y = inputs(0)
    reference = np.stack([inputs(s)[0] for s in range(1, 5)])  # (4, 12)
    layer, head = model.config.n_layer - 1, 1
    site = head_sites(model)[layer]
    w = site.in_features // model.config.n_head
    seen = []
    handle = site.register_forward_pre_hook(lambda module, args: seen.append(args[0].detach().clone()))
    with torch.no_grad():
        model(torch.as_tensor(reference), stochastic=False)
    handle.remove()
    outputs = seen[0][..., head * w:(head + 1) * w]  # (4, 12, w)
    for kind, value in (("mean", outputs.mean(dim=(0, 1))), ("mean_position", outputs.mean(dim=0))):
        def write(module, args, value=value):
            z = args[0].clone()
            z[..., head * w:(head + 1) * w] = value
            return (z,)
        handle = site.register_forward_pre_hook(write)
        expected = sequence_loss(model, torch.as_tensor(x)[None], torch.as_tensor(y)[None])
        handle.remove()
        got = head_effects(model, x, y, kind, reference=reference)
        assert got.changes[layer, head] == pytest.approx(expected - got.base, abs=1e-10), kind
    per_position = head_effects(model, x, y, "mean_position", reference=reference).changes
    one_vector = head_effects(model, x, y, "mean", reference=reference).changes
    assert np.abs(per_position - one_vector).max() > 1e-6  # they are different numbers, and now named apart


def test_a_per_position_mean_refuses_references_of_another_length_in_words():
    encoder = tiny_model("mha", causal=False)
    x, _ = inputs()
    with pytest.raises(ValueError, match="per-position mean needs validation inputs of this input's length"):
        head_effects(encoder, x, np.array(2), "mean_position", reference=np.stack([x[:8], x[:8]]))
    decoder = tiny_model("mha")
    longer = np.stack([np.concatenate([inputs(s)[0], inputs(s)[0]]) for s in range(3)])  # (3, 24): first 12 used
    x, y = inputs()
    assert np.isfinite(head_effects(decoder, x, y, "mean_position", reference=longer).changes).all()
