"""Interleaved Head Attention (Duvvuri, Ekbote, Bansal, Tiwari, Khatri, Brandfonbrener, Liang, Dhillon,
Zaheer, Feb 2026, arXiv 2602.21371).

Each head h builds P pseudo-queries, pseudo-keys and pseudo-values as learned mixes of all heads'
ordinary ones (q_j = x W_Q^j etc., MHA's projections):

    q~_{h,p}(t) = sum_j a_Q[h, j, p] q_j(t)      (likewise k~ with a_K, v~ with a_V; each (H, H, P))

interleaves them into a sequence of length T P (token t's pseudo-tokens at places t P + p), runs
one ordinary softmax attention per head over it, and collapses each token's P outputs back to one,
o_h(t) = sum_p c[h, p] o~_{h,p}(t); then MHA's output projection.

As the paper defines it (the defaults): the causal mask is flat over the interleaved sequence
(pseudo-token t P + p sees the pseudo-tokens at or before its place, so the slots of one token see
different keys), and the start selects one pseudo-head (identity mixes, c[h, p] = [p = 1]).
Declared alternatives: `iha_mask=token` (a pseudo-token sees every pseudo-token of every token its
token may see) and `iha_start=mha` (collapse 1/P: with the token mask IHA starts as exactly MHA).
Under the token mask and the MHA start the P slots are interchangeable and never separate without
dropout noise; the flat mask or the paper's start each break that symmetry. Without padding the
flat mask is a plain causal flag on the interleaved sequence: one fused call, no (T P)² tensor.

Deviations: positions enter this project's transformer once, at the embedding, so the paper's
per-pseudo-token positions t P + p act only through the flat mask's order; the scale is 1/sqrt(d).
The attention drawn per head is the interleaved attention folded back to tokens: weight of key token
s for query token t = sum_p c[h, p] sum_p' A_h((t, p), (s, p')). Runs saved before these settings
existed were trained with the token mask and the MHA start, and load with them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from damcha.model.mechanisms.base import AttentionOutput, ForwardOptions, Intervention, LayerCall, Mechanism, Setting
from damcha.model.mechanisms.operations import ProjectedAttention, allowed_keys, attend, attention_mask, head_scale
from damcha.model.mechanisms.structures import Identifiability, Structure, StructureKind, ValueKind

MASKS = ("flat", "token")
STARTS = ("paper", "mha")
MASK_WORDS = {"flat": "Mask: flat, as the paper's (each pseudo-token sees the places up to its own in the interleaved "
                      "order, so the slots of one token see different keys).",
              "token": "Mask: token-level (a pseudo-token sees every pseudo-token of every token its token may see)."}
START_WORDS = {"paper": "Start: the paper's (the collapse selects the first pseudo-head).",
               "mha": "Start: MHA's (the collapse averages the pseudo-heads; with the token mask, exactly MHA)."}


@dataclass(frozen=True)
class InterleavedOptions(ForwardOptions):
    """Intervention: without_mixing puts the identity mixes and the uniform collapse in place of the
    learned ones (under the token mask IHA becomes MHA with the same projections)."""

    without_mixing: bool = False


def identity_mixing(H: int, P: int) -> torch.Tensor:
    """(H, H, P): every pseudo-head of head h is head h."""
    return torch.eye(H)[:, :, None].expand(H, H, P).clone()


def token_mask_to_pseudo(allowed: torch.Tensor | None, P: int) -> torch.Tensor | None:
    """(B|1, 1, T, T) allowed token pairs -> (B|1, 1, T P, T P) allowed pseudo-token pairs."""
    if allowed is None:
        return None
    return allowed.repeat_interleave(P, dim=-2).repeat_interleave(P, dim=-1)


def starting_collapse(H: int, P: int, start: str) -> torch.Tensor:
    """(H, P) collapse c: the paper's selects the first pseudo-head; the MHA start averages them."""
    if start == "paper":
        return torch.eye(P)[0].expand(H, P).clone()
    return torch.full((H, P), 1.0 / P)


