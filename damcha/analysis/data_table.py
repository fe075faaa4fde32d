"""The validation inputs of a run as a table, in the manner of LIT's data table: one row per input
with its loss, prediction, the loss change under each intervention the mechanism declares (for
DAMCHA the validation mean M-bar gives the adaptivity gap, loss(M-bar) − loss(M(x))), and scalar
summaries of the structures it declares, chosen by their kind, so every mechanism gets its own.

Everything is JSON-able: the app keeps a table on disk per snapshot (damcha.runs.disk_cache).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from damcha.analysis import interventions as iv
from damcha.analysis.inspection import InspectionRecord, inspect_input, matrix_energy_shares, off_diagonal_share
from damcha.inputs.modalities import loss_factor, loss_label
from damcha.inputs.model_inputs import validation_arrays, validation_count
from damcha.model.mechanisms import StructureKind, get_mechanism
from damcha.model.transformer import IGNORE_INDEX, Transformer
from damcha.runs.checkpoints import Run

ROWS = 512  # validation inputs in a table (the bundled sets have 359 digits, 256 text windows, 256 crops)
TABLE_VERSION = 4  # bump when the table's columns change: older entries (cached or shipped) are then not read


def table_settings(n: int) -> dict:
    """What a table of the first n validation inputs is kept under (disk cache, shipped with a run)."""
    return {"rows": n, "mean_inputs": iv.MEAN_INPUTS, "version": TABLE_VERSION}


def default_rows(run: Run) -> int:
    """How many validation inputs a table holds unless asked otherwise: all of them, up to ROWS."""
    return min(ROWS, validation_count(run))


def run_validation_table(run: Run, model: Transformer, n: int, progress: Callable[[int, int], None] | None = None) -> dict:
    """The table of a run's first n validation inputs."""
    x, y, labels = validation_arrays(run)
    return validation_table(model, x[:n], y[:n], None if labels is None else labels[:n], progress=progress)


def _entropy_bits(p: np.ndarray) -> np.ndarray:
    """Entropy in bits along the last axis of non-negative weights (normalised first)."""
    p = np.clip(np.asarray(p, dtype=float), 0, None)
    p = p / np.clip(p.sum(-1, keepdims=True), 1e-12, None)
    return -(p * np.log2(np.where(p > 0, p, 1.0))).sum(-1)


def structure_summaries(record: InspectionRecord) -> dict[str, float]:
    """Scalars of one input's structures, by their kind, at layer 1 and the last inspected position:
    the off-diagonal share of each head-grid matrix and each head-by-head structure, the shares of
    the first head-grid matrix's energy held by the others (DAMCHA: the residue), the mean entropy
    of probability gates, and the attention's mean entropy over every layer, head and query."""
    index = {"layer": 0, "position": -1, "token": len(record.tokens) - 1}
    out: dict[str, float] = {}
    for s in record.structures:
        a = np.asarray(s.at(**index), dtype=float)
        if s.kind is StructureKind.HEAD_GRID_MATRIX:
            out[f"off-diagonal share of {s.title}"] = off_diagonal_share(a, record.n_head)
        elif s.kind is StructureKind.HEAD_BY_HEAD and a.shape[0] == a.shape[1] and a.shape[0] > 1:
            total = float((a ** 2).sum()) or 1.0
            out[f"off-diagonal share of {s.title}"] = 1.0 - float((np.diag(a) ** 2).sum()) / total
        elif s.kind is StructureKind.TOKEN_GATES and s.value_kind.value == "probability":
            out[f"mean entropy of {s.title} (bits)"] = float(_entropy_bits(a).mean())
    first = next((s for s in record.structures if s.kind is StructureKind.HEAD_GRID_MATRIX), None)
    for title, share in matrix_energy_shares(record, **index).items():
        out[f"share of ‖{first.title if first else 'M'}‖² in {title}"] = share
    if record.attention_layers and not get_mechanism(record.mechanism).signed_attention:  # probabilities
        out["attention entropy (bits), mean"] = float(_entropy_bits(record.attention).mean())
    return out


def _next_token_accuracy(record: InspectionRecord) -> float | None:
    if record.task != "next_token" or record.targets is None:
        return None
    known = record.targets != IGNORE_INDEX
    return float((record.logits.argmax(-1)[known] == record.targets[known]).mean()) if known.any() else None


