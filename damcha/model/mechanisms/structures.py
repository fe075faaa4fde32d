"""How a mechanism describes what it exposes for inspection: a `Structure` (a named array, its axes,
how it is drawn: kind, value kind, unit, axis titles and labels) and how far it is identifiable.
Every figure of every page draws from these declarations, never from a mechanism's name."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np


class StructureKind(StrEnum):
    """How a cross-head structure is drawn; the number of trailing axes each kind draws."""

    HEAD_GRID_MATRIX = "head_grid_matrix"  # (D, D) read as H x H blocks: heatmap with the head grid
    HEAD_BY_HEAD = "head_by_head"  # (H, H): one value per pair of heads (mixing, block norms)
    PER_HEAD_FORMS = "per_head_forms"  # (H, a, b): one small matrix per head, small multiples
    TOKEN_GATES = "token_gates"  # (T, E): a weight per token and expert or type
    MATRIX = "matrix"  # (a, b): any other matrix, its axes named by the structure
    MASK_PATTERN = "mask_pattern"  # (H, T, T): which keys each head may see
    ATTENTION_MAPS = "attention_maps"  # (H, T, T): a weight per head, query and key

    @property
    def drawn_axes(self) -> int:
        return {"head_grid_matrix": 2, "head_by_head": 2, "per_head_forms": 3, "token_gates": 2,
                "mask_pattern": 3, "attention_maps": 3, "matrix": 2}[self.value]


class ValueKind(StrEnum):
    """What a structure's values are, which decides its colour scale everywhere it is drawn."""

    SIGNED = "signed"  # any real number: diverging scale centred at 0
    MAGNITUDE = "magnitude"  # non-negative (norms, strengths): sequential scale from 0
    PROBABILITY = "probability"  # in [0, 1] (attention, gates, shares): sequential scale from 0 to 1
    MASK = "mask"  # boolean: two colours; a difference of masks is drawn as changed / unchanged
    COUNT = "count"  # non-negative integers: sequential scale from 0

    @property
    def non_negative(self) -> bool:
        return self is not ValueKind.SIGNED


# What an index along a drawn axis names: heads and experts counted from 1, tokens by their
# labels, coordinates and positions from 0. Axis names not listed here are counted from 1.
COORDINATE_AXES = ("row", "col", "d", "D", "coordinate")
TOKEN_AXES = ("token", "query", "key")
AXIS_TITLES = {
    "row": "row", "col": "column", "d": "coordinate of the head's slice", "D": "coordinate of x",
    "head": "head", "head_q": "head i", "head_k": "head j", "head_i": "head i", "head_j": "head j",
    "head_out": "head h (mixed)", "head_src": "source head g", "expert": "expert", "expert_i": "expert i",
    "expert_j": "expert j", "token": "token", "query": "query", "key": "key", "chunk": "chunk j",
    "type": "head type", "use": "map", "share": "share", "input": "input", "coordinate": "coordinate",
}


class Identifiability(StrEnum):
    """What training can determine about a structure."""

    LEARNED = "learned"  # every entry reaches the loss on its own
    FIXED = "fixed"  # not a trained quantity (a mask, a constant)
    UNIDENTIFIABLE = "unidentifiable"  # receives no gradient signal of its own (initialisation residue)
    PARTLY = "partly identifiable"  # a learned part plus an unidentifiable residue


@dataclass(frozen=True)
class Structure:
    """One named array a mechanism exposes for inspection.

    values: numpy array whose leading axes index where it was taken (among "layer", "position",
    "token") and whose trailing `kind.drawn_axes` axes are drawn. axes: one name per axis of values.

    How it is drawn, the same in every figure (inspector, dynamics, comparisons, exports):
    labels: names of the entries along a drawn axis (axis name -> labels); without them an axis is
        labelled by `axis_labels` (heads and experts from 1, tokens by their labels).
    axis_titles: what a drawn axis means (axis name -> title); default `AXIS_TITLES`.
    value_kind: what the values are (decides the colour scale); unit: what they are measured in
        (the colour bar's title; default: the structure's name).
    drawn_under: the per-call choice the values were taken under, where it changes them (DAMCHA's m_i:
        the metric mode); figure titles name it.
    """

    name: str
    title: str
    values: np.ndarray
    axes: tuple[str, ...]
    kind: StructureKind
    description: str
    identifiability: Identifiability
    labels: dict = field(default_factory=dict)
    value_kind: ValueKind = ValueKind.SIGNED
    unit: str = ""
    axis_titles: dict = field(default_factory=dict)
    drawn_under: str = ""

    def __post_init__(self) -> None:
        if len(self.axes) != self.values.ndim:
            raise ValueError(f"structure {self.name}: {len(self.axes)} axis names for a {self.values.ndim}-d array")
        if self.values.ndim < self.kind.drawn_axes:
            raise ValueError(f"structure {self.name}: a {self.kind} needs at least {self.kind.drawn_axes} axes")

    @property
    def index_axes(self) -> tuple[str, ...]:
        return self.axes[: self.values.ndim - self.kind.drawn_axes]

    @property
    def drawn(self) -> tuple[str, ...]:
        """The names of the drawn axes."""
        return self.axes[self.values.ndim - self.kind.drawn_axes:]

    def axis_title(self, axis: str) -> str:
        return self.axis_titles.get(axis) or AXIS_TITLES.get(axis, axis.replace("_", " "))

    def axis_labels(self, axis: str, n: int, token_labels=()) -> list[str]:
        """One label per index along a drawn axis: the structure's own labels, else token labels for
        token axes, numbers from 0 for coordinates, and '<noun> 1..n' for heads, experts and the like."""
        own = self.labels.get(axis)
        if own is not None and len(own) == n:
            return [str(x) for x in own]
        if axis in TOKEN_AXES and len(token_labels) == n:
            return [str(x) for x in token_labels]
        if axis in COORDINATE_AXES or axis in TOKEN_AXES:
            return [str(i) for i in range(n)]
        noun = axis.split("_")[0]
        return [f"{noun} {i + 1}" for i in range(n)]

    @property
    def colorbar_title(self) -> str:
        return self.unit or self.name.replace("_", " ")

    def size(self, axis: str) -> int:
        """How many values the structure has along an index axis (1 when it has no such axis)."""
        return self.values.shape[self.axes.index(axis)] if axis in self.index_axes else 1

    def at(self, **index: int) -> np.ndarray:
        """The drawn array at the given layer/position indices; an axis the structure lacks, or of
        size 1 (shared across layers, one metric per sequence), is taken at 0."""
        out = self.values
        for axis in self.index_axes:
            n = out.shape[0]
            out = out[min(int(index.get(axis, 0)), n - 1) if n > 1 else 0]
        return out

    def __repr__(self) -> str:
        shape = "x".join(map(str, self.values.shape))
        return f"Structure({self.name!r}: {shape} {self.axes}, {self.kind}, {self.identifiability})"
