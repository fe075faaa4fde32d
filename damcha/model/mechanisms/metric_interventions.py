"""What the interventions on a D x D metric M share, whichever mechanism scores with one (through its
`MetricAccess`): the block scales of one intervention, an input's M, and a reference metric fitted to an
input's length. DAMCHA's interventions (damcha.model.mechanisms.damcha.interventions) and the analyses
(damcha.analysis.interventions) both use them."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from damcha.model.batching import as_model_input

if TYPE_CHECKING:  # annotations only: the transformer imports the registry that imports this module
    from damcha.model.transformer import Transformer


# What an adaptivity gap can and cannot say, in one sentence every page, the evidence and the docs share.
ADAPTIVITY_GAP_READING = ("A positive gap is expected for any model trained with M(x), input dependence helping or "
                          "not: the model is fitted to M(x), and its mean M-bar changes what every later layer sees. "
                          "It measures how much this trained model relies on its per-input metric; whether input "
                          "dependence helps is tested by training without it (w/o f(x), the Evidence page's Table 4).")


def block_scale_matrix(H: int, zero: tuple[int, int] | None = None, keep: tuple[int, int] | None = None,
                       head: int | None = None, off_diagonal: float | None = None) -> np.ndarray:
    """s_ij for one intervention on the blocks of M: zero (i, j); keep only (i, j); zero row i (head
    i's metric m_i, so the head attends uniformly); or scale every off-diagonal block by gamma."""
    S = np.ones((H, H))
    if zero is not None:
        S[zero] = 0.0
    if keep is not None:
        S = np.zeros((H, H))
        S[keep] = 1.0
    if head is not None:
        S[head] = 0.0
    if off_diagonal is not None:
        S = np.where(np.eye(H, dtype=bool), 1.0, off_diagonal)
    return S


@torch.no_grad()
def input_metric(model: Transformer, tokens) -> torch.Tensor:
    """M(x) of one input at every position, per metric source: (L_m, P, D, D) (P = T causal, 1 otherwise)."""
    device = next(model.parameters()).device
    tok = as_model_input(tokens, model.config, device)
    access = model.mechanism.metric_access()
    if access is None:
        raise ValueError(f"{model.mechanism.title} has no metric M(x)")
    out = model(tok, options=access.explicit(), need_intermediates=True, stochastic=False)
    return torch.stack([record.full[0] for record in access.records(model, out.layers)])  # (L_m, P, D, D)


def alignment_note(P: int, T: int) -> str:
    """What align_reference does with a reference of P positions and an input of T ('' when it fits)."""
    if P in (1, T):
        return ""
    if P > T:
        return f"The reference has {P} positions and this input {T}: each position uses the reference at the same position."
    return (f"The reference has {P} positions and this input {T}: positions 0..{P - 1} use the reference at the same "
            f"positions, positions {P}..{T - 1} (which no reference input reaches) its last position's metric.")


def align_reference(model: Transformer, tokens, reference: torch.Tensor) -> tuple[torch.Tensor, str]:
    """A reference metric (L_m, P, D, D) for an input of T tokens, and what was done to fit it.

    A causal model has one metric per query position. A reference of more positions than the input
    is cut to its first T (the per-position mean over inputs that reach each position); one of fewer
    positions is extended with its last position's metric (no reference input reaches further)."""
    T = len(np.asarray(tokens))
    P = reference.shape[1]
    if not model.config.causal or P in (1, T):
        return reference, ""
    if P > T:
        return reference[:, :T], alignment_note(P, T)
    tail = reference[:, -1:].expand(-1, T - P, -1, -1)
    return torch.cat([reference, tail], dim=1), alignment_note(P, T)
