"""How a swapped model saves: `save_pretrained` of a model that `swap_attention` changed writes a folder that
`damcha.hf.load_swapped` rebuilds to the same logits, that Trainer resumes from and reloads as its best model,
and that its original architecture's loader refuses instead of dropping the mechanism's tensors.

The folder: config.json of model_type "damcha_swapped" (the original architecture's class and config, the
variant, its settings and the RoPE choice; the original config's fields at the top level too) and model.safetensors (every tensor of the swapped model, tied ones
once), where Trainer's resume_from_checkpoint and load_best_model_at_end look for a model's weights. Beside
them it holds one empty tensor under a name of the original architecture's attention (`refusal_key`): a plain
`GPT2LMHeadModel.from_pretrained(folder)` meets a size mismatch there and raises, where it would otherwise
load the embeddings and MLPs around a fresh attention with a warning. The swapped model's own
load_state_dict (what Trainer calls) sets that tensor aside. Folders saved before 7 December 2026 hold
swapped_model.safetensors instead, and load_swapped still reads them.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

from damcha import __version__

MODEL_TYPE = "damcha_swapped"
WEIGHTS_FILE = "model.safetensors"  # where Trainer looks for a checkpoint's weights
EARLIER_WEIGHTS_FILE = "swapped_model.safetensors"  # folders saved before 7 December 2026
CONFIG_FILE = "config.json"
# The classes a folder may name, by model_type: a config never picks an arbitrary attribute of transformers.
ARCHITECTURES = {"gpt2": ("GPT2LMHeadModel", "GPT2Model", "GPT2ForSequenceClassification"),
                 "llama": ("LlamaForCausalLM", "LlamaModel", "LlamaForSequenceClassification"),
                 "vit": ("ViTForImageClassification", "ViTModel")}


def save_swapped(model: nn.Module, folder: str | Path, **_: object) -> None:
    """Write a swapped model to `folder` (see the module's docstring). Hugging Face's save_pretrained
    arguments (safe_serialization, ...) are accepted and need nothing: the weights are safetensors."""
    folder = Path(folder)
    record = model.damcha_swap
    base = model.config.to_dict()
    base_type = base.pop("model_type")
    # the original config's fields at the top too: the original architecture's loader, reading this file as its
    # own config, builds the model at its real size and stops at the refusal tensor (with its defaults it would
    # build a default-sized model first: a 7B Llama)
    config = {**base, "model_type": MODEL_TYPE, "base_model_type": base_type, "base_architecture": record["architecture"],
              "base_config": base, "variant": record["variant"], "rope": record["rope"],
              "settings": record["settings"], "damcha_version": record["version"],
              "how_to_load": "pip install 'damcha[hf]'; import damcha.hf; damcha.hf.load_swapped(folder)"}
    config["refusal_key"] = refusal_key(model)
    _refuse_a_folder_of_another_model(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    tensors = _deduplicated(model.state_dict())
    tensors[config["refusal_key"]] = torch.zeros(0)
    save_file(tensors, str(folder / WEIGHTS_FILE), metadata={"format": "pt"})


def _refuse_a_folder_of_another_model(folder: Path) -> None:
    """A folder whose config.json is not a swapped model's (a plain GPT-2's, a run's, unreadable) is refused in
    words, its files left as they are: save_pretrained never replaces a model it did not write."""
    config = folder / CONFIG_FILE
    if not config.exists():
        if (folder / WEIGHTS_FILE).exists():
            raise ValueError(f"{folder} holds {WEIGHTS_FILE} without a swapped model's {CONFIG_FILE}: another model's "
                             "weights, not replaced; save to another folder")
        return
    try:
        found = json.loads(config.read_text()).get("model_type")
    except (OSError, ValueError, AttributeError):
        found = None
    if found != MODEL_TYPE:
        raise ValueError(f"{folder} holds another model ({CONFIG_FILE} of model_type {str(found)[:40]!r}, not "
                         f"{MODEL_TYPE!r}): not replaced; save the swapped model to another folder")


def refusal_key(model: nn.Module) -> str:
    """The first tensor name of the original architecture (the class the saving class derives from, built on
    the meta device) that the swapped model lacks: its attention's."""
    with torch.device("meta"):
        original = type(model).__mro__[1](model.config)
    names = sorted(set(original.state_dict()) - set(model.state_dict()))
    if not names:
        raise ValueError(f"a swapped {type(model).__name__} holds every tensor name of the original: its folder "
                         "could load as the original model with the mechanism's tensors dropped; not saved")
    return names[0]


def _deduplicated(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Each storage once (tied weights: the first name), contiguous, as safetensors' save_model writes them."""
    seen: set[tuple] = set()
    kept = {}
    for name, tensor in state.items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape)) if tensor.numel() else (name,)
        if key not in seen:
            seen.add(key)
            kept[name] = tensor.detach().contiguous()
    return kept


