"""Dynamically Composable Multi-Head Attention (Xiao, Meng, Li, Yuan, ICML 2024, arXiv 2405.08553; DCFormer),
and the simplified version in the DAMCHA authors' code.

DCMHA. With A[:, t, s] the H-vector of heads at query t and key s,

    Compose(A)[:, t, s] = A + sum_r w2_r(t) (w1_r(t)^T A) + sum_r w2'_r(s) (w1'_r(s)^T A)
                            + tanh(dd_q(t)) * A + tanh(dd_k(s)) * A,

query-wise weights from the query token, key-wise weights from the key token (so causality
holds). Compose is applied twice with separate weights: to the logits before the softmax (then
masked) and to the probabilities after it. Dynamic weights: GELU(x W1) W2 split into w1 and w2
(rank R = 2, hidden width 4H per use), w1 RMS-normalised over heads without a learned scale;
dd = x W_dd. The projections that produce w2 and dd start at zero, so at initialisation DCMHA
computes exactly MHA; W1 and the w1 part of W2 are random, or the rank-R term (a product of w1
and w2) could never leave zero.

dcmha-authors (`DCMHAAttention` in the DAMCHA authors' models/baselines.py, commit ffa99807):
one pre-softmax H x H mixing per query token, alpha(t) = softmax over source heads of
Linear(tanh(Linear(x_t))) (router rank max(4, H/2), both with biases; the H² outputs laid out
source-major, as theirs), blended with the unmixed logits by a per-head sigmoid gate,
(1 - g) J + g alpha^T J; then the mask and the softmax. No post-softmax compose, no key-wise term.
Outside inspection its scores are computed a block of queries at a time (damcha.model.mechanisms.blocked).

Deviation in cost, not in arithmetic: the form that runs here (one attention of width 2D per head, below;
docs/mechanisms.md) takes far more time than the method's FLOPs need, which only a kernel applying the rank-2
maps inside the attention loop would meet; the Evidence page reads DCMHA's times as this code's, on FLOPs
(damcha.evidence.view.implementation_bound_sentence).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from damcha.model.mechanisms.base import AttentionOutput, ForwardOptions, Intervention, LayerCall, Mechanism
from damcha.model.mechanisms.blocked import blocked_attention
from damcha.model.mechanisms.operations import ProjectedAttention, allowed_keys, head_scale, masked_softmax
from damcha.model.mechanisms.structures import Identifiability, Structure, StructureKind, ValueKind

RANK = 2
USES = ("pre_q", "pre_k", "post_q", "post_k")


@dataclass(frozen=True)
class ComposeOptions(ForwardOptions):
    """Intervention: without_composition sets the dynamic weights to zero (DCMHA becomes MHA)."""

    without_composition: bool = False


class DynamicWeights(nn.Module):
    """Per-token w1 (R, H), w2 (R, H) and dd (H,) for the four uses of one layer's two Composes."""

    def __init__(self, D: int, H: int):
        super().__init__()
        self.H, K = H, 4 * H
        self.hidden = nn.Linear(D, len(USES) * K, bias=False)  # W1
        w2 = torch.randn(len(USES), K, 2, RANK, H) * (2.0 / (K + H)) ** 0.5  # (U, K, {w1, w2}, R, H)
        w2[:, :, 1] = 0.0  # the w2 half: zero, so Compose starts as the identity
        self.out = nn.Parameter(w2)  # W2
        self.diagonal = nn.Linear(D, len(USES) * H, bias=False)  # W_dd
        nn.init.zeros_(self.diagonal.weight)

    def forward(self, x: torch.Tensor) -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        B, T, _ = x.shape
        U, H = len(USES), self.H
        h = F.gelu(self.hidden(x)).view(B, T, U, -1)  # (B, T, U, K)
        w = torch.einsum("btuk,ukcrh->btucrh", h, self.out)  # (B, T, U, 2, R, H)
        w1 = w[:, :, :, 0] * torch.rsqrt(w[:, :, :, 0].pow(2).mean(-1, keepdim=True) + 1e-6)  # (B, T, U, R, H)
        w2 = w[:, :, :, 1]  # (B, T, U, R, H)
        dd = torch.tanh(self.diagonal(x)).view(B, T, U, H)  # (B, T, U, H)
        return {use: (w1[:, :, u], w2[:, :, u], dd[:, :, u]) for u, use in enumerate(USES)}


