"""How the metric forms over training: statistics of M(x), sweeps over snapshots, data-set geometry."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from damcha.analysis.inspection import InspectionRecord, inspect_input
from damcha.model.mechanisms import ForwardOptions, metric_access_of
from damcha.model.transformer import Transformer
from damcha.runs.checkpoints import Run

STATISTICS = {
    "frobenius": "Frobenius norm ‖M‖",
    "diagonal_share": "diagonal-block energy share",
    "off_diagonal_share": "off-diagonal-block energy share",
    "learned_share": "learned-part energy share",
    "residue_share": "residue energy share",
    "asymmetry": "asymmetry ‖M − Mᵀ‖ / ‖M‖",
    "negative_share": "negative share of the symmetric spectrum",
    "effective_rank": "effective rank",
}


def metric_statistics(M: np.ndarray, n_head: int) -> dict[str, float]:
    """Scalar summaries of one D x D metric.

    Energy shares are fractions of ‖M‖²_F. Learned/residue: the row-sum split (each block =
    its row mean + a zero-row-mean residue); the two parts are orthogonal, so their shares
    add to 1. negative_share: Σ|λ<0| / Σ|λ| over the eigenvalues of (M + Mᵀ)/2, 0 for a
    positive semi-definite (true Mahalanobis) metric. effective_rank: exp of the entropy of
    the normalised singular values (Roy & Vetterli 2007).
    """
    M = np.asarray(M, dtype=np.float64)
    D = M.shape[0]
    d = D // n_head
    blocks = M.reshape(n_head, d, n_head, d)
    energy = float((M**2).sum())
    diag = float(sum((blocks[i, :, i, :] ** 2).sum() for i in range(n_head)))
    learned = blocks.mean(axis=2, keepdims=True)  # (H, d, 1, d)
    learned_energy = float((np.broadcast_to(learned, blocks.shape) ** 2).sum())
    eig = np.linalg.eigvalsh((M + M.T) / 2)
    sv = np.linalg.svd(M, compute_uv=False)
    safe = energy if energy > 0 else 1.0
    p = sv / sv.sum() if sv.sum() > 0 else np.ones_like(sv) / len(sv)
    p = p[p > 0]
    return {
        "frobenius": float(np.sqrt(energy)),
        "diagonal_share": diag / safe,
        "off_diagonal_share": (energy - diag) / safe,
        "learned_share": learned_energy / safe,
        "residue_share": (energy - learned_energy) / safe,
        "asymmetry": float(np.linalg.norm(M - M.T) / np.sqrt(safe)),
        "negative_share": float(np.abs(eig[eig < 0]).sum() / max(np.abs(eig).sum(), 1e-300)),
        "effective_rank": float(np.exp(-(p * np.log(p)).sum())),
    }


def unstructured_baselines(D: int, n_head: int, samples: int = 64, seed: int = 0) -> dict[str, float]:
    """The mean of each statistic over D x D matrices of independent Gaussian entries: what a metric
    with no structure at all shows (asymmetry near √2, half of the symmetric spectrum negative),
    the reference a learned metric's asymmetry and negative share are read against."""
    rng = np.random.default_rng(seed)
    stats = [metric_statistics(rng.standard_normal((D, D)), n_head) for _ in range(samples)]
    return {k: float(np.mean([s[k] for s in stats])) for k in stats[0]}


def symmetric_spectrum(M: np.ndarray) -> np.ndarray:
    """Eigenvalues of the symmetric part (M + Mᵀ)/2, ascending."""
    M = np.asarray(M, dtype=np.float64)
    return np.linalg.eigvalsh((M + M.T) / 2)


@dataclass(frozen=True)
class EpochSweep:
    """The same input through every snapshot of one run."""

    epochs: tuple[int, ...]
    records: tuple[InspectionRecord, ...]

    def over_epochs(self, structure: str, index: dict, head: int | None = None) -> np.ndarray:
        """(E, a, b) one structure's matrix at a layer/position (and head, for per-head structures), per epoch."""
        mats = [r.named(structure).at(**index) for r in self.records]
        return np.stack([m[head] if head is not None else m for m in mats])

    def difference(self, structure: str, index: dict, head: int | None, first: int, last: int) -> np.ndarray:
        """The structure's matrix at epoch `last` minus at epoch `first`; for a boolean mask, where it
        changed (1.0) or not (0.0)."""
        mats = self.over_epochs(structure, index, head)
        a, b = mats[self.epochs.index(first)], mats[self.epochs.index(last)]
        if mats.dtype == bool:
            return (a != b).astype(float)
        return b - a


