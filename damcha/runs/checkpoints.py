"""Runs on disk: save, load, list and validate. Safetensors + JSON only: loading never unpickles.

A run is a directory:
  config.json               model config, training config, data split, format and package version
  metrics.jsonl             one JSON row per evaluated epoch
  epoch_0000.safetensors    one weights file per snapshot epoch (epoch 0 = the initialisation)
  training_state.safetensors  weights and optimiser state for resuming (not shipped)

A folder of damcha.hf's Hugging Face classes (export-hf, save_pretrained, Trainer's checkpoint-N
folders) is read as a run too (damcha.runs.hf_folders).
"""

from __future__ import annotations

import errno
import os
import re
import struct
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from damcha.inputs.datasets import modality_of_dataset
from damcha.model.config import ModelConfig, with_saved_defaults
from damcha.model.transformer import Snapshot, Transformer, build_model, non_finite
from damcha.runs import hf_folders
from damcha.runs.files import (
    CheckpointError,
    file_sha256,
    parse_json,
    read_json,
    read_text,
    regular_file,
    resolved_inside,
)
from damcha.runs.staging import disk_full

FORMAT_VERSION = 1
CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.jsonl"
STATE_FILE = "training_state.safetensors"
TEST_FILE = "test.json"  # the test split's metrics, evaluated once after the last epoch (data sets that have one)
SNAPSHOT_RE = re.compile(r"^epoch_(\d{4,6})\.safetensors$")
MAX_CONFIG_BYTES = 1_000_000
MAX_METRICS_BYTES = 20_000_000  # ~100,000 epochs of rows
MAX_SNAPSHOT_BYTES = 1_000_000_000
MAX_HEADER_BYTES = 10_000_000
MAX_FOLDER_ENTRIES = 20_000  # entries of one folder looked at when listing runs
MAX_NAME_CHARS = 100  # a data set's name, kind and unit: they travel in every link


