"""Evaluation: validation loss, digit completions, and the per-epoch evaluation row of training.

Used by training (every epoch), the ablations and the app; it never trains anything.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from damcha.inputs.datasets import DataSet, fixed_val_windows
from damcha.inputs.modalities import completion_kind
from damcha.inputs.modalities.digit_image import DIGIT_LEVELS
from damcha.model.mechanisms import ForwardOptions
from damcha.model.transformer import Transformer


@torch.no_grad()
def evaluate(model: Transformer, inputs: torch.Tensor, targets: torch.Tensor, batch_size: int = 256,
             options: ForwardOptions | None = None, per_input: bool = False) -> dict:
    """Mean loss (nats per token, per sample for a classifier, squared error for vectors) and
    accuracy for classifiers; per_input: also each input's mean loss ("per_input", (N,)), for paired
    intervals over inputs."""
    device = next(model.parameters()).device
    total, count, correct = 0.0, 0, 0
    each: list[np.ndarray] = []
    batch_size = bounded_batch(model, inputs.shape[1], batch_size)
    for i in range(0, len(inputs), batch_size):
        x, y = inputs[i:i + batch_size].to(device), targets[i:i + batch_size].to(device)
        out = model(x, targets=y, options=options, stochastic=False)
        total += float(out.token_loss.sum())
        count += out.token_loss.numel()
        if per_input:
            each.append(out.token_loss.reshape(len(x), -1).mean(1).double().cpu().numpy())  # (b,)
        if model.config.n_classes:
            correct += int((out.logits.argmax(-1) == y).sum())
    result: dict[str, Any] = {"nll": total / max(count, 1)}
    if per_input:
        result["per_input"] = np.concatenate(each) if each else np.zeros(0)
    if model.config.n_classes:
        result["accuracy"] = correct / max(count, 1)
    return result


EVAL_BYTES = 2**30  # what one evaluation batch may hold of a mechanism's per-sequence extras


def bounded_batch(model: Transformer, T: int, batch_size: int) -> int:
    """batch_size, made smaller where the mechanism's per-sequence inference memory would exceed
    EVAL_BYTES (a paper-sized shared metric is 134 MB per 1024-token sequence)."""
    per_sequence = model.mechanism.inference_bytes(model.config, T)
    return max(1, min(batch_size, EVAL_BYTES // per_sequence)) if per_sequence else batch_size


@torch.no_grad()
def complete_digits(model: Transformer, sequences: torch.Tensor, samples: int, seed: int,
                    options: ForwardOptions | None = None) -> torch.Tensor:
    """Expected bottom halves given top halves, by sampling: (N, 65) decoder sequences -> (N, 32) grey levels in [0, 16].

    The expectation of each bottom pixel under the model is estimated as the mean of
    `samples` autoregressive completions (seeded, so the same every call).
    """
    device = next(model.parameters()).device
    gen = torch.Generator(device="cpu").manual_seed(seed)
    seq = sequences[:, :33].repeat_interleave(samples, dim=0).to(device)  # (N*S, 33): start + 32 pixels
    for _ in range(32):
        logits = model(seq, options=options, stochastic=False).logits[:, -1, :DIGIT_LEVELS]  # (N*S, 17)
        nxt = torch.multinomial(logits.softmax(-1).cpu(), 1, generator=gen).to(device)  # (N*S, 1)
        seq = torch.cat([seq, nxt], dim=1)
    bottom = seq[:, 33:].float().view(-1, samples, 32)  # (N, S, 32)
    return bottom.mean(1).cpu()  # (N, 32)


def digit_completion_errors(model: Transformer, val_inputs: torch.Tensor, val_targets: torch.Tensor, n_images: int,
                            samples: int, options: ForwardOptions | None = None) -> torch.Tensor:
    """Per-image MSE (pixel values scaled to [0, 1]) of the expected bottom half against the truth. (N,)"""
    seqs = torch.cat([val_inputs[:n_images], val_targets[:n_images, -1:]], dim=1)  # (N, 65)
    pred = complete_digits(model, seqs, samples, seed=1234, options=options)  # (N, 32)
    truth = seqs[:, 33:].float()  # (N, 32)
    return ((pred - truth) / (DIGIT_LEVELS - 1)).pow(2).mean(1)  # (N,)


def completion_mse(model: Transformer, val_inputs: torch.Tensor, val_targets: torch.Tensor, n_images: int,
                   samples: int, options: ForwardOptions | None = None) -> float:
    """MSE (pixel values scaled to [0, 1]) of the expected bottom half against the truth."""
    return float(digit_completion_errors(model, val_inputs, val_targets, n_images, samples, options).mean())


@torch.no_grad()
def complete_patches(model: Transformer, inputs: torch.Tensor, options: ForwardOptions | None = None,
                     given: int = 32) -> torch.Tensor:
    """Free-running completion of images from their top half, as the paper's generation task:
    (N, 64, 48) next-patch inputs (a zero start, then patches 0..62) -> (N, 64, 48) patches, the first
    `given` copied from the input and the rest each predicted from the ones before (the model's
    prediction is its expected patch; it is fed back as the next input)."""
    device = next(model.parameters()).device
    seq = inputs[:, :given + 1].to(device)  # (N, given+1, 48): start vector and the true top half
    for _ in range(inputs.shape[1] - given - 1):
        nxt = model(seq, options=options, stochastic=False).logits[:, -1:]  # (N, 1, 48)
        seq = torch.cat([seq, nxt.clamp(0, 1)], dim=1)
    last = model(seq, options=options, stochastic=False).logits[:, -1:].clamp(0, 1)  # the final patch
    return torch.cat([seq[:, 1:], last], dim=1).cpu()  # (N, 64, 48)


def patch_completion_errors(model: Transformer, inputs: torch.Tensor, targets: torch.Tensor,
                            options: ForwardOptions | None = None, given: int = 32) -> torch.Tensor:
    """Per-image MSE of the completed bottom half against the truth (pixels in [0, 1]). (N,)"""
    completed = complete_patches(model, inputs, options, given)  # (N, 64, 48)
    return (completed[:, given:] - targets[:, given:]).pow(2).mean(dim=(1, 2))


def completion_statistics(errors: torch.Tensor) -> dict:
    """The paper's Table 1 statistics of per-image completion MSE: mean, q25, q75."""
    q25, q75 = torch.quantile(errors.double(), torch.tensor([0.25, 0.75], dtype=torch.float64)).tolist()
    return {"val_completion_mse": float(errors.mean()), "val_completion_mse_q25": q25, "val_completion_mse_q75": q75}