def head_map(w1: torch.Tensor, w2: torch.Tensor, dd: torch.Tensor) -> torch.Tensor:
    """The H x H map one token's weights apply: W[h, g] = sum_r w1[r, h] w2[r, g] + diag(dd). (..., H, H)"""
    return torch.einsum("...rh,...rg->...hg", w1, w2) + torch.diag_embed(dd)


def compose(A: torch.Tensor, query: tuple, key: tuple) -> torch.Tensor:
    """Compose(A) for A (B, H, T, S) with query-wise (w1, w2, dd) at t and key-wise ones at s: the
    definition term by term (rank R products and diagonals, the paper's arithmetic), used where the
    composed maps themselves are wanted (inspection, training with attention dropout)."""
    (qw1, qw2, qdd), (kw1, kw2, kdd) = query, key
    out = A
    out = out + torch.einsum("brts,btrg->bgts", torch.einsum("bhts,btrh->brts", A, qw1), qw2)  # (B, H, T, S)
    out = out + torch.einsum("brts,bsrg->bgts", torch.einsum("bhts,bsrh->brts", A, kw1), kw2)  # (B, H, T, S)
    out = out + A * qdd.permute(0, 2, 1)[..., None]  # (B, H, T, S): tanh(dd_q(t)) per head
    return out + A * kdd.permute(0, 2, 1)[:, :, None, :]  # tanh(dd_k(s)) per head


def per_head_scaled(M: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """[M[b, t, 1, g] x_1(t), ..., M[b, t, H, g] x_H(t)] for every g: M (B, T, H, G), x (B, H, T, d) -> (B, G, T, H d)."""
    B, H, T, d = x.shape
    return torch.einsum("bthg,bhtd->bgthd", M, x).reshape(B, M.shape[-1], T, H * d)


def composed_attention(q, k, v, dw: dict, mask, causal: bool, scale: float) -> torch.Tensor:
    """The head outputs (B, H, T, d) of DCMHA without any (B, H, T, S) tensor: the same numbers as
    compose -> softmax -> compose -> weights @ v, by two identities.

    Before the softmax, Compose(q k^T)[g] = Q~_g K^T + Q K~_g^T with Q = [q_1 .. q_H] (B, T, D),
    Q~_g = [M_q(t)[1, g] q_1 .. M_q(t)[H, g] q_H] and K~_g alike with M_k(s): one attention score
    of width 2D per head, [Q~_g | Q] . [K | K~_g]. After it, Compose(P) V only needs P_h times
    [v_1 .. v_H | M_k(s)[h, 1] v_1 .. M_k(s)[h, H] v_H] per head h (width 2D), then the query-wise
    maps mix the results. Both are ordinary softmax attentions: one fused call."""
    B, H, T, d = q.shape
    eye = torch.eye(H, dtype=q.dtype, device=q.device)
    pre_q, pre_k = head_map(*dw["pre_q"]) + eye, head_map(*dw["pre_k"])  # (B, T, H, G) each
    post_q, post_k = head_map(*dw["post_q"]) + eye, head_map(*dw["post_k"])  # (B, T, H, G) each
    flat = lambda x: x.transpose(1, 2).reshape(B, 1, T, H * d).expand(B, H, T, H * d)  # noqa: E731  (B, H, T, D)
    queries = torch.cat([per_head_scaled(pre_q, q), flat(q)], dim=-1)  # (B, H, T, 2D): [Q~_g | Q]
    keys = torch.cat([flat(k), per_head_scaled(pre_k, k)], dim=-1)  # (B, H, T, 2D): [K | K~_g]
    values = torch.cat([flat(v), per_head_scaled(post_k.transpose(-2, -1), v)], dim=-1)  # (B, H, T, 2D)
    out = F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask, is_causal=causal and mask is None,
                                         scale=scale)  # (B, H, T, 2D): P_h [V | V~_h]
    plain = out[..., : H * d].reshape(B, H, T, H, d)  # (B, h, T, g, d): P_h v_g
    keyed = out[..., H * d:].reshape(B, H, T, H, d).sum(1)  # (B, T, g, d): sum_h P_h (M_k[h, g] v_g)
    return torch.einsum("bthg,bhtgd->bgtd", post_q, plain) + keyed.transpose(1, 2)  # (B, G, T, d)


