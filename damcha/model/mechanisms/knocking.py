"""Knocking-Heads attention (Zhou et al., arXiv 2510.23052), in the forms this project compares: MHA
whose per-head values (and, as a setting, queries and keys) pass through a small map shared by every
head of the layer before attention.

Linear (`knock_form=linear`, the default):

    v'_h(t) = v_h(t) K_V   (likewise q'_h = q_h K_Q, k'_h = k_h K_K with `knock_targets=qkv`),

each K a d x d matrix started at the identity (the diagonal initialisation), where the layer is MHA.
MLP on the values (`knock_form=mlp`, the paper's preferred variant): a gated up/down projection
shared by the heads, added to the value,

    v'_h(t) = v_h(t) + (SiLU(v_h(t) W_gate) * (v_h(t) W_up)) W_down,

W_gate and W_up (d x d) started at the identity (diagonal), W_down at zero, so again the layer starts
as MHA; queries and keys keep the linear map under `knock_targets=qkv`.

It shares parameters across heads without mixing their data: head h's output still depends only on
head h's own projections. A control for the mechanisms that do mix heads (THA, DCMHA, IHA, DAMCHA):
the same kind of small extra parameters, no cross-head data flow. Where the paper's text was not
available to us (its abstract and a summary of its equations): no bias; the identity as the
diagonal start; the MLP's hidden width d, its activation SiLU and its residual form (our reading
of "gated up/down projection with a diagonal/zero start").
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
from damcha.model.mechanisms.structures import Identifiability, Structure, StructureKind

TARGETS = ("v", "qkv")
FORMS = ("linear", "mlp")


@dataclass(frozen=True)
class KnockOptions(ForwardOptions):
    """Intervention: without_knock puts the identity in place of the shared matrices (MHA)."""

    without_knock: bool = False


class ValueMLP(nn.Module):
    """v + (SiLU(v W_gate) * (v W_up)) W_down on each head's value (d wide), shared by the heads; MHA at the start."""

    def __init__(self, d: int):
        super().__init__()
        self.gate, self.up = nn.Parameter(torch.eye(d)), nn.Parameter(torch.eye(d))  # W_gate, W_up (d, d): diagonal
        self.down = nn.Parameter(torch.zeros(d, d))  # W_down (d, d): zero

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        return v + (F.silu(v @ self.gate) * (v @ self.up)) @ self.down  # (B, H, T, d)


class KnockingHeadsAttention(ProjectedAttention):
    def __init__(self, config, targets: str, form: str = "linear"):
        super().__init__(config)
        d = config.head_dim
        self.targets = targets
        linear = targets if form == "linear" else targets.replace("v", "")
        self.knock = nn.ParameterDict({t: nn.Parameter(torch.eye(d)) for t in linear})  # K_t (d, d), shared by heads
        self.value_mlp = ValueMLP(d) if form == "mlp" else None

    def forward(self, x: torch.Tensor, call: LayerCall[KnockOptions]) -> AttentionOutput:
        mask, causal, options = call.mask, call.causal, call.options
        need_weights, stochastic = call.need_weights, call.stochastic
        q, k, v = (self.heads(p, x) for p in (self.query, self.key, self.value))  # (B, H, T, d) each
        if not options.without_knock:
            knocked = {"q": q, "k": k, "v": v}
            for t, K in self.knock.items():
                knocked[t] = knocked[t] @ K  # (B, H, T, d): the same K for every head
            if self.value_mlp is not None:
                knocked["v"] = self.value_mlp(knocked["v"])  # (B, H, T, d): the same MLP for every head
            q, k, v = knocked["q"], knocked["k"], knocked["v"]
        out, weights = attend(q, k, v, mask, causal, head_scale(self.head_dim), self.dropout if stochastic else 0.0,
                              need_weights, call.site, call.rotary)  # (B, H, T, d)
        return AttentionOutput(y=self.merge(out), weights=weights)


class KnockingHeads(Mechanism):
    rotary_positions = True  # every score goes through the shared attend step, call.rotary passed on
    name = "knocking"
    title = "Knocking-heads attention (shared per-head matrices)"
    reference = "Zhou et al., arXiv 2510.23052"
    declared_settings = (
        Setting("knock_targets", str, "v", "what the shared matrix acts on: values, or queries, keys and values (one "
                "matrix each)", TARGETS),
        Setting("knock_form", str, "linear", "the shared map on the values: linear (a d×d matrix) or mlp (the paper's "
                "gated up/down projection, diagonal/zero start)", FORMS),
    )
    options_type = KnockOptions

    def build_layer(self, config, layer_index: int) -> nn.Module:
        return KnockingHeadsAttention(config, config.setting("knock_targets"), config.setting("knock_form"))

    def interventions(self, config) -> list[Intervention]:
        return [Intervention("without_knock", "Identity in place of the shared matrices (MHA)", "Each head's "
                             "projections used as they are.", make=lambda model, tokens: KnockOptions(without_knock=True))]

    def settings(self, config) -> dict:
        return {"shared matrices on": {"v": "values", "qkv": "queries, keys and values"}[config.setting("knock_targets")],
                "map on the values": config.setting("knock_form")}

    def structures(self, model, layers: Sequence, positions: np.ndarray, options) -> list[Structure]:
        nouns = {"q": ("queries", "query"), "k": ("keys", "key"), "v": ("values", "value")}
        out = []
        for t in model.blocks[0].attn.knock:
            K = np.stack([b.attn.knock[t].detach().cpu().numpy() for b in model.blocks])  # (L, d, d)
            out.append(Structure(
                f"knock_{t}", f"Shared matrix on the {nouns[t][0]} K_{t.upper()}", K, ("layer", "d", "d_out"),
                StructureKind.MATRIX, f"Every head's {nouns[t][1]} is multiplied by this d×d matrix (the identity "
                "= MHA). Shared parameters, no data from other heads.", Identifiability.LEARNED,
                labels={"d_out": [str(i) for i in range(K.shape[-1])]},
                axis_titles={"d": "coordinate of the head's slice", "d_out": "coordinate after the matrix"},
                unit="weight"))
        if model.blocks[0].attn.value_mlp is not None:
            for name, what in (("gate", "W_gate"), ("up", "W_up"), ("down", "W_down")):
                W = np.stack([getattr(b.attn.value_mlp, name).detach().cpu().numpy() for b in model.blocks])  # (L, d, d)
                start = "zero" if name == "down" else "the identity"
                out.append(Structure(
                    f"value_mlp_{name}", f"Value MLP {what}", W, ("layer", "d", "d_out"), StructureKind.MATRIX,
                    f"{what} of the gated MLP every head's value passes through, v + (SiLU(v W_gate) ⊙ v W_up) W_down "
                    f"(it starts at {start}). Shared parameters, no data from other heads.", Identifiability.LEARNED,
                    labels={"d_out": [str(i) for i in range(W.shape[-1])]},
                    axis_titles={"d": "coordinate of the head's slice", "d_out": "hidden coordinate" if name != "down"
                                 else "coordinate of the value"}, unit="weight"))
        return out

    def notes(self, config) -> list[str]:
        return ["Knocking heads shares one small matrix among the heads of a layer; no head reads another's data, "
                "so beside the mechanisms that mix heads it shows what shared parameters of the same kind do without mixing."]
