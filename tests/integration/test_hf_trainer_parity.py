"""Hugging Face's Trainer on the project's classes and on swapped models, option by option, against the field's own
model (GPT-2 under the same Trainer) or an explicit recomputation: gradient accumulation steps as one batch of the
union, label smoothing shifts the labels as for GPT-2, a classifier's loss follows `problem_type`, return_dict=False
gives tuples, a swap into GPT-2 keeps GPT-2's dropout after the attention's output projection, and the parity suite:
MHA swapped into GPT-2 and Llama takes the model's own steps under each Trainer option."""

import copy
from pathlib import Path

import pytest
import torch
from torch.nn import functional as F

transformers = pytest.importorskip("transformers", reason="the Hugging Face extra is not installed "
                                   "(pip install 'damcha[hf]'); CI installs it")

from damcha import ModelConfig, variant_config, variant_names  # noqa: E402

hf = pytest.importorskip("damcha.hf")
transformers.logging.set_verbosity_error()
VOCAB, LENGTH, CLASSES = 11, 8, 3
# Mechanisms whose auxiliary loss is a statistic of the whole batch (MoA's load balance): accumulated micro-batches
# weight each micro-batch's by its share (damcha.hf.models.accumulated_loss), which is not the union's statistic.
BATCH_STATISTIC_AUX = ("moa", "moa-authors")


def _base(**changes) -> ModelConfig:
    return ModelConfig(n_layer=2, n_head=4, n_embd=16, block_size=LENGTH, vocab_size=VOCAB, dropout=0.0,
                       attention_options={"generator_widths": (8,)}, **changes)


def _causal_lm(variant: str = "damcha") -> "hf.DamchaForCausalLM":
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(hf.DamchaConfig.from_model_config(variant_config(_base(), variant)))


def _classifier(variant: str = "damcha", **config) -> "hf.DamchaForSequenceClassification":
    torch.manual_seed(0)
    cfg = hf.DamchaConfig.from_model_config(variant_config(_base(causal=False, n_classes=config.pop("n_classes", CLASSES)),
                                                           variant))
    for key, value in config.items():
        setattr(cfg, key, value)
    return transformers.AutoModelForSequenceClassification.from_config(cfg)


