"""Hugging Face model classes around the project's transformer, for every registered mechanism.

Each class holds one `damcha.model.transformer.Transformer` under the name `transformer`, built from
`DamchaConfig.model_config()`: the mechanism comes from the registry, so a mechanism registered
tomorrow has these classes without new code, and a run's snapshot is these classes' weights once
its tensor names carry the `transformer.` prefix (damcha.hf.export).

`attn_implementation` chooses the attend step every mechanism shares (damcha.model.mechanisms.
operations.attend): "sdpa" is its fused scaled_dot_product_attention path, "eager" the explicit
softmax whose (B, H, T, T) weights `output_attentions` returns. The mechanisms' own arithmetic
(DAMCHA's metric, THA's mixing, ...) cannot be handed to an attention function, which would only
receive q and k after projections DAMCHA does not have; flash and flex attention are refused.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
from safetensors import SafetensorError
from torch import nn
from torch.nn import functional as F
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import (
    BaseModelOutput,
    CausalLMOutputWithPast,
    ImageClassifierOutput,
    SequenceClassifierOutput,
)
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
from transformers.utils import can_return_tuple

from damcha.hf.config import DamchaConfig
from damcha.model.mechanisms import ForwardOptions
from damcha.model.mechanisms.cache import PrefixCache
from damcha.model.transformer import IGNORE_INDEX, ModelOutput, Transformer, non_finite

NO_CACHE = ("{cls} keeps no cache between calls: only DamchaForCausalLM decodes with one (its PrefixCache, for the "
            "mechanisms that declare decodes_with_cache). Call it without past_key_values and use_cache.")


class DamchaPreTrainedModel(PreTrainedModel):
    config_class = DamchaConfig
    base_model_prefix = "transformer"
    main_input_name = "input_ids"
    _supports_sdpa = True
    _no_split_modules = ["Block"]

    def __init__(self, config: DamchaConfig):
        wrong = self.task_mismatch(config)
        if wrong:
            raise ValueError(f"{type(self).__name__} cannot hold this model: {wrong}")
        super().__init__(config)
        self.transformer = Transformer(config.model_config())
        self.post_init()

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """Hugging Face's loader, safetensors only (pickled weights are never read), refusing a checkpoint that
        lacks a tensor or holds a foreign one (it would leave that weight uninitialised, not re-initialised:
        the project's modules initialise themselves), NaN or infinite weights, and a folder of another task
        (a classifier's folder loaded as a causal LM)."""
        where = args[0] if args else kwargs.get("pretrained_model_name_or_path", "")
        if kwargs.get("use_safetensors") is False:
            raise ValueError("use_safetensors=False: these classes read safetensors only (a pickled checkpoint could "
                             "run code when loaded)")
        kwargs["use_safetensors"] = True
        folder = Path(str(where))
        if folder.is_dir() and not any(folder.glob("*.safetensors")):
            pickled = sorted(p.name for p in folder.glob("*.bin")) or sorted(p.name for p in folder.glob("*.pt*"))
            if pickled:
                raise ValueError(f"{where}: holds {pickled[0]} (pickled weights, never loaded here) and no "
                                 "model.safetensors; save it with save_pretrained(safe_serialization=True)")
        if folder.is_dir():
            _refuse_oversized_weights(folder)
        want_info = kwargs.pop("output_loading_info", False)
        try:
            model, info = super().from_pretrained(*args, output_loading_info=True, **kwargs)
        except RuntimeError as e:  # the library's words for weights whose shapes are not the config's
            if "mismatch" not in str(e) and "size" not in str(e):
                raise
            raise ValueError(f"{where}: its weights' shapes do not match its config: a damaged or foreign "
                             "checkpoint") from None
        except SafetensorError as e:  # offsets that lie, a header that does not describe the file
            first = (str(e).splitlines() or [type(e).__name__])[0][:200]
            raise ValueError(f"{where}: its model.safetensors is not a readable safetensors file ({first})") from None
        wrong = {kind: sorted(info[kind])[:3] for kind in ("missing_keys", "unexpected_keys", "mismatched_keys")
                 if info.get(kind)}
        if wrong:
            detail = "; ".join(f"{kind.replace('_keys', '')} {names}" for kind, names in wrong.items())
            raise ValueError(f"{where}: its weights do not match its config ({detail}): a damaged "
                             "or foreign checkpoint")
        bad = non_finite(model.state_dict())
        if bad:
            raise ValueError(f"{where}: NaN or infinite values in {bad}: such a model can only produce NaN")
        return (model, info) if want_info else model

    @classmethod
    def task_mismatch(cls, config: DamchaConfig) -> str | None:
        """Why a config's task is not this class's (None: it is)."""
        return None

    def _init_weights(self, module: nn.Module) -> None:
        # The project's modules initialise themselves (Transformer.__init__): Hugging Face's N(0, 0.02) for
        # every Linear would replace the metric generator's PyTorch-default initialisation, whose residue is
        # what the diagonal/off-diagonal split of M(x) shows (docs/design.md).
        return

    def get_input_embeddings(self) -> nn.Module:
        return self.transformer.tok_emb

    def set_input_embeddings(self, value: nn.Module) -> None:
        """Hugging Face's resize_token_embeddings: the new table in place, and the project's config told its size
        (Hugging Face updates this config's vocab_size itself)."""
        if not isinstance(value, nn.Embedding) or value.embedding_dim != self.config.n_embd:
            raise ValueError(f"{type(self).__name__} embeds token ids with an nn.Embedding of width {self.config.n_embd}")
        self.transformer.tok_emb = value
        self.transformer.config = dataclasses.replace(self.transformer.config, vocab_size=value.num_embeddings)

    def gradient_checkpointing_enable(self, *args, **kwargs) -> None:
        """Refused in words however it is called (Trainer's gradient_checkpointing=True passes every_n_layers)."""
        raise ValueError(f"{type(self).__name__} does not checkpoint activations through Hugging Face: the project's "
                         "training does (damcha train --activation-checkpointing, under FSDP2); the mechanisms' "
                         "per-call structures (DAMCHA's shared metric) are computed once per stack and would be "
                         "recomputed per block by Hugging Face's per-layer checkpointing")

    activation_checkpointing_enable = gradient_checkpointing_enable  # the name Trainer calls first (v5)

    def _run(self, inputs: torch.Tensor, attention_mask: torch.Tensor | None, targets: torch.Tensor | None,
             kwargs: dict, output_attentions: bool | None, output_hidden_states: bool | None,
             cache: PrefixCache | None = None) -> ModelOutput:
        """The project's forward pass with Hugging Face's arguments, refused in words where it has no meaning.
        cache: DamchaForCausalLM's, the tokens read before (inputs are then the new ones). The caller has taken
        num_items_in_batch out of kwargs (accumulated_loss)."""
        if kwargs.pop("past_key_values", None) is not None or kwargs.pop("use_cache", None):
            raise ValueError(NO_CACHE.format(cls=type(self).__name__))
        if kwargs.pop("inputs_embeds", None) is not None:
            raise ValueError(f"{type(self).__name__} embeds its own input_ids: inputs_embeds is not supported")
        options = kwargs.pop("options", None)
        if options is not None and not isinstance(options, ForwardOptions):
            raise TypeError("options must be the mechanism's ForwardOptions (e.g. DamchaOptions)")
        positions = kwargs.pop("position_ids", None)
        if kwargs:
            raise TypeError(f"{type(self).__name__} got arguments it does not use: {sorted(kwargs)}")
        implementation = self.config._attn_implementation or "sdpa"
        if implementation not in ("sdpa", "eager"):
            raise ValueError(f"attn_implementation={implementation!r}: these models attend with 'sdpa' (fused) or "
                             "'eager' (explicit weights) only")
        output_attentions = bool(output_attentions if output_attentions is not None else self.config.output_attentions)
        if output_attentions and implementation != "eager":
            raise ValueError("output_attentions needs attn_implementation='eager' (the fused path never builds the "
                             "weights); load with attn_implementation='eager' or call set_attn_implementation('eager')")
        if attention_mask is not None and attention_mask.dim() != 2:
            raise ValueError(f"a {attention_mask.dim()}-D attention_mask (packed sequences, a custom pattern) cannot be "
                             f"honoured by {type(self).__name__}: its masks and any context a mechanism computes from the "
                             "sequence (DAMCHA's prefix mean) follow a 2-D padding mask, one sequence per row; pass a "
                             "(batch, length) mask")
        real = None if attention_mask is None else attention_mask.bool()  # (B, T), or (B, S + T) with a cache
        if cache is not None and real is not None and real.shape[1] == cache.length + inputs.shape[1]:
            real = real[:, cache.length:]  # (B, T): the cache holds the earlier tokens' flags
        if positions is not None:
            positions = positions.expand(inputs.shape[0], -1)  # (B, T): a (1, T) row serves every row
        return self.transformer(inputs, targets=targets, real=real, options=options,
                                need_intermediates=implementation == "eager" and cache is None,
                                need_hidden_states=bool(output_hidden_states), positions=positions, cache=cache)

    @staticmethod
    def _attentions(out: ModelOutput, output_attentions: bool | None) -> tuple[torch.Tensor, ...] | None:
        if not output_attentions or out.layers is None:
            return None
        return tuple(layer.weights for layer in out.layers)  # (B, H, T, T) each


def accumulated_loss(elementwise: torch.Tensor, counted: torch.Tensor, aux_loss: torch.Tensor | None,
                     num_items_in_batch: torch.Tensor | int | None) -> torch.Tensor:
    """The loss Trainer steps on. elementwise: the unreduced task loss (0 where a target is ignored); counted:
    where a target counts. Without num_items_in_batch, the mean over counted targets. With it (Trainer's count of
    the targets of every micro-batch of one optimiser step, given to models whose forward takes **kwargs), this
    micro-batch's summed loss over that count, as GPT-2's loss does, so k accumulated micro-batches step as one
    batch of their union; the mechanism's auxiliary loss (a per-batch mean) is weighted by this micro-batch's
    share of the count."""
    here = counted.sum()
    if num_items_in_batch is None:
        task = elementwise.sum() / here.clamp_min(1)
        share = 1.0
    else:
        total = torch.as_tensor(num_items_in_batch, device=elementwise.device).clamp_min(1)
        task = elementwise.sum() / total
        share = here / total
    return task if aux_loss is None else task + aux_loss * share


def classification_loss(config: DamchaConfig, logits: torch.Tensor, labels: torch.Tensor, aux_loss: torch.Tensor | None,
                        num_items_in_batch: torch.Tensor | int | None) -> torch.Tensor:
    """Hugging Face's classifier loss by `config.problem_type`, chosen as its classifiers choose it when unset
    (one label: regression; integer labels: single-label; otherwise multi-label): mean squared error,
    cross-entropy, or binary cross-entropy with logits; each reduced by accumulated_loss."""
    if config.problem_type is None:
        if config.num_labels == 1:
            config.problem_type = "regression"
        elif labels.dtype in (torch.long, torch.int):
            config.problem_type = "single_label_classification"
        else:
            config.problem_type = "multi_label_classification"
    logits = logits.float()  # (B, C)
    if config.problem_type == "regression":
        target = labels.to(logits.dtype).reshape(logits.shape)  # (B, C)
        elementwise = (logits - target).pow(2)  # (B, C)
        counted = torch.ones_like(elementwise, dtype=torch.bool)
    elif config.problem_type == "single_label_classification":
        target = labels.reshape(-1)  # (B,)
        counted = target != IGNORE_INDEX  # (B,)
        elementwise = F.cross_entropy(logits, target, ignore_index=IGNORE_INDEX, reduction="none")  # (B,)
    elif config.problem_type == "multi_label_classification":
        target = labels.to(logits.dtype)  # (B, C)
        if target.shape != logits.shape:
            raise ValueError(f"multi_label_classification needs labels of the logits' shape {tuple(logits.shape)} "
                             f"(one 0/1 column per label), got {tuple(labels.shape)}")
        elementwise = F.binary_cross_entropy_with_logits(logits, target, reduction="none")  # (B, C)
        counted = torch.ones_like(elementwise, dtype=torch.bool)
    else:
        raise ValueError(f"problem_type={config.problem_type!r}: choose 'regression', 'single_label_classification' "
                         "or 'multi_label_classification', as Hugging Face's classifiers do")
    return accumulated_loss(elementwise, counted, aux_loss, num_items_in_batch)


class DamchaModel(DamchaPreTrainedModel):
    """The stack alone: last_hidden_state (B, T, D) after the final norm (the task head is kept in the
    weights so every class reads the same checkpoint, but not run)."""

    @can_return_tuple
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                output_attentions: bool | None = None, output_hidden_states: bool | None = None,
                **kwargs) -> BaseModelOutput:
        kwargs.pop("num_items_in_batch", None)  # no loss here
        out = self._run(input_ids, attention_mask, None, kwargs, output_attentions, True)
        return BaseModelOutput(last_hidden_state=out.hidden_states[-1],
                               hidden_states=out.hidden_states if output_hidden_states else None,
                               attentions=self._attentions(out, output_attentions))


class DamchaForCausalLM(DamchaPreTrainedModel, GenerationMixin):
    """A causal decoder with its next-token head. labels are the input ids themselves (Hugging Face's
    convention, shifted here); IGNORE_INDEX (-100) skips a position. Positions count from the first token
    unless position_ids say otherwise; generate() on a left-padded batch gives each row's real tokens the
    positions 0, 1, ... (so every row generates as it would alone); right padding is refused there."""

    @classmethod
    def task_mismatch(cls, config: DamchaConfig) -> str | None:
        if config.n_classes or not config.causal or config.input_dim:
            return ("its config is a classifier or an encoder (n_classes, causal, input_dim): load it with "
                    "AutoModelForSequenceClassification or DamchaForImageClassification")
        return None

    def get_output_embeddings(self) -> nn.Module:
        return self.transformer.head

    def set_output_embeddings(self, new: nn.Module) -> None:
        """Hugging Face's resize_token_embeddings hands a resized nn.Linear: its weights move into the project's
        next-token head (which computes the loss too), so the head stays the project's."""
        head = self.transformer.head
        if not isinstance(new, nn.Linear) or new.in_features != head.in_features:
            raise ValueError(f"the output embeddings must be an nn.Linear from width {head.in_features}")
        head.weight, head.bias = new.weight, new.bias
        head.out_features = new.out_features

    @can_return_tuple
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, output_attentions: bool | None = None,
                output_hidden_states: bool | None = None,
                logits_to_keep: int = 0, past_key_values: PrefixCache | None = None, use_cache: bool | None = None,
                **kwargs) -> CausalLMOutputWithPast:
        """past_key_values / use_cache: decode with a PrefixCache (a new one when use_cache and none is given),
        returned as past_key_values; input_ids are then the tokens after the cached ones. num_items_in_batch
        (Trainer's, under gradient accumulation): see accumulated_loss. return_dict=False (or the config's):
        a tuple, as every Hugging Face model gives one."""
        targets = None
        if labels is not None:
            targets = torch.cat([labels[:, 1:], torch.full_like(labels[:, :1], IGNORE_INDEX)], dim=1)  # (B, T)
        num_items = kwargs.pop("num_items_in_batch", None)
        cache = self._cache(past_key_values, use_cache)
        out = self._run(input_ids, attention_mask, targets, kwargs, output_attentions, output_hidden_states, cache)
        logits = out.logits if not logits_to_keep else out.logits[:, -logits_to_keep:]  # (B, T', V)
        loss = None if targets is None else accumulated_loss(out.token_loss, targets != IGNORE_INDEX, out.aux_loss,
                                                             num_items)
        return CausalLMOutputWithPast(loss=loss, logits=logits, past_key_values=cache,
                                      hidden_states=out.hidden_states, attentions=self._attentions(out, output_attentions))

    def _cache(self, given, use_cache: bool | None) -> PrefixCache | None:
        if given is None:
            return PrefixCache.empty(self.config.n_layer) if use_cache else None
        if not isinstance(given, PrefixCache):
            raise ValueError(f"past_key_values must be the PrefixCache this model returned (got {type(given).__name__}): "
                             "a cache of keys and values alone does not hold the running context DAMCHA's metric "
                             "reads; pass use_cache=True for a new one")
        return given

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False  # generate() must not make a DynamicCache: the model makes its own PrefixCache

    def prepare_inputs_for_generation(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                                      past_key_values: PrefixCache | None = None, use_cache: bool | None = None,
                                      **kwargs) -> dict:
        # Only the last position's logits are needed. With a cache (mechanisms that decode with one) the model
        # reads only the tokens after the cached ones; otherwise every step recomputes the whole prefix.
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "logits_to_keep": 1}
        if use_cache and self.transformer.mechanism.decodes_with_cache:
            cache = self._cache(past_key_values, True)
            inputs.update(input_ids=input_ids[:, cache.length:], past_key_values=cache)
        if attention_mask is None or bool(attention_mask.all()):
            return inputs
        real = attention_mask.bool()  # (B, T)
        if bool((real[:, :-1] & ~real[:, 1:]).any()):  # a real token followed by a pad: padded on the right
            raise ValueError("generate() on a batch padded on the right would append each row's new tokens after "
                             "its pads; pad on the left (tokenizer.padding_side = 'left'), as for every decoder")
        # Left padding: each row's real tokens at positions 0, 1, ... as if it were alone.
        positions = (attention_mask.long().cumsum(-1) - 1).clamp_min(0)  # (B, T)
        inputs["position_ids"] = positions[:, -inputs["input_ids"].shape[1]:]  # (B, T_new)
        return inputs


