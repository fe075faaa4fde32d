"""Checkpoints of the authors' reference implementation (github.com/erwinmsmith/DAMCHA) as runs.

What their code saves, as read in its `utils.save_checkpoint`, `train.py`, `train_nlp.py`, `main.py`
and `models/` (commit ffa99807): ``torch.save({"format_version": 2, "epoch", "loss", "best_loss",
"model_state_dict", "optimizer_state_dict", "components", "config", RNG states,
"scheduler_state_dict", "off_diag_params"})``. ``model_state_dict`` is the decoder stack
(`TransformerPC`):

    decoder.shared_mlp_module.mlp.{0,3,6}.{weight,bias}   the metric generator D -> 256 -> 512 -> D*D (GELU)
    decoder.shared_mlp_module.{diag,off_diag}_mask         (D, D) head-block masks (buffers)
    decoder.layers.{i}.self_attn._shared_mlp.*             the same generator again, once per layer
    decoder.layers.{i}.self_attn._own_mlp.*                a layer's own generator (share_mlp off)
    decoder.layers.{i}.self_attn.M0                        a layer's static metric (use_mlp off)
    decoder.layers.{i}.self_attn.{W_q,W_k}                 standard attention (use_M off)
    decoder.layers.{i}.self_attn.{W_v,out_proj}.{weight,bias}
    decoder.layers.{i}.{ln1,ln2}.{weight,bias}             post-LN: x = ln1(x + attn(x)); x = ln2(x + ff(x))
    decoder.layers.{i}.ff.net.{0,3}.{weight,bias}          feed-forward D -> d_ff -> D (GELU), any d_ff
    decoder.pe.pe                                          (4096, D) sinusoidal table (buffer), no final norm
    ...mlp_module.layer_bias_{U,V}, layer_scales           optional low-rank per-layer term added to M

``config`` is the whole run configuration (d_model, n_heads, d_ff, n_layers, use_M, use_mlp,
share_mlp, mlp_hidden, diag_scale, off_diag_scale, use_layer_bias, off_diag_mode, compact_rank,
baseline, in_ch, img_size, patch_size, dataset, ...); every setting is read from it when present
(a command-line value overrides it, and the run's notes say where each came from).
``components`` holds the trained modules around the decoder: image runs ``patcher`` (Patchify:
proj Linear(48, D) over (channel, row, column) patches of images normalised to [-1, 1]) and
``head`` (ReconstructionHead: Linear(D, 2D), GELU, Linear(2D, 48)); text runs ``embedding``
(nn.Embedding(V, D)) and ``head`` (Seq2SeqHead: proj Linear(D, V)). They become the run's
embedding and task head: the input layout and normalisation are folded into the weights exactly,
and an image run reads its patches in place (the reference task: each position reconstructs its
own patch, causally), so M(x) of an uploaded photo is what the trained model computes. A file
without components (an older one) gets a seeded-random embedding and head, and says so.

The metric is generated from prefix means of the stack input (embeddings + positions), or of each
layer's input for own generators and the per-layer term; head i scores with the row sum
m_i = sum_j s_ij M_ij, s = diag_scale on the diagonal blocks and off_diag_scale elsewhere.

Loading is `torch.load(weights_only=True)`: tensors and plain values only, never other objects.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import torch

from damcha import __version__
from damcha.model.config import ModelConfig
from damcha.model.transformer import SinusoidalPositions, build_model
from damcha.runs.checkpoints import (
    CONFIG_FILE,
    FORMAT_VERSION,
    METRICS_FILE,
    CheckpointError,
    non_finite,
    save_tensors_atomic,
    snapshot_name,
    unwrapped_names,
    write_text_atomic,
)
from damcha.runs.staging import refuse_existing, staged_folder

MAX_REFERENCE_BYTES = 4_000_000_000
# Values of a loaded checkpoint counted as a tree (shared references followed each time), and its nesting:
# the reference code's files hold some thousands (optimizer state, the RNG states) and nest five deep.
MAX_REFERENCE_VALUES = 1_000_000
MAX_REFERENCE_DEPTH = 32
PREFIX = "decoder."
EPOCH_FILE = re.compile(r"^checkpoint_epoch_(\d+)\.pt$")
# Tokenizers their text data loaders use (data/datasets_nlp.py) and their vocabulary sizes.
TOKENIZERS = {"facebook/bart-base": 50265, "bert-base-multilingual-cased": 119547}
PATCH_DIM = 48  # 4x4x3 CIFAR patches


class ReferenceCheckpointError(ValueError):
    """A reference checkpoint cannot be read or converted; the message says which file and why."""


@dataclass
class ImportReport:
    """What a conversion did, tensor by tensor."""

    mapped: list[str] = field(default_factory=list)  # reference keys used
    duplicates: list[str] = field(default_factory=list)  # per-layer copies of the shared generator, checked equal
    ignored: list[str] = field(default_factory=list)  # buffers recomputed here (masks, position table), checked
    unknown: list[str] = field(default_factory=list)  # reference keys this converter does not know
    initialised: list[str] = field(default_factory=list)  # our parameters the file does not hold (seeded random)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def read_reference(path: str | Path) -> dict:
    """The checkpoint dict of a reference .pt file, loaded with weights_only=True (refused otherwise)."""
    path = Path(path)
    if not path.is_file():
        raise ReferenceCheckpointError(f"{path}: no such file")
    if path.stat().st_size > MAX_REFERENCE_BYTES:
        raise ReferenceCheckpointError(f"{path}: {path.stat().st_size:,} bytes is larger than a reference checkpoint may be")
    with open(path, "rb") as f:
        head = f.read(4)
    if not (head.startswith(b"PK\x03\x04") or head[:1] == b"\x80"):  # torch.save's zip, or a legacy pickle
        looks = "a text file" if head and all(32 <= b < 127 or b in (9, 10, 13) for b in head) else "another format"
        raise ReferenceCheckpointError(f"{path}: not a PyTorch checkpoint (it looks like {looks}: a .pt file written "
                                       "by torch.save starts with a zip or pickle header)")
    if head.startswith(b"PK"):
        _check_expanded_size(path)
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - torch raises many kinds; all mean "refused"
        text = str(e)
        if "weights_only" in text or "Unsupported global" in text or "GLOBAL" in text:
            found = re.search(r"GLOBAL ([\w.]+)", text)
            what = f" ({found.group(1)})" if found else ""
            raise ReferenceCheckpointError(
                f"{path}: refused, it holds Python objects other than tensors and plain values{what}; nothing was "
                "unpickled. A file from the reference code holds only tensors and plain values: this one was "
                "written by other code, and opening it would run that code") from None
        first = text.strip().splitlines()[0][:200] if text.strip() else type(e).__name__
        raise ReferenceCheckpointError(f"{path}: not a readable PyTorch checkpoint (truncated or another format): {first}") from None
    _check_bounded(ckpt, path)
    for key in ("config", "off_diag_params", "components"):
        if isinstance(ckpt, dict) and ckpt.get(key) is not None and not isinstance(ckpt[key], dict):
            raise ReferenceCheckpointError(f"{path}: '{key}' is a {type(ckpt[key]).__name__}, not a dict")
    state = ckpt.get("model_state_dict", ckpt) if isinstance(ckpt, dict) else None
    if not isinstance(state, dict) or not state or not all(isinstance(k, str) and torch.is_tensor(v) for k, v in state.items()):
        raise ReferenceCheckpointError(f"{path}: expected a dict with 'model_state_dict' (or a state dict) of named tensors")
    not_finite = non_finite(state)
    if not_finite:
        raise ReferenceCheckpointError(f"{path}: NaN or infinite values in {not_finite}: such a model can only produce NaN")
    try:  # saved from a DistributedDataParallel or torch.compile wrapper: the names it added come off
        state = {clean: state[raw] for clean, raw in unwrapped_names(state, str(path)).items()}
    except CheckpointError as e:
        raise ReferenceCheckpointError(str(e)) from None
    if "model_state_dict" in ckpt:
        return {**ckpt, "model_state_dict": state}
    return {"model_state_dict": state} if "model_state_dict" in ckpt else {"model_state_dict": state}


def _check_bounded(ckpt, path: Path) -> None:
    """Refuse, before anything reads it, a loaded checkpoint that is small on disk and huge in use: values
    counted as a tree (a pickle's shared references make a few bytes stand for a tree of billions of
    nodes that printing or comparing would walk), nesting deeper than MAX_REFERENCE_DEPTH, and a tensor
    whose view spans more elements than its storage holds (a zero-stride view standing for a huge tensor)."""
    pending, seen = [(ckpt, 0)], 0
    while pending:
        value, depth = pending.pop()
        seen += 1
        if seen > MAX_REFERENCE_VALUES:
            raise ReferenceCheckpointError(f"{path}: refused, its values count past {MAX_REFERENCE_VALUES:,} when "
                                           "shared references are followed (a checkpoint of the reference code "
                                           "holds far fewer); nothing of it was used")
        if depth > MAX_REFERENCE_DEPTH:
            raise ReferenceCheckpointError(f"{path}: refused, its values nest deeper than {MAX_REFERENCE_DEPTH} "
                                           "levels (a checkpoint of the reference code nests a few)")
        if torch.is_tensor(value):
            held = value.untyped_storage().nbytes() // max(value.element_size(), 1)
            if value.numel() > held:
                raise ReferenceCheckpointError(
                    f"{path}: refused, a tensor of shape {tuple(value.shape)} ({value.numel():,} elements) is a view "
                    f"over a storage of {held:,} (zero or overlapping strides), which any use would expand; nothing of it "
                    "was used")
        elif isinstance(value, dict):
            pending.extend((v, depth + 1) for item in value.items() for v in item)
        elif isinstance(value, (list, tuple, set, frozenset)):
            pending.extend((v, depth + 1) for v in value)


def _check_expanded_size(path: Path) -> None:
    """Refuse a zip whose records would expand past what a checkpoint holds, before torch reads any:
    torch.save stores its records uncompressed, so a compressed one is a zip bomb or another format."""
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        raise ReferenceCheckpointError(f"{path}: not a readable PyTorch checkpoint (its zip directory: {e})") from None
    expanded = sum(m.file_size for m in members)
    compressed = [m.filename for m in members if m.compress_type != zipfile.ZIP_STORED]
    if expanded > MAX_REFERENCE_BYTES or compressed:
        detail = (f"{len(compressed)} compressed records ({compressed[0]}, ...)" if compressed
                  else f"records of {expanded:,} bytes in all")
        raise ReferenceCheckpointError(f"{path}: refused before reading, {detail}: torch.save writes its records "
                                       f"uncompressed, at most {MAX_REFERENCE_BYTES:,} bytes are read")


@dataclass(frozen=True)
class Reading:
    """What a reference model read, in this project's terms: a registered modality, whether its
    inputs are 4x4x3 patch vectors (the image task) rather than token ids, and whether each patch
    is reconstructed in place by the file's own embedding and head (its components)."""

    modality: str
    patches: bool
    in_place: bool


