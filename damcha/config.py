"""Model configuration: one dataclass describes every variant the paper compares."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum

ATTENTIONS = ("damcha", "mha")
METRIC_SHARINGS = ("shared", "per_layer")
METRIC_INPUTS = ("adaptive", "static")
SCORE_FORMS = ("row_sum", "bilinear")


class MetricMode(StrEnum):
    """Inference-time weighting of the blocks of M(x) in the row sum (paper Eq. 4).

    full: m_i = sum_j M_ij; diagonal: m_i = M_ii; off_diagonal: m_i = sum_{j != i} M_ij.
    """

    FULL = "full"
    DIAGONAL = "diagonal"
    OFF_DIAGONAL = "off_diagonal"

    @property
    def scales(self) -> tuple[float, float]:
        """(s_ii, s_ij for i != j)."""
        return {"full": (1.0, 1.0), "diagonal": (1.0, 0.0), "off_diagonal": (0.0, 1.0)}[self.value]

    @classmethod
    def parse(cls, value: MetricMode | str) -> MetricMode:
        try:
            return cls(value)
        except ValueError:
            names = ", ".join(m.value for m in cls)
            raise ValueError(f"unknown metric mode {value!r}; expected one of: {names}") from None


@dataclass(frozen=True)
class ModelConfig:
    """A small transformer whose attention is DAMCHA (any ablation) or standard MHA.

    Two configs that differ only in the attention fields build transformers that differ
    only in their attention: embeddings, blocks, MLPs and heads are the same code.
    """

    vocab_size: int = 18
    block_size: int = 64  # longest sequence the position table holds
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 32
    mlp_ratio: int = 4
    dropout: float = 0.0
    causal: bool = True  # causal decoder (LM head) or non-causal encoder
    n_classes: int = 0  # > 0: non-causal encoder with a classification head
    attention: str = "damcha"  # "damcha" | "mha" (the baseline)
    metric_sharing: str = "shared"  # "shared": one M per stack (paper default) | "per_layer"
    metric_input: str = "adaptive"  # "adaptive": M = f(x) | "static": "w/o f(x)", one learned M
    score_form: str = "row_sum"  # "row_sum": paper Eq. 4 | "bilinear": extension beyond the paper
    generator_widths: tuple[int, ...] = (64, 128)  # hidden widths of f; the paper uses (256, 512)
    generator_dropout: float = 0.0
    pad_token: int | None = None  # token id that marks padding, if any
    input_dim: int = 0  # > 0: continuous inputs (e.g. 48-dim CIFAR patches): linear embedding, linear head, MSE

    def __post_init__(self) -> None:
        object.__setattr__(self, "generator_widths", tuple(int(w) for w in self.generator_widths))
        self.validate()

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def is_damcha(self) -> bool:
        return self.attention == "damcha"

    @property
    def variant(self) -> str:
        """Short human name: 'mha', 'damcha', 'damcha-unshared', 'damcha-static', 'damcha-bilinear'..."""
        if not self.is_damcha:
            return "mha"
        parts = ["damcha"]
        if self.metric_sharing == "per_layer":
            parts.append("unshared")
        if self.metric_input == "static":
            parts.append("static")
        if self.score_form == "bilinear":
            parts.append("bilinear")
        return "-".join(parts)

    def validate(self) -> None:
        """Raise ValueError with a clear message for any inconsistent or absurd value."""
        def need(ok: bool, msg: str) -> None:
            if not ok:
                raise ValueError(f"invalid model config: {msg}")

        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd", "mlp_ratio"):
            v = getattr(self, name)
            need(isinstance(v, int) and not isinstance(v, bool) and v > 0, f"{name} must be a positive integer, got {v!r}")
        need(self.n_embd % self.n_head == 0, f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")
        need(0.0 <= self.dropout < 1.0 and 0.0 <= self.generator_dropout < 1.0, "dropout must be in [0, 1)")
        need(self.attention in ATTENTIONS, f"attention must be one of {ATTENTIONS}, got {self.attention!r}")
        need(self.metric_sharing in METRIC_SHARINGS, f"metric_sharing must be one of {METRIC_SHARINGS}, got {self.metric_sharing!r}")
        need(self.metric_input in METRIC_INPUTS, f"metric_input must be one of {METRIC_INPUTS}, got {self.metric_input!r}")
        need(self.score_form in SCORE_FORMS, f"score_form must be one of {SCORE_FORMS}, got {self.score_form!r}")
        need(all(w > 0 for w in self.generator_widths), "generator_widths must be positive")
        need(self.n_classes >= 0, "n_classes must be >= 0")
        need(not (self.n_classes and self.causal), "a classification head needs a non-causal encoder (causal=False)")
        need(self.n_classes > 0 or self.causal, "a non-causal model needs a classification head (n_classes > 0)")
        need(self.pad_token is None or 0 <= self.pad_token < self.vocab_size, "pad_token must be a token id")
        need(self.input_dim >= 0, "input_dim must be >= 0")
        need(not (self.input_dim and (self.n_classes or not self.causal or self.pad_token is not None)),
             "continuous inputs (input_dim > 0) are for causal next-vector prediction, without classes or padding")
        # Refuse configs that would allocate absurd memory before any tensor exists.
        need(self.parameter_estimate() <= 200_000_000, f"config would hold ~{self.parameter_estimate():,} parameters (limit 200M)")

    def parameter_estimate(self) -> int:
        """Parameter count computed from the config alone (exact; checked by a test)."""
        D, V, L = self.n_embd, self.vocab_size, self.n_layer
        n = self.block_size * D + 2 * D  # positions, final norm
        if self.input_dim:
            n += 2 * self.input_dim * D + D + self.input_dim  # linear embedding and regression head, with biases
        else:
            n += V * D  # token embedding
            n += self.n_classes * D + self.n_classes if self.n_classes else V * D  # head (LM head untied, no bias)
        per_block = 4 * D + D * self.mlp_ratio * D * 2 + self.mlp_ratio * D + D  # 2 norms + MLP
        if self.is_damcha:
            per_block += 2 * D * D + 2 * D  # W_V, W_O with biases
        else:
            per_block += 4 * D * D + 4 * D  # W_Q, W_K, W_V, W_O with biases
        n += L * per_block
        if self.is_damcha:
            if self.metric_input == "static":
                gen = D * D
            else:
                widths = (D, *self.generator_widths, D * D)
                gen = sum(a * b + b for a, b in zip(widths[:-1], widths[1:]))
            n += gen * (L if self.metric_sharing == "per_layer" else 1)
        return n

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["generator_widths"] = list(self.generator_widths)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> ModelConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"invalid model config: unknown fields {sorted(unknown)}")
        return cls(**d)


def variant_config(base: ModelConfig, variant: str) -> ModelConfig:
    """The same model with another attention variant (names as in ModelConfig.variant)."""
    presets = {
        "mha": dict(attention="mha"),
        "damcha": dict(attention="damcha", metric_sharing="shared", metric_input="adaptive", score_form="row_sum"),
        "damcha-unshared": dict(attention="damcha", metric_sharing="per_layer", metric_input="adaptive", score_form="row_sum"),
        "damcha-static": dict(attention="damcha", metric_sharing="shared", metric_input="static", score_form="row_sum"),
        "damcha-bilinear": dict(attention="damcha", metric_sharing="shared", metric_input="adaptive", score_form="bilinear"),
    }
    if variant not in presets:
        raise ValueError(f"unknown variant {variant!r}; expected one of {sorted(presets)}")
    return dataclasses.replace(base, **presets[variant])


VARIANTS = ("damcha", "damcha-unshared", "damcha-static", "damcha-bilinear", "mha")