class DamchaForSequenceClassification(DamchaPreTrainedModel):
    """A non-causal encoder whose head classifies the mean of the real tokens' features (the project's
    classification head); labels: (B,) class ids."""

    @classmethod
    def task_mismatch(cls, config: DamchaConfig) -> str | None:
        if not config.n_classes or config.input_dim:
            return ("its config is not a classifier over token ids (n_classes 0, or image patches): load it with "
                    "AutoModelForCausalLM or DamchaForImageClassification")
        return None

    @can_return_tuple
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, output_attentions: bool | None = None,
                output_hidden_states: bool | None = None, **kwargs) -> SequenceClassifierOutput:
        """labels: by config.problem_type, as Hugging Face's classifiers take them (classification_loss)."""
        num_items = kwargs.pop("num_items_in_batch", None)
        out = self._run(input_ids, attention_mask, None, kwargs, output_attentions, output_hidden_states)
        loss = None if labels is None else classification_loss(self.config, out.logits, labels, out.aux_loss, num_items)
        return SequenceClassifierOutput(loss=loss, logits=out.logits, hidden_states=out.hidden_states,
                                        attentions=self._attentions(out, output_attentions))


class DamchaForImageClassification(DamchaPreTrainedModel):
    """The ViT layout (DamchaConfig.for_images): pixel_values (B, C, H, W) cut into patches, each flattened
    channel-first, a non-causal encoder over them and the project's classifier on their mean; labels: (B,)."""

    main_input_name = "pixel_values"

    @classmethod
    def task_mismatch(cls, config: DamchaConfig) -> str | None:
        if config.layout != "vit":
            return "it needs a config of layout 'vit' (DamchaConfig.for_images)"
        return None

    @can_return_tuple
    def forward(self, pixel_values: torch.Tensor, labels: torch.Tensor | None = None,
                output_attentions: bool | None = None, output_hidden_states: bool | None = None,
                **kwargs) -> ImageClassifierOutput:
        """labels: by config.problem_type, as Hugging Face's classifiers take them (classification_loss)."""
        num_items = kwargs.pop("num_items_in_batch", None)
        out = self._run(patches_of(pixel_values, self.config.patch_size), None, None, kwargs, output_attentions,
                        output_hidden_states)
        loss = None if labels is None else classification_loss(self.config, out.logits, labels, out.aux_loss, num_items)
        return ImageClassifierOutput(loss=loss, logits=out.logits, hidden_states=out.hidden_states,
                                     attentions=self._attentions(out, output_attentions))


