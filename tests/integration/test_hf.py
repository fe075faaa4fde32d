"""The Hugging Face door (damcha.hf, extra damcha[hf]): every registered variant as Hugging Face classes
that round-trip through save_pretrained/from_pretrained exactly, attend alike under sdpa and eager, give
their attention under eager; every shipped token run exports with the run's logits; what has no meaning
(a cache, a foreign or damaged folder) is refused in words. Configs are built in code, at tiny sizes."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the Hugging Face extra is not installed "
                                   "(pip install 'damcha[hf]'); CI installs it")

from safetensors.torch import load_file, save_file  # noqa: E402

from damcha import ModelConfig, variant_config, variant_names  # noqa: E402
from damcha.__main__ import main  # noqa: E402
from damcha.model.config import MOVED_SETTINGS  # noqa: E402
from damcha.model.mechanisms import get_mechanism  # noqa: E402
from damcha.runs.checkpoints import list_runs, load_model  # noqa: E402

hf = pytest.importorskip("damcha.hf")
transformers.logging.set_verbosity_error()
PAD = 10
CHECKPOINTS = Path(__file__).resolve().parents[2] / "checkpoints"


def _config(variant: str, classifier: bool = False) -> "hf.DamchaConfig":
    base = ModelConfig(n_layer=2, n_head=4, n_embd=16, attention_options={"generator_widths": (8,)}, block_size=12, vocab_size=11,
                       causal=not classifier, n_classes=3 if classifier else 0)
    return hf.DamchaConfig.from_model_config(variant_config(base, variant))


def _tokens(batch: int = 3, length: int = 12) -> torch.Tensor:
    return torch.randint(0, PAD, (batch, length), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("variant", variant_names())
def test_every_variant_round_trips_and_attends_alike_under_sdpa_and_eager(variant, tmp_path):
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(_config(variant)).eval()
    assert type(model) is hf.DamchaForCausalLM and model.config._attn_implementation == "sdpa"
    x = _tokens()
    mask = torch.ones_like(x)
    mask[0, -4:] = 0  # a right-padded row: the 2-D mask is the project's `real`
    with torch.no_grad():
        fused = model(x, attention_mask=mask).logits  # (B, T, V)
        own = model.transformer(x, real=mask.bool()).logits
        torch.testing.assert_close(fused, own, rtol=0, atol=0)
        with pytest.raises(ValueError, match="needs attn_implementation='eager'"):
            model(x, output_attentions=True)

        model.save_pretrained(tmp_path)
        loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
        for name, tensor in model.state_dict().items():
            assert torch.equal(loaded.state_dict()[name], tensor), name
        assert loaded.config.model_config() == model.config.model_config()
        explicit = loaded(x, attention_mask=mask, output_attentions=True, output_hidden_states=True)
    torch.testing.assert_close(explicit.logits, fused, rtol=1e-5, atol=1e-5)
    assert len(explicit.attentions) == 2  # (B, heads, T, T): MoA attends with its experts, not n_head
    assert all(a.shape[0] == 3 and a.shape[-2:] == (12, 12) for a in explicit.attentions)
    assert len(explicit.hidden_states) == 3 and explicit.hidden_states[-1].shape == (3, 12, 16)


@pytest.mark.parametrize("variant", variant_names())
def test_every_variant_in_the_vit_layout_classifies_images_round_trips_and_trains(variant, tmp_path):
    base = ModelConfig(n_layer=2, n_head=4, n_embd=16, attention_options={"generator_widths": (8,)}, n_classes=3, causal=False)
    config = hf.DamchaConfig.for_images(variant_config(base, variant), image_size=16, patch_size=4)
    torch.manual_seed(0)
    model = transformers.AutoModelForImageClassification.from_config(config)
    assert type(model) is hf.DamchaForImageClassification
    assert config.model_config().parameter_estimate() == sum(p.numel() for p in model.parameters())
    pixels = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    out = model(pixel_values=pixels, labels=torch.tensor([0, 2]))
    out.loss.backward()
    assert out.logits.shape == (2, 3) and all(p.grad is not None for p in model.parameters())
    model.eval().save_pretrained(tmp_path)
    loaded = transformers.AutoModelForImageClassification.from_pretrained(tmp_path, attn_implementation="eager").eval()
    with torch.no_grad():
        explicit = loaded(pixel_values=pixels, output_attentions=True)
        torch.testing.assert_close(explicit.logits, model(pixel_values=pixels).logits, rtol=1e-5, atol=1e-5)
    assert explicit.attentions[0].shape[-2:] == (16, 16)  # 16 patches


@pytest.mark.parametrize("variant", [v for v in variant_names() if _config(v).model_config().mechanism.rotary_positions])
def test_every_variant_of_the_attend_step_in_the_llama_layout_round_trips_and_attends_alike(variant, tmp_path):
    config = hf.DamchaConfig.for_llama(_config(variant).model_config())
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    assert type(model.transformer.blocks[0].mlp).__name__ == "SwiGLU" and model.transformer.pos_emb is None
    model.save_pretrained(tmp_path)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    assert loaded.config.layout == "llama" and loaded.config.model_config() == config.model_config()
    with torch.no_grad():
        torch.testing.assert_close(loaded(_tokens()).logits, model(_tokens()).logits, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="layout 'llama' is"):
        hf.DamchaConfig(layout="llama")


def test_patches_are_embedded_as_vits_patch_convolution_embeds_them():
    pixels = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    conv = torch.nn.Conv2d(3, 8, kernel_size=4, stride=4)
    linear = torch.nn.Linear(48, 8)
    with torch.no_grad():
        linear.weight.copy_(conv.weight.reshape(8, 48))
        linear.bias.copy_(conv.bias)
        by_conv = conv(pixels).flatten(2).transpose(1, 2)  # (B, 16, 8): ViT's patch embedding
        torch.testing.assert_close(linear(hf.models.patches_of(pixels, 4)), by_conv, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="layout 'vit' needs image_size divisible by patch_size"):
        hf.DamchaConfig(layout="vit", image_size=15, patch_size=4)


def test_a_classifier_takes_labels_and_trains_every_parameter():
    model = transformers.AutoModelForSequenceClassification.from_config(_config("damcha", classifier=True))
    assert type(model) is hf.DamchaForSequenceClassification and model.config.num_labels == 3
    out = model(_tokens(), labels=torch.tensor([0, 1, 2]))
    assert out.logits.shape == (3, 3)
    out.loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_the_causal_loss_shifts_the_labels_as_hugging_face_models_do():
    model = hf.DamchaForCausalLM(_config("damcha")).eval()
    x = _tokens()
    out = model(x, labels=x)
    manual = torch.nn.functional.cross_entropy(out.logits[:, :-1].flatten(0, 1), x[:, 1:].flatten())
    torch.testing.assert_close(out.loss, manual)


@pytest.mark.parametrize("variant", variant_names())
def test_greedy_generation_equals_a_full_recompute_and_decodes_with_a_cache_where_declared(variant):
    model = hf.DamchaForCausalLM(_config(variant)).eval()
    prompt = _tokens(2, 4)
    seen = []  # the length of every call's input: 1 per new token with a cache, the whole sequence without
    handle = model.transformer.register_forward_pre_hook(lambda module, args: seen.append(args[0].shape[1]))
    try:
        generated = model.generate(prompt, max_new_tokens=6, do_sample=False, pad_token_id=0)
    finally:
        handle.remove()
    sequence = prompt
    with torch.no_grad():
        for _ in range(6):
            sequence = torch.cat([sequence, model(sequence).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(generated, sequence)
    cached = get_mechanism(model.config.attention).decodes_with_cache
    assert seen == ([4] + [1] * 5 if cached else list(range(4, 10))), seen
    if not cached:
        with pytest.raises(ValueError, match="keeps no cache of the tokens read"):
            model(prompt, use_cache=True)
    with pytest.raises(ValueError, match="must be the PrefixCache this model returned"):
        model(prompt, past_key_values=transformers.DynamicCache())


@pytest.mark.parametrize("layout", ["gpt2", "llama"])
@pytest.mark.parametrize("variant", variant_names())
def test_generate_on_a_left_padded_batch_gives_every_row_as_it_would_alone(variant, layout):
    config = _config(variant)
    if layout == "llama":
        if not get_mechanism(config.attention).rotary_positions:
            pytest.skip(f"{variant} scores outside the shared attend step: no Llama layout (refused in words)")
        config = hf.DamchaConfig.for_llama(config.model_config())
    torch.manual_seed(0)
    model = hf.DamchaForCausalLM(config).eval()
    rows = [_tokens(1, 5)[0], _tokens(1, 3)[0] + 0]
    rows[1][0] = 7  # two prompts of different lengths
    batch = torch.zeros(2, 5, dtype=torch.long)
    mask = torch.zeros(2, 5, dtype=torch.long)
    for i, row in enumerate(rows):  # left padding
        batch[i, 5 - len(row):], mask[i, 5 - len(row):] = row, 1
    together = model.generate(batch, attention_mask=mask, max_new_tokens=4, do_sample=False, pad_token_id=0)
    for i, row in enumerate(rows):
        alone = model.generate(row[None], max_new_tokens=4, do_sample=False, pad_token_id=0)
        assert torch.equal(together[i, 5 - len(row):], alone[0]), (variant, i)
    right = torch.ones_like(mask)
    right[1, -2:] = 0
    with pytest.raises(ValueError, match="padded on the right .* pad on the left"):
        model.generate(batch, attention_mask=right, max_new_tokens=2, do_sample=False, pad_token_id=0)


def _token_runs():
    runs, _ = list_runs(CHECKPOINTS)
    return [run for run in runs if not run.model_config.input_dim]


def test_every_shipped_token_run_exports_with_the_runs_logits(tmp_path):
    runs = _token_runs()
    assert len(runs) >= 15
    for run in runs:
        done = hf.export_run(run, tmp_path / run.name)
        assert done.max_difference <= hf.export.PARITY_TOLERANCE, run.name
        auto = (transformers.AutoModelForSequenceClassification if run.model_config.n_classes
                else transformers.AutoModelForCausalLM)
        exported = auto.from_pretrained(tmp_path / run.name).eval()
        x = torch.randint(0, run.model_config.vocab_size, (2, run.model_config.block_size),
                          generator=torch.Generator().manual_seed(3))
        with torch.no_grad():
            torch.testing.assert_close(exported(x).logits, load_model(run)(x).logits, rtol=0,
                                       atol=hf.export.PARITY_TOLERANCE)


def test_the_export_command_writes_a_folder_auto_classes_load(tmp_path, capsys):
    assert main(["export-hf", str(CHECKPOINTS / "text-dcmha"), "--out", str(tmp_path / "hf"), "--epoch", "0"]) == 0
    assert "epoch 0" in capsys.readouterr().out
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["model_type"] == "damcha" and config["attention"] == "dcmha"
    assert not list((tmp_path / "hf").glob("*.bin"))  # safetensors only
    assert main(["export-hf", str(CHECKPOINTS / "images-mha"), "--out", str(tmp_path / "img")]) == 2
    assert "image patches" in capsys.readouterr().err


def test_a_damaged_or_foreign_folder_is_refused_in_words(tmp_path):
    model = hf.DamchaForCausalLM(_config("damcha"))
    model.save_pretrained(tmp_path / "damaged")
    weights = load_file(tmp_path / "damaged" / "model.safetensors")
    del weights["transformer.head.weight"]
    save_file(weights, tmp_path / "damaged" / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"do not match its config \(missing \['transformer.head.weight'\]\)"):
        hf.DamchaForCausalLM.from_pretrained(tmp_path / "damaged")
    transformers.GPT2Config(n_layer=1, n_embd=16, n_head=4, vocab_size=11).save_pretrained(tmp_path / "gpt2")
    with pytest.raises(ValueError, match="model_type 'gpt2' is not a DAMCHA Lab model"):
        hf.DamchaForCausalLM.from_pretrained(tmp_path / "gpt2")
    with pytest.raises(ValueError, match="divisible by n_head"):
        hf.DamchaConfig(n_embd=18, n_head=4)
    with pytest.raises(ValueError, match="'sdpa' \\(fused\\) or 'eager'"):
        model.config._attn_implementation = "flex_attention"
        model(_tokens())



def test_pickled_weights_nan_weights_and_another_tasks_folder_are_refused_in_words(tmp_path):
    model = hf.DamchaForCausalLM(_config("damcha"))
    model.config.save_pretrained(tmp_path / "pickled")  # as older Transformers wrote a folder: pickled weights
    torch.save(model.state_dict(), tmp_path / "pickled" / "pytorch_model.bin")
    with pytest.raises(ValueError, match="holds pytorch_model.bin \\(pickled weights, never loaded here\\)"):
        transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "pickled")
    with pytest.raises(ValueError, match="use_safetensors=False: these classes read safetensors only"):
        hf.DamchaForCausalLM.from_pretrained(tmp_path / "pickled", use_safetensors=False)
    model.save_pretrained(tmp_path / "nan")
    weights = load_file(tmp_path / "nan" / "model.safetensors")
    weights["transformer.head.weight"][0, 0] = float("nan")
    save_file(weights, tmp_path / "nan" / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match="NaN or infinite values in transformer.head.weight"):
        transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "nan")
    weights["transformer.head.weight"] = torch.zeros(5, 16)
    save_file(weights, tmp_path / "nan" / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match="its weights' shapes do not match its config"):
        transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "nan")
    hf.DamchaForSequenceClassification(_config("mha", classifier=True)).save_pretrained(tmp_path / "classifier")
    with pytest.raises(ValueError, match="DamchaForCausalLM cannot hold this model: its config is a classifier"):
        transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "classifier")
    with pytest.raises(ValueError, match="DamchaForSequenceClassification cannot hold this model"):
        transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "nan")


@pytest.mark.parametrize("setting, value", [("num_key_value_heads", 2), ("head_dim", 2), ("tie_word_embeddings", True),
                                            ("rope_theta", 500000.0), ("rope_scaling", {"type": "linear"}),
                                            ("sliding_window", 4)])
def test_settings_of_other_architectures_that_this_model_would_ignore_are_refused(setting, value):
    base = ModelConfig(n_layer=1, n_head=4, n_embd=16, block_size=12, vocab_size=11)
    with pytest.raises(ValueError, match=f"{setting}=.* is not what this model does .* leave {setting} out"):
        hf.DamchaConfig.for_llama(base, **{setting: value})
    assert hf.DamchaConfig.for_llama(base, num_key_value_heads=4, head_dim=4).model_config().n_head == 4  # equal: fine



@pytest.mark.parametrize("variant", variant_names())
def test_a_folder_of_every_variant_opens_in_the_app_as_the_same_model(variant, tmp_path):
    torch.manual_seed(0)
    model = hf.DamchaForCausalLM(_config(variant)).eval()
    model.save_pretrained(tmp_path / "today")
    written = json.loads((tmp_path / "today" / "config.json").read_text())
    # A folder as written before: its config names only the variant's own settings, and DAMCHA's settings that
    # were ModelConfig fields (f's widths, ...) as top-level fields.
    (tmp_path / "unnamed").mkdir()
    moved = {k: v for k, v in written.get("attention_options", {}).items() if k in MOVED_SETTINGS}
    unnamed = {k: v for k, v in variant_config(ModelConfig(), variant).attention_options if k not in MOVED_SETTINGS}
    (tmp_path / "unnamed" / "model.safetensors").write_bytes((tmp_path / "today" / "model.safetensors").read_bytes())
    (tmp_path / "unnamed" / "config.json").write_text(json.dumps({**written, **moved, "attention_options": unnamed}))
    x = _tokens()
    for folder in ("today", "unnamed"):
        runs, bad = list_runs(tmp_path)
        run = next(r for r in runs if r.name == folder)
        loaded = hf.DamchaForCausalLM.from_pretrained(tmp_path / folder).eval()
        app = load_model(run, run.epochs[-1])
        for other in (loaded.transformer, model.transformer):  # the same weights, to the last bit
            theirs = other.state_dict()
            assert app.state_dict().keys() == theirs.keys()
            assert all(torch.equal(v, theirs[k]) for k, v in app.state_dict().items())
        with torch.no_grad():
            in_the_app = app(x).logits
            # the same model at another address: the BLAS may pick its kernels by a buffer's alignment
            # (4.8e-7 apart on an AMD EPYC for THA), so the logits agree to float32 rounding, not the bit
            torch.testing.assert_close(in_the_app, loaded(x).logits, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(in_the_app, model(x).logits, rtol=1e-5, atol=1e-6)


def test_importing_damcha_loads_none_of_the_extras():
    code = ("import sys, damcha, damcha.model.config, damcha.runs.checkpoints\n"
            "print([m for m in ('transformers', 'transformer_lens', 'nnsight') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


def test_a_sparse_giant_or_lying_weights_file_is_refused_in_words(tmp_path):
    model = hf.DamchaForCausalLM(_config("mha"))
    model.save_pretrained(tmp_path / "giant")
    with open(tmp_path / "giant" / "model.safetensors", "ab") as f:
        f.truncate(1_600_000_000)  # sparse: no disk, reads as 1.6 GB
    with pytest.raises(ValueError, match="1,600,000,000 bytes, far more than its config's .* refused before it is read"):
        transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "giant")
    model.save_pretrained(tmp_path / "lying")
    data = bytearray((tmp_path / "lying" / "model.safetensors").read_bytes())
    header_length = int.from_bytes(data[:8], "little")
    header = data[8:8 + header_length].decode()
    comma = header.index(",", header.index("data_offsets"))  # the first tensor's offsets: [start,end]
    end_digit = comma + 1
    lying = header[:end_digit] + ("1" if header[end_digit] == "9" else "9") + header[end_digit + 1:]  # same length
    assert len(lying) == len(header) and lying != header
    data[8:8 + header_length] = lying.encode()
    (tmp_path / "lying" / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(ValueError, match="(not a readable safetensors file|do not match its config)"):
        transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "lying")


@pytest.mark.parametrize("variant", variant_names())
def test_lora_adapts_every_mechanisms_attention_and_merges_to_the_same_logits(variant):
    peft = pytest.importorskip("peft", reason="peft is installed by requirements.txt")
    torch.manual_seed(0)
    models = {"classes": hf.DamchaForCausalLM(_config(variant))}
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2, n_embd=16, n_head=4, vocab_size=11,
                                                                n_positions=12, attn_pdrop=0.0, resid_pdrop=0.0,
                                                                embd_pdrop=0.0))
    hf.swap_attention(gpt2, variant, seed=0)
    models["swapped into GPT-2"] = gpt2
    x = _tokens()
    for kind, model in models.items():
        with torch.no_grad():  # as trained, off their initial values: a map that starts at zero (DCMHA's dynamic
            for p in model.parameters():  # weights) would hold the adapter before it at a saddle
                p.add_(0.02 * torch.randn_like(p))
        targets = hf.lora_target_modules(model)
        assert targets and all(isinstance(model.get_submodule(t), torch.nn.Linear) for t in targets)
        assert not any(".mlp." in t or "wte" in t or t.endswith("head") for t in targets)  # attention only
        adapted = peft.get_peft_model(model, peft.LoraConfig(r=2, target_modules=targets, lora_dropout=0.0))
        trainable = {n: p for n, p in adapted.named_parameters() if p.requires_grad}
        assert trainable and all("lora_" in n for n in trainable), (kind, sorted(trainable)[:4])
        optimizer = torch.optim.Adam(trainable.values(), lr=1e-2)
        for _ in range(2):
            adapted(x, labels=x).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        unmoved = [n for n, p in trainable.items() if "lora_B" in n and torch.equal(p, torch.zeros_like(p))]
        assert not unmoved, (kind, unmoved)
        adapted.eval()
        with torch.no_grad():
            with_adapters = adapted(x).logits
            merged = adapted.merge_and_unload()(x).logits
        torch.testing.assert_close(merged, with_adapters, rtol=1e-5, atol=1e-5)


def test_resize_token_embeddings_keeps_the_old_tokens_logits_and_checkpointing_is_refused_in_words(tmp_path):
    torch.manual_seed(0)
    model = hf.DamchaForCausalLM(_config("damcha")).eval()
    x = _tokens()
    with torch.no_grad():
        before = model(x).logits
        old_rows = model.get_input_embeddings().weight.clone(), model.get_output_embeddings().weight.clone()
        model.resize_token_embeddings(20)
        after = model(x).logits
    assert after.shape[-1] == 20 and model.config.vocab_size == 20 and model.transformer.config.vocab_size == 20
    new_rows = model.get_input_embeddings().weight[:11], model.get_output_embeddings().weight[:11]
    assert all(torch.equal(old, new) for old, new in zip(old_rows, new_rows))  # the old tokens' rows, to the bit
    # the old tokens' logits: a head of 20 rows is another matrix product than one of 11, which the BLAS may
    # block and round differently (2.4e-7 apart on an AMD EPYC), so equal to float32 rounding
    torch.testing.assert_close(after[..., :11], before, rtol=1e-5, atol=1e-6)
    new = torch.randint(0, 20, (2, 12), generator=torch.Generator().manual_seed(3))
    assert torch.isfinite(model(new, labels=new).loss)  # the new ids are read and predicted
    model.save_pretrained(tmp_path / "resized")
    again = hf.DamchaForCausalLM.from_pretrained(tmp_path / "resized").eval()
    with torch.no_grad():
        torch.testing.assert_close(again(x).logits, after, rtol=0, atol=0)
    with pytest.raises(ValueError, match="does not checkpoint activations through Hugging Face.*activation-checkpointing"):
        model.gradient_checkpointing_enable()


def test_a_linear_map_read_as_weights_gets_no_adapter_because_one_there_would_never_act():
    peft = pytest.importorskip("peft", reason="peft is installed by requirements.txt")
    torch.manual_seed(0)
    model = hf.DamchaForCausalLM(_config("damcha")).eval()
    folded = "transformer.metric_source.generator.out"  # the fused row sum folds it into its own product
    assert folded not in hf.lora_target_modules(model)
    x = _tokens()
    with torch.no_grad():
        before = model(x).logits
    adapted = peft.get_peft_model(model, peft.LoraConfig(r=2, target_modules=[folded], init_lora_weights=False))
    with torch.no_grad():
        torch.testing.assert_close(adapted(x).logits, before, rtol=0, atol=0)  # a random adapter, no effect
