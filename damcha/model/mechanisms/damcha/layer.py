"""DAMCHA's attention layer (Duan et al. 2026): scores under an input-dependent cross-head metric M(x).

The metric maths (context pooling, the generator f, the row sum and its fused form) lives in
`damcha.model.mechanisms.damcha.metric`; the mechanism's declarations for the registry (settings,
structures, interventions) in `damcha.model.mechanisms.damcha.mechanism`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from damcha.model.mechanisms.base import AttentionOutput, ForwardOptions, LayerCall
from damcha.model.mechanisms.damcha.metric import (
    HeadMetric,
    MetricMode,
    MetricSource,
    per_position_queries,
)
from damcha.model.mechanisms.operations import attend, attend_through_cache, head_scale

METRIC_SHARINGS = ("shared", "per_layer")
METRIC_INPUTS = ("adaptive", "static")
SCORE_FORMS = ("row_sum", "bilinear")
PROFILE_CHUNK = 64  # positions whose full D x D metric exists at once in a sequence profile (64 MB at D = 512)


@dataclass(frozen=True, eq=False)
class DamchaOptions(ForwardOptions):
    """metric_mode: inference-time row sum (full, diagonal-only, off-diagonal-only).
    explicit: build the full M(x) and explicit scores (inspection and tests), not the fused path.

    Interventions (damcha.analysis.interventions), each computed exactly on the explicit path:
    block_scales: an H x H matrix s_ij replacing the metric mode's (zero a block, keep one block,
        ablate a head's metric, scale the off-diagonal blocks);
    reference, alpha: use M' = reference + alpha (M(x) - reference) instead of M(x), reference of
        shape (L_m, P|1, D, D) with one entry per metric source (another input's M, the mean M);
    drop_residue: keep only the learned part of M (each block = its row mean)."""

    metric_mode: MetricMode | str = MetricMode.FULL
    explicit: bool = False
    block_scales: np.ndarray | Sequence[Sequence[float]] | None = None  # kept as nested tuples (hashable)
    reference: torch.Tensor | None = None
    alpha: float = 1.0
    drop_residue: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "metric_mode", MetricMode.parse(self.metric_mode))
        if self.block_scales is not None:
            object.__setattr__(self, "block_scales", tuple(tuple(float(v) for v in row) for row in self.block_scales))

    @property
    def intervened(self) -> bool:
        return self.block_scales is not None or self.reference is not None or self.drop_residue or self.alpha != 1.0

    @property
    def scales(self):
        return self.block_scales if self.block_scales is not None else self.metric_mode

    def _key(self) -> tuple:
        ref = None if self.reference is None else (tuple(self.reference.shape), self.reference.detach().cpu().numpy().tobytes())
        return (self.metric_mode, self.explicit, self.block_scales, ref, self.alpha, self.drop_residue)

    def __eq__(self, other) -> bool:
        return isinstance(other, DamchaOptions) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


class MetricAttention(nn.Module):
    """DAMCHA attention. Head i scores query t against key s with its own metric:

    row sum (paper):   S_i[t, s] = x_{t,i}^T m_i(c_t) x_{s,i} / sqrt(d)
    bilinear (extension beyond the paper):
                       S_i[t, s] = x_{t,i}^T (sum_j M_ij(c_t) x_{s,j}) / sqrt(d)

    There are no Q/K projections; values and output are the usual V = x W_V, y = O W_O.
    With per-layer metrics the layer owns its MetricSource; with a shared metric the
    transformer passes in the HeadMetric it computed once from the stack input.
    """

    def __init__(self, config, own_metric: bool, index: int = 0):
        super().__init__()
        self.index = index  # which metric source this is (interventions give one reference per source)
        D = config.n_embd
        self.n_head = config.n_head
        self.head_dim = config.head_dim
        self.bilinear = config.setting("score_form") == "bilinear"
        self.dropout = config.dropout
        self.value = nn.Linear(D, D)
        self.proj = nn.Linear(D, D)
        self.metric_source = MetricSource(config) if own_metric else None

    def forward(self, x: torch.Tensor, call: LayerCall[DamchaOptions]) -> AttentionOutput:
        real, mask, causal, options = call.real, call.mask, call.causal, call.options
        need_weights, stochastic, shared = call.need_weights, call.stochastic, call.shared
        B, T, D = x.shape
        H, d = self.n_head, self.head_dim
        if self._streams_metric(causal, options, need_weights) and call.cache is None:
            assert self.metric_source is not None  # (_streams_metric: this layer's own metric)
            metric = None  # built chunk by chunk, never whole
            q = self.metric_source.chunked_queries(x, real, x.view(B, T, H, d), options.metric_mode, stochastic)  # (B, H, T, d)
            k = x.view(B, T, H, d).transpose(1, 2).contiguous()  # (B, H, T, d)
        else:
            prefix = None if call.cache is None else call.cache.state  # this layer's own metric's running context
            metric = self._metric(x, real, options, stochastic, shared, prefix)
            q, k = self.queries_and_keys(x, metric)  # (B, H, T, d|D) each
        v = self.value(x).view(B, T, H, d).transpose(1, 2)  # (B, H, T, d)
        if call.cache is not None:
            out, weights = attend_through_cache(q, k, v, call, head_scale(d))  # (B, H, T, d)
        else:
            out, weights = attend(q, k, v, mask, causal, head_scale(d), self.dropout if stochastic else 0.0,
                                  need_weights, call.site, call.rotary)  # (B, H, T, d)
        y = self.proj(out.transpose(1, 2).reshape(B, T, D))  # (B, T, D)
        return AttentionOutput(y=y, weights=weights, internals=metric)

    def _streams_metric(self, causal: bool, options: DamchaOptions, need_weights: bool) -> bool:
        """Inference with this layer's own per-position row-sum metric: the chunked path."""
        src = self.metric_source
        return (src is not None and causal and not self.bilinear and not src.static and not options.explicit
                and not options.intervened and not need_weights and not torch.is_grad_enabled())

    def _metric(self, x, real, options: DamchaOptions, stochastic: bool, shared: HeadMetric | None,
                prefix: dict | None) -> HeadMetric:
        if self.metric_source is None:
            assert shared is not None, "a layer without its own metric needs the shared one"
            return shared
        return run_source(self.metric_source, self.index, x, real, options, stochastic, prefix)

    def queries_and_keys(self, x: torch.Tensor, metric: HeadMetric) -> tuple[torch.Tensor, torch.Tensor]:
        """q_t = x_{t,i}^T m_i(c_t) (per head), k_s = x_{s,i} (row sum) or all of x_s (bilinear)."""
        B, T, D = x.shape
        H, d = self.n_head, self.head_dim
        x_heads = x.view(B, T, H, d)  # (B, T, H, d)
        # One head-major copy serves as the keys and as the per-head GEMM's operand (which would
        # otherwise copy it itself).
        x_by_head = x_heads.transpose(1, 2) if self.bilinear else x_heads.transpose(1, 2).contiguous()  # (B, H, T, d)
        m = metric.head  # (B|1, P, H, d, d) row sum or (B|1, P, H, d, D) bilinear; P in {1, T}
        if m.shape[1] == 1:  # one metric per sequence: a batched GEMM per head
            q = x_by_head @ m[:, 0]  # (B, H, T, d|D)
        else:  # one metric per query position
            q = per_position_queries(x_heads, m).transpose(1, 2)  # (B, H, T, d|D)
        k = x[:, None].expand(B, H, T, D) if self.bilinear else x_by_head  # (B, H, T, D|d)
        return q, k


def run_source(source: MetricSource, index: int, x, real, options: DamchaOptions, stochastic: bool,
               prefix: dict | None = None) -> HeadMetric:
    """The HeadMetric of metric source `index`, under the options' interventions if any. prefix: with a
    cache, the source's running context of the tokens read before (interventions are refused a cache)."""
    if options.intervened:
        reference = None if options.reference is None else options.reference[index]
        return source.intervened(x, real, options.scales, reference, options.alpha, options.drop_residue, stochastic)
    return source(x, real, options.metric_mode, explicit=options.explicit, stochastic=stochastic, prefix=prefix)


def metric_sources(model) -> list[MetricSource]:
    """The generator(s) of M: one for a shared metric, one per layer otherwise."""
    if model.metric_source is not None:
        return [model.metric_source]
    return [b.attn.metric_source for b in model.blocks if getattr(b.attn, "metric_source", None) is not None]
