"""Speed and memory of DAMCHA, and of every registered attention mechanism, against standard MHA,
measured side by side in one process.

    .venv/bin/python benchmarks/bench.py [--repeats 20] [--json results.json] [--quick]

Each case times DAMCHA and MHA interleaved (a DAMCHA run, then an MHA run, ...) after warm-up
and reports medians, their ratio, FLOPs of the dense algorithm and achieved GFLOP/s. Peak
memory of the single-layer cases is measured in a fresh subprocess: the peak of the bytes PyTorch's
allocator holds while a layer runs, over what it held before, replayed from the profiler's record of
every allocation and free.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from damcha import variant_names
from damcha.inputs.model_inputs import validation_input
from damcha.runs.checkpoints import list_runs, load_model
from damcha.views import figures
from damcha.views.export import figure_bytes, static_export_status

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


from damcha import DamchaOptions, ModelConfig, build_model, inspect_input, variant_config  # noqa: E402
from damcha.evidence.efficiency import (  # noqa: E402
    interleaved,
    layer_flops_counted,
    layer_parameters,
    layer_variant_config,
    make_layer,
    make_layer_step,
    peak_memories_mb,
    peak_memory_mb,
)
from damcha.runs.allocator import keep_freed_memory  # noqa: E402

B, D, H, WIDTHS = 16, 128, 8, (256, 512)


def layer_config(causal: bool, T: int) -> ModelConfig:
    return ModelConfig(vocab_size=256, block_size=T, n_layer=1, n_head=H, n_embd=D, attention_options={"generator_widths": WIDTHS},
                       causal=causal, n_classes=0 if causal else 10)


def layer_flops(cfg: ModelConfig, T: int, damcha: bool) -> float:
    """2 x multiply-adds of the dense algorithm (no discount for the causal mask)."""
    attn = 2 * B * T * T * D  # scores and weighted values
    if not damcha:
        return 2 * (4 * B * T * D * D + attn)
    d = D // H
    contexts = B * T if cfg.causal else B
    widths = (D, *WIDTHS)
    gen = contexts * (sum(a * b for a, b in zip(widths[:-1], widths[1:])) + WIDTHS[-1] * D * d)
    return 2 * (gen + B * T * D * d + 2 * B * T * D * D + attn)


def layer_cases(repeats: int, quick: bool) -> list[dict]:
    rows = []
    lengths = (64, 256) if quick else (64, 256, 1024)
    for causal in (False, True):
        for T in lengths:
            cfg = layer_config(causal, T)
            x = torch.randn(B, T, D)
            fd, fm = make_layer(cfg, "damcha"), make_layer(cfg, "mha")
            with torch.no_grad():
                td, tm = interleaved(lambda fd=fd, x=x: fd(x), lambda fm=fm, x=x: fm(x), repeats)
            flops_d, flops_m = layer_flops(cfg, T, True), layer_flops(cfg, T, False)
            peaks = (None, None) if quick else peak_memories_mb(cfg, ("damcha", "mha"), T, B)
            rows.append({
                "case": f"1 layer {'causal' if causal else 'non-causal'} T={T} (B={B}, D={D}, H={H})",
                "damcha_ms": td * 1e3, "mha_ms": tm * 1e3, "ratio": td / tm,
                "damcha_peak_mb": peaks[0], "mha_peak_mb": peaks[1],
                "damcha_gflop": flops_d / 1e9, "mha_gflop": flops_m / 1e9,
                "damcha_gflops": flops_d / td / 1e9, "mha_gflops": flops_m / tm / 1e9,
            })
    return rows


MEMORY_BUDGET = 2 * 2**30  # a mechanism needing more than this per layer call (declared) is not measured
MECHANISM_BATCH = 4
# Settings measured beside a variant's defaults: interleaved heads at P = 2 (the default P = H = 8
# attends over 8T positions).
EXTRA_SETTINGS = {"iha": ({"iha_pseudo": 2},)}
TARGET_LENGTH = 1024  # the targets are judged at this T (shorter lengths are printed for their trend)
TIME_TARGET = 2.0  # time ÷ MHA's time at most this many times the FLOP ratio, forward and training step
MEMORY_TARGET = 2.0  # peak at most this many times MHA's peak plus what the mechanism declares it holds


def measured_variants(variants: tuple[str, ...] | None) -> list[tuple[str, dict]]:
    chosen = [v for v in (variants or variant_names()) if v != "mha" and v not in ("damcha-unshared", "damcha-static")]
    return [(v, o) for v in chosen for o in ({}, *EXTRA_SETTINGS.get(v, ()))]


def mechanism_cases(repeats: int, quick: bool, variants: tuple[str, ...] | None = None,
                    lengths: tuple[int, ...] | None = None) -> list[dict]:
    """Every registered attention variant against MHA in one layer (the paper's table 2): parameters,
    FLOPs (counted by torch on the explicit algorithm), time and peak memory, each as a ratio to MHA
    measured in the same run; at the longest T also one training step (forward and backward)."""
    b = MECHANISM_BATCH
    chosen = measured_variants(variants)
    rows = []
    lengths = lengths or ((64,) if quick else (64, 256, 1024))
    cases = [(causal, T) for causal in (False, True) for T in lengths]
    bar = tqdm(total=len(cases) * len(chosen), desc="mechanisms", unit="case", file=sys.stderr)
    for causal, T in cases:
        cfg = layer_config(causal, T)
        x = torch.randn(b, T, D)
        mha = make_layer(cfg, "mha")
        flops_m, params_m = layer_flops_counted(cfg, "mha", T, b), layer_parameters(cfg, "mha")
        peak_m = None if quick else peak_memory_mb(cfg, "mha", T, b)
        for variant, settings in chosen:
            name = variant + "".join(f" {k}={v}" for k, v in settings.items())
            bar.set_postfix_str(f"{name} T={T}{' causal' if causal else ''}")
            bar.update(1)
            case = f"mechanism {name}, 1 layer {'causal' if causal else 'non-causal'} T={T} (B={b})"
            vcfg = layer_variant_config(cfg, variant)
            if settings:
                vcfg = dataclasses.replace(vcfg, attention_options={**dict(vcfg.attention_options), **settings})
            need = b * vcfg.mechanism.inference_bytes(vcfg, T)
            if need > MEMORY_BUDGET:
                rows.append({"case": case, "variant": name, "skipped": f"needs {need / 2**30:.1f} GB beyond the "
                             f"usual activations (budget {MEMORY_BUDGET / 2**30:.0f} GB)"})
                continue
            layer = make_layer(vcfg, variant)
            with torch.no_grad():
                tv, tm = interleaved(lambda f=layer, x=x: f(x), lambda m=mha, x=x: m(x), max(3, repeats // 2))
            row = {"case": case, "variant": name, "T": T, "damcha_ms": tv * 1e3, "mha_ms": tm * 1e3, "ratio": tv / tm,
                   "params_ratio": layer_parameters(vcfg, variant) / params_m,
                   "flops_ratio": layer_flops_counted(vcfg, variant, T, b) / flops_m,
                   "declared_mb": need / 2**20}
            if not quick:
                peak_v = peak_memory_mb(vcfg, variant, T, b)
                row.update(damcha_peak_mb=peak_v, mha_peak_mb=peak_m, peak_ratio=peak_v / peak_m if peak_m else None)
            if T == lengths[-1]:
                ts, tsm = interleaved(make_layer_step(vcfg, variant, T, b), make_layer_step(cfg, "mha", T, b),
                                      max(3, repeats // 4), warmup=1)
                row["train_ratio"] = ts / tsm
            rows.append(row)
    bar.close()
    return rows


def targets(row: dict) -> list[tuple[str, float, float]]:
    """(what, measured, target) for one measured row at TARGET_LENGTH (none for other lengths): time and
    the training step within TIME_TARGET x the FLOP ratio; peak memory within MEMORY_TARGET x (MHA's
    peak + what the mechanism declares its arithmetic holds beyond MHA's, `inference_bytes`)."""
    if row.get("T", TARGET_LENGTH) != TARGET_LENGTH:
        return []
    out = [("time", row["ratio"], TIME_TARGET * row["flops_ratio"])]
    if row.get("train_ratio") is not None:
        out.append(("training step", row["train_ratio"], TIME_TARGET * row["flops_ratio"]))
    if row.get("damcha_peak_mb") is not None and (row.get("mha_peak_mb") or 0) > 1:
        out.append(("peak MB", row["damcha_peak_mb"], MEMORY_TARGET * (row["mha_peak_mb"] + row["declared_mb"])))
    return out


def print_mechanism_table(rows: list[dict]) -> None:
    """Ratios to MHA; memory as a ratio only where MHA's own peak is above 1 MB (below, the fused
    kernel allocates almost nothing and the ratio is noise), with the peaks in MB beside it. The
    column time÷FLOPs is how much slower a mechanism is than its arithmetic alone would make it;
    the last column says whether each target (see `targets`) is met."""
    head = (f"{'mechanism (one layer, B=' + str(MECHANISM_BATCH) + ')':58s} {'params':>7s} {'FLOPs':>7s} {'time':>7s} "
            f"{'train':>7s} {'time÷FLOPs':>10s} {'memory':>7s} {'peak MB':>14s}  targets (ratios to MHA)")
    print(head)
    print("-" * len(head))
    for r in rows:
        case = r["case"].replace("mechanism ", "").replace(f" (B={MECHANISM_BATCH})", "")
        if "skipped" in r:
            print(f"{case:58s} skipped: {r['skipped']}")
            continue
        ok = r.get("peak_ratio") is not None and (r.get("mha_peak_mb") or 0) > 1
        mem = f"{r['peak_ratio']:.2f}" if ok else "-"
        peaks = f"{r['damcha_peak_mb']:.1f}/{r['mha_peak_mb']:.1f}" if r.get("mha_peak_mb") is not None else "-"
        train = f"{r['train_ratio']:.2f}" if r.get("train_ratio") is not None else "-"
        verdicts = ", ".join(f"{what} {'met' if got <= limit else 'NOT met'} ({got:.2f} ≤ {limit:.2f})"
                             for what, got, limit in targets(r))
        print(f"{case:58s} {r['params_ratio']:7.2f} {r['flops_ratio']:7.2f} {r['ratio']:7.2f} {train:>7s} "
              f"{r['ratio'] / r['flops_ratio']:10.2f} {mem:>7s} {peaks:>14s}  {verdicts}")
    missed = sorted({r["variant"] for r in rows if "skipped" not in r and any(g > t for _, g, t in targets(r))})
    if any(targets(r) for r in rows if "skipped" not in r):
        print(f"targets at T={TARGET_LENGTH} not met: {', '.join(missed) if missed else 'none'} (each explained in "
              "docs/mechanisms.md)")


def moa_gathered_case(repeats: int, T: int = 1024) -> list[dict]:
    """Why MoA's experts are computed densely here: the same expert outputs (one MoA layer's shapes,
    E = 16 experts, k = 8 per token) computed only for the tokens that chose each expert (queries
    gathered per expert, an explicit mask per gathered row) against all experts for all tokens in one
    fused call (causal block skipping included). Checked equal, then timed in the same run."""
    b, E, k, d = MECHANISM_BATCH, 2 * H, H, D // H
    g = torch.Generator().manual_seed(0)
    x, Wq, Wo = torch.randn(b, T, D, generator=g), torch.randn(E, D, d, generator=g) / D**0.5, torch.randn(E, d, D, generator=g)
    K, V = torch.randn(b, T, d, generator=g), torch.randn(b, T, d, generator=g)
    gates = torch.zeros(b, T, E).scatter(-1, torch.randn(b, T, E, generator=g).topk(k, -1).indices, 1.0)
    tril = torch.ones(T, T, dtype=torch.bool).tril()

    def dense(causal):
        q = torch.einsum("btf,efd->betd", x, Wq)  # (b, E, T, d)
        o = F.scaled_dot_product_attention(q, K[:, None].expand(-1, E, -1, -1), V[:, None].expand(-1, E, -1, -1),
                                           is_causal=causal)
        return torch.einsum("bte,betd,edf->btf", gates, o, Wo)

    def gathered(causal):
        y = torch.zeros(b, T, D)
        for e in range(E):
            chosen = gates[..., e] > 0  # (b, T)
            n = chosen.sum(1)
            idx = torch.argsort((~chosen).to(torch.int8), dim=1, stable=True)[:, : int(n.max())]  # chosen first
            valid = torch.arange(idx.shape[1])[None] < n[:, None]
            q = x.gather(1, idx[..., None].expand(-1, -1, D)) @ Wq[e]  # (b, n, d)
            mask = (tril[idx] | ~valid[..., None])[:, None] if causal else None
            o = F.scaled_dot_product_attention(q[:, None], K[:, None], V[:, None], attn_mask=mask)[:, 0]
            y.scatter_add_(1, idx[..., None].expand(-1, -1, D), (o @ Wo[e]) * (gates[..., e].gather(1, idx) * valid)[..., None])
        return y

    rows = []
    with torch.no_grad():
        for causal in (False, True):
            assert torch.allclose(dense(causal), gathered(causal), atol=1e-3)
            tg, td = interleaved(lambda c=causal: gathered(c), lambda c=causal: dense(c), max(3, repeats // 2))
            rows.append({"case": f"MoA experts for chosen tokens only vs dense, {'causal' if causal else 'non-causal'} "
                                 f"T={T} (B={b})", "damcha_ms": tg * 1e3, "mha_ms": td * 1e3, "ratio": tg / td})
    return rows


def print_gathered(rows: list[dict]) -> None:
    print()
    for r in rows:
        print(f"{r['case']}: gathered {r['damcha_ms']:.1f} ms, dense {r['mha_ms']:.1f} ms, ratio {r['ratio']:.2f}")


def training_step(variant: str, T: int, compiled: bool = False):
    """One optimiser step of a 4-layer causal model (B=32, Adam fused as in the train CLI), as a
    callable; the same seeded model and batch for every variant."""
    cfg = variant_config(ModelConfig(vocab_size=256, block_size=T, n_layer=4, n_head=H, n_embd=D,
                                     attention_options={"generator_widths": WIDTHS}), variant)
    model = build_model(cfg, seed=0)
    forward = torch.compile(model) if compiled else model
    opt = torch.optim.Adam(model.parameters(), 1e-4, fused=True)
    tokens = torch.randint(0, 256, (32, T), generator=torch.Generator().manual_seed(0))

    def step():
        opt.zero_grad()
        forward(tokens, targets=tokens).loss.backward()
        opt.step()
    return step


def training_cases(repeats: int, quick: bool) -> list[dict]:
    """The training step eager for the shared and per-layer metric, then both models under
    torch.compile (shared)."""
    rows = []
    T = 32 if quick else 64
    cases = [("damcha", False), ("damcha-unshared", False)] + ([] if quick else [("damcha", True)])
    for variant, compiled in cases:
        td, tm = interleaved(training_step(variant, T, compiled), training_step("mha", T, compiled), max(5, repeats // 2))
        how = "both compiled" if compiled else "eager"
        rows.append({"case": f"4-layer training step, {variant}, {how} (B=32, T={T})", "damcha_ms": td * 1e3,
                     "mha_ms": tm * 1e3, "ratio": td / tm})
    return rows


def naive_case(repeats: int, quick: bool) -> list[dict]:
    """The fast path against what a first implementation would write: the full M(x) per token and
    explicit (B, H, T, T) scores (the model's explicit path), one 4-layer training step."""
    T, b = (128, 2) if quick else (1024, 4)
    cfg = variant_config(ModelConfig(vocab_size=256, block_size=T, n_layer=4, n_head=H, n_embd=D,
                                     attention_options={"generator_widths": WIDTHS}), "damcha")
    model = build_model(cfg, seed=0)
    tokens = torch.randint(0, 256, (b, T))

    def step(explicit):
        model.zero_grad()
        out = model(tokens, targets=tokens, options=DamchaOptions(explicit=explicit), need_intermediates=explicit)
        out.loss.backward()

    tf, tn = interleaved(lambda: step(False), lambda: step(True), max(3, repeats // 4), warmup=1)
    return [{"case": f"4-layer training step fused vs naive explicit (B={b}, T={T}); 'MHA ms' = naive",
             "damcha_ms": tf * 1e3, "mha_ms": tn * 1e3, "ratio": tf / tn}]


def app_cases(repeats: int) -> list[dict]:
    rows = []
    runs, _ = list_runs(ROOT / "checkpoints")
    for run in runs:
        model = load_model(run)
        inp = validation_input(run, 0)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            inspect_input(model, inp.tokens, inp.targets)
            times.append(time.perf_counter() - t0)
        rows.append({"case": f"inspection of one input, {run.name}", "damcha_ms": statistics.median(times) * 1e3})
    run = next(r for r in runs if r.name == "digits-damcha")
    inp = validation_input(run, 0)
    t0 = time.perf_counter()
    for e in run.epochs:
        inspect_input(load_model(run, e), inp.tokens, inp.targets)
    rows.append({"case": f"sweep over {len(run.epochs)} snapshots of digits-damcha (loading included)",
                 "damcha_ms": (time.perf_counter() - t0) * 1e3})
    return rows


def export_cases() -> list[dict]:
    ok, why = static_export_status()
    if not ok:
        return [{"case": f"static export skipped: {why}"}]
    fig = figures.metric_heatmap_figure(np.random.default_rng(0).normal(size=(32, 32)), 4)
    rows = []
    t0 = time.perf_counter()
    figure_bytes(fig, "png")
    rows.append({"case": "static export of one figure, PNG, cold (starts Chromium)", "damcha_ms": (time.perf_counter() - t0) * 1e3})
    for fmt in ("png", "svg", "pdf"):
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            figure_bytes(fig, fmt)
            times.append(time.perf_counter() - t0)
        rows.append({"case": f"static export of one figure, {fmt.upper()}, warm", "damcha_ms": statistics.median(times) * 1e3})
    return rows


def print_table(rows: list[dict]) -> None:
    head = f"{'case':70s} {'DAMCHA ms':>10s} {'MHA ms':>9s} {'ratio':>6s} {'peak MB D/M':>13s} {'GFLOP D/M':>13s} {'GFLOP/s D/M':>13s}"
    print(head)
    print("-" * len(head))
    for r in rows:
        def f(k, fmt="{:.2f}", r=r):
            return fmt.format(r[k]) if r.get(k) is not None else "-"
        peak = f"{f('damcha_peak_mb', '{:.0f}')}/{f('mha_peak_mb', '{:.0f}')}" if "damcha_peak_mb" in r else "-"
        gf = f"{f('damcha_gflop')}/{f('mha_gflop')}" if "damcha_gflop" in r else "-"
        gfs = f"{f('damcha_gflops', '{:.0f}')}/{f('mha_gflops', '{:.0f}')}" if "damcha_gflops" in r else "-"
        print(f"{r['case']:70s} {f('damcha_ms'):>10s} {f('mha_ms'):>9s} {f('ratio'):>6s} {peak:>13s} {gf:>13s} {gfs:>13s}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--json", help="also write the table as JSON here")
    p.add_argument("--quick", action="store_true", help="small sizes and few repeats: checks the script runs")
    p.add_argument("--mechanisms", nargs="*", metavar="VARIANT",
                   help="only the mechanism table, for these variants (none named: every registered one)")
    p.add_argument("--lengths", nargs="+", type=int, metavar="T", help="sequence lengths of the mechanism table "
                   "(default 64 256 1024; the training step is timed at the longest)")
    args = p.parse_args(argv)
    if args.mechanisms is not None:
        rows = mechanism_cases(3 if args.quick else args.repeats, args.quick, tuple(args.mechanisms) or None,
                               tuple(args.lengths) if args.lengths else None)
        print_mechanism_table(rows)
        gathered = moa_gathered_case(3, T=256 if args.quick else 1024)
        print_gathered(gathered)
        rows += gathered
        if args.json:
            Path(args.json).write_text(json.dumps({"torch": torch.__version__, "rows": rows}, indent=2))
        return 0
    repeats = 3 if args.quick else args.repeats
    tuned = keep_freed_memory()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; medians of {repeats} interleaved runs; "
          f"malloc keeps freed memory (as the train CLI): {tuned}")
    # Export and inspection run before the training cases: torch.compile leaves compile workers
    # and caches behind that would share the two cores with Chromium.
    rows = layer_cases(repeats, args.quick)
    rows += [] if args.quick else export_cases()
    rows += app_cases(repeats) + training_cases(repeats, args.quick) + naive_case(repeats, args.quick)
    print_table(rows)
    mechanisms = mechanism_cases(repeats, args.quick)
    print()
    print_mechanism_table(mechanisms)
    rows += mechanisms
    gathered = moa_gathered_case(repeats, T=256 if args.quick else 1024)
    print_gathered(gathered)
    rows += gathered
    if args.json:
        Path(args.json).write_text(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(),
                                               "repeats": repeats, "malloc_keeps_freed_memory": tuned, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
