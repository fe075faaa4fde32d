"""Table 4: w/o f(x) and w/o sharing against DAMCHA."""

from __future__ import annotations

import dataclasses

from damcha.evidence.catalogue.common import (
    COMPLETION,
    FID_AT_SCALE,
    capacity_matched_mha,
    identity_stand_in,
    identity_start_arms,
)
from damcha.evidence.records import Arm, Claim

CANNOT_SPEAK_TO = (
    'FID and FID@Top-50 on CIFAR-10 and CIFAR-100 (we measure NLL on digits)',
)  # what the paper reports here that this claim does not measure


# DAMCHA widened (heads kept, MLP at the same ratio) to w/o sharing's parameter count on digits, the nearest
# multiple of its 4 heads (capacity.matched_width; a test recomputes it): w/o sharing holds 1.85x DAMCHA's
# parameters, and against this arm its lead reads as sharing or as capacity.
DAMCHA_AT_UNSHARED = 44
SHARING_AT_EQUAL_PARAMETERS = "sharing at equal parameters"


def damcha_at_unshared_count() -> Arm:
    return Arm("DAMCHA at w/o sharing's parameters", overrides=(("n_embd", DAMCHA_AT_UNSHARED),))


def without_the_demo_width(claim: Claim, scale) -> Claim:
    """At a scale the widened DAMCHA is not run: its width is the demo's match, and a scale matches widths to the
    reference's count, not to w/o sharing's (its pair and summary go with it)."""
    wide = damcha_at_unshared_count().name
    return dataclasses.replace(claim, arms=tuple(a for a in claim.arms if a.name != wide),
                               controls=tuple(c for c in claim.controls if c != wide),
                               pairs=tuple(p for p in claim.pairs if wide not in p[:2]), summary_pairs=())


def claim(quick: bool) -> Claim:
    matched = capacity_matched_mha("digits")
    wide = () if quick else (damcha_at_unshared_count(),)
    table4 = Claim("table4_ablations", "Table 4: w/o f(x) and w/o sharing against DAMCHA",
                   "\"Blue ↓ indicates the relative degradation w.r.t. DAMCHA\": w/o f(x)+share −2.37% and w/o share "
                   "−0.58% FID on CIFAR-10.", "val_nll", True,
                   (Arm("damcha"), Arm("w/o f(x)", variant="damcha-static"), Arm("w/o sharing", variant="damcha-unshared"),
                    matched, *wide, *identity_start_arms(quick)), "damcha", columns=COMPLETION, min_seeds=8,
                   stand_in=identity_stand_in(quick), matched_arms=(matched.name,),
                   controls=(matched.name, *(a.name for a in (*wide, *identity_start_arms(quick)))),
                   pairs=tuple((a.name, "w/o sharing", SHARING_AT_EQUAL_PARAMETERS) for a in wide),
                   summary_pairs=(SHARING_AT_EQUAL_PARAMETERS,) if wide else (), arms_at_scale=without_the_demo_width,
                   note="Eight seeds: with five the verdict turned on one seed (four of the five leave-one-out "
                        "subsets were inconclusive). MHA at DAMCHA's parameters is a control: w/o sharing holds "
                        "more parameters than DAMCHA, and a gain of capacity alone shows against it. DAMCHA at w/o "
                        f"sharing's parameters (width {DAMCHA_AT_UNSHARED}, heads kept) is a control too, set against "
                        "w/o sharing in a reported pair stated beside the verdict: at equal parameters, does sharing f "
                        "still cost? Not counted: the verdict compares the paper's arms, as its Table 4 does.",
                   cannot_speak_to=CANNOT_SPEAK_TO,
                   note_at_scale="MHA at DAMCHA's parameters is a control: w/o sharing holds more parameters than "
                                 "DAMCHA, and a gain of capacity alone shows against it.",
                   cannot_speak_to_at_scale=(FID_AT_SCALE,))
    return table4