def snapshot_name(epoch: int) -> str:
    return f"epoch_{epoch:04d}.safetensors"


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it over `path` only if the block succeeds,
    so an interruption never leaves a half-written file under the final name."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        try:
            yield Path(tmp)
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT) and str(path) not in str(e):
                raise disk_full(path, e.errno) from None
            raise
        os.chmod(tmp, 0o644)  # mkstemp makes 0600 files; runs are shared and shipped
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())  # the content is on disk before its name is: a power cut leaves the old file or the new
        os.replace(tmp, path)
        fsync_folder(path.parent)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def fsync_folder(folder: Path) -> None:
    """Make a rename in `folder` durable (the folder's entry, not only the file's content)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text_atomic(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def save_tensors_atomic(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> None:
    with atomic_path(path) as tmp:
        try:
            save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, str(tmp), metadata=metadata)
        except SafetensorError as e:
            code = write_failure_errno(e)
            raise OSError(code, f"cannot write {path}: {'no space left on device' if code == errno.ENOSPC else e}; "
                                "the files written before it are intact") from None


def write_failure_errno(e: SafetensorError) -> int:
    """The OS failure the safetensors writer reports in its own error type: ENOSPC for a full disk, else EIO."""
    return errno.ENOSPC if "No space left" in str(e) or "StorageFull" in str(e) else errno.EIO


TEMP_RE = re.compile(r"^\..+\.[A-Za-z0-9_]{8}\.tmp$")  # the names atomic_path's mkstemp gives


def remove_stale_temp_files(run_dir: Path) -> list[str]:
    """Delete the temporary files that interrupted atomic writes left in a run folder (a kill
    between mkstemp and the rename); returns their names. Called by the one process that opens
    the run for writing, before it writes anything."""
    removed = []
    for f in Path(run_dir).iterdir():
        try:
            if TEMP_RE.match(f.name) and f.is_file():
                f.unlink()
                removed.append(f.name)
        except OSError:
            continue
    return removed


def save_snapshot(run_dir: Path, epoch: int, model: Transformer) -> Path:
    path = Path(run_dir) / snapshot_name(epoch)
    meta = {"format_version": str(FORMAT_VERSION), "epoch": str(epoch), "variant": model.config.variant}
    save_tensors_atomic(path, model.state_dict(), meta)
    return path


@dataclass(frozen=True)
class Run:
    """A validated run directory (weights are loaded on demand by load_model)."""

    path: Path
    name: str
    model_config: ModelConfig
    train_config: dict
    data: dict
    epochs: tuple[int, ...]
    metrics: tuple[dict, ...]
    raw_config: dict
    # Snapshots on disk that cannot be read (epoch, why): reported on the run, not offered.
    bad_snapshots: tuple[tuple[int, str], ...] = ()
    # The folder its files were fenced to when it was listed (symlinks may not leave it); None: unfenced.
    root: Path | None = None
    # The test split's metrics ("test_…" and the epoch they are of), or None: no test split, or not reached.
    test: dict | None = None
    # Where each epoch's weights are, relative to path, when they are not epoch_NNNN.safetensors (a Hugging
    # Face folder: model.safetensors, checkpoint-N/model.safetensors).
    snapshot_files: tuple[tuple[int, str], ...] = ()

    @property
    def dataset(self) -> str:
        return self.data.get("name", "?")

    @property
    def variant(self) -> str:
        return self.model_config.variant

    def snapshot_path(self, epoch: int) -> Path:
        why = dict(self.bad_snapshots).get(epoch)
        if why is not None:
            raise CheckpointError(why)
        if epoch not in self.epochs:
            raise CheckpointError(f"{self.path}: no snapshot for epoch {epoch}; available: {list(self.epochs)}")
        return self.path / dict(self.snapshot_files).get(epoch, snapshot_name(epoch))

    def metrics_at(self, epoch: int) -> dict | None:
        return next((m for m in self.metrics if m.get("epoch") == epoch), None)


def unopenable(folder: Path) -> str:
    return (f"{folder}: cannot be opened (permission denied: a run folder must be readable and searchable, "
            "chmod u+rx)")


def refuse_unopenable(folder: Path) -> None:
    """A folder this process may not list or enter is said so, not read as one without a config."""
    if not os.access(folder, os.R_OK | os.X_OK):
        raise CheckpointError(unopenable(folder))


def read_config(run_dir: Path, root: Path | None = None) -> dict:
    path = Path(run_dir) / CONFIG_FILE
    if not os.path.lexists(path):
        raise CheckpointError(f"{run_dir}: no {CONFIG_FILE} (not a DAMCHA run directory)")
    cfg = read_json(path, MAX_CONFIG_BYTES, root, "run config")
    if hf_folders.is_hf_config(cfg):
        return cfg
    if not isinstance(cfg, dict) or "format_version" not in cfg or "model" not in cfg:
        raise CheckpointError(f"{path}: not a DAMCHA run config (expected format_version and model)")
    if cfg["format_version"] != FORMAT_VERSION:
        raise CheckpointError(f"{path}: unknown format version {repr(cfg['format_version'])[:40]}; "
                              f"this DAMCHA Lab reads version {FORMAT_VERSION}")
    return cfg


def read_metrics(run_dir: Path, root: Path | None = None) -> list[dict]:
    """The rows of metrics.jsonl, each an object with an integer epoch and numbers or nulls (NaN kept:
    a diverged epoch is a fact to show); anything else refused with its line number."""
    path = Path(run_dir) / METRICS_FILE
    if not os.path.lexists(path):
        return []
    rows = []
    for i, line in enumerate(read_text(path, MAX_METRICS_BYTES, root, "metrics file").splitlines(), 1):
        if not line.strip():
            continue
        row = parse_json(line, f"{path}: line {i}", allow_non_finite=True)
        if not isinstance(row, dict):
            raise CheckpointError(f"{path}: line {i} is a JSON {type(row).__name__}, not an object of metrics")
        epoch = row.get("epoch")
        if not isinstance(epoch, int) or isinstance(epoch, bool) or not 0 <= epoch < 10**6:
            raise CheckpointError(f"{path}: line {i} has no epoch between 0 and 999,999 (got {str(epoch)[:40]!r})")
        for key, value in row.items():
            if not (value is None or isinstance(value, int | float)):
                raise CheckpointError(f"{path}: line {i}, '{key[:60]}' is a {type(value).__name__}, not a number")
        rows.append(row)
    return rows


def read_test(run_dir: Path, root: Path | None = None) -> dict | None:
    """test.json: an object of numbers with the epoch it was evaluated at, or None when absent."""
    path = Path(run_dir) / TEST_FILE
    if not os.path.lexists(path):
        return None
    row = read_json(path, MAX_CONFIG_BYTES, root, "test metrics")
    if not (isinstance(row, dict) and isinstance(row.get("epoch"), int)
            and all(isinstance(v, int | float) and not isinstance(v, bool) for v in row.values())):
        raise CheckpointError(f"{path}: not the test split's metrics (expected an object of numbers with its epoch)")
    return row


# The config entries the app and the CLI read, with their type and range; anything else in the
# sections is kept as it is and never used.
# notes: what a run lacks (a caveat, shown as a warning); provenance: where it came from (shown as information).
SECTION_TYPES = {"model": dict, "train": dict, "data": dict, "notes": list, "provenance": list}
NUMBER, COUNT = (int, float), int
ENTRY_RULES: dict[str, dict[str, tuple]] = {
    "train": {"epochs": (COUNT, 0, 10**6), "lr": (NUMBER, 0, 1e3), "optimizer": (str,), "split_seed": (COUNT, 0, 2**63 - 1),
              "val_windows": (COUNT, 1, 100_000), "batch_size": (COUNT, 1, 10**7), "seed": (COUNT, 0, 2**63 - 1)},
    "data": {"name": (str,), "kind": (str,), "task": (str,), "unit": (str,), "bytes": (COUNT, 0, 2**63 - 1),
             "val_fraction": (NUMBER, 0, 1), "n_train": (COUNT, 0, 2**63 - 1), "n_val": (COUNT, 0, 2**63 - 1),
             "val_start": (COUNT, 0, 2**63 - 1)},
}


def check_config_shape(cfg: dict, path: Path) -> None:
    """Refuse a config whose sections or read entries have the wrong type or range, naming the first one."""
    for section, kind in SECTION_TYPES.items():
        if section in cfg and not isinstance(cfg[section], kind):
            raise CheckpointError(f"{path}: '{section}' must be a {kind.__name__}, "
                                  f"not {type(cfg[section]).__name__}")
    for section, entries in ENTRY_RULES.items():
        for key, (kind, *bounds) in entries.items():
            if key not in cfg.get(section, {}):
                continue
            value = cfg[section][key]
            if not isinstance(value, kind) or isinstance(value, bool):
                raise CheckpointError(f"{path}: '{section}.{key}' has the wrong type ({type(value).__name__})")
            if bounds and not bounds[0] <= value <= bounds[1]:
                raise CheckpointError(f"{path}: '{section}.{key}' is {str(value)[:40]}, outside {bounds[0]:g}..{bounds[1]:g}")
            if kind is str and len(value) > MAX_NAME_CHARS:
                raise CheckpointError(f"{path}: '{section}.{key}' is {len(value):,} characters long (at most "
                                      f"{MAX_NAME_CHARS}: it is shown in every view and travels in every link)")
    for section in ("notes", "provenance"):
        if not all(isinstance(n, str) for n in cfg.get(section, [])):
            raise CheckpointError(f"{path}: '{section}' must be a list of strings")


def load_run(run_dir: str | Path, root: str | Path | None = None) -> Run:
    """Read and validate a run's config, metrics and list of snapshots (no weights yet).

    Every file is read through damcha.runs.files (regular files only, sizes capped, symlinks kept
    inside `root` when given). Every snapshot's header is checked here (a few bytes each): a
    truncated, foreign or unreadable snapshot is reported in `bad_snapshots` and left out of
    `epochs`, so the run's other epochs stay usable."""
    run_dir = Path(run_dir)
    root = None if root is None else Path(root)
    if not run_dir.is_dir():
        raise CheckpointError(f"{run_dir}: no such run directory")
    refuse_unopenable(run_dir)
    folder = None
    if _has(run_dir, CONFIG_FILE):
        cfg = read_config(run_dir, root)
        if hf_folders.is_hf_config(cfg):
            folder = hf_folders.read_folder(run_dir, cfg, root)
    elif hf_folders.holds_trainer_checkpoints(run_dir):
        folder = hf_folders.read_folder(run_dir, None, root)
    else:
        raise CheckpointError(f"{run_dir}: no {CONFIG_FILE} (not a DAMCHA run directory)")
    if folder is not None:
        cfg = folder.config
    check_config_shape(cfg, run_dir / CONFIG_FILE)
    try:
        fields = dict(cfg["model"])
        # Runs saved before the config named its modality: the data set decides it, here only.
        fields.setdefault("modality", modality_of_dataset(cfg.get("data", {}).get("name", "")))
        model_config = ModelConfig.from_dict(with_saved_defaults(fields))
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{run_dir / CONFIG_FILE}: {e}") from None
    files = folder.snapshots if folder is not None else _snapshot_files(run_dir)
    if not files:
        raise CheckpointError(f"{run_dir}: no snapshot files (epoch_NNNN.safetensors)")
    epochs, bad = [], []
    for epoch, name in sorted(files.items()):
        try:
            read_snapshot_header(run_dir / name, root)
            epochs.append(epoch)
        except CheckpointError as e:
            bad.append((epoch, str(e)))
        except Exception as e:  # noqa: BLE001 — whatever one snapshot holds, only its epoch is lost
            bad.append((epoch, f"{run_dir / name}: unreadable ({type(e).__name__})"))
    if not epochs:
        raise CheckpointError(f"{run_dir}: no readable snapshot ({bad[0][1]})")
    metrics = folder.metrics if folder is not None and folder.metrics is not None else read_metrics(run_dir, root)
    own_files = tuple(files.items()) if folder is not None else ()
    return Run(run_dir, run_dir.name, model_config, cfg.get("train", {}), cfg.get("data", {}),
               tuple(epochs), tuple(metrics), cfg, tuple(bad), root, read_test(run_dir, root), own_files)