def _gpt2_config(**changes) -> "transformers.GPT2Config":
    settings = dict(n_layer=2, n_head=4, n_embd=16, vocab_size=VOCAB, n_positions=16, pad_token_id=VOCAB - 1,
                    num_labels=CLASSES, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return transformers.GPT2Config(**{**settings, **changes})


def _rows(n: int, classify: bool) -> list[dict]:
    """Token rows; a language model's odd rows ignore their first three labels, so micro-batches count different
    numbers of targets (a mean per micro-batch would then weigh them wrongly)."""
    x = torch.randint(0, VOCAB - 1, (n, LENGTH), generator=torch.Generator().manual_seed(0))
    rows = []
    for i in range(n):
        labels = torch.tensor(i % CLASSES) if classify else x[i].clone()
        if not classify and i % 2:
            labels[:3] = -100
        rows.append({"input_ids": x[i], "attention_mask": torch.ones(LENGTH, dtype=torch.long), "labels": labels})
    return rows


def _trained(model, rows, tmp_path, batch: int, accumulate: int, **args) -> dict[str, torch.Tensor]:
    """The weights after one optimiser step of plain SGD (no clipping) under Trainer."""
    model = copy.deepcopy(model)
    arguments = transformers.TrainingArguments(
        str(tmp_path / f"b{batch}a{accumulate}"), per_device_train_batch_size=batch, gradient_accumulation_steps=accumulate,
        max_steps=1, learning_rate=0.1, optim="sgd", lr_scheduler_type="constant", max_grad_norm=0.0, report_to=[],
        use_cpu=True, save_strategy="no", disable_tqdm=True, **args)
    transformers.Trainer(model=model, args=arguments, train_dataset=rows).train()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _assert_accumulation_is_one_batch(model, rows, tmp_path) -> None:
    """Two micro-batches of 4 accumulated give the update of one batch of 8, to float tolerance, and both move."""
    before = model.state_dict()
    accumulated = _trained(model, rows, tmp_path, 4, 2)
    whole = _trained(model, rows, tmp_path, 8, 1)
    moved = [k for k in whole if whole[k].is_floating_point() and not torch.equal(whole[k], before[k])]
    assert moved, "one SGD step moved no weight"
    for name in moved:
        torch.testing.assert_close(accumulated[name] - before[name], whole[name] - before[name], rtol=1e-4, atol=1e-7,
                                   msg=name)


def test_gradient_accumulation_steps_as_one_batch_in_gpt2_itself(tmp_path):
    """The harness on the field's model: GPT-2's causal LM under the same Trainer arguments."""
    torch.manual_seed(0)
    _assert_accumulation_is_one_batch(transformers.GPT2LMHeadModel(_gpt2_config()), _rows(8, False), tmp_path)


@pytest.mark.parametrize("variant", [v for v in variant_names() if v not in BATCH_STATISTIC_AUX])
def test_gradient_accumulation_steps_as_one_batch_for_every_causal_lm(variant, tmp_path):
    _assert_accumulation_is_one_batch(_causal_lm(variant), _rows(8, False), tmp_path)


@pytest.mark.parametrize("variant", ["damcha", "mha"])
def test_gradient_accumulation_steps_as_one_batch_for_a_classifier(variant, tmp_path):
    # (transformers 5.23's GPT2ForSequenceClassification steps twice as far here: it takes **kwargs, so Trainer
    # skips its division, and returns a micro-batch mean; the project's classifiers honour num_items_in_batch.)
    _assert_accumulation_is_one_batch(_classifier(variant), _rows(8, True), tmp_path)


def test_gradient_accumulation_steps_as_one_batch_for_a_swapped_gpt2(tmp_path):
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(_gpt2_config())
    hf.swap_attention(model, "damcha", seed=0, generator_widths=(8,))
    _assert_accumulation_is_one_batch(model, _rows(8, False), tmp_path)


def test_an_auxiliary_loss_is_weighted_by_its_micro_batch_share():
    """num_items_in_batch: the summed task loss over the whole count, the auxiliary loss times this share."""
    model = _causal_lm("moa").train()
    row = _rows(4, False)
    x, labels = torch.stack([r["input_ids"] for r in row]), torch.stack([r["labels"] for r in row])
    torch.manual_seed(1)
    mean = model(x, labels=labels)
    torch.manual_seed(1)
    out = model.transformer(x, targets=torch.cat([labels[:, 1:], torch.full_like(labels[:, :1], -100)], 1))
    counted = int((labels[:, 1:] != -100).sum())
    torch.manual_seed(1)
    shared = model(x, labels=labels, num_items_in_batch=torch.tensor(3 * counted))
    assert out.aux_loss is not None
    torch.testing.assert_close(mean.loss, out.loss)
    torch.testing.assert_close(shared.loss, out.token_loss.sum() / (3 * counted) + out.aux_loss / 3)


def _smoothed_loss(model, rows, tmp_path) -> tuple[float, float]:
    """Trainer's loss with label_smoothing_factor=0.1, and the shifted smoothed cross-entropy recomputed."""
    arguments = transformers.TrainingArguments(str(tmp_path / "smooth"), label_smoothing_factor=0.1, report_to=[],
                                               use_cpu=True)
    trainer = transformers.Trainer(model=model.eval(), args=arguments)
    batch = {k: torch.stack([r[k] for r in rows]) for k in rows[0]}
    with torch.no_grad():
        got = float(trainer.compute_loss(model, dict(batch)))
        logits = model(batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]  # (B, T-1, V)
    expected = F.cross_entropy(logits.flatten(0, 1), batch["labels"][:, 1:].flatten(), ignore_index=-100,
                               label_smoothing=0.1)
    return got, float(expected)


def test_label_smoothing_shifts_the_labels_as_for_gpt2(tmp_path):
    torch.manual_seed(0)
    for model in (transformers.GPT2LMHeadModel(_gpt2_config()), _causal_lm()):
        got, expected = _smoothed_loss(model, _rows(4, False), tmp_path)
        assert got == pytest.approx(expected, rel=1e-5), type(model).__name__


def test_a_classifier_loss_follows_problem_type_as_every_hugging_face_classifier():
    x = torch.randint(0, VOCAB - 1, (4, LENGTH), generator=torch.Generator().manual_seed(2))
    several = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0], [1.0, 1.0, 0.0], [0.0, 1.0, 0.0]])
    model = _classifier(problem_type="multi_label_classification").eval()
    out = model(x, labels=several)
    torch.testing.assert_close(out.loss, F.binary_cross_entropy_with_logits(out.logits, several))
    unset = _classifier().eval()
    assert unset.config.problem_type is None
    out = unset(x, labels=several)  # float labels of several columns: multi-label, as HF's classifiers decide
    assert unset.config.problem_type == "multi_label_classification"
    torch.testing.assert_close(out.loss, F.binary_cross_entropy_with_logits(out.logits, several))
    one = _classifier(n_classes=1).eval()
    scores = torch.tensor([0.5, -1.0, 2.0, 0.0])
    out = one(x, labels=scores)
    assert one.config.problem_type == "regression"
    torch.testing.assert_close(out.loss, F.mse_loss(out.logits.squeeze(-1), scores))
    single = _classifier().eval()
    classes = torch.tensor([0, 2, 1, 2])
    out = single(x, labels=classes)
    torch.testing.assert_close(out.loss, F.cross_entropy(out.logits, classes))
    wrong = _classifier(problem_type="multi_label_classification").eval()
    with pytest.raises(ValueError, match="one 0/1 column per label"):
        wrong(x, labels=classes)


