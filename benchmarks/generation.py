"""Greedy generation with damcha.hf's DamchaForCausalLM: DAMCHA with its PrefixCache against MHA with its
cache at the same size, in one process (and DAMCHA recomputing the prefix, and Hugging Face's GPT-2 with
its DynamicCache, for reference): a 16-token prompt and 256 new tokens, D = 128, H = 8, 2 layers,
batch 1; medians of interleaved repeats, printed as ratios to MHA with its cache.

    python benchmarks/generation.py [--repeats 5] [--quick] [--json out.json]

The target: DAMCHA with its cache within 1.5x of MHA with its cache.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from damcha import ModelConfig, variant_config


def _models(T: int, D: int, H: int, L: int, V: int) -> dict:
    import transformers

    import damcha.hf as hf

    def ours(variant: str):
        config = variant_config(ModelConfig(vocab_size=V, block_size=T, n_layer=L, n_head=H, n_embd=D), variant)
        torch.manual_seed(0)
        return hf.DamchaForCausalLM(hf.DamchaConfig.from_model_config(config)).eval()

    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=L, n_embd=D, n_head=H, vocab_size=V, n_positions=T, attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0,
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, attn_implementation="sdpa")).eval()
    damcha = ours("damcha")
    return {"MHA, cache": (ours("mha"), True), "DAMCHA, cache": (damcha, True), "DAMCHA, no cache": (damcha, False),
            "GPT-2 MHA, DynamicCache": (gpt2, True)}


def measure(repeats: int, new_tokens: int = 256, prompt: int = 16, D: int = 128, H: int = 8, L: int = 2,
            V: int = 256, batch: int = 1) -> list[dict]:
    models = _models(prompt + new_tokens, D, H, L, V)
    tokens = torch.randint(0, V, (batch, prompt), generator=torch.Generator().manual_seed(0))
    times: dict[str, list[float]] = {name: [] for name in models}
    outputs = {}
    for i in range(repeats + 1):  # the first round warms up and is dropped
        for name, (model, cache) in models.items():  # interleaved: drift in the machine's speed hits all alike
            t0 = time.perf_counter()
            with torch.no_grad():
                outputs[name] = model.generate(tokens, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                               do_sample=False, use_cache=cache, pad_token_id=0)
            if i:
                times[name].append(time.perf_counter() - t0)
    if not torch.equal(outputs["DAMCHA, cache"], outputs["DAMCHA, no cache"]):
        raise AssertionError("DAMCHA generated other tokens with its cache than without")
    baseline = statistics.median(times["MHA, cache"])
    return [{"case": name, "new_tokens": new_tokens, "prompt": prompt, "batch": batch, "D": D, "H": H, "L": L,
             "seconds": statistics.median(t), "over_mha_with_cache": statistics.median(t) / baseline}
            for name, t in times.items()]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="1 repeat of 16 new tokens: a smoke test, not a measurement")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args(argv)
    repeats, new = (1, 16) if args.quick else (args.repeats, 256)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; medians of {repeats} interleaved repeats")
    rows = measure(repeats, new_tokens=new)
    print(f"{'case':<26} {'seconds':>8} {'/ MHA with cache':>17}")
    for r in rows:
        print(f"{r['case']:<26} {r['seconds']:>8.3f} {r['over_mha_with_cache']:>17.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
