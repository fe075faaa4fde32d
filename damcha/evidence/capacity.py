"""What an evidence arm's model holds before it trains: its config, its parameter count on a data set and
the FLOPs of its training step, and what matches another arm's (the parameter- and compute-matched arms)."""

from __future__ import annotations

import dataclasses
import functools

from torch.utils.flop_counter import FlopCounterMode

from damcha.evidence.setting import DEMO, Setting
from damcha.inputs.datasets import data_set_spec
from damcha.model.config import ModelConfig, split_fields, variant_config, where_declared
from damcha.model.transformer import build_model
from damcha.runs.evaluation import train_subset
from damcha.runs.train import TrainConfig, model_config_for


def base_config(variant: str, overrides: tuple = ()) -> ModelConfig:
    """The model config an evidence run of `variant` trains (before the data fill in their fields): overrides
    name ModelConfig fields or the mechanism's own settings (generator_start, ...). A scale's sizes of f
    (MOVED_SETTINGS, once fields of every config) apply to the arms whose mechanism has an f."""
    config = variant_config(ModelConfig(), variant)
    fields, settings = split_fields(overrides)
    settings = where_declared(config.attention, settings)
    return dataclasses.replace(config, **fields).with_settings(**settings)


def model_parameters(variant: str, dataset: str, overrides: tuple = (), setting: Setting = DEMO) -> int:
    """Parameters of the model an evidence arm of `variant` trains on `dataset` (from its config: exact)."""
    cfg = base_config(variant, overrides)
    return model_config_for(data_of(dataset, cfg.block_size, setting), cfg).parameter_estimate()


def matched_width(variant: str, reference: str, dataset: str, base: tuple = (), setting: Setting = DEMO) -> int:
    """The width of `variant` (heads kept, MLP at the same ratio) whose parameter count on `dataset` is
    nearest `reference`'s, both on the config `base` overrides."""
    cfg = base_config(variant, base)
    target = model_parameters(reference, dataset, base, setting)

    def count(steps: int) -> int:  # the count of the width cfg.n_embd + steps heads' worth; it grows with the width
        return model_parameters(variant, dataset, (*base, ("n_embd", cfg.n_embd + steps * cfg.n_head)), setting)

    return cfg.n_embd + nearest_step(count, target, 0, 7 * cfg.n_embd // cfg.n_head) * cfg.n_head


def nearest_step(count, target: int, low: int, high: int) -> int:
    """The step in [low, high] whose count (growing with the step) is nearest `target`, the smaller on a tie: the
    first step whose count reaches the target, found by bisection, or the one before it."""
    first = low
    while low < high:
        middle = (low + high) // 2
        low, high = (middle + 1, high) if count(middle) < target else (low, middle)
    return min({max(low - 1, first), low}, key=lambda step: (abs(count(step) - target), step))


def training_step_flops(variant: str, dataset: str, overrides: tuple = (), setting: Setting = DEMO) -> float:
    """FLOPs of one training step (forward and backward, at the data set's demo batch) of the model an
    evidence arm of `variant` trains, as torch's FlopCounterMode counts them. Attention runs with explicit
    weights: the counter does not see inside the fused CPU kernel, which would leave MHA's scores uncounted."""
    cfg = base_config(variant, overrides)
    data = data_of(dataset, cfg.block_size, setting)
    model = build_model(model_config_for(data, cfg), seed=0)
    x, y = train_subset(data, TrainConfig.val_windows, data_set_spec(dataset).demo_train.get("batch_size",
                                                                                            TrainConfig.batch_size))
    counter = FlopCounterMode(display=False)
    with counter:
        model(x, targets=y, need_intermediates=True).loss.backward()
    return float(counter.get_total_flops())


def compute_matched_epochs(variant: str, reference: str, dataset: str) -> tuple[int, float]:
    """(epochs, FLOP ratio): the demo epochs on `dataset` at which `variant` trains with the FLOPs
    `reference` spends in its own (the nearest whole epoch; the batch and the steps of an epoch are the
    data set's for both), and `reference`'s FLOPs per training step over `variant`'s."""
    ratio = training_step_flops(reference, dataset) / training_step_flops(variant, dataset)
    epochs = data_set_spec(dataset).demo_train.get("epochs", TrainConfig.epochs)
    return max(1, round(epochs * ratio)), ratio


@functools.lru_cache(maxsize=4)  # a claim's arms count their parameters on the same data, often (matched widths)
def data_of(dataset: str, block_size: int, setting: Setting):
    """A data set as `setting` reads it, loaded once per (data set, length, setting) in a process."""
    return setting.load(dataset, block_size)