def test_return_dict_false_gives_a_tuple_by_argument_or_config():
    x = torch.randint(0, VOCAB - 1, (2, LENGTH), generator=torch.Generator().manual_seed(3))
    model = _causal_lm().eval()
    with torch.no_grad():
        as_dict = model(x, labels=x)
        as_tuple = model(x, labels=x, return_dict=False)
        assert isinstance(as_tuple, tuple) and len(as_tuple) == len(as_dict.to_tuple())
        for ours, theirs in zip(as_tuple, as_dict.to_tuple(), strict=True):
            torch.testing.assert_close(ours, theirs)
        model.config.return_dict = False
        loss, logits = model(x, labels=x)
        torch.testing.assert_close(logits, as_dict.logits)
        classifier = _classifier().eval()
        classifier.config.return_dict = False
        assert isinstance(classifier(x), tuple) and isinstance(hf.DamchaModel(classifier.config)(x), tuple)


def test_a_swap_into_gpt2_keeps_its_dropout_after_the_output_projection():
    """resid_pdrop drops the swapped attention's output in training, exactly F.dropout of its output in eval."""
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(_gpt2_config(resid_pdrop=0.5))
    hf.swap_attention(model, "damcha", seed=0, generator_widths=(8,))
    attention = model.transformer.h[0].attn
    hidden = torch.randn(2, LENGTH, 16, generator=torch.Generator().manual_seed(4))
    model.transformer(torch.zeros(2, LENGTH, dtype=torch.long))  # sets the call's shared metric
    with torch.no_grad():
        plain = attention.eval()(hidden)[0]
        torch.manual_seed(5)
        dropped = attention.train()(hidden)[0]
        torch.manual_seed(5)
        expected = F.dropout(plain, 0.5, training=True)
    torch.testing.assert_close(dropped, expected)
    assert 0.3 < float((dropped == 0).float().mean()) < 0.7



def test_docs_interop_lists_each_trainer_option_this_suite_holds():
    page = (Path(__file__).resolve().parents[2] / "docs" / "interop.md").read_text()
    section = page[page.index("### Under Hugging Face's Trainer"):page.index("## Swap a mechanism")]
    for option in (*(option for option in TRAINER_OPTIONS if option.isidentifier()), "problem_type", "return_dict=False",
                   "resid_pdrop", "lr_scheduler_type", "evaluate()", "resume_from_checkpoint", "load_best_model_at_end",
                   "test_hf_trainer_parity.py"):
        assert option in section, option


