"""damcha.hf.swap_attention: every registered variant in place of the attention of a GPT-2, a Llama and a ViT
model built from configs in code. MHA swapped in with the model's own weights gives the model's logits
(the plumbing is exact); every variant trains a few steps with every new parameter moving; padding,
attention under eager, generation and the refusals hold."""

import copy
import json
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the Hugging Face extra is not installed "
                                   "(pip install 'damcha[hf]'); CI installs it")

from damcha import variant_names  # noqa: E402
from damcha.model.mechanisms import get_mechanism, get_variant  # noqa: E402

hf = pytest.importorskip("damcha.hf")
transformers.logging.set_verbosity_error()
TOKENS = torch.randint(0, 50, (2, 12), generator=torch.Generator().manual_seed(0))
PIXELS = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))


def gpt2():
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=50, n_positions=32,
                                     attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0)
    return transformers.GPT2LMHeadModel(config), lambda m: m(TOKENS, labels=TOKENS)


def llama(kv_heads: int = 4):
    config = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=64,
                                      num_key_value_heads=kv_heads, vocab_size=50, max_position_embeddings=32)
    return transformers.LlamaForCausalLM(config), lambda m: m(TOKENS, labels=TOKENS)


def vit():
    config = transformers.ViTConfig(image_size=16, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2,
                                    num_attention_heads=4, intermediate_size=64, num_labels=3)
    return transformers.ViTForImageClassification(config), lambda m: m(pixel_values=PIXELS, labels=torch.tensor([0, 2]))


LAYOUTS = {"gpt2": gpt2, "llama": llama, "vit": vit}


@pytest.mark.parametrize("layout", ["gpt2", "vit", "llama"])
def test_mha_swapped_in_with_the_models_weights_gives_the_models_logits(layout):
    torch.manual_seed(0)
    model, loss_of = LAYOUTS[layout]()
    model.eval()
    with torch.no_grad():
        before = loss_of(model).logits
        swap = hf.swap_attention(model, "mha")
        # Q, K, V, O weights per layer, with their biases where the model has them (a Llama's have none, and
        # neither have the swapped layers: no parameter the model lacks)
        assert not swap.fresh and len(swap.carried) == (8 if layout == "llama" else 2 * 8)
        assert (layout == "llama") == (not any(name.endswith(".bias") for name, _ in model.named_parameters()
                                               if ".layer." in name))
        assert swap.rotary == (layout == "llama")  # a Llama's RoPE on the attend step's q and k
        torch.testing.assert_close(loss_of(model).logits, before, rtol=0, atol=1e-6)
        model.set_attn_implementation("eager")
        out = model(pixel_values=PIXELS, output_attentions=True) if layout == "vit" else model(TOKENS,
                                                                                               output_attentions=True)
    torch.testing.assert_close(out.logits, before, rtol=1e-5, atol=1e-5)
    length = 17 if layout == "vit" else 12  # 16 patches and the CLS token, or tokens
    assert len(out.attentions) == 2 and out.attentions[0].shape == (2, 4, length, length)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("variant", variant_names())
def test_every_variant_swaps_into_every_layout_and_trains_every_new_parameter(layout, variant):
    torch.manual_seed(0)
    model, loss_of = LAYOUTS[layout]()
    rotary = layout == "llama" and get_mechanism(get_variant(variant).mechanism).rotary_positions
    swap = hf.swap_attention(model, variant, seed=0, rope="q_and_k" if rotary else None if layout != "llama" else "none")
    assert swap.rotary == rotary
    assert len(swap.replaced) == 2 and swap.config.variant == variant
    if variant.startswith("damcha") and swap.config.setting("metric_sharing") == "shared":
        assert any(name.startswith("damcha_shared.") for name in swap.fresh)  # one generator for the stack
    new = {name: p for name, p in model.named_parameters() if ".layer." in name or name.startswith("damcha_shared.")}
    assert set(new) == {*swap.carried, *swap.fresh}
    start = {name: p.detach().clone() for name, p in new.items()}
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(3):
        loss = loss_of(model).loss
        assert torch.isfinite(loss)
        loss.backward()
        assert all(p.grad is not None for p in new.values())
        optimizer.step()
        optimizer.zero_grad()
    unmoved = [name for name, p in new.items() if torch.equal(p, start[name])]
    assert not unmoved, unmoved


