"""Property tests over shapes, head counts and masks."""

import dataclasses

import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from damcha import ModelConfig, build_model, variant_config, variant_names
from tests.support.models import opts

VARIANTS = variant_names()  # the registry, so a new mechanism is covered


@st.composite
def cases(draw):
    n_head = draw(st.sampled_from([1, 2, 3, 4]))
    head_dim = draw(st.integers(1, 4))
    causal = draw(st.booleans())
    cfg = ModelConfig(
        vocab_size=7, block_size=12, n_layer=draw(st.integers(1, 2)), n_head=n_head, n_embd=n_head * head_dim,
        attention_options={"generator_widths": (draw(st.integers(1, 9)),)}, causal=causal, n_classes=0 if causal else 3, pad_token=6,
    )
    try:
        cfg = variant_config(cfg, draw(st.sampled_from(VARIANTS)))
    except ValueError:  # a mechanism that cannot be built at this shape says so; not this test's case
        assume(False)
    B = draw(st.integers(1, 3))
    T = draw(st.integers(1, 12))
    lengths = [draw(st.integers(1, T)) for _ in range(B)]
    choice = cfg.mechanism.choice("metric_mode")
    mode = draw(st.sampled_from(choice.values)) if choice else "full"
    return cfg, B, T, lengths, mode, draw(st.integers(0, 2**16))


@settings(max_examples=60, deadline=None)
@given(cases())
def test_any_shape_and_mask_gives_finite_agreeing_paths_and_padding_invariance(case):
    cfg, B, T, lengths, mode, seed = case
    model = build_model(cfg, seed=seed).double().eval()  # deterministic (no MoA gating noise)
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 6, (B, T), generator=gen)
    for b, n in enumerate(lengths):
        tokens[b, n:] = cfg.pad_token
    fast = model(tokens, options=opts(model, mode)).logits
    slow = model(tokens, options=opts(model, mode, True), need_intermediates=True).logits
    assert torch.isfinite(fast).all()
    assert torch.allclose(fast, slow, atol=1e-10)
    for b, n in enumerate(lengths):  # each row alone, without its padding, gives the same outputs
        alone = model(tokens[b:b + 1, :n], options=opts(model, mode)).logits[0]
        got = fast[b, :n] if cfg.causal else fast[b]
        assert torch.allclose(got, alone, atol=1e-10)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.sampled_from(VARIANTS))
def test_parameter_estimate_is_exact(n_head, head_dim, variant):
    try:
        cfg = variant_config(ModelConfig(n_head=n_head, n_embd=n_head * head_dim, attention_options={"generator_widths": (5, 7)}), variant)
    except ValueError:  # a mechanism that cannot be built at this shape says so; not this test's case
        assume(False)
    assert build_model(cfg).num_parameters() == cfg.parameter_estimate()
    cls = dataclasses.replace(cfg, causal=False, n_classes=4)
    assert build_model(cls).num_parameters() == cls.parameter_estimate()
