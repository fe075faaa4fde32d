"""One model input, from an upload, typed text or a validation sample of the run's data set."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from damcha.inputs.datasets import bundled, fixed_val_windows, load_dataset
from damcha.inputs.modalities import Modality, modality_named, task_of
from damcha.inputs.uploads import InputError, digit_from_bytes, digit_tokens, photo_from_bytes, text_from_bytes
from damcha.model.transformer import IGNORE_INDEX

if TYPE_CHECKING:  # a run is only read here (its config, data set and split), never opened
    from damcha.runs.checkpoints import Run


def tokens_sha256(tokens) -> str:
    """SHA-256 of what a model reads, in one canonical layout (int64 ids, float32 vectors): the
    input's name in records and provenance, the same for a list, an array or a tensor of it."""
    tok = np.asarray(tokens)
    tok = tok.astype(np.int64) if np.issubdtype(tok.dtype, np.integer) else tok.astype(np.float32)
    return hashlib.sha256(np.ascontiguousarray(tok).tobytes()).hexdigest()


@dataclass(frozen=True)
class ModelInput:
    """tokens: (T,) what the model reads; targets: (T,) next tokens (IGNORE_INDEX where unknown),
    a class id, or None. modality: what a token is. levels: (8, 8) for digits; text: the
    characters read, for text runs."""

    modality: Modality
    tokens: np.ndarray
    targets: np.ndarray | int | None
    source: str  # human description: "validation sample 12 (digit 3)", "upload photo.png", ...
    note: str = ""
    levels: np.ndarray | None = None
    label: int | None = None
    text: str | None = None
    validation_index: int | None = None
    image: np.ndarray | None = None  # (32, 32, 3) uint8 for colour-image runs

    def key(self) -> str:
        """Stable hash of what the model sees (cache key and provenance)."""
        h = hashlib.sha256(np.asarray(self.tokens).tobytes())
        h.update(repr(self.targets.tolist() if isinstance(self.targets, np.ndarray) else self.targets).encode())
        return h.hexdigest()[:16]

    def token_labels(self) -> list[str]:
        """One short label per input position (pixel coordinates or characters)."""
        return self.modality.token_labels(self.tokens)

    def target_labels(self) -> list[str]:
        return self.modality.target_labels(self.targets)


def run_modality(run: Run) -> Modality:
    return modality_named(run.model_config.modality)


def _needs_upload(run: Run, kind: str) -> Modality:
    modality = run_modality(run)
    if modality.upload != kind:
        takes = f"takes {modality.upload} uploads" if modality.upload else "takes no uploads (use a validation sample)"
        raise InputError(f"run {run.name} reads {modality.title}: it {takes}, not {kind}")
    return modality


def input_from_image(run: Run, data: bytes, name: str = "upload") -> ModelInput:
    modality = _needs_upload(run, "image")
    digit = digit_from_bytes(data)
    tokens, targets = digit_tokens(digit.levels, run.model_config.n_classes > 0)
    return ModelInput(modality, tokens, targets, f"image {name}", digit.note, levels=digit.levels)


def input_from_photo(run: Run, data: bytes, name: str = "upload") -> ModelInput:
    """A colour photo -> the sequence its run's modality reads (a next-patch model's patches, a pixel
    model's 1024 pixel tokens), made as the run's data set makes its images."""
    modality = _needs_upload(run, "photo")
    photo = photo_from_bytes(data)
    tokens, targets = modality.photo_sequences(photo.image[None])  # (1, T) or (1, T, F) each
    picture = modality.seen_picture(tokens[0], targets[0], task_of(run.model_config))
    return ModelInput(modality, tokens[0], targets[0], f"photo {name}", f"{photo.note}; {modality.title}",
                      image=photo.image if picture is None else picture)


