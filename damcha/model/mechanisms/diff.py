"""Differential attention (Ye, Dong, Xia, Sun, Zhu, Huang, Wei, ICLR 2025, arXiv 2410.05258; the
Diff Transformer).

Each of the H heads splits its query and key into two halves of width d' = D / (2H) and keeps a
value of width 2d' = D / H:

    A_h = softmax(Q1_h K1_hᵀ / sqrt(d')) - λ softmax(Q2_h K2_hᵀ / sqrt(d'))        (B, H, T, T)
    O_h = (1 - λ_init) RMSNorm(A_h V_h)                                            (B, T, 2d')
    λ   = exp(λ_q1 · λ_k1) - exp(λ_q2 · λ_k2) + λ_init,  λ_init = 0.8 - 0.6 exp(-0.3 l)

with l the layer's index from 0 (the paper's depth schedule), the λ vectors of width d' drawn from
N(0, 0.1²), the RMS norm per head with a learned scale (eps 1e-5), projections without biases,
as in the official code (microsoft/unilm, Diff-Transformer/multihead_diffattn.py). One λ per layer,
shared by its heads, as the paper; `diff_lambda=head` gives each head its own λ vectors (an
extension, for inspection). Heads: by default n_head differential heads, so each map scores with
half MHA's head width; the official code compares with *half* the baseline's heads, each map at
MHA's head width d and values of width 2d (`diff_heads=half`, registered as `diff-official`, the one
the evidence compares). The two maps are ordinary softmax attentions: outside inspection both
come from one fused call (the 2H halves as heads, each with its head's values). Attention dropout,
where a config has it, acts on each map (our choice; the paper's equations have none).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from damcha.model.mechanisms.base import AttentionOutput, ForwardOptions, Intervention, LayerCall, Mechanism, Setting
from damcha.model.mechanisms.operations import attend, head_scale
from damcha.model.mechanisms.structures import Identifiability, Structure, StructureKind, ValueKind

LAMBDA_SHARING = ("layer", "head")
HEAD_PROTOCOLS = ("same", "half")


@dataclass(frozen=True)
class DiffOptions(ForwardOptions):
    """Intervention: without_second_map sets λ = 0, leaving each head its first softmax map (still
    normalised and scaled as trained)."""

    without_second_map: bool = False


def lambda_init(layer_index: int) -> float:
    """The paper's depth schedule, layer counted from 0."""
    return 0.8 - 0.6 * math.exp(-0.3 * layer_index)


class DifferentialAttention(nn.Module):
    def __init__(self, config, layer_index: int, per_head: bool):
        super().__init__()
        D, H = config.n_embd, _heads(config)
        self.n_head, self.half_width = H, D // (2 * H)  # d'
        self.dropout = config.dropout
        self.lambda_init = lambda_init(layer_index)
        self.query = nn.Linear(D, D, bias=False)  # 2H halves of width d'
        self.key = nn.Linear(D, D, bias=False)
        self.value = nn.Linear(D, D, bias=False)  # H values of width 2d'
        self.proj = nn.Linear(D, D, bias=False)
        n = H if per_head else 1
        self.lambda_q1, self.lambda_k1, self.lambda_q2, self.lambda_k2 = (
            nn.Parameter(torch.randn(n, self.half_width) * 0.1) for _ in range(4))  # (n, d')
        self.norm = nn.RMSNorm(2 * self.half_width, eps=1e-5)

    def lambdas(self) -> torch.Tensor:
        """(n,) λ of the layer (n = 1) or of each head (n = H)."""
        return (torch.exp((self.lambda_q1 * self.lambda_k1).sum(-1)) - torch.exp((self.lambda_q2 * self.lambda_k2).sum(-1))
                + self.lambda_init)

    def forward(self, x: torch.Tensor, call: LayerCall[DiffOptions]) -> AttentionOutput:
        mask, causal, options = call.mask, call.causal, call.options
        need_weights, stochastic = call.need_weights, call.stochastic
        B, T, D = x.shape
        H, e = self.n_head, self.half_width
        q = self.query(x).view(B, T, 2 * H, e).transpose(1, 2)  # (B, 2H, T, d'): halves 2h and 2h+1 of head h
        k = self.key(x).view(B, T, 2 * H, e).transpose(1, 2)  # (B, 2H, T, d')
        v = self.value(x).view(B, T, H, 2 * e).transpose(1, 2)  # (B, H, T, 2d')
        lam = self.lambdas()  # (1|H,)
        if options.without_second_map:
            lam = torch.zeros_like(lam)
        lam_h = lam.view(1, -1, 1, 1)  # (1, 1|H, 1, 1)
        drop = self.dropout if stochastic else 0.0
        # Both maps in one attention call: half 2h+r of the queries and keys with head h's values. For the
        # fused kernels, which need one head width for all three, queries and keys are padded with zeros to
        # the values' width (dot products unchanged); explicit weights need no padding.
        q2, k2 = (q, k) if need_weights else (F.pad(t, (0, e)) for t in (q, k))  # (B, 2H, T, 2d' | d')
        both, maps = attend(q2, k2, v.repeat_interleave(2, dim=1), mask, causal, head_scale(e), drop,
                            need_weights, call.site, call.rotary)  # (B, 2H, T, 2d'), (B, 2H, T, T) or None
        out = self.norm(both[:, 0::2] - lam_h * both[:, 1::2]) * (1 - self.lambda_init)  # (B, H, T, 2d')
        y = self.proj(out.transpose(1, 2).reshape(B, T, D))  # (B, T, D)
        if not need_weights:
            return AttentionOutput(y=y)
        assert maps is not None  # (need_weights: attend returned them)
        first, second = maps[:, 0::2], maps[:, 1::2]  # (B, H, T, T) each
        weights = first - lam_h * second  # (B, H, T, T): what multiplies the values, before the norm
        return AttentionOutput(y=y, weights=weights, internals={"first": first, "second": second, "lambda": lam})


