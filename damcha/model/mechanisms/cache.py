"""What a causal model keeps of the tokens it has read, so that the next call reads only the new ones
(generation without recomputing the prefix).

Each layer keeps its keys and values after any rotation; a mechanism that declares
`Mechanism.decodes_with_cache` reads and extends them through `attend_through_cache`. DAMCHA's metric
is a function of the mean of the prefix: its running sum and count live in `state` (the shared
generator's in the PrefixCache's, a per-layer generator's in its layer's), so M(c_t) at a new token
is the metric of the whole prefix, as a full recompute has it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class LayerCache:
    """keys: (B, H, S, e) and values: (B, H, S, d) of the S tokens seen; state: the mechanism's own."""

    keys: torch.Tensor | None = None
    values: torch.Tensor | None = None
    state: dict = field(default_factory=dict)

    def extend(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append the new tokens' keys (B, H, T, e) and values (B, H, T, d); returns every token's."""
        self.keys = k if self.keys is None else torch.cat([self.keys, k], dim=2)  # (B, H, S + T, e)
        self.values = v if self.values is None else torch.cat([self.values, v], dim=2)  # (B, H, S + T, d)
        return self.keys, self.values


@dataclass
class PrefixCache:
    """One LayerCache per layer, the real (non-padding) flags of the tokens seen, (B, S), and the shared
    module's state. length: S, the tokens seen."""

    layers: list[LayerCache]
    real: torch.Tensor | None = None
    length: int = 0
    state: dict = field(default_factory=dict)

    @classmethod
    def empty(cls, n_layer: int) -> PrefixCache:
        return cls([LayerCache() for _ in range(n_layer)])

    def mask(self, new_real: torch.Tensor) -> torch.Tensor | None:
        """The allowed (query, key) pairs of T new tokens against all S + T, (B, 1, T, S + T): key s is
        allowed for new query t when s <= S + t and s is real; a padded query that would see no key
        attends to itself (as operations.attention_mask has it). None: every pair allowed (one new
        token, no padding anywhere)."""
        B, T = new_real.shape
        S = self.length
        seen = torch.ones(B, S, dtype=torch.bool, device=new_real.device) if self.real is None else self.real
        every = torch.cat([seen, new_real], dim=1)  # (B, S + T)
        if T == 1 and bool(every.all()):
            return None
        query_at = torch.arange(S, S + T, device=new_real.device)[:, None]  # (T, 1)
        key_at = torch.arange(S + T, device=new_real.device)[None, :]  # (1, S + T)
        allowed = every[:, None, None, :] & (key_at <= query_at)  # (B, 1, T, S + T)
        empty = ~allowed.any(dim=-1, keepdim=True)  # (B, 1, T, 1)
        return allowed | (empty & (key_at == query_at))  # (B, 1, T, S + T)

    def reorder_cache(self, beam_idx: torch.Tensor) -> None:
        """Keep, for each row, the cache of row beam_idx[row] (beam search's step: Hugging Face's generate() calls
        this with the surviving beams' rows): every layer's keys, values and state, the real flags and the shared
        state, all of which hold the batch first."""
        def pick(t: torch.Tensor) -> torch.Tensor:
            return t.index_select(0, beam_idx.to(t.device))  # (B, ...)

        for layer in self.layers:
            layer.keys = None if layer.keys is None else pick(layer.keys)  # (B, H, S, e)
            layer.values = None if layer.values is None else pick(layer.values)  # (B, H, S, d)
            layer.state = {k: pick(v) if isinstance(v, torch.Tensor) else v for k, v in layer.state.items()}
        self.real = None if self.real is None else pick(self.real)  # (B, S)
        self.state = {k: pick(v) if isinstance(v, torch.Tensor) else v for k, v in self.state.items()}

    def advance(self, new_real: torch.Tensor) -> None:
        """Record T new tokens as seen (after every layer has extended its keys and values)."""
        if self.real is not None or not bool(new_real.all()):
            seen = (torch.ones(new_real.shape[0], self.length, dtype=torch.bool, device=new_real.device)
                    if self.real is None else self.real)
            self.real = torch.cat([seen, new_real], dim=1)  # (B, S + T)
        self.length += new_real.shape[1]


def running_context(x: torch.Tensor, real: torch.Tensor | None, state: dict) -> torch.Tensor:
    """Prefix means c_t over the tokens seen before (state's "sum" (B, D) and "count" (B, 1)) and the new
    ones, real tokens only; the state then holds the totals. x: (B, T, D). Returns (B, T, D)."""
    w = (torch.ones_like(x[..., :1]) if real is None else real.to(x.dtype).unsqueeze(-1))  # (B, T, 1)
    sums = torch.cumsum(x * w, dim=1)  # (B, T, D)
    counts = torch.cumsum(w, dim=1)  # (B, T, 1)
    if "sum" in state:
        sums = sums + state["sum"][:, None]  # (B, T, D)
        counts = counts + state["count"][:, None]  # (B, T, 1)
    state["sum"], state["count"] = sums[:, -1], counts[:, -1]  # (B, D), (B, 1)
    return sums / counts.clamp_min(1.0)  # (B, T, D)
