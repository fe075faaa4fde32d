"""Model configuration: one dataclass describes every variant the paper compares.

Which attention a config builds is its `attention` field, a name in the mechanism registry
(`damcha.model.mechanisms`); a variant (`--variant`) is a registered preset of the attention fields.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal, get_args

from damcha.model import mechanisms

# A ceiling on absurd configs only (ten times the largest arm of the paper's experiments, Table 4's w/o sharing
# at 1.37B): whether a model trains on a device is decided against that device's memory before anything is
# allocated (damcha.runs.memory).
MAX_PARAMETERS = 20_000_000_000
MAX_BUFFER_ELEMENTS = 50_000_000
MAX_BLOCK_SIZE = 65_536
# Upper bounds checked before any count is computed, so no config makes even the estimate slow.
FIELD_LIMITS = {"vocab_size": 1_000_000, "n_layer": 256, "n_head": 4_096, "n_embd": 65_536, "mlp_ratio": 64,
                "n_classes": 100_000, "input_dim": 65_536, "mlp_width": 1_048_576, "head_hidden": 1_048_576}


def one_of(values: tuple) -> str:
    """'a', 'b' or 'c'."""
    quoted = [repr(v) for v in values]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]


# The block layout's string choices: the fields' types, and what validate() and the train flags accept.
NormPlacement = Literal["pre", "post"]
PositionEncoding = Literal["learned", "sinusoidal", "rotary"]
Norm = Literal["layer", "rms"]
FeedForward = Literal["gelu", "swiglu"]
CHOICE_TYPES = {"NormPlacement": NormPlacement, "PositionEncoding": PositionEncoding, "Norm": Norm,
                "FeedForward": FeedForward}  # (annotation, as a field's type reads) -> its Literal


@dataclass(frozen=True)
class ModelConfig:
    """A small transformer with a registered attention mechanism (DAMCHA, its ablations, MHA, ...).

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
    attention: str = "damcha"  # a registered mechanism: "damcha", "mha", ...
    pad_token: int | None = None  # token id that marks padding, if any
    input_dim: int = 0  # > 0: continuous inputs (e.g. 48-dim CIFAR patches): linear embedding, linear head, MSE
    modality: str = ""  # what a token is (see damcha.inputs.modalities); "" for a bare model: plain token ids
    # Block layout. This project's models are pre-LN with a learned position table and a final norm;
    # the authors' reference code (damcha.runs.reference imports it) is post-LN with fixed sinusoidal
    # positions, no final norm and a feed-forward width of 2D.
    norm_placement: NormPlacement = "pre"  # "pre": x + f(LN(x)) | "post": LN(x + f(x))
    # "learned": a table of block_size vectors | "sinusoidal": fixed | "rotary": RoPE on the q and k of every
    # layer's attend step (no table; the Llama layout: for DAMCHA q = x_i·m_i and k = x_i are rotated)
    position_encoding: PositionEncoding = "learned"
    norm: Norm = "layer"  # "layer": LayerNorm | "rms": RMSNorm (the Llama layout)
    feed_forward: FeedForward = "gelu"  # "gelu": Linear-GELU-Linear with biases | "swiglu": down(silu(gate x) * up x), no biases
    final_norm: bool = True
    head_bias: bool = False  # the next-token head with a bias (the reference's LM head has one)
    mlp_width: int = 0  # the feed-forward width; 0: mlp_ratio * n_embd (the reference's d_ff may be any width)
    head_hidden: int = 0  # > 0: the vector head is Linear -> GELU -> Linear with this hidden width (the reference's)
    attention_options: tuple[tuple[str, Any], ...] = ()  # the mechanism's settings, (name, value) pairs

    def __post_init__(self) -> None:
        options = self.attention_options.items() if isinstance(self.attention_options, dict) else self.attention_options
        if not isinstance(options, list | tuple | type({}.items())) or not all(
                isinstance(pair, list | tuple) and len(pair) == 2 for pair in options):
            raise ValueError(f"invalid model config: attention_options must be an object of settings (name: value), "
                             f"got {_short(self.attention_options)}")
        pairs = ((str(k), tuple(v) if isinstance(v, list) else v) for k, v in options)  # (JSON's lists as tuples)
        object.__setattr__(self, "attention_options", tuple(sorted(p for p in pairs if not self._at_moved_default(*p))))
        self.validate()

    def _at_moved_default(self, name: str, value: Any) -> bool:
        """A setting that was a ModelConfig field (MOVED_SETTINGS) at its declared default: left out, so a config
        that names it and one that does not are one config, as when it was a field."""
        if name not in MOVED_SETTINGS or self.attention not in mechanisms.mechanism_names():
            return False
        return name in self.mechanism.config_options and value == self.mechanism.declared(name).default

    def with_settings(self, **settings: Any) -> ModelConfig:
        """This config with some of its mechanism's settings (attention_options) set."""
        return dataclasses.replace(self, attention_options=tuple({**dict(self.attention_options), **settings}.items()))

    @property
    def feed_forward_width(self) -> int:
        return self.mlp_width or self.mlp_ratio * self.n_embd

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def mechanism(self) -> mechanisms.Mechanism:
        return mechanisms.get_mechanism(self.attention)

    def option(self, name: str, default: Any = None) -> Any:
        """One of `attention_options` (a mechanism's own setting), or `default`."""
        return dict(self.attention_options).get(name, default)

    def setting(self, name: str) -> Any:
        """A setting the mechanism declares (damcha.model.mechanisms.Setting): the config's value, else the
        declared default."""
        declared = self.mechanism.declared(name)
        return dict(self.attention_options).get(name, declared.default)

    @property
    def variant(self) -> str:
        """The registered variant this config is ('mha', 'damcha', 'damcha-unshared', ...), else
        '<mechanism> (custom)'."""
        matching = [v for v in mechanisms.variants()
                    if v.mechanism == self.attention and all(self._field(k) == val for k, val in v.fields.items())]
        if not matching:
            return f"{self.attention} (custom)"
        return max(matching, key=lambda v: len(v.fields)).name  # the most specific ('diff-official' over 'diff')

    def _field(self, name: str) -> Any:
        if hasattr(self, name):
            return getattr(self, name)
        try:
            return self.setting(name)  # a declared setting: its default where the config does not name it
        except ValueError:
            return self.option(name)

    def validate(self) -> None:
        """Raise ValueError with a clear message for any inconsistent or absurd value."""
        def need(ok: bool, msg: str) -> None:
            if not ok:
                raise ValueError(f"invalid model config: {msg}")

        for f in dataclasses.fields(self):
            kind = str(f.type)  # (annotations are strings here: from __future__ import annotations)
            need(_has_type(getattr(self, f.name), kind),
                 f"{f.name} must be {FIELD_TYPE_NAMES.get(kind, kind)}, got {_short(getattr(self, f.name))}")
        for name, limit in FIELD_LIMITS.items():
            need(getattr(self, name) <= limit, f"{name} {getattr(self, name):,} is above {limit:,}")
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd", "mlp_ratio"):
            v = getattr(self, name)
            need(isinstance(v, int) and not isinstance(v, bool) and v > 0, f"{name} must be a positive integer, got {v!r}")
        need(self.n_embd % self.n_head == 0, f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")
        need(self.attention in mechanisms.mechanism_names(),
             f"attention must be one of {mechanisms.mechanism_names()}, got {self.attention!r}")
        unknown = sorted(set(dict(self.attention_options)) - set(self.mechanism.config_options))
        need(not unknown, f"{self.attention} has no settings {unknown}; it has {list(self.mechanism.config_options)}")
        try:
            self.mechanism.validate(self)
        except ValueError as e:
            need(False, str(e))
        need(isinstance(self.dropout, int | float) and 0.0 <= self.dropout < 1.0, "dropout must be in [0, 1)")
        need(self.position_encoding != "rotary" or self.mechanism.rotary_positions,
             f"{self.attention} scores in its own steps, not through the shared attend step: rotary positions "
             "(RoPE on q and k there) do not apply to it")
        need(self.n_classes >= 0, "n_classes must be >= 0")
        need(not (self.n_classes and self.causal), "a classification head needs a non-causal encoder (causal=False)")
        need(self.n_classes > 0 or self.causal, "a non-causal model needs a classification head (n_classes > 0)")
        need(self.pad_token is None or 0 <= self.pad_token < self.vocab_size, "pad_token must be a token id")
        need(self.input_dim >= 0, "input_dim must be >= 0")
        for name in ("mlp_width", "head_hidden"):
            v = getattr(self, name)
            need(isinstance(v, int) and not isinstance(v, bool) and v >= 0, f"{name} must be an integer >= 0, got {v!r}")
        need(not self.head_hidden or self.input_dim > 0, "head_hidden applies to the vector head (input_dim > 0)")
        need(not (self.input_dim and self.pad_token is not None), "continuous inputs (input_dim > 0) have no padding token")
        need(not (self.input_dim and self.head_hidden and self.n_classes), "head_hidden applies to the vector head")
        # Refuse configs that would allocate absurd memory before any tensor exists: parameters and
        # every buffer the config implies (a sinusoidal table of block_size x n_embd). The part a
        # formula gives comes first, so the mechanism's count is only taken for a plausible size.
        need(self._parameters_outside_attention() <= MAX_PARAMETERS,
             f"config would hold ~{self._parameters_outside_attention():,} parameters outside attention alone "
             f"(limit {MAX_PARAMETERS:,})")
        need(self.parameter_estimate() <= MAX_PARAMETERS,
             f"config would hold ~{self.parameter_estimate():,} parameters (limit {MAX_PARAMETERS:,})")
        need(self.buffer_estimate() <= MAX_BUFFER_ELEMENTS,
             f"config would hold buffers of ~{self.buffer_estimate():,} values (a {self.block_size:,} x {self.n_embd} "
             f"position table; limit {MAX_BUFFER_ELEMENTS:,})")
        need(self.block_size <= MAX_BLOCK_SIZE, f"block_size {self.block_size:,} is above {MAX_BLOCK_SIZE:,}: "
             "one sequence's attention scores alone would not fit in memory")

    def buffer_estimate(self) -> int:
        """Values in the model's non-trained buffers (exact; checked by a test)."""
        return self.block_size * self.n_embd if self.position_encoding == "sinusoidal" else 0

    def parameter_estimate(self) -> int:
        """Parameter count computed from the config alone (exact; checked by a test)."""
        return self._parameters_outside_attention() + _attention_parameters(self.mechanism, self)

    def _parameters_outside_attention(self) -> int:
        D, V, L = self.n_embd, self.vocab_size, self.n_layer
        norm = 2 * D if self.norm == "layer" else D  # LayerNorm: weight and bias; RMSNorm: weight
        n = (self.block_size * D if self.position_encoding == "learned" else 0) + (norm if self.final_norm else 0)
        n += self.input_dim * D + D if self.input_dim else V * D  # linear embedding (with bias) or token table
        if self.n_classes:
            n += self.n_classes * D + self.n_classes  # classification head
        elif self.input_dim:
            n += self.input_dim * D + self.input_dim  # regression head
        else:
            n += V * D + V * self.head_bias  # next-token head (untied)
        F = self.feed_forward_width
        mlp = 3 * D * F if self.feed_forward == "swiglu" else D * F * 2 + F + D
        n += L * (2 * norm + mlp)  # 2 norms + MLP per block
        if self.input_dim and self.head_hidden:
            n += D * self.head_hidden + self.head_hidden + (self.head_hidden - D) * self.input_dim  # the head's hidden layer
        return n

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["attention_options"] = {k: list(v) if isinstance(v, tuple) else v for k, v in self.attention_options}
        for s in self.mechanism.declared_settings:  # named, so a later change of default leaves this run as it was
            if s.saved_before is not None:
                d["attention_options"].setdefault(s.name, self.setting(s.name))
        if not d["attention_options"]:
            del d["attention_options"]  # configs without them read as before
        for name in ("mlp_width", "head_hidden"):  # fields of imported runs only: others' configs stay as they were
            if not d[name]:
                del d[name]
        for name, default in (("norm", "layer"), ("feed_forward", "gelu")):  # the Llama layout's only
            if d[name] == default:
                del d[name]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> ModelConfig:
        d = moved_into_settings(d)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"invalid model config: unknown fields {sorted(unknown)}")
        return cls(**d)


