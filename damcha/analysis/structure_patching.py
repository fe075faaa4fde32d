"""Activation patching of a mechanism's own structure, for every mechanism that computes one per input:
run this input with the structure (DAMCHA's M(x), DCMHA's composition weights, MoA's router logits)
that another input of the same length produced, in one layer at a time and in all at once.

Each mechanism declares the modules that compute its structure (`Mechanism.structure_sources`); the
outputs they gave the other input are recorded by forward hooks and returned in their place on this
input. The hooks live and die inside one call, so a cached model is never left changed. Both passes
ask for the layers' internals, so every mechanism takes the path on which its sources are called
(DAMCHA's chunked inference path computes no whole metric to patch).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from damcha.analysis.heads import patch_source
from damcha.model.batching import as_model_input
from damcha.model.transformer import Transformer, build_model, sequence_losses


def structure_sites(model: Transformer) -> dict[str, list[torch.nn.Module]]:
    """Where the model's per-input structure is computed ("layer 1": its modules); empty: none."""
    return model.mechanism.structure_sources(model)


def no_structure_note(config) -> str:
    return (f"{config.mechanism.title} computes no structure from its input (its heads, and whatever mixes them, are "
            "learned weights, the same for every input): there is nothing to patch from another input.")


def structure_site_note(config) -> str | None:
    """Why structure patching does not apply to this config's mechanism (None: it does)."""
    with torch.device("meta"):  # a model built without memory, only to ask where its structure is computed
        model = build_model(config)
    return None if structure_sites(model) else no_structure_note(config)


@contextmanager
def recorded_outputs(modules: list[torch.nn.Module]) -> Iterator[dict[int, object]]:
    """Each module's output during the call inside the block, by the module's position in `modules`."""
    seen: dict[int, object] = {}
    handles = [m.register_forward_hook(lambda _m, _args, out, i=i: seen.__setitem__(i, out))
               for i, m in enumerate(modules)]
    try:
        yield seen
    finally:
        for h in handles:
            h.remove()


@contextmanager
def replaced_outputs(modules: list[torch.nn.Module], outputs: list[object]) -> Iterator[None]:
    """Inside the block, each module returns the given output instead of its own."""
    handles = [m.register_forward_hook(lambda _m, _args, _out, out=out: out) for m, out in zip(modules, outputs)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


@dataclass(frozen=True)
class StructurePatch:
    """Loss changes on this input when its structure is taken from another input, against `base`:
    at each site alone (`changes`, in `sites` order) and at every site at once (`all_sites`)."""

    sites: tuple[str, ...]
    changes: np.ndarray  # (S,), in the model's loss unit (nats or squared error)
    all_sites: float
    base: float


@torch.no_grad()
def structure_patching(model: Transformer, tokens, targets, other) -> StructurePatch:
    """The loss on `tokens` with the mechanism's structure computed from `other` instead (an input of
    the same length, or for a causal model its first T positions), site by site and everywhere;
    raises ValueError where there is nothing to patch."""
    sites = structure_sites(model)
    if not sites:
        raise ValueError(no_structure_note(model.config))
    cfg = model.config
    weight = next(model.parameters())
    x, y, ref = (as_model_input(v, cfg, weight.device) for v in (tokens, targets, other))  # (1, T[, P]) each
    x, y, ref = ((v.to(weight.dtype) if v.is_floating_point() else v) for v in (x, y, ref))
    ref = patch_source(ref, x, cfg.causal)  # (1, T[, P]): a causal model's longer input cut to T
    y = y[:, 0] if cfg.n_classes else y

    def loss() -> float:
        out = model(x, targets=y, need_intermediates=True, stochastic=False)
        return float(sequence_losses(out.token_loss, y)[0])

    modules = [m for site in sites.values() for m in site]
    with recorded_outputs(modules) as seen:
        model(ref, need_intermediates=True, stochastic=False)
    outputs = [seen[i] for i in range(len(modules))]
    base = loss()
    changes, start = [], 0
    for site in sites.values():
        with replaced_outputs(site, outputs[start:start + len(site)]):
            changes.append(loss() - base)
        start += len(site)
    with replaced_outputs(modules, outputs):
        everywhere = loss() - base
    return StructurePatch(tuple(sites), np.asarray(changes), everywhere, base)
