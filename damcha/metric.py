"""The cross-head metric M(x): context pooling, the generator f, the row sum and its fused form.

Notation (DESIGN.md section 2): D = n_embd, H heads, d = D / H. M is D x D, read as
H x H blocks M_ij of d x d (rows of head i, columns of head j). The row sum
m_i = sum_j s_ij M_ij (paper Eq. 4) gives each head one d x d metric.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .config import MetricMode, ModelConfig

CHUNK_TOKENS = 1024  # tokens per chunk of chunked_queries: ~8 MB of metric at D=128, H=8


def context_means(x: torch.Tensor, real: torch.Tensor | None, causal: bool) -> torch.Tensor:
    """Pooled context of each query position, over real (non-padding) tokens only.

    x: (B, T, D); real: (B, T) bool or None (all real).
    Returns (B, T, D) prefix means c_t = mean(x_1..x_t) if causal, else (B, 1, D).
    """
    B, T, _ = x.shape
    w = torch.ones(B, T, 1, dtype=x.dtype, device=x.device) if real is None else real.to(x.dtype).unsqueeze(-1)  # (B, T, 1)
    if causal:
        sums = torch.cumsum(x * w, dim=1)  # (B, T, D)
        counts = torch.cumsum(w, dim=1)  # (B, T, 1)
    else:
        sums = (x * w).sum(dim=1, keepdim=True)  # (B, 1, D)
        counts = w.sum(dim=1, keepdim=True)  # (B, 1, 1)
    return sums / counts.clamp_min(1.0)  # a prefix of padding only gets a zero context


def block_scales(n_head: int, mode: MetricMode | str, like: torch.Tensor) -> torch.Tensor:
    """s_ij of the row sum as an (H, H) matrix: s_ii on the diagonal, s_ij elsewhere."""
    s_diag, s_off = MetricMode.parse(mode).scales
    eye = torch.eye(n_head, dtype=like.dtype, device=like.device)  # (H, H)
    return s_diag * eye + s_off * (1 - eye)  # (H, H)


def as_blocks(M: torch.Tensor, n_head: int) -> torch.Tensor:
    """(..., D, D) -> (..., H, d, H, d): index [i, p, j, q] = M[i*d + p, j*d + q]."""
    D = M.shape[-1]
    d = D // n_head
    return M.reshape(*M.shape[:-2], n_head, d, n_head, d)


def explicit_row_sum(M: torch.Tensor, n_head: int, mode: MetricMode | str) -> torch.Tensor:
    """m_i = sum_j s_ij M_ij from the full metric. (..., D, D) -> (..., H, d, d)."""
    blocks = as_blocks(M, n_head)  # (..., H, d, H, d)
    s = block_scales(n_head, mode, M)  # (H, H)
    return torch.einsum("...ipjq,ij->...ipq", blocks, s)  # (..., H, d, d)


def scaled_rows(M: torch.Tensor, n_head: int, mode: MetricMode | str) -> torch.Tensor:
    """Rows of head i with block j scaled by s_ij, for the bilinear form. (..., D, D) -> (..., H, d, D)."""
    blocks = as_blocks(M, n_head)  # (..., H, d, H, d)
    s = block_scales(n_head, mode, M)  # (H, H)
    scaled = blocks * s[:, None, :, None]  # (..., H, d, H, d)
    return scaled.reshape(*M.shape[:-2], n_head, M.shape[-1] // n_head, M.shape[-1])  # (..., H, d, D)


def learned_and_residue(M: torch.Tensor, n_head: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Split M into the part the row sum can learn and the part it cannot.

    Every block of row i reaches the loss only through m_i = sum_j M_ij, so under the row
    sum the identifiable part of block M_ij is the row mean m_i / H; the residue
    M_ij - m_i / H has zero row mean and receives no gradient signal of its own.
    Returns (learned, residue), both (..., D, D), learned + residue == M.
    """
    blocks = as_blocks(M, n_head)  # (..., H, d, H, d)
    row_mean = blocks.mean(dim=-2, keepdim=True)  # (..., H, d, 1, d)
    learned = row_mean.expand_as(blocks).reshape(M.shape)  # (..., D, D)
    return learned, M - learned


def block_norms(M: torch.Tensor, n_head: int) -> torch.Tensor:
    """Frobenius norm of every block M_ij. (..., D, D) -> (..., H, H)."""
    blocks = as_blocks(M, n_head)  # (..., H, d, H, d)
    return blocks.pow(2).sum(dim=(-3, -1)).sqrt()  # (..., H, H)


