"""One unit of evidence: an arm at a seed, measured (training the run it needs, resuming where it stopped)."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import torch

from damcha.analysis.ablation import mode_options
from damcha.evidence.catalogue.common import EFFICIENCY_CASE, EFFICIENCY_CONFIG, synthetic_steps
from damcha.evidence.records import AS_TRAINED, Arm
from damcha.evidence.scales import DEMO, Setting
from damcha.evidence.tuning import HOLDOUT
from damcha.inputs.datasets import data_set_spec
from damcha.model.config import ModelConfig


def train_settings(dataset: str, quick: bool) -> dict:
    """TrainConfig fields of the evidence runs (demo sizes; quick: a smoke run)."""
    if quick:
        return dict(epochs=1, train_limit=128, completion_images=2, completion_samples=1, batch_size=64,
                    steps_per_epoch=5, val_windows=16)
    return dict(data_set_spec(dataset).demo_train)


EVALUATION = dict(completion_images=64, completion_samples=2)  # completions scored per evidence unit (full runs)


def run_unit(arm: Arm, seed: int, quick: bool, work: Path, setting: Setting = DEMO) -> dict[str, float]:
    """The metrics of one arm at one seed (training what it needs, resuming where a run stopped), at the
    setting's scale and on its files."""
    if arm.kind == "constant":
        return {"constant": arm.level}
    if arm.kind == "baseline":
        from damcha.evidence.baselines import completion_baseline

        if setting.scale:
            n = setting.train_fields(arm.dataset)["completion_images"]
        else:
            n = train_settings(arm.dataset, quick).get("completion_images") if quick else EVALUATION["completion_images"]
        return completion_baseline(arm.task, arm.dataset, n, setting.load)
    if arm.kind == "synthetic":
        from damcha.inputs.synthetic import train_synthetic

        result = train_synthetic(arm.variant, arm.task, arm.level, seed, synthetic_steps(quick),
                                 **({"lrs": arm.lrs} if arm.lrs else {}))
        return {result.metric: result.score, "parameters": float(result.parameters), "lr": result.lr,
                **{f"validation_{result.metric}_lr={lr:g}": v for lr, v in result.validation.items()}}
    if arm.kind == "efficiency":
        from damcha.evidence.efficiency import efficiency_ratios

        torch.manual_seed(seed)
        if setting.scale:
            config, case = ModelConfig(**setting.scale.efficiency_model), setting.scale.efficiency_case
        else:
            config, case = EFFICIENCY_CONFIG, dict(T=64, batch=2) if quick else EFFICIENCY_CASE
        return efficiency_ratios(config, arm.variant, case["T"], case["batch"], repeats=3 if quick else 10)
    model, data, tcfg = _trained_run(arm.run_arm, seed, quick, Path(work), setting)
    if arm.tuning:
        from damcha.runs.evaluation import evaluate, validation_tensors

        return {"tuning_loss": float(evaluate(model, *validation_tensors(data, tcfg.val_windows))["nll"]),
                "lr": tcfg.lr}
    if arm.kind == "adaptivity":
        from damcha.analysis.interventions import adaptivity_gap, mean_metric

        n = 64 if quick else 256
        x, y = data.val_inputs[:n], data.val_targets[:n]
        return {"gap_nats": float(adaptivity_gap(model, x, y, mean_metric(model, x)).mean())}
    from damcha.runs.evaluation import validation_metrics

    options = mode_options(model.mechanism, None if arm.mode == AS_TRAINED else arm.mode)
    tcfg = tcfg if quick or setting.scale else dataclasses.replace(tcfg, **EVALUATION)
    metrics = {k: float(v) for k, v in validation_metrics(model, data, tcfg, options).items()}
    if setting.scale and arm.mode == AS_TRAINED:  # the test split, evaluated once after the last epoch, beside
        metrics.update(recorded_test_metrics(Path(work) / "runs" / arm.run_arm.run_name(seed, quick)))
    return metrics


def recorded_test_metrics(run: Path) -> dict[str, float]:
    """The test split's metrics a run recorded after its last epoch ("test_…"; none where its data have no
    test split)."""
    from damcha.runs.checkpoints import read_test

    recorded = read_test(run) or {}
    return {k: float(v) for k, v in recorded.items() if k.startswith("test_")}


def base_config(variant: str, overrides: tuple = ()) -> ModelConfig:
    """The model config an evidence run of `variant` trains (before the data fill in their fields): overrides
    name ModelConfig fields or the mechanism's own settings (generator_start, ...)."""
    from damcha.model.config import split_fields, variant_config

    config = variant_config(ModelConfig(), variant)
    fields, settings = split_fields(overrides)
    return dataclasses.replace(config, **fields,
                               **({"attention_options": {**dict(config.attention_options), **settings}} if settings else {}))


def model_parameters(variant: str, dataset: str, overrides: tuple = (), setting: Setting = DEMO) -> int:
    """Parameters of the model an evidence arm of `variant` trains on `dataset` (from its config: exact)."""
    from damcha.runs.train import model_config_for

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


@functools.lru_cache(maxsize=1)  # a task's units share one run (tasks group them): train and load it once
def _trained_run(arm: Arm, seed: int, quick: bool, work: Path, setting: Setting):
    """The run `arm` (Arm.run_arm: what decides the training) evaluates: trained (or resumed), loaded, and
    the data it is scored on (a tuning fit's hold-out for a tuning arm)."""
    from damcha.runs import distributed
    from damcha.runs.checkpoints import load_model
    from damcha.runs.train import TrainConfig, pick_device, train

    out = work / "runs" / arm.run_name(seed, quick)
    cfg = base_config(arm.variant, arm.overrides)
    fields = setting.train_fields(arm.dataset) if setting.scale else dict(device="cpu", **train_settings(arm.dataset, quick))
    if arm.lr:
        fields["lr"] = arm.lr
    if arm.tuning:
        fields["tuning_holdout"] = HOLDOUT
    tcfg = TrainConfig(dataset=arm.dataset, seed=seed, **fields)
    train(cfg, tcfg, out, progress=False, compile_model=bool(setting.scale and setting.scale.compile),
          evaluate_every_epoch=False, strategy="auto")  # a unit scores the trained model itself (run_unit), not the epochs' rows
    model = load_model(out).to(distributed.device_for(pick_device(tcfg.device)))  # (under torchrun: this rank's GPU)
    data = setting.load(arm.dataset, model.config.block_size)
    return model, data.held_out_for_tuning(HOLDOUT) if arm.tuning else data, tcfg