READINGS = {r.modality: r for r in (Reading("patches_in_place", patches=True, in_place=True),
                                    Reading("image_patches", patches=True, in_place=False),
                                    Reading("tokens", patches=False, in_place=False))}


@dataclass(frozen=True)
class ReferenceSettings:
    """What a conversion uses besides the tensors' shapes, and where each value came from
    ("command line", "the file's config", "off_diag_params", "the tensors", "default")."""

    n_head: int | None
    diag_scale: float
    off_diag_scale: float
    modality: str
    sources: dict

    def notes(self) -> list[str]:
        return ["Settings of the conversion: " + "; ".join(f"{k} from {v}" for k, v in self.sources.items()) + "."]


def reference_settings(ckpt: dict, modality: str | None = None, n_head: int | None = None,
                       diag_scale: float | None = None, off_diag_scale: float | None = None) -> ReferenceSettings:
    """The settings of a reference checkpoint: a command-line value, else the file's own config
    (and off_diag_params), else what the tensors say, else the reference code's default."""
    saved, params = _saved_settings(ckpt)
    components: dict = ckpt["components"] if isinstance(ckpt.get("components"), dict) else {}
    sources: dict = {}
    for name, value in (("--n-head", n_head), ("--diag-scale", diag_scale), ("--off-diag-scale", off_diag_scale)):
        _check_setting(name, value, "count" if name == "--n-head" else "number", "the command line")

    def pick(name, flag, *found):
        for value, where in ((flag, "the command line"), *found):
            if value is not None:
                sources[name] = where
                return value
        return None

    for name, why in (("baseline", "their own baseline models are a different architecture; convert DAMCHA, "
                                   "standard or static-metric runs"),
                      ("compact_rank", "compact (low-rank) metrics are not supported")):
        if saved.get(name):
            raise ReferenceCheckpointError(f"{name}={saved[name]!r}: {why}")
    heads = pick("n_head", n_head, (saved.get("n_heads"), "the file's config"))
    diag = pick("diag_scale", diag_scale, (saved.get("diag_scale"), "the file's config"))
    off = pick("off_diag_scale", off_diag_scale, (params.get("off_diag_scale"), "off_diag_params"),
               (saved.get("off_diag_scale"), "the file's config"))
    if modality is None:
        inferred = ("patches_in_place" if "patcher" in components else "tokens" if "embedding" in components else None)
        modality = pick("modality", None, (inferred, "the file's components"),
                        ("image_patches", "default (no components in the file)"))
    else:
        sources["modality"] = "the command line"
    if modality not in READINGS:
        raise ReferenceCheckpointError(f"modality {modality!r}: reference models read one of {', '.join(READINGS)}")
    if READINGS[modality].in_place:
        layout = {k: saved.get(k) for k in ("in_ch", "img_size", "patch_size") if saved.get(k) is not None}
        if any(layout.get(k, v) != v for k, v in (("in_ch", 3), ("img_size", 32), ("patch_size", 4))):
            raise ReferenceCheckpointError(f"image layout {layout}: only 32x32 colour images in 4x4 patches can be read here")
    for name, value in (("diag_scale", diag), ("off_diag_scale", off)):
        if value is None:
            sources[name] = "default (1.0)"
    return ReferenceSettings(None if heads is None else int(heads), 1.0 if diag is None else float(diag),
                             1.0 if off is None else float(off), modality, sources)


