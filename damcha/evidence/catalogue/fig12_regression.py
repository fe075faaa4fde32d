"""Fig. 12 (our reconstruction): cross-subspace regression over entanglement levels."""

from __future__ import annotations

import math

from damcha.evidence.catalogue.common import (
    IDENTITY_PAIR,
    IDENTITY_START,
    MATCHED_MHA,
    ROW_SUM_CANNOT_CROSS,
    SLICE_ARMS,
    regression_grids,
    synthetic_claim,
    synthetic_steps,
    tuning_note,
)
from damcha.evidence.records import Claim, Sanity
from damcha.evidence.sanity import REGRESSION_CHECKS

CANNOT_SPEAK_TO = (
    "the paper's own task definition and its Fig. 12(b) relative advantage (the task here is our reconstruction)",
)  # what the paper reports here that this claim does not measure


def claim(quick: bool) -> Claim:
    levels = (0.0, 1.0) if quick else (0.0, 0.25, 0.5, 0.75, 1.0)
    steps = synthetic_steps(quick)
    grids = regression_grids(quick)
    syn_mechs = ("mha", "mha-slice", "damcha", "damcha-static-bilinear") if quick else \
        (*SLICE_ARMS, IDENTITY_START, MATCHED_MHA, "tha", "dcmha", "colmha", "mma", "moa")
    regression = synthetic_claim(
        "fig12_regression", "Fig. 12 (our reconstruction): cross-subspace regression",
        "Figure 12: \"Cross-subspace regression: DAMCHA vs. MHA. (a) comparison results (testing MSE) under different "
        "entanglement levels. (b) DAMCHA's relative advantage.\"", "relative_mse", True, "regression", "e", levels,
        syn_mechs, "Our reconstruction (the paper's definition is not in what we have; damcha/inputs/synthetic.py): the "
        "teacher is cross-head attention with metric A, one softmax per head. Models: one attention layer, width 64 "
        f"(each head's slice: 8 token and 8 position channels), {steps} Adam steps of 64 fresh "
        "sequences, scored on 1024 fixed ones that no training batch contains; each seed draws its own teacher, so the "
        "intervals include the teacher's variability. "
        + f"MHA, the slice MHA, the four DAMCHA arms and the matched MHA have the learning-rate grid "
        f"{', '.join(map(str, grids['mha']))}, the default rate and one above it: in a probe at e = 0.5 the static "
        "bilinear form reached 0.17 at 3e-3, 0.003 at 1e-2 and 0.36 at 1e-3." + tuning_note(quick) + " The other "
        "systems train at 3e-3, as before the grid existed. "
        "MHA's heads project the whole token, so MHA represents every "
        "level exactly (each teacher head is a bilinear form of rank 8 ≤ its head width 16): the informative "
        "comparisons are the reported pairs — the static bilinear form against the slice-restricted MHA (cross-head "
        "capacity), the row sum against it (predicted tie: a row-sum head scores its own slice only, as "
        "damcha-static is exactly a slice MHA), full MHA against the bilinear form. Sanity: the teacher's batched "
        "code equals an explicit loop, an oracle model at the teacher's parameters reproduces it, and MHA (which "
        "represents every level) reaches relative MSE below 0.1 at e = 0; an arm under judgement that misses it there "
        "(DAMCHA included) is a reported finding with its seeds, not a reason to withhold the verdict.",
        Sanity(("mha e=0.0",), 0.1, "below", tuple(f"{m} e=0.0" for m in syn_mechs if m != "mha")),
        requires=REGRESSION_CHECKS, grids=grids,
        construction=(("damcha", "mha", levels[1:], "behind", ROW_SUM_CANNOT_CROSS + " Here the teacher's heads "
                       "score across slices for e > 0.", 0.0),
                      ("damcha", "mha-slice", None, "tie", "A row-sum head and a slice-restricted MHA head score the "
                       "same slice against itself, and the teacher is static: the same function class on this task, "
                       "so a tie within 10% of relative MSE (a log ratio of ±0.095) is predicted.", math.log(1.1))),
        pairs=(("damcha-static-bilinear", "mha-slice", "cross-head capacity (static)"),
               ("damcha", "mha-slice", "row sum against the diagonal blocks (predicted tie)"),
               ("mha", "damcha-static-bilinear", "full-token MHA against the bilinear form"),
               ("damcha-bilinear", "damcha-static-bilinear", "input dependence (bilinear)"),
               (IDENTITY_START, "damcha", IDENTITY_PAIR)), cannot_speak_to=CANNOT_SPEAK_TO,
        against=("mha", MATCHED_MHA), matched=(MATCHED_MHA,),
        represents={"mha": None, MATCHED_MHA: None, "mha-slice": levels[:1], "damcha": levels[:1], "damcha-static": levels[:1],
                    IDENTITY_START: levels[:1],
                    "damcha-bilinear": None, "damcha-static-bilinear": None})
    return regression
