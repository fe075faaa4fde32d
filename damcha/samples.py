"""One model input, from an upload, typed text or a validation sample of the run's data set."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .checkpoints import Run
from .data import DIGIT_START, fixed_val_windows, load_dataset
from .model import IGNORE_INDEX
from .preprocess import InputError, digit_from_bytes, digit_tokens, text_from_bytes


@dataclass(frozen=True)
class ModelInput:
    """tokens: (T,) what the model reads; targets: (T,) next tokens (IGNORE_INDEX where unknown),
    a class id, or None. levels: (8, 8) for digits; text: the characters read, for text runs."""

    kind: str  # "digit" | "text"
    tokens: np.ndarray
    targets: np.ndarray | int | None
    source: str  # human description: "validation sample 12 (digit 3)", "upload photo.png", ...
    note: str = ""
    levels: np.ndarray | None = None
    label: int | None = None
    text: str | None = None

    def key(self) -> str:
        """Stable hash of what the model sees (cache key and provenance)."""
        h = hashlib.sha256(self.tokens.astype(np.int64).tobytes())
        h.update(repr(self.targets.tolist() if isinstance(self.targets, np.ndarray) else self.targets).encode())
        return h.hexdigest()[:16]

    def token_labels(self) -> list[str]:
        """One short label per input position (pixel coordinates or characters)."""
        if self.kind == "digit":
            if self.tokens[0] == DIGIT_START and len(self.tokens) == 64:
                return ["start"] + [f"r{i // 8}c{i % 8}" for i in range(63)]
            return [f"r{i // 8}c{i % 8}" for i in range(len(self.tokens))]
        return [printable(t) for t in self.tokens]

    def target_labels(self) -> list[str]:
        if not isinstance(self.targets, np.ndarray):
            return []
        if self.kind == "digit":
            return [f"r{i // 8}c{i % 8}={t}" for i, t in enumerate(self.targets)]
        return [printable(t) if t != IGNORE_INDEX else "?" for t in self.targets]


def printable(byte: int) -> str:
    ch = chr(int(byte))
    return {"\n": "⏎", "\t": "⇥", " ": "␣"}.get(ch, ch if 32 <= int(byte) < 127 else f"\\x{int(byte):02x}")


def is_digit_run(run: Run) -> bool:
    return run.dataset in ("digits", "digits-cls")


def input_from_image(run: Run, data: bytes, name: str = "upload") -> ModelInput:
    if not is_digit_run(run):
        raise InputError(f"run {run.name} reads text; upload a text file instead of an image")
    digit = digit_from_bytes(data)
    tokens, targets = digit_tokens(digit.levels, run.model_config.n_classes > 0)
    return ModelInput("digit", tokens, targets, f"image {name}", digit.note, levels=digit.levels)


def input_from_text(run: Run, data: bytes, name: str = "typed text") -> ModelInput:
    if is_digit_run(run):
        raise InputError(f"run {run.name} reads 8x8 digit images; upload an image instead of text")
    T = run.model_config.block_size
    t = text_from_bytes(data, T + 1)  # one byte more than the context: the last target, when there is one
    tokens = t.tokens[:T]
    targets = np.full(len(tokens), IGNORE_INDEX, dtype=np.int64)
    targets[: len(t.tokens) - 1] = t.tokens[1:]
    note = (f"{t.total_bytes} bytes; the model reads the first {len(tokens)} (its context is {T} bytes)"
            if t.cut else f"{len(tokens)} bytes")
    return ModelInput("text", tokens, targets, name, note, text=bytes(tokens.astype(np.uint8)).decode("utf-8", "replace"))


@lru_cache(maxsize=8)
def _validation_arrays(dataset: str, split_seed: int, block_size: int, val_windows: int):
    data = load_dataset(dataset, block_size=block_size, split_seed=split_seed)
    if data.kind == "corpus":
        x, y = fixed_val_windows(data.val_stream, block_size, val_windows)
        return x.numpy(), y.numpy(), None
    return data.val_inputs.numpy(), data.val_targets.numpy(), data.val_labels


def validation_count(run: Run) -> int:
    return len(validation_arrays(run)[0])


def validation_arrays(run: Run) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The run's validation inputs (N, T), targets, and digit labels (None for text)."""
    t = run.train_config
    if run.dataset not in ("digits", "digits-cls", "text"):
        raise InputError(f"validation samples of data set {run.dataset!r} need its local files; upload an input instead")
    return _validation_arrays(run.dataset, int(t.get("split_seed", 0)), run.model_config.block_size, int(t.get("val_windows", 256)))


def validation_input(run: Run, index: int) -> ModelInput:
    x, y, labels = validation_arrays(run)
    if not 0 <= index < len(x):
        raise InputError(f"validation index must be in [0, {len(x) - 1}]")
    tokens = x[index].copy()
    if is_digit_run(run):
        label = int(labels[index])
        pixels = tokens if run.model_config.n_classes else y[index]
        targets = int(y[index]) if run.model_config.n_classes else y[index].copy()
        return ModelInput("digit", tokens, targets, f"validation sample {index} (digit {label})",
                          levels=pixels.reshape(8, 8), label=label)
    text = bytes(tokens.astype(np.uint8)).decode("utf-8", "replace")
    return ModelInput("text", tokens, y[index].copy(), f"validation window {index}", text=text)
