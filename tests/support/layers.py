"""Small configs of one head layout, perturbed models and the loop-by-loop pieces the tests
recompute attention layers with (masks, softmax rows, a linear layer in numpy)."""

import dataclasses

import numpy as np
import torch

from damcha import ModelConfig, build_model, variant_config

H, D, d = 4, 16, 4


def config(variant, causal=True, **kw):
    base = ModelConfig(vocab_size=11, block_size=12, n_layer=2, n_head=H, n_embd=D, causal=causal,
                       n_classes=0 if causal else 5)
    return dataclasses.replace(variant_config(base, variant), **kw)


def perturbed(model, seed=1, scale=0.3):
    """Move every parameter off its initial value, so zero-initialised parts (DCMHA's w2, dd) matter; in
    evaluation mode, so its forward is deterministic (no dropout, no MoA gating noise)."""
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for p in model.parameters():
            p.add_(scale * torch.randn_like(p))
    return model.eval()


def allowed(real, causal, T):
    """allowed[b, t, s] as attention_mask defines it (a query that sees nothing sees itself)."""
    a = np.zeros((len(real), T, T), dtype=bool)
    for b in range(len(real)):
        for t in range(T):
            for s in range(T):
                a[b, t, s] = real[b][s] and (s <= t or not causal)
            if not a[b, t].any():
                a[b, t, t] = True
    return a


def softmax_rows(z, ok):
    z = np.where(ok, z, -np.inf)
    z = z - z.max()
    e = np.exp(z)
    return e / e.sum()


def lin(layer, x):
    w = layer.weight.detach().numpy()
    return x @ w.T + (layer.bias.detach().numpy() if layer.bias is not None else 0)


def mha_twin(variant, causal=True, seed=0, **kw):
    """A model of `variant` and an MHA model with the same embeddings, MLPs and projections."""
    model = build_model(config(variant, causal, **kw), seed=seed).double()
    mha = build_model(config("mha", causal), seed=seed + 7).double()
    state = {k: v for k, v in model.state_dict().items() if k in mha.state_dict()}
    missing = set(mha.state_dict()) - set(state)
    return model, mha, state, missing
