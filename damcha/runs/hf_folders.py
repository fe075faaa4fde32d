"""Folders written by damcha.hf's classes, read as runs without importing transformers.

A Hugging Face folder of these classes is config.json (model_type "damcha": ModelConfig's fields, plus
`damcha_run`, the source run's data and training sections, when export-hf wrote it) and
model.safetensors (the Transformer's tensors under `transformer.`); export-hf also writes the run's
metrics.jsonl up to the exported epoch. Hugging Face's Trainer writes
`checkpoint-N/` folders of the same kind, each with trainer_state.json: those are the run's snapshots,
numbered by epoch when every checkpoint falls on a whole epoch (save_strategy="epoch"), else by
training step; their logged eval_loss becomes the run's validation loss. Remote code (`auto_map`) and
pickled weights are refused: nothing here runs or unpickles anything. The one `auto_map` read is the one
`export-hf --with-code` writes, naming this package's own classes: the folder is then read with the
package's classes, and its code files are never run.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from damcha.model.config import ModelConfig, moved_into_settings
from damcha.model.unread_settings import UNREAD_SETTINGS
from damcha.runs.files import CheckpointError, parse_json, read_json, read_text

MODEL_TYPE = "damcha"  # damcha.hf.DamchaConfig.model_type
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
TRAINER_STATE = "trainer_state.json"
CHECKPOINT_RE = re.compile(r"^checkpoint-(\d{1,9})$")
# What `export-hf --with-code` writes beside the weights (damcha/hf/remote_code.py): the bundled modules
# and the two entry points config.json's auto_map names. This reader never runs them.
CODE_FILES = ("damcha_bundle.py", "configuration_damcha.py", "modeling_damcha.py")
OWN_AUTO_MAP = {"AutoConfig": "configuration_damcha.DamchaConfig", "AutoModel": "modeling_damcha.DamchaModel",
                "AutoModelForCausalLM": "modeling_damcha.DamchaForCausalLM",
                "AutoModelForSequenceClassification": "modeling_damcha.DamchaForSequenceClassification"}
PICKLED_WEIGHTS = ("pytorch_model.bin", "training_args.bin")
MAX_CONFIG_BYTES = 1_000_000
MAX_STATE_BYTES = 50_000_000
MAX_STATE_OBJECTS = 200_000
_MODEL_FIELDS = {f.name for f in dataclasses.fields(ModelConfig)}


def refuse_unread_settings(folder: Path, cfg: dict) -> None:
    """A folder whose config sets what damcha.hf's classes refuse (UNREAD_SETTINGS) is refused as they refuse it:
    opened as a run it would be drawn as a model the classes never build."""
    defaults = ModelConfig()
    shape = SimpleNamespace(**{k: cfg[k] if isinstance(cfg.get(k), int) and cfg[k] > 0 else getattr(defaults, k)
                               for k in ("n_head", "n_embd")})
    for name, (accepted, what) in UNREAD_SETTINGS.items():
        if not accepted(shape, cfg.get(name)):
            raise CheckpointError(f"{folder}: {CONFIG_FILE} sets {name}={str(cfg.get(name))[:60]}, which damcha.hf's "
                                  f"classes refuse ({what}): not a folder they load")


@dataclass(frozen=True)
class FolderRun:
    """What a Hugging Face folder holds, in the run format: config (format 1, with model, train, data,
    notes), snapshots (epoch -> weights file relative to the folder), metrics rows (None: the folder's
    metrics.jsonl, which export-hf writes, is read as a run's is)."""

    config: dict
    snapshots: dict[int, str]
    metrics: list[dict] | None


def is_hf_config(cfg: object) -> bool:
    return isinstance(cfg, dict) and "format_version" not in cfg and "model_type" in cfg


def trainer_checkpoints(folder: Path) -> dict[int, Path]:
    """The checkpoint-N sub-folders that hold a config (step -> folder)."""
    try:
        entries = [e for e in os.scandir(folder) if CHECKPOINT_RE.match(e.name)]
    except OSError:
        return {}
    return {int(e.name.split("-")[-1]): Path(e.path) for e in entries
            if e.is_dir() and os.path.lexists(Path(e.path) / CONFIG_FILE)}


def holds_trainer_checkpoints(folder: Path) -> bool:
    return bool(trainer_checkpoints(folder))


def read_folder(folder: Path, cfg: dict | None, root: Path | None = None) -> FolderRun:
    """The run a Hugging Face folder stands for. cfg: its config.json as read (None: it has none, and
    the last Trainer checkpoint's config is used)."""
    checkpoints = trainer_checkpoints(folder)
    if cfg is None:
        if not checkpoints:
            raise CheckpointError(f"{folder}: no {CONFIG_FILE}")
        cfg = read_json(checkpoints[max(checkpoints)] / CONFIG_FILE, MAX_CONFIG_BYTES, root, "model config")
    _refuse_foreign(folder, cfg)
    refuse_unread_settings(folder, cfg)
    source: dict = cfg["damcha_run"] if isinstance(cfg.get("damcha_run"), dict) else {}
    config: dict[str, Any] = {"format_version": 1, "model": _named_settings(
        {k: v for k, v in moved_into_settings(cfg).items() if k in _MODEL_FIELDS}),
              "train": _section(source, "train"), "data": _section(source, "data"),
              "provenance": [f"A Hugging Face folder of damcha.hf's classes ({folder.name})."]}
    if source.get("run"):
        config["provenance"].append(f"Exported from the run {str(source['run'])[:100]} at epoch {source.get('epoch')}.")
    config["provenance"].append(
        "It carries its modelling code: it loads with trust_remote_code=True where the damcha package is not "
        "installed." if all((folder / name).is_file() for name in CODE_FILES) else
        "It needs the damcha package where it is loaded (import damcha.hf); export it with --with-code to share it "
        "with someone without the package.")
    if not checkpoints:
        _refuse_pickles(folder)
        epoch = source.get("epoch", 0)
        return FolderRun(config, {epoch if isinstance(epoch, int) and epoch >= 0 else 0: WEIGHTS_FILE}, None)
    steps = sorted(checkpoints)
    for step in steps:
        _refuse_pickles(checkpoints[step], allowed=("training_args.bin",))
    epochs, state = [], None
    for step in steps:  # each Trainer state read once, one at a time; the last one's log gives the metrics
        state = _trainer_state(checkpoints[step], root)
        epochs.append(_checkpoint_epoch(state))
    by_epoch = all(e is not None and float(e).is_integer() for e in epochs) and len({*epochs}) == len(epochs)
    numbers = [int(e) for e in epochs if e is not None] if by_epoch else steps  # (by_epoch: none is None)
    config["provenance"].append("Snapshots are Hugging Face Trainer checkpoints, numbered by "
                           + ("epoch." if by_epoch else "training step (checkpoint-N): they do not fall on whole epochs."))
    snapshots = {n: f"{checkpoints[s].name}/{WEIGHTS_FILE}" for n, s in zip(numbers, steps)}
    metrics = _metrics(_trainer_log(state), by_epoch)
    return FolderRun(config, snapshots, metrics)


def _named_settings(model: dict) -> dict:
    """The folder's model fields with every mechanism setting named. damcha.hf's classes build a config's
    unnamed settings with today's defaults; a run's config without them is read as predating them
    (ModelConfig's saved_before), which would build another model from the same weights."""
    try:
        named = ModelConfig.from_dict(model).to_dict().get("attention_options")
    except (TypeError, ValueError):  # validation, with its words, comes when the run is read
        return model
    return {**model, "attention_options": named} if named else model


def _section(source: dict, name: str) -> dict:
    section = source.get(name)
    return dict(section) if isinstance(section, dict) else {}  # a run's own check reads what it holds


def _refuse_foreign(folder: Path, cfg: dict) -> None:
    if cfg.get("model_type") != MODEL_TYPE:
        raise CheckpointError(f"{folder}: a Hugging Face folder of model_type {str(cfg.get('model_type'))[:40]!r}, "
                              f"not of DAMCHA Lab's classes ({MODEL_TYPE!r}); to try a mechanism in that model, "
                              "use damcha.hf.swap_attention")
    if cfg.get("layout") == "vit":
        raise CheckpointError(f"{folder}: an image classifier of the ViT layout, which the app's pages do not read yet "
                              "(they read patches as next-patch predictors); open it in Python with damcha.hf")
    if "auto_map" in cfg and cfg["auto_map"] != OWN_AUTO_MAP:  # ours is read with this package's classes
        raise CheckpointError(f"{folder}: its config asks for remote code (auto_map); DAMCHA Lab runs no code "
                              "from a checkpoint folder")


def _refuse_pickles(folder: Path, allowed: tuple[str, ...] = ()) -> None:
    found = [name for name in PICKLED_WEIGHTS if name not in allowed and os.path.lexists(folder / name)]
    if found or not os.path.lexists(folder / WEIGHTS_FILE):
        what = f"holds {found[0]} (pickled weights, never loaded here)" if found else f"has no {WEIGHTS_FILE}"
        raise CheckpointError(f"{folder}: {what}; save with save_pretrained(safe_serialization=True)")


def _trainer_state(checkpoint: Path, root: Path | None) -> object:
    """A checkpoint's trainer_state.json (None: it has none), its objects counted before it is parsed: every
    one costs memory and time to build, and a few bytes each ("{}," repeated) make millions of them."""
    path = checkpoint / TRAINER_STATE
    if not os.path.lexists(path):
        return None
    text = read_text(path, MAX_STATE_BYTES, root, "Trainer state")
    objects = text.count("{")
    if objects > MAX_STATE_OBJECTS:
        raise CheckpointError(f"{path}: {objects:,} objects, more than a Trainer state holds ({MAX_STATE_OBJECTS:,} "
                              "at most: a log entry every step for 200,000 steps); refused before it is parsed")
    return parse_json(text, str(path), allow_non_finite=True)


def _trainer_log(state: object) -> list[dict]:
    log = state.get("log_history", []) if isinstance(state, dict) else []
    return [entry for entry in log if isinstance(entry, dict)] if isinstance(log, list) else []


def _checkpoint_epoch(state: object) -> float | None:
    epoch = state.get("epoch") if isinstance(state, dict) else None
    return float(epoch) if isinstance(epoch, int | float) and not isinstance(epoch, bool) else None


# Trainer's log names -> the run's metric names (the same quantities: mean cross-entropy in nats).
_LOGGED = {"eval_loss": "val_nll", "loss": "train_loss_running", "eval_accuracy": "val_accuracy"}


def _metrics(log: list[dict], by_epoch: bool) -> list[dict]:
    """One row per epoch (or step) at which Trainer logged an evaluation, with the training loss it
    logged there too (Trainer logs them as separate entries). Evaluation runs without gradients, so
    eval_loss is the task's loss alone (MoA adds its balance loss only when training)."""
    rows: dict[int, dict] = {}
    for entry in log:
        number = entry.get("epoch") if by_epoch else entry.get("step")
        if not isinstance(number, int | float) or isinstance(number, bool) or not float(number).is_integer():
            continue
        values = {ours: entry[theirs] for theirs, ours in _LOGGED.items()
                  if isinstance(entry.get(theirs), int | float) and not isinstance(entry.get(theirs), bool)}
        rows.setdefault(int(number), {"epoch": int(number)}).update(values)
    return [row for _, row in sorted(rows.items()) if "val_nll" in row]
