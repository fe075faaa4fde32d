"""DAMCHA's interventions on its metric: what its mechanism declares to the interventions page.

Each is a forward option of an ordinary call (block scales, another metric as reference, the
learned part alone), computed exactly on the explicit path; `damcha.analysis.interventions`
evaluates them and builds curves and grids from them (what they share with any metric:
damcha.model.mechanisms.metric_interventions).
"""

from __future__ import annotations

from collections.abc import Callable

from damcha.model.mechanisms.base import Intervention, Param
from damcha.model.mechanisms.damcha.layer import DamchaOptions
from damcha.model.mechanisms.metric_interventions import (
    ADAPTIVITY_GAP_READING,
    align_reference,
    block_scale_matrix,
    input_metric,
)


def metric_interventions(config) -> list[Intervention]:
    """DAMCHA's interventions on its metric, with their parameters (the page draws a control each)."""
    H = config.n_head
    head = Param("i", "head", 0, H - 1, 0)
    col = Param("j", "head", 0, H - 1, min(1, H - 1))

    def scales(kw: Callable[[dict], dict]):
        """Options whose block scales come from the intervention's parameters."""
        return lambda model, tokens, **p: DamchaOptions(block_scales=block_scale_matrix(H, **kw(p)))

    return [
        Intervention("zero_block", "Zero one block M_ij", "Under the row sum this removes M_ij from m_i; under the "
                     "bilinear form it removes head j's keys from head i's scores.", (head, col),
                     scales(lambda p: {"zero": (int(p["i"]), int(p["j"]))})),
        Intervention("keep_block", "Keep only block M_ij", "Every other block set to zero.", (head, col),
                     scales(lambda p: {"keep": (int(p["i"]), int(p["j"]))})),
        Intervention("ablate_head", "Ablate head i's metric m_i", "Head i then attends uniformly over its allowed keys.",
                     (head,), scales(lambda p: {"head": int(p["i"])})),
        Intervention("swap_metric", "M(x') of another input", "This input run with another input's metric, "
                     "position by position.", (Param("other", "input"),),
                     lambda model, tokens, other: DamchaOptions(
                         reference=align_reference(model, tokens, input_metric(model, other))[0], alpha=0.0)),
        Intervention("mean_metric", "The validation mean M-bar", "The adaptive model made static: every input gets "
                     "the validation set's mean metric (per position for a causal model). Its loss change is the "
                     "adaptivity gap. " + ADAPTIVITY_GAP_READING, (Param("mbar", "mean"),),
                     lambda model, tokens, mbar: DamchaOptions(reference=align_reference(model, tokens, mbar)[0],
                                                               alpha=0.0)),
        Intervention("drop_residue", "Keep only the learned part", "Each block replaced by its row mean m_i / H. "
                     "Under the row sum the outputs must not change.",
                     make=lambda model, tokens: DamchaOptions(drop_residue=True)),
        Intervention("scale_off_diagonal", "Scale the off-diagonal blocks by γ", "γ = 0 is the diagonal-only mode, "
                     "γ = 1 the model.", (Param("gamma", "fraction", 0.0, 1.0, 0.5),),
                     scales(lambda p: {"off_diagonal": float(p["gamma"])})),
    ]
