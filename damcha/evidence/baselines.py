"""Trivial baselines: what a number is worth before any model.

A completion baseline is scored exactly as the models' completions are (the same validation images, the
same per-image MSE on [0, 1] pixels, the same mean / q25 / q75); the token-frequency baseline is a
likelihood scored as the models' validation NLL is (nats per predicted token, over every validation
target), so a claim can say when no model beats one.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from damcha.inputs.datasets import DataSet, load_dataset
from damcha.inputs.modalities.digit_image import DIGIT_LEVELS
from damcha.runs.evaluation import completion_statistics


def digit_pixels(inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """(N, 64) grey levels of decoder sequences (start + pixels 0..62 as inputs, pixels 0..63 as targets)."""
    return torch.cat([inputs, targets[:, -1:]], dim=1)[:, 1:]


def _arrays(data: DataSet, *parts) -> list[torch.Tensor]:
    """`parts` of `data`, which the digits' baselines read whole, in memory: refused in words otherwise."""
    if not all(isinstance(p, torch.Tensor) for p in parts):
        raise ValueError(f"{data.name}: the digits' baselines read the samples as arrays in memory, and this data "
                         "set has none there (a stream, or rows read lazily)")
    return list(parts)


def digit_completion_errors(task: str, dataset: str, n_images: int, load: Callable[[str], DataSet] = load_dataset) -> torch.Tensor:
    """Per-image MSE of a trivial bottom half for the first n validation digits. (N,)
    train_mean: each bottom pixel's mean over the training set; top_half_1nn: the bottom half of the
    training digit whose top half is nearest (Euclidean)."""
    data = load(dataset)
    train_inputs, train_targets, val_inputs, val_targets = _arrays(data, data.train_inputs, data.train_targets,
                                                                   data.val_inputs, data.val_targets)
    train = digit_pixels(train_inputs, train_targets).float()  # (Ntr, 64)
    val = digit_pixels(val_inputs[:n_images], val_targets[:n_images]).float()  # (N, 64)
    if task == "train_mean":
        pred = train[:, 32:].mean(0).expand(len(val), -1)  # (N, 32)
    elif task == "top_half_1nn":
        nearest = torch.cdist(val[:, :32], train[:, :32]).argmin(dim=1)  # (N,)
        pred = train[nearest, 32:]  # (N, 32)
    else:
        raise ValueError(f"no digit baseline {task!r}")
    return ((pred - val[:, 32:]) / (DIGIT_LEVELS - 1)).pow(2).mean(1)  # (N,)


def patch_completion_errors(task: str, dataset: str, n_images: int, load: Callable[[str], DataSet] = load_dataset,
                            given: int = 32) -> torch.Tensor:
    """Per-image MSE of every bottom patch filled with the mean colour of the image's true top half. (N,)"""
    if task != "top_mean_colour":
        raise ValueError(f"no image baseline {task!r}")
    data = load(dataset)
    if data.val_targets is None:
        raise ValueError(f"{data.name}: no validation images to complete")
    truth = data.val_targets[:n_images]  # (N, 64, 48): 4 x 4 x 3 patches, channels last (read lazily or not)
    N, P, F = truth.shape
    colour = truth[:, :given].reshape(N, given * F // 3, 3).mean(1)  # (N, 3)
    pred = colour[:, None, None, :].expand(N, P - given, F // 3, 3).reshape(N, P - given, F)  # (N, 32, 48)
    return (pred - truth[:, given:]).pow(2).mean(dim=(1, 2))  # (N,)


def completion_baseline(task: str, dataset: str, n_images: int,
                        load: Callable[[str], DataSet] = load_dataset) -> dict[str, float]:
    """The completion statistics of one trivial baseline, keyed as the models' evaluation keys them
    (`load` reads the data set: where a scale's files are)."""
    if task not in BASELINES:
        raise ValueError(f"no completion baseline {task!r}; expected one of {', '.join(BASELINES)}")
    return completion_statistics(BASELINES[task](task, dataset, n_images, load))


def token_frequency_nll(dataset: str, load: Callable[[str], DataSet] = load_dataset, rows: int = 512) -> dict[str, float]:
    """{"val_nll": nats per validation target} of the training targets' token frequencies (add-one smoothed over
    the vocabulary): the likelihood of a model that ignores every input. Rows are read `rows` at a time (a pixel
    data set's are made when read)."""
    data = load(dataset)
    if data.stream or data.train_targets is None or data.val_targets is None or not data.vocab_size:
        raise ValueError(f"{data.name}: the token-frequency baseline reads the next-token samples of a data set, "
                         "and this one has none")
    counts = torch.ones(data.vocab_size, dtype=torch.float64)  # (V,): add-one
    for i in range(0, len(data.train_targets), rows):
        counts += torch.bincount(data.train_targets[i:i + rows].reshape(-1), minlength=data.vocab_size).double()
    log_p = counts.log() - counts.sum().log()  # (V,)
    total, n = 0.0, 0
    for i in range(0, len(data.val_targets), rows):
        targets = data.val_targets[i:i + rows].reshape(-1)  # (rows * T,)
        total -= float(log_p[targets].sum())
        n += len(targets)
    return {"val_nll": total / n}


# Each completion baseline by name, with the completion it stands in for (digit bottom halves, or image patches).
BASELINES = {"train_mean": digit_completion_errors, "top_half_1nn": digit_completion_errors,
             "top_mean_colour": patch_completion_errors}
COMPLETES = {"train_mean": "bottom_half_tokens", "top_half_1nn": "bottom_half_tokens",
             "top_mean_colour": "bottom_half_patches"}
TOKEN_FREQUENCIES = "token_frequencies"  # the likelihood baseline, for any next-token data set
TASKS = (*BASELINES, TOKEN_FREQUENCIES)
BASELINE_NAMES = {TOKEN_FREQUENCIES: "training tokens' frequencies"}  # the arm a baseline moved to a scale becomes


def baseline_values(task: str, dataset: str, n_images: int, load: Callable[[str], DataSet] = load_dataset) -> dict[str, float]:
    """The metrics of one trivial baseline on `dataset`, keyed as the models' evaluation keys them."""
    if task == TOKEN_FREQUENCIES:
        return token_frequency_nll(dataset, load)
    return completion_baseline(task, dataset, n_images, load)


def baseline_on(task: str, completion: str | None) -> str:
    """The baseline task that stands where `task` stood, on a data set whose models complete `completion` (a
    modality's completion kind for its task; None: none): `task` itself where it completes that, else the
    token frequencies (the likelihood every next-token model is scored by)."""
    return task if task in COMPLETES and COMPLETES[task] == completion else TOKEN_FREQUENCIES
