"""One unit of evidence: an arm at a seed, measured (training the run it needs, resuming where it stopped)."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import torch

from damcha.evidence.catalogue.common import EFFICIENCY_CASE, EFFICIENCY_CONFIG, synthetic_steps
from damcha.evidence.records import Arm
from damcha.inputs.datasets import data_set_spec
from damcha.model.config import ModelConfig


def train_settings(dataset: str, quick: bool) -> dict:
    """TrainConfig fields of the evidence runs (demo sizes; quick: a smoke run)."""
    if quick:
        return dict(epochs=1, train_limit=128, completion_images=2, completion_samples=1, batch_size=64,
                    steps_per_epoch=5, val_windows=16)
    return dict(data_set_spec(dataset).demo_train)


EVALUATION = dict(completion_images=64, completion_samples=2)  # completions scored per evidence unit (full runs)


def run_unit(arm: Arm, seed: int, quick: bool, work: Path) -> dict[str, float]:
    """The metrics of one arm at one seed (training what it needs, resuming where a run stopped)."""
    if arm.kind == "constant":
        return {"constant": arm.level}
    if arm.kind == "baseline":
        from damcha.evidence.baselines import completion_baseline

        n = train_settings(arm.dataset, quick).get("completion_images") if quick else EVALUATION["completion_images"]
        return completion_baseline(arm.task, arm.dataset, n)
    if arm.kind == "synthetic":
        from damcha.inputs.synthetic import train_synthetic

        result = train_synthetic(arm.variant, arm.task, arm.level, seed, synthetic_steps(quick),
                                 **({"lrs": arm.lrs} if arm.lrs else {}))
        return {result.metric: result.score, "parameters": float(result.parameters), "lr": result.lr,
                **{f"validation_{result.metric}_lr={lr:g}": v for lr, v in result.validation.items()}}
    if arm.kind == "efficiency":
        from damcha.evidence.efficiency import efficiency_ratios

        torch.manual_seed(seed)
        case = dict(T=64, batch=2) if quick else EFFICIENCY_CASE
        return efficiency_ratios(EFFICIENCY_CONFIG, arm.variant, case["T"], case["batch"], repeats=3 if quick else 10)
    model, data, tcfg = _trained(arm, seed, quick, work)
    if arm.kind == "adaptivity":
        from damcha.analysis.interventions import adaptivity_gap, mean_metric

        n = 64 if quick else 256
        x, y = data.val_inputs[:n], data.val_targets[:n]
        return {"gap_nats": float(adaptivity_gap(model, x, y, mean_metric(model, x)).mean())}
    from damcha.runs.evaluation import validation_metrics

    options = model.mechanism.options_from({"metric_mode": arm.mode})
    tcfg = tcfg if quick else dataclasses.replace(tcfg, **EVALUATION)
    return {k: float(v) for k, v in validation_metrics(model, data, tcfg, options).items()}


def _trained(arm: Arm, seed: int, quick: bool, work: Path):
    return _trained_run("damcha" if arm.kind == "adaptivity" else arm.variant, arm.dataset, arm.overrides, seed,
                        quick, Path(work))


def base_config(variant: str, overrides: tuple = ()) -> ModelConfig:
    """The model config an evidence run of `variant` trains (before the data fill in their fields)."""
    from damcha.model.config import variant_config

    return dataclasses.replace(variant_config(ModelConfig(), variant), **dict(overrides))


def model_parameters(variant: str, dataset: str, overrides: tuple = ()) -> int:
    """Parameters of the model an evidence arm of `variant` trains on `dataset` (from its config: exact)."""
    from damcha.runs.train import model_config_for

    cfg = base_config(variant, overrides)
    return model_config_for(_data(dataset, cfg.block_size), cfg).parameter_estimate()


@functools.lru_cache(maxsize=4)
def _data(dataset: str, block_size: int):
    from damcha.inputs.datasets import load_dataset

    return load_dataset(dataset, block_size=block_size)


@functools.lru_cache(maxsize=1)  # a task's units share one run (tasks group them): train and load it once
def _trained_run(variant: str, dataset: str, overrides: tuple, seed: int, quick: bool, work: Path):
    from damcha.inputs.datasets import load_dataset
    from damcha.runs.checkpoints import load_model
    from damcha.runs.train import TrainConfig, train

    out = work / "runs" / Arm("", variant=variant, dataset=dataset, overrides=overrides).run_name(seed, quick)
    cfg = base_config(variant, overrides)
    tcfg = TrainConfig(dataset=dataset, seed=seed, device="cpu", **train_settings(dataset, quick))
    train(cfg, tcfg, out, progress=False)
    model = load_model(out)
    return model, load_dataset(dataset, block_size=model.config.block_size), tcfg