def test_trainer_gradient_checkpointing_is_refused_in_the_projects_words(tmp_path):
    arguments = transformers.TrainingArguments(str(tmp_path / "gc"), gradient_checkpointing=True, max_steps=1,
                                               report_to=[], use_cpu=True, save_strategy="no")
    with pytest.raises(ValueError, match="does not checkpoint activations through Hugging Face"):
        transformers.Trainer(model=_causal_lm(), args=arguments, train_dataset=_rows(4, False)).train()


def test_a_4d_attention_mask_is_refused_in_words_by_every_class():
    x = torch.randint(0, VOCAB - 1, (2, LENGTH), generator=torch.Generator().manual_seed(7))
    four = torch.ones(2, 1, LENGTH, LENGTH)
    for model in (_causal_lm(), _classifier()):
        with pytest.raises(ValueError, match="a 4-D attention_mask .* pass a \\(batch, length\\) mask"):
            model(x, attention_mask=four)


@pytest.mark.parametrize("variant", [v for v in variant_names() if hf.DamchaForCausalLM(
    hf.DamchaConfig.from_model_config(variant_config(_base(), v))).transformer.mechanism.decodes_with_cache])
def test_beam_search_with_the_cache_gives_the_beams_of_recomputing_the_prefix(variant):
    """generate(num_beams=3) reorders the PrefixCache as beams survive (it was refused: "the cache cannot be
    reordered"), and gives exactly the sequences and scores of recomputing the whole prefix at every step."""
    model = _causal_lm(variant).eval()
    prompt = torch.randint(0, VOCAB - 1, (2, 3), generator=torch.Generator().manual_seed(8))
    settings = dict(num_beams=3, num_return_sequences=2, max_new_tokens=LENGTH - 3, do_sample=False,
                    pad_token_id=VOCAB - 1, output_scores=True, return_dict_in_generate=True)
    cached = model.generate(prompt, use_cache=True, **settings)
    recomputed = model.generate(prompt, use_cache=False, **settings)
    assert torch.equal(cached.sequences, recomputed.sequences)
    torch.testing.assert_close(cached.sequences_scores, recomputed.sequences_scores, rtol=1e-5, atol=1e-5)


def _swapped_gpt2(variant: str | None = "damcha"):
    """A tiny GPT-2 with `variant` swapped in (None: GPT-2 itself, the field's model under the same Trainer)."""
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(_gpt2_config())
    if variant is not None:
        hf.swap_attention(model, variant, seed=0)
    return model


class _StopAt(transformers.TrainerCallback):
    """Stops training after `step` (a run killed there), its schedule still the whole run's."""

    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.step:
            control.should_training_stop = True
        return control


def _arguments(out: Path, **changes) -> "transformers.TrainingArguments":
    settings = dict(per_device_train_batch_size=4, learning_rate=1e-2, lr_scheduler_type="linear", warmup_steps=1,
                    save_strategy="steps", save_steps=2, report_to=[], use_cpu=True, disable_tqdm=True, seed=0,
                    data_seed=0, dataloader_num_workers=0)
    return transformers.TrainingArguments(str(out), **{**settings, **changes})


@pytest.mark.parametrize("variant", [None, "damcha", "mha"])
def test_trainer_resumes_a_swapped_gpt2_to_the_weights_of_the_run_it_continues(variant, tmp_path):
    """Trainer found no weights in a swapped model's checkpoint ("Can't find a valid checkpoint"): 6 steps
    stopped after 4 and resumed from checkpoint-4 end with the weights of 6 steps in one go, as GPT-2's do."""
    rows = _rows(24, classify=False)
    whole = _swapped_gpt2(variant)
    transformers.Trainer(model=whole, args=_arguments(tmp_path / "whole", max_steps=6), train_dataset=rows).train()
    first = _swapped_gpt2(variant)
    transformers.Trainer(model=first, args=_arguments(tmp_path / "parts", max_steps=6), train_dataset=rows,
                         callbacks=[_StopAt(4)]).train()
    resumed = _swapped_gpt2(variant)  # a fresh process's model: its weights come from the checkpoint
    transformers.Trainer(model=resumed, args=_arguments(tmp_path / "parts", max_steps=6), train_dataset=rows).train(
        resume_from_checkpoint=str(tmp_path / "parts" / "checkpoint-4"))
    for name, tensor in whole.state_dict().items():
        torch.testing.assert_close(resumed.state_dict()[name], tensor, rtol=1e-5, atol=1e-6, msg=name)
    if variant is None:
        return
    reloaded = hf.load_swapped(tmp_path / "parts" / "checkpoint-6")  # a checkpoint is a swapped folder too
    for name, tensor in resumed.state_dict().items():
        torch.testing.assert_close(reloaded.state_dict()[name], tensor, rtol=0, atol=0, msg=name)
    with pytest.raises(RuntimeError, match="ignore_mismatched_sizes"):  # the plain loader stops, never drops
        transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "parts" / "checkpoint-6")


