"""Explicit attention computed one block of query rows at a time, for mechanisms that mix the heads'
scores or weights (talking heads, the DAMCHA authors' DCMHA) or whose queries and values differ in
width (ColMHA), where no fused kernel applies.

Written out whole, such a layer builds several (B, H, T, T) tensors and streams each through main
memory (30x MHA's time at T = 1024 on a CPU). Here each block's scores, mixes, softmax and weighted
values are done while the block is in cache, a causal block skips the keys after its last query, and
under autograd each block is recomputed in the backward pass (torch.utils.checkpoint), so no
(B, H, T, T) tensor is ever kept. The numbers are the explicit definition's, in another order.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

# Scores held at once by one block (elements): 4 MB in float32, which stays in a core's cache.
BLOCK_ELEMENTS = 2**20

# (scores or weights (B, H, n, S) of the query rows `rows`) -> the mixed ones (B, H', n, S)
HeadMix = Callable[[torch.Tensor, slice], torch.Tensor]


def block_rows(B: int, H: int, S: int) -> int:
    """Query rows per block: as many as keep one block's scores within BLOCK_ELEMENTS."""
    return max(1, BLOCK_ELEMENTS // max(1, B * H * S))


def blocked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor | None,
                      causal: bool, scale: float, before: HeadMix, after: HeadMix, dropout: float = 0.0) -> torch.Tensor:
    """after(softmax(before(q kᵀ · scale))) v over the allowed keys, block by block. (B, H', T, d)

    q, k: (B, H, T, e); v: (B, H', T, d); allowed: (B|1, 1, T, T) allowed (query, key) pairs or None
    (every pair, or plain causal as `causal` says; see base.allowed_keys); before/after: the
    mechanism's mixing of the scores before the softmax and of the weights after it; dropout: on the
    mixed weights, as the explicit path applies it."""
    B, _, T, _ = q.shape
    rows = block_rows(B, q.shape[1], T)
    grad = torch.is_grad_enabled()
    # Laid out once for the products of every block (the heads come strided from the projections).
    q, keys_t, v = (q * scale).contiguous(), k.transpose(-2, -1).contiguous(), v.contiguous()  # (B, H, e, T) keys
    outs = []
    for start in range(0, T, rows):
        block = slice(start, min(T, start + rows))
        S = block.stop if causal else T  # keys after the block's last query are masked for all its rows

        def one_block(q_rows, k_keys, v_keys, block=block, S=S):
            scores = before(q_rows @ k_keys, block)  # (B, H, n, S)
            keep = _block_mask(allowed, causal, block, S, q.device)  # (B|1, 1, n, S) or None
            if keep is not None:
                scores = scores.masked_fill(~keep, float("-inf"))  # (B, H, n, S)
            weights = after(scores.softmax(dim=-1), block)  # (B, H', n, S)
            if dropout > 0:
                weights = F.dropout(weights, dropout)
            return weights @ v_keys  # (B, H', n, d)

        args = (q[:, :, block], keys_t[..., :S], v[:, :, :S])
        outs.append(checkpoint(one_block, *args, use_reentrant=False) if grad else one_block(*args))
    return torch.cat(outs, dim=2)  # (B, H', T, d)


def _block_mask(allowed: torch.Tensor | None, causal: bool, block: slice, S: int, device) -> torch.Tensor | None:
    if allowed is not None:
        return allowed[..., block, :S]  # (B|1, 1, n, S)
    if not causal:
        return None
    queries = torch.arange(block.start, block.stop, device=device)  # (n,)
    return torch.arange(S, device=device)[None, :] <= queries[:, None]  # (n, S)