class ComposedAttention(ProjectedAttention):
    def __init__(self, config):
        super().__init__(config)
        self.dynamic = DynamicWeights(config.n_embd, config.n_head)

    def forward(self, x: torch.Tensor, call: LayerCall[ComposeOptions]) -> AttentionOutput:
        mask, causal, options = call.mask, call.causal, call.options
        need_weights, stochastic = call.need_weights, call.stochastic
        q, k, v = (self.heads(p, x) for p in (self.query, self.key, self.value))  # (B, H, T, d) each
        dw = self.dynamic(x)
        if options.without_composition:
            dw = {use: tuple(torch.zeros_like(t) for t in w) for use, w in dw.items()}
        scale = head_scale(self.head_dim)
        if not need_weights and not (stochastic and self.dropout > 0):  # dropout acts on the composed weights
            return AttentionOutput(y=self.merge(composed_attention(q, k, v, dw, mask, causal, scale)))
        logits = (q @ k.transpose(-2, -1)) * scale  # (B, H, T, T)
        probs = masked_softmax(compose(logits, dw["pre_q"], dw["pre_k"]), mask, causal)  # (B, H, T, T)
        weights = compose(probs, dw["post_q"], dw["post_k"])  # (B, H, T, T)
        y = self.merge(self.weighted(weights, v, stochastic))  # (B, T, D)
        return AttentionOutput(y=y, weights=weights if need_weights else None, internals=dw if need_weights else None)