def _snapshot_files(run_dir: Path) -> dict[int, str]:
    try:
        return {int(m.group(1)): f.name for f in os.scandir(run_dir) if (m := SNAPSHOT_RE.match(f.name))}
    except OSError as e:
        raise CheckpointError(f"{run_dir}: cannot list this folder ({e.strerror})") from None


@dataclass(frozen=True)
class SnapshotHeader:
    """What a safetensors file says of itself, read without touching its tensors."""

    metadata: dict[str, str]
    tensors: dict[str, tuple[tuple[int, ...], str]]  # stored name -> (shape, dtype such as "F32")


def read_snapshot_header(path: Path, root: Path | None = None) -> SnapshotHeader:
    """The header of a safetensors file, checked before any tensor is allocated: a regular file of a
    bounded size, whose header safetensors itself accepts (offsets that cover the file exactly,
    known dtypes, shapes that fit their bytes, string metadata)."""
    real, info = regular_file(path, root, MAX_SNAPSHOT_BYTES, "DAMCHA snapshot")
    size = info.st_size
    try:
        with open(real, "rb") as f:
            raw = f.read(8)
    except OSError as e:
        raise CheckpointError(f"{path}: cannot be read ({e.strerror})") from None
    if len(raw) < 8:
        raise CheckpointError(f"{path}: truncated ({size} bytes: not a safetensors file)")
    (n,) = struct.unpack("<Q", raw)
    if n > min(MAX_HEADER_BYTES, size - 8):
        raise CheckpointError(f"{path}: truncated or not a safetensors file (header length {n:,} does not fit "
                              f"the file's {size:,} bytes)")
    try:
        with safe_open(str(real), framework="pt") as f:
            metadata = dict(f.metadata() or {})
            tensors = {}
            for name in f.keys():
                part = f.get_slice(name)
                tensors[name] = (tuple(part.get_shape()), str(part.get_dtype()))
    except (SafetensorError, OSError, ValueError) as e:
        reason = str(e).replace("Error while deserializing header: ", "")
        if "incomplete metadata" in reason or "not fully covered" in reason:
            reason = f"truncated or altered: its header does not describe the file's {size:,} bytes"
        raise CheckpointError(f"{path}: not a readable safetensors file ({reason[:300]})") from None
    return SnapshotHeader(metadata, tensors)


