"""Mixed Multi-Head Self-Attention (Cui, Iida, Hung, Utsuro, Nagata, WNGT 2019, ACL Anthology D19-5622).

MHA whose heads are split into four types by fixed masks: global (every allowed key), local (keys
within a window of w tokens around the query, |t - s| <= w // 2), forward (keys at or before the
query) and backward (keys at or after the query). No extra parameters; the cost is MHA's: without
padding each run of heads of one type is one fused attention call in its cheapest form (a causal
flag, causal attention over the reversed sequence, a band mask); with padding one call with
per-head boolean masks.

Every type is intersected with the model's own masks. In a causal decoder that makes forward heads
equal to global heads and leaves backward heads only the query itself; the non-causal classifier
is where the four types differ. The DAMCHA authors' MMAAttention (models/baselines.py at commit
ffa99807) does the same: its backward mask (keys at or after the query) is added to the decoder's
causal mask, so its backward heads, too, see only the query itself. Their local window differs:
keys t - 7 .. t (a one-sided window of 8), where the original's is centred (|t - s| <= w // 2).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from damcha.model.mechanisms.base import AttentionOutput, ForwardOptions, Intervention, LayerCall, Mechanism, Setting
from damcha.model.mechanisms.operations import ProjectedAttention, attend, head_scale
from damcha.model.mechanisms.structures import Identifiability, Structure, StructureKind, ValueKind

TYPES = ("global", "local", "forward", "backward")


@dataclass(frozen=True)
class MixedOptions(ForwardOptions):
    """Intervention: the heads of type `as_global` see every allowed key, like global heads."""

    as_global: str = ""


def head_types(n_head: int) -> list[int]:
    """Type index of each head: the heads are dealt out in blocks, as evenly as H allows."""
    return [min(h * len(TYPES) // n_head, len(TYPES) - 1) for h in range(n_head)]


def type_masks(T: int, window: int, device=None) -> torch.Tensor:
    """(4, T, T) allowed (query, key) pairs of each head type, before the model's own masks."""
    t = torch.arange(T, device=device)
    offset = t[None, :] - t[:, None]  # (T, T): key - query
    return torch.stack([torch.ones(T, T, dtype=torch.bool, device=device), local_band(T, window, device),
                        offset <= 0, offset >= 0])


def local_band(T: int, window: int, device=None) -> torch.Tensor:
    """(T, T) the keys a local head may see: within window // 2 of the query."""
    t = torch.arange(T, device=device)
    return (t[None, :] - t[:, None]).abs() <= window // 2


def head_masks(real: torch.Tensor | None, causal: bool, T: int, window: int, n_head: int,
               device=None, as_global: str = "") -> torch.Tensor:
    """(B|1, H, T, T) allowed pairs per head: its type's pattern and the causal and padding masks.
    A query left with no key attends to itself (never the case for a real query: it sees itself).
    as_global: a type whose heads get the global pattern instead (an intervention)."""
    types = [0 if as_global and TYPES[t] == as_global else t for t in head_types(n_head)]
    allowed = type_masks(T, window, device)[types][None]  # (1, H, T, T)
    if causal:
        allowed = allowed & torch.ones(T, T, dtype=torch.bool, device=device).tril()
    if real is not None:
        allowed = allowed & real[:, None, None, :]  # (B, H, T, T)
    eye = torch.eye(T, dtype=torch.bool, device=device)
    return allowed | (~allowed.any(dim=-1, keepdim=True) & eye)


class MixedAttention(ProjectedAttention):
    def __init__(self, config, window: int):
        super().__init__(config)
        self.window = window

    def forward(self, x: torch.Tensor, call: LayerCall[MixedOptions]) -> AttentionOutput:
        real, causal, options = call.real, call.causal, call.options
        need_weights, stochastic = call.need_weights, call.stochastic
        q, k, v = (self.heads(p, x) for p in (self.query, self.key, self.value))  # (B, H, T, d) each
        if real is None and not need_weights:
            return AttentionOutput(y=self.merge(self._by_type(q, k, v, causal, options, stochastic)))
        masks = head_masks(real, causal, x.shape[1], self.window, self.n_head, x.device, options.as_global)  # (B|1, H, T, T)
        out, weights = attend(q, k, v, masks, False, head_scale(self.head_dim), self.dropout if stochastic else 0.0,
                              need_weights, call.site, call.rotary)  # (B, H, T, d)
        return AttentionOutput(y=self.merge(out), weights=weights, internals=masks if need_weights else None)

    def _by_type(self, q, k, v, causal: bool, options: MixedOptions, stochastic: bool) -> torch.Tensor:
        """The head outputs (B, H, T, d) without padding: one fused call per run of heads of one type,
        each with the cheapest form of its pattern (a causal flag, the reversed sequence, a band mask)."""
        T = q.shape[2]
        types = [0 if options.as_global and TYPES[t] == options.as_global else t for t in head_types(self.n_head)]
        dropout, scale = self.dropout if stochastic else 0.0, head_scale(self.head_dim)

        def call(a, b, c, mask=None, is_causal=False):
            return F.scaled_dot_product_attention(a, b, c, attn_mask=mask, dropout_p=dropout, is_causal=is_causal,
                                                  scale=scale)  # (B, h, T, d)

        outs = []
        for kind, heads in _runs(types):
            qs, ks, vs = q[:, heads], k[:, heads], v[:, heads]  # (B, h, T, d) each
            name = TYPES[kind]
            if name == "global" or (name == "forward" and causal):  # a causal model's forward heads are global ones
                outs.append(call(qs, ks, vs, is_causal=causal))
            elif name == "forward":
                outs.append(call(qs, ks, vs, is_causal=True))
            elif name == "backward" and causal:  # keys at and after the query, and at and before it: itself
                keep = F.dropout(torch.ones_like(vs[..., :1]), dropout) if dropout > 0 else 1.0  # its weight, 1
                outs.append(vs * keep)
            elif name == "backward":  # causal attention over the reversed sequence
                outs.append(call(qs.flip(2), ks.flip(2), vs.flip(2), is_causal=True).flip(2))
            else:
                band = local_band(T, self.window, q.device)  # (T, T)
                outs.append(call(qs, ks, vs, mask=band.tril() if causal else band))
        return torch.cat(outs, dim=1)  # (B, H, T, d)