# What each setting of the reference's saved `config` (and `off_diag_params`) read here must be.
SAVED_SETTINGS = {"n_heads": "count", "diag_scale": "number", "off_diag_scale": "number", "in_ch": "count",
                  "img_size": "count", "patch_size": "count", "off_diag_mode": "text"}
MAX_REFERENCE_COUNT = 65_536


def _saved_settings(ckpt: dict) -> tuple[dict, dict]:
    """The file's `config` and `off_diag_params`, every setting this converter reads checked by name."""
    found = []
    for key in ("config", "off_diag_params"):
        section = ckpt.get(key)
        if section is not None and not isinstance(section, dict):
            raise ReferenceCheckpointError(f"'{key}' is a {type(section).__name__}, not a dict of settings")
        section = section or {}
        for name, kind in SAVED_SETTINGS.items():
            _check_setting(f"{key}.{name}", section.get(name), kind, "the file")
        found.append(section)
    return found[0], found[1]


def _check_setting(name: str, value, kind: str, where: str) -> None:
    """Refuse a setting of the wrong type or range, naming it (None: not given)."""
    if value is None:
        return
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "count" and not (number and float(value).is_integer() and 1 <= value <= MAX_REFERENCE_COUNT):
        raise ReferenceCheckpointError(f"{name} in {where} must be a whole number from 1 to {MAX_REFERENCE_COUNT:,}, "
                                       f"got {str(value)[:60]!r}")
    if kind == "number" and not (number and math.isfinite(value)):
        raise ReferenceCheckpointError(f"{name} in {where} must be a finite number, got {str(value)[:60]!r}")
    if kind == "text" and not isinstance(value, str):
        raise ReferenceCheckpointError(f"{name} in {where} must be a string, got {str(value)[:60]!r}")


