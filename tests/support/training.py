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


def tiny_pixel_runs(folder: Path, data: Path) -> list[Run]:
    """Tiny DAMCHA and MHA runs on CIFAR-10 as 1024 pixel tokens (generated batches in `data`), trained into
    folder/pixels-damcha and folder/pixels-mha (2 epochs, snapshots at 0, 1 and 2)."""
    from damcha.inputs.datasets.generated import write_standard_format_files

    cifar = write_standard_format_files(data, images_per_batch=8)["cifar10"]
    base = ModelConfig(n_layer=1, n_head=2, n_embd=16, attention_options={"generator_widths": (16,)})
    runs = []
    for variant in ("damcha", "mha"):
        out = folder / f"pixels-{variant}"
        train(variant_config(base, variant), TrainConfig(dataset="cifar10-pixels", data_path=str(cifar), epochs=2,
                                                         batch_size=8, nonstandard_data=True), out, progress=False)
        runs.append(load_run(out))
    return runs