def test_load_best_model_at_end_reloads_the_best_checkpoint_of_a_swapped_gpt2(tmp_path):
    """load_best_model_at_end kept the last swapped model silently: the model Trainer ends with is the one
    saved at the best evaluation, tensor for tensor."""
    rows = _rows(24, classify=False)
    model = _swapped_gpt2()
    trainer = transformers.Trainer(
        model=model, train_dataset=rows, eval_dataset=rows[:8],
        args=_arguments(tmp_path / "best", max_steps=6, eval_strategy="steps", eval_steps=2, learning_rate=0.3,
                        load_best_model_at_end=True, metric_for_best_model="loss", greater_is_better=True))
    trainer.train()  # "best" is the highest loss here: not the last checkpoint, so the reload shows
    best = trainer.state.best_model_checkpoint
    assert best is not None and not best.endswith("checkpoint-6"), best
    saved = hf.load_swapped(best)
    for name, tensor in saved.state_dict().items():
        torch.testing.assert_close(model.state_dict()[name], tensor, rtol=0, atol=0, msg=name)


# ----------------------------------------------------------------------------- the parity suite
# MHA swapped into GPT-2 or Llama with the model's own weights computes the model's function: under the same
# Trainer arguments, option by option, it must take the model's steps (losses, gradient norms, weights' effect on
# the logits) and evaluate to the model's loss. Every registered variant in the project's classes then runs the
# same options and must train and round-trip through save_pretrained.

TRAINER_OPTIONS = {
    "max_grad_norm": dict(max_grad_norm=0.05),  # far below these gradients' norms: clipping acts at every step
    "weight_decay": dict(weight_decay=0.3, learning_rate=3e-2),
    "cosine schedule with warmup": dict(lr_scheduler_type="cosine", warmup_steps=2),
    "polynomial schedule with warmup": dict(lr_scheduler_type="polynomial", warmup_steps=1),
    "label_smoothing_factor": dict(label_smoothing_factor=0.1),
    "gradient_accumulation_steps": dict(gradient_accumulation_steps=2, per_device_train_batch_size=2),
    "all together": dict(max_grad_norm=0.5, weight_decay=0.1, lr_scheduler_type="cosine", warmup_steps=1,
                         label_smoothing_factor=0.1, gradient_accumulation_steps=2, per_device_train_batch_size=2),
}


def _original(layout: str):
    torch.manual_seed(0)
    if layout == "gpt2":
        return transformers.GPT2LMHeadModel(_gpt2_config())
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        num_hidden_layers=2, hidden_size=16, num_attention_heads=4, num_key_value_heads=4, intermediate_size=32,
        vocab_size=VOCAB, max_position_embeddings=16, pad_token_id=VOCAB - 1))


def _train_and_evaluate(model, out: Path, options: dict) -> tuple[list[dict], dict, torch.Tensor]:
    """Four optimiser steps under Trainer with `options` (Adam by default), logged at every step; then its
    evaluation on held-out rows and its logits on them."""
    settings = dict(per_device_train_batch_size=4, max_steps=4, learning_rate=1e-2, logging_steps=1,
                    save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True, seed=0, data_seed=0,
                    dataloader_num_workers=0, per_device_eval_batch_size=4)
    arguments = transformers.TrainingArguments(str(out), **{**settings, **options})
    rows = _rows(24, classify=False)
    held_out = _rows(32, classify=False)[24:]
    trainer = transformers.Trainer(model=model, args=arguments, train_dataset=rows, eval_dataset=held_out)
    trainer.train()
    steps = [entry for entry in trainer.state.log_history if "loss" in entry]
    evaluation = trainer.evaluate()
    model.eval()
    with torch.no_grad():
        logits = model(torch.stack([r["input_ids"] for r in held_out])).logits
    return steps, evaluation, logits


