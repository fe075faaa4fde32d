"""The cross-head metric M(x): context pooling, the generator f, the row sum and its fused form.

Notation (docs/design.md section 2): D = n_embd, H heads, d = D / H. M is D x D, read as
H x H blocks M_ij of d x d (rows of head i, columns of head j). The row sum
m_i = sum_j s_ij M_ij (paper Eq. 4) gives each head one d x d metric.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from damcha.model.mechanisms.cache import running_context

if TYPE_CHECKING:
    from damcha.model.config import ModelConfig

CHUNK_TOKENS = 1024  # tokens per chunk of chunked_queries: ~8 MB of metric at D=128, H=8


class MetricMode(StrEnum):
    """Inference-time weighting of the blocks of M(x) in the row sum (paper Eq. 4).

    full: m_i = sum_j M_ij; diagonal: m_i = M_ii; off_diagonal: m_i = sum_{j != i} M_ij;
    diagonal_scaled: m_i = H M_ii, the diagonal-only metric at the full metric's scale. Under the
    row sum M_ii = m_i / H + residue, so diagonal_scaled gives m_i + H residue: where it ties with
    full, diagonal-only lost by the 1 : (H − 1) split of m_i, not by cross-head structure.
    """

    FULL = "full"
    DIAGONAL = "diagonal"
    OFF_DIAGONAL = "off_diagonal"
    DIAGONAL_SCALED = "diagonal_scaled"

    def scales(self, n_head: int) -> tuple[float, float]:
        """(s_ii, s_ij for i != j) for H = n_head heads."""
        return {"full": (1.0, 1.0), "diagonal": (1.0, 0.0), "off_diagonal": (0.0, 1.0),
                "diagonal_scaled": (float(n_head), 0.0)}[self.value]

    @classmethod
    def parse(cls, value: MetricMode | str) -> MetricMode:
        try:
            return cls(value)
        except ValueError:
            names = ", ".join(m.value for m in cls)
            raise ValueError(f"unknown metric mode {value!r}; expected one of: {names}") from None


def context_means(x: torch.Tensor, real: torch.Tensor | None, causal: bool) -> torch.Tensor:
    """Pooled context of each query position, over real (non-padding) tokens only.

    x: (B, T, D); real: (B, T) bool or None (all real).
    Returns (B, T, D) prefix means c_t = mean(x_1..x_t) if causal, else (B, 1, D).
    """
    T = x.shape[1]
    if real is None:  # every token real: plain means, without a weighted copy of x
        if not causal:
            return x.mean(dim=1, keepdim=True)  # (B, 1, D)
        counts = torch.arange(1, T + 1, dtype=x.dtype, device=x.device).view(1, T, 1)  # (1, T, 1)
        return torch.cumsum(x, dim=1) / counts  # (B, T, D)
    w = real.to(x.dtype).unsqueeze(-1)  # (B, T, 1)
    if causal:
        sums = torch.cumsum(x * w, dim=1)  # (B, T, D)
        counts = torch.cumsum(w, dim=1)  # (B, T, 1)
    else:
        sums = (x * w).sum(dim=1, keepdim=True)  # (B, 1, D)
        counts = w.sum(dim=1, keepdim=True)  # (B, 1, 1)
    return sums / counts.clamp_min(1.0)  # a prefix of padding only gets a zero context


def block_scales(n_head: int, mode, like: torch.Tensor) -> torch.Tensor:
    """s_ij of the row sum as an (H, H) matrix: from a metric mode (s_ii on the diagonal, s_ij
    elsewhere), or given whole as a nested sequence or tensor (interventions on single blocks)."""
    if not isinstance(mode, (str, MetricMode)):
        return torch.as_tensor(mode, dtype=like.dtype, device=like.device).reshape(n_head, n_head)  # (H, H)
    s_diag, s_off = MetricMode.parse(mode).scales(n_head)
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


def per_position_queries(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """q = x^T m for a metric per position: (..., H, d) and (..., H, d, e) -> (..., H, e)."""
    if torch.compiler.is_compiling():  # inductor fuses the plain product with its gradients
        return (x.unsqueeze(-2) @ m).squeeze(-2)  # (..., H, e)
    return _PerPositionQueries.apply(x, m)


class _PerPositionQueries(torch.autograd.Function):
    """A batch of 1 x d by d x e products, one per position and head. Autograd would take
    the gradient of m as an outer-product batched matmul, 10x slower than the broadcast
    multiply written out here (and the largest cost of a causal training step)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, m)
        return (x.unsqueeze(-2) @ m).squeeze(-2)  # (..., H, e); a multiply-sum is faster alone but allocates m's size

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        x, m = ctx.saved_tensors
        grad_x = (m @ g.unsqueeze(-1)).squeeze(-1) if ctx.needs_input_grad[0] else None  # (..., H, d)
        grad_m = x.unsqueeze(-1) * g.unsqueeze(-2) if ctx.needs_input_grad[1] else None  # (..., H, d, e)
        return grad_x, grad_m


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
        widths = (D, *config.setting("generator_widths"))
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.out = nn.Linear(widths[-1], D * D)
        if config.setting("generator_start") == "identity":  # after the default start: the same random stream
            with torch.no_grad():
                self.out.bias.copy_(torch.eye(D).flatten())  # (D*D,): M(c) = I + read-out, m_i = I_d + read-out
        self.n_head = config.n_head
        self.head_dim = config.head_dim
        self.dropout = config.setting("generator_dropout")

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

    def fused_row_sum(self, c: torch.Tensor, mode: MetricMode | str, stochastic: bool = False,
                      prefix: dict | None = None) -> torch.Tensor:
        """m_i(c) without building M: the row sum folded into the last layer. (..., D) -> (..., H, d, d).

        The fold is recomputed from the naive parameter at every call, so gradients reach
        self.out exactly as on the explicit path, at the fused cost. prefix: a decoding cache's state,
        which keeps the fold for the rest of the decoding (its weights do not change meanwhile).
        """
        H = self.n_head
        d = c.shape[-1] // H
        if prefix is None:
            w_fused, b_fused = self.folded(mode)  # (H*d*d, w), (H*d*d,)
        else:
            key = ("fold", MetricMode.parse(mode))
            if key not in prefix:
                prefix[key] = self.folded(mode)
            w_fused, b_fused = prefix[key]  # (H*d*d, w), (H*d*d,)
        m = F.linear(self.features(c, stochastic), w_fused, b_fused)  # (..., H*d*d)
        return m.unflatten(-1, (H, d, d))  # (..., H, d, d)

    def folded(self, mode: MetricMode | str) -> tuple[torch.Tensor, torch.Tensor]:
        """The last layer with the row sum folded in: (H*d*d, w) weight and (H*d*d,) bias.

        Recomputed from the naive parameter at every call (about 1 ms at D=128, w=512), except
        for frozen weights (requires_grad False, as load_model returns them) without autograd:
        then it is memoised per mode and weight version. Only frozen weights may be memoised:
        an optimiser can rewrite a trainable weight without bumping its version counter (fused
        Adam does), and a stale fold would be silently wrong. The memo is a pure function of
        the weights, identical for every caller, so sharing it is safe.
        """
        mode = MetricMode.parse(mode)
        weight, bias = self.out.weight, self.out.bias
        if weight.requires_grad or bias.requires_grad or torch.is_grad_enabled():
            return self._fold(mode)
        key = (weight._version, bias._version, weight.data_ptr(), bias.data_ptr(), weight.dtype)
        memo = self.__dict__.setdefault("_fold_memo", {})
        hit = memo.get(mode)
        if hit is None or hit[0] != key:
            hit = (key, *self._fold(mode))
            memo[mode] = hit
        return hit[1], hit[2]

    def _fold(self, mode: MetricMode) -> tuple[torch.Tensor, torch.Tensor]:
        H, d = self.n_head, self.head_dim
        # sum_j s_ij W_ij = s_off * sum_j W_ij + (s_ii - s_off) * W_ii: a reduction and a strided
        # read, both bandwidth-bound, where an einsum with s is a badly shaped GEMM (and its
        # backward an outer-product GEMM), 15x slower at D=128, H=8, w=512.
        return fold_rows(self.out.weight, H, d, mode).reshape(H * d * d, -1), fold_rows(self.out.bias, H, d, mode).reshape(-1)


