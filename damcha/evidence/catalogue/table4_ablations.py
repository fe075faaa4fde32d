"""Table 4: w/o f(x) and w/o sharing against DAMCHA."""

from __future__ import annotations

from damcha.evidence.catalogue.common import COMPLETION
from damcha.evidence.records import Arm, Claim

CANNOT_SPEAK_TO = (
    'FID and FID@Top-50 on CIFAR-10 and CIFAR-100 (we measure NLL on digits)',
)  # what the paper reports here that this claim does not measure


def claim(quick: bool) -> Claim:
    table4 = Claim("table4_ablations", "Table 4: w/o f(x) and w/o sharing against DAMCHA",
                   "\"Blue ↓ indicates the relative degradation w.r.t. DAMCHA\": w/o f(x)+share −2.37% and w/o share "
                   "−0.58% FID on CIFAR-10.", "val_nll", True,
                   (Arm("damcha"), Arm("w/o f(x)", variant="damcha-static"), Arm("w/o sharing", variant="damcha-unshared")),
                   "damcha", columns=COMPLETION, min_seeds=5, cannot_speak_to=CANNOT_SPEAK_TO)
    return table4
