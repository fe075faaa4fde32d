"""Checks that need a GPU, run once where one is available (see README, "Paper-sized models").

    python benchmarks/device_check.py --out DIR

0. The cost table first (`python -m damcha costs --scale paper --missing-only --time-limit S`): one training
   step of every run configuration of the paper-scale claims on this GPU (each compiled first), written under
   the GPU's name into DIR/cost_table.json, a copy of damcha/evidence/cost_table.json made by the first call
   (copy it over the shipped one and commit it: the evidence budget reads it). The shipped table itself is never
   written by this script. The paper scale's kinds, each compiled, may not all fit one 10-minute device call:
   each call times the kinds DIR's table still lacks for 8 minutes at most (--cost-seconds) and says how many are
   left; call it again with the same DIR until none are.
   --costs-only stops there; --skip-costs leaves it out.
1. The train CLI on CUDA: fp32, bf16 autocast, torch.compile, and torchrun with NCCL (one process
   per visible GPU), each for one short epoch; every run must load back and give the same loss
   on CPU as recorded on the GPU (to float tolerance).
2. Inspection on CUDA (what the app does with DAMCHA_DEVICE=cuda) against the CPU: the largest
   difference of every structure and the attention maps of a small trained-for-nothing model.
Prints one line per check and exits non-zero on the first failure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # before the package's first import: the script runs from a clone, uninstalled

import numpy as np  # noqa: E402
import torch  # noqa: E402

from damcha import ModelConfig, build_model, inspect_input, variant_config  # noqa: E402
from damcha.evidence.costs import SHIPPED_TABLE  # noqa: E402
from damcha.inputs.datasets import load_dataset  # noqa: E402
from damcha.runs.checkpoints import load_model, load_run  # noqa: E402
from damcha.runs.evaluation import evaluate  # noqa: E402

TRAIN = ["-m", "damcha", "train", "--dataset", "digits", "--n-layer", "2", "--n-head", "4", "--n-embd", "32",
         "--epochs", "1", "--batch-size", "64"]


def check_training(out: Path, device: str) -> None:
    processes = torch.cuda.device_count() if device == "cuda" else 1
    setups = {"fp32": [], "bf16": ["--precision", "bf16"], "compiled": ["--compile"]}
    for name, extra in setups.items():
        run_dir = out / f"digits-{name}"
        subprocess.run([sys.executable, *TRAIN, "--device", device, *extra, "--out", str(run_dir)], cwd=ROOT, check=True)
        report(name, run_dir)
    run_dir = out / "digits-torchrun"
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}",
                    *TRAIN, "--device", device, "--out", str(run_dir)], cwd=ROOT, check=True)
    report(f"torchrun ({'NCCL' if device == 'cuda' else 'Gloo'}) x{processes}", run_dir)


def measure_costs(out: Path, device: str, seconds: float) -> None:
    scale = "paper" if device == "cuda" else "tiny"  # (on the CPU: to exercise the script)
    out.mkdir(parents=True, exist_ok=True)
    table = out / "cost_table.json"
    if not table.exists():  # (a later call goes on with what an earlier one measured)
        shutil.copy(SHIPPED_TABLE, table)
    subprocess.run([sys.executable, "-m", "damcha", "costs", "--scale", scale, "--device", device, "--repeats", "10",
                    "--table", str(table), "--missing-only", "--time-limit", str(seconds)], cwd=ROOT, check=True)
    print(f"cost table: {table}", flush=True)


def report(name: str, run_dir: Path) -> None:
    """The run's last recorded validation loss (computed on the GPU) against the same evaluation on CPU."""
    run = load_run(run_dir)
    recorded = run.metrics[-1]["val_nll"]
    data = load_dataset("digits")
    cpu = evaluate(load_model(run), data.val_inputs, data.val_targets)["nll"]
    ok = abs(cpu - recorded) < 1e-3
    print(f"train {name}: val NLL on GPU {recorded:.5f}, same weights on CPU {cpu:.5f} -> {'ok' if ok else 'MISMATCH'}",
          flush=True)
    if not ok:
        raise SystemExit(1)


def check_inspection(device: str) -> None:
    for variant in ("damcha", "damcha-unshared", "damcha-bilinear", "mha", "dcmha", "moa"):
        cfg = variant_config(ModelConfig(vocab_size=64, block_size=48, n_layer=2, n_head=4, n_embd=32,
                                         attention_options={"generator_widths": (32, 64)}), variant)
        model = build_model(cfg, seed=0).eval().requires_grad_(False)
        tokens = np.random.default_rng(0).integers(0, 64, 48)
        cpu = inspect_input(model, tokens, tokens)
        gpu = inspect_input(model.to(device), tokens, tokens)
        worst = max([float(np.abs(a.values - b.values).max()) for a, b in zip(cpu.structures, gpu.structures)]
                    + [float(np.abs(cpu.attention - gpu.attention).max()), abs(cpu.loss - gpu.loss)])
        ok = worst < 1e-3  # TF32 matmuls may be on for CUDA; float32 rounding otherwise
        print(f"inspection {variant}: largest CPU/CUDA difference {worst:.2e} -> {'ok' if ok else 'MISMATCH'}", flush=True)
        if not ok:
            raise SystemExit(1)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--device", default="cuda", help="cuda; cpu only exercises this script")
    p.add_argument("--costs-only", action="store_true", help="measure the cost table and stop")
    p.add_argument("--skip-costs", action="store_true", help="leave the cost table out")
    p.add_argument("--cost-seconds", type=float, default=480, help="start no step kind past this many seconds of "
                   "timing (default 480: one 10-minute device call with room); call again for the rest")
    args = p.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: nothing to check here")
        return 0
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else None
    print(json.dumps({"torch": torch.__version__, "device": args.device, "gpu": gpu,
                      "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")}), flush=True)
    if not args.skip_costs:
        measure_costs(Path(args.out), args.device, args.cost_seconds)
        if args.costs_only:
            return 0
    check_inspection(args.device)
    check_training(Path(args.out), args.device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
