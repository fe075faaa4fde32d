"""The `train` command's settings flags, generated from the config dataclasses: one source for their
names, types, defaults and choices, so the command line and the library cannot drift; and a run's
saved config as the starting values (`--config RUN`), so a run can be replayed, any flag given
overriding it.

Every field of TrainConfig is a flag, and the ModelConfig fields a user sizes a model with
(MODEL_FLAGS), and the two sizes of DAMCHA's f (SETTING_FLAGS, flags since these were ModelConfig fields;
they set the mechanism's settings as `--option` does); the attention itself comes from `--variant` and
`--option`, as before.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args

from damcha.inputs.datasets import DATA_SETS
from damcha.model.config import CHOICE_TYPES as MODEL_CHOICES
from damcha.model.config import ModelConfig
from damcha.runs.checkpoints import CheckpointError, load_run
from damcha.runs.memory import AUTO_MICRO_BATCH
from damcha.runs.train import CHOICE_TYPES as TRAIN_CHOICES
from damcha.runs.train import TrainConfig

MODEL_FLAGS = ("n_layer", "n_head", "n_embd", "mlp_ratio", "block_size", "dropout")

HELP = {
    "n_layer": "transformer blocks", "n_head": "attention heads", "n_embd": "width D of the model",
    "mlp_ratio": "feed-forward width as a multiple of D", "generator_widths": "hidden widths of f, e.g. 256,512",
    "block_size": "context length for text data sets (image data sets set their own)",
    "dropout": "dropout on embeddings, attention and residual branches", "generator_dropout": "dropout inside f",
    "dataset": "the data set", "data_path": "local file or folder for textfile / enwik8 / text8 / cifar10 / cifar100",
    "epochs": "training epochs", "batch_size": "sequences per step", "lr": "peak learning rate",
    "min_lr_fraction": "the cosine schedule's floor, as a fraction of the peak", "optimizer": "adam (the paper) or adamw",
    "weight_decay": "weight decay", "schedule": "learning-rate schedule", "warmup_steps": "linear warm-up steps",
    "grad_clip": "gradient-norm clip (0 turns clipping off)", "seed": "seed of the weights and the batch order",
    "split_seed": "seed of the train/validation split", "device": "auto (CUDA when present), cpu, cuda",
    "precision": "bf16: autocast the training steps (weights, optimiser and evaluation stay fp32)",
    "snapshot_epochs": "e.g. 0,1,2,5,10,30 (0 and the last are always kept; empty: spread geometrically)",
    "steps_per_epoch": "text data sets: steps in one epoch",
    "val_windows": "text data sets: validation windows evaluated every epoch (fewer for long contexts on CPU)",
    "completion_images": "digits: validation images whose bottom half is completed every epoch",
    "completion_samples": "digits: samples per image averaged into the expected completion",
    "train_limit": "> 0: train on the first N training samples only (smoke tests)",
    "nonstandard_data": "train on a data file whose checksums differ from the published ones (enwik8, text8, "
                        "CIFAR); the run records standard_files: false",
    "tuning_holdout": "> 0: hold this fraction of the training data out as the validation split (model "
                      "selection that never sees the reported validation or test split)",
    "micro_batch_size": "> 0: each step's batch in micro-batches of at most this many sequences, gradients "
                        "accumulated (the same step, in less memory; dropout masks drawn per micro-batch); auto: the "
                        "largest the memory plan fits the device",
}
CHOICES = {"dataset": DATA_SETS}
LITERALS = {**MODEL_CHOICES, **TRAIN_CHOICES}  # a field typed by one takes its values as the flag's choices


def ints(text: str) -> tuple[int, ...]:
    return tuple(int(t) for t in text.split(",") if t.strip())


def micro_batch(text: str) -> int:
    return AUTO_MICRO_BATCH if text == "auto" else int(text)


# fields read otherwise than their type says
FIELD_PARSERS: dict[str, Callable[[str], Any]] = {"micro_batch_size": micro_batch}
PARSERS: dict[str, Callable[[str], Any]] = {"int": int, "float": float, "str": str, "str | None": str, "tuple[int, ...]": ints}
SETTING_FLAGS: dict[str, Callable[[str], Any]] = {"generator_widths": ints, "generator_dropout": float}


def flag_fields() -> list[tuple[type, dataclasses.Field]]:
    """(dataclass, field) of every settings flag, model fields first."""
    model = [f for f in dataclasses.fields(ModelConfig) if f.name in MODEL_FLAGS]
    return [(ModelConfig, f) for f in model] + [(TrainConfig, f) for f in dataclasses.fields(TrainConfig)]


def add_settings_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per field (`--batch-size` for batch_size), its type, choices and default the field's.
    Flags not given are absent from the parsed namespace, so a replayed run's values stay."""
    for _, f in flag_fields():
        if f.type == "bool":  # --name / --no-name
            parser.add_argument("--" + f.name.replace("_", "-"), dest=f.name, action=argparse.BooleanOptionalAction,
                                default=argparse.SUPPRESS, help=f"{HELP[f.name]} (default: {'on' if f.default else 'off'})")
            continue
        literal = LITERALS.get(str(f.type))
        if f.type not in PARSERS and literal is None:
            raise TypeError(f"the train command has no parser for {f.name}'s type {f.type}")
        shown = ",".join(map(str, f.default)) if isinstance(f.default, tuple) else f.default
        choices = get_args(literal) if literal is not None else CHOICES.get(f.name)
        parse = FIELD_PARSERS.get(f.name) or PARSERS.get(str(f.type), str)
        parser.add_argument("--" + f.name.replace("_", "-"), dest=f.name, type=parse, choices=choices,
                            default=argparse.SUPPRESS, help=f"{HELP[f.name]} (default: {shown})")
    for name, parse in SETTING_FLAGS.items():
        parser.add_argument("--" + name.replace("_", "-"), dest=name, type=parse, default=argparse.SUPPRESS,
                            help=f"{HELP[name]} (a setting of the mechanism, as --option {name}=... sets it)")
    parser.add_argument("--config", metavar="RUN", help="a run folder whose saved settings are the starting values "
                        "(its model, attention included, and its training); flags given override them")


def settings_from(args: argparse.Namespace) -> tuple[ModelConfig, TrainConfig, bool]:
    """The model config (before --variant and --option) and the training config a train command
    asks for: the dataclass defaults, then the replayed run's values, then the flags given; and
    whether the model came from a replayed run (its attention kept unless --variant is given)."""
    given = {f.name: getattr(args, f.name) for _, f in flag_fields() if hasattr(args, f.name)}
    model_given = {k: v for k, v in given.items() if k in MODEL_FLAGS}
    train_given = {k: v for k, v in given.items() if k not in MODEL_FLAGS}
    settings = {name: getattr(args, name) for name in SETTING_FLAGS if hasattr(args, name)}
    if not args.config:
        return ModelConfig(**model_given).with_settings(**settings), TrainConfig(**train_given), False
    model, train = replayed(args.config)
    return (dataclasses.replace(model, **model_given).with_settings(**settings), TrainConfig(**{**train, **train_given}),
            True)


def replayed(run_dir: str | Path) -> tuple[ModelConfig, dict[str, Any]]:
    """A saved run's model config and training settings (the TrainConfig fields of its config)."""
    run = load_run(run_dir)
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    train = {k: (tuple(v) if isinstance(v, list) else v) for k, v in run.train_config.items() if k in known}
    if not train:
        raise CheckpointError(f"{run_dir}: its config holds no training settings to replay (an imported run?)")
    return run.model_config, train
