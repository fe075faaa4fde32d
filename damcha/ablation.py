"""Inference with the full, diagonal-only and off-diagonal-only metric (paper table 3), per input and per run."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

from .checkpoints import Run
from .config import MetricMode
from .model import Transformer
from .samples import validation_arrays
from .train import complete_digits, completion_mse, evaluate

MODES = tuple(m.value for m in MetricMode)


def completed_digit(model: Transformer, tokens: np.ndarray, targets: np.ndarray, mode: str, samples: int = 16,
                    seed: int = 0) -> np.ndarray:
    """The bottom half of a digit completed from its top half (expected levels under the model), (8, 8)."""
    seq = torch.as_tensor(np.concatenate([tokens, targets[-1:]]), dtype=torch.long)[None]  # (1, 65)
    bottom = complete_digits(model, seq, samples, seed, mode)[0].numpy()  # (32,)
    return np.concatenate([seq[0, 1:33].numpy().astype(float), bottom]).reshape(8, 8)


@torch.no_grad()
def greedy_continuation(model: Transformer, tokens: np.ndarray, n: int = 40, mode: str = "full") -> bytes:
    """The n most likely next bytes, one at a time, from the end of `tokens` (context cut to the block size)."""
    seq = torch.as_tensor(tokens, dtype=torch.long)[None]
    out = []
    for _ in range(n):
        ctx = seq[:, -model.config.block_size:]
        nxt = model(ctx, metric_mode=mode, stochastic=False).logits[:, -1].argmax(-1, keepdim=True)
        seq = torch.cat([seq, nxt], dim=1)
        out.append(int(nxt))
    return bytes(out)


def validation_ablation(run: Run, model: Transformer, progress: Callable[[int, int], None] | None = None,
                        completion_images: int = 64, completion_samples: int = 4) -> list[dict]:
    """One row per metric mode: NLL (nats), bits per unit, and completion MSE (digits) or accuracy
    (classifier), on the run's validation set. The same evaluation code as training uses."""
    x, y, _ = validation_arrays(run)
    xt, yt = torch.as_tensor(x), torch.as_tensor(y)
    unit = run.data.get("unit", "token")
    rows = []
    for k, mode in enumerate(MODES):
        res = evaluate(model, xt, yt, metric_mode=mode)
        row = {"run": run.name, "variant": run.variant, "score_form": run.model_config.score_form, "mode": mode,
               "nll": res["nll"], f"bits_per_{unit}": res["nll"] / math.log(2)}
        if "accuracy" in res:
            row["accuracy"] = res["accuracy"]
        if run.dataset == "digits":

            row["completion_mse"] = completion_mse(model, xt, yt, completion_images, completion_samples, mode)
        rows.append(row)
        if progress:
            progress(k + 1, len(MODES))
    return rows