# Trainer's label smoother shifts the labels (position t predicts token t + 1) only for the classes named in this
# mapping of causal LMs; named here, label_smoothing_factor smooths DamchaForCausalLM's next-token loss as GPT-2's.
MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.setdefault(DamchaConfig.model_type, DamchaForCausalLM.__name__)


def _refuse_oversized_weights(folder: Path) -> None:
    """A weights file far larger than its config's parameters need (a sparse file of gigabytes, say) is refused
    before anything maps it."""
    weights, config_file = folder / "model.safetensors", folder / "config.json"
    if not (weights.is_file() and config_file.is_file()):
        return
    try:
        config = DamchaConfig.from_json_file(str(config_file))
        needed = 8 * config.model_config().parameter_estimate()  # float64 at most, 8 bytes a parameter
    except (ValueError, TypeError, OSError):
        return  # the loader says what is wrong with the config
    size = weights.stat().st_size
    if size > 2 * needed + 2**20:
        raise ValueError(f"{weights}: {size:,} bytes, far more than its config's ~{needed // 8:,} parameters need "
                         f"(at most {2 * needed + 2**20:,} bytes): refused before it is read")


def patches_of(pixel_values: torch.Tensor, patch: int) -> torch.Tensor:
    """(B, C, H, W) images -> (B, N, C * patch * patch) patches, row by row, each flattened channel-first
    (the order of ViT's patch convolution's weights)."""
    B, C, H, W = pixel_values.shape
    if H % patch or W % patch:
        raise ValueError(f"images of {H}x{W} pixels do not divide into {patch}x{patch} patches")
    grid = pixel_values.reshape(B, C, H // patch, patch, W // patch, patch)  # (B, C, h, p, w, p)
    return grid.permute(0, 2, 4, 1, 3, 5).reshape(B, (H // patch) * (W // patch), C * patch * patch)  # (B, N, C·p·p)