WRAPPER_PREFIXES = ("module.", "_orig_mod.", "transformer.")  # DistributedDataParallel, torch.compile, damcha.hf


def unwrapped_name(name: str) -> str:
    """A parameter's name with the prefixes that wrapping a model adds taken off (`module.` from
    DistributedDataParallel, `_orig_mod.` from torch.compile, `transformer.` from damcha.hf's classes,
    in any order and number)."""
    while name.startswith(WRAPPER_PREFIXES):
        name = name.split(".", 1)[1]
    return name


def unwrapped_names(names, where: str = "") -> dict[str, str]:
    """{unwrapped name: stored name}; refuses two stored names that unwrap to one."""
    out: dict[str, str] = {}
    for raw in names:
        clean = unwrapped_name(raw)
        if clean in out:
            raise CheckpointError(f"{where}: both {out[clean]!r} and {raw!r} name the tensor {clean!r}")
        out[clean] = raw
    return out


_DTYPES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16}


def load_state(path: Path, expected: dict[str, torch.Tensor], root: Path | None = None) -> dict[str, torch.Tensor]:
    """Tensors of a snapshot, after checking names, shapes and dtypes against `expected`."""
    header = read_snapshot_header(path, root)
    if header.metadata.get("format_version") not in (None, str(FORMAT_VERSION)):
        raise CheckpointError(f"{path}: unknown format version {str(header.metadata['format_version'])[:40]!r}")
    stored = unwrapped_names(header.tensors, str(path))
    names = set(stored)
    missing, extra = set(expected) - names, names - set(expected)
    if missing or extra:
        detail = f"missing {sorted(missing)[:3]}" if missing else f"unexpected {sorted(extra)[:3]}"
        raise CheckpointError(f"{path}: weights do not match the run's config ({detail}); a foreign or mismatched checkpoint")
    for k, ref in expected.items():
        shape, dtype = header.tensors[stored[k]]
        if shape != tuple(ref.shape) or dtype not in _DTYPES:
            raise CheckpointError(f"{path}: tensor {k} has shape {list(shape)} {dtype}, the config needs {list(ref.shape)}")
    try:
        with safe_open(str(resolved_inside(path, root)), framework="pt") as f:
            tensors = {k: f.get_tensor(stored[k]) for k in expected}
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{path}: corrupt safetensors file ({e})") from None
    not_finite = non_finite(tensors)
    if not_finite:
        raise CheckpointError(f"{path}: tensors with NaN or infinite values: {not_finite}")
    return tensors