def _load_state_dict_setting_aside_the_refusal(model: nn.Module, state_dict, strict: bool = True, assign: bool = False):
    """nn.Module.load_state_dict of a swapped model: the folder's empty refusal tensor set aside (Trainer's
    resume and best-model reload call this with a saved folder's tensors)."""
    own = model.state_dict()
    kept = {k: v for k, v in state_dict.items() if k in own or v.numel()}
    return super(type(model), model).load_state_dict(kept, strict=strict, assign=assign)


def record_swap(model: nn.Module, variant: str, rope: str | None, settings: dict) -> None:
    """Make `model` save as a swapped model: what was swapped, on the model, and its class's save_pretrained
    writing the folder load_swapped reads (a subclass of the model's own class, made once per class)."""
    if type(model).__name__ not in ARCHITECTURES.get(model.config.model_type, ()):
        model.damcha_swap = None  # a class load_swapped would not rebuild: save_pretrained refuses in words
    else:
        model.damcha_swap = {"architecture": type(model).__name__, "variant": variant, "rope": rope,
                             "settings": {k: list(v) if isinstance(v, tuple) else v for k, v in settings.items()},
                             "version": __version__}
    model.__class__ = _saving_class(type(model))


_SAVING_CLASSES: dict[type, type] = {}


def _refuse_or_save(model: nn.Module, folder: str | Path, **kwargs: object) -> None:
    if model.damcha_swap is None:
        raise ValueError(f"a swapped {type(model).__name__} cannot be saved to reload: load_swapped rebuilds "
                         f"{ARCHITECTURES}; save its state_dict yourself")
    save_swapped(model, folder, **kwargs)


def _saving_class(cls: type) -> type:
    if cls not in _SAVING_CLASSES:
        _SAVING_CLASSES[cls] = type(cls.__name__, (cls,), {"save_pretrained": _refuse_or_save,
                                                           "load_state_dict": _load_state_dict_setting_aside_the_refusal,
                                                           "__module__": cls.__module__, "derived_kind": "saving",
                                                           "__reduce_ex__": reduce_by_base})
    return _SAVING_CLASSES[cls]


# The classes a swap makes at run time from a transformers class (the model's saving class, the attention's forward):
# they exist in no module, so pickle (torch.save, multiprocessing, Trainer's workers) names them by the class they
# derive from and the kind of derivation, and unpickling makes the same class again.
DERIVED_CLASSES: dict[str, Callable[[type], type]] = {"saving": _saving_class}


def reduce_by_base(self, protocol: int):
    """`__reduce_ex__` of a derived class: rebuilt from its base class and kind, then its state set as usual."""
    return _rebuilt, (self.derived_kind, type(self).__mro__[1]), self.__getstate__()


def _rebuilt(kind: str, base: type):
    importlib.import_module("damcha.hf.swap")  # (registers the attention's derived class)
    if kind not in DERIVED_CLASSES:
        raise ValueError(f"a pickled swapped model names an unknown derived class {kind!r}: made by another version")
    cls = DERIVED_CLASSES[kind](base)
    return cls.__new__(cls)