def reference_config(ckpt: dict, settings: ReferenceSettings, block_size: int | None = None,
                     vocab_size: int | None = None) -> ModelConfig:
    """Our ModelConfig for a reference checkpoint: sizes read from the tensors' shapes, the head
    count from the settings (or the head-block masks), the reference layout."""
    state = _decoder_state(ckpt)
    layers = sorted({int(m.group(1)) for k in state if (m := re.match(r"layers\.(\d+)\.", k))})
    if not layers or layers != list(range(len(layers))):
        raise ReferenceCheckpointError(f"no decoder layers 0..L-1 among the keys (found layers {layers})")
    D = state["layers.0.self_attn.W_v.weight"].shape[0] if "layers.0.self_attn.W_v.weight" in state else None
    if D is None:
        raise ReferenceCheckpointError("missing layers.0.self_attn.W_v.weight: not a reference decoder")
    d_ff = state["layers.0.ff.net.0.weight"].shape[0]
    generator = _generator_prefix(state, 0)
    fields: dict = dict(n_layer=len(layers), n_embd=D, mlp_ratio=max(1, d_ff // D), norm_placement="post",
                        position_encoding="sinusoidal", final_norm=False, dropout=0.0, causal=True)
    if d_ff % D:
        fields["mlp_width"] = d_ff
    if generator is not None:
        weights = [state[k] for k in sorted((k for k in state if k.startswith(generator + "mlp.") and k.endswith(".weight")),
                                            key=lambda k: int(k.split(".")[-2]))]
        if weights[-1].shape[0] != D * D:
            raise ReferenceCheckpointError(f"the generator's last layer has {weights[-1].shape[0]} outputs, not D*D = {D * D} "
                                 "(compact_rank metrics are not supported)")
        per_layer = generator.startswith("layers.") or _has_layer_bias(state)
        masked = _heads_from_mask(state, D)
        if settings.n_head is not None and settings.n_head != masked:
            raise ReferenceCheckpointError(f"n_head {settings.n_head} does not match the {masked} head blocks of diag_mask")
        fields.update(attention="damcha", n_head=masked, attention_options=dict(
            metric_input="adaptive", score_form="row_sum", metric_sharing="per_layer" if per_layer else "shared",
            generator_widths=tuple(w.shape[0] for w in weights[:-1])))
    elif "layers.0.self_attn.M0" in state:
        fields.update(attention="damcha", n_head=_given_heads(settings.n_head), attention_options=dict(
            metric_input="static", metric_sharing="per_layer", score_form="row_sum"))
    elif "layers.0.self_attn.W_q.weight" in state:
        fields.update(attention="mha", n_head=_given_heads(settings.n_head))
    else:
        raise ReferenceCheckpointError("layer 0 has neither a metric generator, an M0 nor W_q: unknown attention")
    components: dict = ckpt["components"] if isinstance(ckpt.get("components"), dict) else {}
    reading = READINGS[settings.modality]
    if reading.patches:
        fields.update(input_dim=PATCH_DIM, vocab_size=1, block_size=block_size or 64, modality=settings.modality)
        head = components.get("head", {}) if reading.in_place else {}
        if "proj.0.weight" in head:
            fields["head_hidden"] = int(head["proj.0.weight"].shape[0])
    else:
        embedding = components.get("embedding", {}).get("weight")
        if embedding is not None:
            if vocab_size and vocab_size != embedding.shape[0]:
                raise ReferenceCheckpointError(f"vocabulary size {vocab_size} given, the file's embedding has {embedding.shape[0]}")
            vocab_size = int(embedding.shape[0])
        if not vocab_size:
            raise ReferenceCheckpointError("a text checkpoint without an embedding: give its tokenizer's vocabulary size "
                                 f"(their loaders use {', '.join(f'{k} ({v})' for k, v in TOKENIZERS.items())})")
        fields.update(vocab_size=vocab_size, block_size=block_size or 128, modality="tokens", head_bias=True)
    return ModelConfig(**fields)


def convert_state(ckpt: dict, config: ModelConfig, settings: ReferenceSettings,
                  seed: int = 0) -> tuple[dict[str, torch.Tensor], ImportReport]:
    """Our state dict for `config` from a reference checkpoint, and what was done to each tensor."""
    state = _decoder_state(ckpt)
    report = ImportReport()
    ours = build_model(config, seed=seed).state_dict()
    out: dict[str, torch.Tensor] = {}

    def take(their: str, our: str, value: torch.Tensor | None = None) -> None:
        value = state[their] if value is None else value
        if our not in ours:
            raise ReferenceCheckpointError(f"{their}: no place for it in the converted model ({our})")
        if tuple(value.shape) != tuple(ours[our].shape):
            raise ReferenceCheckpointError(f"{PREFIX}{their}: shape {tuple(value.shape)}, expected {tuple(ours[our].shape)} for {our}")
        out[our] = value.detach().to(torch.float32).clone()
        report.mapped.append(PREFIX + their)

    for i in range(config.n_layer):
        a, b = f"layers.{i}.", f"blocks.{i}."
        for theirs, our in (("self_attn.W_v", "attn.value"), ("self_attn.out_proj", "attn.proj"), ("ln1", "ln_1"),
                            ("ln2", "ln_2"), ("ff.net.0", "mlp.fc"), ("ff.net.3", "mlp.proj"),
                            ("self_attn.W_q", "attn.query"), ("self_attn.W_k", "attn.key")):
            for part in ("weight", "bias"):
                if a + theirs + "." + part in state:
                    take(a + theirs + "." + part, b + our + "." + part)
        if a + "self_attn.M0" in state:  # a static metric per layer; the row sum of its blocks scores
            take(a + "self_attn.M0", b + "attn.metric_source.generator.weight")

    adaptive = config.mechanism.metric(config) == "adaptive"
    scales = _block_scales(ckpt, config, settings, report) if adaptive else None
    for source, target in _generator_places(state, config):
        hidden = sorted((k for k in state if k.startswith(source + "mlp.") and k.endswith(".weight")),
                        key=lambda k: int(k.split(".")[-2]))
        for j, key in enumerate(hidden[:-1]):
            take(key, f"{target}generator.hidden.{j}.weight")
            take(key[:-len("weight")] + "bias", f"{target}generator.hidden.{j}.bias")
        assert scales is not None  # (f's places exist only for an adaptive metric)
        last, bias = state[hidden[-1]], state[hidden[-1][:-len("weight")] + "bias"]
        layer = int(target.split(".")[1]) if target.startswith("blocks.") else 0
        extra = _layer_bias(state, source, layer, config.n_embd, report)
        # M = (W h + b + layer bias) * s elementwise: the scales fold into the rows that produce M.
        take(hidden[-1], f"{target}generator.out.weight", last * scales.reshape(-1, 1))
        take(hidden[-1][:-len("weight")] + "bias", f"{target}generator.out.bias", (bias + extra.reshape(-1)) * scales.reshape(-1))

    _check_buffers(state, config, report)
    used = {k[len(PREFIX):] for k in report.mapped} | {k[len(PREFIX):] for k in report.duplicates + report.ignored}
    report.unknown = sorted(PREFIX + k for k in state if k not in used)
    _components(ckpt, config, ours, out, report)
    for key, value in ours.items():
        if key not in out:
            out[key] = value
            report.initialised.append(key)
    return out, report


def import_reference(source: str | Path, out_dir: str | Path, modality: str | None = None,
                     block_size: int | None = None, vocab_size: int | None = None, tokenizer: str | None = None,
                     diag_scale: float | None = None, n_head: int | None = None, off_diag_scale: float | None = None,
                     progress=None) -> Path:
    """Convert a reference .pt file, or a folder of checkpoint_epoch_N.pt files (one snapshot per
    epoch; best_model.pt when there are none), into a run directory at out_dir. Every setting
    not given here is read from the files (see ReferenceSettings); nothing is left behind in
    out_dir when the conversion is refused."""
    files = reference_files(source)
    if tokenizer and not vocab_size:
        if tokenizer not in TOKENIZERS:
            raise ReferenceCheckpointError(f"unknown tokenizer {tokenizer!r}; known: {list(TOKENIZERS)} (or give --vocab-size)")
        vocab_size = TOKENIZERS[tokenizer]
    out = Path(out_dir)
    refuse_existing(out, ReferenceCheckpointError)  # before any file is read: nothing of the user's is written over
    config: ModelConfig | None = None
    settings: ReferenceSettings | None = None
    rows: list[dict] = []
    converted: list[tuple] = []
    for k, (epoch, path) in enumerate(files):
        try:
            epoch, cfg, these, state, report, loss = _convert_file(path, epoch, modality, n_head, diag_scale,
                                                                   off_diag_scale, block_size, vocab_size)
        except ReferenceCheckpointError as e:
            raise ReferenceCheckpointError(str(e) if str(e).startswith(str(path)) else f"{path}: {e}") from None
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, RuntimeError) as e:
            raise ReferenceCheckpointError(f"{path}: cannot be converted ({type(e).__name__}: {str(e)[:200]})") from None
        if config is not None and (cfg != config or these != settings):
            raise ReferenceCheckpointError(f"{path}: a different architecture or setting from {files[0][1].name}")
        if any(e == epoch for e, *_ in converted):
            raise ReferenceCheckpointError(f"{path}: epoch {epoch} again (also in another file of {source})")
        config, settings = cfg, these
        converted.append((epoch, path, state, report))
        rows.append({"epoch": epoch, **({"reference_val_loss": loss} if loss is not None else {})})
        if progress:
            progress(k + 1, len(files))
    rows.sort(key=lambda r: r["epoch"])
    # A refused, failed or killed import leaves neither a half run at out nor anything in the temporary directory.
    with staged_folder(out, "importing", ReferenceCheckpointError) as staging:
        assert config is not None and settings is not None  # (files holds one at least: _reference_files)
        _write_imported_run(staging, source, config, settings, converted, rows, tokenizer)
    return out


