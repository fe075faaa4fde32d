"""A run under each value of the per-call choice its mechanism declares for ablation (`InferenceAblation`;
DAMCHA: the full, diagonal-only, off-diagonal-only and H-scaled diagonal metric, the paper's Table 3 and
the control of its row-sum arithmetic), per input and per run."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from damcha.analysis.inspection import inspect_input, next_token_probabilities
from damcha.analysis.intervals import mean_interval
from damcha.inputs.modalities import task_of
from damcha.inputs.model_inputs import validation_arrays
from damcha.model.transformer import Transformer
from damcha.runs.checkpoints import Run
from damcha.runs.evaluation import (
    complete_digits,
    complete_patches,
    completes_tokens,
    completion_mse,
    completion_statistics,
    evaluate,
    patch_completion_errors,
)

ABLATION_SETTINGS = {"completion_images": 64, "completion_samples": 4}


def ablation_modes(config) -> tuple[str, ...]:
    """The values of the choice a run's mechanism declares for ablation, the model as trained first
    (empty: it declares none)."""
    ablation = config.mechanism.inference_ablation
    return () if ablation is None else config.mechanism.choice(ablation.choice).values


def mode_title(config, mode: str) -> str:
    """A mode as a reader sees it (its declared title: 'diagonal only × H', not the code's 'diagonal_scaled')."""
    ablation = config.mechanism.inference_ablation
    choice = None if ablation is None else config.mechanism.choice(ablation.choice)
    return choice.title_of(mode) if choice is not None else mode.replace("_", " ")


def has_ablation_modes(config) -> bool:
    """Whether a run's mechanism declares a choice to ablate (DAMCHA: its metric modes)."""
    return bool(ablation_modes(config))


def ablation_key(config) -> dict:
    """What a run's table is kept under (disk cache, shipped with the run): every mode there is now; version 2
    added the paired intervals of each mode's change from full."""
    return {**ABLATION_SETTINGS, "modes": list(ablation_modes(config)), "version": 2}


def completed_digit(model: Transformer, tokens: np.ndarray, targets: np.ndarray, mode: str, samples: int = 16,
                    seed: int = 0) -> np.ndarray:
    """The bottom half of a digit completed from its top half (expected levels under the model), (8, 8)."""
    seq = torch.as_tensor(np.concatenate([tokens, targets[-1:]]), dtype=torch.long)[None]  # (1, 65)
    bottom = complete_digits(model, seq, samples, seed, _options(model, mode))[0].numpy()  # (32,)
    return np.concatenate([seq[0, 1:33].numpy().astype(float), bottom]).reshape(8, 8)


@torch.no_grad()
def greedy_continuation(model: Transformer, tokens: np.ndarray, n: int, mode: str) -> bytes:
    """The n most likely next bytes, one at a time, from the end of `tokens` (context cut to the block size)."""
    seq = torch.as_tensor(tokens, dtype=torch.long)[None]
    out = []
    for _ in range(n):
        ctx = seq[:, -model.config.block_size:]
        nxt = model(ctx, options=_options(model, mode), stochastic=False).logits[:, -1].argmax(-1, keepdim=True)
        seq = torch.cat([seq, nxt], dim=1)
        out.append(int(nxt))
    return bytes(out)


def validation_ablation(run: Run, model: Transformer, progress: Callable[[int, int], None] | None = None,
                        completion_images: int = 64, completion_samples: int = 4) -> list[dict]:
    """One row per metric mode: NLL (nats), bits per unit, and completion MSE (digits) or accuracy
    (classifier), on the run's validation set. The same evaluation code as training uses. Each mode
    but full also carries `delta_interval`: the 95% Student-t interval of its change from full, paired
    by validation input ({metric: [low, high]}, in each metric's own unit), and `inputs`, their count."""
    x, y, _ = validation_arrays(run)
    xt, yt = torch.as_tensor(x), torch.as_tensor(y)
    unit = run.data.get("unit", "token")
    rows = []
    full_losses = None
    modes = ablation_modes(run.model_config)
    for k, mode in enumerate(modes):
        options = _options(model, mode)
        res = evaluate(model, xt, yt, options=options, per_input=True)
        ablation = run.model_config.mechanism.inference_ablation
        assert ablation is not None  # ablation_modes named its modes
        row = {"run": run.name, "variant": run.variant, **ablation.row(run.model_config),
               "mode": mode, "inputs": len(res["per_input"])}
        if k == 0:
            full_losses = res["per_input"]
        elif full_losses is not None:
            _, low, high = mean_interval(res["per_input"] - full_losses)  # nats (or squared error)
            scales = {"mse": 1.0} if run.model_config.input_dim else {"nll": 1.0, f"bits_per_{unit}": 1 / math.log(2)}
            row["delta_interval"] = {metric: [low * s, high * s] for metric, s in scales.items()}
        if run.model_config.input_dim:  # next-patch MSE and the paper's table-1 statistics of completions
            row["mse"] = res["nll"]
            row.update(completion_statistics(patch_completion_errors(model, xt[:completion_images],
                                                                     yt[:completion_images], options)))
        else:
            row.update({"nll": res["nll"], f"bits_per_{unit}": res["nll"] / math.log(2)})
        if "accuracy" in res:
            row["accuracy"] = res["accuracy"]
        if completes_tokens(run.model_config.modality, task_of(run.model_config)):
            row["completion_mse"] = completion_mse(model, xt, yt, completion_images, completion_samples, options)
        rows.append(row)
        if progress:
            progress(k + 1, len(modes))
    return rows



def modes_by_run(rows: list[dict], metric: str, title: Callable[[str], str] = str) -> list[dict]:
    """The paper's Table 3 shape from validation_ablation rows: one row per run, the metric under
    the full metric (a run's first row: the model as trained), then each other mode as its value, its
    change from full (Δ) and that change's 95% interval paired over the validation inputs (where the
    rows carry one). Columns name each mode by `title` (mode_title of the runs' mechanism, on a page)."""
    out: dict[str, dict] = {}
    first: dict[str, dict] = {}
    for r in rows:
        first.setdefault(r["run"], r)
    full = {run: r.get(metric) for run, r in first.items()}
    for r in rows:
        if r.get(metric) is None:
            continue
        row = out.setdefault(r["run"], {"run": r["run"], "variant": r["variant"]})
        mode = title(r["mode"])
        row[mode] = r[metric]
        if r is not first[r["run"]] and full.get(r["run"]) is not None:
            row[f"Δ {mode}"] = r[metric] - full[r["run"]]
            interval = r.get("delta_interval", {}).get(metric)
            if interval is not None:
                row[f"Δ {mode} 95% interval"] = f"[{interval[0]:+.3g}, {interval[1]:+.3g}]"
    return list(out.values())


def long_form(rows: list[dict]) -> list[dict]:
    """validation_ablation rows as a flat table (the page's long table and its CSV): each Δ interval
    as two numeric columns, "Δ {metric} 95% low" and "... high", instead of one nested record."""
    out = []
    for r in rows:
        flat = {k: v for k, v in r.items() if k != "delta_interval"}
        for metric, (low, high) in (r.get("delta_interval") or {}).items():
            flat[f"Δ {metric} 95% low"], flat[f"Δ {metric} 95% high"] = low, high
        out.append(flat)
    return out


def _options(model: Transformer, mode: str):
    return mode_options(model.mechanism, mode)


def mode_options(mechanism, mode: str | None):
    """A mechanism's options under one value of the choice it declares for ablation (None: the model as
    trained); a mode for a mechanism that declares none is refused."""
    if mode is None:
        return mechanism.options(None)
    ablation = mechanism.inference_ablation
    if ablation is None:
        raise ValueError(f"{mechanism.title} declares no choice to ablate: it has no mode {mode!r}")
    return mechanism.options_from({ablation.choice: mode})


@dataclass(frozen=True)
class ModeOutcome:
    """One input under one metric mode: loss, and what the model then predicts.
    completed: (8, 8) digit with its bottom half completed; continuation: greedy next bytes;
    next_bytes: the 5 most likely next bytes with their probabilities; predicted class and its probability."""

    mode: str
    title: str  # the mode as a reader sees it (mode_title)
    loss: float | None
    completed: np.ndarray | None = None
    continuation: str | None = None
    next_bytes: tuple[tuple[int, float], ...] = ()
    completed_patches: np.ndarray | None = None  # (64, 48) an image completed from its top half
    predicted_class: int | None = None
    class_probability: float | None = None


def input_under_modes(model: Transformer, tokens: np.ndarray, targets, modes: tuple[str, ...] | None = None,
                      continuation_bytes: int = 40) -> list[ModeOutcome]:
    """One input under each metric mode (default: every mode of ablation_modes): the loss, and the prediction
    the modality calls for (the completed bottom half of a digit, or the next bytes and a greedy
    continuation of a text)."""
    cfg = model.config
    outcomes = []
    for mode in ablation_modes(cfg) if modes is None else modes:
        record = inspect_input(model, tokens, targets, options=_options(model, mode))
        extra: dict[str, Any] = {}
        if record.task == "classification":
            probs = next_token_probabilities(record, 0)
            extra = dict(predicted_class=int(probs.argmax()), class_probability=float(probs.max()))
        elif record.modality.completion == "bottom_half_patches":
            x = torch.as_tensor(np.asarray(tokens), dtype=torch.float32)[None]
            extra = dict(completed_patches=complete_patches(model, x, _options(model, mode))[0].numpy())
        elif completes_tokens(cfg.modality, record.task) and targets is not None:
            extra = dict(completed=completed_digit(model, tokens, targets, mode))
        elif record.modality.completion == "continuation":
            probs = next_token_probabilities(record, len(tokens) - 1)
            top = np.argsort(probs)[::-1][:5]
            extra = dict(next_bytes=tuple((int(t), float(probs[t])) for t in top),
                         continuation=greedy_continuation(model, tokens, continuation_bytes, mode).decode("utf-8", "replace"))
        outcomes.append(ModeOutcome(mode, mode_title(cfg, mode), record.loss, **extra))
    return outcomes