def completes_tokens(modality: str, task: str) -> bool:
    """Whether bottom halves of token images are completed and scored (a pixel decoder's digits)."""
    return completion_kind(modality, task) == "bottom_half_tokens"


def validation_tensors(data: DataSet, val_windows: int) -> tuple[torch.Tensor, torch.Tensor]:
    if data.stream:
        return fixed_val_windows(data.tensor("val_stream"), data.block_size, val_windows)
    return data.tensor("val_inputs"), data.tensor("val_targets")


def test_tensors(data: DataSet) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole test split: every non-overlapping window of a corpus's test bytes, every test sample."""
    if data.test_stream is not None:
        return fixed_val_windows(data.test_stream, data.block_size, len(data.test_stream))
    return data.tensor("test_inputs"), data.tensor("test_targets")


def train_subset(data: DataSet, val_windows: int, n: int = 512) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed slice of the training data, evaluated like validation for the train-loss curve."""
    if data.stream:
        return fixed_val_windows(data.tensor("train_stream"), data.block_size, min(n, val_windows))
    return data.tensor("train_inputs")[:n], data.tensor("train_targets")[:n]


def held_out_metrics(model: Transformer, data: DataSet, tcfg, inputs: torch.Tensor, targets: torch.Tensor,
                     prefix: str, options: ForwardOptions | None = None) -> dict:
    """Loss, bits, accuracy and completion error (mean, q25, q75) of held-out inputs, each key
    prefixed ("val", "test")."""
    loss = evaluate(model, inputs, targets, options=options)
    if data.task == "next_vector":  # a squared error, not a likelihood: no bits
        n = tcfg.completion_images
        row = {"mse": loss["nll"], **completion_statistics(patch_completion_errors(model, inputs[:n], targets[:n], options))}
    else:
        row = {"nll": loss["nll"], f"bits_per_{data.unit}": loss["nll"] / math.log(2)}
        if "accuracy" in loss:
            row["accuracy"] = loss["accuracy"]
        if completes_tokens(data.modality, data.task):
            row.update(completion_statistics(digit_completion_errors(
                model, inputs, targets, tcfg.completion_images, tcfg.completion_samples, options)))
    return {f"{prefix}_{k.removeprefix('val_')}": v for k, v in row.items()}  # completion keys come as val_


def validation_metrics(model: Transformer, data: DataSet, tcfg, options: ForwardOptions | None = None) -> dict:
    """Validation loss, bits, accuracy and completion error (mean, q25, q75) under `options`."""
    return held_out_metrics(model, data, tcfg, *validation_tensors(data, tcfg.val_windows), "val", options)


def test_metrics(model: Transformer, data: DataSet, tcfg) -> dict:
    """The test split's metrics (keys "test_…"), evaluated once, after the last epoch."""
    return held_out_metrics(model, data, tcfg, *test_tensors(data), "test")


def evaluate_epoch(model: Transformer, data: DataSet, tcfg) -> dict:
    """The metrics row of one epoch: validation and training-subset loss, bits, accuracy, completion MSE."""
    row = validation_metrics(model, data, tcfg)
    train = evaluate(model, *train_subset(data, tcfg.val_windows))["nll"]
    return {**row, ("train_mse" if data.task == "next_vector" else "train_nll"): train}
