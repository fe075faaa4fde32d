"""A run trained with Hugging Face's Trainer on the project's classes: the folder a user of the HF door has."""

from __future__ import annotations

from pathlib import Path

import torch

from damcha import ModelConfig, variant_config


def trainer_run(out: Path, save_strategy: str = "epoch") -> None:
    """Two epochs of Hugging Face's Trainer on a tiny DAMCHA decoder over token ids."""
    import transformers

    from damcha import hf

    base = ModelConfig(vocab_size=11, block_size=16, n_layer=1, n_head=4, n_embd=16, attention_options={"generator_widths": (8,)})
    torch.manual_seed(0)
    model = hf.DamchaForCausalLM(hf.DamchaConfig.from_model_config(variant_config(base, "damcha")))
    rows = [{"input_ids": (torch.arange(16) + i) % 10, "labels": (torch.arange(16) + i) % 10} for i in range(32)]
    args = transformers.TrainingArguments(
        output_dir=str(out), num_train_epochs=2, per_device_train_batch_size=16, eval_strategy=save_strategy,
        save_strategy=save_strategy, logging_strategy=save_strategy, eval_steps=3, save_steps=3, logging_steps=3,
        report_to=[], learning_rate=3e-3, use_cpu=True, disable_tqdm=True)
    transformers.Trainer(model=model, args=args, train_dataset=rows, eval_dataset=rows[:16]).train()
