"""Where LoRA adapters go on a model of damcha.hf's classes or a swapped model: every linear map of the
mechanism's layers and of the module it computes once per stack (DAMCHA's metric generator), by full
module name, for any registered mechanism. `peft.LoraConfig(target_modules=lora_target_modules(model))`
adapts the attention and nothing else (embeddings, MLPs and heads stay frozen, as LoRA's defaults
for GPT-2 or Llama adapt their attention projections)."""

from __future__ import annotations

import torch
from torch import nn

from damcha.hf.models import DamchaPreTrainedModel

SHARED_NAMES = ("transformer.metric_source", "damcha_shared")  # the stack's shared module, in each kind of model


def mechanism_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(name, module) of each mechanism layer and of the stack's shared module, in either kind of model."""
    if isinstance(model, DamchaPreTrainedModel):
        layers = [(f"transformer.blocks.{i}.attn", block.attn) for i, block in enumerate(model.transformer.blocks)]
    else:  # a swapped model: its attention modules hold the mechanism's layer (damcha.hf.swap)
        layers = [(f"{name}.layer", module.layer) for name, module in model.named_modules()
                  if hasattr(module, "swap_state")]
    if not layers:
        raise ValueError(f"{type(model).__name__} holds no mechanism layer: a model of damcha.hf's classes, or one "
                         "that damcha.hf.swap_attention changed, is expected")
    return layers + [(name, model.get_submodule(name)) for name in SHARED_NAMES if _has(model, name)]


def lora_target_modules(model: nn.Module) -> list[str]:
    """The full names of every nn.Linear in the mechanism's layers and its shared module that the forward
    pass calls. A linear map whose weights a layer reads directly is left out: an adapter there would never
    act (DAMCHA's fused row sum folds its generator's last layer into its own product; DCMHA's dynamic
    weights read their hidden map the same way), so one found by a probe call that does not run it."""
    candidates = {f"{prefix}.{name}": module for prefix, layer in mechanism_layers(model)
                  for name, module in layer.named_modules() if isinstance(module, nn.Linear)}
    called: set[str] = set()
    handles = [module.register_forward_hook(lambda m, args, out, name=name: called.add(name))
               for name, module in candidates.items()]
    try:
        with torch.no_grad():
            model(**_probe_input(model))
    finally:
        for handle in handles:
            handle.remove()
    return [name for name in candidates if name in called]


def _probe_input(model: nn.Module) -> dict[str, torch.Tensor]:
    """The smallest call of the model's own input kind, on its device."""
    weight = next(model.parameters())
    if getattr(model, "main_input_name", "input_ids") == "pixel_values":
        side = model.config.image_size
        return {"pixel_values": torch.zeros(1, model.config.num_channels, side, side, device=weight.device,
                                            dtype=weight.dtype)}
    return {"input_ids": torch.zeros(1, 4, dtype=torch.long, device=weight.device)}


def _has(model: nn.Module, name: str) -> bool:
    try:
        model.get_submodule(name)
    except AttributeError:
        return False
    return True
