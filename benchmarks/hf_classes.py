"""The Hugging Face classes against the project's own Transformer, with Hugging Face's GPT-2 (MHA, sdpa) as
the baseline of both, in one process: forward (no gradients) and a training step (forward, backward,
AdamW) at T = 256, D = 128, H = 8, 2 layers, batch 8; medians of interleaved repeats, printed as ratios.

    python benchmarks/hf_classes.py [--repeats 15] [--quick] [--json out.json]

Rows: damcha.hf's DamchaForCausalLM (GPT-2 layout) with DAMCHA / MHA over the project's Transformer of
the same config (the target: within 1.15x); and each over GPT-2's own MHA with sdpa of the same width,
depth and vocabulary (what a user of transformers would otherwise run).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from damcha import ModelConfig, variant_config
from damcha.model.transformer import build_model


def _models(variant: str, T: int, D: int, H: int, L: int, V: int):
    import transformers

    import damcha.hf as hf

    config = variant_config(ModelConfig(vocab_size=V, block_size=T, n_layer=L, n_head=H, n_embd=D), variant)
    own = build_model(config, seed=0)
    wrapped = hf.DamchaForCausalLM(hf.DamchaConfig.from_model_config(config))
    wrapped.transformer.load_state_dict(own.state_dict())
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=L, n_embd=D, n_head=H, vocab_size=V, n_positions=T, attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0,
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, attn_implementation="sdpa"))
    return {"project": own, "hf": wrapped, "gpt2": gpt2}


def _forward(name: str, model, tokens):
    model.eval()
    with torch.no_grad():
        return model(tokens) if name != "project" else model(tokens, stochastic=False)


def _step(name: str, model, tokens, optimizer):
    model.train()
    if name == "project":
        targets = torch.cat([tokens[:, 1:], torch.full_like(tokens[:, :1], -100)], dim=1)
        loss = model(tokens, targets=targets).loss
    else:
        loss = model(tokens, labels=tokens).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def measure(variant: str, repeats: int, T: int = 256, D: int = 128, H: int = 8, L: int = 2, V: int = 256,
            batch: int = 8) -> list[dict]:
    models = _models(variant, T, D, H, L, V)
    tokens = torch.randint(0, V, (batch, T), generator=torch.Generator().manual_seed(0))
    optimizers = {n: torch.optim.AdamW(m.parameters(), lr=1e-4) for n, m in models.items()}
    rows = []
    for kind in ("forward", "training step"):
        times = {n: [] for n in models}
        for i in range(repeats + 1):  # the first round warms up and is dropped
            for name, model in models.items():  # interleaved: drift in the machine's speed hits all alike
                t0 = time.perf_counter()
                _forward(name, model, tokens) if kind == "forward" else _step(name, model, tokens, optimizers[name])
                if i:
                    times[name].append(time.perf_counter() - t0)
        ms = {n: statistics.median(t) * 1e3 for n, t in times.items()}
        rows.append({"case": f"{kind}, {variant}, T={T} D={D} H={H} L={L} B={batch}", "hf_ms": ms["hf"],
                     "project_ms": ms["project"], "gpt2_mha_ms": ms["gpt2"], "hf_over_project": ms["hf"] / ms["project"],
                     "hf_over_gpt2_mha": ms["hf"] / ms["gpt2"]})
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="3 repeats at T = 64: a smoke test, not a measurement")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args(argv)
    repeats, T = (3, 64) if args.quick else (args.repeats, 256)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; medians of {repeats} interleaved repeats")
    rows = [row for variant in ("damcha", "mha") for row in measure(variant, repeats, T=T)]
    print(f"{'case':<52} {'HF ms':>8} {'own ms':>8} {'GPT-2 ms':>9} {'HF/own':>7} {'HF/GPT-2':>9}")
    for r in rows:
        print(f"{r['case']:<52} {r['hf_ms']:>8.2f} {r['project_ms']:>8.2f} {r['gpt2_mha_ms']:>9.2f} "
              f"{r['hf_over_project']:>7.2f} {r['hf_over_gpt2_mha']:>9.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
