"""Mixture of Attention Heads (Zhang, Shen, Huang, Zhou, Rong, Xiong, EMNLP 2022, arXiv 2210.05144),
and the version in the DAMCHA authors' code.

MoA. E expert heads, each with its own query and output projections W_q^i (D x d), W_o^i (d x D);
keys and values are one shared head, K = X W_k, V = X W_v (D x d each). A router scores the experts
per token, g_t = softmax(x_t W_g), keeps the top k, and

    y_t = sum_{i in topk(t)} g_{i,t} W_o^i softmax(x_t W_q^i K^T / sqrt(d)) V,

the gates not renormalised over the top k. The router starts at zero and in training gates on noisy
logits, x W_g + ε (softplus(x W_noise) + 0.01) with ε ~ N(0, 1) and W_noise zero at the start, as the
official code's noisy top-k gating (`moa_router=official`, the default; the auxiliary losses read
the noisy logits, as theirs); `moa_router=random` keeps PyTorch's random start without noise, which
runs saved before the setting existed were trained with. Training adds two auxiliary losses with their own
weights, logged apart from the task loss: load balancing and the router z-loss (mean squared
log-sum-exp of the router logits). Load balancing, as the official code (yikangshen/MoA,
moa_layer/parallel_linear/moe.py) defines its terms:
  switch   E * sum_i f_i P_i, f_i the share of the N k choices that went to expert i and P_i the
           mean router probability: its released training command (run.sh: --cvloss 0
           --switchloss 0.01 --zloss 0.001) uses this one with weight 0.01, so it is the default;
  cv       cv²(importance), importance_i = the sum of expert i's gates, variance unbiased (their
           compute_cvloss; weight 0 in their run);
  cv-load  cv²(importance) + cv²(load), biased variances: what this project used before
           (Shazeer et al. 2017's pair), kept as a named setting.
Experts are computed densely here and unchosen ones multiplied by an exact zero gate: an unchosen
expert contributes nothing, and the benchmark reports the dense cost.

moa-authors (`MoAAttention` in the DAMCHA authors' models/baselines.py, commit ffa99807): E = 2H
experts with their own bias-free Q, K, V (E x D x d, Xavier-uniform on an (E D, d) view), all
computed densely; a router with a bias; each token keeps its top k = H logits, gates = softmax
over those k; the gated outputs of the chosen experts, in rank order, are concatenated and go
through one Linear(k d, D): slot r's weights serve whichever expert ranks r-th for that token.
No auxiliary loss. Their layer also adds its own causal mask; their stack is always causal, where
the two agree; here the layer follows the model's mask like every other mechanism (an encoder's
authors' MoA sees the whole sequence).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from damcha.model.mechanisms.base import AttentionOutput, ForwardOptions, Intervention, LayerCall, Mechanism, Setting
from damcha.model.mechanisms.operations import attend, head_scale
from damcha.model.mechanisms.structures import Identifiability, Structure, StructureKind, ValueKind

BALANCES = ("switch", "cv", "cv-load")
ROUTERS = ("official", "random")
NOISE_EPSILON = 1e-2  # the official code's floor on the noise scale


@dataclass(frozen=True)
class MoAOptions(ForwardOptions):
    """Interventions: uniform_gates gives each chosen expert the gate 1/k; fixed_experts makes every
    token choose these experts (with the router's probabilities as gates)."""

    uniform_gates: bool = False
    fixed_experts: tuple[int, ...] = ()


def cv_squared(x: torch.Tensor, unbiased: bool) -> torch.Tensor:
    """Squared coefficient of variation of a vector (0 when every entry is equal, or for one entry)."""
    if x.numel() < 2:
        return x.new_zeros(())
    return x.var(unbiased=unbiased) / (x.mean() ** 2 + 1e-10)


def top_k_gates(logits: torch.Tensor, k: int) -> torch.Tensor:
    """(..., E) router logits -> softmax gates with exactly k non-zero entries per token (not renormalised)."""
    probs = logits.softmax(dim=-1)  # (..., E)
    top, idx = probs.topk(k, dim=-1)  # (..., k)
    return torch.zeros_like(probs).scatter(-1, idx, top)  # (..., E)


def intervened_gates(gates: torch.Tensor, logits: torch.Tensor, options: MoAOptions) -> torch.Tensor:
    """The (..., E) gates an intervention asks for (unchanged without one)."""
    if options.fixed_experts:
        keep = torch.zeros(logits.shape[-1], dtype=torch.bool, device=logits.device)
        keep[list(options.fixed_experts)] = True
        gates = torch.where(keep, logits.softmax(-1), torch.zeros_like(gates))  # (..., E)
    if options.uniform_gates:
        gates = (gates > 0).to(gates.dtype) / (gates > 0).sum(-1, keepdim=True).clamp_min(1)  # (..., E)
    return gates


def experts_attention(q, k, v, mask, causal, d, dropout, need_weights, site=None, rotary=False):
    """softmax(q_e K_e^T / sqrt(d)) V_e for every expert: q (B, E, T, d), k, v (B, E|1, T, d) -> (B, E, T, d),
    one fused attention call unless the weights (B, E, T, T) are wanted."""
    E = q.shape[1]
    k, v = k.expand(-1, E, -1, -1), v.expand(-1, E, -1, -1)  # (B, E, T, d): shared keys are a view
    return attend(q, k, v, mask, causal, head_scale(d), dropout, need_weights, site, rotary)


class MixtureOfAttentionHeads(nn.Module):
    def __init__(self, config, experts: int, top_k: int, aux: dict, router: str = "official"):
        super().__init__()
        D, d = config.n_embd, config.head_dim
        self.E, self.k, self.d, self.aux = experts, top_k, d, aux
        self.dropout = config.dropout
        self.router = nn.Linear(D, experts, bias=False)  # W_g
        self.noise = None
        if router == "official":  # zero start, and a learned noise scale W_noise for training
            self.noise = nn.Linear(D, experts, bias=False)
            nn.init.zeros_(self.router.weight)
            nn.init.zeros_(self.noise.weight)
        self.query = nn.Linear(D, experts * d)  # W_q^i, stacked
        self.key = nn.Linear(D, d)  # W_k: one head shared by the experts
        self.value = nn.Linear(D, d)
        self.out = nn.Parameter(torch.randn(experts, d, D) / d**0.5)  # W_o^i
        self.out_bias = nn.Parameter(torch.zeros(D))

    def forward(self, x: torch.Tensor, call: LayerCall[MoAOptions]) -> AttentionOutput:
        real, mask, causal = call.real, call.mask, call.causal
        options, need_weights, stochastic = call.options, call.need_weights, call.stochastic
        B, T, D = x.shape
        E, d = self.E, self.d
        logits = self.router(x)  # (B, T, E)
        if self.noise is not None and stochastic:  # noisy top-k gating: x W_g + ε (softplus(x W_noise) + 0.01)
            logits = logits + torch.randn_like(logits) * (F.softplus(self.noise(x)) + NOISE_EPSILON)  # (B, T, E)
        gates = intervened_gates(top_k_gates(logits, self.k), logits, options)  # (B, T, E)
        q = self.query(x).view(B, T, E, d).transpose(1, 2)  # (B, E, T, d)
        k = self.key(x)[:, None]  # (B, 1, T, d)
        v = self.value(x)[:, None]  # (B, 1, T, d)
        heads, weights = experts_attention(q, k, v, mask, causal, d, self.dropout if stochastic else 0.0,
                                            need_weights, call.site, call.rotary)  # (B, E, T, d)
        per_expert = torch.einsum("betd,edf->btef", heads, self.out)  # (B, T, E, D): W_o^i O_i
        y = torch.einsum("bte,btef->btf", gates, per_expert) + self.out_bias  # (B, T, D)
        aux = self._aux_loss(logits, gates, real) if self.aux and torch.is_grad_enabled() else None
        internals = {"gates": gates, "router_probs": logits.softmax(-1)} if need_weights else None
        return AttentionOutput(y=y, weights=weights if need_weights else None, internals=internals, aux_loss=aux)

    def _aux_loss(self, logits, gates, real) -> torch.Tensor:
        """Load balancing and router z-loss over the real tokens of the batch. Sums weighted by the
        real-token mask rather than a boolean selection: the same numbers, and no data-dependent shape
        (torch.compile captures the layer whole)."""
        w = (torch.ones(logits.shape[:2], device=logits.device) if real is None else real).to(logits.dtype)[..., None]  # (B, T, 1)
        n = w.sum().clamp_min(1)  # real tokens
        chosen = (gates > 0).to(logits.dtype) * w  # (B, T, E): each real token's k choices
        importance = (gates * w).sum((0, 1))  # (E,)
        if self.aux["balance"] == "switch":
            f = chosen.sum((0, 1)) / chosen.sum().clamp_min(1)  # f_i: share of the N k choices that went to expert i
            balance = self.E * (f * (logits.softmax(-1) * w).sum((0, 1)) / n).sum()
        elif self.aux["balance"] == "cv":
            balance = cv_squared(importance, unbiased=True)
        else:
            balance = cv_squared(importance, unbiased=False) + cv_squared(chosen.sum((0, 1)), unbiased=False)
        z_loss = (torch.logsumexp(logits, dim=-1, keepdim=True).pow(2) * w).sum() / n
        return self.aux["balance_weight"] * balance + self.aux["z_weight"] * z_loss


class AuthorsMixtureOfAttention(nn.Module):
    """moa-authors: dense experts with their own Q, K, V; the top-k gated outputs in rank order through one
    Linear(k d, D)."""

    def __init__(self, config, experts: int, top_k: int):
        super().__init__()
        D, d = config.n_embd, config.head_dim
        self.E, self.k, self.d = experts, top_k, d
        self.dropout = config.dropout
        self.query, self.key, self.value = (nn.Parameter(torch.empty(experts, D, d)) for _ in range(3))  # (E, D, d)
        for w in (self.query, self.key, self.value):
            nn.init.xavier_uniform_(w.view(experts * D, d))
        self.out = nn.Linear(top_k * d, D)  # one projection of the k rank slots
        self.router = nn.Linear(D, experts)

    def slots(self, logits: torch.Tensor, options: MoAOptions) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, T, E) router logits -> the experts in rank order (B, T, k) and their gates (B, T, k)."""
        if options.fixed_experts:
            chosen = torch.tensor(options.fixed_experts, device=logits.device).expand(*logits.shape[:2], -1)
            top = logits.gather(-1, chosen)  # (B, T, k)
        else:
            top, chosen = logits.topk(self.k, dim=-1)  # (B, T, k), best first
        gates = top.softmax(-1)  # (B, T, k)
        if options.uniform_gates:
            gates = torch.full_like(gates, 1.0 / gates.shape[-1])
        return chosen, gates

    def forward(self, x: torch.Tensor, call: LayerCall[MoAOptions]) -> AttentionOutput:
        mask, causal, options = call.mask, call.causal, call.options
        need_weights, stochastic = call.need_weights, call.stochastic
        B, T, D = x.shape
        E, d, k = self.E, self.d, self.k
        chosen, gates = self.slots(self.router(x), options)  # (B, T, k) each
        q, kk, v = (torch.einsum("btf,efd->betd", x, w) for w in (self.query, self.key, self.value))  # (B, E, T, d)
        heads, weights = experts_attention(q, kk, v, mask, causal, d, self.dropout if stochastic else 0.0,
                                            need_weights, call.site, call.rotary)  # (B, E, T, d)
        ranked = heads.transpose(1, 2).gather(2, chosen[..., None].expand(B, T, k, d))  # (B, T, k, d)
        y = self.out((ranked * gates[..., None]).reshape(B, T, k * d))  # (B, T, D)
        internals = None
        if need_weights:
            dense = torch.zeros(B, T, E, dtype=gates.dtype, device=x.device).scatter(-1, chosen, gates)  # (B, T, E)
            internals = {"gates": dense, "slots": chosen}
        return AttentionOutput(y=y, weights=weights if need_weights else None, internals=internals)


def _sizes(config, authors: bool) -> tuple[int, int]:
    H = config.n_head
    if authors:
        return 2 * H, H
    return int(_setting(config, "moa_experts") or 2 * H), int(_setting(config, "moa_top_k") or H)


MOA_SETTINGS = (
    Setting("moa_experts", int, None, "expert heads E (default: 2 × n_head)", minimum=1),
    Setting("moa_top_k", int, None, "experts each token chooses k (default: n_head)", minimum=1),
    Setting("moa_balance", str, "switch", "load-balancing loss: switch (E Σ f_i P_i, the official run's), cv "
            "(cv² of importance, the official code's other term) or cv-load (cv² of importance and of load)", BALANCES),
    Setting("moa_balance_weight", float, 0.01, "weight of the load-balancing loss", minimum=0),
    Setting("moa_z_weight", float, 0.001, "weight of the router z-loss", minimum=0),
    Setting("moa_router", str, "official", "official (router and noise scale start at zero; noisy top-k gating in "
            "training, as the official code) or random (PyTorch's default start, no noise)", ROUTERS,
            saved_before="random"),
)


def _setting(config, name: str):
    """A MoA setting of a config (the authors' version has none of its own: MoA's defaults)."""
    declared = next(s for s in MOA_SETTINGS if s.name == name)
    return config.option(name, declared.default)


def _aux(config) -> dict:
    return {"balance": _setting(config, "moa_balance"), "balance_weight": float(_setting(config, "moa_balance_weight")),
            "z_weight": float(_setting(config, "moa_z_weight"))}


class _MoABase(Mechanism):
    rotary_positions = True  # every score goes through the shared attend step, call.rotary passed on
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

    def structure_sources(self, model) -> dict[str, list[nn.Module]]:
        return {f"layer {i + 1}": [block.attn.router] for i, block in enumerate(model.blocks)}  # each token's expert logits

    def head_site_note(self, config) -> str:
        return ("MoA's units are experts chosen per token and summed with their gates, not heads side by side "
                "before one projection: its own interventions (uniform gates, fixed experts) act on them instead.")

    def build_layer(self, config, layer_index: int) -> nn.Module:
        E, k = _sizes(config, self.authors)
        if self.authors:
            return AuthorsMixtureOfAttention(config, E, k)
        return MixtureOfAttentionHeads(config, E, k, aux=_aux(config), router=_setting(config, "moa_router"))


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
                "router z-loss": f"× {aux['z_weight']}", "router": _setting(config, "moa_router")}

    def notes(self, config) -> list[str]:
        E, k = _sizes(config, False)
        return [f"MoA: each token's router picks {k} of {E} expert heads (own queries and outputs, shared keys "
                "and values); the gates are not renormalised. Training adds load-balancing and router z-losses."]


class MoAAuthors(_MoABase):
    name = "moa-authors"
    title = "MoA as written in the DAMCHA authors' code"
    reference = "DAMCHA authors' models/baselines.py, MoAAttention (after Zhang et al. 2022)"
    authors = True

    def structures(self, model, layers: Sequence, positions: np.ndarray, options) -> list[Structure]:
        out = super().structures(model, layers, positions, options)
        E, k = _sizes(model.config, True)
        slots = np.stack([layer.internals["slots"][0].cpu().numpy() for layer in layers])  # (L, T, k)
        usage = np.stack([(slots[:, :, r, None] == np.arange(E)).mean(axis=1) for r in range(k)], axis=1)  # (L, k, E)
        return [*out, Structure(
            "slot_usage", "Which expert fills each rank slot", usage, ("layer", "slot", "expert"), StructureKind.MATRIX,
            "Row r: the share of this input's tokens whose r-th ranked expert is each expert. One output projection "
            "per slot serves whichever expert lands in it.", Identifiability.LEARNED,
            labels={"slot": [f"rank {r + 1}" for r in range(k)], "expert": [f"expert {e + 1}" for e in range(E)]},
            axis_titles={"slot": "rank slot r"}, value_kind=ValueKind.PROBABILITY, unit="share of tokens")]

    def notes(self, config) -> list[str]:
        return ["The DAMCHA authors' MoA (their models/baselines.py): 2H experts with their own queries, keys and "
                "values, computed densely; each token's top-H experts gated by a softmax over their logits and "
                "concatenated in rank order into one output projection (slot r's weights serve whichever expert "
                "ranks r-th); no auxiliary loss."]