@dataclass
class HeadMetric:
    """What the scores need from M(x), at P positions (P = T for causal models, else 1).

    head: (B, P, H, d, d) for the row sum (the m_i), (B, P, H, d, D) for the bilinear form.
    full: (B, P, D, D) full M(x), only on the explicit path.
    context: (B, P, D) pooled context the metric was generated from (None for a static metric).
    """

    head: torch.Tensor
    full: torch.Tensor | None = None
    context: torch.Tensor | None = None


class MetricGenerator(nn.Module):
    """f_theta: MLP D -> widths -> D*D (GELU, dropout), output read row-major as M(c)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        D = config.n_embd
        widths = (D, *config.generator_widths)
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.out = nn.Linear(widths[-1], D * D)
        self.n_head = config.n_head
        self.dropout = config.generator_dropout

    def features(self, c: torch.Tensor, stochastic: bool) -> torch.Tensor:
        """Hidden features h(c) that the last layer reads. (..., D) -> (..., widths[-1])."""
        h = c
        for layer in self.hidden:
            h = F.dropout(F.gelu(layer(h)), self.dropout, training=stochastic)  # (..., w)
        return h

    def full_metric(self, c: torch.Tensor, stochastic: bool = False) -> torch.Tensor:
        """M(c), explicit. (..., D) -> (..., D, D)."""
        D = c.shape[-1]
        return self.out(self.features(c, stochastic)).unflatten(-1, (D, D))  # (..., D, D)

    def fused_row_sum(self, c: torch.Tensor, mode: MetricMode | str, stochastic: bool = False) -> torch.Tensor:
        """m_i(c) without building M: the row sum folded into the last layer. (..., D) -> (..., H, d, d).

        The fold is recomputed from the naive parameter at every call, so gradients reach
        self.out exactly as on the explicit path, at the fused cost.
        """
        H = self.n_head
        d = c.shape[-1] // H
        w_fused, b_fused = self.folded(mode)  # (H*d*d, w), (H*d*d,)
        m = F.linear(self.features(c, stochastic), w_fused, b_fused)  # (..., H*d*d)
        return m.unflatten(-1, (H, d, d))  # (..., H, d, d)

    def folded(self, mode: MetricMode | str) -> tuple[torch.Tensor, torch.Tensor]:
        """The last layer with the row sum folded in: (H*d*d, w) weight and (H*d*d,) bias.

        With gradients on, it is recomputed from the naive parameter every call. Without
        (inference), it is memoised per mode and parameter version: folding reads all D*D*w
        weights, which would otherwise dominate a short non-causal forward. The memo is a pure
        function of the weights, identical for every caller, so sharing it is safe.
        """
        H = self.n_head
        d = self.out.weight.shape[0] // (H * H)
        d = int(round(d ** 0.5))
        mode = MetricMode.parse(mode)
        if torch.is_grad_enabled() and self.out.weight.requires_grad:
            return self._fold(mode, H, d)
        key = (self.out.weight._version, self.out.bias._version, self.out.weight.data_ptr(), self.out.weight.dtype)
        memo = self.__dict__.setdefault("_fold_memo", {})
        hit = memo.get(mode)
        if hit is None or hit[0] != key:
            hit = (key, *self._fold(mode, H, d))
            memo[mode] = hit
        return hit[1], hit[2]

    def _fold(self, mode: MetricMode, H: int, d: int) -> tuple[torch.Tensor, torch.Tensor]:
        s = block_scales(H, mode, self.out.weight)  # (H, H)
        w = self.out.weight.view(H, d, H, d, -1)  # (H, d, H, d, w)
        b = self.out.bias.view(H, d, H, d)  # (H, d, H, d)
        w_fused = torch.einsum("ipjqk,ij->ipqk", w, s).reshape(H * d * d, -1)  # (H*d*d, w)
        b_fused = torch.einsum("ipjq,ij->ipq", b, s).reshape(H * d * d)  # (H*d*d,)
        return w_fused, b_fused


class StaticMetric(nn.Module):
    """"w/o f(x)": one learned D x D matrix, initialised to the identity, the same for every input."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.weight = nn.Parameter(torch.eye(config.n_embd))  # (D, D)
        self.n_head = config.n_head

    def forward(self) -> torch.Tensor:
        """M, (D, D). A module call (not a bare parameter read) so attribution can hook it."""
        return self.weight


