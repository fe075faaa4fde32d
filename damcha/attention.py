"""Attention layers: DAMCHA (scores under a per-input metric) and standard multi-head attention.

Both take the same arguments and return AttentionOutput, so the transformer swaps them
without any other change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .config import MetricMode, ModelConfig
from .metric import HeadMetric, MetricSource, per_position_queries


@dataclass
class AttentionOutput:
    """y: (B, T, D). weights: (B, H, T, T) attention probabilities, when asked for.
    metric: the HeadMetric this layer used (DAMCHA only)."""

    y: torch.Tensor
    weights: torch.Tensor | None = None
    metric: HeadMetric | None = None


def attention_mask(real: torch.Tensor | None, causal: bool, T: int, device: torch.device) -> torch.Tensor | None:
    """Boolean mask of allowed (query, key) pairs, (B, 1, T, T), or None when plain causal/none.

    A padded query that could see no key at all attends to itself, so no row is empty
    (its output is never used, but NaN must not appear).
    """
    if real is None:
        return None  # is_causal covers the causal case
    allowed = real[:, None, None, :]  # (B, 1, 1, T)
    if causal:
        allowed = allowed & torch.ones(T, T, dtype=torch.bool, device=device).tril()  # (B, 1, T, T)
    else:
        allowed = allowed.expand(-1, 1, T, T)  # (B, 1, T, T)
    eye = torch.eye(T, dtype=torch.bool, device=device)  # (T, T)
    empty = ~allowed.any(dim=-1, keepdim=True)  # (B, 1, T, 1)
    return allowed | (empty & eye)  # (B, 1, T, T)


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    causal: bool,
    scale: float,
    dropout: float,
    need_weights: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """softmax(q k^T * scale) v with the masks. q, k: (B, H, T, e); v: (B, H, T, d).

    Without need_weights this is one fused scaled_dot_product_attention call that never
    builds the (B, H, T, T) scores; with it, the scores are explicit and returned.
    """
    if not need_weights:
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=causal and mask is None, scale=scale
        )  # (B, H, T, d)
        return out, None
    T = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) * scale  # (B, H, T, T)
    if mask is None and causal:
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()  # (T, T)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))  # (B, H, T, T)
    weights = scores.softmax(dim=-1)  # (B, H, T, T)
    out = F.dropout(weights, dropout) @ v if dropout > 0 else weights @ v  # (B, H, T, d)
    return out, weights


class MetricAttention(nn.Module):
    """DAMCHA attention. Head i scores query t against key s with its own metric:

    row sum (paper):   S_i[t, s] = x_{t,i}^T m_i(c_t) x_{s,i} / sqrt(d)
    bilinear (extension beyond the paper):
                       S_i[t, s] = x_{t,i}^T (sum_j M_ij(c_t) x_{s,j}) / sqrt(d)

    There are no Q/K projections; values and output are the usual V = x W_V, y = O W_O.
    With per-layer metrics the layer owns its MetricSource; with a shared metric the
    transformer passes in the HeadMetric it computed once from the stack input.
    """

    def __init__(self, config: ModelConfig, own_metric: bool):
        super().__init__()
        D = config.n_embd
        self.n_head = config.n_head
        self.head_dim = config.head_dim
        self.causal = config.causal
        self.bilinear = config.score_form == "bilinear"
        self.dropout = config.dropout
        self.value = nn.Linear(D, D)
        self.proj = nn.Linear(D, D)
        self.metric_source = MetricSource(config) if own_metric else None

    def forward(
        self,
        x: torch.Tensor,
        real: torch.Tensor | None,
        mask: torch.Tensor | None,
        metric_mode: MetricMode | str = MetricMode.FULL,
        shared_metric: HeadMetric | None = None,
        explicit: bool = False,
        need_weights: bool = False,
        stochastic: bool = False,
    ) -> AttentionOutput:
        B, T, D = x.shape
        H, d = self.n_head, self.head_dim
        x_heads = x.view(B, T, H, d)  # (B, T, H, d)
        x_by_head = x_heads.transpose(1, 2)  # (B, H, T, d)
        if not self.bilinear:  # one head-major copy serves as the keys and as the per-head GEMM's
            x_by_head = x_by_head.contiguous()  # operand (which would otherwise copy it itself)
        src = self.metric_source
        if (src is not None and self.causal and not self.bilinear and not src.static and not explicit
                and not need_weights and not torch.is_grad_enabled()):
            # Inference with this layer's own per-position metric: build it chunk by chunk.
            metric = None
            q = src.chunked_queries(x, real, x_heads, metric_mode, stochastic)  # (B, H, T, d)
        else:
            if src is not None:
                metric = src(x, real, metric_mode, explicit=explicit, stochastic=stochastic)
            else:
                assert shared_metric is not None, "a layer without its own metric needs the shared one"
                metric = shared_metric
            m = metric.head  # (B|1, P, H, d, d) row sum or (B|1, P, H, d, D) bilinear; P in {1, T}
            if m.shape[1] == 1:  # one metric per sequence: a batched GEMM per head
                q = x_by_head @ m[:, 0]  # (B, H, T, d|D)
            else:  # one metric per query position: q_t = x_t^T m(c_t)
                q = per_position_queries(x_heads, m).transpose(1, 2)  # (B, H, T, d|D)
        if self.bilinear:
            k = x[:, None].expand(B, H, T, D)  # (B, H, T, D): every head reads all of x_s
        else:
            k = x_by_head  # (B, H, T, d)
        v = self.value(x).view(B, T, H, d).transpose(1, 2)  # (B, H, T, d)

        out, weights = attend(
            q, k, v, mask, self.causal, 1.0 / math.sqrt(d), self.dropout if stochastic else 0.0, need_weights
        )  # (B, H, T, d)
        y = self.proj(out.transpose(1, 2).reshape(B, T, D))  # (B, T, D)
        return AttentionOutput(y=y, weights=weights, metric=metric)


class MultiHeadAttention(nn.Module):
    """Standard multi-head attention, the baseline: Q = x W_Q, K = x W_K, V = x W_V, y = O W_O."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        D = config.n_embd
        self.n_head = config.n_head
        self.head_dim = config.head_dim
        self.causal = config.causal
        self.dropout = config.dropout
        self.query = nn.Linear(D, D)
        self.key = nn.Linear(D, D)
        self.value = nn.Linear(D, D)
        self.proj = nn.Linear(D, D)

    def forward(
        self,
        x: torch.Tensor,
        real: torch.Tensor | None,
        mask: torch.Tensor | None,
        metric_mode: MetricMode | str = MetricMode.FULL,
        shared_metric: HeadMetric | None = None,
        explicit: bool = False,
        need_weights: bool = False,
        stochastic: bool = False,
    ) -> AttentionOutput:
        if MetricMode.parse(metric_mode) is not MetricMode.FULL:
            raise ValueError("standard multi-head attention has no metric: only metric_mode='full' applies")
        B, T, D = x.shape
        H, d = self.n_head, self.head_dim
        q = self.query(x).view(B, T, H, d).transpose(1, 2)  # (B, H, T, d)
        k = self.key(x).view(B, T, H, d).transpose(1, 2)  # (B, H, T, d)
        v = self.value(x).view(B, T, H, d).transpose(1, 2)  # (B, H, T, d)
        out, weights = attend(
            q, k, v, mask, self.causal, 1.0 / math.sqrt(d), self.dropout if stochastic else 0.0, need_weights
        )  # (B, H, T, d)
        y = self.proj(out.transpose(1, 2).reshape(B, T, D))  # (B, T, D)
        return AttentionOutput(y=y, weights=weights)
