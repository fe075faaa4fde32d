"""What one attention layer of a registered variant costs, measured beside standard MHA in the same
process: parameters, FLOPs (as torch counts them), time (interleaved medians) and peak memory (the bytes
PyTorch's allocator holds, in one fresh process). Used by benchmarks/bench.py and by the evidence for the
paper's Table 2.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path

import torch
from torch._C._profiler import _EventType
from torch.utils.flop_counter import FlopCounterMode

from damcha.model.config import ModelConfig, variant_config
from damcha.model.mechanisms import LayerCall
from damcha.model.transformer import build_model


def layer_variant_config(cfg: ModelConfig, variant: str) -> ModelConfig:
    """cfg with `variant`'s attention; a DAMCHA layer owns its generator (in a one-layer model shared
    and per-layer coincide). Settings cfg already gives the variant's mechanism stay (IHA at P = 2)."""
    out = variant_config(cfg, variant)
    if cfg.attention == out.attention:
        out = dataclasses.replace(out, attention_options=tuple({**dict(cfg.attention_options),
                                                                **dict(out.attention_options)}.items()))
    return out.mechanism.single_layer(out)


def make_layer(cfg: ModelConfig, variant: str, eager: bool = False) -> Callable[[torch.Tensor], torch.Tensor]:
    """One attention layer of a registered variant for inference, frozen as load_model returns
    models (a frozen DAMCHA layer keeps its folded generator weights between calls). eager: with
    explicit attention weights (for MHA: softmax(QKᵀ) V written out, not torch's fused kernel)."""
    cfg = layer_variant_config(cfg, variant)
    torch.manual_seed(0)
    attn = cfg.mechanism.build_layer(cfg, 0).requires_grad_(False)
    options = cfg.mechanism.options(None)

    def run(x):
        return attn(x, LayerCall(None, None, cfg.causal, options, need_weights=eager)).y
    return run


def make_layer_step(cfg: ModelConfig, variant: str, T: int, batch: int) -> Callable[[], None]:
    """One layer's forward and backward (gradients of its parameters and input), as in training."""
    cfg = layer_variant_config(cfg, variant)
    torch.manual_seed(0)
    attn = cfg.mechanism.build_layer(cfg, 0)
    options = cfg.mechanism.options(None)
    x = torch.randn(batch, T, cfg.n_embd, requires_grad=True)

    def step():
        attn.zero_grad()
        x.grad = None
        attn(x, LayerCall(None, None, cfg.causal, options)).y.square().mean().backward()
    return step


def make_training_step(cfg: ModelConfig, variant: str, layers: int, T: int, batch: int) -> Callable[[], None]:
    """One optimiser step (forward, backward, Adam) of a whole `layers`-layer model of `variant` on random
    tokens: the cost a user training it pays, generator shared over the stack as the paper's default."""
    model = build_model(dataclasses.replace(variant_config(cfg, variant), n_layer=layers), seed=0)
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    g = torch.Generator().manual_seed(0)
    tokens, targets = (torch.randint(cfg.vocab_size, (batch, T), generator=g) for _ in range(2))

    def step():
        out = model(tokens, targets=targets)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    return step


def interleaved(fa, fb, repeats: int, warmup: int = 3) -> tuple[float, float]:
    """Median seconds of fa and fb, timed alternately so drifts of the machine hit both alike."""
    for _ in range(warmup):
        fa()
        fb()
    ta, tb = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fa()
        ta.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        fb()
        tb.append(time.perf_counter() - t0)
    return statistics.median(ta), statistics.median(tb)


def layer_flops_counted(cfg: ModelConfig, variant: str, T: int, batch: int) -> float:
    """FLOPs of one inference layer as torch's FlopCounterMode counts them. The layer runs with explicit
    attention weights: the counter does not see inside the fused CPU attention kernel, which would
    leave MHA's scores uncounted. A layer's count is c + a T + b T² (a static metric once, projections
    and per-position work linear in T, scores quadratic), so it is counted at three short lengths and
    extended exactly: a long sequence never builds its explicit scores here (interleaved heads at
    T = 1024 would need 17 GB)."""
    probes = tuple(FLOP_PROBE * i for i in (1, 2, 3))
    if T <= probes[-1]:
        return explicit_flops(cfg, variant, T, batch)
    counts = [Fraction(int(explicit_flops(cfg, variant, t, batch))) for t in probes]
    total = Fraction(0)
    for i, (ti, fi) in enumerate(zip(probes, counts)):  # the quadratic through the three counts, at T
        weight = Fraction(1)
        for j, tj in enumerate(probes):
            if j != i:
                weight *= Fraction(T - tj, ti - tj)
        total += weight * fi
    return float(total)


FLOP_PROBE = 16  # the shortest of the three lengths a layer's FLOPs are counted at


def explicit_flops(cfg: ModelConfig, variant: str, T: int, batch: int) -> float:
    """FlopCounterMode's count of one layer's explicit forward at length T."""
    cfg = layer_variant_config(cfg, variant)
    torch.manual_seed(0)
    layer = cfg.mechanism.build_layer(cfg, 0).requires_grad_(False)
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        layer(torch.randn(batch, T, cfg.n_embd), LayerCall(None, None, cfg.causal, cfg.mechanism.options(None), need_weights=True))
    return float(counter.get_total_flops())