def test_a_swapped_decoder_ignores_right_padding_and_generates_without_a_cache():
    torch.manual_seed(0)
    model, _ = llama()
    hf.swap_attention(model, "damcha")
    model.eval()
    mask = torch.ones_like(TOKENS)
    mask[0, -3:] = 0
    with torch.no_grad():
        padded = model(TOKENS, attention_mask=mask).logits[0, :9]
        alone = model(TOKENS[:1, :9]).logits[0]
        torch.testing.assert_close(padded, alone, rtol=1e-5, atol=1e-5)
        prompt, sequence = TOKENS[:1, :4], TOKENS[:1, :4]
        generated = model.generate(prompt, max_new_tokens=4, do_sample=False, pad_token_id=0)
        for _ in range(4):
            sequence = torch.cat([sequence, model(sequence).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(generated, sequence)
    with pytest.raises(ValueError, match="keeps no cache between calls: only DamchaForCausalLM decodes with one"):
        model(TOKENS, use_cache=True)


def test_the_shared_metric_runs_once_per_call_from_the_stack_input():
    model, _ = gpt2()
    hf.swap_attention(model, "damcha")
    calls = []
    model.damcha_shared.register_forward_hook(lambda module, args, out: calls.append(args[0].shape))
    model(TOKENS)
    assert calls == [(2, 12, 32)]


def test_what_cannot_be_swapped_is_refused_in_words():
    with pytest.raises(ValueError, match="grouped-query attention .* DAMCHA's keys are the inputs"):
        hf.swap_attention(llama(kv_heads=2)[0], "damcha")
    bert = transformers.BertModel(transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                                          intermediate_size=64, vocab_size=50))
    with pytest.raises(ValueError, match="knows GPT-2, Llama and ViT models .* not 'bert'"):
        hf.swap_attention(bert, "damcha")
    model, _ = gpt2()
    with pytest.raises(ValueError, match="unknown variant 'nope'"):
        hf.swap_attention(model, "nope")
    with pytest.raises(ValueError, match="damcha has no settings"):
        hf.swap_attention(model, "damcha", moa_experts=3)
    with pytest.raises(ValueError, match="rope='yarn': choose one of"):
        hf.swap_attention(llama()[0], "damcha", rope="yarn")
    with pytest.raises(ValueError, match="a gpt2 model has no rotary positions"):
        hf.swap_attention(gpt2()[0], "damcha", rope="q_and_k")
    with pytest.raises(ValueError, match="scores in steps of its own.*rope='none'"):
        hf.swap_attention(llama()[0], "tha")
    hf.swap_attention(model, "mha")
    with pytest.raises(ValueError, match="holds no GPT2Attention to replace"):
        hf.swap_attention(model, "mha")


def _same_fresh_start(variant: str, build, **swap):
    torch.manual_seed(0)
    model, loss_of = build()
    hf.swap_attention(model, variant, seed=0, **swap)
    return model, loss_of


@pytest.mark.parametrize("variant", variant_names())
def test_a_copy_of_a_swapped_model_computes_with_its_own_weights_and_no_state_of_the_original(variant):
    model, _ = _same_fresh_start(variant, gpt2)
    model.eval()
    early = copy.deepcopy(model)  # before any call
    other = TOKENS.flip(1)
    with torch.no_grad():
        reference = model(TOKENS).logits
        late = copy.deepcopy(model)  # after a call: nothing of that call may travel with it
        torch.testing.assert_close(early(TOKENS).logits, reference, rtol=0, atol=0)
        torch.testing.assert_close(late(other).logits, model(other).logits, rtol=0, atol=0)
        for p in late.parameters():
            p.mul_(1.5)
        moved = late(TOKENS).logits
        torch.testing.assert_close(model(TOKENS).logits, reference, rtol=0, atol=0)  # the original untouched
    assert (moved - reference).abs().max() > 1e-3  # the copy computes with its own (changed) weights


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_new_layers_take_the_models_mode_dtype_and_device(layout):
    variant = "damcha"
    model, _ = LAYOUTS[layout]()
    model.eval()
    hf.swap_attention(model, variant, seed=0, rope="none" if layout == "llama" else None,
                      dropout=0.5)  # dropout the layers would apply if left in training mode
    assert not any(m.training for m in model.modules())
    run = (lambda m: m(pixel_values=PIXELS.to(next(m.parameters()).dtype))) if layout == "vit" else (lambda m: m(TOKENS))
    with torch.no_grad():
        torch.testing.assert_close(run(model).logits, run(model).logits, rtol=0, atol=0)
    torch.manual_seed(0)
    cast_first, _ = LAYOUTS[layout]()
    cast_first = cast_first.to(torch.bfloat16).eval()
    hf.swap_attention(cast_first, variant, seed=0, rope="none" if layout == "llama" else None)
    assert {p.dtype for p in cast_first.parameters()} == {torch.bfloat16}
    torch.manual_seed(0)
    swap_first, _ = LAYOUTS[layout]()
    hf.swap_attention(swap_first, variant, seed=0, rope="none" if layout == "llama" else None)
    swap_first = swap_first.to(torch.bfloat16).eval()
    with torch.no_grad():
        torch.testing.assert_close(run(cast_first).logits, run(swap_first).logits, rtol=0, atol=0)


def _gpt2_with(**settings):
    def build():
        config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=50, n_positions=32, **settings)
        return transformers.GPT2LMHeadModel(config), None
    return build