def _convert_file(path: Path, epoch: int | None, modality, n_head, diag_scale, off_diag_scale, block_size, vocab_size):
    """One reference file read, checked and converted: (epoch, config, settings, state, report, loss)."""
    ckpt = read_reference(path)
    if epoch is None:
        epoch = ckpt.get("epoch", 0)
        if not isinstance(epoch, int) or isinstance(epoch, bool):
            raise ReferenceCheckpointError(f"'epoch' is {str(epoch)[:40]!r}, not a whole number")
    if not 0 <= epoch < 10**6:
        raise ReferenceCheckpointError(f"epoch {epoch} is outside 0..999,999 (a run's snapshots are numbered so)")
    settings = reference_settings(ckpt, modality, n_head, diag_scale, off_diag_scale)
    config = reference_config(ckpt, settings, block_size, vocab_size)
    state, report = convert_state(ckpt, config, settings)
    overflowed = non_finite(state)
    if overflowed:  # finite in the file, not once the scales are folded in (or a component holds NaN)
        raise ReferenceCheckpointError(f"NaN or infinite values after conversion in {overflowed} "
                                       "(the components, or diag_scale / off_diag_scale too large to fold in)")
    loss = ckpt.get("loss")
    loss = float(loss) if isinstance(loss, int | float) and not isinstance(loss, bool) and math.isfinite(loss) else None
    return epoch, config, settings, state, report, loss


