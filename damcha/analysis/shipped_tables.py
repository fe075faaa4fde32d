"""The tables a page would otherwise compute over a run's validation set, computed when the run is
made and shipped in its folder (damcha.runs.disk_cache `derived/`): the data table of its last
snapshot and, for a mechanism with metric modes, the validation set under each mode (the paper's
Table 3). The app reads them through the same keys it would cache them under, so the shipped runs'
tables open at once; a retrained snapshot has another key and is computed again."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from damcha.analysis.ablation import ABLATION_SETTINGS, ablation_key, has_ablation_modes, validation_ablation
from damcha.analysis.data_table import default_rows, run_validation_table, table_settings
from damcha.runs.checkpoints import Run, load_model
from damcha.runs.disk_cache import is_cached, ship


def shipped_tables(run: Run) -> dict[str, tuple[dict, list]]:
    """kind -> (settings, snapshots) of every table a run ships: what the app reads."""
    last = [(run, run.epochs[-1])]
    tables = {"validation_table": (table_settings(default_rows(run)), last)}
    if has_ablation_modes(run.model_config):
        tables["validation_ablation"] = (ablation_key(run.model_config), last)
    return tables


def missing_tables(run: Run) -> list[str]:
    """The kinds of table the run should ship and does not (or ships for another snapshot or version)."""
    return [kind for kind, (settings, snapshots) in shipped_tables(run).items() if not is_cached(kind, settings, snapshots)]


def ship_tables(run: Run, progress: Callable[[str], None] | None = None) -> list[Path]:
    """Compute every table the run ships and write it into its folder; returns the files written."""
    model = load_model(run, run.epochs[-1])
    compute = {"validation_table": lambda: run_validation_table(run, model, default_rows(run)),
               "validation_ablation": lambda: validation_ablation(run, model, completion_images=ABLATION_SETTINGS["completion_images"],
                                                          completion_samples=ABLATION_SETTINGS["completion_samples"])}
    written = []
    for kind, (settings, snapshots) in shipped_tables(run).items():
        if progress:
            progress(f"{run.name}: {kind}")
        written.append(ship(kind, settings, snapshots, compute[kind]))
    return written
