"""Checkpoints of the authors' reference implementation (github.com/erwinmsmith/DAMCHA) as runs.

What their code saves, as read in its `utils.save_checkpoint` and `models/` (commit ffa9980):
``torch.save({"epoch", "model_state_dict", "optimizer_state_dict", "loss", "off_diag_params"})``,
``model_state_dict`` being the decoder stack (`TransformerPC`):

    decoder.shared_mlp_module.mlp.{0,3,6}.{weight,bias}   the metric generator D -> 256 -> 512 -> D*D (GELU)
    decoder.shared_mlp_module.{diag,off_diag}_mask         (D, D) head-block masks (buffers)
    decoder.layers.{i}.self_attn._shared_mlp.*             the same generator again, once per layer
    decoder.layers.{i}.self_attn._own_mlp.*                a layer's own generator (share_mlp off)
    decoder.layers.{i}.self_attn.M0                        a layer's static metric (use_mlp off)
    decoder.layers.{i}.self_attn.{W_q,W_k}                 standard attention (use_M off)
    decoder.layers.{i}.self_attn.{W_v,out_proj}.{weight,bias}
    decoder.layers.{i}.{ln1,ln2}.{weight,bias}             post-LN: x = ln1(x + attn(x)); x = ln2(x + ff(x))
    decoder.layers.{i}.ff.net.{0,3}.{weight,bias}          feed-forward D -> d_ff -> D (GELU)
    decoder.pe.pe                                          (4096, D) sinusoidal table (buffer), no final norm
    ...mlp_module.layer_bias_{U,V}, layer_scales           optional low-rank per-layer term added to M

The metric is generated from prefix means of the stack input (embeddings + positions); head i
scores with the row sum m_i = sum_j s_ij M_ij, s = diag_scale on the diagonal blocks and
off_diag_scale elsewhere (only the latter is saved, in off_diag_params). Their patch embedding
(Patchify.proj), token embedding (made inside the trainer) and task heads are separate modules the
checkpoint does not hold: a converted run gets them seeded-random and says so; where a file does
carry them (`patcher_state_dict`, `embedding_state_dict`, `head_state_dict`) they are used.

Loading is `torch.load(weights_only=True)`: tensors and plain values only, never other objects.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

from . import __version__
from .checkpoints import (
    CONFIG_FILE,
    FORMAT_VERSION,
    METRICS_FILE,
    save_tensors_atomic,
    snapshot_name,
    write_text_atomic,
)
from .config import ModelConfig
from .model import build_model

MAX_REFERENCE_BYTES = 4_000_000_000
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
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - torch raises many kinds; all mean "refused"
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if "weights_only" in str(e) or "Unsupported global" in str(e) or "GLOBAL" in str(e):
            raise ReferenceCheckpointError(f"{path}: refused, it holds Python objects other than tensors and plain values "
                                 f"(loaded with weights_only=True; nothing was unpickled): {first}") from None
        raise ReferenceCheckpointError(f"{path}: not a readable PyTorch checkpoint (truncated or another format): {first}") from None
    state = ckpt.get("model_state_dict", ckpt) if isinstance(ckpt, dict) else None
    if not isinstance(state, dict) or not state or not all(isinstance(k, str) and torch.is_tensor(v) for k, v in state.items()):
        raise ReferenceCheckpointError(f"{path}: expected a dict with 'model_state_dict' (or a state dict) of named tensors")
    return ckpt if "model_state_dict" in ckpt else {"model_state_dict": state}


def reference_config(ckpt: dict, modality: str = "image_patches", block_size: int | None = None,
                     vocab_size: int | None = None, n_head: int | None = None) -> ModelConfig:
    """Our ModelConfig for a reference checkpoint: sizes read from the tensors' shapes, the head
    count from the head-block masks (or given for standard attention), the reference layout."""
    state = _decoder_state(ckpt)
    layers = sorted({int(m.group(1)) for k in state if (m := re.match(r"layers\.(\d+)\.", k))})
    if not layers or layers != list(range(len(layers))):
        raise ReferenceCheckpointError(f"no decoder layers 0..L-1 among the keys (found layers {layers})")
    D = state["layers.0.self_attn.W_v.weight"].shape[0] if "layers.0.self_attn.W_v.weight" in state else None
    if D is None:
        raise ReferenceCheckpointError("missing layers.0.self_attn.W_v.weight: not a reference decoder")
    d_ff = state["layers.0.ff.net.0.weight"].shape[0]
    if d_ff % D:
        raise ReferenceCheckpointError(f"feed-forward width {d_ff} is not a multiple of the model width {D}")
    generator = _generator_prefix(state, 0)
    fields: dict = dict(n_layer=len(layers), n_embd=D, mlp_ratio=d_ff // D, norm_placement="post",
                        position_encoding="sinusoidal", final_norm=False, dropout=0.0, causal=True)
    if generator is not None:
        weights = [state[k] for k in sorted((k for k in state if k.startswith(generator + "mlp.") and k.endswith(".weight")),
                                            key=lambda k: int(k.split(".")[-2]))]
        if weights[-1].shape[0] != D * D:
            raise ReferenceCheckpointError(f"the generator's last layer has {weights[-1].shape[0]} outputs, not D*D = {D * D} "
                                 "(compact_rank metrics are not supported)")
        per_layer = generator.startswith("layers.") or _has_layer_bias(state)
        fields.update(attention="damcha", metric_input="adaptive", score_form="row_sum",
                      metric_sharing="per_layer" if per_layer else "shared",
                      generator_widths=tuple(w.shape[0] for w in weights[:-1]), n_head=_heads_from_mask(state, D))
    elif "layers.0.self_attn.M0" in state:
        fields.update(attention="damcha", metric_input="static", metric_sharing="per_layer", score_form="row_sum",
                      n_head=_given_heads(n_head))
    elif "layers.0.self_attn.W_q.weight" in state:
        fields.update(attention="mha", n_head=_given_heads(n_head))
    else:
        raise ReferenceCheckpointError("layer 0 has neither a metric generator, an M0 nor W_q: unknown attention")
    if modality == "image_patches":
        fields.update(input_dim=PATCH_DIM, vocab_size=1, block_size=block_size or 64, modality="image_patches")
    else:
        if not vocab_size:
            raise ReferenceCheckpointError("a text checkpoint holds no embedding: give its tokenizer's vocabulary size "
                                 f"(their loaders use {', '.join(f'{k} ({v})' for k, v in TOKENIZERS.items())})")
        fields.update(vocab_size=vocab_size, block_size=block_size or 128, modality="tokens",
                      head_bias=True)
    return ModelConfig(**fields)


def convert_state(ckpt: dict, config: ModelConfig, diag_scale: float = 1.0,
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

    scales = _block_scales(ckpt, config, diag_scale, report) if config.metric_input == "adaptive" else None
    for source, target in _generator_places(state, config):
        hidden = sorted((k for k in state if k.startswith(source + "mlp.") and k.endswith(".weight")),
                        key=lambda k: int(k.split(".")[-2]))
        for j, key in enumerate(hidden[:-1]):
            take(key, f"{target}generator.hidden.{j}.weight")
            take(key[:-len("weight")] + "bias", f"{target}generator.hidden.{j}.bias")
        last, bias = state[hidden[-1]], state[hidden[-1][:-len("weight")] + "bias"]
        layer = int(target.split(".")[1]) if target.startswith("blocks.") else 0
        extra = _layer_bias(state, source, layer, config.n_embd, report)
        # M = (W h + b + layer bias) * s elementwise: the scales fold into the rows that produce M.
        take(hidden[-1], f"{target}generator.out.weight", last * scales.reshape(-1, 1))
        take(hidden[-1][:-len("weight")] + "bias", f"{target}generator.out.bias", (bias + extra.reshape(-1)) * scales.reshape(-1))

    _check_buffers(state, config, report)
    used = {k[len(PREFIX):] for k in report.mapped} | {k[len(PREFIX):] for k in report.duplicates + report.ignored}
    report.unknown = sorted(PREFIX + k for k in state if k not in used)
    _outer_modules(ckpt, config, ours, out, report)
    for key, value in ours.items():
        if key not in out:
            out[key] = value
            report.initialised.append(key)
    return out, report


def import_reference(source: str | Path, out_dir: str | Path, modality: str = "image_patches",
                     block_size: int | None = None, vocab_size: int | None = None, tokenizer: str | None = None,
                     diag_scale: float = 1.0, n_head: int | None = None, progress=None) -> Path:
    """Convert a reference .pt file, or a folder of checkpoint_epoch_N.pt files (one snapshot per
    epoch; best_model.pt when there are none), into a run directory at out_dir."""
    files = reference_files(source)
    if tokenizer and not vocab_size:
        if tokenizer not in TOKENIZERS:
            raise ReferenceCheckpointError(f"unknown tokenizer {tokenizer!r}; known: {list(TOKENIZERS)} (or give --vocab-size)")
        vocab_size = TOKENIZERS[tokenizer]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config, reports, rows = None, {}, []
    for k, (epoch, path) in enumerate(files):
        ckpt = read_reference(path)
        if epoch is None:
            epoch = ckpt["epoch"] if isinstance(ckpt.get("epoch"), int) else 0
        cfg = reference_config(ckpt, modality, block_size, vocab_size, n_head)
        if config is not None and cfg != config:
            raise ReferenceCheckpointError(f"{path}: a different architecture from {files[0][1].name}")
        config = cfg
        state, report = convert_state(ckpt, cfg, diag_scale)
        save_tensors_atomic(out / snapshot_name(epoch), state, {"format_version": str(FORMAT_VERSION), "epoch": str(epoch),
                                                                 "variant": cfg.variant, "imported_from": path.name})
        reports[path.name] = report.to_dict()
        loss = ckpt.get("loss")
        rows.append({"epoch": epoch, **({"reference_val_loss": float(loss)} if isinstance(loss, (int, float)) else {})})
        if progress:
            progress(k + 1, len(files))
    text = modality != "image_patches"
    data = {"name": "reference-text" if text else "sample-images", "kind": "corpus" if text else "patches",
            "unit": "token" if text else "patch", "source": str(source), "tokenizer": tokenizer}
    first = next(iter(reports.values()))
    notes = [*first["notes"]]
    if first["initialised"]:
        notes.append("Not in the checkpoint, seeded-random here (the reference code does not save them): "
                     + ", ".join(sorted({k.split(".")[0] for k in first["initialised"]}))
                     + ". The decoder and its metric are the trained weights; losses and predictions are not.")
    if text:
        notes.append(f"Inputs are token ids of the {tokenizer or 'original'} tokenizer, whose files are not here: "
                     "the metric is inspected on ids, not on text.")
    config_dict = {"format_version": FORMAT_VERSION, "package_version": __version__, "model": config.to_dict(),
                   "train": {"imported_from": str(source), "reference": "github.com/erwinmsmith/DAMCHA",
                             "diag_scale": diag_scale, "import_report": reports},
                   "data": data, "notes": notes}
    write_text_atomic(out / CONFIG_FILE, json.dumps(config_dict, indent=2))
    write_text_atomic(out / METRICS_FILE, "".join(json.dumps(r) + "\n" for r in rows))
    return out


def reference_files(source: str | Path) -> list[tuple[int | None, Path]]:
    """(epoch, path) of a .pt file or of a folder's checkpoint_epoch_N.pt files (else its best_model.pt);
    epoch None where the file name does not say it (the loaded file does)."""
    source = Path(source)
    if source.is_file():
        return [(_epoch_in_name(source), source)]
    if not source.is_dir():
        raise ReferenceCheckpointError(f"{source}: no such file or folder")
    files = sorted((int(m.group(1)), p) for p in source.iterdir() if (m := EPOCH_FILE.match(p.name)))
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
    """(reference generator prefix, our metric-source prefix) pairs."""
    if config.metric_input != "adaptive":
        return []
    if config.metric_sharing == "shared":
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


def _block_scales(ckpt: dict, config: ModelConfig, diag_scale: float, report: ImportReport) -> torch.Tensor:
    """(D, D) factors s_ij the reference multiplies M by: diag_scale on the diagonal blocks,
    off_diag_scale (saved in off_diag_params; default 1.0) elsewhere."""
    params = ckpt.get("off_diag_params") if isinstance(ckpt.get("off_diag_params"), dict) else {}
    mode = params.get("off_diag_mode", "mlp")
    if mode != "mlp":
        raise ReferenceCheckpointError(f"off_diag_mode {mode!r} builds off-diagonal blocks from the diagonal ones; "
                             "only the default 'mlp' generator is supported")
    off = float(params.get("off_diag_scale", 1.0))
    d = config.head_dim
    eye = torch.block_diag(*[torch.ones(d, d)] * config.n_head)  # (D, D)
    if off != 1.0 or diag_scale != 1.0:
        report.notes.append(f"M's diagonal blocks are scaled by {diag_scale} and the others by {off} in the reference "
                            "forward; the scales are folded into the generator's last layer (exact).")
    return eye * diag_scale + (1 - eye) * off


def _check_buffers(state: dict, config: ModelConfig, report: ImportReport) -> None:
    """Buffers recomputed here must equal the file's; per-layer copies of the shared generator too."""
    from .model import SinusoidalPositions

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


def _outer_modules(ckpt: dict, config: ModelConfig, ours: dict, out: dict, report: ImportReport) -> None:
    """Embedding and head where the file carries them (the reference code saves neither)."""
    places = {"patcher_state_dict": {"proj.weight": "tok_emb.weight", "proj.bias": "tok_emb.bias"},
              "embedding_state_dict": {"weight": "tok_emb.weight"},
              "head_state_dict": {"proj.weight": "head.weight", "proj.bias": "head.bias"}}
    for group, mapping in places.items():
        part = ckpt.get(group)
        if not isinstance(part, dict):
            continue
        for theirs, value in part.items():
            our = mapping.get(theirs)
            if our is None or our not in ours or tuple(value.shape) != tuple(ours[our].shape):
                report.unknown.append(f"{group}.{theirs}")
                continue
            out[our] = value.detach().float().clone()
            report.mapped.append(f"{group}.{theirs}")
