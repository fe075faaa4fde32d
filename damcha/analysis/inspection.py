"""One forward pass on one input -> a plain record of everything the app shows about it.

The record describes itself: how many heads, which modality and task, the labels of its
positions, and the mechanism's cross-head structures (named arrays with axis names, a kind that
says how to draw them, and what training can determine about them). Figures and pages read the
record; they never ask which mechanism or data set produced it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from damcha.inputs.modalities import Modality, loss_unit, modality_named, task_of
from damcha.inputs.modalities.digit_image import DIGIT_LEVELS, DIGIT_SIDE
from damcha.inputs.model_inputs import tokens_sha256
from damcha.model.batching import as_model_input
from damcha.model.mechanisms import ForwardOptions, Structure, StructureKind
from damcha.model.transformer import IGNORE_INDEX, Transformer


@dataclass(frozen=True)
class Source:
    """What a record is of: the run folder, the epoch and the snapshot's SHA-256 the model was loaded
    from (None for a model that was not loaded from a run), and the input's SHA-256."""

    run: str | None
    epoch: int | None
    snapshot_sha256: str | None
    input_sha256: str

    @classmethod
    def of(cls, model: Transformer, tokens) -> Source:
        snap = model.snapshot
        if snap is None:
            return cls(None, None, None, tokens_sha256(tokens))
        return cls(snap.run, snap.epoch, snap.sha256, tokens_sha256(tokens))


@dataclass(frozen=True)
class InspectionRecord:
    """Internals of one input, as numpy arrays (no batch axis).

    variant / mechanism: what computed it; n_head, head_dim: the head layout of its figures.
    modality: what a token is (labels, uploads); task: next_token | classification | next_vector.
    tokens: (T,) or (T, input_dim) input; targets: (T,) or (T, input_dim) next tokens (None for a
        classifier, whose class id is not per position, or without targets); positions: (P,) query positions the per-position
        structures were taken at (-1: the whole sequence, non-causal models).
    token_labels: (T,) one label per input position; target_labels: (T,) or empty.
    structures: the mechanism's cross-head structures (see damcha.model.mechanisms.Structure).
    notes: sentences the mechanism wants shown beside its structures (what is learned).
    options: the mechanism's forward options used (e.g. DAMCHA's metric mode).
    n_layer: the model's layers; attention_layers: the layers whose attention maps were kept.
    attention: (len(attention_layers), H, T, T) attention probabilities (read with attention_map).
    logits: (T, V) next-token logits, (C,) class logits, or (T, input_dim) predicted vectors.
    token_loss: (T,) per-token loss (NaN where no target), or (1,) for a classifier.
    """

    variant: str
    mechanism: str
    n_head: int
    head_dim: int
    causal: bool
    modality: Modality
    task: str
    loss_unit: str
    options: ForwardOptions
    tokens: np.ndarray
    targets: np.ndarray | None
    positions: np.ndarray
    token_labels: tuple[str, ...]
    target_labels: tuple[str, ...]
    structures: tuple[Structure, ...]
    notes: tuple[str, ...]
    n_layer: int
    attention_layers: tuple[int, ...]
    attention: np.ndarray
    logits: np.ndarray
    token_loss: np.ndarray | None
    loss: float | None
    source: Source | None = None

    def structure(self, name: str) -> Structure | None:
        return next((s for s in self.structures if s.name == name), None)

    def named(self, name: str) -> Structure:
        """The structure `name`, which this record must hold."""
        found = self.structure(name)
        if found is None:
            raise KeyError(f"{self.variant} declares no structure {name!r}")
        return found

    def values(self, name: str) -> np.ndarray | None:
        s = self.structure(name)
        return None if s is None else s.values

    @property
    def structure_layers(self) -> int:
        """How many layers the per-layer structures have (1 when shared across layers)."""
        return max((s.size("layer") for s in self.structures), default=1)

    def attention_map(self, layer: int) -> np.ndarray:
        """(H, T, T) attention probabilities of `layer` (0-based), if it was kept."""
        if layer not in self.attention_layers:
            raise ValueError(f"layer {layer + 1}'s attention was not kept (kept: {[i + 1 for i in self.attention_layers]}); "
                             "inspect with attention_layers including it")
        return self.attention[self.attention_layers.index(layer)]

    def position_index(self, position: int) -> int:
        """Index into `positions` of a query position (negative: counted from the end of `positions`)."""
        if position >= 0 and self.causal:
            hits = np.flatnonzero(self.positions == position)
            if hits.size:
                return int(hits[0])
            if len(self.positions) < len(self.tokens):
                raise ValueError(f"position {position} was not inspected (inspected: {self.positions.tolist()})")
        return position % len(self.positions)

    def where(self, position_index: int) -> str:
        return f"position {int(self.positions[position_index])}" if self.causal else "whole input"

    def __repr__(self) -> str:
        """Each array with its shape and what it holds, one per line (readable in a notebook)."""
        def shape(a) -> str:
            return "x".join(map(str, np.shape(a)))

        loss = "none" if self.loss is None else f"{self.loss:.4f} ({self.loss_unit})"
        lines = [f"InspectionRecord of {self.variant} on {self.modality.title} ({self.task}): T={len(self.tokens)}, "
                 f"H={self.n_head} heads of {self.head_dim}, loss {loss}",
                 f"  tokens          {shape(self.tokens):<16} the input",
                 f"  logits          {shape(self.logits):<16} the model's outputs",
                 f"  attention       {shape(self.attention):<16} probabilities of layers "
                 f"{[i + 1 for i in self.attention_layers]} (head, query, key)",
                 f"  positions       {shape(self.positions):<16} query positions of the per-position structures"]
        lines += [f"  {s.name:<15} {shape(s.values):<16} {s.title} ({', '.join(s.axes)}): {s.identifiability}"
                  for s in self.structures]
        return "\n".join(lines)


