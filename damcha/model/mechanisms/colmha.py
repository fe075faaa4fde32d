"""Collaborative Multi-Head Attention (Cordonnier, Loukas, Jaggi 2020, arXiv 2006.16362), and the
re-parametrisation of MHA in the DAMCHA authors' code.

ColMHA. All heads share one query and one key projection W~_Q, W~_K of size D x D~_k; head h
re-weights their coordinates with its mixing vector m_h:

    score_h(t, s) = (x_t W~_Q) diag(m_h) (x_s W~_K)^T / sqrt(D~_k / H) + x_s W_b[:, h],

where the content bias x_s W_b[:, h] is all that survives of the projection biases (query-only
terms cancel in the softmax over keys). Values and output are MHA's. Head h's effective bilinear
form W~_Q diag(m_h) W~_K^T is a D x D matrix, the closest static analogue of DAMCHA's per-head
metric. Mixing initialisations: "concatenate" (m_h = the indicator of block h of D~_k / H
coordinates: with W~ holding MHA's projections this is MHA), "all_ones", "uniform" (normal, std
0.2). D~_k defaults to D; the paper's saving comes from making it smaller. Its queries and keys are
D~_k + 1 wide and its values d: no fused kernel takes that, so outside inspection the scores are
computed a block of queries at a time (damcha.model.mechanisms.blocked).

colmha-authors (`CollaborativeAttention` in the DAMCHA authors' models/baselines.py, commit ffa99807):
shared bias-free projections W_Q, W_K (D x D), and per head h

    Q_h = sum_j C_Q[h, j] chunk_j(x W_Q),   K_h = sum_j C_K[h, j] chunk_j(x W_K),

C_Q, C_K two H x H matrices drawn as I + 0.01 N(0, 1); values and output projection with biases,
as MHA's. Linear re-parametrisations of W_Q and W_K: expressively the same as MHA without Q/K biases.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from damcha.model.mechanisms.base import AttentionOutput, ForwardOptions, Intervention, LayerCall, Mechanism, Setting
from damcha.model.mechanisms.blocked import blocked_attention
from damcha.model.mechanisms.operations import allowed_keys, attend, head_scale
from damcha.model.mechanisms.structures import Identifiability, Structure, StructureKind

MIXING_INITS = ("concatenate", "all_ones", "uniform")


@dataclass(frozen=True)
class CollaborativeOptions(ForwardOptions):
    """Intervention: concatenate_mixing replaces the learned m_h by block indicators (each head its own
    D~_k / H coordinates, as MHA's heads have)."""

    concatenate_mixing: bool = False


def mixing_init(H: int, dk: int, how: str) -> torch.Tensor:
    """(H, D~_k) mixing vectors m_h."""
    if how == "concatenate":
        return torch.kron(torch.eye(H), torch.ones(1, dk // H))  # (H, dk): block h of dk / H ones
    if how == "all_ones":
        return torch.ones(H, dk)
    return torch.randn(H, dk) * 0.2


class CollaborativeAttention(nn.Module):
    def __init__(self, config, dk: int, init: str):
        super().__init__()
        D, H = config.n_embd, config.n_head
        self.n_head, self.head_dim, self.dk = H, config.head_dim, dk
        self.dropout = config.dropout
        self.query = nn.Linear(D, dk, bias=False)  # W~_Q, shared by every head
        self.key = nn.Linear(D, dk, bias=False)  # W~_K
        self.mixing = nn.Parameter(mixing_init(H, dk, init))  # (H, dk): m_h
        self.content_bias = nn.Linear(D, H, bias=False)  # W_b
        self.value = nn.Linear(D, D)
        self.proj = nn.Linear(D, D)

    def forward(self, x: torch.Tensor, call: LayerCall[CollaborativeOptions]) -> AttentionOutput:
        mask, causal, options = call.mask, call.causal, call.options
        need_weights, stochastic = call.need_weights, call.stochastic
        B, T, D = x.shape
        H, d = self.n_head, self.head_dim
        mixing = mixing_init(H, self.dk, "concatenate").to(x) if options.concatenate_mixing else self.mixing  # (H, dk)
        q = self.query(x)[:, None] * mixing[None, :, None, :]  # (B, H, T, dk): x_t W~_Q diag(m_h)
        k = self.key(x)[:, None].expand(B, H, T, self.dk)  # (B, H, T, dk)
        bias = self.content_bias(x).transpose(1, 2)[:, :, None, :]  # (B, H, 1, T): x_s W_b[:, h]
        scale = head_scale(self.dk // H)
        # The content bias enters as extra key coordinates with a query of ones: one attention call
        # computes q.k * scale + bias without building the scores unless they are asked for.
        q = torch.cat([q, torch.full((B, H, T, 1), 1.0 / scale, dtype=x.dtype, device=x.device)], dim=-1)  # (B, H, T, dk+1)
        k = torch.cat([k, bias.transpose(-2, -1)], dim=-1)  # (B, H, T, dk+1)
        v = self.value(x).view(B, T, H, d).transpose(1, 2)  # (B, H, T, d)
        dropout = self.dropout if stochastic else 0.0
        if need_weights:
            out, weights = attend(q, k, v, mask, causal, scale, dropout, need_weights, call.site, call.rotary)  # (B, H, T, d)
        else:  # no fused kernel takes values narrower than the keys: the scores a block of queries at a time
            unmixed = lambda scores, rows: scores  # noqa: E731
            out, weights = blocked_attention(q, k, v, allowed_keys(mask, causal, T, x.device), causal, scale, unmixed,
                                             unmixed, dropout), None  # (B, H, T, d)
        y = self.proj(out.transpose(1, 2).reshape(B, T, D))  # (B, T, D)
        return AttentionOutput(y=y, weights=weights)


class AuthorsCollaborativeAttention(nn.Module):
    """colmha-authors: per-head queries and keys mixed across the chunks of shared bias-free projections."""

    def __init__(self, config):
        super().__init__()
        D, H = config.n_embd, config.n_head
        self.n_head, self.head_dim, self.dropout = H, config.head_dim, config.dropout
        self.query = nn.Linear(D, D, bias=False)  # W_Q, shared
        self.key = nn.Linear(D, D, bias=False)  # W_K, shared
        self.query_mixing = nn.Parameter(torch.eye(H) + 0.01 * torch.randn(H, H))  # C_Q (H, H)
        self.key_mixing = nn.Parameter(torch.eye(H) + 0.01 * torch.randn(H, H))  # C_K (H, H)
        self.value = nn.Linear(D, D)
        self.proj = nn.Linear(D, D)

    def forward(self, x: torch.Tensor, call: LayerCall) -> AttentionOutput:
        mask, causal, need_weights, stochastic = call.mask, call.causal, call.need_weights, call.stochastic
        B, T, D = x.shape
        H, d = self.n_head, self.head_dim
        chunks_q = self.query(x).view(B, T, H, d)  # (B, T, H, d): chunk_j(x W_Q)
        chunks_k = self.key(x).view(B, T, H, d)  # (B, T, H, d)
        q = torch.einsum("hj,btjd->bhtd", self.query_mixing, chunks_q)  # (B, H, T, d)
        k = torch.einsum("hj,btjd->bhtd", self.key_mixing, chunks_k)  # (B, H, T, d)
        v = self.value(x).view(B, T, H, d).transpose(1, 2)  # (B, H, T, d)
        out, weights = attend(q, k, v, mask, causal, head_scale(d), self.dropout if stochastic else 0.0,
                              need_weights, call.site, call.rotary)  # (B, H, T, d)
        y = self.proj(out.transpose(1, 2).reshape(B, T, D))  # (B, T, D)
        return AttentionOutput(y=y, weights=weights)


def _dk(config) -> int:
    return int(config.setting("colmha_dk") or config.n_embd)


class ColMHA(Mechanism):
    name = "colmha"
    title = "Collaborative multi-head attention (ColMHA)"
    reference = "Cordonnier, Loukas, Jaggi 2020, arXiv 2006.16362"
    rotary_positions = False  # its fused path scores blocks of queries with a bias column, outside the attend step
    declared_settings = (
        Setting("colmha_init", str, "concatenate", "how the mixing vectors start (the original's choices)", MIXING_INITS),
        Setting("colmha_dk", int, None, "the shared query/key dimension D~_k (default: n_embd)", minimum=1),
    )
    options_type = CollaborativeOptions

    def interventions(self, config) -> list[Intervention]:
        return [Intervention("concatenate_mixing", "'Concatenate' mixing", "Each head keeps only its own block of "
                             "D~_k / H shared coordinates, weighted 1.",
                             make=lambda model, tokens: CollaborativeOptions(concatenate_mixing=True))]

    def build_layer(self, config, layer_index: int) -> nn.Module:
        return CollaborativeAttention(config, _dk(config), config.setting("colmha_init"))

    def validate(self, config) -> None:
        super().validate(config)
        if _dk(config) % config.n_head:
            raise ValueError(f"colmha_dk ({_dk(config)}) must be divisible by n_head ({config.n_head})")


    def settings(self, config) -> dict:
        return {"shared key dimension D~_k": _dk(config), "mixing initialisation": config.setting("colmha_init")}

    def inference_bytes(self, config, T: int) -> int:
        """Every head's query and key are D~_k + 1 wide (MHA's: d): H (D~_k + 1)-wide queries and keys."""
        return 2 * config.n_head * T * (_dk(config) + 1) * 4

    def structures(self, model, layers: Sequence, positions: np.ndarray, options) -> list[Structure]:
        forms, mixing, overlap = [], [], []
        for b in model.blocks:
            a = b.attn
            m = a.mixing.detach()  # (H, dk)
            forms.append(torch.einsum("ki,hk,kj->hij", a.query.weight.detach(), m, a.key.weight.detach()).cpu().numpy())
            mixing.append(m.cpu().numpy())
            overlap.append((m @ m.T).cpu().numpy())
        return [
            Structure("qk_forms", "Per-head bilinear forms W~_Q diag(m_h) W~_Kᵀ", np.stack(forms),
                      ("layer", "head", "row", "col"), StructureKind.PER_HEAD_FORMS,
                      "Head h scores x_tᵀ B_h x_s (plus the content bias): the same for every input. The closest "
                      "static analogue of DAMCHA's per-head metric.", Identifiability.LEARNED,
                      labels={"head": [f"B_{h + 1}" for h in range(len(forms[0]))]},
                      axis_titles={"row": "query coordinate of x", "col": "key coordinate of x"}, unit="form entry"),
            Structure("mixing", "Mixing vectors m_h", np.stack(mixing), ("layer", "head", "coordinate"),
                      StructureKind.MATRIX, "Row h: how head h weights each coordinate of the shared "
                      "query/key space.", Identifiability.LEARNED, unit="weight"),
            Structure("head_overlap", "Head overlap M Mᵀ", np.stack(overlap), ("layer", "head_i", "head_j"),
                      StructureKind.HEAD_BY_HEAD, "How much two heads' mixing vectors share coordinates "
                      "(diagonal under 'concatenate' at initialisation).", Identifiability.LEARNED, unit="overlap"),
        ]

    def notes(self, config) -> list[str]:
        return ["Collaborative heads share one query/key space; each head re-weights its coordinates with a "
                "mixing vector m_h. The per-head forms are fixed after training, like MHA's."]


class ColMHAAuthors(Mechanism):
    rotary_positions = True  # every score goes through the shared attend step, call.rotary passed on
    name = "colmha-authors"
    title = "ColMHA as written in the DAMCHA authors' code"
    reference = "DAMCHA authors' models/baselines.py, CollaborativeAttention (after Cordonnier et al. 2020)"

    def build_layer(self, config, layer_index: int) -> nn.Module:
        return AuthorsCollaborativeAttention(config)

    def structures(self, model, layers: Sequence, positions: np.ndarray, options) -> list[Structure]:
        out = []
        for name, title, side in (("query_mixing", "Query mixing C_Q", "query"), ("key_mixing", "Key mixing C_K", "key")):
            C = np.stack([getattr(b.attn, name).detach().cpu().numpy() for b in model.blocks])  # (L, H, H)
            out.append(Structure(name, title, C, ("layer", "head", "chunk"), StructureKind.HEAD_BY_HEAD,
                                 f"Head h's {side} is Σ_j C[h, j] chunk_j of the shared {side} projection "
                                 "(I + 0.01 N(0, 1) at the start).", Identifiability.LEARNED,
                                 axis_titles={"head": f"{side} head h", "chunk": f"chunk j of the shared {side}s"},
                                 unit="weight"))
        return out

    def notes(self, config) -> list[str]:
        return ["The DAMCHA authors' ColMHA mixes the chunks of shared, bias-free query and key projections with two "
                "H×H matrices: a re-parametrisation of W_Q and W_K, so it expresses what MHA without Q/K biases can, "
                "no more. Kept to compare with results obtained with that code."]
