"""Talking-Heads Attention (Shazeer, Lan, Cheng, Ding, Hou 2020, arXiv 2003.02436).

Per head h the logits are J_h = Q_h K_h^T / sqrt(d). They are mixed across heads before the
softmax by a learned H x H matrix P_l, L_h' = sum_h J_h P_l[h, h'], masked and normalised over
keys, then mixed again after it by P_w: W_h'' = sum_h' softmax(L_h') P_w[h', h''], and head h''
returns W_h'' V_h''. P_l and P_w are static (the same for every input); the mixed weights can be
negative and need not sum to one. No fused attention kernel applies: outside inspection the scores
are computed a block of queries at a time (damcha.model.mechanisms.blocked), never whole.

Initialisation: the original draws P_l and P_w at random (variance scaling: normal with
variance 1/H, the fan-in); the DAMCHA authors' code starts from the identity, where THA is MHA.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from damcha.model.mechanisms.base import AttentionOutput, ForwardOptions, Intervention, LayerCall, Mechanism, Setting
from damcha.model.mechanisms.blocked import blocked_attention
from damcha.model.mechanisms.operations import ProjectedAttention, allowed_keys, head_scale, masked_softmax
from damcha.model.mechanisms.structures import Identifiability, Structure, StructureKind, ValueKind

INITS = ("random", "identity")


@dataclass(frozen=True)
class TalkingHeadsOptions(ForwardOptions):
    """Interventions: replace the logits mixing P_l, or the weights mixing P_w, by the identity."""

    identity_logits_mix: bool = False
    identity_weights_mix: bool = False


def mix_heads(scores: torch.Tensor, mix: torch.Tensor) -> torch.Tensor:
    """out[g] = sum_h mix[h, g] scores[h] for scores (B, H, n, S): one small matrix product. (B, H, n, S)"""
    B, H, n, S = scores.shape
    return (mix.transpose(0, 1) @ scores.reshape(B, H, n * S)).view(B, H, n, S)


class TalkingHeadsAttention(ProjectedAttention):
    def __init__(self, config, init: str):
        super().__init__(config)
        H = config.n_head
        if init == "identity":
            self.logits_mix = nn.Parameter(torch.eye(H))  # P_l (H, H)
            self.weights_mix = nn.Parameter(torch.eye(H))  # P_w (H, H)
        else:
            self.logits_mix = nn.Parameter(torch.randn(H, H) / H**0.5)
            self.weights_mix = nn.Parameter(torch.randn(H, H) / H**0.5)

    def forward(self, x: torch.Tensor, call: LayerCall[TalkingHeadsOptions]) -> AttentionOutput:
        mask, causal, options = call.mask, call.causal, call.options
        need_weights, stochastic = call.need_weights, call.stochastic
        H, d = self.n_head, self.head_dim
        q, k, v = (self.heads(p, x) for p in (self.query, self.key, self.value))  # (B, H, T, d) each
        p_l = torch.eye(H, dtype=x.dtype, device=x.device) if options.identity_logits_mix else self.logits_mix
        p_w = torch.eye(H, dtype=x.dtype, device=x.device) if options.identity_weights_mix else self.weights_mix
        if not need_weights:
            out = blocked_attention(q, k, v, allowed_keys(mask, causal, x.shape[1], x.device), causal, head_scale(d),
                                    lambda J, rows: mix_heads(J, p_l), lambda P, rows: mix_heads(P, p_w),
                                    self.dropout if stochastic else 0.0)  # (B, H, T, d)
            return AttentionOutput(y=self.merge(out))
        logits = (q @ k.transpose(-2, -1)) * head_scale(d)  # (B, H, T, T) J_h
        mixed = torch.einsum("bhts,hg->bgts", logits, p_l)  # (B, H, T, T) L_h'
        probs = masked_softmax(mixed, mask, causal)  # (B, H, T, T)
        weights = torch.einsum("bhts,hg->bgts", probs, p_w)  # (B, H, T, T) W_h''
        y = self.merge(self.weighted(weights, v, stochastic))  # (B, T, D)
        internals = {"unmixed": masked_softmax(logits, mask, causal)} if need_weights else None
        return AttentionOutput(y=y, weights=weights if need_weights else None, internals=internals)


class TalkingHeads(Mechanism):
    name = "tha"
    title = "Talking-heads attention (THA)"
    reference = "Shazeer et al. 2020, arXiv 2003.02436"
    rotary_positions = False  # it mixes the heads' scores in steps of its own
    declared_settings = (Setting("tha_init", str, "random", "how P_l and P_w start: drawn at random (the original) "
                                 "or the identity (the DAMCHA authors' code)", INITS),)
    options_type = TalkingHeadsOptions
    signed_attention = True  # P_w mixes the weights after the softmax

    def interventions(self, config) -> list[Intervention]:
        return [
            Intervention("identity_logits_mix", "P_l replaced by the identity", "No mixing of the logits before the "
                         "softmax.", make=lambda model, tokens: TalkingHeadsOptions(identity_logits_mix=True)),
            Intervention("identity_weights_mix", "P_w replaced by the identity", "No mixing of the weights after the "
                         "softmax.", make=lambda model, tokens: TalkingHeadsOptions(identity_weights_mix=True)),
            Intervention("no_talking", "Both replaced by the identity (MHA)", "The same projections without any "
                         "talking: standard MHA.",
                         make=lambda model, tokens: TalkingHeadsOptions(identity_logits_mix=True, identity_weights_mix=True)),
        ]

    def build_layer(self, config, layer_index: int) -> nn.Module:
        return TalkingHeadsAttention(config, config.setting("tha_init"))


    def settings(self, config) -> dict:
        return {"initialisation": config.setting("tha_init")}

    def structures(self, model, layers: Sequence, positions: np.ndarray, options) -> list[Structure]:
        p_l = np.stack([b.attn.logits_mix.detach().cpu().numpy() for b in model.blocks])  # (L, H, H)
        p_w = np.stack([b.attn.weights_mix.detach().cpu().numpy() for b in model.blocks])  # (L, H, H)
        unmixed = np.stack([layer.internals["unmixed"][0].cpu().numpy() for layer in layers])  # (L, H, T, T)
        axes = ("layer", "head_in", "head_out")
        mix: dict[str, Any] = dict(axis_titles={"head_in": "from head h", "head_out": "to head h′"}, unit="weight")
        return [
            Structure("logits_mix", "Logits mixing P_l", p_l, axes, StructureKind.HEAD_BY_HEAD,
                      "Row h, column h': how much head h's logits feed head h' before the softmax. The same for "
                      "every input.", Identifiability.LEARNED, **mix),
            Structure("weights_mix", "Weights mixing P_w", p_w, axes, StructureKind.HEAD_BY_HEAD,
                      "Row h', column h'': how much head h''s attention weights feed head h'' after the softmax.",
                      Identifiability.LEARNED, **mix),
            Structure("unmixed_attention", "Attention before mixing", unmixed, ("layer", "head", "query", "key"),
                      StructureKind.ATTENTION_MAPS, "softmax(Q_h K_hᵀ / √d) of each head, as MHA would compute it "
                      "with these projections; the Attention tab shows the mixed weights that multiply V.",
                      Identifiability.LEARNED, value_kind=ValueKind.PROBABILITY, unit="weight"),
        ]

    def notes(self, config) -> list[str]:
        return ["Talking heads mix the heads' logits before the softmax (P_l) and their weights after it (P_w), "
                "with the same matrices for every input; the mixed weights may be negative and need not sum to one."]
