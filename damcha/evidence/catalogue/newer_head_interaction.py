"""Beyond the paper: DAMCHA against the newer head-interaction mechanisms (digits)."""

from __future__ import annotations

from damcha.evidence.catalogue.common import COMPLETION, DIGIT_BASELINES, QUOTE_ABSTRACT, capacity_matched_mha, newer
from damcha.evidence.records import Arm, Claim


def claim(quick: bool) -> Claim:
    newer_claim = Claim("newer_head_interaction", "Beyond the paper: the newer head-interaction mechanisms (digits)",
                        QUOTE_ABSTRACT + " The paper predates differential attention (Ye et al. 2025), interleaved "
                        "head attention (Duvvuri et al. 2026) and knocking heads (Zhou et al. 2025); a reviewer would "
                        "ask whether DAMCHA also beats them.", "val_nll", True,
                        (Arm("damcha"), Arm("mha", variant="mha"), *(Arm(m, variant=m) for m in newer(quick)),
                         capacity_matched_mha("digits"), *DIGIT_BASELINES), "damcha",
                        columns=COMPLETION, verdict_metrics=("val_nll", "val_completion_mse"),
                        matched_arms=(capacity_matched_mha("digits").name,), added_variants=newer(quick),
                        controls=tuple(a.name for a in DIGIT_BASELINES), min_seeds=5,
                        note="Not a claim of the paper: the same comparison as Table 1 digits (same sizes, schedule and "
                             "five seeds; MHA and DAMCHA are the same runs), against mechanisms published after it. "
                             "Differential attention runs under its authors' comparison protocol (diff-official: half "
                             "the heads, each map at MHA's head width); interleaved heads with the paper's flat mask "
                             "and start. Knocking heads shares parameters among the heads but mixes none (no head reads "
                             "another's data); it is compared and counted like the others. MHA at DAMCHA's "
                             "parameters is Table 1's (the same runs), counted here too: every arm but DAMCHA holds a "
                             "sixth of its parameters.")
    return newer_claim
