"""What a data set is: model-ready tensors (`DataSet`) and its declaration (`DataSetSpec`).

A DataSet holds model-ready tensors:
  next_token: inputs (N, T) and targets (N, T) next tokens, or a long byte stream (`train_stream`,
    `val_stream`, uint8 or int64, possibly memory-mapped) that `windows` cuts into sequences;
  classification: inputs (N, T) and targets (N,) class ids;
  next_vector: inputs (N, T, F) and targets (N, T, F) continuous vectors.
A data set may also hold a test split (`test_inputs`/`test_targets` or `test_stream`): training
never looks at it; it is evaluated once, after the last epoch, and recorded apart (test.json).
Everything loads from the Python install or a local path; nothing downloads.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from damcha.inputs.datasets.lazy_rows import LazyRows
from damcha.inputs.modalities import MODALITIES

# A split's samples: a tensor, or rows made when indexed (a large image set; see lazy_rows).
Rows = torch.Tensor | LazyRows

TASKS = ("next_token", "classification", "next_vector")


class DataError(ValueError):
    """A data file is missing or not in the expected format (the message names both)."""


def data_file(path: str | Path, expected: str) -> Path:
    """`path`, which must be a regular file (a FIFO would block its reader, a device fill memory): missing,
    a folder, a FIFO or a device are each refused as what they are, naming what was expected."""
    p = Path(path)
    try:
        info = os.stat(p)
    except FileNotFoundError:
        raise DataError(f"{p}: no such file (expected {expected})") from None
    except OSError as e:
        raise DataError(f"{p}: cannot be opened ({e.strerror or type(e).__name__})") from None
    if not stat.S_ISREG(info.st_mode):
        kind = ("a FIFO" if stat.S_ISFIFO(info.st_mode) else "a folder" if stat.S_ISDIR(info.st_mode)
                else "a device" if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode) else "not a file")
        raise DataError(f"{p}: {kind}, not {expected}")
    return p


@dataclass
class DataSet:
    name: str
    task: str  # one of TASKS
    vocab_size: int
    block_size: int
    train_inputs: Rows | None = None
    train_targets: Rows | None = None
    val_inputs: Rows | None = None
    val_targets: Rows | None = None
    train_stream: torch.Tensor | None = None  # a corpus: (N,) bytes (uint8, or int64)
    val_stream: torch.Tensor | None = None
    test_inputs: Rows | None = None  # the held-out test split: evaluated once, after training
    test_targets: Rows | None = None
    test_stream: torch.Tensor | None = None
    n_classes: int = 0
    val_labels: np.ndarray | None = None  # class of each validation sample (for per-class views)
    split: dict = field(default_factory=dict)  # how the split was made: recorded in the run config
    modality: str = "tokens"  # stamped from the data set's declaration by load_dataset

    @property
    def unit(self) -> str:
        """What one loss term is about in its metric names (val_bits_per_<unit>), as the modality says for the task."""
        return MODALITIES[self.modality].metric_unit(self.task)

    @property
    def has_test(self) -> bool:
        return self.test_stream is not None or self.test_inputs is not None

    def tensor(self, name: str) -> torch.Tensor:
        """A split tensor this data set must hold (a corpus's streams; samples' inputs and targets)."""
        value = getattr(self, name)
        if value is None:
            raise ValueError(f"{self.name} has no {name.replace('_', ' ')}")
        return value

    @property
    def stream(self) -> bool:
        """Whether the data is one long sequence cut into windows (a corpus), not fixed samples."""
        return self.train_stream is not None

    def held_out_for_tuning(self, fraction: float, seed: int = 0) -> DataSet:
        """This data set for model selection: `fraction` of the training data (a fixed random subset of the
        samples, or a corpus's last stretch) becomes the validation split and the rest the training split;
        the reported validation and test splits are dropped, so a choice made on it never sees them."""
        if not 0 < fraction < 1:
            raise ValueError(f"the tuning hold-out must be a fraction in (0, 1), not {fraction}")
        split = {**self.split, "tuning_holdout": fraction, "tuning_holdout_seed": seed}
        common: dict[str, Any] = dict(name=self.name, task=self.task, vocab_size=self.vocab_size, block_size=self.block_size,
                      n_classes=self.n_classes, split=split, modality=self.modality)
        if self.stream:
            stream = self.tensor("train_stream")  # (N,)
            cut = int(len(stream) * (1 - fraction))
            return DataSet(**common, train_stream=stream[:cut], val_stream=stream[cut:])
        inputs, targets = self.tensor("train_inputs"), self.tensor("train_targets")
        order = torch.randperm(len(inputs), generator=torch.Generator().manual_seed(seed))  # (N,)
        n_held = max(1, int(len(order) * fraction))
        held, kept = order[:n_held], order[n_held:]
        return DataSet(**common, train_inputs=inputs[kept], train_targets=targets[kept],
                       val_inputs=inputs[held], val_targets=targets[held])


# (path, block_size, split_seed) -> DataSet; a data set checked against published files takes nonstandard_ok too
Loader = Callable[..., DataSet]


def given(path: str | None) -> str:
    """The --data-path of a data set that needs one (load_dataset refuses a missing one before loading)."""
    if not path:
        raise DataError("this data set needs --data-path")
    return path


@dataclass(frozen=True)
class AtScale:
    """What a data set is in the evidence at a scale (damcha/evidence/scales.py): the demo data sets it
    stands in for there, the names looked for under --data-dir, the sequence length (None: the data's
    own), the TrainConfig fields of its runs, and its training samples a run's epoch walks (images;
    corpora walk `steps_per_epoch`), for the budget; and what its runs there differ in from the paper's,
    declared on every claim on it."""

    replaces: tuple[str, ...]
    files: tuple[str, ...]
    train: dict
    block_size: int | None = None
    train_samples: int = 0
    deviations: tuple[str, ...] = ()


@dataclass(frozen=True)
class DataSetSpec:
    """name: what `--dataset` takes. modality: the registered modality its tokens are. task: what
    a model of it predicts. load: (path or None, block_size, split_seed) -> DataSet. bundled: it
    ships with the install (Python, scikit-learn or this repository), so the app can offer its
    validation samples. needs_path: what --data-path must point to ('' when none is needed).
    demo_train: TrainConfig fields of a demo-size run (the evidence's runs). scales: its place in the
    evidence at the scales that run on it (`AtScale`). paper_row: how the paper's tables name it
    ('Enwik8', 'CIFAR-10'; '' where they do not), so a claim on it shows the paper's own numbers."""

    name: str
    title: str
    modality: str
    task: str
    load: Loader
    bundled: bool = False
    needs_path: str = ""
    demo_train: dict = field(default_factory=dict)
    published: str = ""
    scales: dict[str, AtScale] = field(default_factory=dict)  # scale name -> its place in the evidence there
    paper_row: str = ""

    def __post_init__(self):
        if self.modality not in MODALITIES:
            raise ValueError(f"data set {self.name}: modality {self.modality!r} is not registered")
        if self.task not in TASKS:
            raise ValueError(f"data set {self.name}: task {self.task!r} is none of {TASKS}")

    @property
    def unit(self) -> str:
        return MODALITIES[self.modality].metric_unit(self.task)


def windows(stream: torch.Tensor, block_size: int, starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequences of block_size tokens and their next tokens, starting at `starts`."""
    offsets = torch.arange(block_size + 1)  # (T+1,)
    chunk = stream[starts[:, None] + offsets].long()  # (N, T+1): only these bytes are read from a mapped file
    return chunk[:, :-1], chunk[:, 1:]


def fixed_val_windows(stream: torch.Tensor, block_size: int, max_windows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Non-overlapping validation windows, the same every time."""
    n = min(max_windows, (len(stream) - 1) // block_size)
    return windows(stream, block_size, torch.arange(n) * block_size)