def input_from_text(run: Run, data: bytes, name: str = "typed text") -> ModelInput:
    modality = _needs_upload(run, "text")
    T = run.model_config.block_size
    t = text_from_bytes(data, T + 1)  # one byte more than the context: the last target, when there is one
    tokens = t.tokens[:T]
    targets = np.full(len(tokens), IGNORE_INDEX, dtype=np.int64)
    targets[: len(t.tokens) - 1] = t.tokens[1:]
    note = (f"{t.total_bytes} bytes; the model reads the first {len(tokens)} (its context is {T} bytes)"
            if t.cut else f"{len(tokens)} bytes")
    return ModelInput(modality, tokens, targets, name, note, text=bytes(tokens.astype(np.uint8)).decode("utf-8", "replace"))


MAX_TYPED_IDS_CHARS = 200_000
ASCII_ID = re.compile(r"[0-9]+")


def input_from_token_ids(run: Run, text: str, name: str = "typed token ids") -> ModelInput:
    """Token ids typed as integers (separated by spaces or commas): for runs whose tokenizer is not
    here (imported subword models). Each id is the next one's target."""
    modality = _needs_upload(run, "ids")
    if len(text) > MAX_TYPED_IDS_CHARS:
        raise InputError(f"{len(text):,} characters is too long for a list of token ids")
    parts = [p for p in text.replace(",", " ").split() if p]
    if not parts:
        raise InputError("type at least one token id")
    # Plain ASCII digits only: Python's int() would also take '١٢٣', '1_0' and '+5', which no tokenizer writes.
    odd = next((p for p in parts if not ASCII_ID.fullmatch(p)), None)
    if odd is not None:
        shown = odd if len(odd) <= 20 else odd[:20] + "…"
        raise InputError(f"{shown!r} is not a token id: ids are whole numbers written with the digits 0-9, "
                         "separated by spaces or commas")
    V, T = run.model_config.vocab_size, run.model_config.block_size
    too_big = next((p for p in parts if len(p) > 12 or int(p) >= V), None)  # compared before any int64 exists
    if too_big is not None:
        shown = too_big if len(too_big) <= 20 else too_big[:20] + "…"
        raise InputError(f"token id {shown} is outside this model's vocabulary [0, {V - 1}]")
    ids = np.array([int(p) for p in parts], dtype=np.int64)
    tokens = ids[:T]
    targets = np.full(len(tokens), IGNORE_INDEX, dtype=np.int64)
    targets[: len(ids[: T + 1]) - 1] = ids[1: T + 1]
    note = f"{len(ids)} ids; the model reads the first {len(tokens)}" if len(ids) > T else f"{len(tokens)} ids"
    return ModelInput(modality, tokens, targets, name, note)


@lru_cache(maxsize=8)
def _validation_arrays(dataset: str, split_seed: int, block_size: int, val_windows: int):
    data = load_dataset(dataset, block_size=block_size, split_seed=split_seed)
    if data.stream:
        x, y = fixed_val_windows(data.tensor("val_stream"), block_size, val_windows)
        return x.numpy(), y.numpy(), None
    return data.tensor("val_inputs").numpy(), data.tensor("val_targets").numpy(), data.val_labels


def validation_count(run: Run) -> int:
    return len(validation_arrays(run)[0])


def validation_length(run: Run) -> int:
    """How many positions each validation input has (the mean metric M-bar has as many)."""
    return validation_arrays(run)[0].shape[1]


def validation_arrays(run: Run) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The run's validation inputs (N, T), targets, and class labels (None for text)."""
    t = run.train_config
    if not bundled(run.dataset):
        raise InputError(f"validation samples of data set {run.dataset!r} need its local files; upload an input instead")
    x, y, labels = _validation_arrays(run.dataset, int(t.get("split_seed", 0)), run.model_config.block_size,
                                      int(t.get("val_windows", 256)))
    return run_modality(run).frame(x, y), y, labels  # the stored inputs framed as this run reads them


def validation_input(run: Run, index: int) -> ModelInput:
    x, y, labels = validation_arrays(run)
    if not 0 <= index < len(x):
        raise InputError(f"validation index must be in [0, {len(x) - 1}]")
    label = None if labels is None else labels[index]
    task = task_of(run.model_config)
    fields = run_modality(run).validation_fields(x[index].copy(), y[index], label, index, run.dataset, task)
    return ModelInput(run_modality(run), x[index].copy(), **fields)