def save_training_state(run_dir: Path, model: Transformer, opt: torch.optim.Optimizer, epoch: int, step: int) -> None:
    """Weights and optimiser state after `epoch` (global `step`), for an exact resume."""
    tensors = {f"model.{k}": v for k, v in model.state_dict().items()}
    for i, st in opt.state_dict()["state"].items():
        for name, value in st.items():
            tensors[f"opt.{i}.{name}"] = torch.as_tensor(value).reshape(-1) if name == "step" else value
    meta = {"format_version": str(FORMAT_VERSION), "epoch": str(epoch), "step": str(step)}
    save_tensors_atomic(Path(run_dir) / STATE_FILE, tensors, meta)


def load_training_state(run_dir: Path, model: Transformer, opt: torch.optim.Optimizer) -> tuple[int, int]:
    """Restore weights and optimiser state saved by save_training_state; returns (epoch, step).

    Checked like a snapshot: the header before any tensor is read, the model's tensors by name,
    shape and dtype; the optimiser's by parameter index and shape."""
    path = Path(run_dir) / STATE_FILE
    header = read_snapshot_header(path)
    meta = header.metadata
    try:
        epoch, step = int(meta["epoch"]), int(meta["step"])
    except (KeyError, ValueError):
        raise CheckpointError(f"{path}: not a training state (no epoch and step in its metadata)") from None
    expected = {f"model.{k}": v for k, v in model.state_dict().items()}
    params = list(model.parameters())
    for k in header.tensors:
        if not k.startswith("opt."):
            continue
        parts = k.split(".", 2)
        if len(parts) != 3 or not parts[1].isdigit() or int(parts[1]) >= len(params):
            raise CheckpointError(f"{path}: optimiser tensor {k} belongs to no parameter of this model")
        ref = params[int(parts[1])]
        expected[k] = torch.empty(1) if parts[2] == "step" else torch.empty(ref.shape)
    tensors = load_state(path, expected)
    model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
    sd = opt.state_dict()
    state: dict[int, dict] = {}
    for k, v in tensors.items():
        if k.startswith("opt."):
            _, i, name = k.split(".", 2)
            state.setdefault(int(i), {})[name] = v.reshape(()) if name == "step" else v
    sd["state"] = state
    opt.load_state_dict(sd)
    return epoch, step


def load_model(run: Run | str | Path, epoch: int | None = None, device: str | torch.device = "cpu") -> Transformer:
    """The run's model at `epoch` (default: the last snapshot), in eval mode and frozen
    (requires_grad False: for inference; attribution works on its own trainable copy), on `device`."""
    if not isinstance(run, Run):
        run = load_run(run)
    epoch = run.epochs[-1] if epoch is None else epoch
    model = build_model(run.model_config)
    state = load_state(run.snapshot_path(epoch), model.state_dict(), run.root)
    model.load_state_dict(state)
    model.snapshot = Snapshot(str(run.path), epoch, file_sha256(run.snapshot_path(epoch)))
    return model.to(device).eval().requires_grad_(False)