def _write_imported_run(out: Path, source, config: ModelConfig, settings: ReferenceSettings, converted: list,
                        rows: list[dict], tokenizer: str | None) -> None:
    reports = {}
    for epoch, path, state, report in converted:
        save_tensors_atomic(out / snapshot_name(epoch), state, {"format_version": str(FORMAT_VERSION), "epoch": str(epoch),
                                                                 "variant": config.variant, "imported_from": path.name})
        reports[path.name] = report.to_dict()
    text = not config.input_dim
    data = {"name": "reference-text" if text else "sample-images", "task": "next_token" if text else "next_vector",
            "unit": "token" if text else "patch", "source": str(source), "tokenizer": tokenizer}
    first = next(iter(reports.values()))
    notes = [*first["notes"], *settings.notes()]
    mapped = {k.split(".")[1] for k in first["mapped"] if k.startswith("components.")}
    if mapped:
        notes.append("The trained " + " and ".join(sorted(mapped)) + " from the file's components are this run's "
                     + ("patch embedding and reconstruction head (patches read in place, as the reference task reads "
                        "them): M(x) of an input is what the trained model computes."
                        if config.input_dim else "token embedding and head."))
    if first["initialised"]:
        notes.append("Not in the checkpoint, seeded-random here (the file holds no components for them): "
                     + ", ".join(sorted({k.split(".")[0] for k in first["initialised"]}))
                     + ". The decoder and its metric are the trained weights; losses and predictions are not.")
    if text:
        notes.append(f"Inputs are token ids of the {tokenizer or 'original'} tokenizer, whose files are not here: "
                     "the metric is inspected on ids, not on text.")
    config_dict = {"format_version": FORMAT_VERSION, "package_version": __version__, "model": config.to_dict(),
                   "train": {"imported_from": str(source), "reference": "github.com/erwinmsmith/DAMCHA",
                             "diag_scale": settings.diag_scale, "off_diag_scale": settings.off_diag_scale,
                             "setting_sources": settings.sources, "import_report": reports},
                   "data": data, "notes": notes}
    write_text_atomic(out / CONFIG_FILE, json.dumps(config_dict, indent=2, allow_nan=False))
    write_text_atomic(out / METRICS_FILE, "".join(json.dumps(r, allow_nan=False) + "\n" for r in rows))


