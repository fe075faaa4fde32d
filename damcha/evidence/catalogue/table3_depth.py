"""Table 3: the depth of the metric generator f(x)."""

from __future__ import annotations

from damcha.evidence.catalogue.common import COMPLETION, F_DEPTHS, depth_matched_arm
from damcha.evidence.records import Arm, Claim

CANNOT_SPEAK_TO = (
    '7- and 9-layer f (we train 1, 3 and 5)',
    'FID, BART and their @Top-50 on CIFAR-10/100, WMT and CommonGen (we measure NLL and completion MSE on digits)',
)  # what the paper reports here that this claim does not measure


def claim(quick: bool) -> Claim:
    depths = (1, 5) if quick else (1, 3, 5)
    matched = () if quick else (depth_matched_arm(),)  # (a smoke run: without it)
    depth = Claim("table3_depth", "Table 3: depth of f(x)",
                  "Table 3: \"Ablation on the capacity of the standard DAMCHA's f(x) at different depth\" (FID@Top-50 "
                  "on CIFAR-10: 77.97, 75.79, 71.07 for 1, 3, 5 layers).", "val_nll", True,
                  (*(Arm(f"f depth {k}", overrides=(("generator_widths", F_DEPTHS[k]),)) for k in depths), *matched),
                  f"f depth {depths[-1]}", columns=COMPLETION, min_seeds=5, matched_arms=tuple(a.name for a in matched),
                  note="Tested: the deepest f beats the shallower ones (the direction of the paper's CIFAR-10 "
                       "FID@Top-50 column). Hidden widths: " + "; ".join(f"{k}: {F_DEPTHS[k]}" for k in depths)
                       + "".join(f"; {a.name}: {dict(a.overrides)['generator_widths']} (counted: a gain of the deeper f "
                                 "that is capacity shows against it)" for a in matched) + ".", cannot_speak_to=CANNOT_SPEAK_TO)
    return depth
