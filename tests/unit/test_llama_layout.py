"""The Llama layout of the project's block (ModelConfig norm="rms", feed_forward="swiglu",
position_encoding="rotary"): RoPE in the shared attend step scores by relative position, every mechanism
that scores through that step builds it with its exact parameter count and fused = explicit, the others
are refused in words, and configs of the usual layout are saved as before."""

import pytest
import torch

from damcha import ModelConfig, variant_config, variant_names
from damcha.model.mechanisms import get_mechanism, get_variant
from damcha.model.mechanisms.operations import attend, rotate
from damcha.model.transformer import build_model

LLAMA = {"norm": "rms", "feed_forward": "swiglu", "position_encoding": "rotary"}
BASE = ModelConfig(n_layer=2, n_head=4, n_embd=16, attention_options={"generator_widths": (8,)}, block_size=12, vocab_size=11)
ROTARY = [v for v in variant_names() if get_mechanism(get_variant(v).mechanism).rotary_positions]
OTHERS = [v for v in variant_names() if v not in ROTARY]


def test_rotated_scores_depend_on_positions_only_through_their_difference():
    g = torch.Generator().manual_seed(0)
    q0, k0 = torch.randn(8, generator=g), torch.randn(8, generator=g)
    T = 10
    q = rotate(q0.expand(1, 1, T, 8).clone())  # the same query at every position, rotated by its position
    k = rotate(k0.expand(1, 1, T, 8).clone())
    scores = (q @ k.transpose(-2, -1))[0, 0]  # (T, T)
    for shift in range(1, 4):  # a common shift of both positions leaves every score as it was
        torch.testing.assert_close(scores[shift:, shift:], scores[:-shift, :-shift], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(scores[0, 1], scores[0, 2])  # but the distance matters
    torch.testing.assert_close(q.norm(dim=-1), q0.norm().expand(1, 1, T))  # a rotation


def test_the_attend_step_rotates_alike_on_its_fused_and_explicit_paths():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, 9, 6, generator=g) for _ in range(3))
    fused, _ = attend(q, k, v, None, True, 0.4, 0.0, False, rotary=True)
    explicit, _ = attend(q, k, v, None, True, 0.4, 0.0, True, rotary=True)
    plain, _ = attend(q, k, v, None, True, 0.4, 0.0, True)
    torch.testing.assert_close(fused, explicit, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(explicit, plain)


@pytest.mark.parametrize("variant", ROTARY)
def test_every_mechanism_of_the_attend_step_builds_the_llama_layout(variant):
    config = variant_config(ModelConfig(**{**BASE.to_dict(), **LLAMA}), variant)
    model = build_model(config, seed=0).eval()
    assert config.parameter_estimate() == sum(p.numel() for p in model.parameters())
    assert model.pos_emb is None and type(model.blocks[0].ln_1) is torch.nn.RMSNorm
    x = torch.randint(0, 10, (2, 12), generator=torch.Generator().manual_seed(2))
    unrotated = build_model(variant_config(ModelConfig(**{**BASE.to_dict(), **LLAMA, "position_encoding": "learned"}),
                                           variant)).eval()
    unrotated.load_state_dict({**model.state_dict(), "pos_emb.weight": torch.zeros(12, 16)})  # the same, no RoPE
    with torch.no_grad():
        fused = model(x).logits
        torch.testing.assert_close(model(x, need_intermediates=True).logits, fused, rtol=1e-5, atol=1e-5)
        assert not torch.allclose(unrotated(x).logits, fused, atol=1e-4)  # the declared mechanism does rotate


@pytest.mark.parametrize("variant", OTHERS)
def test_a_mechanism_that_scores_in_its_own_steps_is_refused_rotary_positions(variant):
    with pytest.raises(ValueError, match="not through the shared attend step: rotary positions"):
        variant_config(ModelConfig(**{**BASE.to_dict(), **LLAMA}), variant)


def test_configs_of_the_usual_layout_are_saved_as_before():
    saved = variant_config(BASE, "damcha").to_dict()
    assert "norm" not in saved and "feed_forward" not in saved
    llama = variant_config(ModelConfig(**{**BASE.to_dict(), **LLAMA}), "mha")
    assert ModelConfig.from_dict(llama.to_dict()) == llama
