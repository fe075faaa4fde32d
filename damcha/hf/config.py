"""`DamchaConfig`: a Hugging Face configuration that is this project's ModelConfig, field for field.

transformers v5 turns every `PreTrainedConfig` subclass into a keyword-only dataclass, so each
setting is an annotated class field here; the defaults are ModelConfig's own (one source), and
`model_config()` builds (and so validates) the ModelConfig the project's code runs. A mechanism's
settings are `attention` plus `attention_options` (DAMCHA's are flat fields, as in ModelConfig):
a mechanism registered tomorrow is configured without a new field.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from transformers import PreTrainedConfig

from damcha.model.config import MOVED_SETTINGS, ModelConfig, moved_into_settings
from damcha.model.unread_settings import UNREAD_SETTINGS

_DEFAULT = {f.name: f.default for f in dataclasses.fields(ModelConfig)}

# "gpt2": the project's own block (pre-LN, learned positions, exact GELU, untied head) over token ids;
# "vit": the same block as an encoder over image patches (pixel_values cut into patch_size squares, each
# flattened channel-first, embedded by a linear map as ViT's patch convolution does) with a classification
# head on the mean of the patches' features (the project's classifier; ViT reads a CLS token instead);
# "llama": a decoder of RMSNorm, SwiGLU and rotary positions (RoPE on the q and k of every layer's attend
# step: for DAMCHA, q = x_i·m_i and k = x_i), for the mechanisms that score through that step.
LAYOUTS = ("gpt2", "vit", "llama")
LLAMA = {"norm": "rms", "feed_forward": "swiglu", "position_encoding": "rotary", "head_bias": False}

class DamchaConfig(PreTrainedConfig):
    """Any registered attention mechanism in the project's transformer, as a Hugging Face config.

    layout: how the blocks around the attention are built ("gpt2": this project's block).
    The other fields are damcha.model.config.ModelConfig's, with its meanings and defaults."""

    model_type = "damcha"
    attribute_map = {"hidden_size": "n_embd", "num_attention_heads": "n_head", "num_hidden_layers": "n_layer",
                     "max_position_embeddings": "block_size"}

    layout: str = "gpt2"
    image_size: int = 0  # layout "vit": the side of the square images, in pixels
    patch_size: int = 0  # layout "vit": the side of a patch (input_dim = num_channels * patch_size**2)
    num_channels: int = 3  # layout "vit"
    vocab_size: int = _DEFAULT["vocab_size"]
    block_size: int = _DEFAULT["block_size"]
    n_layer: int = _DEFAULT["n_layer"]
    n_head: int = _DEFAULT["n_head"]
    n_embd: int = _DEFAULT["n_embd"]
    mlp_ratio: int = _DEFAULT["mlp_ratio"]
    dropout: float = _DEFAULT["dropout"]
    causal: bool = _DEFAULT["causal"]
    n_classes: int = _DEFAULT["n_classes"]
    attention: str = _DEFAULT["attention"]
    pad_token: int | None = _DEFAULT["pad_token"]
    input_dim: int = _DEFAULT["input_dim"]
    modality: str = _DEFAULT["modality"]
    norm_placement: str = _DEFAULT["norm_placement"]
    position_encoding: str = _DEFAULT["position_encoding"]
    norm: str = _DEFAULT["norm"]
    feed_forward: str = _DEFAULT["feed_forward"]
    final_norm: bool = _DEFAULT["final_norm"]
    head_bias: bool = _DEFAULT["head_bias"]
    mlp_width: int = _DEFAULT["mlp_width"]
    head_hidden: int = _DEFAULT["head_hidden"]
    attention_options: dict[str, Any] | None = None
    # Where the weights came from when export-hf wrote them: the run's name, epoch, data and training
    # sections (the app shows an exported folder with its data set's inputs).
    damcha_run: dict[str, Any] | None = None
    # generate() decodes with DamchaForCausalLM's PrefixCache where the mechanism declares decodes_with_cache
    # (MHA, DAMCHA), and recomputes the prefix at every step for the others.
    use_cache: bool = True

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        for name, (accepted, what) in UNREAD_SETTINGS.items():
            value = getattr(self, name, None)
            if not accepted(self, value):
                raise ValueError(f"DamchaConfig: {name}={value!r} is not what this model does ({what}); it would be "
                                 f"stored and ignored, so it is refused: leave {name} out")
        if self.layout not in LAYOUTS:
            raise ValueError(f"DamchaConfig: layout must be one of {LAYOUTS}, got {self.layout!r}")
        self.attention_options = dict(self.attention_options or {})
        # DAMCHA's settings that were fields (f's widths, ...), given as keyword arguments or read from a folder
        # saved before: its settings, as a run's config reads them (config.moved_into_settings).
        moved = {k: self.__dict__.pop(k) for k in MOVED_SETTINGS if k in self.__dict__}
        if moved:
            fields = moved_into_settings({"attention": self.attention, "attention_options": self.attention_options, **moved})
            self.attention_options = dict(fields.get("attention_options", self.attention_options))
        if self.n_classes:
            self.num_labels = self.n_classes
        if self.layout == "vit":
            self._check_image_layout()
        wrong = {k: getattr(self, k) for k, v in LLAMA.items() if getattr(self, k) != v}
        if self.layout == "llama" and wrong:
            raise ValueError(f"DamchaConfig: layout 'llama' is {LLAMA}, got {wrong}; DamchaConfig.for_llama sets them")
        # Refuses, in words, a config the project cannot build; settings named (as a run's config names them),
        # so a folder saved today reads as this model wherever a later default changes.
        named = self.model_config().to_dict().get("attention_options", {})
        self.attention_options = {**named, **self.attention_options}

    def _check_image_layout(self) -> None:
        size, patch, channels = self.image_size, self.patch_size, self.num_channels
        if not (patch > 0 and size > 0 and size % patch == 0):
            raise ValueError(f"DamchaConfig: layout 'vit' needs image_size divisible by patch_size (got {size}, {patch})")
        if self.input_dim != channels * patch * patch or self.block_size < (size // patch) ** 2:
            raise ValueError(f"DamchaConfig: layout 'vit' needs input_dim = num_channels * patch_size**2 = "
                             f"{channels * patch * patch} and block_size >= {(size // patch) ** 2} patches "
                             f"(got {self.input_dim}, {self.block_size}); DamchaConfig.for_images sets both")
        if self.causal or not self.n_classes:
            raise ValueError("DamchaConfig: layout 'vit' is a non-causal encoder with n_classes > 0")

    def model_config(self) -> ModelConfig:
        """The project's ModelConfig these fields describe (validated: a bad value raises ValueError)."""
        names = {f.name for f in dataclasses.fields(ModelConfig)}
        return ModelConfig(**{name: getattr(self, name) for name in names})

    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs) -> DamchaConfig:
        found = config_dict.get("model_type", cls.model_type)
        if found != cls.model_type:
            raise ValueError(f"a config of model_type {found!r} is not a DAMCHA Lab model (model_type "
                             f"{cls.model_type!r}); to put a mechanism into that model, build it with its own class "
                             "and use damcha.hf.swap_attention")
        return super().from_dict(config_dict, **kwargs)

    @classmethod
    def for_images(cls, config: ModelConfig, image_size: int, patch_size: int, num_channels: int = 3,
                   **kwargs) -> DamchaConfig:
        """The ViT layout of `config` (its mechanism, sizes, n_classes) for square images of image_size
        pixels cut into patch_size patches: input_dim, block_size and the encoder's settings follow."""
        patches = (image_size // max(patch_size, 1)) ** 2
        config = dataclasses.replace(config, input_dim=num_channels * patch_size * patch_size, block_size=patches,
                                     causal=False, pad_token=None, vocab_size=1, head_hidden=0)
        return cls.from_model_config(config, layout="vit", image_size=image_size, patch_size=patch_size,
                                     num_channels=num_channels, **kwargs)

    @classmethod
    def for_llama(cls, config: ModelConfig, **kwargs) -> DamchaConfig:
        """The Llama layout of `config` (its mechanism, sizes, task): RMSNorm, SwiGLU, rotary positions.
        A mechanism that scores outside the shared attend step is refused in words (no RoPE there)."""
        return cls.from_model_config(dataclasses.replace(config, **LLAMA), layout="llama", **kwargs)

    @classmethod
    def from_model_config(cls, config: ModelConfig, **kwargs) -> DamchaConfig:
        fields = dataclasses.asdict(config)
        fields["attention_options"] = {k: list(v) if isinstance(v, tuple) else v for k, v in config.attention_options}
        return cls(**fields, **kwargs)
