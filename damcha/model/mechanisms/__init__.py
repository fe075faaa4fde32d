"""Attention mechanisms as plug-ins: one module each, one protocol (`Mechanism`), one registry.

    register(mechanism, *variants)   add a mechanism and the named variants `--variant` offers
    get_mechanism(name)              the mechanism a config's `attention` field names
    variant_names(), get_variant()   the registered variants (the train CLI, run labels, benchmark)

Adding a mechanism: write a module with a `Mechanism` subclass whose layers take the shared
call signature (see `base.py`) and return `AttentionOutput`, declare its `Structure`s, and
register it here (or, from outside the package, call `register` before building a model).
"""

from __future__ import annotations

from damcha.model.mechanisms.base import (
    DEFAULT_CHOICES,
    AttentionOutput,
    Choice,
    ForwardOptions,
    InferenceAblation,
    Intervention,
    LayerCall,
    Mechanism,
    MetricAccess,
    Param,
    Setting,
    Variant,
    metric_access_of,
)
from damcha.model.mechanisms.colmha import ColMHA, ColMHAAuthors
from damcha.model.mechanisms.damcha.layer import DamchaOptions
from damcha.model.mechanisms.damcha.mechanism import Damcha
from damcha.model.mechanisms.dcmha import DCMHA, DCMHAAuthors
from damcha.model.mechanisms.diff import Differential
from damcha.model.mechanisms.iha import InterleavedHeads
from damcha.model.mechanisms.knocking import KnockingHeads
from damcha.model.mechanisms.mha import MHA
from damcha.model.mechanisms.mma import MMA
from damcha.model.mechanisms.moa import MoA, MoAAuthors
from damcha.model.mechanisms.operations import attend, attention_mask
from damcha.model.mechanisms.structures import Identifiability, Structure, StructureKind, ValueKind
from damcha.model.mechanisms.tha import TalkingHeads

_MECHANISMS: dict[str, Mechanism] = {}
_VARIANTS: dict[str, Variant] = {}


def register(mechanism: Mechanism, *variants: Variant) -> None:
    """Add a mechanism (replacing one of the same name) and its variants."""
    _MECHANISMS[mechanism.name] = mechanism
    DEFAULT_CHOICES.update({c.name: c.values[0] for c in mechanism.option_choices})
    for v in variants:
        if v.mechanism != mechanism.name:
            raise ValueError(f"variant {v.name} names mechanism {v.mechanism}, not {mechanism.name}")
        _VARIANTS[v.name] = v


def unregister(name: str) -> None:
    """Remove a mechanism and its variants (tests that register a toy mechanism clean up with this)."""
    _MECHANISMS.pop(name, None)
    for v in [v for v in _VARIANTS.values() if v.mechanism == name]:
        del _VARIANTS[v.name]


def get_mechanism(name: str) -> Mechanism:
    try:
        return _MECHANISMS[name]
    except KeyError:
        raise ValueError(f"unknown attention mechanism {name!r}; registered: {sorted(_MECHANISMS)}") from None


def mechanism_names() -> tuple[str, ...]:
    return tuple(_MECHANISMS)


def variant_names() -> tuple[str, ...]:
    return tuple(_VARIANTS)


def get_variant(name: str) -> Variant:
    try:
        return _VARIANTS[name]
    except KeyError:
        raise ValueError(f"unknown variant {name!r}; expected one of {sorted(_VARIANTS)}") from None


def variants() -> tuple[Variant, ...]:
    return tuple(_VARIANTS.values())


_DAMCHA = dict(metric_sharing="shared", metric_input="adaptive", score_form="row_sum")
register(
    Damcha(),
    Variant("damcha", "damcha", _DAMCHA, "shared f(x), row sum: the paper's default"),
    Variant("damcha-unshared", "damcha", {**_DAMCHA, "metric_sharing": "per_layer"}, "one f(x) per layer"),
    Variant("damcha-static", "damcha", {**_DAMCHA, "metric_input": "static"}, "w/o f(x): one learned M for every input"),
    Variant("damcha-bilinear", "damcha", {**_DAMCHA, "score_form": "bilinear"},
            "full cross-head bilinear form (an extension beyond the paper)"),
)
register(MHA(), Variant("mha", "mha", {}, "standard multi-head attention, the baseline"))
register(TalkingHeads(),
         Variant("tha", "tha", {"tha_init": "random"}, "talking heads, P_l and P_w drawn at random (the original)"),
         Variant("tha-identity", "tha", {"tha_init": "identity"}, "talking heads started from the identity (the "
                 "DAMCHA authors' code)"))
register(DCMHA(), Variant("dcmha", "dcmha", {}, "dynamically composable heads (DCFormer), pre and post softmax"))
register(DCMHAAuthors(), Variant("dcmha-authors", "dcmha-authors", {}, "the DAMCHA authors' simplified DCMHA"))
register(ColMHA(), Variant("colmha", "colmha", {"colmha_init": "concatenate"},
                           "collaborative heads sharing one query/key space (the original)"))
register(ColMHAAuthors(), Variant("colmha-authors", "colmha-authors", {}, "the DAMCHA authors' ColMHA: "
                                  "shared bias-free Q/K mixed per head (a re-parametrisation of MHA)"))
register(MMA(), Variant("mma", "mma", {}, "mixed heads: global, local, forward and backward masks"))
register(MoA(), Variant("moa", "moa", {}, "mixture of attention heads: top-k of 2H experts, shared keys and values"))
register(MoAAuthors(), Variant("moa-authors", "moa-authors", {}, "the DAMCHA authors' MoA: dense experts, top-k "
                                             "softmax gates, one output projection per rank slot"))
# Head-interaction mechanisms newer than the paper, which a reviewer would compare with now
register(Differential(),
         Variant("diff", "diff", {}, "differential attention: two softmax maps, the second subtracted λ times (Diff "
                 "Transformer)"),
         Variant("diff-official", "diff", {"diff_heads": "half"}, "differential attention under the official "
                 "comparison protocol: half the heads, each map at MHA's head width"))
register(InterleavedHeads(), Variant("iha", "iha", {}, "interleaved head attention: P pseudo-heads per head mixed "
                                     "from all heads, attending over the interleaved sequence"))
register(KnockingHeads(), Variant("knocking", "knocking", {}, "knocking heads: one d×d matrix shared by all heads "
                                  "on the values (shared parameters; no head reads another's data)"))

__all__ = [
    "AttentionOutput", "Choice", "DamchaOptions", "ForwardOptions", "Identifiability", "Intervention", "LayerCall",
    "InferenceAblation", "Mechanism", "MetricAccess", "Param", "Setting",
    "Structure",
    "StructureKind", "ValueKind", "Variant", "attend", "attention_mask", "get_mechanism", "get_variant", "mechanism_names",
    "metric_access_of", "register", "unregister", "variant_names", "variants",
]