def validation_table(model: Transformer, inputs, targets, labels=None, mean_inputs: int = iv.MEAN_INPUTS,
                     progress: Callable[[int, int], None] | None = None) -> dict:
    """{"rows": [one dict per input], "columns": {column: description}, "constant": {column: value}}.

    Columns that are the same for every input (a static mechanism's structures) are moved to
    "constant". Loss columns are in the app's unit (bits per … or squared error)."""
    cfg = model.config
    factor, unit = loss_factor(cfg), loss_label(cfg)
    x, y = np.asarray(inputs), np.asarray(targets)
    n = len(x)
    declared = [i for i in iv.available_interventions(cfg) if all(p.kind != "input" for p in i.params)]
    steps = n + len(declared) + 1
    done = 0

    def tick():
        nonlocal done
        done += 1
        if progress:
            progress(done, steps)

    base = iv.batch_losses(model, x, y)
    tick()
    columns = {"input": "index in the validation set", f"loss ({unit})": "mean loss over the input's known targets"}
    rows = [{"input": i, f"loss ({unit})": float(base[i]) * factor} for i in range(n)]
    if labels is not None:
        columns["label"] = "the input's class"
        for i in range(n):
            rows[i]["label"] = int(labels[i])
    mbar = iv.mean_metric(model, x[:mean_inputs]) if any(p.kind == "mean" for i in declared for p in i.params) else None
    for intervention in declared:
        acts_on = iv.default_parameters(intervention)
        name = f"Δ loss ({unit}): {intervention.title}" + (f" ({acts_on})" if acts_on else "")
        columns[name] = f"{intervention.description} Loss with it − loss of the model, in {unit}."
        changed = iv.batch_losses(model, x, y, iv.intervention_options(model, intervention, x[0], mbar=mbar))
        for i in range(n):
            rows[i][name] = float(changed[i] - base[i]) * factor
        tick()
    for i in range(n):
        rows[i].update(_read_off(model, x[i], int(y[i]) if cfg.n_classes else y[i]))
        tick()
    if cfg.n_classes:
        columns.update(prediction="the most probable class", right="whether it is the input's class")
    if "next-token accuracy" in rows[0]:
        columns["next-token accuracy"] = "share of positions whose most probable next token is the true one"
    for name in rows[0]:
        columns.setdefault(name, "at layer 1 and the last position (structures per position)")
    constant = _constant_columns(rows, columns)
    first = [c for c in ("input", "label", "prediction", "right", f"loss ({unit})") if c in columns]  # read first
    order = first + [c for c in columns if c not in first]
    rows = [{c: r[c] for c in order if c in r} for r in rows]
    return {"rows": rows, "columns": {k: columns[k] for k in order if k not in constant}, "constant": constant}


def _read_off(model: Transformer, tokens, target) -> dict:
    """One input's columns read off its inspection: the prediction (a classifier), the next-token accuracy,
    and its structures' summaries at layer 1 and the last position."""
    cfg = model.config
    record = inspect_input(model, tokens, target, positions=[len(tokens) - 1] if cfg.causal else None)
    row: dict[str, object] = {}
    if cfg.n_classes:
        row["prediction"] = int(record.logits.argmax())
        row["right"] = row["prediction"] == target
    accuracy = _next_token_accuracy(record)
    if accuracy is not None:
        row["next-token accuracy"] = accuracy
    return {**row, **structure_summaries(record)}


def _constant_columns(rows: list[dict], columns: dict) -> dict:
    """{column: value} of the float columns the same for every row (a static mechanism's structures),
    taken out of the rows."""
    constant = {}
    for name in list(columns):
        values = [r.get(name) for r in rows]
        numbers = [v for v in values if isinstance(v, float)]
        # a few float32 ulps of a loss of a few bits (one ulp of 3.5 is 2.4e-7): noise, not a difference
        if name != "input" and len(rows) > 1 and len(numbers) == len(values) and np.ptp(numbers) < 5e-6:
            constant[name] = values[0]
    for r in rows:
        for name in constant:
            r.pop(name, None)
    return constant
