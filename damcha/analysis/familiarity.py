"""How familiar an input is to a run: its nearest validation inputs in what the model reads, and
whether it lies farther from all of them than validation inputs lie from one another.

A trained classifier answers for any image, a digit photo from a phone included; whether its answer
means anything depends on how far the preprocessed upload is from the data it was trained on. The
distance is Euclidean on the arrays the model reads (grey levels per pixel, patch vectors); the
reference is the distribution of each validation input's distance to its nearest other validation
input, so "unfamiliar" means farther than `quantile` of the validation set is from its own
neighbours. Only image runs are measured so: a byte sequence has no meaningful Euclidean neighbour.
That distance has little power in many dimensions, so every input with targets (any modality) is also
placed by the model's own loss among its losses on validation inputs (`loss_standing`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Familiarity:
    """nearest: indices of the nearest validation inputs (closest first); distances: theirs;
    typical: the `quantile` of validation inputs' nearest-neighbour distances; quantile: which."""

    nearest: tuple[int, ...]
    distances: tuple[float, ...]
    typical: float
    quantile: float

    @property
    def unfamiliar(self) -> bool:
        return self.distances[0] > self.typical

    def sentence(self) -> str:
        share = f"{self.quantile:.0%}"
        weak = (" A distance in raw values says little across this many dimensions (a flat image can sit near many "
                "inputs); where the input has targets, the model's own loss below is the stronger check.")
        if self.unfamiliar:
            return (f"Far in raw values: this input is {self.distances[0]:.3g} from its nearest validation input, "
                    f"farther than {share} of validation inputs are from theirs ({self.typical:.3g}). The model "
                    "answers anyway; read its prediction and structures with that in mind." + weak)
        return (f"Near in raw values: {self.distances[0]:.3g} from its nearest validation input ({share} of "
                f"validation inputs are within {self.typical:.3g} of theirs)." + weak)


@dataclass(frozen=True)
class LossStanding:
    """Where the model's own loss on an input stands among its losses on validation inputs (any modality:
    what the model finds predictable, not a distance in raw values). loss, low, high in the loss's unit
    (nats or squared error); low, high: the validation losses' `tail` and 1 − `tail` quantiles; below: the
    share of validation inputs with a lower loss; n: how many were scored."""

    loss: float
    below: float
    low: float
    high: float
    n: int
    tail: float

    @property
    def unusual(self) -> bool:
        return not self.low <= self.loss <= self.high

    def rank(self) -> str:
        """Where the loss stands, counted ("above all of its losses on 256 validation inputs", "above 240 of ..."): a
        share rounded to a percentage read "above 100%" for 255 of 256."""
        above = round(self.below * self.n)
        count = "all" if above == self.n else str(above)
        if above == 0:
            return f"at or below all of its losses on {self.n} validation inputs"
        return f"above {count} of its losses on {self.n} validation inputs"

    def sentence(self, shown: Callable[[float], str]) -> str:
        """In words, with `shown` writing a loss in the page's unit."""
        where = (f"The model's loss on this input, {shown(self.loss)}, is {self.rank()} (the middle "
                 f"{1 - 2 * self.tail:.0%} lie in {shown(self.low)} … {shown(self.high)}).")
        if self.loss > self.high:
            return (where + " It predicts this input worse than almost any it was validated on. That is what this "
                            "measures; it often means the input is unlike the training data (another script or "
                            "alphabet, a photo of another kind), so read what the model shows with that in mind.")
        if self.loss < self.low:
            return (where + " It predicts this input better than almost any it was validated on. That is what this "
                            "measures; it often means an unusually easy input (flat, blank or repetitive).")
        return where + " Within the range of the validation inputs' losses."


def loss_standing(loss: float, validation_losses: np.ndarray, tail: float = 0.01) -> LossStanding:
    """`loss` (the model's mean loss on one input) against the model's losses on validation inputs (N,)."""
    v = np.asarray(validation_losses, dtype=float)
    if v.size == 0:
        raise ValueError("no validation losses to compare with")
    return LossStanding(float(loss), float((v < loss).mean()), float(np.quantile(v, tail)),
                        float(np.quantile(v, 1 - tail)), int(v.size), tail)


def typical_distance(validation: np.ndarray, quantile: float = 0.99) -> float:
    """The `quantile` of validation inputs' distances to their nearest other validation input: one
    number per run, what an input's nearest distance is compared with."""
    v = np.asarray(validation, dtype=float).reshape(len(validation), -1)  # (N, F)
    square = (v ** 2).sum(1)  # (N,)
    between = np.sqrt(np.maximum(square[:, None] + square[None] - 2 * v @ v.T, 0))  # (N, N)
    np.fill_diagonal(between, np.inf)
    return float(np.quantile(between.min(1), quantile))


def familiarity(tokens: np.ndarray, validation: np.ndarray, k: int = 3, quantile: float = 0.99,
                typical: float | None = None) -> Familiarity:
    """tokens: what the model reads of one input (T,) or (T, P); validation: the same for N inputs
    (N, T) or (N, T, P); typical: typical_distance(validation, quantile) when known already. Raises
    ValueError when their shapes differ (inputs of another length)."""
    x = np.asarray(tokens, dtype=float).reshape(1, -1)  # (1, F)
    v = np.asarray(validation, dtype=float).reshape(len(validation), -1)  # (N, F)
    if x.shape[1] != v.shape[1]:
        raise ValueError(f"this input has {x.shape[1]} values, validation inputs {v.shape[1]}: not comparable")
    to_input = np.sqrt(((v - x) ** 2).sum(1))  # (N,)
    order = np.argsort(to_input)[:k]
    typical = typical_distance(v, quantile) if typical is None else typical
    return Familiarity(tuple(int(i) for i in order), tuple(float(to_input[i]) for i in order), typical, quantile)
