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
    config = variant_config(ModelConfig(n_layer=2, n_head=4, n_embd=16, generator_widths=(8,), block_size=12,
                                        vocab_size=11), variant)
    return HookedDamcha(build_model(config, seed=0).eval())


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
        if "blocks.0.attn.hook_pattern" in cache:  # the attend step's scores are pre-softmax, the pattern after
            scores, pattern = cache["blocks.0.attn.hook_attn_scores"], cache["blocks.0.attn.hook_pattern"]
            torch.testing.assert_close(scores.softmax(-1), pattern)
            edited = hooked.run_with_hooks(TOKENS, fwd_hooks=[("blocks.0.attn.hook_pattern", _zero)])
            assert not torch.allclose(edited, own)
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
