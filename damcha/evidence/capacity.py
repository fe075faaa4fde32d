"""What an evidence arm's model holds before it trains: its config and its parameter count on a data
set, and the width that matches another arm's count (the parameter-matched arms)."""

from __future__ import annotations

import dataclasses
import functools

from damcha.evidence.setting import DEMO, Setting
from damcha.model.config import ModelConfig, split_fields, variant_config, where_declared
from damcha.runs.train import model_config_for


def base_config(variant: str, overrides: tuple = ()) -> ModelConfig:
    """The model config an evidence run of `variant` trains (before the data fill in their fields): overrides
    name ModelConfig fields or the mechanism's own settings (generator_start, ...). A scale's sizes of f
    (MOVED_SETTINGS, once fields of every config) apply to the arms whose mechanism has an f."""
    config = variant_config(ModelConfig(), variant)
    fields, settings = split_fields(overrides)
    settings = where_declared(config.attention, settings)
    return dataclasses.replace(config, **fields,
                               **({"attention_options": {**dict(config.attention_options), **settings}} if settings else {}))


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

    low, high = 0, 7 * cfg.n_embd // cfg.n_head  # the first width whose count reaches the target, by bisection
    while low < high:
        middle = (low + high) // 2
        low, high = (middle + 1, high) if count(middle) < target else (low, middle)
    nearest = min({max(low - 1, 0), low}, key=lambda steps: (abs(count(steps) - target), steps))
    return cfg.n_embd + nearest * cfg.n_head


@functools.lru_cache(maxsize=4)  # a claim's arms count their parameters on the same data, often (matched widths)
def data_of(dataset: str, block_size: int, setting: Setting):
    """A data set as `setting` reads it, loaded once per (data set, length, setting) in a process."""
    return setting.load(dataset, block_size)


