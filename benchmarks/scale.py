"""Paper-sized and multi-process measurements, DAMCHA against standard MHA in the same process.

    .venv/bin/python benchmarks/scale.py [--quick] [--device cpu|cuda] [--json results.json]

1. Inspection of one 1024-token input of a paper-sized model (D=512, H=8, 10 layers, generator
   widths 256/512, shared metric, randomly initialised): the inspector's record (matrices at the
   viewed position, one layer's attention), the sequence profile at every position, and a forward
   pass; time and peak memory, each model measured in a fresh process (CPU: the peak of malloc's
   bytes in use over the level before; CUDA: torch's peak allocation).
2. Training throughput with 1 and 2 Gloo processes under torchrun (tokens/s, both models); and on
   2 processes an FSDP2 step against a DDP step of the same model, timed in turns in one job.
3. bf16 autocast against fp32: the training step's time ratio and the largest loss difference
   over a few steps from the same weights.
4. One training step of the paper-sized model at T=1024 (fp32; on CUDA also bf16 and compiled).
5. Activation checkpointing at T=1024: the training step's peak memory and time with and without it
   (on the CPU at width 128, two layers; on CUDA at the paper's size), each in a fresh process.
--quick shrinks every size (it checks the script runs; its numbers mean nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from damcha import ModelConfig, build_model, variant_config  # noqa: E402

PAPER = dict(n_layer=10, n_head=8, n_embd=512, generator_widths=(256, 512), block_size=1024, vocab_size=256)
QUICK = dict(n_layer=2, n_head=4, n_embd=32, generator_widths=(32, 64), block_size=64, vocab_size=256)

PEAK_MEMORY = """
import ctypes, threading
class MI(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]
def peak_bytes(job, cuda):
    # bytes in use at job()'s peak above the level before it: torch's allocator on CUDA, malloc's
    # (glibc mallinfo2, sampled every 0.2 ms) on the CPU
    if cuda:
        torch.cuda.reset_peak_memory_stats(); base = torch.cuda.memory_allocated()
        job(); torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base
    libc = ctypes.CDLL("libc.so.6"); libc.mallinfo2.restype = MI
    host = lambda: (lambda m: m.uordblks + m.hblkhd)(libc.mallinfo2())
    base = host(); top = [base]; done = threading.Event()
    def sample():
        while not done.is_set():
            top[0] = max(top[0], host()); done.wait(0.0002)
    t = threading.Thread(target=sample); t.start(); job(); done.set(); t.join()
    return top[0] - base