def _runs(types: list[int]) -> list[tuple[int, slice]]:
    """The heads as consecutive runs of one type: (type, slice of heads)."""
    runs, start = [], 0
    for h in range(1, len(types) + 1):
        if h == len(types) or types[h] != types[start]:
            runs.append((types[start], slice(start, h)))
            start = h
    return runs


def _window(config) -> int:
    return int(config.setting("mma_window"))


class MMA(Mechanism):
    name = "mma"
    title = "Mixed multi-head self-attention (MMA)"
    reference = "Cui et al., WNGT 2019, ACL Anthology D19-5622"
    rotary_positions = False  # its fused path attends over windows with a kernel of its own
    declared_settings = (Setting("mma_window", int, 5, "keys on each side a local head sees", minimum=1),)
    options_type = MixedOptions

    def interventions(self, config) -> list[Intervention]:
        present = sorted(set(head_types(config.n_head)))
        return [Intervention(f"{TYPES[t]}_as_global", f"{TYPES[t].capitalize()} heads turned global",
                             f"The {TYPES[t]} heads see every allowed key.",
                             make=lambda model, tokens, name=TYPES[t]: MixedOptions(as_global=name))
                for t in present if TYPES[t] != "global"]

    def build_layer(self, config, layer_index: int) -> nn.Module:
        return MixedAttention(config, _window(config))



    def settings(self, config) -> dict:
        types = head_types(config.n_head)
        return {"local window": _window(config), "head types": ", ".join(TYPES[t] for t in types)}

    def structures(self, model, layers: Sequence, positions: np.ndarray, options) -> list[Structure]:
        H = model.config.n_head
        types = head_types(H)
        masks = layers[0].internals[0].cpu().numpy()  # (H, T, T): the same in every layer
        one_hot = np.eye(len(TYPES))[types]  # (H, 4)
        present = sorted(set(types))
        by_type = np.stack([np.stack([layer.weights[0, [h for h in range(H) if types[h] == t]].mean(0).cpu().numpy()
                                      for t in present]) for layer in layers])  # (L, types, T, T)
        return [
            Structure("head_masks", "Keys each head may see", masks, ("head", "query", "key"), StructureKind.MASK_PATTERN,
                      "Its type's pattern intersected with the causal and padding masks"
                      + (": in a causal decoder forward heads equal global ones and backward heads see only the query."
                         if model.config.causal else "."), Identifiability.FIXED, value_kind=ValueKind.MASK,
                      unit="allowed",
                      labels={"head": [f"head {h + 1}: {TYPES[t]}" for h, t in enumerate(types)]}),
            Structure("head_types", "Head types", one_hot, ("head", "type"), StructureKind.MATRIX,
                      "Which type each head is (fixed by its index).", Identifiability.FIXED,
                      value_kind=ValueKind.MASK, unit="is of type",
                      labels={"head": [f"head {h + 1}" for h in range(H)], "type": list(TYPES)}),
            Structure("attention_by_type", "Attention per head type", by_type, ("layer", "type", "query", "key"),
                      StructureKind.ATTENTION_MAPS, "The attention of the heads of each type, averaged over them.",
                      Identifiability.LEARNED, labels={"type": [TYPES[t] for t in present]},
                      value_kind=ValueKind.PROBABILITY, unit="weight"),
        ]

    def notes(self, config) -> list[str]:
        if config.causal:
            return ["MMA in a causal decoder: every head type is intersected with the causal mask, so forward "
                    "heads equal global heads and backward heads can only see the query itself. The four types "
                    "differ only in a non-causal model (the classifier)."]
        return ["MMA: heads of four fixed types (global, local, forward, backward); no extra parameters."]
