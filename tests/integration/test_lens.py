"""damcha.interop.lens: TransformerLens's run_with_cache and run_with_hooks on every registered variant, under
the canonical hook names (checked against the model's own computation), and DAMCHA's own sites."""

import pytest
import torch

pytest.importorskip("transformer_lens", reason="TransformerLens is not installed (pip install 'damcha[lens]'); "
                    "CI installs it")

from damcha import ModelConfig, variant_config, variant_names  # noqa: E402
from damcha.interop.lens import UNSUPPORTED, HookedDamcha  # noqa: E402
from damcha.model.transformer import build_model  # noqa: E402

TOKENS = torch.randint(0, 10, (2, 12), generator=torch.Generator().manual_seed(0))
ALWAYS = ("hook_embed", "blocks.0.hook_resid_pre", "blocks.0.hook_attn_out", "blocks.1.hook_resid_post",
          "ln_final.hook_normalized")


def _hooked(variant: str) -> HookedDamcha:
    return _hooked_as(variant)


def _zero(tensor, hook):
    return torch.zeros_like(tensor)


@pytest.mark.parametrize("variant", variant_names())
def test_every_variant_caches_the_canonical_hooks_and_an_edit_takes_effect(variant):
    hooked = _hooked(variant)
    with torch.no_grad():
        own = hooked.model(TOKENS).logits
        logits, cache = hooked.run_with_cache(TOKENS)
        torch.testing.assert_close(logits, own, rtol=1e-5, atol=1e-5)
        assert all(name in cache for name in ALWAYS), sorted(cache.keys())
        assert cache["blocks.1.hook_resid_post"].shape == (2, 12, 16)
        if "blocks.0.attn.hook_attn_scores" in cache:  # the attend step's scores are pre-softmax, the pattern after
            scores, pattern = cache["blocks.0.attn.hook_attn_scores"], cache["blocks.0.attn.hook_pattern"]
            torch.testing.assert_close(scores.softmax(-1), pattern)
            edited = hooked.run_with_hooks(TOKENS, fwd_hooks=[("blocks.0.attn.hook_pattern", _zero)])
            assert not torch.allclose(edited, own)
        else:  # scores mixed in the mechanism's own steps: the pattern is the weights it returns, a record
            torch.testing.assert_close(cache["blocks.0.attn.hook_pattern"],
                                       hooked.model(TOKENS, need_intermediates=True).layers[0].weights)
        if "blocks.0.attn.hook_z" in cache:
            assert cache["blocks.0.attn.hook_z"].shape[:3] == (2, 12, 4)
            edited = hooked.run_with_hooks(TOKENS, fwd_hooks=[("blocks.0.attn.hook_z", _zero)])
            assert not torch.allclose(edited, own)
        edited = hooked.run_with_hooks(TOKENS, fwd_hooks=[("blocks.0.hook_attn_out", _zero)])
        assert not torch.allclose(edited, own)


def test_the_pattern_of_mha_and_damcha_is_the_weights_the_model_returns():
    for variant in ("mha", "damcha"):
        hooked = _hooked(variant)
        with torch.no_grad():
            _, cache = hooked.run_with_cache(TOKENS)
            weights = hooked.model(TOKENS, need_intermediates=True).layers[1].weights
        torch.testing.assert_close(cache["blocks.1.attn.hook_pattern"], weights)


def test_damchas_own_sites_the_per_head_metrics_act_and_the_context_is_a_record():
    hooked = _hooked("damcha")
    with torch.no_grad():
        own = hooked.model(TOKENS).logits
        _, cache = hooked.run_with_cache(TOKENS)
        assert cache["metric.hook_head_metric"].shape == (2, 12, 4, 4, 4)  # (B, T, H, d, d): the m_i
        assert cache["metric.hook_context"].shape == (2, 12, 16)
        edited = hooked.run_with_hooks(TOKENS, fwd_hooks=[("metric.hook_head_metric", _zero)])
        assert not torch.allclose(edited, own)
        recorded = hooked.run_with_hooks(TOKENS, fwd_hooks=[("metric.hook_context", _zero)])
        torch.testing.assert_close(recorded, own)
    unshared = _hooked("damcha-unshared")
    _, cache = unshared.run_with_cache(TOKENS)
    assert "metric_1.hook_head_metric" in cache and "metric.hook_head_metric" not in cache
    loss = unshared(TOKENS, targets=TOKENS, return_type="loss")
    assert loss.ndim == 0 and "W_Q, W_K, QK circuits" in UNSUPPORTED