# DAMCHA's settings that were ModelConfig fields until December 2026: every run saved before has them as
# top-level keys (a run of any mechanism: they were fields of every config).
MOVED_SETTINGS = ("metric_sharing", "metric_input", "score_form", "generator_widths", "generator_dropout")


def where_declared(mechanism: str, settings: dict) -> dict:
    """`settings` without those of MOVED_SETTINGS that `mechanism` does not declare: once fields of every config,
    they apply where the mechanism has them (DAMCHA's f) and nowhere else, as when no layer read them."""
    declared = mechanisms.get_mechanism(mechanism).config_options
    return {k: v for k, v in settings.items() if k in declared or k not in MOVED_SETTINGS}


def moved_into_settings(fields: dict) -> dict:
    """A saved config's fields with the MOVED_SETTINGS it holds as top-level keys moved into its mechanism's
    settings (attention_options) where the mechanism declares them (a setting it names itself there wins),
    and dropped where it does not: there they were fields no layer read. Every saved run opens as before."""
    moved = {k: fields[k] for k in MOVED_SETTINGS if k in fields}
    if not moved:
        return fields
    rest = {k: v for k, v in fields.items() if k not in MOVED_SETTINGS}
    options = rest.get("attention_options", {})
    try:
        kept = where_declared(fields.get("attention", "damcha"), moved)
    except (ValueError, TypeError):
        return rest  # no known mechanism: validation refuses it by its name
    if not isinstance(options, dict):
        return rest
    return {**rest, "attention_options": {**kept, **options}} if kept else rest


