"""The protocol every attention mechanism follows: its call signature and returned record
(`AttentionOutput`), per-call options, declared settings and choices, interventions, variants, and
the `Mechanism` class itself. What a mechanism exposes for inspection is described with
`damcha.model.mechanisms.structures`; the shared attention maths is `damcha.model.mechanisms.operations`.

A mechanism is one module that subclasses `Mechanism` and registers itself (see
`damcha.model.mechanisms.register`). The transformer, inspection, figures and pages only ever talk to
this interface, never to a particular mechanism.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import numpy as np
import torch
from torch import nn

from damcha.model.mechanisms.structures import Structure

if TYPE_CHECKING:
    from damcha.model.config import ModelConfig
    from damcha.model.mechanisms.cache import LayerCache
    from damcha.model.transformer import Transformer


# ----------------------------------------------------------------------------- forward options

@dataclass(frozen=True)
class ForwardOptions:
    """Per-call choices of one mechanism (inference-time ablations, explicit paths, ...).

    Each mechanism declares its own subclass with typed fields; a mechanism without per-call
    choices uses this empty one. Options are call arguments, never module state, so one cached
    model serves every caller.
    """


# A mechanism's own ForwardOptions subclass: what its layers' calls and its methods take.
OptionsT = TypeVar("OptionsT", bound=ForwardOptions)


# ----------------------------------------------------------------------------- returned records

@dataclass(frozen=True)
class LayerCall(Generic[OptionsT]):
    """What a layer is called with besides its input: `layer(x, call) -> AttentionOutput`, x (B, T, D) the
    block's normed input.

    Fields:
        real (`torch.BoolTensor` of shape `(B, T)`, *optional*): the real tokens; None: no padding.
        mask (`torch.BoolTensor` of shape `(B, 1, T, T)`, *optional*): the allowed (query, key) pairs; None:
            plain causal or none, as `causal` says (see `attention_mask`).
        causal (`bool`): whether a query sees only the keys at or before it.
        options (`OptionsT`): the mechanism's ForwardOptions, never stored on the module (one cached model
            serves every caller).
        need_weights (`bool`): return the attention weights and internals (AttentionOutput).
        stochastic (`bool`): dropout and other sampling apply (training), independent of module.train().
        shared (*optional*): what `Mechanism.run_shared` computed once for the stack (DAMCHA's shared metric,
            a HeadMetric), or None; its type is the mechanism's own.
        site (`Callable[[str, torch.Tensor], torch.Tensor]`, *optional*): with need_weights, called as
            site(name, tensor) -> tensor on the pre-softmax scores ("attn_scores", `(B, H, T, T)`) and the
            weights ("pattern", `(B, H, T, T)`) of the layer's attend step, so hooks can read or replace them
            (damcha.interop.lens); None: no hooks.
        rotary (`bool` or `torch.LongTensor` of shape `(B, T)` or `(T,)`): the attend step rotates q and k by
            their positions (RoPE; the config's position_encoding "rotary"): True, positions 0..T-1; a tensor,
            those positions (a Hugging Face model's position_ids).
        cache (`LayerCache`, *optional*): this layer's keys and values of the tokens read before
            (damcha.model.mechanisms.cache; the layer attends through `attend_through_cache`, and `mask` holds
            the new queries' offsets into them); None: the call holds the whole sequence.
    """

    real: torch.Tensor | None
    mask: torch.Tensor | None
    causal: bool
    options: OptionsT
    need_weights: bool = False
    stochastic: bool = False
    shared: Any = None  # the mechanism's own type (Mechanism.run_shared's result)
    site: Callable[[str, torch.Tensor], torch.Tensor] | None = None
    rotary: bool | torch.Tensor = False
    cache: LayerCache | None = None


@dataclass
class AttentionOutput:
    """What a layer returns.

    Fields:
        y (`torch.FloatTensor` of shape `(B, T, D)`): the layer's output.
        weights (`torch.FloatTensor` of shape `(B, H, T, T)`, *optional*): the attention that multiplies the
            values; required when the call has need_weights=True, None otherwise.
        internals (*optional*): the mechanism's own record of what it computed (DAMCHA's HeadMetric, MoA's
            gates, ...); required when need_weights is True (inspection reads it in `Mechanism.structures`),
            optional otherwise; it describes the call's options (an intervened metric, not the trained one).
        aux_loss (`torch.FloatTensor` of shape `()`, *optional*): a scalar the mechanism adds to the training
            loss (MoA's load balancing), or None.
    """

    y: torch.Tensor
    weights: torch.Tensor | None = None
    internals: Any = None
    aux_loss: torch.Tensor | None = None


# ----------------------------------------------------------------------------- declared settings

# Bounds on any declared setting, so no config's values make building (or counting) a model slow.
MAX_SETTING_INT = 65_536
MAX_SETTING_ITEMS = 16


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class Setting:
    """A setting of a mechanism, declared once: config validation, the train CLI's `--option` help
    and the model card all read this declaration.

    kind: int, float, str or tuple (of ints). default: the value when a config does not set it
    (None: computed from the rest of the config, as `help` says). saved_before: for a setting added after runs were saved (or whose default changed), the value
    those runs were trained with: a saved config without it loads with this value, and every config
    saved from now on names the setting explicitly."""

    name: str
    kind: type
    default: Any
    help: str
    choices: tuple = ()
    minimum: float | None = None
    saved_before: Any = None

    def check(self, value: Any) -> None:
        """Raise ValueError naming the setting when `value` is not one it accepts."""
        if value is None and self.default is None:
            return
        if self.kind is tuple:
            ok = isinstance(value, tuple | list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
            items = list(value) if ok else []
        else:
            numeric = self.kind is float and isinstance(value, int)
            ok = (isinstance(value, self.kind) or numeric) and not isinstance(value, bool)
            items = [value]
        if not ok:
            raise ValueError(f"{self.name} must be {self._kind_name()}, got {_short(value)}")
        if self.kind is float and not math.isfinite(value):
            raise ValueError(f"{self.name} must be a finite number, got {value!r}")
        if self.kind is tuple and len(items) > MAX_SETTING_ITEMS:
            raise ValueError(f"{self.name} has {len(items):,} entries; at most {MAX_SETTING_ITEMS} are accepted")
        if self.kind in (int, tuple) and any(v > MAX_SETTING_INT for v in items):
            raise ValueError(f"{self.name} must be at most {MAX_SETTING_INT:,}, got {_short(value)}")
        if self.kind is str and len(value) > 200:
            raise ValueError(f"{self.name} is a string of {len(value):,} characters; no setting is that long")
        if self.choices and value not in self.choices:
            raise ValueError(f"{self.name} must be one of {self.choices}, got {value!r}")
        if self.minimum is not None and any(v < self.minimum for v in items):
            raise ValueError(f"{self.name} must be at least {self.minimum:g}, got {value!r}")

    def _kind_name(self) -> str:
        return {int: "an integer", float: "a number", str: "a string", tuple: "a list of integers"}[self.kind]

    def describe(self) -> str:
        """One line for help texts: name, choices or kind, default, meaning."""
        what = "|".join(map(str, self.choices)) if self.choices else self.kind.__name__
        default = "" if self.default is None else f", default {self.default}"
        return f"{self.name} ({what}{default}): {self.help}"


@dataclass(frozen=True)
class Choice:
    """A per-call choice of a mechanism (a field of its ForwardOptions) that pages offer as a
    control: its values (the default, the model as trained, first), what it means, and the key it
    keeps in the page's URL."""

    name: str
    values: tuple[str, ...]
    help: str
    url_key: str
    titles: tuple[str, ...] = ()  # what a reader sees for each value (default: the value in words)

    @property
    def label(self) -> str:
        return self.name.replace("_", " ").capitalize()

    def title_of(self, value: str) -> str:
        """A value as pages, tables and figures show it: its title, never the code's name for it."""
        if value in self.values and len(self.titles) == len(self.values):
            return self.titles[self.values.index(value)]
        return str(value).replace("_", " ")


@dataclass(frozen=True)
class InferenceAblation:
    """A per-call choice whose every value the Ablation page and its shipped table evaluate on the validation
    set (DAMCHA: its metric modes, the paper's Table 3). choice: one of the mechanism's option_choices, whose
    first value is the model as trained. note(config): what the page says beside the results of a run with
    this config (its form of scoring decides how to read them). row(config): the columns a table row of
    such a run carries besides its measures."""

    choice: str
    note: Callable[[Any], str]
    row: Callable[[Any], dict] = lambda config: {}


class MetricAccess:
    """How analyses reach the D x D metric M of a mechanism that scores with one (Mechanism.metric is
    not None): the options that intervene on M, the modules whose output is M, and M itself, so the
    attribution, intervention and dynamics code holds no mechanism's types. A metric source is one
    generator of M: one for a stack that shares it, else one per layer."""

    def explicit(self, choices: dict[str, Any] | None = None) -> ForwardOptions:
        """Options (under the named per-call choices) of a call that computes M as a module's output,
        so a hook can read and differentiate it."""
        raise NotImplementedError

    def blocks_scaled(self, scales: np.ndarray) -> ForwardOptions:
        """Options scaling each (H, H) block M_ij of the metric by scales[i, j]."""
        raise NotImplementedError

    def with_reference(self, reference: torch.Tensor, alpha: float) -> ForwardOptions:
        """Options using reference + alpha (M(x) - reference) for M; reference (L_m, P, D, D)."""
        raise NotImplementedError

    def learned_only(self) -> ForwardOptions:
        """Options keeping only the part of M the loss can reach (DAMCHA's row sum: each block m_i / H)."""
        raise NotImplementedError

    def scoring_form(self, config: ModelConfig) -> str:
        """How M scores, in words for the sentences beside the numbers ("row sum", "bilinear")."""
        raise NotImplementedError

    def residue_learned(self, config: ModelConfig) -> bool:
        """Whether the part of M that `learned_only` drops is trained (False: the loss cannot reach it)."""
        raise NotImplementedError

    def output_modules(self, model: Transformer) -> list[nn.Module]:
        """Per metric source, the module whose output is M (flattened per position, or (D, D) when static)."""
        raise NotImplementedError

    def records(self, model: Transformer, layers: Sequence[Any]) -> list[Any]:
        """Per metric source, its layer's internals from a forward pass under `explicit` options (with
        .full (B, P, D, D) and .head (B, P, H, d, d))."""
        raise NotImplementedError

    def metrics_at(self, model: Transformer, layers: Sequence[Any], position: int, batch: int) -> torch.Tensor:
        """M of each of a batch's `batch` inputs at one query position, per metric source: (B, L_m, D, D),
        from the layers of a forward pass with its internals."""
        raise NotImplementedError

    def parameter_split(self, model: Transformer) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The weights that produce M split into the part the loss cannot reach and the rest (DAMCHA's row
        sum: the within-row residual of f's last layer and its row mean), per source; float64."""
        raise NotImplementedError


# ----------------------------------------------------------------------------- the protocol

class Mechanism(Generic[OptionsT]):
    """An attention mechanism: how to build its layers, and what it shows about itself.

    Subclasses set `name`, `title`, `reference` and `options_type`, implement `build_layer`, and
    may override `build_shared` (a module run once per stack, its output handed to every layer),
    `validate`, `structures` and `parameter_count`.
    """

    name: ClassVar[str]
    title: ClassVar[str]
    reference: ClassVar[str] = ""
    options_type: ClassVar[type[ForwardOptions]] = ForwardOptions
    # This mechanism's settings, declared once (see Setting).
    declared_settings: ClassVar[tuple[Setting, ...]] = ()
    # Per-call choices a page offers as controls (see Choice).
    option_choices: ClassVar[tuple[Choice, ...]] = ()
    # Whether the weights that multiply the values can be negative (mixed after the softmax, a difference
    # of maps, a learned collapse): summaries that read them as probabilities (entropies) do not apply.
    signed_attention: ClassVar[bool] = False
    # Why torch.compile cannot capture this mechanism's forward and backward as one graph ('' when it
    # can: every registered mechanism today); tests/integration/test_compile_fullgraph.py holds every one to it.
    graph_break: ClassVar[str] = ""
    # Methods of the shared module (build_shared) called other than through forward: FSDP registers
    # them so they gather the module's sharded weights too.
    shared_entry_points: ClassVar[tuple[str, ...]] = ()
    # Whether every score goes through the shared attend step with call.rotary (operations.attend), where
    # rotary position embeddings act on q and k: declared by a mechanism that passes it on (a layer that
    # does not would silently drop the positions of the Llama layout, so the default is no).
    rotary_positions: ClassVar[bool] = False
    # Whether a causal model of this mechanism can read a PrefixCache (generation without recomputing the
    # prefix): its layers attend through operations.attend_through_cache when call.cache is set, and its
    # shared module (if any) takes run_shared's `prefix`. Others are refused a cache in words.
    decodes_with_cache: ClassVar[bool] = False

    @property
    def config_options(self) -> tuple[str, ...]:
        """Names of the settings a config holds in `attention_options`."""
        return tuple(s.name for s in self.declared_settings)

    def declared(self, name: str) -> Setting:
        found = next((s for s in self.declared_settings if s.name == name), None)
        if found is None:
            raise ValueError(f"{self.title} has no setting {name!r}")
        return found

    def choice(self, name: str) -> Choice | None:
        return next((c for c in self.option_choices if c.name == name), None)

    def build_layer(self, config: ModelConfig, layer_index: int) -> nn.Module:
        raise NotImplementedError

    def build_shared(self, config: ModelConfig) -> nn.Module | None:
        return None

    def run_shared(self, module: Any, x: torch.Tensor, real: torch.Tensor | None, options: OptionsT,
                   stochastic: bool, prefix: dict | None = None) -> Any:
        """Run the shared module on the stack input x (B, T, D); its result goes to every layer. prefix:
        with a cache, the module's state of the tokens read before (only where decodes_with_cache)."""
        return module(x, real, options, stochastic)

    def validate(self, config: ModelConfig) -> None:
        """Raise ValueError for configs this mechanism cannot build: every declared setting is
        checked here; a mechanism with rules across settings adds them (calling this first)."""
        for s in self.declared_settings:
            s.check(config.setting(s.name))

    def options(self, options: ForwardOptions | None) -> ForwardOptions:
        """The options of one call, checked against this mechanism's type (None: defaults)."""
        if options is None:
            return self.options_type()
        own = type(options) is self.options_type or (
            isinstance(options, self.options_type) and self.options_type is not ForwardOptions)
        if not own:
            raise ValueError(f"{self.title} takes {self.options_type.__name__}, not {type(options).__name__}")
        return options

    def options_from(self, choices: dict[str, Any]) -> ForwardOptions:
        """Options from named choices (e.g. {"metric_mode": "diagonal"}). A choice this mechanism does
        not have is refused unless it asks for that choice's default (the whole model)."""
        own = {f.name for f in dataclasses.fields(self.options_type)}
        for name, value in choices.items():
            if name not in own and str(value) != DEFAULT_CHOICES.get(name):
                raise ValueError(f"{self.title} has no option {name!r}: only the default applies")
        return self.options_type(**{k: v for k, v in choices.items() if k in own})

    def parameter_count(self, config: ModelConfig) -> int:
        """Exact number of attention parameters of the whole stack (layers and shared module):
        counted on modules built on the meta device, so nothing is allocated however large the
        config (a mechanism may override this with a formula)."""
        with torch.device("meta"):
            modules = [self.build_layer(config, i) for i in range(config.n_layer)]
            shared = self.build_shared(config)
        return sum(p.numel() for m in [*modules, shared] if m is not None for p in m.parameters())

    def structures(self, model: nn.Module, layers: Sequence[Any], positions: np.ndarray,
                   options: OptionsT) -> list[Structure]:
        """The cross-head structures of one input (batch of one), from what the layers returned
        (each with .attention (1, H, T, T) and .internals, the layer's own record). positions: the
        query positions to take per-position structures at (-1: whole sequence). The first returned
        is the main one (drawn for the mechanism where one structure stands for it)."""
        return []

    def inference_bytes(self, config: ModelConfig, T: int) -> int:
        """Memory a forward pass without gradients holds per sequence of T tokens beyond the usual
        activations (DAMCHA: a shared metric per position), so evaluation can size its batches."""
        return 0

    def sequence_profile(self, model: nn.Module, layers: Sequence[Any], options: OptionsT,
                         progress: Callable[[int, int], None] | None = None, chunk: int | None = None) -> list[Structure]:
        """Small per-position summaries at every position of one input (kind MATRIX, axes
        (layer, token, ...)), computed `chunk` positions at a time so no per-position matrix exists whole;
        the cheap overview of a long input whose full structures are taken only where viewed."""
        return []

    # The per-call choice the Ablation page evaluates on the validation set, or None (see InferenceAblation).
    inference_ablation: ClassVar[InferenceAblation | None] = None

    def metric_access(self) -> MetricAccess | None:
        """How analyses reach this mechanism's metric M, where `metric` is not None."""
        return None

    def metric(self, config: ModelConfig) -> str | None:
        """Whether the mechanism scores with a D x D metric M whose layer internals expose it (`.full`,
        the `metric` structure): "adaptive" (M(x) computed from each input), "static" (one learned M),
        or None. Attribution to M(x), its statistics over a data set and the metric figures use it."""
        return None

    def metric_count(self, config: ModelConfig) -> int:
        """How many D x D metrics a stack of `config` holds per position (one shared, or one per layer); 0 where
        `metric` is None. Inspection sizes its per-position matrices by it."""
        return 0

    def single_layer(self, config: ModelConfig) -> ModelConfig:
        """The config of one self-contained layer of this mechanism (the efficiency benchmark builds
        one layer alone; a mechanism whose layers share a module may need to say how)."""
        return config

    def interventions(self, config: ModelConfig) -> list[Intervention]:
        """The interventions this mechanism supports (the interventions page offers only these)."""
        return []

    def structure_sources(self, model: nn.Module) -> dict[str, list[nn.Module]]:
        """The modules that compute this mechanism's per-input structure from what they are given, by
        where they act ("layer 1", "the shared metric"), each called once per forward pass: patching
        the structure from another input replaces their outputs by those they gave that input
        (damcha.analysis.structure_patching). Empty (the default): the mechanism's structures are
        learned weights, the same for every input, and there is nothing to patch."""
        return {}

    def hook_sites(self, model: nn.Module) -> dict[str, tuple[nn.Module, str]]:
        """This mechanism's own tensors for interpretability hooks (damcha.interop.lens), beyond the
        canonical ones every layer has: "prefix.hook_name" -> (module, field), the field of the record
        the module returns (DAMCHA: the shared metric's context and per-head metrics). Default: none."""
        return {}

    def head_output_site(self, layer: nn.Module, config: ModelConfig) -> nn.Linear | None:
        """The module whose input is the H head outputs side by side (B, T, H · w), one equal slice per
        head: where head-level interventions (zero- and mean-ablation, patching) act, for every
        mechanism alike. Default: the layer's output projection `proj`. None: this mechanism's heads
        do not meet there (the page says why, from `head_site_note`)."""
        proj = getattr(layer, "proj", None)
        if isinstance(proj, nn.Linear) and proj.in_features % config.n_head == 0:
            return proj
        return None

    def head_site_note(self, config: ModelConfig) -> str:
        """Why head-level interventions do not apply, where head_output_site gives None."""
        return f"{self.title}'s layers have no output projection fed with one slice per head."

    def settings(self, config: ModelConfig) -> dict[str, Any]:
        """This mechanism's settings in a config, for model cards (name -> value)."""
        return {s.name: config.setting(s.name) for s in self.declared_settings}

    def notes(self, config: ModelConfig) -> list[str]:
        """Sentences a page shows beside this mechanism's structures (what is learned, caveats)."""
        return []

    def identifiability_note(self, config: ModelConfig) -> str:
        return ""


# Each registered per-call choice's value that means "the model as trained" (its first), which every other
# mechanism accepts as its own model: filled by the registry (damcha.model.mechanisms.register).
DEFAULT_CHOICES: dict[str, str] = {}


def metric_access_of(mechanism: Mechanism) -> MetricAccess:
    """How analyses reach `mechanism`'s metric M; refused in words for a mechanism without one."""
    access = mechanism.metric_access()
    if access is None:
        raise ValueError(f"{mechanism.title} has no metric M(x)")
    return access


@dataclass(frozen=True)
class Param:
    """A parameter of an intervention: kind "head" (an index 0..H-1), "fraction" (a number in
    [low, high]), "input" (another input of the same length), "mean" (the validation mean; no control)."""

    name: str
    kind: str
    low: float = 0.0
    high: float = 1.0
    default: float = 0.0


@dataclass(frozen=True)
class Intervention:
    """A change of a mechanism's forward pass, given as forward options (never as state on the
    model). `make(model, tokens, **params)` returns the options; interventions with an "input" or
    "mean" parameter receive what they need from damcha.analysis.interventions."""

    name: str
    title: str
    description: str
    params: tuple[Param, ...] = ()
    make: Any = None


@dataclass(frozen=True)
class Variant:
    """A named configuration of a mechanism: `--variant NAME` sets `fields` on the model config."""

    name: str
    mechanism: str
    fields: dict = field(default_factory=dict)
    description: str = ""