def pseudo_mask(real: torch.Tensor | None, mask: torch.Tensor | None, causal: bool, T: int, P: int, flat: bool,
                device) -> tuple[torch.Tensor | None, bool]:
    """The interleaved sequence's mask and causal flag for an attention call: the flat mask is the
    token mask's causal rule over places t P + p (a causal flag alone without padding); the token
    mask repeats each allowed token pair over all P x P pseudo-pairs."""
    if not flat:
        return token_mask_to_pseudo(allowed_keys(mask, causal, T, device), P), False
    if real is None:
        return None, causal
    return attention_mask(real.repeat_interleave(P, dim=1), causal, T * P, device), False  # (B, 1, T P, T P)


class InterleavedHeadAttention(ProjectedAttention):
    def __init__(self, config, P: int, flat: bool, start: str):
        super().__init__(config)
        H = config.n_head
        self.P, self.flat = P, flat
        self.mix_q, self.mix_k, self.mix_v = (nn.Parameter(identity_mixing(H, P)) for _ in range(3))  # (H, H, P)
        self.collapse = nn.Parameter(starting_collapse(H, P, start))  # c (H, P)

    def forward(self, x: torch.Tensor, call: LayerCall[InterleavedOptions]) -> AttentionOutput:
        real, mask, causal = call.real, call.mask, call.causal
        options, need_weights, stochastic = call.options, call.need_weights, call.stochastic
        B, T, D = x.shape
        H, d, P = self.n_head, self.head_dim, self.P
        mixes: tuple[torch.Tensor, ...] = (self.mix_q, self.mix_k, self.mix_v)
        collapse: torch.Tensor = self.collapse
        if options.without_mixing:
            mixes = tuple(identity_mixing(H, P).to(x) for _ in range(3))
            collapse = torch.full_like(self.collapse, 1.0 / P)
        q, k, v = (self.heads(p, x) for p in (self.query, self.key, self.value))  # (B, H, T, d) each
        # pseudo[b, h, t, p] = sum_j mix[h, j, p] heads[b, j, t], laid out as (B, H, T P, d): t-major
        pq, pk, pv = (torch.einsum("hjp,bjtd->bhtpd", m, a).reshape(B, H, T * P, d)
                      for m, a in zip(mixes, (q, k, v)))  # (B, H, T P, d) each
        allowed, flag = pseudo_mask(real, mask, causal, T, P, self.flat, x.device)  # (B|1, 1, T P, T P) or None
        out, weights = attend(pq, pk, pv, allowed, flag, head_scale(d), self.dropout if stochastic else 0.0,
                              need_weights, call.site, call.rotary)  # (B, H, T P, d)
        out = torch.einsum("hp,bhtpd->bhtd", collapse, out.view(B, H, T, P, d))  # (B, H, T, d)
        y = self.merge(out)  # (B, T, D)
        if not need_weights:
            return AttentionOutput(y=y)
        assert weights is not None  # (need_weights: attend returned them)
        folded = torch.einsum("hp,bhtpsq->bhts", collapse, weights.view(B, H, T, P, T, P))  # (B, H, T, T)
        return AttentionOutput(y=y, weights=folded, internals={"mixes": mixes, "collapse": collapse,
                                                                "interleaved": weights})


def _pseudo(config) -> int:
    return int(config.setting("iha_pseudo") or config.n_head)


