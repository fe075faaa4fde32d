"""Every registered mechanism as Hugging Face classes (extra damcha[hf]; nothing else imports this layer):
`import damcha.hf` registers model_type "damcha" with AutoConfig and AutoModel*; export_run writes a run
as such a folder; swap_attention puts a mechanism into a GPT-2, Llama or ViT model."""

from __future__ import annotations

try:
    import transformers  # noqa: F401
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError("damcha.hf needs the Hugging Face extra: pip install 'damcha[hf]'") from e

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForImageClassification,
    AutoModelForSequenceClassification,
)

from damcha.hf.config import DamchaConfig
from damcha.hf.export import export_run
from damcha.hf.lora import lora_target_modules
from damcha.hf.models import (
    DamchaForCausalLM,
    DamchaForImageClassification,
    DamchaForSequenceClassification,
    DamchaModel,
    DamchaPreTrainedModel,
)
from damcha.hf.swap import Swap, load_swapped, swap_attention

AutoConfig.register(DamchaConfig.model_type, DamchaConfig, exist_ok=True)
AutoModel.register(DamchaConfig, DamchaModel, exist_ok=True)
AutoModelForCausalLM.register(DamchaConfig, DamchaForCausalLM, exist_ok=True)
AutoModelForSequenceClassification.register(DamchaConfig, DamchaForSequenceClassification, exist_ok=True)
AutoModelForImageClassification.register(DamchaConfig, DamchaForImageClassification, exist_ok=True)

__all__ = ["DamchaConfig", "DamchaForCausalLM", "DamchaForImageClassification", "DamchaForSequenceClassification",
           "DamchaModel",
           "DamchaPreTrainedModel", "Swap", "export_run", "load_swapped", "lora_target_modules", "swap_attention"]
