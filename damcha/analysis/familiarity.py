"""How familiar an input is to a run: its nearest validation inputs in what the model reads, and
whether it lies farther from all of them than validation inputs lie from one another.

A trained classifier answers for any image, a digit photo from a phone included; whether its answer
means anything depends on how far the preprocessed upload is from the data it was trained on. The
distance is Euclidean on the arrays the model reads (grey levels per pixel, patch vectors); the
reference is the distribution of each validation input's distance to its nearest other validation
input, so "unfamiliar" means farther than `quantile` of the validation set is from its own
neighbours. Only image runs are measured: a byte sequence has no meaningful Euclidean neighbour.
"""

from __future__ import annotations

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
        if self.unfamiliar:
            return (f"Out of distribution: this input is {self.distances[0]:.3g} from its nearest validation input, "
                    f"farther than {share} of validation inputs are from theirs ({self.typical:.3g}). The model "
                    "answers anyway; read its prediction and structures with that in mind.")
        return (f"Within the validation data's range: {self.distances[0]:.3g} from its nearest validation input "
                f"({share} of validation inputs are within {self.typical:.3g} of theirs).")


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