class MetricSource(nn.Module):
    """Computes the HeadMetric for a layer from its input: f(x) or a static matrix."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.static = config.metric_input == "static"
        self.generator = StaticMetric(config) if self.static else MetricGenerator(config)
        self.n_head = config.n_head
        self.causal = config.causal
        self.bilinear = config.score_form == "bilinear"

    def forward(
        self,
        x: torch.Tensor,
        real: torch.Tensor | None,
        mode: MetricMode | str = MetricMode.FULL,
        explicit: bool = False,
        stochastic: bool = False,
    ) -> HeadMetric:
        """x: (B, T, D) the input the metric is generated from; real: (B, T) bool or None."""
        H = self.n_head
        if self.static:
            M = self.generator()[None, None]  # (1, 1, D, D): same for every input and position
            head = scaled_rows(M, H, mode) if self.bilinear else explicit_row_sum(M, H, mode)  # (1, 1, H, d, d|D)
            return HeadMetric(head=head, full=M if explicit else None)
        c = context_means(x, real, self.causal)  # (B, P, D)
        if explicit or self.bilinear:  # the bilinear form needs every block of M
            M = self.generator.full_metric(c, stochastic)  # (B, P, D, D)
            head = scaled_rows(M, H, mode) if self.bilinear else explicit_row_sum(M, H, mode)  # (B, P, H, d, d|D)
            return HeadMetric(head=head, full=M if explicit else None, context=c)
        head = self.generator.fused_row_sum(c, mode, stochastic)  # (B, P, H, d, d)
        return HeadMetric(head=head, context=c)

    def chunked_queries(self, x: torch.Tensor, real: torch.Tensor | None, x_heads: torch.Tensor,
                        mode: MetricMode | str, stochastic: bool = False) -> torch.Tensor:
        """q_t = x_t m(c_t) for a causal row-sum metric without gradients, CHUNK_TOKENS tokens at a
        time, so the (B, T, H, d, d) per-position metric never exists whole (inference memory).

        x: (B, T, D) metric input; x_heads: (B, T, H, d) scored input. Returns (B, H, T, d).
        """
        B, T, D = x.shape
        H, d = x_heads.shape[2], x_heads.shape[3]
        c = context_means(x, real, True).reshape(B * T, D)  # (B*T, D)
        xf = x_heads.reshape(B * T, H, 1, d)  # (B*T, H, 1, d)
        w_fused, b_fused = self.generator.folded(mode)  # (H*d*d, w), (H*d*d,)
        q = x.new_empty(B * T, H, d)  # (B*T, H, d)
        for s in range(0, B * T, CHUNK_TOKENS):
            h = self.generator.features(c[s:s + CHUNK_TOKENS], stochastic)  # (n, w)
            m = F.linear(h, w_fused, b_fused).view(-1, H, d, d)  # (n, H, d, d)
            q[s:s + CHUNK_TOKENS] = (xf[s:s + CHUNK_TOKENS] @ m).squeeze(-2)  # (n, H, d)
        return q.view(B, T, H, d).transpose(1, 2)  # (B, H, T, d)

    def full_metric(self, c: torch.Tensor) -> torch.Tensor:
        """M at given contexts (..., D) -> (..., D, D); a static metric ignores c."""
        if self.static:
            M = self.generator()  # (D, D)
            return M.expand(*c.shape[:-1], *M.shape)
        return self.generator.full_metric(c)

    def last_layer(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(weight, bias) whose rows produce M: (D*D, w) and (D*D,) for f, (D, D) and None if static."""
        if self.static:
            return self.generator.weight, None
        return self.generator.out.weight, self.generator.out.bias


def within_row_residual(weight: torch.Tensor, n_embd: int, n_head: int) -> torch.Tensor:
    """Residual of the entries that produce M across the blocks of each row.

    weight: the generator's last-layer weight (D*D, w) or bias (D*D,), or a static M (D, D).
    Returns (H, d, H, d, k): the entries minus their mean over the column-head index j.
    Under the row sum with Adam (no decoupled weight decay) this never changes in training.
    """
    d = n_embd // n_head
    blocks = weight.reshape(n_head, d, n_head, d, -1)  # (H, d, H, d, k)
    return blocks - blocks.mean(dim=2, keepdim=True)  # (H, d, H, d, k)