class AuthorsComposedAttention(ProjectedAttention):
    """dcmha-authors: L'_h(t) = (1 - g_h(t)) J_h + g_h(t) sum_j Mix(t)[h, j] J_j, Mix(t) = softmax_j(router)."""

    def __init__(self, config):
        super().__init__(config)
        D, H = config.n_embd, config.n_head
        self.router = nn.Linear(D, max(4, H // 2))
        self.mix = nn.Linear(max(4, H // 2), H * H)
        self.gate = nn.Linear(D, H)

    def forward(self, x: torch.Tensor, call: LayerCall) -> AttentionOutput:
        mask, causal, need_weights, stochastic = call.mask, call.causal, call.need_weights, call.stochastic
        B, T, D = x.shape
        H, d = self.n_head, self.head_dim
        q, k, v = (self.heads(p, x) for p in (self.query, self.key, self.value))  # (B, H, T, d) each
        alpha = self.mix(torch.tanh(self.router(x))).view(B, T, H, H).softmax(dim=-2)  # (B, T, H_src, H_out)
        mix = alpha.transpose(-2, -1)  # (B, T, H_out, H_src): row h sums to 1
        gate = torch.sigmoid(self.gate(x)).transpose(1, 2)[..., None]  # (B, H, T, 1)
        if not need_weights:
            eye = torch.eye(H, dtype=x.dtype, device=x.device)
            g = gate[..., 0].transpose(1, 2)[..., None]  # (B, T, H, 1)
            per_query = (1 - g) * eye + g * mix  # (B, T, H_out, H_src): the whole pre-softmax map of query t
            before = lambda J, rows: (per_query[:, rows] @ J.transpose(1, 2)).transpose(1, 2)  # noqa: E731  (B, H, n, S)
            out = blocked_attention(q, k, v, allowed_keys(mask, causal, T, x.device), causal, head_scale(d), before,
                                    lambda P, rows: P, self.dropout if stochastic else 0.0)  # (B, H, T, d)
            return AttentionOutput(y=self.merge(out))
        logits = (q @ k.transpose(-2, -1)) * head_scale(d)  # (B, H, T, T)
        mixed = torch.einsum("btgh,bhts->bgts", mix, logits)  # (B, H, T, T)
        weights = masked_softmax((1 - gate) * logits + gate * mixed, mask, causal)  # (B, H, T, T)
        y = self.merge(self.weighted(weights, v, stochastic))  # (B, T, D)
        internals = {"mix": mix, "gate": gate[..., 0].transpose(1, 2)} if need_weights else None  # gate (B, T, H)
        return AttentionOutput(y=y, weights=weights if need_weights else None, internals=internals)


class DCMHA(Mechanism):
    name = "dcmha"
    title = "Dynamically composable multi-head attention (DCMHA)"
    reference = "Xiao et al., ICML 2024, arXiv 2405.08553"
    rotary_positions = False  # it composes the heads' scores in steps of its own
    options_type = ComposeOptions
    signed_attention = True  # composed again after the softmax

    def interventions(self, config) -> list[Intervention]:
        return [Intervention("without_composition", "Dynamic weights set to zero (MHA)",
                             "Compose becomes the identity before and after the softmax.",
                             make=lambda model, tokens: ComposeOptions(without_composition=True))]

    def build_layer(self, config, layer_index: int) -> nn.Module:
        return ComposedAttention(config)

    def structure_sources(self, model) -> dict[str, list[nn.Module]]:
        return {f"layer {i + 1}": [block.attn.dynamic] for i, block in enumerate(model.blocks)}  # w1, w2, dd per token


    def structures(self, model, layers: Sequence, positions: np.ndarray, options) -> list[Structure]:
        maps: dict[str, list] = {use: [] for use in USES}
        for dw in (layer.internals for layer in layers):
            for use in USES:
                maps[use].append(head_map(*(t[0] for t in dw[use])).cpu().numpy())  # (T, H, H)
        stacked = {use: np.stack(v) for use, v in maps.items()}  # (L, T, H, H)
        axes = ("layer", "token", "head_in", "head_out")
        out = []
        for use, title, what in (("pre_q", "Query-wise composition of logits W_q(t)", "before the softmax"),
                                 ("pre_k", "Key-wise composition of logits W_k(s)", "before the softmax"),
                                 ("post_q", "Query-wise composition of weights W_q(t)", "after the softmax"),
                                 ("post_k", "Key-wise composition of weights W_k(s)", "after the softmax")):
            side = "query" if use.endswith("q") else "key"
            out.append(Structure(
                f"compose_{use}", title, stacked[use], axes, StructureKind.HEAD_BY_HEAD,
                f"The H×H map (w1ᵀw2 + diag tanh dd) this {side} token adds to the identity {what}: row h, column g "
                f"= how much head h feeds head g. Computed from the token, so it changes along the sequence.",
                Identifiability.LEARNED, axis_titles={"head_in": "head h (feeds)", "head_out": "head g (fed)"},
                unit="weight"))
        norms = np.stack([np.linalg.norm(stacked[use], axis=(-2, -1)) for use in USES], axis=-1)  # (L, T, 4)
        out.append(Structure("compose_norms", "Composition strength along the sequence", norms,
                             ("layer", "token", "use"), StructureKind.TOKEN_GATES,
                             "Frobenius norm of each token's four maps (pre/post softmax, query/key-wise); 0 = MHA.",
                             Identifiability.LEARNED, labels={"use": USES}, value_kind=ValueKind.MAGNITUDE,
                             unit="‖·‖_F"))
        return out

    def notes(self, config) -> list[str]:
        return ["DCMHA composes the heads' logits and attention weights with H×H maps computed from each query and "
                "key token; at initialisation the maps are zero and it computes exactly MHA."]


class DCMHAAuthors(Mechanism):
    name = "dcmha-authors"
    title = "DCMHA as simplified in the DAMCHA authors' code"
    reference = "DAMCHA authors' models/baselines.py, DCMHAAttention (a simplification of Xiao et al. 2024)"
    rotary_positions = False  # it composes the heads' scores in steps of its own

    def build_layer(self, config, layer_index: int) -> nn.Module:
        return AuthorsComposedAttention(config)

    def structure_sources(self, model) -> dict[str, list[nn.Module]]:
        return {f"layer {i + 1}": [block.attn.mix, block.attn.gate] for i, block in enumerate(model.blocks)}  # Mix(t), g(t)


    def structures(self, model, layers: Sequence, positions: np.ndarray, options) -> list[Structure]:
        mix = np.stack([layer.internals["mix"][0].cpu().numpy() for layer in layers])  # (L, T, H, H)
        gate = np.stack([layer.internals["gate"][0].cpu().numpy() for layer in layers])  # (L, T, H)
        return [
            Structure("head_mix", "Per-token head mixing Mix(t)", mix, ("layer", "token", "head_out", "head_src"),
                      StructureKind.HEAD_BY_HEAD, "Row h: the softmax over source heads that head h's logits mix, "
                      "from the query token's router.", Identifiability.LEARNED, value_kind=ValueKind.PROBABILITY,
                      axis_titles={"head_out": "head h (mixed)", "head_src": "source head g"}, unit="weight"),
            Structure("mix_gate", "Mixing gate g_h(t)", gate, ("layer", "token", "head"), StructureKind.TOKEN_GATES,
                      "How much of each head's logits is the mixed version (0: plain MHA logits).",
                      Identifiability.LEARNED, value_kind=ValueKind.PROBABILITY, unit="gate"),
        ]

    def notes(self, config) -> list[str]:
        return ["The DAMCHA authors' simplified DCMHA: one pre-softmax mixing per query token, gated; no key-wise "
                "term and no post-softmax compose (their models/baselines.py)."]