def matrix_energy_shares(record: InspectionRecord, **index: int) -> dict[str, float]:
    """Share of the first head-grid matrix's energy ‖·‖² held by each of the others, at a
    layer/position index (DAMCHA: the learned part and the residue of M(x), which are orthogonal,
    so their shares add to 1)."""
    mats = [s for s in record.structures if s.kind is StructureKind.HEAD_GRID_MATRIX]
    if len(mats) < 2:
        return {}
    total = float((mats[0].at(**index) ** 2).sum()) or 1.0
    return {s.title: float((s.at(**index) ** 2).sum()) / total for s in mats[1:]}


def off_diagonal_share(M: np.ndarray, n_head: int) -> float:
    """Share of ‖M‖² held by the off-diagonal blocks of a D x D matrix read in H x H blocks. A matrix
    with no cross-head structure at all (equal or random blocks) has (H − 1) / H of it."""
    blocks = np.asarray(M, dtype=float).reshape(n_head, M.shape[0] // n_head, n_head, M.shape[1] // n_head)
    energy = float((blocks ** 2).sum()) or 1.0
    diagonal = float(sum((blocks[i, :, i] ** 2).sum() for i in range(n_head)))
    return (energy - diagonal) / energy


def residue_learned(record: InspectionRecord) -> bool:
    """Whether the residue of M(x) (its within-row deviation) is learned: False under the paper's row
    sum, where it is initialisation residue; True under the bilinear form."""
    return record.named("metric_residue").identifiability != "unidentifiable"


def residue_caveat(here: str) -> str:
    """The sentence a view of the full M(x) of a row-sum run carries where its blocks are compared."""
    return (f"Under the paper's row sum only the per-head metrics m_i are learned: differences between the blocks of "
            f"one row {here} come from the residue, the random split of M(x) that is never trained.")


def definiteness_reading(head_metrics: np.ndarray) -> str | None:
    """Whether the per-head metrics m_i (H, d, d) are positive semi-definite, as a Mahalanobis
    metric is: a sentence naming the heads whose symmetric part has negative eigenvalues (None for
    non-square forms, the bilinear rows)."""
    m = np.asarray(head_metrics, dtype=np.float64)
    if m.ndim != 3 or m.shape[1] != m.shape[2]:
        return None
    shares = []
    for mi in m:
        eig = np.linalg.eigvalsh((mi + mi.T) / 2)
        shares.append(float(np.abs(eig[eig < 0]).sum() / max(np.abs(eig).sum(), 1e-300)))
    negative = [f"m_{i + 1} ({share:.0%} of |λ|)" for i, share in enumerate(shares) if share > 1e-9]
    if not negative:
        return "Every per-head metric m_i is positive semi-definite here: each head scores with a Mahalanobis form."
    which = "that head scores with an indefinite bilinear form" if len(negative) == 1 else \
        "those heads score with indefinite bilinear forms"
    return (f"Not positive semi-definite: the symmetric part of {', '.join(negative)} has negative eigenvalues, so "
            f"{which}, not a Mahalanobis distance, at this input (a matrix with no structure has about half of |λ| "
            "negative).")


def off_diagonal_reading(share: float, n_head: int, residue_learned: bool) -> str:
    """What an off-diagonal share of M(x) says, against the (H−1)/H its learned part gives.

    Under the paper's row sum every block of row i is learned only as m_i / H, whose off-diagonal
    energy is exactly (H−1)/H; any departure of M(x) from it comes from the residue, the random
    untrained split. Under the bilinear form every block is learned and a departure is learned."""
    base = (n_head - 1) / n_head
    head = (f"Off-diagonal blocks hold **{share:.1%}** of the metric's energy; (H−1)/H = **{base:.1%}** "
            f"({n_head - 1} of every {n_head} blocks of a row are off the diagonal)")
    if residue_learned:
        return (head + " is what equal blocks give. Here every block is learned (bilinear form), so a departure "
                "from it is learned cross-head structure.")
    return (head + " is exactly the learned part's share: each block of row i is m_i / H. Under the row sum a "
            "departure from it comes from the residue alone, the random split that is never trained, so it says "
            "nothing about learned cross-head structure.")


def mean_structures(model: Transformer, inputs, targets=None, options: ForwardOptions | None = None,
                    progress=None, positions=None) -> tuple[Structure, ...]:
    """Every structure averaged over several inputs of one length (validation samples): MoA's expert
    usage and co-selection over a data set, DCMHA's composition strength per position, M(x) on average...
    Returns structures shaped like one input's, their titles marked as means."""
    sums: dict[str, np.ndarray] = {}
    first = None
    for i in range(len(inputs)):
        record = inspect_input(model, inputs[i], None if targets is None else targets[i], positions=positions,
                               options=options)
        first = first or record
        for s in record.structures:
            sums[s.name] = sums.get(s.name, 0) + s.values.astype(np.float64)
        if progress:
            progress(i + 1, len(inputs))
    if first is None:
        return ()
    return tuple(dataclasses.replace(s, values=sums[s.name] / len(inputs), title=f"{s.title} (mean of {len(inputs)} inputs)")
                 for s in first.structures)


INSPECTION_BUDGET_BYTES = 256 * 2**20  # per-position matrices and attention maps kept whole up to this size


def matrices_fit(config, T: int) -> bool:
    """Whether one input's per-position D x D matrices (M, learned part, residue; one per metric
    source) fit the inspection budget at every position, or must be taken at viewed positions only
    (a paper-sized model at T = 1024 would need about 3 GB)."""
    sources = config.mechanism.metric_count(config)
    return 3 * sources * T * config.n_embd ** 2 * 4 <= INSPECTION_BUDGET_BYTES


def attention_fits(config, T: int) -> bool:
    """Whether every layer's (H, T, T) attention maps fit the inspection budget together."""
    return config.n_layer * config.n_head * T * T * 4 <= INSPECTION_BUDGET_BYTES


def identifiability_note(config) -> str:
    """One sentence, for every view of a mechanism's structures, on which part training can determine."""
    return config.mechanism.identifiability_note(config) or " ".join(config.mechanism.notes(config))


@torch.no_grad()
def inspect_input(
    model: Transformer,
    tokens: torch.Tensor | np.ndarray | list[int],
    targets: torch.Tensor | np.ndarray | list[int] | int | None = None,
    positions: list[int] | np.ndarray | None = None,
    options: ForwardOptions | None = None,
    attention_layers: list[int] | tuple[int, ...] | None = None,
) -> InspectionRecord:
    """Run one input through `model` in eval mode without gradients and record its internals.

    tokens: (T,) ints (or (T, input_dim) vectors). targets: (T,) next tokens (IGNORE_INDEX to skip),
    a class id, or (T, input_dim) next vectors. positions: query positions at which to take
    per-position structures (causal models; default: all of them if they fit
    INSPECTION_BUDGET_BYTES, else the last). attention_layers: layers whose attention maps to keep
    (default: all if they fit the budget, else the first). options: the mechanism's options.
    The model is not changed: dropout is switched off by argument, not by model.eval().
    """
    cfg = model.config
    options = model.mechanism.options(options)
    device = next(model.parameters()).device
    tok = as_model_input(tokens, cfg, device)  # (1, T) ids or (1, T, input_dim) vectors
    T = tok.shape[1]
    if T == 0:
        raise ValueError("cannot inspect an empty input")
    tgt = None
    if targets is not None:
        tgt = as_model_input(targets, cfg, device)  # (1, T), (1, 1) class id, or (1, T, input_dim)
        tgt = tgt[:, 0] if cfg.n_classes else tgt
    wanted = attention_layers if attention_layers is not None else range(cfg.n_layer) if attention_fits(cfg, T) else [0]
    kept = tuple(sorted({int(i) for i in wanted}))
    if kept and (kept[0] < 0 or kept[-1] >= cfg.n_layer):
        raise ValueError(f"attention layers must lie in [0, {cfg.n_layer - 1}]")
    out = model(tok, targets=tgt, options=options, need_intermediates=True, stochastic=False)
    attention = torch.stack([out.layers[i].weights[0] for i in kept]) if kept else torch.zeros(0, cfg.n_head, T, T)  # (A, H, T, T)

    if cfg.causal:
        if positions is None:
            positions = np.arange(T) if matrices_fit(cfg, T) else [T - 1]
        pos = np.asarray(positions, dtype=np.int64)
        if pos.size and (pos.min() < 0 or pos.max() >= T):
            raise ValueError(f"positions must lie in [0, {T - 1}]")
    else:
        pos = np.array([-1])
    structures = model.mechanism.structures(model, out.layers, pos, options)

    token_loss = None
    if out.token_loss is not None:
        token_loss = _np(out.token_loss[0]).astype(np.float64)
        if tgt is not None and not cfg.n_classes and not cfg.input_dim:
            token_loss[_np(tgt[0]) == IGNORE_INDEX] = np.nan
        token_loss = np.atleast_1d(token_loss)
    modality = modality_named(cfg.modality)
    tokens_np = _np(tok[0])
    targets_np = None if tgt is None or cfg.n_classes else _np(tgt[0])
    return InspectionRecord(
        variant=cfg.variant,
        mechanism=cfg.attention,
        n_head=cfg.n_head,
        head_dim=cfg.head_dim,
        causal=cfg.causal,
        modality=modality,
        task=task_of(cfg),
        loss_unit=loss_unit(cfg),
        options=options,
        tokens=tokens_np,
        targets=targets_np,
        positions=pos,
        token_labels=tuple(modality.token_labels(tokens_np)),
        target_labels=tuple(modality.target_labels(targets_np)),
        structures=tuple(structures),
        notes=tuple(model.mechanism.notes(cfg)),
        n_layer=cfg.n_layer,
        attention_layers=kept,
        attention=_np(attention),
        logits=_np(out.logits[0]),
        token_loss=token_loss,
        loss=None if out.task_loss is None else float(out.task_loss),
        source=Source.of(model, tokens_np),
    )


@torch.no_grad()
def sequence_profile(model: Transformer, tokens, options: ForwardOptions | None = None,
                     progress=None, chunk: int | None = None) -> tuple[Structure, ...]:
    """Per-position summaries of one input at every position (the mechanism's sequence profile,
    e.g. DAMCHA's ‖m_i‖ and residue / off-diagonal shares), in bounded memory however long the input."""
    options = model.mechanism.options(options)
    tok = as_model_input(tokens, model.config, next(model.parameters()).device)  # (1, T) or (1, T, input_dim)
    if tok.shape[1] == 0:
        raise ValueError("cannot inspect an empty input")
    out = model(tok, options=options, need_intermediates=True, stochastic=False)
    return tuple(model.mechanism.sequence_profile(model, out.layers, options, progress, chunk))


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().copy()


def next_token_probabilities(record: InspectionRecord, position: int) -> np.ndarray:
    """Softmax of the logits at `position` (decoders) or of the class logits. (V,) or (C,)."""
    logits = record.logits if record.logits.ndim == 1 else record.logits[position]
    p = np.exp(logits - logits.max())
    return p / p.sum()


def expected_digit(record: InspectionRecord) -> np.ndarray:
    """Teacher-forced prediction of each pixel of a digit decoder: the expected grey level of
    p(pixel | the true pixels before it). (64, V) logits -> (8, 8)."""
    logits = record.logits[:, :DIGIT_LEVELS]  # (64, 17)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return (p @ np.arange(DIGIT_LEVELS)).reshape(DIGIT_SIDE, DIGIT_SIDE)