def reference_files(source: str | Path) -> list[tuple[int | None, Path]]:
    """(epoch, path) of a .pt file or of a folder's checkpoint_epoch_N.pt files (else its best_model.pt);
    epoch None where the file name does not say it (the loaded file does)."""
    source = Path(source)
    if source.is_file():
        return [(_epoch_in_name(source), source)]
    if not source.is_dir():
        raise ReferenceCheckpointError(f"{source}: no such file or folder")
    files: list[tuple[int | None, Path]] = sorted(
        (int(m.group(1)), p) for p in source.iterdir() if (m := EPOCH_FILE.match(p.name)))
    if not files and (source / "best_model.pt").is_file():
        files = [(None, source / "best_model.pt")]
    if not files:
        raise ReferenceCheckpointError(f"{source}: no checkpoint_epoch_N.pt or best_model.pt files")
    return files


def _epoch_in_name(path: Path) -> int | None:
    m = EPOCH_FILE.match(path.name)
    return int(m.group(1)) if m else None


def _decoder_state(ckpt: dict) -> dict[str, torch.Tensor]:
    state = ckpt["model_state_dict"]
    stripped = {k[len(PREFIX):]: v for k, v in state.items() if k.startswith(PREFIX)}
    if not stripped:
        raise ReferenceCheckpointError(f"no '{PREFIX}*' keys: not a reference TransformerPC state dict "
                             f"(first keys: {list(state)[:4]})")
    return stripped


def _generator_prefix(state: dict, layer: int) -> str | None:
    for prefix in ("shared_mlp_module.", f"layers.{layer}.self_attn._own_mlp."):
        if prefix + "mlp.0.weight" in state:
            return prefix
    return None


def _has_layer_bias(state: dict) -> bool:
    return any(k.endswith("layer_scales") for k in state)


def _generator_places(state: dict, config: ModelConfig) -> list[tuple[str, str]]:
    """(reference generator prefix, our metric-source prefix) pairs (none without an adaptive metric)."""
    if config.mechanism.metric(config) != "adaptive":
        return []
    if config.setting("metric_sharing") == "shared":
        return [("shared_mlp_module.", "metric_source.")]
    return [(_generator_prefix(state, i) or "shared_mlp_module.", f"blocks.{i}.attn.metric_source.")
            for i in range(config.n_layer)]


def _layer_bias(state: dict, source: str, layer: int, D: int, report: ImportReport) -> torch.Tensor:
    """The low-rank per-layer term U diag(s_l) V^T added to M (zero without one)."""
    if source + "layer_scales" not in state:
        return torch.zeros(D, D)
    U, V, s = state[source + "layer_bias_U"], state[source + "layer_bias_V"], state[source + "layer_scales"]
    for name in ("layer_bias_U", "layer_bias_V", "layer_scales"):
        if PREFIX + source + name not in report.mapped:
            report.mapped.append(PREFIX + source + name)
    if layer == 0:
        report.notes.append("The per-layer low-rank term of M is folded into each layer's copy of the generator's "
                            "last bias (exact), so the converted run has one metric source per layer.")
    return (U * s[layer][None]) @ V.T  # (D, D)


def _heads_from_mask(state: dict, D: int) -> int:
    """H from the diagonal head-block mask: the width of its first block."""
    mask = next((v for k, v in state.items() if k.endswith("diag_mask") and not k.endswith("off_diag_mask")), None)
    if mask is None or tuple(mask.shape) != (D, D):
        raise ReferenceCheckpointError("no (D, D) diag_mask buffer to read the number of heads from")
    d = int(mask[0].sum())
    if d <= 0 or D % d:
        raise ReferenceCheckpointError(f"diag_mask's first block has width {d}, which does not divide D = {D}")
    return D // d


def _given_heads(n_head: int | None) -> int:
    if not n_head:
        raise ReferenceCheckpointError("this checkpoint's attention has no head-block mask and the file does not hold the "
                             "head count: give it (--n-head)")
    return int(n_head)


