"""Fig. 13 (our reconstruction): cross-subspace classification over subspace dimensions."""

from __future__ import annotations

from damcha.evidence.catalogue.common import (
    IDENTITY_START,
    ROW_SUM_CANNOT_CROSS,
    classification_arms,
    classification_grid_note,
    fig13_shared,
    synthetic_claim,
    synthetic_steps,
)
from damcha.evidence.records import Claim, Sanity

CANNOT_SPEAK_TO = (
    "the paper's own task definition and its Fig. 13(b) relative improvement (the task here is our reconstruction)",
)  # what the paper reports here that this claim does not measure


def claim(quick: bool) -> Claim:
    dims = (2,) if quick else (2, 8, 32)
    cls_arms, steps = classification_arms(quick), synthetic_steps(quick)
    classification = synthetic_claim(
        "fig13_classification", "Fig. 13 (our reconstruction): cross-subspace classification",
        "Figure 13: \"Cross-subspace classification: DAMCHA vs. MHA. (a) Comparison results (accuracy %) under "
        "different d_e.\"", "accuracy", False, "classification", "d_e", dims, cls_arms,
        f"Our reconstruction (damcha/inputs/synthetic.py); models as in Fig. 12, {steps} steps. "
        f"{classification_grid_note(quick)} The subspace "
        "is random in the whole space (the entanglement knob below moves it into one head's slice). Chance is 1/15 = "
        "0.067. Sanity: MHA must exceed 0.5 at the smallest d_e.", Sanity((f"mha d_e={dims[0]}",), 0.5, "above"),
        construction=(("damcha", "mha", None, "behind", ROW_SUM_CANNOT_CROSS + " A random subspace spans every "
                       "slice, so DAMCHA against MHA is a capacity check at every d_e; w/o f(x) against DAMCHA is the "
                       "learned comparison (reported).", 0.0),),
        **fig13_shared(quick), cannot_speak_to=CANNOT_SPEAK_TO, represents={"mha": None, "damcha": (), IDENTITY_START: ()})
    return classification