class InterleavedHeads(Mechanism):
    name = "iha"
    title = "Interleaved head attention (IHA)"
    reference = "Duvvuri et al., Feb 2026, arXiv 2602.21371"
    rotary_positions = False  # its pseudo-heads interleave positions, which RoPE's row positions would misread
    declared_settings = (
        Setting("iha_pseudo", int, None, "pseudo-heads per head P (default: n_head)", minimum=1),
        Setting("iha_mask", str, "flat", "causal mask over the interleaved sequence: flat (the paper's: place t P + p "
                "sees places before it) or token (every pseudo-token of every visible token)", MASKS, saved_before="token"),
        Setting("iha_start", str, "paper", "how the collapse starts: paper (selects the first pseudo-head) or mha "
                "(1/P each: with the token mask, exactly MHA)", STARTS, saved_before="mha"),
    )
    options_type = InterleavedOptions
    signed_attention = True  # folded through the learned collapse, whose weights may turn negative

    def build_layer(self, config, layer_index: int) -> nn.Module:
        return InterleavedHeadAttention(config, _pseudo(config), config.setting("iha_mask") == "flat",
                                        config.setting("iha_start"))

    def interventions(self, config) -> list[Intervention]:
        same = "MHA with the trained projections" if config.setting("iha_mask") == "token" else \
            "the head mixing undone, though under the flat mask each slot still sees its own set of keys (not MHA)"
        return [Intervention("without_mixing", "Identity mixes", "Every pseudo-head repeats its own head and the "
                             f"collapse averages them: {same}.",
                             make=lambda model, tokens: InterleavedOptions(without_mixing=True))]

    def settings(self, config) -> dict:
        return {"pseudo-heads per head P": _pseudo(config), "mask": config.setting("iha_mask"),
                "start": config.setting("iha_start")}

    def inference_bytes(self, config, T: int) -> int:
        """The interleaved sequence is P times as long: its pseudo-queries, keys, values and outputs; with
        the token mask also the (T P)² mask and the scores the kernel builds with it."""
        n = T * _pseudo(config)
        streams = 4 * n * config.n_embd * 4
        return streams if config.setting("iha_mask") == "flat" else streams + n * n * (1 + 4 * config.n_head)

    def structures(self, model, layers: Sequence, positions: np.ndarray, options) -> list[Structure]:
        P = _pseudo(model.config)
        out = []
        for i, (side, what, one) in enumerate((("q", "queries", "query"), ("k", "keys", "key"), ("v", "values", "value"))):
            mix = np.stack([layer.internals["mixes"][i].detach().cpu().numpy() for layer in layers])  # (L, H, H, P)
            out.append(Structure(
                f"coupling_{side}", f"Head coupling of pseudo-{what} per slot", mix.transpose(0, 3, 1, 2),
                ("layer", "slot", "head_out", "head_src"), StructureKind.PER_HEAD_FORMS,
                f"Slot p, row h, column j: how much head j's {one} enters pseudo-{one} p of head h "
                "(the identity in every slot = MHA). The same for every input.", Identifiability.LEARNED,
                labels={"slot": [f"slot {p + 1}" for p in range(P)]},
                axis_titles={"head_out": "head h", "head_src": "source head j"}, unit="weight"))
        collapse = np.stack([layer.internals["collapse"].detach().cpu().numpy() for layer in layers])  # (L, H, P)
        out.append(Structure("collapse", "Collapse of the pseudo-outputs", collapse, ("layer", "head", "slot"),
                             StructureKind.MATRIX, "Row h: the weight of each pseudo-output in head h's output "
                             f"(1/{P} each = MHA).", Identifiability.LEARNED,
                             labels={"slot": [f"slot {p + 1}" for p in range(P)]}, unit="weight"))
        inter = np.stack([layer.internals["interleaved"][0].cpu().numpy() for layer in layers])  # (L, H, TP, TP)
        T = inter.shape[-1] // P
        share = inter.reshape(*inter.shape[:2], T, P, T, P).sum(axis=(2, 4)) / T  # (L, H, P, P)
        out.append(Structure("slot_attention", "Attention between pseudo-slots", share,
                             ("layer", "head", "slot_q", "slot_k"), StructureKind.PER_HEAD_FORMS,
                             "Per head: the attention pseudo-queries of slot p pay to pseudo-keys of slot p′, "
                             "summed over key tokens and averaged over query tokens (rows sum to 1).",
                             Identifiability.LEARNED, value_kind=ValueKind.PROBABILITY,
                             labels={"slot_q": [f"slot {p + 1}" for p in range(P)],
                                     "slot_k": [f"slot {p + 1}" for p in range(P)]},
                             axis_titles={"slot_q": "query slot p", "slot_k": "key slot p′"}, unit="weight"))
        return out

    def notes(self, config) -> list[str]:
        P = _pseudo(config)
        return [f"IHA mixes all heads' queries, keys and values into {P} pseudo-heads per head, attends over the "
                f"interleaved sequence ({P}× as long) and collapses back. {MASK_WORDS[config.setting('iha_mask')]} "
                f"{START_WORDS[config.setting('iha_start')]} The attention drawn is the interleaved attention folded "
                "back to tokens."]
