"""The shipped demo runs: what `python -m damcha demo-runs` trains into checkpoints/.

Same seed and sizes within a data set, so runs differ only in their attention.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path

from damcha.model.config import ModelConfig, variant_config
from damcha.runs.train import TrainConfig, default_snapshot_epochs, train

DIGITS_MODEL = ModelConfig(n_layer=2, n_head=4, n_embd=32, dropout=0.1)
TEXT_MODEL = ModelConfig(n_layer=2, n_head=4, n_embd=32, block_size=128, dropout=0.0)

DIGITS_TRAIN = TrainConfig(dataset="digits", epochs=40, batch_size=32, lr=3e-3, snapshot_epochs=default_snapshot_epochs(40, 6))
DIGITS_CLS_TRAIN = TrainConfig(dataset="digits-cls", epochs=40, batch_size=32, lr=2e-3, snapshot_epochs=default_snapshot_epochs(40, 6))
IMAGES_TRAIN = TrainConfig(dataset="sample-images", epochs=40, batch_size=32, lr=3e-3,
                           snapshot_epochs=default_snapshot_epochs(40, 6))
TEXT_TRAIN = TrainConfig(dataset="text", epochs=40, batch_size=32, lr=3e-3, steps_per_epoch=100,
                         snapshot_epochs=default_snapshot_epochs(40, 6))

# name -> (model config, train config)
DEMO_RUNS: dict[str, tuple[ModelConfig, TrainConfig]] = {
    "digits-damcha": (variant_config(DIGITS_MODEL, "damcha"), DIGITS_TRAIN),
    "digits-damcha-unshared": (variant_config(DIGITS_MODEL, "damcha-unshared"), DIGITS_TRAIN),
    "digits-damcha-static": (variant_config(DIGITS_MODEL, "damcha-static"), DIGITS_TRAIN),
    "digits-damcha-bilinear": (variant_config(DIGITS_MODEL, "damcha-bilinear"), DIGITS_TRAIN),
    "digits-mha": (variant_config(DIGITS_MODEL, "mha"), DIGITS_TRAIN),
    # The paper's comparison systems, as their original papers define them (same sizes, seed, schedule)
    "digits-tha": (variant_config(DIGITS_MODEL, "tha"), DIGITS_TRAIN),
    "digits-dcmha": (variant_config(DIGITS_MODEL, "dcmha"), DIGITS_TRAIN),
    "digits-colmha": (variant_config(DIGITS_MODEL, "colmha"), DIGITS_TRAIN),
    "digits-mma": (variant_config(DIGITS_MODEL, "mma"), DIGITS_TRAIN),
    "digits-cls-mma": (variant_config(DIGITS_MODEL, "mma"), DIGITS_CLS_TRAIN),
    "digits-moa": (variant_config(DIGITS_MODEL, "moa"), DIGITS_TRAIN),
    # Head-interaction mechanisms newer than the paper
    "digits-diff": (variant_config(DIGITS_MODEL, "diff"), DIGITS_TRAIN),
    "digits-iha": (variant_config(DIGITS_MODEL, "iha"), DIGITS_TRAIN),
    "digits-knocking": (variant_config(DIGITS_MODEL, "knocking"), DIGITS_TRAIN),
    "digits-cls-damcha": (variant_config(DIGITS_MODEL, "damcha"), DIGITS_CLS_TRAIN),
    "digits-cls-mha": (variant_config(DIGITS_MODEL, "mha"), DIGITS_CLS_TRAIN),
    # Colour images (a CIFAR-10 stand-in that ships offline): figs. 8, 10, 11 compare DAMCHA and w/o f(x)
    "images-damcha": (variant_config(DIGITS_MODEL, "damcha"), IMAGES_TRAIN),
    "images-damcha-static": (variant_config(DIGITS_MODEL, "damcha-static"), IMAGES_TRAIN),
    "images-mha": (variant_config(DIGITS_MODEL, "mha"), IMAGES_TRAIN),
    "text-damcha": (variant_config(TEXT_MODEL, "damcha"), TEXT_TRAIN),
    "text-mha": (variant_config(TEXT_MODEL, "mha"), TEXT_TRAIN),
    # A comparison system with per-token composition and one with per-token expert choice, on text
    "text-dcmha": (variant_config(TEXT_MODEL, "dcmha"), TEXT_TRAIN),
    "text-moa": (variant_config(TEXT_MODEL, "moa"), TEXT_TRAIN),
}


def build_demo_runs(out: str | Path = "checkpoints", only: list[str] | None = None, fresh: bool = True,
                    quick: bool = False) -> dict[str, float]:
    """Train every demo run into out/<name>/; returns seconds per run. quick: 2 epochs (smoke test)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    seconds = {}
    names = only or list(DEMO_RUNS)
    for name in names:
        if name not in DEMO_RUNS:
            raise ValueError(f"unknown demo run {name!r}; expected one of {list(DEMO_RUNS)}")
        model_cfg, train_cfg = DEMO_RUNS[name]
        if quick:
            train_cfg = dataclasses.replace(train_cfg, epochs=2, steps_per_epoch=5, snapshot_epochs=())
        run_dir = out / name
        if fresh and run_dir.exists():
            shutil.rmtree(run_dir)
        t0 = time.perf_counter()
        print(f"== {name}")
        train(model_cfg, train_cfg, run_dir)
        (run_dir / "training_state.safetensors").unlink(missing_ok=True)  # not shipped
        seconds[name] = time.perf_counter() - t0
    return seconds
