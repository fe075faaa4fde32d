"""Head-level interventions for every mechanism, as TransformerLens users run them: zero- and
mean-ablation of one head's output, and activation patching of a head's output from another input.

Each mechanism declares where its heads meet (`Mechanism.head_output_site`: the module whose input
is the H head outputs side by side); the interventions act there through a forward pre-hook that
lives and dies inside one call, so a cached model is never left changed. A mechanism whose heads do
not meet that way says why (`head_site_note`) and is measured through its own interventions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from damcha.model.batching import as_model_input
from damcha.model.transformer import IGNORE_INDEX, Transformer, sequence_losses

HEAD_KINDS = {"zero": "zero (zero-ablation)",
              "mean": "one vector: its mean over validation inputs and all their positions (mean-ablation)",
              "mean_position": "its mean over validation inputs at the same position (per-position mean-ablation)",
              "patch": "its value on another input (patching)"}
HEAD_TITLES = {"zero": "zero-ablation", "mean": "mean-ablation (over inputs and positions)",
               "mean_position": "mean-ablation per position (over inputs)", "patch": "patching"}
MEAN_KINDS = ("mean", "mean_position")
KINDS = tuple(HEAD_KINDS)


def head_site_note(config) -> str | None:
    """Why head-level interventions do not apply to this config's mechanism (None: they do)."""
    with torch.device("meta"):  # a layer built without memory, only to ask where its heads meet
        layer = config.mechanism.build_layer(config, 0)
    return None if config.mechanism.head_output_site(layer, config) is not None else config.mechanism.head_site_note(config)


def head_sites(model: Transformer) -> list[torch.nn.Linear] | None:
    """One head-output site per layer, or None when the mechanism declares none."""
    found = [model.mechanism.head_output_site(block.get_submodule("attn"), model.config) for block in model.blocks]
    sites = [s for s in found if s is not None]
    return sites if len(sites) == len(found) else None


def head_columns(head: int, width: int) -> slice:
    """Where head `head`'s output lies among the H outputs side by side, each `width` wide."""
    return slice(head * width, (head + 1) * width)


@contextmanager
def replaced_head(site: torch.nn.Module, head: int, n_head: int, value: Callable[[torch.Tensor], torch.Tensor]
                  ) -> Iterator[None]:
    """Inside the block, head `head`'s slice of the site's input is replaced by value(slice)."""
    def hook(_module, args):
        (x, *rest) = args  # (B, T, H · w)
        w = x.shape[-1] // n_head
        x = x.clone()
        x[..., head_columns(head, w)] = value(x[..., head_columns(head, w)])  # (B, T, w)
        return (x, *rest)

    handle = site.register_forward_pre_hook(hook)
    try:
        yield
    finally:
        handle.remove()


@contextmanager
def recorded_inputs(sites: Sequence[torch.nn.Module]) -> Iterator[list[torch.Tensor]]:
    """The input of each site during the calls inside the block, in layer order."""
    seen: list[torch.Tensor] = [None] * len(sites)  # type: ignore[list-item]
    handles = [s.register_forward_pre_hook(lambda _m, args, i=i: seen.__setitem__(i, args[0].detach()))
               for i, s in enumerate(sites)]
    try:
        yield seen
    finally:
        for h in handles:
            h.remove()


def patch_source(other: torch.Tensor, x: torch.Tensor, causal: bool) -> torch.Tensor:
    """The input a patch is taken from, shaped as this input x (1, T[, P]). A causal model's values at
    the first T positions see only those positions, so a longer `other` is cut to its first T; any
    other length mismatch is refused."""
    other = other.reshape(1, -1, *x.shape[2:])  # (1, T'[, P])
    if causal and other.shape[1] > x.shape[1]:
        other = other[:, :x.shape[1]]
    if other.shape != x.shape:
        raise ValueError(f"patching needs inputs of one length ({other.shape[1]} and {x.shape[1]} positions"
                         + ("" if causal else "; this model is not causal, so a longer input cannot be cut") + ")")
    return other


def sequence_loss(model: Transformer, tokens: torch.Tensor, targets: torch.Tensor) -> float:
    """The model's loss on one input (the mean over positions with a target; nats or squared error)."""
    return float(sequence_losses(model(tokens, targets=targets, stochastic=False).token_loss, targets)[0])


@dataclass(frozen=True)
class HeadEffects:
    """Loss change (L, H) when each head's output is replaced as `kind` says, against `base`."""

    kind: str
    changes: np.ndarray  # (L, H), in the model's loss unit (nats or squared error)
    base: float


def per_position_reference(ref: torch.Tensor, x: torch.Tensor, causal: bool) -> torch.Tensor:
    """The references whose outputs are averaged position by position for input x: of x's length (a causal
    model's references cut to it, its first positions unchanged by what follows); refused in words otherwise."""
    T, T_ref = x.shape[1], ref.shape[1]
    if T_ref == T:
        return ref
    if causal and T_ref > T:
        return ref[:, :T]
    raise ValueError(f"a per-position mean needs validation inputs of this input's length ({T}); they have {T_ref}"
                     + ("" if causal else " (a non-causal model's positions depend on the whole input)")
                     + ": use the mean over inputs and positions")


