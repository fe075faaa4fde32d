"""FID of a pixel model's generated images against real ones (the paper's image metric, Tables 1, 3, 4).

The distance is torchmetrics' `FrechetInceptionDistance`, over the standard FID Inception features
(torch-fidelity's `FeatureExtractorInceptionV3`, 2048 pool features) read from the weights file the
user points to: torch-fidelity's `weights-inception-2015-12-05-6726825d.pth`. Nothing downloads: without
that file FID is declared missing, in words, and every other metric stands.

Where torchvision's binary does not match torch (a CPU torch beside CUDA-only torchvision wheels, as on
our CI machines), torch-fidelity's package `__init__` cannot import, because it loads torchvision for its
CLIP and DINOv2 extractors. The Inception extractor itself needs only torch, so its module is then loaded
without that `__init__`: the same code, the same weights.

FID@Top-50 (Tables 1 and 3) is not defined in what we have of the paper: which 50 images, ranked by what,
is not stated, so it is not computed here.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from damcha.inputs.modalities import Modality, modality_named
from damcha.model.mechanisms.cache import PrefixCache
from damcha.model.transformer import Transformer

INCEPTION_WEIGHTS = "weights-inception-2015-12-05-6726825d.pth"  # torch-fidelity's name for the standard weights
FID_TOP_50_UNDEFINED = ("FID@Top-50 is not computed: what we have of the paper does not say which 50 images it "
                        "keeps or what ranks them.")
INSTALL = "pip install torchmetrics==1.9.0 && pip install --no-deps torch-fidelity==0.4.0"


class FidUnavailable(ValueError):
    """FID cannot be computed here: the message says what is missing and how to supply it."""


@dataclass(frozen=True)
class FidScore:
    """fid: the distance; real / generated: how many images of each it compared; weights: the Inception file."""

    fid: float
    real: int
    generated: int
    weights: str


def _fid_metric_class():
    """torchmetrics' FrechetInceptionDistance, with torch-fidelity's Inception importable (see the module's note)."""
    spec = sys.modules["torch_fidelity"].__spec__ if "torch_fidelity" in sys.modules else \
        importlib.util.find_spec("torch_fidelity")
    if importlib.util.find_spec("torchmetrics") is None or spec is None or spec.submodule_search_locations is None:
        raise FidUnavailable(f"FID needs torchmetrics and torch-fidelity ({INSTALL})")
    try:
        import torch_fidelity  # noqa: F401
    except ModuleNotFoundError as e:
        if e.name != "torchvision":
            raise FidUnavailable(f"torch-fidelity cannot be imported ({e})") from None
        package = types.ModuleType("torch_fidelity")
        package.__spec__, package.__path__ = spec, list(spec.submodule_search_locations)
        sys.modules["torch_fidelity"] = package
    from torchmetrics.image.fid import FrechetInceptionDistance

    return FrechetInceptionDistance


def inception_weights(path: str | Path) -> Path:
    """The user's Inception weights file, refused in words unless it is a regular file that loads as tensors
    alone: torch-fidelity then reads it with a full unpickler, which would run any code a hostile file holds."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise FidUnavailable(f"{p}: no such file; point --fid-weights at torch-fidelity's {INCEPTION_WEIGHTS}")
    try:
        state = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as e:  # not a torch file, damaged, or holding objects other than tensors
        raise FidUnavailable(f"{p}: not a file of weights alone ({type(e).__name__}: {str(e)[:160]}); point "
                             f"--fid-weights at torch-fidelity's {INCEPTION_WEIGHTS}") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise FidUnavailable(f"{p}: holds {type(state).__name__}, not a state dict of tensors; point --fid-weights at "
                             f"torch-fidelity's {INCEPTION_WEIGHTS}")
    return p


def frechet_metric(weights: str | Path | None = None, features: torch.nn.Module | None = None):
    """A fresh torchmetrics FrechetInceptionDistance: over the standard Inception from `weights`, or over
    `features` (any module mapping (N, 3, 32, 32) uint8 images to (N, F) features)."""
    fid_class = _fid_metric_class()
    if features is not None:
        return fid_class(feature=features, input_img_size=(3, 32, 32))
    if weights is None:
        raise FidUnavailable(f"FID needs the standard Inception weights: pass --fid-weights with torch-fidelity's "
                             f"{INCEPTION_WEIGHTS} (nothing is downloaded)")
    path = inception_weights(weights)
    try:
        return fid_class(feature=2048, feature_extractor_weights_path=str(path))
    except Exception as e:  # a foreign or damaged file fails inside torch.load or load_state_dict
        raise FidUnavailable(f"{path}: not the Inception weights torch-fidelity reads ({type(e).__name__}: "
                             f"{str(e)[:200]})") from None


def _update(metric, images: np.ndarray, real: bool, batch: int, device: torch.device) -> None:
    for i in range(0, len(images), batch):
        chunk = torch.from_numpy(np.ascontiguousarray(images[i:i + batch])).permute(0, 3, 1, 2)  # (B, 3, 32, 32) uint8
        metric.update(chunk.to(device), real=real)


def fid_score(real: np.ndarray, generated: np.ndarray, weights: str | Path | None = None,
              features: torch.nn.Module | None = None, batch: int = 50, device: str | torch.device = "cpu") -> FidScore:
    """FID between real and generated images, (N, 32, 32, 3) uint8 each (at least 2 of each), on `device`."""
    if len(real) < 2 or len(generated) < 2:
        raise ValueError(f"FID needs at least 2 real and 2 generated images, not {len(real)} and {len(generated)}")
    metric = frechet_metric(weights, features).to(device)
    with torch.no_grad():
        _update(metric, real, True, batch, torch.device(device))
        _update(metric, generated, False, batch, torch.device(device))
        value = float(metric.compute())
    return FidScore(value, len(real), len(generated), str(weights) if features is None else type(features).__name__)


@torch.no_grad()
def sample_sequences(model: Transformer, n: int, length: int, start_token: int, values: int, seed: int = 0,
                     batch: int = 16, progress: Callable[[int], object] | None = None) -> np.ndarray:
    """n sequences of `length` tokens drawn from the model after `start_token`, each token from the model's
    distribution over the first `values` ids (a pixel model never draws its start token), seeded:
    (n, length) int64. A mechanism that decodes with a cache reads each new token only."""
    device = next(model.parameters()).device
    gen = torch.Generator(device="cpu").manual_seed(seed)
    cached = model.mechanism.decodes_with_cache
    out = []
    for first in range(0, n, batch):
        rows = min(batch, n - first)
        seq = torch.full((rows, 1), start_token, dtype=torch.long, device=device)  # (B, 1)
        cache = PrefixCache.empty(model.config.n_layer) if cached else None
        fed = seq
        for _ in range(length):
            logits = model(fed, stochastic=False, cache=cache).logits[:, -1, :values]  # (B, values)
            nxt = torch.multinomial(logits.float().softmax(-1).cpu(), 1, generator=gen).to(device)  # (B, 1)
            seq = torch.cat([seq, nxt], dim=1)  # (B, t + 1)
            fed = nxt if cached else seq
        out.append(seq[:, 1:].cpu())
        if progress is not None:
            progress(rows)
    return torch.cat(out).numpy()



def generated_images(model: Transformer, n: int, seed: int = 0,
                     progress: Callable[[int], object] | None = None) -> np.ndarray:
    """n images drawn from an image model whose modality generates (declares `start_token`), as its pictures:
    (n, 32, 32, 3) uint8. progress: called with the images each batch drew."""
    modality = modality_named(model.config.modality)
    if modality.start_token is None or modality.grid is None:
        raise ValueError(f"a {modality.title} model does not generate images")
    rows, cols = modality.grid
    tokens = sample_sequences(model, n, rows * cols, modality.start_token, modality.start_token, seed,
                              progress=progress)
    return pictures(modality, tokens)


def pictures(modality: Modality, sequences: np.ndarray) -> np.ndarray:
    """(N, T) image token sequences (every pixel) -> (N, 32, 32, 3) uint8, as the modality draws them."""
    drawn = [modality.seen_picture(t, t, "next_token") for t in sequences]
    kept = [d for d in drawn if d is not None]
    if len(kept) < len(drawn):
        raise ValueError(f"a {modality.title} sequence is not a picture")
    return np.stack(kept)
