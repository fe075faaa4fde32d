"""Where the time goes: torch.profiler table of one benchmark case, DAMCHA and MHA.

    .venv/bin/python benchmarks/profile_case.py causal-layer [--T 1024] [--rows 15]
    .venv/bin/python benchmarks/profile_case.py train-step [--variant damcha|damcha-unshared]

Operators are grouped by input shape and sorted by their own CPU time, per call of the case.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch.profiler import profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import B, D, layer_config, make_layer, training_step  # noqa: E402

from damcha.runs.allocator import keep_freed_memory  # noqa: E402


def layer_runner(causal: bool, T: int, damcha: bool):
    run, x = make_layer(layer_config(causal, T), damcha), torch.randn(B, T, D)

    def call():
        with torch.no_grad():
            run(x)
    return call


def profile_table(call, calls: int, rows: int) -> str:
    for _ in range(3):
        call()
    with profile(record_shapes=True) as prof:
        for _ in range(calls):
            call()
    events = prof.key_averages(group_by_input_shape=True)
    total = sum(e.self_cpu_time_total for e in events) / calls / 1e3
    lines = [f"{'operator':58s} {'input shapes':60s} {'ms/call':>8s} {'share':>6s}"]
    for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:rows]:
        ms = e.self_cpu_time_total / calls / 1e3
        lines.append(f"{e.key[:58]:58s} {str(e.input_shapes)[:60]:60s} {ms:8.2f} {ms / total:6.1%}")
    lines.append(f"{'total (self CPU time per call, profiler overhead included)':119s} {total:8.2f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("case", choices=("causal-layer", "non-causal-layer", "train-step"))
    p.add_argument("--T", type=int, default=1024)
    p.add_argument("--variant", default="damcha", choices=("damcha", "damcha-unshared"))
    p.add_argument("--calls", type=int, default=5)
    p.add_argument("--rows", type=int, default=15)
    args = p.parse_args(argv)
    keep_freed_memory()
    for name in (args.variant if args.case == "train-step" else "damcha", "mha"):
        if args.case == "train-step":
            call = training_step(name, 64)
        else:
            call = layer_runner(args.case == "causal-layer", args.T, name != "mha")
        print(f"\n== {name}, {args.case}" + ("" if args.case == "train-step" else f" T={args.T}"))
        print(profile_table(call, args.calls, args.rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