@pytest.mark.parametrize("option", TRAINER_OPTIONS)
@pytest.mark.parametrize("layout", ["gpt2", "llama"])
def test_mha_swapped_into_the_fields_model_trains_as_the_model_itself_under_each_trainer_option(layout, option,
                                                                                              tmp_path):
    original = _original(layout)
    swapped = copy.deepcopy(original)
    swap = hf.swap_attention(swapped, "mha")
    assert not swap.fresh  # every weight of the attention is the model's own: the same function
    theirs = _train_and_evaluate(original, tmp_path / "original", TRAINER_OPTIONS[option])
    ours = _train_and_evaluate(swapped, tmp_path / "swapped", TRAINER_OPTIONS[option])
    assert len(theirs[0]) == len(ours[0]) == 4
    for step_theirs, step_ours in zip(theirs[0], ours[0]):
        for key in ("loss", "grad_norm", "learning_rate"):
            assert step_ours[key] == pytest.approx(step_theirs[key], rel=1e-4, abs=1e-6), (key, step_theirs)
    if "max_grad_norm" in TRAINER_OPTIONS[option]:
        assert all(step["grad_norm"] > TRAINER_OPTIONS[option]["max_grad_norm"] for step in theirs[0])  # it clipped
    assert ours[1]["eval_loss"] == pytest.approx(theirs[1]["eval_loss"], rel=1e-4)
    torch.testing.assert_close(ours[2], theirs[2], rtol=1e-3, atol=1e-4)
    untrained = _original(layout).eval()
    with torch.no_grad():
        start = untrained(torch.stack([r["input_ids"] for r in _rows(32, classify=False)[24:]])).logits
    assert not torch.allclose(theirs[2], start, atol=1e-3)  # the steps moved the model


@pytest.mark.parametrize("variant", variant_names())
def test_every_variant_trains_under_every_trainer_option_at_once_and_round_trips(variant, tmp_path):
    model = _causal_lm(variant)
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    steps, evaluation, logits = _train_and_evaluate(model, tmp_path / "run", TRAINER_OPTIONS["all together"])
    assert len(steps) == 4 and all(torch.isfinite(torch.tensor(s["loss"])) for s in steps)
    assert torch.isfinite(torch.tensor(evaluation["eval_loss"]))
    assert any(not torch.equal(v, before[k]) for k, v in model.state_dict().items() if v.is_floating_point())
    model.save_pretrained(tmp_path / "saved")
    again = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "saved").eval()
    with torch.no_grad():
        torch.testing.assert_close(again(torch.stack([r["input_ids"] for r in _rows(32, classify=False)[24:]])).logits,
                                   logits, rtol=0, atol=0)


GENERATION = {"greedy": dict(do_sample=False), "sampling with a seed": dict(do_sample=True, top_k=5, temperature=0.9),
              "beams": dict(num_beams=3, num_return_sequences=2, do_sample=False)}


@pytest.mark.parametrize("strategy", GENERATION)
@pytest.mark.parametrize("layout", ["gpt2", "llama"])
def test_mha_swapped_into_the_fields_model_generates_as_the_model_itself(layout, strategy):
    """generate() of the swapped model (no key/value cache of its own: it recomputes the prefix) gives the model's
    sequences, for greedy decoding, sampling under the same seed, and beams."""
    original = _original(layout).eval()
    swapped = copy.deepcopy(original)
    hf.swap_attention(swapped, "mha")
    prompt = torch.randint(0, VOCAB - 1, (2, 3), generator=torch.Generator().manual_seed(9))
    settings = dict(max_new_tokens=LENGTH - 3, pad_token_id=VOCAB - 1, **GENERATION[strategy])
    out = []
    for model in (original, swapped):
        torch.manual_seed(5)
        out.append(model.generate(prompt, attention_mask=torch.ones_like(prompt), **settings))
    assert out[0].shape[1] > prompt.shape[1]  # (a Llama may stop early at its end-of-sequence token)
    assert torch.equal(out[1], out[0])