def _per_head(config) -> bool:
    return config.setting("diff_lambda") == "head"


def _heads(config) -> int:
    """Differential heads: n_head, or half of them under the official protocol (each map then scores
    with MHA's head width)."""
    return config.n_head // 2 if config.setting("diff_heads") == "half" else config.n_head


class Differential(Mechanism):
    name = "diff"
    title = "Differential attention (Diff Transformer)"
    reference = "Ye et al., ICLR 2025, arXiv 2410.05258"
    rotary_positions = False  # its fused path pads q and k to the values' width, which would re-pair RoPE's halves
    declared_settings = (
        Setting("diff_lambda", str, "layer", "one λ per layer (the paper) or one per head", LAMBDA_SHARING),
        Setting("diff_heads", str, "same", "same (n_head differential heads, each map at half MHA's head width) or "
                "half (n_head / 2 heads, each map at MHA's head width: the official code's comparison protocol)",
                HEAD_PROTOCOLS),
    )
    options_type = DiffOptions
    signed_attention = True  # A1 - λ A2

    def validate(self, config) -> None:
        super().validate(config)
        if config.setting("diff_heads") == "half":
            if config.n_head % 2:
                raise ValueError(f"diff_heads=half needs an even n_head, got {config.n_head}")
        elif config.head_dim % 2:
            raise ValueError(f"differential attention splits each head's query in two: head width "
                             f"{config.head_dim} (n_embd / n_head) must be even")

    def head_output_site(self, layer, config):
        return None if config.setting("diff_heads") == "half" else super().head_output_site(layer, config)

    def head_site_note(self, config) -> str:
        return (f"Under the official protocol this layer has {_heads(config)} differential heads, not n_head = "
                f"{config.n_head}: head-level interventions address n_head slices, which would cut its heads in two.")

    def build_layer(self, config, layer_index: int) -> nn.Module:
        return DifferentialAttention(config, layer_index, _per_head(config))

    def interventions(self, config) -> list[Intervention]:
        return [Intervention("without_second_map", "λ = 0 (first map only)", "Each head attends with its first "
                             "softmax map alone; the norm and the (1 − λ_init) scale stay.",
                             make=lambda model, tokens: DiffOptions(without_second_map=True))]

    def settings(self, config) -> dict:
        return {"λ": "one per head" if _per_head(config) else "one per layer",
                "differential heads": f"{_heads(config)}, maps of width {config.n_embd // (2 * _heads(config))}",
                "λ_init by layer": ", ".join(f"{lambda_init(i):.3f}" for i in range(config.n_layer))}

    def structures(self, model, layers: Sequence, positions: np.ndarray, options) -> list[Structure]:
        first = np.stack([layer.internals["first"][0].cpu().numpy() for layer in layers])  # (L, H, T, T)
        second = np.stack([layer.internals["second"][0].cpu().numpy() for layer in layers])  # (L, H, T, T)
        lam = np.stack([layer.internals["lambda"].detach().cpu().numpy() for layer in layers])  # (L, 1|H)
        diff = first - lam[:, :, None, None] * second  # (L, H, T, T)
        inits = [b.attn.lambda_init for b in model.blocks]
        heads = ["all heads"] if lam.shape[1] == 1 else [f"head {h + 1}" for h in range(lam.shape[1])]
        maps: dict[str, Any] = dict(axes=("layer", "head", "query", "key"), kind=StructureKind.ATTENTION_MAPS,
                    identifiability=Identifiability.LEARNED)
        return [
            Structure("first_maps", "First maps softmax(Q1 K1ᵀ/√d′)", first, description="Each head's first "
                      "softmax attention.", value_kind=ValueKind.PROBABILITY, unit="weight", **maps),
            Structure("second_maps", "Second maps softmax(Q2 K2ᵀ/√d′)", second, description="Each head's second "
                      "softmax attention, subtracted λ times: common-mode attention cancels.",
                      value_kind=ValueKind.PROBABILITY, unit="weight", **maps),
            Structure("differential_maps", "Differential maps A1 − λ A2", diff, description="What multiplies the "
                      "values (before the per-head RMS norm); negative where the second map outweighs the first.",
                      value_kind=ValueKind.SIGNED, unit="weight", **maps),
            Structure("lambda", "λ per layer", lam, ("depth", "lambda_head"), StructureKind.MATRIX,
                      "λ = exp(λ_q1·λ_k1) − exp(λ_q2·λ_k2) + λ_init; λ_init by layer: "
                      + ", ".join(f"{v:.3f}" for v in inits) + ". The same for every input.",
                      Identifiability.LEARNED, labels={"depth": [f"layer {i + 1}" for i in range(len(inits))],
                                                       "lambda_head": heads},
                      axis_titles={"depth": "layer", "lambda_head": "λ shared by"}, unit="λ"),
        ]

    def notes(self, config) -> list[str]:
        width = ("half-width queries and keys and full-width values" if config.setting("diff_heads") == "same" else
                 f"queries and keys of MHA's head width and values twice as wide ({_heads(config)} heads, the official "
                 "comparison protocol)")
        return ["Differential attention subtracts a second softmax map, λ times, from the first, so attention both "
                f"maps share cancels. The attention drawn is A1 − λA2 (signed), before the per-head RMS norm; heads "
                f"read {width}."]
