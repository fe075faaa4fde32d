"""A training run written as TensorBoard event files while it trains (`damcha train --log-dir DIR`).

Everything at the global training step (epoch/epoch maps steps to epochs). Scalars: each step's
loss, learning rate and tokens per second; each epoch's row of metrics.jsonl (train/…,
validation/…, epoch/…). At each snapshot epoch: every
cross-head structure the mechanism declares, taken on one fixed validation input, as an image, and
the main structure (the first declared) of several validation inputs as a projector embedding.
TensorBoard is an optional extra (`pip install damcha[tensorboard]`): only this module needs it.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import torch
from plotly.colors import get_colorscale, sample_colorscale

from damcha.analysis.inspection import inspect_input
from damcha.inputs.datasets import DataSet, windows
from damcha.model.mechanisms import Structure
from damcha.model.transformer import Transformer
from damcha.views.figures import colour_scale

EMBEDDED_INPUTS = 32
MIN_IMAGE_SIDE = 128  # small matrices are enlarged (each entry a block of pixels) to be seen in TensorBoard
MAX_IMAGE_SIDE = 2048

LEVELS = 256  # colours sampled from a scale


@functools.lru_cache(maxsize=8)
def colour_table(colorscale: str) -> np.ndarray:
    """(LEVELS, 3) RGB of one of the app's plotly colour scales, sampled evenly from 0 to 1."""
    rgb = sample_colorscale(get_colorscale(colorscale), list(np.linspace(0, 1, LEVELS)), colortype="tuple")
    return np.asarray(rgb, dtype=float) * 255


def summary_writer_type():
    """torch's SummaryWriter, or a clear error when the optional tensorboard package is missing."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise ValueError("--log-dir writes TensorBoard files, which needs the tensorboard package: "
                         "pip install 'damcha[tensorboard]'") from None
    return SummaryWriter


def fixed_validation_inputs(data: DataSet, n: int) -> tuple[torch.Tensor, list | None]:
    """The first n validation inputs (text: n windows one context apart) and their class labels."""
    if data.val_inputs is not None:
        labels = None if data.val_labels is None else [int(v) for v in data.val_labels[:n]]
        return data.val_inputs[:n], labels
    if data.val_stream is None:
        raise ValueError(f"{data.name}: no validation inputs and no validation stream to draw them from")
    n = min(n, (len(data.val_stream) - 1) // data.block_size)
    starts = torch.arange(n) * data.block_size
    return windows(data.val_stream, data.block_size, starts)[0], None


def structure_image(s: Structure, index: dict) -> np.ndarray:
    """(rows, cols, 3) uint8 picture of a structure's drawn array at `index`; the panels of a
    structure with more than two drawn axes (one matrix per head, …) side by side, a column apart."""
    a = np.asarray(s.at(**index), dtype=float)
    panels = a.reshape(-1, *a.shape[-2:])  # (P, r, c)
    scale = colour_scale(str(s.value_kind), np.nan_to_num(panels))  # the app's scale and range for this value kind
    lo, hi = scale["zmin"], scale["zmax"]
    scaled = np.nan_to_num(np.clip((panels - lo) / ((hi - lo) or 1.0), 0, 1), nan=0.5)
    P, r, c = scaled.shape
    canvas = np.full((r, P * (c + 1) - 1), np.nan)
    for i in range(P):
        canvas[:, i * (c + 1): i * (c + 1) + c] = scaled[i]
    rgb = colour_table(scale["colorscale"])[np.rint(np.nan_to_num(canvas) * (LEVELS - 1)).astype(int)]  # (r, W, 3)
    rgb[np.isnan(canvas)] = 255.0  # the gaps between panels
    side = min(canvas.shape)
    k = max(1, min(-(-MIN_IMAGE_SIDE // side), MAX_IMAGE_SIDE // max(canvas.shape)))
    return np.kron(rgb, np.ones((k, k, 1))).round().astype(np.uint8)


class TensorBoardLog:
    """A `damcha.runs.train.TrainingObserver` writing TensorBoard event files into log_dir."""

    def __init__(self, log_dir: str | Path, embedded_inputs: int = EMBEDDED_INPUTS):
        self._writer_type = summary_writer_type()  # a missing package fails here, before training starts
        self.log_dir, self.embedded_inputs = Path(log_dir), embedded_inputs
        self._writer = None

    @property
    def writer(self):
        """Opened at the first event: under torchrun only rank 0 reports, so only it writes a file."""
        if self._writer is None:
            self._writer = self._writer_type(str(self.log_dir))
        return self._writer

    def step(self, step: int, loss: float, lr: float, tokens_per_second: float) -> None:
        self.writer.add_scalar("train/step_loss", loss, step)
        self.writer.add_scalar("train/learning_rate", lr, step)
        self.writer.add_scalar("train/tokens_per_second", tokens_per_second, step)

    def epoch(self, row: dict, model: Transformer, data: DataSet, snapshot: bool) -> None:
        step = int(row["step"])
        for key, value in row.items():
            if key in ("epoch", "step") or not isinstance(value, int | float) or isinstance(value, bool):
                continue
            group, _, name = key.partition("_")
            tag = {"val": "validation", "train": "train"}.get(group)
            self.writer.add_scalar(f"{tag}/{name}" if tag else f"epoch/{key}", value, step)
        self.writer.add_scalar("epoch/epoch", row["epoch"], step)
        if snapshot:  # at the global step too, so images, embeddings and scalars share one axis
            self.snapshot(step, model, data)
        self.writer.flush()

    def snapshot(self, step: int, model: Transformer, data: DataSet) -> None:
        x, labels = fixed_validation_inputs(data, self.embedded_inputs)
        last = {"layer": 0, "position": -1}
        first = inspect_input(model, x[0])
        for s in first.structures:
            self.writer.add_image(f"structure/{s.name} (validation input 0)", structure_image(s, last), step,
                                  dataformats="HWC")
        if not first.structures:
            return
        main = first.structures[0]
        vectors = [main.at(**last).ravel()]
        vectors += [inspect_input(model, xi).named(main.name).at(**last).ravel() for xi in x[1:]]
        self.writer.add_embedding(torch.as_tensor(np.stack(vectors), dtype=torch.float32), metadata=labels,
                                  global_step=step, tag=f"{main.name} of {len(vectors)} validation inputs")

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