def fold_rows(w: torch.Tensor, H: int, d: int, mode: MetricMode) -> torch.Tensor:
    """sum_j s_ij w_ij over the column-head index of rows that produce M.

    w: (D*D, k) or (D*D,) read as (H, d, H, d*k) blocks. Returns (H, d, d*k).
    """
    s_diag, s_off = mode.scales(H)
    blocks = w.reshape(H, d, H, -1)  # (H, d, H, d*k)
    diagonal = blocks.diagonal(dim1=0, dim2=2).permute(2, 0, 1)  # (H, d, d*k): the blocks W_ii
    if s_off == 0:
        return diagonal * s_diag if s_diag != 1 else diagonal.contiguous()
    total = blocks.sum(dim=2)  # (H, d, d*k)
    if s_off != 1:
        total = total * s_off
    return total if s_diag == s_off else total + (s_diag - s_off) * diagonal


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
        self.static = config.setting("metric_input") == "static"
        # Any: which methods apply is decided by self.static (f's or the static metric's), not by a type
        self.generator: Any = StaticMetric(config) if self.static else MetricGenerator(config)
        self.n_head = config.n_head
        self.causal = config.causal
        self.bilinear = config.setting("score_form") == "bilinear"

    def forward(
        self,
        x: torch.Tensor,
        real: torch.Tensor | None,
        mode: MetricMode | str = MetricMode.FULL,
        explicit: bool = False,
        stochastic: bool = False,
        prefix: dict | None = None,
    ) -> HeadMetric:
        """x: (B, T, D) the input the metric is generated from; real: (B, T) bool or None. prefix: with a
        cache (causal only), the running sum and count of the tokens read before (cache.running_context)."""
        H = self.n_head
        if self.static:
            M = self.generator()[None, None]  # (1, 1, D, D): same for every input and position
            head = scaled_rows(M, H, mode) if self.bilinear else explicit_row_sum(M, H, mode)  # (1, 1, H, d, d|D)
            return HeadMetric(head=head, full=M if explicit else None)
        c = context_means(x, real, self.causal) if prefix is None else running_context(x, real, prefix)  # (B, P, D)
        if explicit or self.bilinear:  # the bilinear form needs every block of M
            M = self.generator.full_metric(c, stochastic)  # (B, P, D, D)
            head = scaled_rows(M, H, mode) if self.bilinear else explicit_row_sum(M, H, mode)  # (B, P, H, d, d|D)
            return HeadMetric(head=head, full=M if explicit else None, context=c)
        head = self.generator.fused_row_sum(c, mode, stochastic, prefix)  # (B, P, H, d, d)
        return HeadMetric(head=head, context=c)

    def intervened(self, x: torch.Tensor, real: torch.Tensor | None, scales, reference: torch.Tensor | None = None,
                   alpha: float = 1.0, drop_residue: bool = False, stochastic: bool = False) -> HeadMetric:
        """The metric under an intervention, always explicit: M' = reference + alpha (M(x) - reference)
        (reference (P|1, D, D): another input's M, or the validation mean), then optionally only its
        learned part, then the row sum (or the bilinear rows) with block scales s_ij = scales (a
        metric mode or an H x H matrix)."""
        H = self.n_head
        if self.static:
            c = None
            M = self.generator()[None, None]  # (1, 1, D, D)
        else:
            c = context_means(x, real, self.causal)  # (B, P, D)
            M = self.generator.full_metric(c, stochastic)  # (B, P, D, D)
        if reference is not None:
            M = reference.to(M.dtype) + alpha * (M - reference.to(M.dtype))  # (B|1, P, D, D)
        if drop_residue:
            M = learned_and_residue(M, H)[0]
        head = scaled_rows(M, H, scales) if self.bilinear else explicit_row_sum(M, H, scales)  # (B|1, P, H, d, d|D)
        return HeadMetric(head=head, full=M, context=c)

    def chunked_queries(self, x: torch.Tensor, real: torch.Tensor | None, x_heads: torch.Tensor,
                        mode: MetricMode | str, stochastic: bool = False) -> torch.Tensor:
        """q_t = x_t m(c_t) for a causal row-sum metric without gradients, CHUNK_TOKENS tokens at a
        time, so the (B, T, H, d, d) per-position metric never exists whole (inference memory).

        x: (B, T, D) metric input; x_heads: (B, T, H, d) scored input. Returns (B, H, T, d).
        """
        B, T, D = x.shape
        H, d = x_heads.shape[2], x_heads.shape[3]
        N = B * T
        c = context_means(x, real, True).reshape(N, D)  # (N, D)
        xf = x_heads.reshape(N * H, 1, d)  # (N*H, 1, d)
        w_fused, b_fused = self.generator.folded(mode)  # (H*d*d, w), (H*d*d,)
        n = min(CHUNK_TOKENS, N)
        # One buffer for every chunk's metric: a fresh 8 MB tensor per chunk would be page-faulted
        # in again each time (about as slow as the GEMM's bias copy into it).
        m = x.new_empty(n, H * d * d)  # (n, H*d*d)
        q = x.new_empty(N * H, 1, d)  # (N*H, 1, d)
        for s in range(0, N, n):
            e = min(s + n, N)
            h = self.generator.features(c[s:e], stochastic)  # (e-s, w)
            torch.addmm(b_fused, h, w_fused.t(), out=m[:e - s])  # (e-s, H*d*d)
            torch.bmm(xf[s * H:e * H], m[:e - s].view(-1, d, d), out=q[s * H:e * H])  # ((e-s)*H, 1, d)
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
