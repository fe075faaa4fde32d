"""Table 3: the depth of the metric generator f(x)."""

from __future__ import annotations

import dataclasses

from damcha.evidence.capacity import base_config, nearest_step
from damcha.evidence.catalogue.common import COMPLETION, F_DEPTHS, FID_AT_SCALE, depth_matched_arm, depth_widths
from damcha.evidence.records import Arm, Claim

CANNOT_SPEAK_TO = (
    '7- and 9-layer f (we train 1, 3 and 5)',
    'FID, BART and their @Top-50 on CIFAR-10/100, WMT and CommonGen (we measure NLL and completion MSE on digits)',
)  # what the paper reports here that this claim does not measure

PAPER_DEPTHS = (1, 3, 5, 7, 9)  # the depths of f the paper's Table 3 sweeps, in linear layers (common.depth_widths)


def claim(quick: bool) -> Claim:
    depths = (1, 5) if quick else (1, 3, 5)
    matched = () if quick else (depth_matched_arm(),)  # (a smoke run: without it)
    depth = Claim("table3_depth", "Table 3: depth of f(x)",
                  "Table 3: \"Ablation on the capacity of the standard DAMCHA's f(x) at different depth\" (FID@Top-50 "
                  "on CIFAR-10: 77.97, 75.79, 71.07 for 1, 3, 5 layers).", "val_nll", True,
                  (*(Arm(f"f depth {k}", overrides=(("generator_widths", F_DEPTHS[k]),)) for k in depths), *matched),
                  f"f depth {depths[-1]}", columns=COMPLETION, min_seeds=5, matched_arms=tuple(a.name for a in matched),
                  note="Tested: the deepest f beats the shallower ones (the direction of the paper's CIFAR-10 "
                       "FID@Top-50 column). Depth counts f's linear layers, as the paper does (a 1-layer f is its "
                       "output projection alone); hidden widths: " + "; ".join(f"{k}: {F_DEPTHS[k]}" for k in depths)
                       + "".join(f"; {a.name}: {dict(a.overrides)['generator_widths']} (counted: a gain of the deeper f "
                                 "that is capacity shows against it)" for a in matched) + ".", cannot_speak_to=CANNOT_SPEAK_TO,
                  cannot_speak_to_at_scale=(FID_AT_SCALE, "BART on WMT and CommonGen"),
                  deviations_at_scale=("Metric: the paper's Table 3 reads FID@Top-50, which is not defined in what we "
                                       "have of the paper; the direction it claims, the deeper f better, is tested on "
                                       "the validation NLL.",),
                  arms_at_scale=depths_at_scale)
    return depth


def depths_at_scale(claim: Claim, scale) -> Claim:
    """The paper's depths (1, 3, 5, 7, 9 linear layers; a smoke scale: 1 and 9) in the pattern of the scale's widths
    of f, and f of two layers (one hidden layer) widened to the deepest f's parameters (not in a smoke scale, as in
    the demo's quick run)."""
    widths = tuple(scale.model["generator_widths"])
    depths = (PAPER_DEPTHS[0], PAPER_DEPTHS[-1]) if scale.smoke else PAPER_DEPTHS
    arms = tuple(Arm(f"f depth {k}", overrides=(("generator_widths", depth_widths(widths, k)),)) for k in depths)
    matched = () if scale.smoke else (Arm(f"f depth 2 at depth {depths[-1]}'s parameters",
                                          overrides=(("generator_widths", (_width_matching(scale, arms[-1]),)),)),)
    said = "; ".join(f"{a.name}: {dict(a.overrides)['generator_widths']}" for a in (*arms, *matched))
    return dataclasses.replace(claim, arms=(*arms, *matched), reference=arms[-1].name,
                               matched_arms=tuple(a.name for a in matched),
                               note_at_scale=f"Tested: the deepest f beats the shallower ones. Depth counts f's linear "
                                             f"layers, as the paper does; hidden widths of f: {said}"
                                             f"{' (the last counted: a gain of depth that is capacity shows against it)' if matched else ''}.")


def _width_matching(scale, deepest: Arm) -> int:
    """The one hidden width (a multiple of 8) whose f has the parameters nearest the deepest f's at the scale's
    model size (the rest of the model is the same in both, whatever the data set)."""
    def count(widths: tuple) -> int:
        return base_config("damcha", (*scale.model.items(), ("generator_widths", widths))).parameter_estimate()

    target = count(dict(deepest.overrides)["generator_widths"])
    return 8 * nearest_step(lambda eighths: count((8 * eighths,)), target, 1, 1024)
