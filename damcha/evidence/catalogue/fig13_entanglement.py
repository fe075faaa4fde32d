"""Fig. 13 (our reconstruction): the class subspace moved from one head's slice to all."""

from __future__ import annotations

from damcha.evidence.catalogue.common import classification_arms, fig13_shared, synthetic_claim
from damcha.evidence.records import Claim, Sanity


def claim(quick: bool) -> Claim:
    spread = (0.0, 1.0) if quick else (0.0, 0.5, 1.0)
    cls_arms = classification_arms(quick)
    entanglement = synthetic_claim(
        "fig13_entanglement", "Fig. 13 (our reconstruction): the class subspace from one head's slice to all",
        "Figure 13 (as above), with an entanglement knob: at e = 0 the subspace lies inside one head's slice, which "
        "a head of every per-head mechanism represents exactly; at e = 1 it is spread over all slices.",
        "accuracy", False, "subspace-spread", "e", spread, cls_arms,
        "d_e = 4; the subspace spans √(1 − e) U_in + √e U_all (damcha/inputs/synthetic.py). Learning rates as in "
        "Fig. 13. Sanity: DAMCHA and the slice-restricted MHA must learn the easy end (above 0.5 at e = 0): where "
        "they do not, the harder levels say nothing about cross-subspace ability.",
        Sanity((f"damcha e={spread[0]}", f"mha-slice e={spread[0]}"), 0.5, "above",
               tuple(f"{m} e={spread[0]}" for m in cls_arms if m not in ("damcha", "mha-slice"))),
        **fig13_shared(quick))
    return entanglement
