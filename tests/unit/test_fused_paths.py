"""Every registered mechanism's fast path (training and evaluation: fused kernels, blocks of queries,
one call per head type) gives the explicit path's values and gradients (inspection's: every
(B, H, T, T) tensor written out), in float64, with and without padding, causal and not.

Blocks are made a few rows small here so every blocked path runs several blocks, the causal skip
of later keys included."""

import dataclasses

import pytest
import torch

from damcha import build_model
from damcha.model.mechanisms import blocked
from tests.support.guide_examples import walked_variants
from tests.support.layers import config, perturbed

pytestmark = pytest.mark.usefixtures("guide_examples")  # the guide's mechanism walked too

T = 9


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(blocked, "BLOCK_ELEMENTS", 2 * 2 * 4 * T)  # 2 query rows per block at B = 2, H = 4


def loss_and_grads(model, tokens, targets, explicit):
    model.zero_grad()
    out = model(tokens, targets=targets, need_intermediates=explicit)
    out.loss.backward()
    return out.logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def paths(variant, causal, padded, seed=0):
    model = perturbed(build_model(dataclasses.replace(config(variant, causal), pad_token=10), seed=seed).double()).eval()
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 10, (2, T), generator=g)
    if padded:
        tokens[1, 6:] = 10
    targets = torch.randint(0, 10, (2, T), generator=g) if causal else torch.randint(0, 5, (2,), generator=g)
    return [loss_and_grads(model, tokens, targets, explicit) for explicit in (False, True)]


@pytest.mark.parametrize("variant", walked_variants())
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("padded", [False, True])
def test_the_fast_path_gives_the_explicit_values_and_gradients(small_blocks, variant, causal, padded):
    (fast, fast_grads), (slow, slow_grads) = paths(variant, causal, padded)
    real = slice(None) if not padded or not causal else (slice(None), slice(0, 6))
    torch.testing.assert_close(fast[real], slow[real], atol=1e-10, rtol=0)
    assert fast_grads.keys() == slow_grads.keys()
    for name in slow_grads:
        torch.testing.assert_close(fast_grads[name], slow_grads[name], atol=1e-10, rtol=0, msg=name)


@pytest.mark.parametrize("variant", walked_variants())
@pytest.mark.parametrize("causal", [True, False])
def test_gradients_reach_every_parameter(variant, causal):
    """A training step reaches every parameter of every registered variant (MoA's router and noise scale,
    DCMHA's zero-started maps, a static metric, ...), language model and classifier."""
    model = perturbed(build_model(config(variant, causal), seed=0).double())
    tokens = torch.randint(0, 11, (2, T))
    targets = tokens if causal else torch.randint(0, 5, (2,))
    model(tokens, targets=targets, stochastic=True).loss.backward()  # as in training (MoA's gating noise too)
    dead = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not dead


def test_a_block_that_forgets_the_causal_skip_is_caught(small_blocks, monkeypatch):
    """Negative control: blocks that let a query see later keys differ from the definition."""
    monkeypatch.setattr(blocked, "_block_mask", lambda allowed, causal, block, S, device: None)
    (fast, _), (slow, _) = paths("tha", True, False)
    assert (fast - slow).abs().max() > 1e-3


def test_blocks_hold_a_bounded_share_of_the_scores():
    assert blocked.block_rows(4, 8, 1024) * 4 * 8 * 1024 <= blocked.BLOCK_ELEMENTS
    assert blocked.block_rows(64, 16, 8192) == 1  # never zero rows


@pytest.mark.parametrize("variant", ["tha", "dcmha-authors", "colmha"])
def test_recomputed_blocks_draw_the_same_dropout_as_the_forward(small_blocks, monkeypatch, variant):
    """With attention dropout, a block recomputed for the backward pass must drop the same weights: the
    gradients equal those of the blocks kept whole (no recomputation)."""
    model = perturbed(build_model(dataclasses.replace(config(variant), dropout=0.3), seed=0).double())
    tokens = torch.randint(0, 10, (2, T))

    def grads():
        model.zero_grad()
        torch.manual_seed(3)
        model(tokens, targets=tokens, stochastic=True).loss.backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    recomputed = grads()
    monkeypatch.setattr(blocked, "checkpoint", lambda fn, *args, **kw: fn(*args))
    kept = grads()
    for name in kept:
        torch.testing.assert_close(recomputed[name], kept[name], atol=1e-12, rtol=0, msg=name)
