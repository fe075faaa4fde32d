"""Decoding with a PrefixCache gives the logits of a call with the whole sequence, for every registered
mechanism that declares decodes_with_cache, in every position encoding, with padding; every other
mechanism, and every call a cache cannot serve, is refused in words."""

from __future__ import annotations

import pytest
import torch

from damcha.model.config import ModelConfig, variant_config
from damcha.model.mechanisms import get_mechanism, get_variant, variant_names
from damcha.model.mechanisms.cache import PrefixCache
from damcha.model.transformer import build_model

TOLERANCE = 1e-5  # float32: the running sums add in another order than a cumulative sum


def _model(variant: str, position_encoding: str = "learned", causal: bool = True):
    base = ModelConfig(n_layer=2, n_head=4, n_embd=16, attention_options={"generator_widths": (8,)}, block_size=24, vocab_size=11,
                       position_encoding=position_encoding, causal=causal, n_classes=0 if causal else 3)
    model = build_model(variant_config(base, variant), seed=0).eval()
    with torch.no_grad():  # off the initial values, so no map that starts at zero hides a wrong offset
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    return model


def _declares_cache(variant: str) -> bool:
    return get_mechanism(get_variant(variant).mechanism).decodes_with_cache


CACHED = [v for v in variant_names() if _declares_cache(v)]
UNCACHED = [v for v in variant_names() if not _declares_cache(v)]


def test_the_registry_has_both_kinds():
    assert {"mha", "damcha"} <= set(CACHED) and UNCACHED


@pytest.mark.parametrize("position_encoding", ["learned", "sinusoidal", "rotary"])
@pytest.mark.parametrize("variant", CACHED)
def test_decoding_in_pieces_gives_the_logits_of_the_whole_sequence(variant, position_encoding):
    model = _model(variant, position_encoding)
    tokens = torch.randint(1, 11, (3, 20), generator=torch.Generator().manual_seed(1))  # (B, T)
    real = torch.ones(3, 20, dtype=torch.bool)
    real[1, :4] = False  # a left-padded row
    real[2, 6] = False  # and a pad inside a row's prefix
    positions = (real.long().cumsum(-1) - 1).clamp_min(0)  # (B, T): each row's real tokens from 0
    with torch.no_grad():
        whole = model(tokens, real=real, positions=positions).logits  # (B, T, V)
        cache = PrefixCache.empty(model.config.n_layer)
        pieces = []
        for start, end in [(0, 7), *[(t, t + 1) for t in range(7, 15)], (15, 18), (18, 20)]:
            pieces.append(model(tokens[:, start:end], real=real[:, start:end], positions=positions[:, start:end],
                                cache=cache).logits)
    assert cache.length == 20
    difference = (torch.cat(pieces, dim=1) - whole)[real].abs().max().item()  # the real tokens' logits
    assert difference < TOLERANCE, difference


@pytest.mark.parametrize("variant", UNCACHED)
def test_a_mechanism_without_a_cache_is_refused_one_in_words(variant):
    model = _model(variant)
    with pytest.raises(ValueError, match="keeps no cache of the tokens read"):
        model(torch.ones(1, 4, dtype=torch.long), cache=PrefixCache.empty(2))


def test_calls_a_cache_cannot_serve_are_refused_in_words():
    from damcha.model.mechanisms import DamchaOptions

    model = _model("damcha")
    x = torch.ones(1, 4, dtype=torch.long)
    with pytest.raises(ValueError, match="no dropout"):
        model(x, cache=PrefixCache.empty(2), stochastic=True)
    with pytest.raises(ValueError, match="no dropout"):
        model(x, cache=PrefixCache.empty(2), need_intermediates=True)
    with pytest.raises(ValueError, match="default options only"):
        model(x, cache=PrefixCache.empty(2), options=DamchaOptions(metric_mode="diagonal"))
    with pytest.raises(ValueError, match="a cache is for causal decoders"):
        _model("damcha", causal=False)(x, cache=PrefixCache.empty(2))
    cache = PrefixCache.empty(2)
    model(torch.ones(1, 20, dtype=torch.long), cache=cache)
    with pytest.raises(ValueError, match="25 tokens is longer than the model's block_size 24"):
        model(torch.ones(1, 5, dtype=torch.long), cache=cache)