# Each setting of the models' configs that bears on attention: honoured (MHA swapped in with the model's
# weights reproduces the model with the setting) or refused in words before anything is swapped.
SETTINGS = {
    "gpt2 scale_attn_by_inverse_layer_idx": (_gpt2_with(scale_attn_by_inverse_layer_idx=True), "refused",
                                             "scale_attn_by_inverse_layer_idx=True divides"),
    "gpt2 scale_attn_weights=False": (_gpt2_with(scale_attn_weights=False), "refused", "leaves GPT-2's scores"),
    "gpt2 add_cross_attention": (_gpt2_with(add_cross_attention=True), "honoured", None),
    "gpt2 tie_word_embeddings=False": (_gpt2_with(tie_word_embeddings=False), "honoured", None),
    "gpt2 reorder_and_upcast_attn (float32)": (_gpt2_with(reorder_and_upcast_attn=True), "honoured", None),
    "llama head_dim != hidden / heads": (
        lambda: (transformers.LlamaForCausalLM(transformers.LlamaConfig(
            num_hidden_layers=2, hidden_size=32, num_attention_heads=4, head_dim=16, intermediate_size=64,
            vocab_size=50, max_position_embeddings=32)), None), "refused", "head_dim=16 with hidden_size 32"),
    "llama grouped-query attention": (lambda: llama(kv_heads=2), "refused", "grouped-query attention"),
}
ENCODER = torch.randn(2, 5, 32, generator=torch.Generator().manual_seed(1))


def _call(model, name):
    if "cross_attention" in name:
        return model(TOKENS, encoder_hidden_states=ENCODER).logits
    return model(TOKENS).logits


@pytest.mark.parametrize("name", list(SETTINGS))
def test_every_attention_setting_of_a_model_is_honoured_or_refused_in_words(name):
    build, outcome, words = SETTINGS[name]
    for variant in variant_names():  # refused for every mechanism alike, or run by every one
        torch.manual_seed(0)
        model = build()[0].eval()
        if outcome == "refused":
            with pytest.raises(ValueError, match=words):
                hf.swap_attention(model, variant, rope="none" if "llama" in name else None)
            continue
        with torch.no_grad():
            before = _call(model, name)
            hf.swap_attention(model, variant, seed=0)
            after = _call(model, name)
        assert torch.isfinite(after).all()
        if variant == "mha":  # the explicit recomputation: the model itself
            torch.testing.assert_close(after, before, rtol=0, atol=1e-6)
        if "cross_attention" in name:  # the encoder's states still reach the model through its own cross-attention
            with torch.no_grad():
                assert (model(TOKENS, encoder_hidden_states=ENCODER * 2).logits - after).abs().max() > 1e-4


def test_position_ids_reach_a_llamas_rotary_positions_and_4d_masks_are_refused():
    torch.manual_seed(0)
    model, _ = llama()
    model.eval()
    shifted = torch.arange(12).expand(2, 12) + torch.tensor([[0], [7]])
    shifted[1, 6:] += 5  # the second row with a gap: RoPE reads differences, a shift alone would change nothing
    with torch.no_grad():
        before = model(TOKENS, position_ids=shifted).logits
        hf.swap_attention(model, "mha")
        torch.testing.assert_close(model(TOKENS, position_ids=shifted).logits, before, rtol=0, atol=1e-5)
        assert (model(TOKENS).logits[1] - before[1]).abs().max() > 1e-4  # the positions matter: they were used
        packed = torch.ones(2, 1, 12, 12, dtype=torch.bool).tril()
        packed[:, :, 6:, :6] = False  # two documents of six tokens in each row
        with pytest.raises(ValueError, match="4-D attention_mask .* pass a \\(batch, length\\) mask"):
            model(TOKENS, attention_mask=packed)


