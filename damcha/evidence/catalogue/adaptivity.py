"""Input dependence: does replacing M(x) by its mean hurt? (expected by construction)"""

from __future__ import annotations

from damcha.evidence.records import Arm, Claim

CANNOT_SPEAK_TO = (
    "the abstract's 'adapt to the intrinsic manifold structure of the data' beyond a loss gap: no manifold is measured",
)  # what the paper reports here that this claim does not measure


def claim(quick: bool) -> Claim:
    adaptivity = Claim("adaptivity", "Input dependence: does replacing M(x) by its mean hurt?",
                       "\"it parameterizes the metric matrix as an input-dependent function, enabling the attention "
                       "geometry to dynamically adapt\" (abstract).", "gap_nats", False,
                       (Arm("adaptivity gap", kind="adaptivity"), Arm("zero", kind="constant")), "adaptivity gap",
                       by_construction="A model trained with M(x) is fitted to M(x): replacing it by its mean at "
                       "inference changes what every later layer sees, so some loss is expected whether or not input "
                       "dependence helps. Table 4's trained w/o f(x) comparison is the test of the paper's claim.",
                       note="Gap = loss with M-bar (the mean of M over 256 validation inputs) − loss with M(x).", cannot_speak_to=CANNOT_SPEAK_TO)
    return adaptivity
