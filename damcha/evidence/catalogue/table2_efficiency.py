"""Table 2: the cost of one layer against MHA's (parameters, FLOPs, time, memory)."""

from __future__ import annotations

from damcha.evidence.catalogue.common import (
    COMPARABLE,
    EFFICIENCY_CASE,
    EFFICIENCY_SCALE,
    compared,
    newer,
)
from damcha.evidence.efficiency import EFFICIENCY_BESIDE, TRAIN_STEP_RATIO, TRAINING_LAYERS
from damcha.evidence.records import Arm, Claim

CANNOT_SPEAK_TO = (
    'whole models on an RTX 3090 on CIFAR-10/100, CommonGen and WMT (we time one layer on 2 CPU cores)',
    'memory in MB, GFLOPs and latency as the paper measured them, for its model sizes',
)  # what the paper reports here that this claim does not measure


def claim(quick: bool) -> Claim:
    mechs = compared(quick)
    efficiency = Claim("table2_efficiency", "Table 2: efficiency (ratios to MHA)",
                       "\"delivering superior expressive power and learning performance with comparable or reduced "
                       "computational overhead\" (abstract). Table 2 reports, on CIFAR-10, memory 255 MB (THA), 293 "
                       "(DCMHA), 207 (ColMHA), 191 (MMA), 321 (MoA); latency 3.5, 4.4, 3.6, 16.7, 4.1 ms (no MHA or "
                       "DAMCHA row in what we have).", "time_ratio", True,
                       (*(Arm(m, kind="efficiency", variant=m) for m in ("damcha", *mechs[1:], *newer(quick))),
                        Arm(f"comparable ({COMPARABLE}x MHA)", kind="constant", level=COMPARABLE)), "damcha",
                       columns=("params_ratio", "flops_ratio", "memory_ratio", *EFFICIENCY_BESIDE),
                       verdict_metrics=("params_ratio", "flops_ratio", "time_ratio", "memory_ratio", TRAIN_STEP_RATIO),
                       verdict_against=("constant",), scale=EFFICIENCY_SCALE,
                       families=(("the paper's comparison set", mechs[1:]), ("the newer mechanisms", newer(quick))),
                       note=f"One causal layer, D = 128, H = 8, T = {EFFICIENCY_CASE['T']}, batch "
                            f"{EFFICIENCY_CASE['batch']}, DAMCHA's f with widths (256, 512), against one MHA layer "
                            "in the same process (as benchmarks/bench.py): parameters, FLOPs counted by torch, median "
                            "time (interleaved) and peak memory (the bytes PyTorch's allocator holds while the layer "
                            "runs, replayed from the profiler's record of every allocation, in a fresh process); beside "
                            "them the time against MHA written out (explicit softmax, not torch's fused kernel: a second denominator), the "
                            f"non-causal layer's time, and one training step (forward, backward, Adam) of a "
                            f"{TRAINING_LAYERS}-layer model (f shared over the stack), which counts for the verdict. A "
                            f"seed is a repeat of the measurement. \"Comparable\" is read as at most {COMPARABLE}x MHA. The "
                            "paper's Table 2 sets DAMCHA beside THA, DCMHA, ColMHA, MMA and MoA: those comparisons are "
                            "read as a family of their own (Holm over it), beside the verdict.",
                       cannot_speak_to=CANNOT_SPEAK_TO)
    return efficiency