def with_saved_defaults(fields: dict) -> dict:
    """A saved run's model fields with the value it was trained with for every setting it predates
    (Setting.saved_before); fields that name no known mechanism are left for validation to refuse."""
    options = fields.get("attention_options", {})
    try:
        declared = mechanisms.get_mechanism(fields.get("attention", "damcha")).declared_settings
    except (ValueError, TypeError):
        return fields
    if not isinstance(options, dict):
        return fields
    missing = {s.name: s.saved_before for s in declared if s.saved_before is not None and s.name not in options}
    return {**fields, "attention_options": {**options, **missing}} if missing else fields


FIELD_TYPE_NAMES = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string",
                    "int | None": "an integer or null", "tuple[int, ...]": "a list of at most 16 integers",
                    "tuple[tuple[str, Any], ...]": "an object of settings",
                    **{name: one_of(get_args(choice)) for name, choice in CHOICE_TYPES.items()}}


def _has_type(value: Any, annotation: str) -> bool:
    """Whether a config value has its field's declared type (JSON's numbers, lists and objects as read)."""
    is_int = lambda v: isinstance(v, int) and not isinstance(v, bool)
    checks = {
        "int": is_int,
        "float": lambda v: (is_int(v) or isinstance(v, float)) and math.isfinite(v),
        "bool": lambda v: isinstance(v, bool),
        "str": lambda v: isinstance(v, str) and len(v) <= 200,
        "int | None": lambda v: v is None or is_int(v),
        "tuple[int, ...]": lambda v: isinstance(v, tuple) and len(v) <= 16 and all(map(is_int, v)),
        "tuple[tuple[str, Any], ...]": lambda v: isinstance(v, tuple),
    }
    if annotation in CHOICE_TYPES:
        return value in get_args(CHOICE_TYPES[annotation])
    if annotation not in checks:
        raise TypeError(f"ModelConfig has a field of type {annotation}, which validate() does not know how to check")
    return checks[annotation](value)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def split_fields(values) -> tuple[dict, dict]:
    """(name, value) pairs -> (ModelConfig fields, the mechanism's own settings for attention_options)."""
    own = {f.name for f in dataclasses.fields(ModelConfig)}
    values = dict(values)
    return {k: v for k, v in values.items() if k in own}, {k: v for k, v in values.items() if k not in own}


