"""A tiny model config and the small training settings the training tests run with."""

from pathlib import Path

from damcha import ModelConfig, variant_config
from damcha.runs.checkpoints import Run, load_run
from damcha.runs.train import TrainConfig, train

TINY = ModelConfig(n_layer=1, n_head=2, n_embd=16, attention_options={"generator_widths": (16,)}, block_size=32, dropout=0.1)


def tiny_train_config(**kw) -> TrainConfig:
    # On the CPU: exact resume is checked bit for bit, and CUDA's scatter-add (the embedding's
    # backward) is not deterministic from run to run.
    base = dict(dataset="digits", epochs=2, batch_size=64, lr=5e-3, completion_images=8, completion_samples=2,
                steps_per_epoch=5, val_windows=8, train_limit=256, device="cpu")
    return TrainConfig(**{**base, **kw})


def tiny_patch_run(folder: Path) -> Run:
    """A tiny DAMCHA run on the bundled colour images (patches), trained into folder/images-tiny."""
    out = folder / "images-tiny"
    base = ModelConfig(n_layer=2, n_head=4, n_embd=16, attention_options={"generator_widths": (16, 24)})
    train(variant_config(base, "damcha"), TrainConfig(dataset="sample-images", epochs=1, train_limit=64,
                                                      completion_images=4), out, progress=False)
    return load_run(out)