RUN_FILES = re.compile(rf"^({SNAPSHOT_RE.pattern[1:-1]}|{re.escape(METRICS_FILE)}|{re.escape(STATE_FILE)}|"
                       rf"{re.escape(TEST_FILE)})$")


def list_runs(root: str | Path) -> tuple[list[Run], list[tuple[Path, str]]]:
    """Every run directory under `root` (depth 1 or 2), and the folders that failed with why.

    Only directories that resolve inside root are considered (no '..' or symlink escapes), and
    every file of a run is read fenced to root. A folder that holds a run's files but no
    config.json, an unreadable folder, and a folder with more than MAX_FOLDER_ENTRIES
    sub-folders (the first ones by name are read) are each named in the failures; one broken run
    never hides the others, whatever it raises.
    """
    try:
        root = Path(root).resolve()
        if not root.is_dir():
            raise CheckpointError(f"{root}: no such checkpoint directory")
    except (RuntimeError, OSError, ValueError) as e:  # a symlink loop, a name too long, a NUL byte, no permission
        raise CheckpointError(f"{root}: cannot open this folder ({_reason(e)})") from None
    runs, bad = [], []

    def subdirs(path: Path) -> list[Path]:
        found, problem = _subdirs(path)
        if problem:
            bad.append((path, f"{path}: {problem}"))
        return found

    candidates = []
    for child in subdirs(root):
        candidates.append(child)
        if not _has(child, CONFIG_FILE) and not hf_folders.holds_trainer_checkpoints(child):
            candidates.extend(subdirs(child))
    for path in candidates:
        run, problem = _run_in(path, root)
        if run is not None:
            runs.append(run)
        elif problem:
            bad.append((path, problem))
    return runs, bad


def _run_in(path: Path, root: Path) -> tuple[Run | None, str]:
    """The run a candidate folder under root holds, or why it holds none ("" for a folder that is not a
    run at all, or resolves outside root)."""
    try:
        inside = path.resolve().is_relative_to(root)
    except (RuntimeError, OSError):
        return None, ""
    if not inside:
        return None, ""
    if not os.access(path, os.R_OK | os.X_OK):
        return None, unopenable(path)
    if not _has(path, CONFIG_FILE) and not hf_folders.holds_trainer_checkpoints(path):
        held = _holds_run_files(path)
        return None, f"{path}: no {CONFIG_FILE} (its snapshots cannot be read without the config)" if held else ""
    try:
        return load_run(path, root), ""
    except CheckpointError as e:
        return None, str(e)
    except Exception as e:  # noqa: BLE001 — whatever a foreign folder holds, it is this run's problem only
        return None, f"{path}: unreadable run ({type(e).__name__}: {str(e)[:200]})"


def _reason(e: BaseException) -> str:
    return "a symlink loop" if isinstance(e, RuntimeError) else getattr(e, "strerror", None) or str(e)[:100]


def _has(path: Path, name: str) -> bool:
    return os.path.lexists(path / name)


def _holds_run_files(path: Path) -> bool:
    try:
        return any(RUN_FILES.match(f.name) for f in os.scandir(path))
    except OSError:
        return False


def _subdirs(path: Path, limit: int = MAX_FOLDER_ENTRIES) -> tuple[list[Path], str | None]:
    """Sub-directories of path, sorted by name: at most `limit` (the first by name), with a sentence
    when the folder cannot be read or holds more."""
    names = []
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                try:
                    if entry.is_dir():
                        names.append(entry.name)
                except OSError:
                    continue
                if len(names) > 10 * limit:
                    break
    except OSError as e:
        return [], f"cannot be read ({_reason(e)})"
    names.sort()
    problem = None
    if len(names) > limit:
        problem = (f"holds more than {limit:,} folders; only the first {limit:,} by name were looked at "
                   "(keep runs in a folder of their own)")
    return [path / n for n in names[:limit]], problem


def resolve_under(root: str | Path, relative: str) -> Path:
    """root / relative, refusing anything that leaves root (.., absolute paths, symlinks out)."""
    root_r = Path(root).resolve()
    target = (root_r / relative).resolve()
    if not target.is_relative_to(root_r):
        raise CheckpointError(f"{relative!r} is outside the checkpoint root {root_r}")
    return target
