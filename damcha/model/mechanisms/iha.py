"""Interleaved Head Attention (Duvvuri, Ekbote, Bansal, Tiwari, Khatri, Brandfonbrener, Liang, Dhillon,
Zaheer, Feb 2026, arXiv 2602.21371).

Each head h builds P pseudo-queries, pseudo-keys and pseudo-values as learned mixes of all heads'
ordinary ones (q_j = x W_Q^j etc., MHA's projections):

    q~_{h,p}(t) = sum_j a_Q[h, j, p] q_j(t)      (likewise k~ with a_K, v~ with a_V; each (H, H, P))

interleaves them into a sequence of length T P (token t's P pseudo-tokens side by side), runs one
ordinary softmax attention per head over it, and collapses each token's P outputs back to one,
o_h(t) = sum_p c[h, p] o~_{h,p}(t); then MHA's output projection. A pseudo-token of token t may
see every pseudo-token of every token the model lets t see (all P of them, its own token's too):
causality and padding hold at the token level.

Where the paper's text was not available to us (only its abstract), we chose: scale 1/sqrt(d);
the collapse as a learned (H, P) weighting; the identity initialisation a[h, j, p] = [h = j] and
c = 1/P, under which every pseudo-head repeats head h and IHA computes exactly MHA (P copies of
each key share its weight); P = H by default ("typically P = H"), `iha_pseudo` to change it. The
attention drawn per head is the interleaved attention folded back to tokens: weight of key token
s for query token t = sum_p c[h, p] sum_p' A_h((t, p), (s, p')).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from damcha.model.mechanisms.base import (
    AttentionOutput,
    ForwardOptions,
    Identifiability,
    Intervention,
    Mechanism,
    ProjectedAttention,
    Setting,
    Structure,
    StructureKind,
    ValueKind,
    allowed_keys,
    attend,
    head_scale,
)


@dataclass(frozen=True)
class InterleavedOptions(ForwardOptions):
    """Intervention: without_mixing puts the identity mixes and the uniform collapse in place of the
    learned ones (IHA becomes MHA with the same projections)."""

    without_mixing: bool = False


def identity_mixing(H: int, P: int) -> torch.Tensor:
    """(H, H, P): every pseudo-head of head h is head h."""
    return torch.eye(H)[:, :, None].expand(H, H, P).clone()


def token_mask_to_pseudo(allowed: torch.Tensor | None, P: int) -> torch.Tensor | None:
    """(B|1, 1, T, T) allowed token pairs -> (B|1, 1, T P, T P) allowed pseudo-token pairs."""
    if allowed is None:
        return None
    return allowed.repeat_interleave(P, dim=-2).repeat_interleave(P, dim=-1)


class InterleavedHeadAttention(ProjectedAttention):
    def __init__(self, config, P: int):
        super().__init__(config)
        H = config.n_head
        self.P = P
        self.mix_q, self.mix_k, self.mix_v = (nn.Parameter(identity_mixing(H, P)) for _ in range(3))  # (H, H, P)
        self.collapse = nn.Parameter(torch.full((H, P), 1.0 / P))  # c (H, P)

    def forward(self, x, real, mask, causal: bool, options: ForwardOptions, need_weights: bool = False,
                stochastic: bool = False, shared=None) -> AttentionOutput:
        B, T, D = x.shape
        H, d, P = self.n_head, self.head_dim, self.P
        mixes = (self.mix_q, self.mix_k, self.mix_v)
        collapse = self.collapse
        if options.without_mixing:
            mixes = tuple(identity_mixing(H, P).to(x) for _ in range(3))
            collapse = torch.full_like(self.collapse, 1.0 / P)
        q, k, v = (self.heads(p, x) for p in (self.query, self.key, self.value))  # (B, H, T, d) each
        # pseudo[b, h, t, p] = sum_j mix[h, j, p] heads[b, j, t], laid out as (B, H, T P, d): t-major
        pq, pk, pv = (torch.einsum("hjp,bjtd->bhtpd", m, a).reshape(B, H, T * P, d)
                      for m, a in zip(mixes, (q, k, v)))  # (B, H, T P, d) each
        allowed = token_mask_to_pseudo(allowed_keys(mask, causal, T, x.device), P)  # (B|1, 1, T P, T P) or None
        out, weights = attend(pq, pk, pv, allowed, False, head_scale(d), self.dropout if stochastic else 0.0,
                              need_weights)  # (B, H, T P, d)
        out = torch.einsum("hp,bhtpd->bhtd", collapse, out.view(B, H, T, P, d))  # (B, H, T, d)
        y = self.merge(out)  # (B, T, D)
        if not need_weights:
            return AttentionOutput(y=y)
        folded = torch.einsum("hp,bhtpsq->bhts", collapse, weights.view(B, H, T, P, T, P))  # (B, H, T, T)
        return AttentionOutput(y=y, weights=folded, internals={"mixes": mixes, "collapse": collapse,
                                                                "interleaved": weights})


def _pseudo(config) -> int:
    return int(config.setting("iha_pseudo") or config.n_head)


class InterleavedHeads(Mechanism):
    name = "iha"
    title = "Interleaved head attention (IHA)"
    reference = "Duvvuri et al., Feb 2026, arXiv 2602.21371"
    declared_settings = (Setting("iha_pseudo", int, None, "pseudo-heads per head P (default: n_head)", minimum=1),)
    options_type = InterleavedOptions

    def build_layer(self, config, layer_index: int) -> nn.Module:
        return InterleavedHeadAttention(config, _pseudo(config))

    def interventions(self, config) -> list[Intervention]:
        return [Intervention("without_mixing", "Identity mixes (MHA)", "Every pseudo-head repeats its own head and "
                             "the collapse averages them: MHA with the trained projections.",
                             make=lambda model, tokens: InterleavedOptions(without_mixing=True))]

    def settings(self, config) -> dict:
        return {"pseudo-heads per head P": _pseudo(config)}

    def inference_bytes(self, config, T: int) -> int:
        """The interleaved sequence is P times as long: its mask, and scores where the kernel builds them."""
        n = T * _pseudo(config)
        return n * n * (1 + 4 * config.n_head)

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
                f"interleaved sequence ({P}× as long) and collapses back; at initialisation it is MHA. The attention "
                "drawn is the interleaved attention folded back to tokens. Details the paper's abstract leaves open "
                "(scale, collapse, initialisation) are this project's choices, listed in the module."]
