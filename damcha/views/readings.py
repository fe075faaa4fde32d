"""What pages say in words about the numbers a record, a run or its snapshots give: sentences
computed from them, so a page shows them in one call and a test can read them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from damcha.analysis.dynamics import Separation
from damcha.analysis.inspection import (
    InspectionRecord,
    definiteness_reading,
    matrix_energy_shares,
    off_diagonal_reading,
    off_diagonal_share,
    residue_learned,
)
from damcha.model.mechanisms import Identifiability
from damcha.views.figure_sets import grid_matrices, structure_index


def decomposition_readings(record: InspectionRecord, layer: int, position: int) -> list[str]:
    """Under the decomposition figure: each part's share of the whole matrix's energy, what its
    off-diagonal share says against (H−1)/H, and whether the per-head metrics are positive
    semi-definite (when the record has them)."""
    matrices = grid_matrices(record)
    index = structure_index(record, layer, position)
    shares = matrix_energy_shares(record, **index)
    lines = [f"Share of ‖{matrices[0].title}‖²: " + "; ".join(f"{t} **{v:.1%}**" for t, v in shares.items())
             + " (orthogonal parts: their shares add to 100%).",
             off_diagonal_reading(off_diagonal_share(matrices[0].at(**index), record.n_head), record.n_head,
                                  residue_learned(record))]
    heads = record.structure("head_metrics")
    definiteness = heads and definiteness_reading(heads.at(**index))
    return lines + ([definiteness] if definiteness else [])


def off_diagonal_baseline(record: InspectionRecord) -> tuple[float, str]:
    """The off-diagonal share M(x) is read against over training, (H−1)/H, and what gives it."""
    H = record.n_head
    return (H - 1) / H, f"(H−1)/H = {(H - 1) / H:.2f}: " + ("equal blocks" if residue_learned(record) else
                                                            "the learned part's share (row sum)")


def statistics_caption(record: InspectionRecord) -> str:
    """Under the statistics of M(x) over the epochs: what the off-diagonal share is read against."""
    share, _ = off_diagonal_baseline(record)
    H = record.n_head
    return (f"The off-diagonal share is read against {share:.2f}: {H - 1} of every {H} blocks of a row are off the "
            "diagonal. " + ("Every block is learned here (bilinear form): a departure from it is learned cross-head "
                            "structure." if residue_learned(record) else
                            "Under the row sum the learned part (each block m_i / H) has exactly that share, so a "
                            "departure comes from the untrained residue alone."))


def fixed_structure_sentence(structure) -> str | None:
    """What the views across epochs say of a structure training does not change (None: it is trained)."""
    if structure.identifiability is not Identifiability.FIXED:
        return None
    return (f"{structure.title} is fixed, not trained: every snapshot holds the same, so it is drawn once here "
            "instead of animated over the epochs.")


def one_snapshot_sentence(epochs: Sequence[int]) -> str | None:
    """What a view across epochs says of a run with fewer than two snapshots (None: it has two or more)."""
    if len(epochs) >= 2:
        return None
    which = f"one snapshot (epoch {epochs[0]})" if epochs else "no snapshot"
    return (f"This run has {which}: there is nothing to compare across epochs, so no view here can say what "
            "training changed (an exported Hugging Face folder holds one snapshot; a Trainer folder holds one per "
            "checkpoint).")


def generator_drift_sentence(drift: Mapping[str, Sequence[float]], epochs: Sequence[int], record: InspectionRecord) -> str:
    """How far the metric generator's last layer moved from the first snapshot, its row-mean part (what the
    row sum trains) and its within-row residual (see damcha.analysis.dynamics.generator_weight_drift)."""
    alone = one_snapshot_sentence(epochs)
    if alone:
        return alone
    return (f"Generator's last layer, relative distance from epoch {epochs[0]}: row-mean part (what the row sum trains) "
            + ", ".join(f"{e}: **{v:.3g}**" for e, v in zip(epochs, drift["row_mean"]))
            + "; within-row residual " + ", ".join(f"{e}: **{v:.2g}**" for e, v in zip(epochs, drift["residual"]))
            + (". Under the bilinear form both parts train." if residue_learned(record) else
               ". Under the row sum the residual stays at float rounding: that part of M(x) is never trained."))


def separation_sentence(separations: Mapping[int, Separation]) -> str:
    """Class separation of validation metrics at each epoch beside its shuffled-label range."""
    return ("Class separation in metric space (silhouette, cosine, from −1 to 1), each beside the range the same "
            "inputs give with their labels shuffled (with many classes even random labels score below 0, so that "
            "range, not 0, is the baseline): " + "; ".join(f"epoch {e}: {s.sentence()}" for e, s in separations.items()))