def layer_parameters(cfg: ModelConfig, variant: str) -> int:
    cfg = layer_variant_config(cfg, variant)
    return cfg.mechanism.parameter_count(dataclasses.replace(cfg, n_layer=1))


def peak_allocated_bytes(call: Callable[[], object]) -> int:
    """Peak of the bytes PyTorch's allocator holds while call() runs, above what it held before: replayed
    from the profiler's record of every allocation and free (the CPU's counterpart of
    torch.cuda.max_memory_allocated), so the same on every run."""
    with torch.autograd.profiler.profile(profile_memory=True) as prof:
        call()
    held = peak = 0
    for _, size in sorted(_allocations(prof.kineto_results.experimental_event_tree()), key=lambda a: a[0]):
        held += size  # a free is a negative size
        peak = max(peak, held)
    return peak


def _allocations(events) -> Iterator[tuple[int, int]]:
    for event in events:
        if event.tag == _EventType.Allocation:
            yield event.start_time_ns, event.extra_fields.alloc_size
        yield from _allocations(event.children)


_PEAK_PROBE = """
import json, sys, torch
from damcha.model.config import ModelConfig
from damcha.evidence.efficiency import make_layer, peak_allocated_bytes
cfg = ModelConfig.from_dict(json.loads(sys.argv[1])); T, batch = int(sys.argv[3]), int(sys.argv[4])
for variant in json.loads(sys.argv[2]):
    run = make_layer(cfg, variant)
    x = torch.randn(batch, T, cfg.n_embd)
    with torch.no_grad():
        run(x)
        print(peak_allocated_bytes(lambda: run(x)) / 2**20)
"""


def peak_memories_mb(cfg: ModelConfig, variants: tuple[str, ...], T: int, batch: int) -> list[float]:
    """peak_allocated_bytes of each variant's layer run once after a warm-up call, in MB, in one fresh
    process for all variants (the profiler logs to its stderr, kept off the caller's). Exact and the same
    on every run, where a sampler of malloc's level missed a small layer's peak under load; memory taken
    outside PyTorch's allocator (a BLAS library's scratch) is not in it."""
    root = str(Path(__file__).resolve().parent.parent)
    out = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {root!r})\n" + _PEAK_PROBE,
                          json.dumps(cfg.to_dict()), json.dumps(list(variants)), str(T), str(batch)],
                         capture_output=True, text=True, check=True)
    return [float(line) for line in out.stdout.strip().splitlines()[-len(variants):]]


def peak_memory_mb(cfg: ModelConfig, variant: str, T: int, batch: int) -> float:
    """One variant's peak_memories_mb."""
    return peak_memories_mb(cfg, (variant,), T, batch)[0]


TRAINING_LAYERS = 4  # the whole-model training step of the efficiency claim
TRAIN_STEP_RATIO = f"train_step_ratio_{TRAINING_LAYERS}_layers"  # its key in efficiency_ratios
EFFICIENCY_BESIDE = ("time_ratio_eager_mha", "time_ratio_non_causal", TRAIN_STEP_RATIO)  # reported beside the main ratios


def efficiency_ratios(cfg: ModelConfig, variant: str, T: int, batch: int, repeats: int = 10) -> dict:
    """One layer of `variant` against one of MHA: parameters, FLOPs, time and peak memory as ratios; beside
    them the time against MHA written out (eager, explicit softmax), the non-causal layer's time, and a
    TRAINING_LAYERS-layer model's training step."""
    x = torch.randn(batch, T, cfg.n_embd)
    layer, mha, eager = make_layer(cfg, variant), make_layer(cfg, "mha"), make_layer(cfg, "mha", eager=True)
    bidirectional = dataclasses.replace(cfg, causal=False, n_classes=2)  # (a non-causal model classifies)
    layer_nc, mha_nc = make_layer(bidirectional, variant), make_layer(bidirectional, "mha")
    with torch.no_grad():
        tv, tm = interleaved(lambda: layer(x), lambda: mha(x), repeats)
        tv_e, te = interleaved(lambda: layer(x), lambda: eager(x), repeats)
        tv_nc, tm_nc = interleaved(lambda: layer_nc(x), lambda: mha_nc(x), repeats)
    memory = peak_memories_mb(cfg, (variant, "mha"), T, batch)  # one fresh process, not one each
    for name, peak in zip((variant, "mha"), memory, strict=True):
        if not peak > 0:  # a ratio of 0 would be a log ratio of -inf, read as "within noise"
            raise ValueError(f"the memory probe recorded no allocation by {name}'s layer ({peak:g} MB at T = {T}, "
                             f"batch {batch}): no memory ratio can be formed from it")
    ts, tsm = interleaved(make_training_step(cfg, variant, TRAINING_LAYERS, T, batch),
                          make_training_step(cfg, "mha", TRAINING_LAYERS, T, batch), max(3, repeats // 2), warmup=2)
    return {"params_ratio": layer_parameters(cfg, variant) / layer_parameters(cfg, "mha"),
            "flops_ratio": layer_flops_counted(cfg, variant, T, batch) / layer_flops_counted(cfg, "mha", T, batch),
            "time_ratio": tv / tm,
            "memory_ratio": memory[0] / memory[1],
            "time_ratio_eager_mha": tv_e / te,
            "time_ratio_non_causal": tv_nc / tm_nc,
            TRAIN_STEP_RATIO: ts / tsm}
