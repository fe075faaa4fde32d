"""One unit of evidence: an arm at a seed, measured (training the run it needs, resuming where it stopped)."""

from __future__ import annotations

import dataclasses
import functools
import time
from pathlib import Path
from typing import Any

import torch

from damcha.analysis.ablation import mode_options
from damcha.analysis.interventions import adaptivity_gap, mean_metric
from damcha.evidence import tuning
from damcha.evidence.baselines import baseline_values
from damcha.evidence.capacity import base_config
from damcha.evidence.catalogue.common import EFFICIENCY_CASE, EFFICIENCY_CONFIG, synthetic_steps, synthetic_test_size
from damcha.evidence.efficiency import efficiency_ratios
from damcha.evidence.records import AS_TRAINED, Arm
from damcha.evidence.setting import DEMO, Setting
from damcha.evidence.synthetic_fits import FitRecord, stored_value, tuning_value
from damcha.evidence.tuning import HOLDOUT
from damcha.inputs.datasets import data_set_spec
from damcha.inputs.synthetic import train_synthetic
from damcha.model.config import ModelConfig
from damcha.runs import distributed
from damcha.runs.checkpoints import load_model, read_test
from damcha.runs.evaluation import evaluate, validation_metrics, validation_tensors
from damcha.runs.train import TrainConfig, pick_device, train


def train_settings(dataset: str, quick: bool) -> dict:
    """TrainConfig fields of the evidence runs (demo sizes; quick: a smoke run)."""
    if quick:
        return dict(epochs=1, train_limit=128, completion_images=2, completion_samples=1, batch_size=64,
                    steps_per_epoch=5, val_windows=16)
    return dict(data_set_spec(dataset).demo_train)


EVALUATION = dict(completion_images=64, completion_samples=2)  # completions scored per evidence unit (full runs)


def run_task(units: list[tuple[Arm, int]], quick: bool, work: Path,
             setting: Setting = DEMO) -> list[tuple[str, dict, float]]:
    """Units that share one trained run, in order (the first trains it): (unit, metrics, seconds)."""
    results = []
    for arm, seed in units:
        t0 = time.perf_counter()
        value = run_unit(arm, seed, quick, work, setting)
        results.append((arm.unit(seed, quick), value, round(time.perf_counter() - t0, 2)))
    return results


def run_unit(arm: Arm, seed: int, quick: bool, work: Path, setting: Setting = DEMO) -> dict[str, float]:
    """The metrics of one arm at one seed (training what it needs, resuming where a run stopped), at the
    setting's scale and on its files."""
    if arm.kind == "constant":
        return {"constant": arm.level}
    if arm.kind == "baseline":
        if setting.scale:
            n = setting.train_fields(arm.dataset)["completion_images"]
        else:
            n = train_settings(arm.dataset, quick).get("completion_images") if quick else EVALUATION["completion_images"]
        return baseline_values(arm.task, arm.dataset, n, setting.load)
    if arm.kind == "synthetic":
        if arm.tuning:  # the configuration's rates along the ladder, chosen on the tuning seed's validation set
            record = FitRecord(work, arm.unit(seed, quick))
            return tuning_value(train_synthetic(arm.variant, arm.task, arm.level, seed, synthetic_steps(quick),
                                                n_test=synthetic_test_size(quick), lrs=arm.lrs,
                                                beyond=None if quick else tuning.beyond,
                                                known=record.read(), on_fit=record.write))
        rate: dict[str, Any] = {"lrs": (arm.lr,)} if arm.lr else {}  # (else train_synthetic's own)
        return stored_value(train_synthetic(arm.variant, arm.task, arm.level, seed, synthetic_steps(quick),
                                            n_test=synthetic_test_size(quick), **rate))
    if arm.kind == "efficiency":
        torch.manual_seed(seed)
        if setting.scale:
            config, case = ModelConfig.from_dict(setting.scale.efficiency_model), setting.scale.efficiency_case
        else:
            config, case = EFFICIENCY_CONFIG, dict(T=64, batch=2) if quick else EFFICIENCY_CASE
        return efficiency_ratios(config, arm.variant, case["T"], case["batch"], repeats=3 if quick else 10)
    model, data, tcfg = _trained_run(arm.run_arm, seed, quick, Path(work), setting)
    if arm.tuning:
        return {"tuning_loss": float(evaluate(model, *validation_tensors(data, tcfg.val_windows))["nll"]),
                "lr": tcfg.lr}
    if arm.kind == "adaptivity":
        n = 64 if quick else 256
        x, y = data.val_inputs[:n], data.val_targets[:n]
        return {"gap_nats": float(adaptivity_gap(model, x, y, mean_metric(model, x)).mean())}

    options = mode_options(model.mechanism, None if arm.mode == AS_TRAINED else arm.mode)
    tcfg = tcfg if quick or setting.scale else dataclasses.replace(tcfg, **EVALUATION)
    metrics = {k: float(v) for k, v in validation_metrics(model, data, tcfg, options).items()}
    if setting.scale and arm.mode == AS_TRAINED:  # the test split, evaluated once after the last epoch, beside
        metrics.update(recorded_test_metrics(Path(work) / "runs" / arm.run_arm.run_name(seed, quick)))
    return metrics


def recorded_test_metrics(run: Path) -> dict[str, float]:
    """The test split's metrics a run recorded after its last epoch ("test_…"; none where its data have no
    test split)."""
    recorded = read_test(run) or {}
    return {k: float(v) for k, v in recorded.items() if k.startswith("test_")}


def run_train_config(arm: Arm, seed: int, quick: bool, setting: Setting = DEMO) -> TrainConfig:
    """How the run `arm` evaluates trains: the data set's demo training (or the scale's), the arm's own
    TrainConfig fields over it (a compute-matched arm's epochs), its rate, and a tuning fit's hold-out."""
    fields = setting.train_fields(arm.dataset) if setting.scale else dict(device="cpu", **train_settings(arm.dataset, quick))
    fields.update(arm.train_overrides)
    if arm.lr:
        fields["lr"] = arm.lr
    if arm.tuning:
        fields["tuning_holdout"] = HOLDOUT
    return TrainConfig(dataset=arm.dataset, seed=seed, **fields)


@functools.lru_cache(maxsize=1)  # a task's units share one run (tasks group them): train and load it once
def _trained_run(arm: Arm, seed: int, quick: bool, work: Path, setting: Setting):
    """The run `arm` (Arm.run_arm: what decides the training) evaluates: trained (or resumed), loaded, and
    the data it is scored on (a tuning fit's hold-out for a tuning arm)."""
    out = work / "runs" / arm.run_name(seed, quick)
    cfg = base_config(arm.variant, arm.overrides)
    tcfg = run_train_config(arm, seed, quick, setting)
    train(cfg, tcfg, out, progress=False, compile_model=bool(setting.scale and setting.scale.compile),
          evaluate_every_epoch=False, strategy="auto")  # a unit scores the trained model itself (run_unit), not the epochs' rows
    model = load_model(out).to(distributed.device_for(pick_device(tcfg.device)))  # (under torchrun: this rank's GPU)
    data = setting.load(arm.dataset, model.config.block_size)
    return model, data.held_out_for_tuning(HOLDOUT) if arm.tuning else data, tcfg
