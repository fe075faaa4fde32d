"""Fig. 13 (our reconstruction): the class subspace moved from one head's slice to all."""

from __future__ import annotations

from damcha.evidence.catalogue.common import (
    IDENTITY_START,
    MATCHED_MHA,
    ROW_SUM_CANNOT_CROSS,
    classification_arms,
    fig13_shared,
    synthetic_claim,
)
from damcha.evidence.records import Claim, Sanity

CANNOT_SPEAK_TO = (
    "the paper's own task definition (the knob is ours, on our reconstruction of Fig. 13)",
)  # what the paper reports here that this claim does not measure


def claim(quick: bool) -> Claim:
    spread = (0.0, 1.0) if quick else (0.0, 0.5, 1.0)
    cls_arms = (*classification_arms(quick), *(() if quick else (MATCHED_MHA,)))
    entanglement = synthetic_claim(
        "fig13_entanglement", "Fig. 13 (our reconstruction): the class subspace from one head's slice to all",
        "Figure 13 (as above), with an entanglement knob: at e = 0 the subspace lies inside one head's slice, which "
        "a head of every per-head mechanism represents exactly; at e = 1 it is spread over all slices.",
        "accuracy", False, "subspace-spread", "e", spread, cls_arms,
        "d_e = 4; the subspace spans √(1 − e) U_in + √e U_all (damcha/inputs/synthetic.py). Learning rates as in "
        "Fig. 13. Sanity: the slice-restricted MHA, which represents the easy end exactly, must learn it (above 0.5 "
        "at e = 0), else the task says nothing; an arm under judgement that misses it (DAMCHA included) is a reported "
        "finding with its seeds, and the verdict is computed.",
        Sanity((f"mha-slice e={spread[0]}",), 0.5, "above",
               tuple(f"{m} e={spread[0]}" for m in cls_arms if m != "mha-slice")),
        construction=(("damcha", "mha", spread[1:], "behind", ROW_SUM_CANNOT_CROSS + " For e > 0 the class subspace "
                       "reaches into every slice.", 0.0),),
        **fig13_shared(quick), cannot_speak_to=CANNOT_SPEAK_TO,
        against=("mha", MATCHED_MHA), matched=(MATCHED_MHA,),
        represents={"mha": None, MATCHED_MHA: None, "mha-slice": spread[:1], "damcha": spread[:1],
                    IDENTITY_START: spread[:1]})
    return entanglement
