"""The attention maths mechanisms share: masks, the softmax step (fused or explicit), the head scale,
and the projections most mechanisms have in common with MHA."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:
    from damcha.model.config import ModelConfig

# ----------------------------------------------------------------------------- shared attention maths

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


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, causal: bool,
           scale: float, dropout: float, need_weights: bool,
           site: Callable[[str, torch.Tensor], torch.Tensor] | None = None,
           rotary: bool | torch.Tensor = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """softmax(q k^T * scale) v with the masks. q, k: (B, H, T, e); v: (B, H, T, d).

    Without need_weights this is one fused scaled_dot_product_attention call that never
    builds the (B, H, T, T) scores; with it, the scores are explicit and returned, and `site`
    (LayerCall.site) may read or replace them: site("attn_scores", masked scores before the
    softmax) and site("pattern", weights), as interpretability hooks do. rotary: q and k are first
    rotated by their positions (RoPE, rotate-half form, base 10000): True, 0..T-1; a tensor, those positions.
    """
    if isinstance(rotary, torch.Tensor):
        q, k = rotate(q, positions=rotary), rotate(k, positions=rotary)  # (B, H, T, e) each
    elif rotary:
        q, k = rotate(q), rotate(k)  # (B, H, T, e) each
    if not need_weights:
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=causal and mask is None, scale=scale
        )  # (B, H, T, d)
        return out, None
    scores = (q @ k.transpose(-2, -1)) * scale  # (B, H, T, T)
    if site is None:
        weights = masked_softmax(scores, mask, causal)  # (B, H, T, T)
    else:
        allowed = allowed_keys(mask, causal, scores.shape[-1], scores.device)
        masked = scores if allowed is None else scores.masked_fill(~allowed, float("-inf"))  # (B, H, T, T)
        weights = site("pattern", site("attn_scores", masked).softmax(dim=-1))  # (B, H, T, T)
    out = F.dropout(weights, dropout) @ v if dropout > 0 else weights @ v  # (B, H, T, d)
    return out, weights


def attend_through_cache(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call, scale: float
                         ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """attend() for a call that reads its layer's cache (call.cache): the new tokens' q and k rotated at
    their positions (call.rotary, a tensor with a cache), their keys and values appended to the cache,
    and every new query against every key seen, under call.mask (the offsets into the cache). Decoding
    only: no dropout, no weights. q, k: (B, H, T, e); v: (B, H, T, d). Returns (B, H, T, d)."""
    if isinstance(call.rotary, torch.Tensor):
        q, k = rotate(q, positions=call.rotary), rotate(k, positions=call.rotary)  # (B, H, T, e) each
    k, v = call.cache.extend(k, v)  # (B, H, S + T, e), (B, H, S + T, d)
    return attend(q, k, v, call.mask, False, scale, 0.0, False)


def rotate(x: torch.Tensor, base: float = 10000.0, positions: torch.Tensor | None = None) -> torch.Tensor:
    """Rotary position embedding (rotate-half form, as Llama's): x (B, H, T, e), e even; row t at position t,
    or at positions[b, t] when given ((B, T) or (T,): a Hugging Face model's position_ids). The scores of
    rotated q and k depend on positions only through their difference."""
    T, e = x.shape[-2], x.shape[-1]
    if e % 2:
        raise ValueError(f"rotary positions need an even width of q and k, got {e}")
    if positions is None:
        positions = torch.arange(T, device=x.device)  # (T,)
    elif positions.shape[-1] != T or positions.dim() > 2:
        raise ValueError(f"position ids of shape {tuple(positions.shape)} for a sequence of {T}")
    frequency = base ** (-torch.arange(0, e, 2, device=x.device, dtype=torch.float32) / e)  # (e/2,)
    angle = positions.to(x.device, torch.float32)[..., None] * frequency  # (T, e/2) or (B, T, e/2)
    if angle.dim() == 3:
        angle = angle[:, None]  # (B, 1, T, e/2): every head at the row's position
    cos, sin = (torch.cat([f, f], dim=-1).to(x.dtype) for f in (angle.cos(), angle.sin()))  # (..., T, e) each
    half = torch.cat([-x[..., e // 2:], x[..., : e // 2]], dim=-1)  # (B, H, T, e)
    return x * cos + half * sin  # (B, H, T, e)


def allowed_keys(mask: torch.Tensor | None, causal: bool, T: int, device: torch.device) -> torch.Tensor | None:
    """The boolean mask of allowed (query, key) pairs, (B|1, 1, T, T), or None when every pair is allowed."""
    if mask is None and causal:
        return torch.ones(T, T, dtype=torch.bool, device=device).tril()[None, None]  # (1, 1, T, T)
    return mask


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None, causal: bool) -> torch.Tensor:
    """softmax over keys of explicit scores (B, H, T, T), with the causal and padding masks."""
    allowed = allowed_keys(mask, causal, scores.shape[-1], scores.device)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))  # (B, H, T, T)
    return scores.softmax(dim=-1)  # (B, H, T, T)


def head_scale(head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim)


class ProjectedAttention(nn.Module):
    """The parts most mechanisms share with MHA: per-head projections query, key, value and the
    output projection proj (D -> D each, with biases; created in that order, so seeded models
    initialise alike), and the head layout. width: the heads' query/key/value space (0: D); MHA's
    head_width setting widens it, for a baseline matched to another model's parameter count."""

    def __init__(self, config: ModelConfig, width: int = 0):
        super().__init__()
        D, W = config.n_embd, width or config.n_embd  # W: the heads side by side (0: D, each head D / H wide)
        self.n_head, self.head_dim, self.dropout = config.n_head, W // config.n_head, config.dropout
        self.query = nn.Linear(D, W)
        self.key = nn.Linear(D, W)
        self.value = nn.Linear(D, W)
        self.proj = nn.Linear(W, D)

    def heads(self, layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        """(B, T, D) -> (B, H, T, d) through one of the projections."""
        B, T, _ = x.shape
        return layer(x).view(B, T, self.n_head, self.head_dim).transpose(1, 2)

    def merge(self, out: torch.Tensor) -> torch.Tensor:
        """(B, H, T, d) head outputs -> (B, T, D) through the output projection."""
        B, H, T, d = out.shape
        return self.proj(out.transpose(1, 2).reshape(B, T, H * d))

    def weighted(self, weights: torch.Tensor, v: torch.Tensor, stochastic: bool) -> torch.Tensor:
        """Explicit weights (B, H, T, T) applied to values (B, H, T, d), with attention dropout in training."""
        return (F.dropout(weights, self.dropout) if stochastic and self.dropout > 0 else weights) @ v