def variant_config(base: ModelConfig, variant: str) -> ModelConfig:
    """The same model with another registered attention variant (names as in ModelConfig.variant). The settings
    that were ModelConfig fields (MOVED_SETTINGS: f's widths, ...) carry over where the variant's mechanism has
    them and the variant does not set them, as fields did."""
    v = mechanisms.get_variant(variant)
    fields, options = split_fields(v.fields)
    kept = where_declared(v.mechanism, {k: val for k, val in base.attention_options if k in MOVED_SETTINGS})
    return dataclasses.replace(base, attention=v.mechanism, attention_options=tuple({**kept, **options}.items()), **fields)


_COUNTED: dict[tuple[mechanisms.Mechanism, ModelConfig], int] = {}
_MOST_COUNTED = 1024


def _attention_parameters(mechanism: mechanisms.Mechanism, config: ModelConfig) -> int:
    """mechanism.parameter_count(config), remembered per mechanism object and config: counting builds the layers on
    the meta device (about 10 ms), and every config is validated by it when made, so a run loaded, listed or
    compared again is not counted again (the cache is bounded; a mechanism registered anew is counted anew)."""
    key = (mechanism, config)
    if key not in _COUNTED:
        if len(_COUNTED) >= _MOST_COUNTED:
            _COUNTED.pop(next(iter(_COUNTED)))
        _COUNTED[key] = mechanism.parameter_count(config)
    return _COUNTED[key]
