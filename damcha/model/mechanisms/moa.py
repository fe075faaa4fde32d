"""Mixture of Attention Heads (Zhang, Shen, Huang, Zhou, Rong, Xiong, EMNLP 2022, arXiv 2210.05144),
and the version in the DAMCHA authors' code.

MoA. E expert heads, each with its own query and output projections W_q^i (D x d), W_o^i (d x D);
keys and values are one shared head, K = X W_k, V = X W_v (D x d each). A router scores the experts
per token, g_t = softmax(x_t W_g), keeps the top k, and

    y_t = sum_{i in topk(t)} g_{i,t} W_o^i softmax(x_t W_q^i K^T / sqrt(d)) V,

the gates not renormalised over the top k. Training adds two auxiliary losses with their own
weights: load balancing (the squared coefficient of variation of the experts' importance and
load, as in the paper's code, or the Switch Transformer's E * sum_i f_i P_i) and the router
z-loss (mean squared log-sum-exp of the router logits); they are logged apart from the task loss.
Experts are computed densely here and unchosen ones multiplied by an exact zero gate: an unchosen
expert contributes nothing, and the benchmark reports the dense cost.

moa-authors (as described to us; their code is not available here): 2H experts, each with its
own Q, K, V and output projection, computed densely; the top-H gates renormalised to sum to one;
no auxiliary loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from damcha.model.mechanisms.base import (
    AttentionOutput,
    ForwardOptions,
    Identifiability,
    Intervention,
    Mechanism,
    Setting,
    Structure,
    StructureKind,
    ValueKind,
    head_scale,
    masked_softmax,
)

BALANCES = ("cv", "switch")


@dataclass(frozen=True)
class MoAOptions(ForwardOptions):
    """Interventions: uniform_gates gives each chosen expert the gate 1/k; fixed_experts makes every
    token choose these experts (with the router's probabilities as gates)."""

    uniform_gates: bool = False
    fixed_experts: tuple[int, ...] = ()


def cv_squared(x: torch.Tensor) -> torch.Tensor:
    """Squared coefficient of variation of a vector (0 when every entry is equal)."""
    return x.var(unbiased=False) / (x.mean() ** 2 + 1e-10)


def top_k_gates(logits: torch.Tensor, k: int, renormalise: bool) -> torch.Tensor:
    """(..., E) router logits -> gates with exactly k non-zero entries per token."""
    probs = logits.softmax(dim=-1)  # (..., E)
    top, idx = probs.topk(k, dim=-1)  # (..., k)
    if renormalise:
        top = top / top.sum(dim=-1, keepdim=True)
    return torch.zeros_like(probs).scatter(-1, idx, top)  # (..., E)


def experts_attention(q, k, v, mask, causal, d, dropout):
    """softmax(q_e K_e^T / sqrt(d)) V_e for every expert: q (B, E, T, d), k, v (B, E|1, T, d) -> (B, E, T, d)."""
    weights = masked_softmax((q @ k.transpose(-2, -1)) * head_scale(d), mask, causal)  # (B, E, T, T)
    return (F.dropout(weights, dropout) if dropout > 0 else weights) @ v, weights


class MixtureOfAttentionHeads(nn.Module):
    def __init__(self, config, experts: int, top_k: int, renormalise: bool, shared_kv: bool, aux: dict):
        super().__init__()
        D, d = config.n_embd, config.head_dim
        self.E, self.k, self.d, self.renormalise, self.aux = experts, top_k, d, renormalise, aux
        self.dropout = config.dropout
        self.router = nn.Linear(D, experts, bias=False)  # W_g
        self.query = nn.Linear(D, experts * d)  # W_q^i, stacked
        kv = d if shared_kv else experts * d
        self.key = nn.Linear(D, kv)  # W_k: one head, or one per expert (authors' version)
        self.value = nn.Linear(D, kv)
        self.out = nn.Parameter(torch.randn(experts, d, D) / d**0.5)  # W_o^i
        self.out_bias = nn.Parameter(torch.zeros(D))

    def forward(self, x, real, mask, causal: bool, options: ForwardOptions, need_weights: bool = False,
                stochastic: bool = False, shared=None) -> AttentionOutput:
        B, T, D = x.shape
        E, d = self.E, self.d
        logits = self.router(x)  # (B, T, E)
        gates = top_k_gates(logits, self.k, self.renormalise)  # (B, T, E)
        if options.fixed_experts:
            keep = torch.zeros(E, dtype=torch.bool, device=x.device)
            keep[list(options.fixed_experts)] = True
            gates = torch.where(keep, logits.softmax(-1), torch.zeros_like(gates))  # (B, T, E)
        if options.uniform_gates:
            gates = (gates > 0).to(gates.dtype) / (gates > 0).sum(-1, keepdim=True).clamp_min(1)  # (B, T, E)
        q = self.query(x).view(B, T, E, d).transpose(1, 2)  # (B, E, T, d)
        k = self.key(x).view(B, T, -1, d).transpose(1, 2)  # (B, 1|E, T, d)
        v = self.value(x).view(B, T, -1, d).transpose(1, 2)  # (B, 1|E, T, d)
        heads, weights = experts_attention(q, k, v, mask, causal, d, self.dropout if stochastic else 0.0)  # (B, E, T, d)
        per_expert = torch.einsum("betd,edf->btef", heads, self.out)  # (B, T, E, D): W_o^i O_i
        y = torch.einsum("bte,btef->btf", gates, per_expert) + self.out_bias  # (B, T, D)
        aux = self._aux_loss(logits, gates, real) if self.aux and torch.is_grad_enabled() else None
        internals = {"gates": gates, "router_probs": logits.softmax(-1)} if need_weights else None
        return AttentionOutput(y=y, weights=weights if need_weights else None, internals=internals, aux_loss=aux)

    def _aux_loss(self, logits, gates, real) -> torch.Tensor:
        """Load balancing and router z-loss over the real tokens of the batch."""
        keep = torch.ones(logits.shape[:2], dtype=torch.bool, device=logits.device) if real is None else real
        lg, g = logits[keep], gates[keep]  # (N, E)
        if self.aux["balance"] == "switch":
            chosen = (g > 0).to(lg.dtype).mean(0)  # f_i: share of tokens routed to expert i (over k choices)
            balance = self.E * (chosen * lg.softmax(-1).mean(0)).sum() / self.k
        else:
            balance = cv_squared(g.sum(0)) + cv_squared((g > 0).to(lg.dtype).sum(0))  # importance and load
        z_loss = torch.logsumexp(lg, dim=-1).pow(2).mean()
        return self.aux["balance_weight"] * balance + self.aux["z_weight"] * z_loss


def _sizes(config, authors: bool) -> tuple[int, int]:
    H = config.n_head
    if authors:
        return 2 * H, H
    return int(_setting(config, "moa_experts") or 2 * H), int(_setting(config, "moa_top_k") or H)


MOA_SETTINGS = (
    Setting("moa_experts", int, None, "expert heads E (default: 2 × n_head)", minimum=1),
    Setting("moa_top_k", int, None, "experts each token chooses k (default: n_head)", minimum=1),
    Setting("moa_balance", str, "cv", "load-balancing loss: cv (coefficient of variation) or switch", BALANCES),
    Setting("moa_balance_weight", float, 0.01, "weight of the load-balancing loss", minimum=0),
    Setting("moa_z_weight", float, 0.001, "weight of the router z-loss", minimum=0),
)


def _setting(config, name: str):
    """A MoA setting of a config (the authors' version has none of its own: MoA's defaults)."""
    declared = next(s for s in MOA_SETTINGS if s.name == name)
    return config.option(name, declared.default)


def _aux(config) -> dict:
    return {"balance": _setting(config, "moa_balance"), "balance_weight": float(_setting(config, "moa_balance_weight")),
            "z_weight": float(_setting(config, "moa_z_weight"))}


class _MoABase(Mechanism):
    authors = False
    options_type = MoAOptions

    def interventions(self, config) -> list[Intervention]:
        E, k = _sizes(config, self.authors)
        return [
            Intervention("uniform_gates", "Uniform gates", f"Each chosen expert weighted 1/{k}.",
                         make=lambda model, tokens: MoAOptions(uniform_gates=True)),
            Intervention("fixed_experts", f"Experts 1..{k} for every token", "The same experts for every token, "
                         "gated by the router's probabilities.",
                         make=lambda model, tokens: MoAOptions(fixed_experts=tuple(range(k)))),
        ]

    def build_layer(self, config, layer_index: int) -> nn.Module:
        E, k = _sizes(config, self.authors)
        aux = {} if self.authors else _aux(config)
        return MixtureOfAttentionHeads(config, E, k, renormalise=self.authors, shared_kv=not self.authors, aux=aux)


    def structures(self, model, layers: Sequence, positions: np.ndarray, options) -> list[Structure]:
        gates = np.stack([layer.internals["gates"][0].cpu().numpy() for layer in layers])  # (L, T, E)
        chosen = (gates > 0).astype(float)
        co = np.einsum("lte,ltf->lef", chosen, chosen) / max(chosen.shape[1], 1)  # (L, E, E)
        E = gates.shape[-1]
        names = [f"expert {i + 1}" for i in range(E)]
        return [
            Structure("gates", "Gates per token", gates, ("layer", "token", "expert"), StructureKind.TOKEN_GATES,
                      f"g_(i,t) of the experts each token chose (top {self._k(model)}; unchosen: exactly 0).",
                      Identifiability.LEARNED, labels={"expert": names}, value_kind=ValueKind.PROBABILITY, unit="gate"),
            Structure("experts_used", "Experts this input used", chosen.mean(axis=1)[:, None, :],
                      ("layer", "input", "expert"), StructureKind.MATRIX,
                      "Share of this input's tokens that chose each expert.", Identifiability.LEARNED,
                      labels={"input": ["this input"], "expert": names}, value_kind=ValueKind.PROBABILITY,
                      unit="share of tokens"),
            Structure("co_selection", "Expert co-selection", co, ("layer", "expert_i", "expert_j"),
                      StructureKind.HEAD_BY_HEAD, "Share of this input's tokens that chose both experts i and j "
                      "(the diagonal: each expert's share).", Identifiability.LEARNED,
                      labels={"expert_i": names, "expert_j": names}, value_kind=ValueKind.PROBABILITY,
                      unit="share of tokens"),
        ]

    def _k(self, model) -> int:
        return _sizes(model.config, self.authors)[1]


class MoA(_MoABase):
    name = "moa"
    title = "Mixture of attention heads (MoA)"
    reference = "Zhang et al., EMNLP 2022, arXiv 2210.05144"
    declared_settings = MOA_SETTINGS

    def validate(self, config) -> None:
        super().validate(config)
        E, k = _sizes(config, False)
        if not 1 <= k <= E:
            raise ValueError(f"moa_top_k ({k}) must lie in [1, moa_experts ({E})]")

    def settings(self, config) -> dict:
        E, k = _sizes(config, False)
        aux = _aux(config)
        return {"experts": E, "top k": k, "load balancing": f"{aux['balance']} × {aux['balance_weight']}",
                "router z-loss": f"× {aux['z_weight']}"}

    def notes(self, config) -> list[str]:
        E, k = _sizes(config, False)
        return [f"MoA: each token's router picks {k} of {E} expert heads (own queries and outputs, shared keys "
                "and values); the gates are not renormalised. Training adds load-balancing and router z-losses."]


class MoAAuthors(_MoABase):
    name = "moa-authors"
    title = "MoA as written in the DAMCHA authors' code"
    reference = "DAMCHA authors' code (after Zhang et al. 2022)"
    authors = True

    def notes(self, config) -> list[str]:
        return ["The DAMCHA authors' MoA: 2H experts with their own queries, keys and values, computed densely; "
                "the top-H gates renormalised; no auxiliary loss. Implemented from a description of their code."]