@pytest.mark.parametrize("variant", variant_names())
def test_transformer_lens_helpers_run_on_every_mechanism_and_agree_with_the_cache(variant):
    """run_with_cache gives an ActivationCache; its helpers are checked against the cached stream itself:
    the accumulated stream's last entry through ln_final is the final norm's output, the decomposition
    sums to the last residual, the heads' results plus b_O are the attention's output. Activation
    patching and the head detector run; every canonical hook fires unless silent_hooks says why not."""
    from transformer_lens import ActivationCache
    from transformer_lens.head_detector import detect_head
    from transformer_lens.patching import get_act_patch_resid_pre

    hooked = _hooked(variant)
    with torch.no_grad():
        _, cache = hooked.run_with_cache(TOKENS)
        assert isinstance(cache, ActivationCache) and hooked.cfg.n_layers == 2 and hooked.cfg.d_head == 4
        silent = hooked.silent_hooks()
        for name in (n for n in hooked.hook_dict if not n.startswith("blocks.") or n.startswith("blocks.0.")):
            assert (name in cache) != (name in silent), (name, silent)  # fires, or is declared silent with a reason
        assert all(silent.values())
        stream = cache.accumulated_resid(apply_ln=True)
        assert stream.shape == (3, 2, 12, 16)
        torch.testing.assert_close(stream[-1], cache["ln_final.hook_normalized"], rtol=1e-5, atol=1e-5)
        parts, labels = cache.decompose_resid(return_labels=True)
        assert labels[:2] == ["embed", "pos_embed"] and "1_mlp_out" in labels
        torch.testing.assert_close(parts.sum(0), cache["blocks.1.hook_resid_post"], rtol=1e-5, atol=1e-5)
        if "blocks.0.attn.hook_z" in cache:
            heads = cache.stack_head_results(layer=1)  # the four heads of layer 0
            assert heads.shape == (4, 2, 12, 16)
            torch.testing.assert_close(heads.sum(0) + hooked.blocks[0].attn.b_O, cache["blocks.0.hook_attn_out"],
                                       rtol=1e-5, atol=1e-5)
        patched = get_act_patch_resid_pre(hooked, TOKENS.flip(1), cache, lambda logits: logits[:, -1].sum())
        assert patched.shape == (2, 12) and torch.isfinite(patched).all()
        if cache["blocks.0.attn.hook_pattern"].shape[-1] == 12:
            scores = detect_head(hooked, TOKENS[0, :8], "previous_token_head")
            assert scores.shape == (2, 4) and torch.isfinite(scores).all()
        else:  # interleaved heads: declared
            assert any("head_detector" in k for k in UNSUPPORTED)


def _hooked_as(variant: str, **layout) -> HookedDamcha:
    base = dict(n_layer=2, n_head=4, n_embd=16, attention_options={"generator_widths": (8,)}, block_size=12,
                vocab_size=11)
    return HookedDamcha(build_model(variant_config(ModelConfig(**{**base, **layout}), variant), seed=0).eval())