def spread_epochs(epochs: Sequence[int], n: int = 5) -> list[int]:
    """At most n epochs spread evenly over the list, first and last included (paper-style grids)."""
    idx = np.unique(np.linspace(0, len(epochs) - 1, min(n, len(epochs))).round().astype(int))
    return [epochs[i] for i in idx]


def sweep_epochs(run: Run, load: Callable[[Run, int], Transformer], tokens, targets=None,
                 options: ForwardOptions | None = None, epochs: Sequence[int] | None = None,
                 progress: Callable[[int, int], None] | None = None, positions=None) -> EpochSweep:
    """Inspect one input at every snapshot (or the given epochs) with the mechanism's `options`,
    per-position structures at `positions` (see inspect_input). `load` returns a (cached) model."""
    chosen = tuple(epochs or run.epochs)
    records = []
    for k, epoch in enumerate(chosen):
        records.append(inspect_input(load(run, epoch), tokens, targets, positions=positions, options=options))
        if progress:
            progress(k + 1, len(chosen))
    return EpochSweep(chosen, tuple(records))


@torch.no_grad()
def dataset_metrics(model: Transformer, inputs: torch.Tensor | np.ndarray, position: int = -1,
                    batch_size: int = 128) -> np.ndarray:
    """M(x) of many inputs at one query position (causal) or per sequence: (N, L_m, D, D)."""
    cfg = model.config
    if cfg.mechanism.metric(cfg) is None:
        raise ValueError(f"{cfg.mechanism.title} has no metric M(x)")
    x = torch.as_tensor(np.asarray(inputs), dtype=torch.float32 if cfg.input_dim else torch.long)
    out = []
    for i in range(0, len(x), batch_size):
        res = model(x[i:i + batch_size], need_intermediates=True, stochastic=False)
        metrics = metric_access_of(cfg.mechanism).metrics_at(model, res.layers, position, len(res.logits))  # (B, L_m, D, D)
        out.append(metrics.numpy())
    return np.concatenate(out)


def statistic_curves(mats: np.ndarray, n_head: int, keys: Sequence[str]) -> dict[str, list[float]]:
    """(E, D, D) metrics over epochs -> {label: values per epoch} for the named statistics."""
    stats = [metric_statistics(M, n_head) for M in mats]
    return {STATISTICS[k]: [s[k] for s in stats] for k in keys}


def statistic_bands(per_epoch: Sequence[np.ndarray], n_head: int, keys: Sequence[str],
                    quantiles: tuple[float, float, float] = (10, 50, 90)) -> dict[str, tuple[list[float], ...]]:
    """Each epoch's (N, D, D) metrics of N inputs -> {label: (low, median, high) per epoch}, the
    10/50/90th percentiles of each statistic over the inputs."""
    stats = [[metric_statistics(M, n_head) for M in mats] for mats in per_epoch]
    return {STATISTICS[k]: tuple([float(np.percentile([s[k] for s in epoch], q)) for epoch in stats] for q in quantiles)
            for k in keys}


def input_groups(inputs: np.ndarray, continuous: bool) -> tuple[np.ndarray, str]:
    """Labels for inputs without classes, to colour a projection: the tercile of each image's mean
    brightness (continuous patches), or of each byte window's share of ASCII letters."""
    if continuous:
        score = np.asarray(inputs, dtype=float).reshape(len(inputs), -1).mean(1)
        name = "brightness tercile"
    else:
        score = np.array([np.mean([(65 <= t <= 90) or (97 <= t <= 122) for t in row]) for row in inputs])
        name = "letter-share tercile"
    return np.digitize(score, np.quantile(score, [1 / 3, 2 / 3])), name