_LOAD_IN_A_FRESH_PROCESS = """
import sys, torch
for path in sys.argv[1:]:
    saved = torch.load(path, weights_only=False)  # the user's own file: a whole pickled model and its inputs
    with torch.no_grad():
        logits = saved["model"](**saved["inputs"]).logits
    torch.save({"logits": logits, "class": type(saved["model"]).__name__,
                "saves": type(saved["model"]).save_pretrained.__name__}, path + ".out")
"""


def _swapped_after_a_step(layout: str, variant: str):
    torch.manual_seed(0)
    model, loss_of = LAYOUTS[layout]()
    rotary = layout == "llama" and get_mechanism(get_variant(variant).mechanism).rotary_positions
    hf.swap_attention(model, variant, seed=0, rope=None if rotary or layout != "llama" else "none")
    loss_of(model).loss.backward()  # a forward with gradients: the call's values hold the graph
    return model, {"pixel_values": PIXELS} if layout == "vit" else {"input_ids": TOKENS}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("variant", variant_names())
def test_a_swapped_model_pickles_and_deep_copies_after_a_training_step(layout, variant):
    """pickle (torch.save of the whole model, multiprocessing) raised a PicklingError naming the model's own
    class; deepcopy after a forward with gradients refused the last call's tensor. Both give the same logits."""
    import pickle

    model, inputs = _swapped_after_a_step(layout, variant)
    copied, unpickled = copy.deepcopy(model).eval(), pickle.loads(pickle.dumps(model)).eval()
    model.eval()
    with torch.no_grad():
        here = model(**inputs).logits
        torch.testing.assert_close(copied(**inputs).logits, here, rtol=0, atol=0)
        torch.testing.assert_close(unpickled(**inputs).logits, here, rtol=0, atol=0)
    assert type(unpickled) is type(model)


def test_swapped_models_saved_whole_load_in_a_fresh_process_as_swapped_models(tmp_path):
    """torch.save(model) of every variant in every layout, loaded by a process that imported nothing of the
    project: the same logits, and each is still a swapped model (it saves as one)."""
    import subprocess
    import sys

    expected = {}
    for layout in LAYOUTS:
        for variant in variant_names():
            model, inputs = _swapped_after_a_step(layout, variant)
            model.eval()
            with torch.no_grad():
                expected[f"{layout}-{variant}"] = (model(**inputs).logits, type(model).__name__)
            torch.save({"model": model, "inputs": inputs}, tmp_path / f"{layout}-{variant}.pt")
    subprocess.run([sys.executable, "-c", _LOAD_IN_A_FRESH_PROCESS, *(str(tmp_path / f"{k}.pt") for k in expected)],
                   check=True, cwd=Path(__file__).resolve().parents[2], capture_output=True)
    for key, (logits, cls) in expected.items():
        there = torch.load(tmp_path / f"{key}.pt.out")
        torch.testing.assert_close(there["logits"], logits, rtol=0, atol=0, msg=key)
        assert there["class"] == cls and there["saves"] == "_refuse_or_save", key


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("variant", variant_names())
def test_a_swapped_model_saves_and_reloads_to_the_same_logits_and_never_loads_as_the_plain_model(
        layout, variant, tmp_path):
    torch.manual_seed(0)
    model, loss_of = LAYOUTS[layout]()
    rotary = layout == "llama" and get_mechanism(get_variant(variant).mechanism).rotary_positions
    hf.swap_attention(model, variant, seed=0, rope=None if rotary or layout != "llama" else "none")
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    loss_of(model).loss.backward()  # trained a step: the reload must carry trained weights, not a fresh start
    optimizer.step()
    model.eval()
    model.save_pretrained(tmp_path / "swapped")
    reloaded = hf.load_swapped(tmp_path / "swapped")
    assert not reloaded.training
    with torch.no_grad():
        torch.testing.assert_close(loss_of(reloaded).logits, loss_of(model).logits, rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="ignore_mismatched_sizes"):  # not a GPT-2 with fresh attention
        type(model).__mro__[1].from_pretrained(tmp_path / "swapped")


