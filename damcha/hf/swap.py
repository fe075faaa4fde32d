"""`swap_attention`: a registered mechanism in place of the attention of a Hugging Face GPT-2, Llama or ViT
model, its embeddings, MLPs and norms kept.

Each attention module becomes an instance of a subclass of the model's own attention class (v5 records
`output_attentions` with hooks keyed on that class), holding the mechanism's layer, built from the
registry with a ModelConfig read off the model's config: a mechanism registered tomorrow swaps in
without new code. The projections the mechanism shares with the model's attention carry over — V and
O always where the mechanism has them (`value`, `proj`), Q and K for mechanisms that have them too, each
with its bias or, where the model's projection has none (a Llama's), without one: the swapped layer holds
no parameter the model did not — and everything else starts fresh (DAMCHA's metric generator). A mechanism with a module computed once
per stack (DAMCHA's shared metric) gets it as a new submodule of the model, run on the first block's
input by a forward pre-hook; the 2-D attention mask, read by a pre-hook on the base model, gives the
real tokens. Those hooks hold one call's values, so a swapped model serves one call at a time; they are
bound to an object the model holds, so `copy.deepcopy` gives a model that computes with its own weights.
The new modules take the replaced ones' dtype, device and train/eval mode; a Llama's `position_ids` reach
the rotary positions. Settings the swapped layers would drop are refused in words (GPT-2's
`scale_attn_by_inverse_layer_idx`, `scale_attn_weights=False`, `reorder_and_upcast_attn` below float32; a
Llama's `head_dim` other than hidden / heads; a 4-D attention mask); a GPT-2's cross-attention stays its own.

Deviations, declared: the attend step is the project's (sdpa when the model's attn_implementation is
"sdpa", the explicit softmax under "eager"), not `ALL_ATTENTION_FUNCTIONS`, since an attention function
receives q and k after projections DAMCHA does not have; no key/value cache; a Llama's rotary positions
act on the q and k of the mechanism's attend step (the labelled setting rope="q_and_k", for DAMCHA
q = x_i·m_i and k = x_i, where the paper does not say; rope="none" drops them; default RoPE only, and
mechanisms that score in steps of their own need rope="none"); grouped-query attention is refused (every registered mechanism has one key and value per head, and
DAMCHA's keys are the inputs x_i themselves).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import transformers
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_model
from torch import nn

from damcha.hf.models import NO_CACHE
from damcha.hf.swap_saving import (
    ARCHITECTURES,
    CONFIG_FILE,
    DERIVED_CLASSES,
    EARLIER_WEIGHTS_FILE,
    MODEL_TYPE,
    WEIGHTS_FILE,
    record_swap,
    reduce_by_base,
)
from damcha.model.config import MAX_BLOCK_SIZE, ModelConfig, variant_config
from damcha.model.mechanisms import LayerCall, attention_mask, get_variant
from damcha.model.transformer import non_finite
from damcha.runs.files import read_json


@dataclass(frozen=True)
class Layout:
    """How one family of Hugging Face models holds its attention: the attention class, whether it is
    causal, and where its Q, K, V, O weights are (as nn.Linear-shaped (out, in) weights and biases)."""

    name: str
    attention_class: Callable[[], type]
    causal: bool
    projections: Callable[[nn.Module, int], dict[str, tuple[torch.Tensor, torch.Tensor | None]]]
    # The attention's own dropout after its output projection (GPT-2's resid_pdrop), kept on the swapped output;
    # Llama has none and ViT's is in its layer, outside the attention (kept there).
    output_dropout: str | None = None


def _gpt2_projections(attn: nn.Module, D: int) -> dict:
    w, b = attn.c_attn.weight.T, attn.c_attn.bias  # Conv1D keeps (in, out): (3D, D) as a Linear would
    return {"query": (w[:D], b[:D]), "key": (w[D:2 * D], b[D:2 * D]), "value": (w[2 * D:], b[2 * D:]),
            "proj": (attn.c_proj.weight.T, attn.c_proj.bias)}


def _named_projections(attn: nn.Module, D: int) -> dict:
    return {ours: (getattr(attn, theirs).weight, getattr(attn, theirs).bias)
            for ours, theirs in (("query", "q_proj"), ("key", "k_proj"), ("value", "v_proj"), ("proj", "o_proj"))}


def _class(module: str, name: str) -> Callable[[], type]:
    def load() -> type:
        return getattr(importlib.import_module(f"transformers.models.{module}"), name)
    return load


LAYOUTS = {
    "gpt2": Layout("gpt2", _class("gpt2.modeling_gpt2", "GPT2Attention"), True, _gpt2_projections, "resid_dropout"),
    "llama": Layout("llama", _class("llama.modeling_llama", "LlamaAttention"), True, _named_projections),
    "vit": Layout("vit", _class("vit.modeling_vit", "ViTAttention"), False, _named_projections),
}


@dataclass(frozen=True)
class Swap:
    """What swap_attention did: the layers replaced (their module names), the mechanism's config, and
    which of the new parameters came from the model (carried) and which start fresh."""

    replaced: tuple[str, ...]
    config: ModelConfig
    carried: tuple[str, ...]
    fresh: tuple[str, ...]
    rotary: bool = False  # the attend step rotates q and k (a Llama's RoPE, rope="q_and_k")


class _CallState:
    """One call's real tokens and shared value, set by the swap's pre-hooks at the start of each forward.
    The hooks are this object's bound methods and it holds the model's shared module: copy.deepcopy of
    the model copies it once with the model (and rebinds the copy's hooks to the copy), so a copy
    computes with its own weights and keeps no value of the original's last call."""

    def __init__(self, mechanism, shared_module: nn.Module | None):
        self.mechanism, self.shared_module = mechanism, shared_module
        self.real: torch.Tensor | None = None
        self.shared: Any = None

    def __getstate__(self) -> dict:
        """A copy or a pickle keeps no value of the last call (set again at the start of each forward): after a
        forward with gradients, that value is a tensor of the graph, which deepcopy refuses."""
        return {**self.__dict__, "real": None, "shared": None}

    def read_mask(self, module, args, kwargs):
        mask = kwargs.get("attention_mask")
        if mask is not None and mask.dim() != 2:
            raise ValueError(f"a {mask.dim()}-D attention_mask (packed sequences, a custom pattern) cannot be honoured "
                             f"by the swapped {self.mechanism.title} layers: their masks and any context they compute "
                             "from the sequence (DAMCHA's prefix mean) follow a 2-D padding mask, one sequence per row; "
                             "pass a (batch, length) mask")
        self.real = None if mask is None or bool(mask.all()) else mask.bool()  # (B, T)
        self.shared = None

    def run_shared(self, block, args, kwargs):
        x = args[0] if args else kwargs["hidden_states"]  # (B, T, D): the stack input
        self.shared = self.mechanism.run_shared(self.shared_module, x, self.real, self.mechanism.options(None),
                                                self.shared_module.training)


# What becomes of a Llama's rotary positions: "q_and_k" rotates the q and k of the mechanism's attend step
# (for DAMCHA q = x_i·m_i and k = x_i: the paper does not say where RoPE would act), "none" drops them.
ROPE_CHOICES = ("q_and_k", "none")


def swap_attention(model: nn.Module, variant: str, seed: int | None = None, rope: str | None = None,
                   **settings) -> Swap:
    """Replace every attention module of `model` (a GPT-2, Llama or ViT model of transformers, built from
    a config or loaded from a local folder) with the registered `variant`'s layers, in place. settings: the
    mechanism's own settings, as `--option` takes them (DAMCHA's generator_widths, ...).
    seed: makes the fresh parameters reproducible. rope: for a Llama, "q_and_k" (the default: its rotary
    positions on the q and k of the mechanism's attend step) or "none" (dropped: positions then reach the
    model through the causal mask alone); a model without RoPE takes none. Returns what was replaced
    and carried."""
    config = getattr(model, "config", None)
    layout = LAYOUTS.get(getattr(config, "model_type", None))
    if layout is None:
        raise ValueError(f"swap_attention knows GPT-2, Llama and ViT models ({', '.join(LAYOUTS)}), not "
                         f"{getattr(config, 'model_type', type(model).__name__)!r}")
    original = layout.attention_class()
    _refuse_unhonoured(config, layout)
    # Cross-attention (a GPT-2 with add_cross_attention) stays the model's own: it reads the encoder's states.
    found = [(name, module) for name, module in model.named_modules()
             if type(module) is original and not getattr(module, "is_cross_attention", False)]
    if not found:
        raise ValueError(f"{type(model).__name__} holds no {original.__name__} to replace (already swapped?)")
    mechanism_config = _mechanism_config(config, layout, len(found), variant, settings)
    mechanism = mechanism_config.mechanism
    rotary = _rotary(config, layout, mechanism, rope)
    implementation = config._attn_implementation or "sdpa"
    if implementation not in ("sdpa", "eager"):
        raise ValueError(f"attn_implementation={implementation!r}: a swapped model attends with 'sdpa' or 'eager'")
    swapped_class = swapped_attention_class(original)
    # The new modules take the place, dtype, device and train/eval mode of the ones they replace.
    weight = next(found[0][1].parameters())
    where = {"device": weight.device, "dtype": weight.dtype}
    carried, fresh = [], []
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        shared = mechanism.build_shared(mechanism_config)
        if shared is not None:
            shared.to(**where).train(found[0][1].training)
        state = _CallState(mechanism, shared)
        for index, (name, old) in enumerate(found):
            layer = mechanism.build_layer(mechanism_config, index).to(**where)
            new = swapped_class.__new__(swapped_class)
            nn.Module.__init__(new)
            new.config, new.layer_idx, new.layer, new.swap_state = config, index, layer, state
            new.mechanism, new.causal, new.rotary = mechanism, layout.causal, rotary
            new.output_dropout = getattr(old, layout.output_dropout) if layout.output_dropout else None
            ours = _carry(layout.projections(old, mechanism_config.n_embd), layer)
            carried += [f"{name}.layer.{p}" for p in ours]
            fresh += [f"{name}.layer.{p}" for p, _ in layer.named_parameters() if p not in ours]
            parent, _, attribute = name.rpartition(".")
            setattr(model.get_submodule(parent), attribute, new.train(old.training))
    if shared is not None:
        model.add_module("damcha_shared", shared)
        fresh += [f"damcha_shared.{p}" for p, _ in shared.named_parameters()]
        first_block = model.get_submodule(found[0][0].rpartition(".")[0])
        first_block.register_forward_pre_hook(state.run_shared, with_kwargs=True)
    model.base_model.register_forward_pre_hook(state.read_mask, with_kwargs=True)
    config.use_cache = False
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.use_cache = False
    record_swap(model, variant, rope, settings)
    return Swap(tuple(name for name, _ in found), mechanism_config, tuple(carried), tuple(fresh), rotary)


def _refuse_unhonoured(config, layout: Layout) -> None:
    """Settings of the model's attention that the swapped layers would silently drop: refused in words."""
    D, heads = config.hidden_size, config.num_attention_heads
    if layout.name == "gpt2":
        if getattr(config, "scale_attn_by_inverse_layer_idx", False):
            raise ValueError("scale_attn_by_inverse_layer_idx=True divides layer l's scores by l + 1; the swapped layers "
                             "score with 1/sqrt(head width) alone, so the setting would be dropped: swap into a model "
                             "with scale_attn_by_inverse_layer_idx=False")
        if not getattr(config, "scale_attn_weights", True):
            raise ValueError("scale_attn_weights=False leaves GPT-2's scores unscaled; the swapped layers scale by "
                             "1/sqrt(head width), so the setting would be dropped: swap into a model with "
                             "scale_attn_weights=True")
        if getattr(config, "reorder_and_upcast_attn", False) and config.dtype not in (None, torch.float32, "float32"):
            raise ValueError("reorder_and_upcast_attn=True computes a half-precision model's scores in float32; the "
                             "swapped layers compute in the model's dtype: swap into a float32 model, or without it")
    head_dim = getattr(config, "head_dim", None)
    if layout.name == "llama" and head_dim not in (None, D // heads):
        raise ValueError(f"head_dim={head_dim} with hidden_size {D} and {heads} heads: the registered mechanisms "
                         f"split the width into heads of hidden_size / heads = {D // heads}, so no weight could carry "
                         "over and the model would be another: swap into a model with head_dim = hidden_size / heads")


def _rotary(config, layout: Layout, mechanism, rope: str | None) -> bool:
    """Whether the swapped layers rotate q and k as the model's own attention did."""
    theirs = getattr(config, "rope_parameters", None) if layout.name == "llama" else None
    if theirs is None:
        if rope not in (None, "none"):
            raise ValueError(f"rope={rope!r}: a {layout.name} model has no rotary positions to keep")
        return False
    rope = rope or "q_and_k"
    if rope not in ROPE_CHOICES:
        raise ValueError(f"rope={rope!r}: choose one of {ROPE_CHOICES}")
    if rope == "none":
        return False
    if not mechanism.rotary_positions:
        raise ValueError(f"{mechanism.title} scores in steps of its own, not through the shared attend step: its q and "
                         "k cannot be rotated; swap it in with rope='none' (positions through the causal mask alone)")
    if theirs.get("rope_type", "default") != "default" or float(theirs.get("rope_theta", 10000.0)) != 10000.0:
        raise ValueError(f"rope_parameters {theirs}: the attend step rotates with the default RoPE (theta 10000, no "
                         "scaling); swap in with rope='none', or use a model of the default RoPE")
    return True


def _mechanism_config(config, layout: Layout, n_layer: int, variant: str, settings: dict) -> ModelConfig:
    heads = config.num_attention_heads
    if getattr(config, "num_key_value_heads", heads) not in (None, heads):
        raise ValueError(f"grouped-query attention ({config.num_key_value_heads} key/value heads for {heads} query "
                         f"heads) cannot be swapped: every registered mechanism has one key and value per head, and "
                         f"DAMCHA's keys are the inputs x_i themselves (no key projection to share)")
    positions = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    if positions is None and hasattr(config, "image_size"):
        positions = (config.image_size // config.patch_size) ** 2 + 1  # the patches and the CLS token
    dropout = next((getattr(config, n) for n in ("attn_pdrop", "attention_dropout", "attention_probs_dropout_prob")
                    if hasattr(config, n)), 0.0)
    own = {f.name for f in dataclasses.fields(ModelConfig)}
    base = ModelConfig(vocab_size=2, block_size=min(int(positions or 1024), MAX_BLOCK_SIZE), n_layer=n_layer,
                       n_head=heads, n_embd=config.hidden_size, dropout=float(dropout), causal=layout.causal,
                       n_classes=0 if layout.causal else 2)
    get_variant(variant)  # refuses an unknown variant by name
    cfg = variant_config(base, variant)
    flat = {k: v for k, v in settings.items() if k in own}
    options = {**dict(cfg.attention_options), **{k: v for k, v in settings.items() if k not in own}}
    return dataclasses.replace(cfg, attention_options=options, **flat)


def _carry(theirs: dict, layer: nn.Module) -> list[str]:
    """Copy the model's projections into the layer's modules of the same role and shape; the names carried."""
    carried = []
    with torch.no_grad():
        for role, (weight, bias) in theirs.items():
            target = getattr(layer, role, None)
            if not isinstance(target, nn.Linear) or tuple(target.weight.shape) != tuple(weight.shape):
                continue
            target.weight.copy_(weight)
            carried.append(f"{role}.weight")
            if bias is None:
                # A zero bias would compute the model's function but train where the model has no parameter (it
                # took a swapped Llama's MHA off Llama's own steps under Trainer): none, as in the model.
                target.bias = None
            elif target.bias is not None:
                target.bias.copy_(bias)
                carried.append(f"{role}.bias")
    return carried


def _keep_saved_biases(model: nn.Module, names) -> None:
    """Folders saved before swaps dropped the biases a model's projections lack hold trained ones: the swapped
    layers take them back (zeros here, the saved values when loaded), so such a folder loads as it was saved."""
    for name in names:
        owner, _, leaf = name.rpartition(".")
        try:
            module = model.get_submodule(owner) if leaf == "bias" and ".layer." in name else None
        except AttributeError:  # a foreign name: refused with the other unexpected tensors below
            continue
        if isinstance(module, nn.Linear) and module.bias is None:
            module.bias = nn.Parameter(torch.zeros(module.out_features, dtype=module.weight.dtype,
                                                   device=module.weight.device))


_SWAPPED_ATTENTION: dict[type, type] = {}


def swapped_attention_class(original: type) -> type:
    """The attention class a swap puts in place of `original`: its forward runs the mechanism (one per class)."""
    if original not in _SWAPPED_ATTENTION:
        _SWAPPED_ATTENTION[original] = type(f"Swapped{original.__name__}", (original,), {
            "forward": _swapped_forward, "derived_kind": "attention", "__reduce_ex__": reduce_by_base})
    return _SWAPPED_ATTENTION[original]


DERIVED_CLASSES["attention"] = swapped_attention_class


def _swapped_forward(self, hidden_states: torch.Tensor, *args, **kwargs):
    """The mechanism's layer on the block's normed input; returns (output, weights) as the model's own
    attention does (weights only under attn_implementation="eager")."""
    if kwargs.get("past_key_values") is not None or kwargs.get("use_cache"):
        raise ValueError(NO_CACHE.format(cls=f"A model with {self.mechanism.title} swapped in"))
    B, T, _ = hidden_states.shape
    state = self.swap_state
    implementation = self.config._attn_implementation or "sdpa"
    if implementation not in ("sdpa", "eager"):
        raise ValueError(f"attn_implementation={implementation!r}: a swapped model attends with 'sdpa' or 'eager'")
    real = state.real if state.real is not None and state.real.shape == (B, T) else None
    mask = attention_mask(real, self.causal, T, hidden_states.device)  # (B, 1, T, T) or None
    positions = kwargs.get("position_ids")  # a Llama's: its rotary positions, from the caller's position_ids
    rotary = positions if self.rotary and positions is not None else self.rotary
    call = LayerCall(real, mask, self.causal, self.mechanism.options(None), implementation == "eager",
                     self.training, state.shared, rotary=rotary)
    out = self.layer(hidden_states, call)
    y = out.y if self.output_dropout is None else self.output_dropout(out.y)  # (B, T, D)
    return y, out.weights  # (B, T, D), (B, H, T, T) or None


MAX_CONFIG_BYTES = 1_000_000


def load_swapped(folder: str | Path) -> nn.Module:
    """The swapped model that `save_pretrained` wrote to `folder` (damcha.hf.swap_saving), in eval mode as
    from_pretrained returns one: the original architecture built from its config, the same variant swapped
    in with the same settings, and every tensor loaded (missing, foreign or non-finite ones refused)."""
    folder = Path(folder)
    config = read_json(folder / CONFIG_FILE, MAX_CONFIG_BYTES, None, "model config")
    if not isinstance(config, dict) or config.get("model_type") != MODEL_TYPE:
        found = config.get("model_type") if isinstance(config, dict) else None
        raise ValueError(f"{folder}: a config of model_type {str(found)[:40]!r}, not a swapped model "
                         f"({MODEL_TYPE!r}); load it with its own class")
    layout, architecture = config.get("base_model_type"), config.get("base_architecture")
    if architecture not in ARCHITECTURES.get(layout, ()):
        raise ValueError(f"{folder}: base_architecture {str(architecture)[:60]!r} of model_type {str(layout)[:20]!r} "
                         f"is not one load_swapped rebuilds ({ARCHITECTURES})")
    base = transformers.AutoConfig.for_model(layout, **config.get("base_config", {}))
    model = getattr(transformers, architecture)(base)
    swap_attention(model, config["variant"], rope=config.get("rope"), **dict(config.get("settings") or {}))
    weights = folder / (WEIGHTS_FILE if (folder / WEIGHTS_FILE).exists() else EARLIER_WEIGHTS_FILE)
    try:
        with safe_open(str(weights), framework="pt") as saved:
            _keep_saved_biases(model, saved.keys())
        missing, unexpected = load_model(model, str(weights), strict=False)
    except (SafetensorError, OSError, RuntimeError) as e:
        raise ValueError(f"{weights}: cannot be read as this model's weights "
                         f"({(str(e).splitlines() or [type(e).__name__])[0][:200]})") from None
    unexpected = [k for k in unexpected if k != config.get("refusal_key")]  # (the plain loader's stop, see swap_saving)
    if missing or unexpected:
        raise ValueError(f"{weights}: its tensors do not match the swapped model (missing "
                         f"{sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]}): a damaged or foreign folder")
    bad = non_finite(model.state_dict())
    if bad:
        raise ValueError(f"{weights}: NaN or infinite values in {bad}")
    return model.eval()