def project(points: np.ndarray, method: str = "pca", seed: int = 0) -> np.ndarray:
    """(N, F) -> (N, 2) with scikit-learn: PCA, or t-SNE on request."""
    from sklearn.decomposition import PCA
    from sklearn.manifold import TSNE

    X = points.reshape(len(points), -1)
    if method == "pca":
        return PCA(n_components=2, random_state=seed).fit_transform(X)
    if method == "tsne":
        return TSNE(n_components=2, random_state=seed, perplexity=min(30, max(5, len(X) // 4)), init="pca").fit_transform(X)
    raise ValueError(f"unknown projection {method!r}; expected 'pca' or 'tsne'")


@dataclass(frozen=True)
class Separation:
    """The silhouette of the classes in metric space, read against the same inputs with their labels
    shuffled: the null range (2.5 and 97.5 percentiles) and a one-sided permutation p-value."""

    score: float
    null_low: float
    null_high: float
    p_value: float

    def sentence(self) -> str:
        return (f"**{self.score:.3f}** (shuffled labels: {self.null_low:.3f} to {self.null_high:.3f}; "
                f"p = {self.p_value:.3g})")


def silhouette_scores(distances: np.ndarray, labelings: np.ndarray) -> np.ndarray:
    """The mean silhouette of each labelling (a row of `labelings`, (P, n)) over one precomputed distance
    matrix (n, n): scikit-learn's silhouette_score(distances, labels, metric="precomputed") for all P
    labellings in one batched product instead of P calls (a member of a class of one scores 0). The
    labellings share their classes, as the permutations of one labelling do."""
    classes, codes = np.unique(labelings, return_inverse=True)
    if not 1 < len(classes) < labelings.shape[1]:
        raise ValueError(f"Number of labels is {len(classes)}. Valid values are 2 to n_samples - 1 (inclusive)")
    codes = codes.reshape(labelings.shape)  # (P, n)
    members = np.eye(len(classes))[codes]  # (P, n, k)
    counts = members.sum(1)  # (P, k)
    sums = distances @ members  # (P, n, k): each input's summed distance to each class
    own_count = np.take_along_axis(counts, codes, axis=1)  # (P, n)
    own_sum = np.take_along_axis(sums, codes[..., None], axis=2)[..., 0]  # (P, n)
    within = own_sum / np.maximum(own_count - 1, 1)  # (P, n): mean distance to the rest of its class
    to_class = np.where(counts[:, None, :] > 0, sums / np.maximum(counts, 1)[:, None, :], np.inf)  # (P, n, k)
    nearest = np.where(members > 0, np.inf, to_class).min(-1)  # (P, n): the nearest other class
    with np.errstate(divide="ignore", invalid="ignore"):
        samples = (nearest - within) / np.maximum(within, nearest)  # (P, n)
    return np.nan_to_num(np.where(own_count > 1, samples, 0.0)).mean(-1)  # (P,)


def class_separation(points: np.ndarray, labels: np.ndarray, permutations: int = 200, seed: int = 0) -> Separation:
    """Silhouette score of the classes in metric space (cosine distance), with its null: with many
    classes even random labels score below 0, so 0 is not the baseline; the shuffled labels are."""
    from sklearn.metrics import pairwise_distances

    distances = pairwise_distances(points.reshape(len(points), -1), metric="cosine")  # (n, n), computed once
    rng = np.random.default_rng(seed)
    shuffled = np.stack([rng.permutation(labels) for _ in range(permutations)])  # (permutations, n)
    scores = silhouette_scores(distances, np.concatenate([np.asarray(labels)[None], shuffled]))  # (1 + permutations,)
    score, null = scores[0], scores[1:]
    low, high = np.percentile(null, [2.5, 97.5])
    return Separation(float(score), float(low), float(high), float((1 + (null >= score).sum()) / (1 + permutations)))


def generator_weight_drift(models: Sequence[Transformer]) -> dict[str, np.ndarray]:
    """Across snapshots (first = epoch 0): how far the last layer of each metric generator moved,
    split into its within-row residual (what the row sum cannot train) and its row mean (what it can).

    Returns {"residual": (E,), "row_mean": (E,)} relative Frobenius distances to the first snapshot,
    summed over generators. Under the row sum with Adam the residual stays at 0 (to float
    rounding) while the row mean moves; under the bilinear form both move.
    """
    parts = metric_access_of(models[0].mechanism).parameter_split
    r0, m0 = parts(models[0])
    n_r = float(np.sqrt(sum(float((r**2).sum()) for r in r0))) or 1.0
    n_m = float(np.sqrt(sum(float((m**2).sum()) for m in m0))) or 1.0
    residual, row_mean = [], []
    for model in models:
        r, m = parts(model)
        residual.append(np.sqrt(sum(float(((a - b) ** 2).sum()) for a, b in zip(r, r0))) / n_r)
        row_mean.append(np.sqrt(sum(float(((a - b) ** 2).sum()) for a, b in zip(m, m0))) / n_m)
    return {"residual": np.array(residual), "row_mean": np.array(row_mean)}