def _block_scales(ckpt: dict, config: ModelConfig, settings: ReferenceSettings, report: ImportReport) -> torch.Tensor:
    """(D, D) factors s_ij the reference multiplies M by: diag_scale on the diagonal blocks,
    off_diag_scale elsewhere (both as the settings say where they come from)."""
    saved, params = _saved_settings(ckpt)
    mode = params.get("off_diag_mode", saved.get("off_diag_mode", "mlp"))
    if mode != "mlp":
        raise ReferenceCheckpointError(f"off_diag_mode {mode!r} builds off-diagonal blocks from the diagonal ones; "
                             "only the default 'mlp' generator is supported")
    d = config.head_dim
    eye = torch.block_diag(*[torch.ones(d, d)] * config.n_head)  # (D, D)
    diag, off = settings.diag_scale, settings.off_diag_scale
    if off != 1.0 or diag != 1.0:
        report.notes.append(f"M's diagonal blocks are scaled by {diag:g} and the others by {off:g} in the reference "
                            "forward; the scales are folded into the generator's last layer (exact).")
    return eye * diag + (1 - eye) * off


def _check_buffers(state: dict, config: ModelConfig, report: ImportReport) -> None:
    """Buffers recomputed here must equal the file's; per-layer copies of the shared generator too."""
    D = config.n_embd
    for key, value in state.items():
        if key == "pe.pe":
            table = SinusoidalPositions(dataclasses.replace(config, block_size=value.shape[0])).table
            if not torch.allclose(value.float(), table, atol=1e-5):
                raise ReferenceCheckpointError(f"{PREFIX}pe.pe differs from the sinusoidal table this converter computes")
            report.ignored.append(PREFIX + key)
        elif key.endswith("diag_mask"):
            d = config.head_dim
            blocks = torch.block_diag(*[torch.ones(d, d)] * config.n_head)
            expected = 1 - blocks if key.endswith("off_diag_mask") else blocks
            if tuple(value.shape) != (D, D) or not torch.equal(value.float(), expected):
                raise ReferenceCheckpointError(f"{PREFIX}{key} is not the head-block mask of {config.n_head} heads")
            report.ignored.append(PREFIX + key)
        elif "._shared_mlp." in key:
            shared = "shared_mlp_module." + key.split("._shared_mlp.", 1)[1]
            if shared not in state or not torch.equal(state[shared], value):
                raise ReferenceCheckpointError(f"{PREFIX}{key} differs from {PREFIX}{shared}: not one shared generator")
            report.duplicates.append(PREFIX + key)


def _patch_order(p: int = 4, channels: int = 3) -> torch.Tensor:
    """For each entry of our patch vector (row, column, channel), the index of the same pixel value
    in theirs (channel, row, column)."""
    return torch.tensor([c * p * p + i * p + j for i in range(p) for j in range(p) for c in range(channels)])


def _components(ckpt: dict, config: ModelConfig, ours: dict, out: dict, report: ImportReport) -> None:
    """The trained embedding and task head the file's `components` hold, mapped exactly onto ours.

    Images: their patcher reads (channel, row, column) patches normalised to u = 2x - 1, ours
    (row, column, channel) patches x in [0, 1], so W' = 2 W P and b' = b - W 1; their head predicts
    u, ours x = (u + 1) / 2, so its last layer is permuted and halved, its bias shifted by 1."""
    parts: dict = ckpt["components"] if isinstance(ckpt.get("components"), dict) else {}
    order = _patch_order()

    def put(name: str, ours_key: str, value: torch.Tensor) -> None:
        if ours_key not in ours or tuple(value.shape) != tuple(ours[ours_key].shape):
            raise ReferenceCheckpointError(f"components.{name}: shape {tuple(value.shape)} does not fit {ours_key} "
                                           f"{tuple(ours[ours_key].shape) if ours_key in ours else ''}")
        out[ours_key] = value.detach().float().clone()
        report.mapped.append(f"components.{name}")

    for group, module in parts.items():
        if not isinstance(module, dict):
            report.unknown.append(f"components.{group}")
            continue
        images = READINGS[config.modality].in_place
        for key, value in module.items():
            name = f"{group}.{key}"
            if group == "patcher" and images and key == "proj.weight":
                put(name, "tok_emb.weight", 2 * value[:, order])
            elif group == "patcher" and images and key == "proj.bias":
                put(name, "tok_emb.bias", value - module["proj.weight"].sum(1))
            elif group == "head" and images and key in ("proj.0.weight", "proj.0.bias"):
                put(name, f"head.hidden.{key.split('.')[-1]}", value)
            elif group == "head" and images and key == "proj.2.weight":
                put(name, "head.weight", 0.5 * value[order])
            elif group == "head" and images and key == "proj.2.bias":
                put(name, "head.bias", 0.5 * (value[order] + 1))
            elif group == "embedding" and not config.input_dim and key == "weight":
                put(name, "tok_emb.weight", value)
            elif group == "head" and not config.input_dim and key in ("proj.weight", "proj.bias"):
                put(name, f"head.{key.split('.')[-1]}", value)
            else:
                report.unknown.append(f"components.{name}")