def test_a_swapped_folder_that_is_damaged_or_foreign_is_refused_in_words(tmp_path):
    model, _ = gpt2()
    hf.swap_attention(model, "damcha", seed=0)
    model.save_pretrained(tmp_path / "swapped")
    gpt2()[0].save_pretrained(tmp_path / "plain")
    with pytest.raises(ValueError, match="model_type 'gpt2', not a swapped model"):
        hf.load_swapped(tmp_path / "plain")
    config = json.loads((tmp_path / "swapped" / "config.json").read_text())
    (tmp_path / "swapped" / "config.json").write_text(json.dumps({**config, "base_architecture": "AutoModel"}))
    with pytest.raises(ValueError, match="base_architecture 'AutoModel' .* is not one load_swapped rebuilds"):
        hf.load_swapped(tmp_path / "swapped")
    (tmp_path / "swapped" / "config.json").write_text(json.dumps({**config, "variant": "mha"}))
    with pytest.raises(ValueError, match="its tensors do not match the swapped model"):
        hf.load_swapped(tmp_path / "swapped")


def test_a_folder_saved_in_the_earlier_format_still_loads(tmp_path):
    """Before 7 December 2026 the weights sat in swapped_model.safetensors, with no refusal tensor: such a folder
    loads to the same logits."""
    from safetensors.torch import save_model

    model, loss_of = gpt2()
    hf.swap_attention(model, "damcha", seed=0)
    model.eval()
    model.save_pretrained(tmp_path / "new")
    config = json.loads((tmp_path / "new" / "config.json").read_text())
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "config.json").write_text(json.dumps({k: v for k, v in config.items() if k != "refusal_key"}))
    save_model(model, str(tmp_path / "old" / "swapped_model.safetensors"), metadata={"format": "pt"})
    with torch.no_grad():
        torch.testing.assert_close(loss_of(hf.load_swapped(tmp_path / "old")).logits, loss_of(model).logits, rtol=0, atol=0)


def test_a_swapped_llama_saved_with_projection_biases_loads_with_them(tmp_path):
    """Before 7 December 2026 a swap into a Llama gave the layers' projections biases the Llama lacks (zeros, then
    trained); now the layers have none. A folder saved then loads with its trained biases, to the same logits."""
    model, loss_of = llama()
    hf.swap_attention(model, "mha", seed=0)
    with torch.no_grad():
        for name, module in model.named_modules():
            if name.endswith(tuple(f".layer.{role}" for role in ("query", "key", "value", "proj"))):
                module.bias = torch.nn.Parameter(torch.randn(module.out_features))  # as trained then
    model.eval().save_pretrained(tmp_path / "then")
    loaded = hf.load_swapped(tmp_path / "then")
    with torch.no_grad():
        torch.testing.assert_close(loss_of(loaded).logits, loss_of(model).logits, rtol=0, atol=0)
    assert sum(name.endswith(".bias") for name, _ in loaded.named_parameters() if ".layer." in name) == 8


def test_saving_into_a_folder_of_another_model_is_refused_and_leaves_it_as_it_was(tmp_path):
    """Its weights now sit in model.safetensors, as a plain model's do: a swapped model saved over a GPT-2's folder
    would replace that model's files. Refused in words, every file byte-identical; its own folder it re-saves."""
    gpt2()[0].save_pretrained(tmp_path / "plain")
    before = {f.name: f.read_bytes() for f in (tmp_path / "plain").iterdir()}
    model, _ = gpt2()
    hf.swap_attention(model, "damcha", seed=0)
    with pytest.raises(ValueError, match="holds another model .*model_type 'gpt2'.* not replaced"):
        model.save_pretrained(tmp_path / "plain")
    assert {f.name: f.read_bytes() for f in (tmp_path / "plain").iterdir()} == before
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "model.safetensors").write_bytes(b"someone else's")
    with pytest.raises(ValueError, match="without a swapped model's config.json"):
        model.save_pretrained(tmp_path / "weights")
    assert (tmp_path / "weights" / "model.safetensors").read_bytes() == b"someone else's"
    model.save_pretrained(tmp_path / "mine")
    model.save_pretrained(tmp_path / "mine")  # its own folder: saved again
    hf.load_swapped(tmp_path / "mine")