LAYOUTS = {"pre-norm LayerNorm, GELU": {}, "the Llama layout (RMSNorm, SwiGLU)": dict(norm="rms", feed_forward="swiglu")}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("variant", variant_names())
def test_apply_ln_at_every_layer_neurons_and_logit_attributions_agree_with_a_recomputation(variant, layout):
    """apply_ln at a layer, the full residual decomposition and logit_attrs failed (no ln1.hook_scale, no
    accumulated_bias, no W_U). Each is checked against the model's own tensors recomputed by hand: the cached
    scale is the norm's divisor, the normalised stack is the parameter-free norm of the stream it decomposes,
    heads, neurons, embeddings and biases sum to the stream, and the final stream's attributions are the logits
    less b_U."""
    from torch.nn import functional as F

    hooked = _hooked_as(variant, **LAYOUTS[layout])
    model = hooked.model
    with torch.no_grad():
        logits, cache = hooked.run_with_cache(TOKENS)
        for layer in range(2):
            stream = cache[f"blocks.{layer}.hook_resid_pre"]  # (B, T, D)
            norm = model.blocks[layer].ln_1
            plain = (F.layer_norm(stream, (16,), eps=norm.eps) if isinstance(norm, torch.nn.LayerNorm)
                     else F.rms_norm(stream, (16,), eps=norm.eps))  # without the norm's weights, as under fold_ln
            torch.testing.assert_close(cache[f"blocks.{layer}.ln1.hook_normalized"], norm(stream))
            torch.testing.assert_close(cache.accumulated_resid(layer=layer, apply_ln=True)[-1], plain,
                                       rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(cache.decompose_resid(layer=layer, apply_ln=True).sum(0), plain,
                                       rtol=1e-4, atol=1e-4)
        if "blocks.0.attn.hook_z" in cache:
            parts, labels = cache.get_full_resid_decomposition(return_labels=True)  # every neuron of every layer
            assert labels[:4] == ["L0H0", "L0H1", "L0H2", "L0H3"] and "L1N0" in labels and labels[-1] == "bias"
            torch.testing.assert_close(parts.sum(0), cache["blocks.1.hook_resid_post"], rtol=1e-4, atol=1e-4)
        stream = cache["blocks.1.hook_resid_post"]  # the stream ln_final normalises: (B, T, D)
        targets = TOKENS.clamp_max(10)
        attributed = cache.logit_attrs(stream[None], tokens=targets)[0]  # (B, T): its cached scale, no weights
        norm = model.ln_f
        plain = (F.layer_norm(stream, (16,), eps=norm.eps) if isinstance(norm, torch.nn.LayerNorm)
                 else F.rms_norm(stream, (16,), eps=norm.eps))
        expected = (plain * model.head.weight[targets]).sum(-1)  # (B, T)
        torch.testing.assert_close(attributed, expected, rtol=1e-5, atol=1e-5)
        # with the norm's weights, the final stream's logits less b_U are the model's logits less b_U
        torch.testing.assert_close(cache.accumulated_resid(apply_ln=True)[-1] @ hooked.W_U, logits - hooked.b_U,
                                   rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(hooked.tokens_to_residual_directions(targets), model.head.weight[targets])


def test_a_post_norm_model_says_apply_ln_at_a_layer_is_undefined_and_its_norms_are_hooked_as_post_norms():
    hooked = _hooked_as("damcha", norm_placement="post")
    with torch.no_grad():
        _, cache = hooked.run_with_cache(TOKENS)
    assert "blocks.0.ln1_post.hook_scale" in cache and "blocks.0.ln1.hook_scale" not in cache
    with pytest.raises(KeyError, match="normalizes sublayer outputs"):
        cache.accumulated_resid(layer=1, apply_ln=True)


def test_the_head_detector_takes_a_list_of_prompts_and_gives_their_mean_and_a_classifier_has_no_unembedding():
    from transformer_lens.head_detector import detect_head

    hooked = _hooked("damcha")
    prompts = [TOKENS[0, :8], TOKENS[1, :6]]
    with torch.no_grad():
        both = detect_head(hooked, prompts, "previous_token_head")
        each = torch.stack([detect_head(hooked, p, "previous_token_head") for p in prompts])
    torch.testing.assert_close(both, each.mean(0))
    assert hooked.to_tokens(prompts).shape == (2, 8)
    classifier = _hooked_as("damcha", n_classes=3, causal=False)
    with pytest.raises(ValueError, match="predicts no next token from each position: no unembedding W_U"):
        _ = classifier.W_U


def test_an_edit_of_the_mlps_hidden_activations_takes_effect():
    hooked = _hooked("mha")
    with torch.no_grad():
        _, cache = hooked.run_with_cache(TOKENS)
        out = {}
        hooked.run_with_hooks(TOKENS, fwd_hooks=[("blocks.0.mlp.hook_post", _zero),
                                                 ("blocks.0.hook_mlp_out", lambda t, hook: out.setdefault("mlp", t))])
    # with no hidden activation the MLP's output is its output bias at every position
    torch.testing.assert_close(out["mlp"], hooked.blocks[0].mlp.b_out.expand_as(out["mlp"]))
    assert not torch.allclose(cache["blocks.0.hook_mlp_out"], out["mlp"])