@torch.no_grad()
def head_effects(model: Transformer, tokens, targets, kind: str, reference=None) -> HeadEffects:
    """For every layer and head: the loss on this input with that head's output zeroed ('zero'),
    set to one vector, its mean over `reference` inputs and all their positions ('mean'), set position by
    position to its mean over `reference` inputs at that position ('mean_position': the references must
    reach this input's length; a causal model's first positions are taken), or taken from the `reference`
    input, which must have this input's length ('patch')."""
    if kind not in KINDS:
        raise ValueError(f"unknown head intervention {kind!r}; expected one of {KINDS}")
    sites = head_sites(model)
    if sites is None:
        raise ValueError(model.mechanism.head_site_note(model.config))
    cfg = model.config
    weight = next(model.parameters())
    x, y = (as_model_input(v, cfg, weight.device) for v in (tokens, targets))  # (1, T[, P]) each
    x, y = ((v.to(weight.dtype) if v.is_floating_point() else v) for v in (x, y))
    y = y[:, 0] if cfg.n_classes else y
    device = weight.device
    base = sequence_loss(model, x, y)
    H = cfg.n_head
    replacement = None
    if kind in ("patch", *MEAN_KINDS):
        if reference is None:
            raise ValueError(f"'{kind}' needs reference inputs")
        ref = torch.as_tensor(np.asarray(reference), dtype=x.dtype, device=device)
        if kind == "patch":
            ref = patch_source(ref, x, cfg.causal)  # (1, T[, P])
        if kind == "mean_position":
            ref = per_position_reference(ref, x, cfg.causal)  # (B', T[, P])
        with recorded_inputs(sites) as seen:
            model(ref, stochastic=False)
        replacement = [s if kind == "patch" else s.mean(dim=(0, 1) if kind == "mean" else 0, keepdim=True)
                       for s in seen]  # (1, T or 1, H·w)
    changes = np.zeros((len(sites), H))
    for layer, site in enumerate(sites):
        for head in range(H):
            value: Callable[[torch.Tensor], torch.Tensor]
            if kind == "zero" or replacement is None:  # (every other kind recorded a replacement above)
                value = torch.zeros_like
            else:
                w = replacement[layer].shape[-1] // H
                source = replacement[layer][..., head_columns(head, w)]  # (1, T or 1, w)

                def value(part: torch.Tensor, source: torch.Tensor = source) -> torch.Tensor:
                    return source.expand_as(part)
            with replaced_head(site, head, H, value):
                changes[layer, head] = sequence_loss(model, x, y) - base
    return HeadEffects(kind, changes, base)


def logit_path_note(config) -> str | None:
    """Why a head's direct path to the answer's logit is not a linear map in this config (None: it is)."""
    if config.input_dim or config.norm_placement != "pre":
        return ("direct logit attribution needs a pre-LN model with a token or class head "
                "(this model predicts vectors or normalises after every block)")
    return None


@torch.no_grad()
def direct_logit_attribution(model: Transformer, tokens, targets) -> np.ndarray:
    """(L, H) each head's direct contribution to the logit of the right answer, in logits: its output
    through its columns of the output projection (no bias), then through the final LayerNorm with the
    scale frozen at the whole residual's (TransformerLens's convention), then the answer's row of the
    head; the mean over positions with a target (next token), or through the pooling (classifier).
    Defined where the path from the residual to the logits is that linear map: a pre-LN model with a
    token or class head (a vector head predicts no logits; post-LN models normalise in every block)."""
    cfg = model.config
    why = logit_path_note(cfg)
    if why:
        raise ValueError(why)
    sites = head_sites(model)
    if sites is None:
        raise ValueError(model.mechanism.head_site_note(cfg))
    weight = next(model.parameters())
    x = as_model_input(tokens, cfg, weight.device)  # (1, T)
    norm_input: list[torch.Tensor] = []
    handle = model.ln_f.register_forward_pre_hook(lambda _m, args: norm_input.append(args[0].detach()))
    try:
        with recorded_inputs(sites) as z:
            model(x, stochastic=False)
    finally:
        handle.remove()
    resid = norm_input[0][0]  # (T, D): the residual the final norm reads
    if isinstance(model.ln_f, torch.nn.LayerNorm):
        sigma = (resid.var(dim=-1, unbiased=False, keepdim=True) + model.ln_f.eps).sqrt()  # (T, 1), frozen
        gamma = model.ln_f.weight if model.ln_f.weight is not None else torch.ones_like(resid[0])

        def through_norm(c):  # (T, D) -> (T, D): the final norm's linear part at the frozen scale
            return (c - c.mean(dim=-1, keepdim=True)) / sigma * gamma
    else:
        def through_norm(c):
            return c
    if cfg.n_classes:
        answer = int(np.asarray(targets).reshape(-1)[0])
        read = model.head.weight[answer].expand(len(resid), -1) / len(resid)  # (T, D): mean pooling, then the row
        weights = torch.ones(len(resid), dtype=resid.dtype, device=resid.device)
    else:
        y = torch.as_tensor(np.asarray(targets), dtype=torch.long, device=resid.device).reshape(-1)  # (T,)
        known = y != IGNORE_INDEX
        read = model.head.weight[y.clamp_min(0)]  # (T, D): the right next token's row at each position
        weights = known.to(resid.dtype) / known.sum().clamp_min(1)
    H = cfg.n_head
    out = np.zeros((len(sites), H))
    for layer, (site, zl) in enumerate(zip(sites, z)):
        w = site.in_features // H
        for head in range(H):
            cols = head_columns(head, w)
            c = zl[0, :, cols] @ site.weight[:, cols].T  # (T, D)
            per_position = (through_norm(c) * read).sum(-1)  # (T,)
            out[layer, head] = float((per_position * weights).sum())
    return out
