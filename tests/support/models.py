"""Tiny models of every registered variant and the calls the tests make of them."""

import dataclasses

import torch

from damcha import ModelConfig, build_model, variant_config, variant_names
from damcha.model.config import split_fields
from damcha.model.mechanisms.damcha.layer import metric_sources

# Variants from the registry, never a hand-kept list: every registered one, and those whose
# mechanism scores with a metric M (the tests of the metric paths).
ALL_VARIANTS = variant_names()
METRIC_VARIANTS = tuple(v for v in ALL_VARIANTS if (c := variant_config(ModelConfig(), v)).mechanism.metric(c) is not None)


def tiny_config(variant: str = "damcha", causal: bool = True, **overrides) -> ModelConfig:
    """overrides: ModelConfig fields, and settings of the variant's mechanism (those another mechanism does not
    have are left out: generator_dropout=0.2 asks every variant with an f for dropout inside it)."""
    base = ModelConfig(
        vocab_size=11, block_size=16, n_layer=2, n_head=4, n_embd=16, attention_options={"generator_widths": (16, 24)},
        causal=causal, n_classes=0 if causal else 5,
    )
    config = variant_config(base, variant)
    fields, settings = split_fields(overrides)
    return dataclasses.replace(config, **fields).with_settings(
        **{k: v for k, v in settings.items() if k in config.mechanism.config_options})


def tiny_model(variant: str = "damcha", causal: bool = True, seed: int = 0, dtype=torch.float64, **overrides):
    """A small float64 model in evaluation mode: its forward is deterministic (no dropout, no MoA gating
    noise), as the properties tested of it assume."""
    model = build_model(tiny_config(variant, causal, **overrides), seed=seed).to(dtype).eval()
    if model.mechanism.metric(model.config) == "static":  # an identity metric hides block mix-ups; perturb it
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed + 1)
            for src in metric_sources(model):
                src.generator.weight.add_(0.3 * torch.randn_like(src.generator.weight))
    return model


def opts(model, mode="full", explicit=False):
    """The forward options of a call: DAMCHA's metric mode and explicit path; other mechanisms take
    only the full model (asking them for another metric mode is an error)."""
    own = {f.name for f in dataclasses.fields(model.mechanism.options_type)}
    return model.mechanism.options_from({"metric_mode": mode, **({"explicit": explicit} if "explicit" in own else {})})


def logits_and_grads(model, tokens, targets, mode, explicit):
    """One forward and backward: the logits and every parameter's gradient (cloned)."""
    model.zero_grad()
    out = model(tokens, targets=targets, options=opts(model, mode, explicit))
    out.loss.backward()
    return out.logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def train_copy_task(model, steps=300, lr=3e-3, weight_decay=0.0):
    """Adam on a learnable toy task (predict the next token of random ones), deterministic batches."""
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        tokens = torch.randint(0, 11, (8, 12), generator=gen)
        targets = torch.roll(tokens, -1, dims=1)  # a learnable toy task: copy the next token
        opt.zero_grad()
        model(tokens, targets=targets, stochastic=False).loss.backward()
        opt.step()