"""

MEASURE = """
import json, sys, time, torch
sys.path.insert(0, {root!r}); sys.path.insert(0, {bench!r})
from scale import paper_model
from damcha.analysis.inspection import inspect_input, sequence_profile
device = torch.device({device!r})
model = paper_model({variant!r}, {sizes!r}, device)
tokens = torch.randint(0, 256, ({T},), generator=torch.Generator().manual_seed(0))
T = {T}
jobs = {{"inspector record": lambda: inspect_input(model, tokens, tokens, positions=[T - 1]),
        "sequence profile": lambda: sequence_profile(model, tokens),
        "forward pass": lambda: model(tokens[None].to(device))}}
{peak_memory}
cuda = device.type == "cuda"
sync = torch.cuda.synchronize if cuda else (lambda: None)
out = {{}}
with torch.no_grad():
    for name, job in jobs.items():
        job(); sync()  # warm-up (and the folded generator weights, memoised per model)
        times = []
        for _ in range({repeats}):
            t0 = time.perf_counter(); job(); sync(); times.append(time.perf_counter() - t0)
        peak = peak_bytes(job, cuda)
        out[name] = {{"ms": sorted(times)[len(times) // 2] * 1e3, "peak_mb": peak / 2**20}}
print(json.dumps(out))
"""


def paper_model(variant: str, sizes: dict, device: torch.device):
    """A randomly initialised model of the given sizes, frozen for inference (as the app loads one)."""
    cfg = variant_config(ModelConfig.from_dict(sizes), variant)
    return build_model(cfg, seed=0).to(device).eval().requires_grad_(False)


def inspection_cases(quick: bool, device: str, repeats: int) -> list[dict]:
    sizes = QUICK if quick else PAPER
    T = sizes["block_size"]
    measured = {}
    for variant in ("damcha", "mha"):
        code = MEASURE.format(root=str(ROOT), bench=str(ROOT / "benchmarks"), device=device, variant=variant,
                              sizes=sizes, T=T, repeats=repeats, peak_memory=PEAK_MEMORY)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        measured[variant] = json.loads(out.stdout.strip().splitlines()[-1])
    where = f"D={sizes['n_embd']}, H={sizes['n_head']}, L={sizes['n_layer']}, T={T}, {device}"
    rows = []
    for job in measured["damcha"]:
        d, m = measured["damcha"][job], measured["mha"][job]
        rows.append({"case": f"{'quick' if quick else 'paper'}-size {job} ({where})", "damcha_ms": d["ms"], "mha_ms": m["ms"],
                     "ratio": d["ms"] / m["ms"], "damcha_peak_mb": d["peak_mb"], "mha_peak_mb": m["peak_mb"]})
    return rows


def ddp_cases(quick: bool) -> list[dict]:
    """tokens/s of training with torchrun (Gloo, CPU) on 1 and 2 processes, same global batch; and
    on 2 processes, FSDP2 against DDP."""
    rows = []
    steps, T, batch = (2, 32, 8) if quick else (20, 128, 32)
    for variant in ("damcha", "mha"):
        rates = {}
        for nproc in (1, 2):
            with tempfile.TemporaryDirectory() as out:
                cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
                       "-m", "damcha", "train", "--dataset", "text", "--block-size", str(T), "--variant", variant,
                       "--n-layer", "2", "--n-head", "4", "--n-embd", "64", "--generator-widths", "64,128",
                       "--epochs", "1", "--steps-per-epoch", str(steps), "--batch-size", str(batch),
                       "--val-windows", "8", "--device", "cpu", "--out", out]
                env = {**os.environ, "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 2) // nproc))}
                subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=True)
                last = json.loads(Path(out, "metrics.jsonl").read_text().splitlines()[-1])
                rates[nproc] = steps * batch * T / last["train_seconds"]
        rows.append({"case": f"training tokens/s, {variant}, Gloo 1 process / 2 processes (global batch {batch}, T={T})",
                     "one": rates[1], "two": rates[2], "ratio": rates[2] / rates[1]})
    return rows + fsdp_cases(quick)


FSDP_AGAINST_DDP = """
import json, statistics, sys, time, torch, torch.distributed as dist
sys.path.insert(0, {root!r})
from damcha import ModelConfig, build_model, variant_config
from damcha.runs import sharded
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
cfg = variant_config(ModelConfig.from_dict({sizes!r}), {variant!r})
models = {{"ddp": torch.nn.parallel.DistributedDataParallel(build_model(cfg, seed=0)), "fsdp": build_model(cfg, seed=0)}}
sharded.shard(models["fsdp"], torch.device("cpu"))
opts = {{k: torch.optim.Adam(m.parameters(), 1e-4, fused=True) for k, m in models.items()}}
tokens = torch.randint(0, 256, ({batch}, {T}), generator=torch.Generator().manual_seed(0))[rank::world]
def step(k):
    opts[k].zero_grad(set_to_none=True)
    models[k](tokens, targets=tokens).loss.backward()
    torch.nn.utils.clip_grad_norm_(models[k].parameters(), 1.0)
    opts[k].step()
times = {{"ddp": [], "fsdp": []}}
for i in range(2 + {repeats}):
    for k in (("ddp", "fsdp") if i % 2 else ("fsdp", "ddp")):  # in turns: drift hits both alike
        dist.barrier(); t0 = time.perf_counter(); step(k); dist.barrier()
        if i >= 2:
            times[k].append(time.perf_counter() - t0)
if rank == 0:
    print(json.dumps({{k: statistics.median(v) for k, v in times.items()}}))
dist.destroy_process_group()
"""


def fsdp_cases(quick: bool) -> list[dict]:
    """An FSDP2 step against a DDP step of the same model on 2 Gloo processes, in turns in one job."""
    sizes_list = [QUICK] if quick else [dict(QUICK, n_embd=64, generator_widths=(64, 128), block_size=128),
                                        dict(QUICK, n_layer=4, n_head=8, n_embd=256, generator_widths=(128, 256),
                                             block_size=256)]
    batch, repeats = (8, 2) if quick else (16, 12)
    rows = []
    for sizes in sizes_list:
        for variant in ("damcha", "mha"):
            code = FSDP_AGAINST_DDP.format(root=str(ROOT), sizes=sizes, variant=variant, batch=batch,
                                           T=sizes["block_size"], repeats=repeats)
            with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
                f.write(code)
            env = {**os.environ, "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 2) // 2))}
            out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                                  f.name], capture_output=True, text=True, env=env, check=True)
            Path(f.name).unlink()
            t = json.loads(out.stdout.strip().splitlines()[-1])
            rows.append({"case": f"training step, {variant}, 2 Gloo processes, FSDP2 / DDP (D={sizes['n_embd']}, "
                                 f"L={sizes['n_layer']}, global batch {batch}, T={sizes['block_size']})",
                         "ddp_ms": t["ddp"] * 1e3, "fsdp_ms": t["fsdp"] * 1e3, "ratio": t["fsdp"] / t["ddp"]})
    return rows


CHECKPOINTED_STEP = """
import json, statistics, sys, time, torch
sys.path.insert(0, {root!r})
from damcha import ModelConfig, build_model, variant_config
from damcha.runs.sharded import checkpoint_activations
device = torch.device({device!r})
model = build_model(variant_config(ModelConfig.from_dict({sizes!r}), {variant!r}), seed=0).to(device)
if {checkpointed!r}:
    checkpoint_activations(model)
opt = torch.optim.AdamW(model.parameters(), 1e-4)
tokens = torch.randint(0, 256, ({batch}, {T}), generator=torch.Generator().manual_seed(0)).to(device)
cuda = device.type == "cuda"
sync = torch.cuda.synchronize if cuda else (lambda: None)
def step():
    opt.zero_grad(set_to_none=True); model(tokens, targets=tokens).loss.backward(); opt.step(); sync()
{peak_memory}
step()  # warm-up: the optimiser's state exists from here on
times = []
for _ in range({repeats}):
    t0 = time.perf_counter(); step(); times.append(time.perf_counter() - t0)
peak = peak_bytes(step, cuda)
print(json.dumps({{"ms": statistics.median(times) * 1e3, "peak_mb": peak / 2**20}}))
"""


def checkpointing_cases(quick: bool, device: str, repeats: int) -> list[dict]:
    """A training step at T=1024 with and without activation checkpointing, each in a fresh process:
    the peak memory above the weights and optimiser state, and the time."""
    if quick:
        sizes, batch = QUICK, 2
    elif device == "cuda":
        sizes, batch = PAPER, 16
    else:  # the paper's width is minutes a step on two cores: its length, a smaller width
        sizes, batch = dict(PAPER, n_layer=2, n_embd=128, generator_widths=(64, 128)), 2
    T = sizes["block_size"]
    rows = []
    for variant in ("damcha", "mha"):
        got = {}
        for checkpointed in (False, True):
            code = CHECKPOINTED_STEP.format(root=str(ROOT), device=device, sizes=sizes, variant=variant,
                                            checkpointed=checkpointed, batch=batch, T=T, repeats=repeats,
                                            peak_memory=PEAK_MEMORY)
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
            got[checkpointed] = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append({"case": f"activation checkpointing / none, {variant} training step (D={sizes['n_embd']}, "
                             f"L={sizes['n_layer']}, B={batch}, T={T}, {device})",
                     "peak_mb": got[False]["peak_mb"], "checkpointed_peak_mb": got[True]["peak_mb"],
                     "memory_ratio": got[True]["peak_mb"] / got[False]["peak_mb"], "ms": got[False]["ms"],
                     "checkpointed_ms": got[True]["ms"], "ratio": got[True]["ms"] / got[False]["ms"]})
    return rows


def timed_step(model, opt, tokens: torch.Tensor, precision: str, device: str) -> tuple[float, float]:
    """One optimiser step (bf16 autocast or fp32): its seconds and its loss."""
    t0 = time.perf_counter()
    with torch.autocast(torch.device(device).type, torch.bfloat16, enabled=precision == "bf16"):
        loss = model(tokens, targets=tokens).loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0, float(loss.detach())


def bf16_cases(quick: bool, device: str, repeats: int) -> list[dict]:
    """The same steps from the same weights in fp32 and under bf16 autocast: time and loss."""
    sizes = QUICK if quick else dict(PAPER, n_layer=4, block_size=256)
    T, batch, steps = sizes["block_size"], 4 if quick else 8, 5
    rows = []
    for variant in ("damcha", "mha"):
        result = {}
        for precision in ("fp32", "bf16"):
            model = build_model(variant_config(ModelConfig.from_dict(sizes), variant), seed=0).to(device)
            opt = torch.optim.Adam(model.parameters(), 1e-4)
            gen = torch.Generator().manual_seed(0)
            batches = [torch.randint(0, 256, (batch, T), generator=gen).to(device) for _ in range(steps)]
            losses, times = [], []
            for i in range(steps + repeats):
                seconds, loss = timed_step(model, opt, batches[i % steps], precision, device)
                times.append(seconds)
                if i < steps:
                    losses.append(loss)
            result[precision] = (statistics.median(times[1:]), losses)
        (t32, l32), (t16, l16) = result["fp32"], result["bf16"]
        rows.append({"case": f"training step bf16 autocast / fp32, {variant} (D={sizes['n_embd']}, L={sizes['n_layer']}, "
                             f"B={batch}, T={T}, {device})", "fp32_ms": t32 * 1e3, "bf16_ms": t16 * 1e3,
                     "ratio": t16 / t32, "max_loss_diff": max(abs(a - b) for a, b in zip(l32, l16))})
    return rows


def paper_step_cases(quick: bool, device: str, repeats: int) -> list[dict]:
    """One optimiser step of the paper-sized model on 1024-token sequences, DAMCHA against MHA,
    in fp32 and under bf16 autocast (on CUDA also compiled): the recipe's step time."""
    sizes = QUICK if quick else PAPER
    T = sizes["block_size"]
    batch = 4 if device == "cpu" or quick else 16
    cuda = device == "cuda"
    setups = [("fp32", False)] + ([("bf16", False), ("bf16", True)] if cuda else [])
    rows = []
    for precision, compiled in setups:
        times = {}
        for variant in ("damcha", "mha"):
            model = build_model(variant_config(ModelConfig.from_dict(sizes), variant), seed=0).to(device)
            step_model = torch.compile(model) if compiled else model
            opt = torch.optim.AdamW(model.parameters(), 1e-4, fused=cuda)
            tokens = torch.randint(0, 256, (batch, T), generator=torch.Generator().manual_seed(0)).to(device)
            samples = []
            for _ in range((3 if compiled else 1) + (repeats if not quick else 1)):
                samples.append(timed_step(step_model, opt, tokens, precision, device)[0])
            times[variant] = statistics.median(samples[3 if compiled else 1:] or samples)
            peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else None
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            times[variant + "_peak"] = peak
            del model, step_model, opt
        how = precision + (", compiled" if compiled else "")
        rows.append({"case": f"{'quick' if quick else 'paper'}-size training step ({how}; B={batch}, T={T}, {device})",
                     "damcha_ms": times["damcha"] * 1e3, "mha_ms": times["mha"] * 1e3,
                     "ratio": times["damcha"] / times["mha"], "damcha_tokens_per_s": batch * T / times["damcha"],
                     "mha_tokens_per_s": batch * T / times["mha"], "damcha_peak_mb": times["damcha_peak"],
                     "mha_peak_mb": times["mha_peak"]})
    return rows


def print_rows(rows: list[dict]) -> None:
    for r in rows:
        rest = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in r.items() if k != "case")
        print(f"{r['case']}: {rest}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--device", default="cpu")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--skip", default="", help="comma-separated parts to skip: inspection, bf16, step, ddp, checkpointing")
    p.add_argument("--json", help="also write the rows as JSON here")
    args = p.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {args.device}")
    rows = []
    for name, part in (("inspection", lambda: inspection_cases(args.quick, args.device, args.repeats)),
                       ("bf16", lambda: bf16_cases(args.quick, args.device, args.repeats)),
                       ("step", lambda: paper_step_cases(args.quick, args.device, args.repeats)),
                       ("ddp", lambda: ddp_cases(args.quick)),
                       ("checkpointing", lambda: checkpointing_cases(args.quick, args.device, args.repeats))):
        if name not in skip:
            new = part()
            print_rows(new)
            rows += new
    if args.json:
        Path(args.json).write_text(json.dumps({"torch": torch.__version__, "device": args.device, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
