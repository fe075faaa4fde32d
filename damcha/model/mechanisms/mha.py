"""Standard multi-head attention (Vaswani et al. 2017), the baseline every variant is measured against."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from damcha.model.mechanisms.base import AttentionOutput, LayerCall, Mechanism, Setting
from damcha.model.mechanisms.operations import ProjectedAttention, attend, attend_through_cache, head_scale
from damcha.model.mechanisms.structures import Identifiability, Structure, StructureKind


class MultiHeadAttention(ProjectedAttention):
    """Q = x W_Q, K = x W_K, V = x W_V per head; y = concat_h softmax(Q_h K_h^T / sqrt(d)) V_h W_O."""

    def forward(self, x: torch.Tensor, call: LayerCall) -> AttentionOutput:
        mask, causal, need_weights, stochastic = call.mask, call.causal, call.need_weights, call.stochastic
        q, k, v = (self.heads(p, x) for p in (self.query, self.key, self.value))  # (B, H, T, d) each
        if call.cache is not None:
            out, weights = attend_through_cache(q, k, v, call, head_scale(self.head_dim))  # (B, H, T, d)
        else:
            out, weights = attend(q, k, v, mask, causal, head_scale(self.head_dim),
                                  self.dropout if stochastic else 0.0, need_weights, call.site, call.rotary)  # (B, H, T, d)
        return AttentionOutput(y=self.merge(out), weights=weights)  # y: (B, T, D)


def qk_forms(attn: MultiHeadAttention) -> torch.Tensor:
    """Each head's bilinear form B_h = W_Q^h (W_K^h)^T, (H, D, D): head h scores q_t . k_s =
    x_t^T B_h x_s (+ bias terms). Input-independent, of rank d_h, acting on the whole of x."""
    H, d = attn.n_head, attn.head_dim
    wq = attn.query.weight.detach().view(H, d, -1)  # (H, d, D): rows of W_Q for head h
    wk = attn.key.weight.detach().view(H, d, -1)  # (H, d, D)
    return torch.einsum("hdi,hdj->hij", wq, wk)  # (H, D, D)


class MHA(Mechanism):
    rotary_positions = True  # every score goes through the shared attend step, call.rotary passed on
    decodes_with_cache = True
    name = "mha"
    title = "Multi-head attention (MHA)"
    reference = "Vaswani et al. 2017, arXiv 1706.03762"

    declared_settings = (
        Setting("head_width", int, 0, "each head's query, key and value width (0: D / H, the standard); wider heads "
                "are a baseline matched to another model's parameter count, the same function class", minimum=0),
    )

    def build_layer(self, config, layer_index: int) -> nn.Module:
        return MultiHeadAttention(config, config.setting("head_width") * config.n_head)


    def structures(self, model, layers: Sequence, positions: np.ndarray, options) -> list[Structure]:
        forms = np.stack([qk_forms(block.attn).cpu().numpy() for block in model.blocks])  # (L, H, D, D)
        return [Structure(
            "qk_forms", "Per-head bilinear forms W_Q^h W_K^hᵀ", forms, ("layer", "head", "row", "col"),
            StructureKind.PER_HEAD_FORMS,
            "Head h scores x_tᵀ B_h x_s (biases omitted): the same for every input, rank d_h, reading all of x. "
            "The closest static analogue of DAMCHA's per-head metric.",
            Identifiability.LEARNED, labels={"head": [f"B_{h + 1}" for h in range(forms.shape[1])]},
            axis_titles={"row": "query coordinate of x", "col": "key coordinate of x"}, unit="form entry",
        )]

    def notes(self, config) -> list[str]:
        return ["Standard multi-head attention has no input-dependent metric: its per-head bilinear forms "
                "W_Q^h W_K^hᵀ are fixed after training."]
