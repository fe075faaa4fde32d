"""An exported figure rebuilt from its provenance: a named figure of one input's record or model
(model_figures), of one run across its snapshots (epoch_figures) or of several runs (run_set_figures).
The evidence's figures are rebuilt by damcha.evidence.view.regenerate, which passes every other name on here."""

from __future__ import annotations

from pathlib import Path

from damcha.runs.checkpoints import load_run
from damcha.views.epoch_figures import EPOCH_FIGURES, epoch_figure_item, needs_input
from damcha.views.export import ExportItem, ExportSettings, Provenance, library_params
from damcha.views.model_figures import figure_set
from damcha.views.run_set_figures import RUN_SET_FIGURES, run_set_item, taken_from


def resolved(name: str, run_root: str | Path | None) -> Path:
    """A run or folder named in a provenance, relative to `run_root` when given and not absolute."""
    path = Path(name)
    return Path(run_root) / path if run_root is not None and not path.is_absolute() else path


def regenerate(prov: Provenance, run_root: str | Path | None = None) -> ExportItem:
    """The figure a provenance describes, rebuilt from its runs, epochs and input (runs named relative
    to `run_root` when given)."""
    if not prov.regenerable or prov.run is None or prov.epoch is None:
        raise ValueError(f"figure {prov.figure!r} is not a named figure of a run: it cannot be rebuilt from its provenance")
    of_input = prov.figure not in EPOCH_FIGURES or needs_input(prov.figure)
    if of_input and prov.input_tokens is None:
        raise ValueError("this provenance does not carry its input tokens (input too large); pass the input instead")
    params = library_params(prov.params)
    tokens, targets = (prov.tokens_array(), prov.targets_array()) if of_input else (None, None)
    if prov.figure in RUN_SET_FIGURES:
        runs = [load_run(resolved(name, run_root)) for name in params.pop("runs")]
        params = with_options(params, runs[0].model_config.mechanism)
        taken = taken_from(prov.figure, runs, params.pop("epochs"), tokens, targets, params)
        return run_set_item(prov.figure, taken, tokens, targets, params, prov.input_source, root=run_root)
    run = load_run(resolved(prov.run, run_root))
    params = with_options(params, run.model_config.mechanism)
    if prov.figure in EPOCH_FIGURES:
        return epoch_figure_item(prov.figure, run, tokens, targets, params, prov.input_source)
    (item,) = figure_set(run, [prov.epoch], prov.tokens_array(), targets, params, [prov.figure], prov.input_source)
    return item


def with_options(params: dict, mechanism) -> dict:
    """Params of a provenance with the per-call choices as `options`: files written before the choices had
    one name keep the ablated choice's value under "mode" (the model as trained for a mechanism without one)."""
    params = dict(params)
    mode = params.pop("mode", None)
    if mode is not None and mechanism.inference_ablation is not None:
        params["options"] = {mechanism.inference_ablation.choice: mode, **(params.get("options") or {})}
    return params


def python_to_rebuild(prov: Provenance, provenance_file: str, run_root: str | Path = "checkpoints",
                      settings: ExportSettings | None = None) -> str:
    """Python that rebuilds the figure from its provenance file (saved beside the script), for a
    notebook or a paper's figure script, with the checkpoint folder and the export settings in use
    (default: the shipped folder, single column); None-regenerable figures get a note instead."""
    if not prov.regenerable:
        return (f"# {prov.figure!r} is drawn from the page's state, not from a named figure: its provenance "
                "records what it shows but cannot rebuild it.")
    settings = settings or ExportSettings()
    return (
        "import json\n\n"
        "from damcha.evidence.view import regenerate  # every named figure, the evidence's included\n"
        "from damcha.views.export import ExportSettings, Provenance, write_item\n\n"
        f"with open({provenance_file!r}) as f:\n"
        "    provenance = Provenance.from_dict(json.load(f))\n"
        "# run_root: the checkpoint folder the app had open (runs are named relative to it)\n"
        f"item = regenerate(provenance, run_root={str(run_root)!r})\n"
        "item.figure.show()\n"
        "# the export settings the app had (the sidebar's): the same layout and size\n"
        f"write_item(item, \"figures\", [\"pdf\", \"svg\", \"csv\"], {settings!r})\n"
    )
