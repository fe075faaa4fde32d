"""`damcha figures`: a run's figure set for one input, the paper's figures of several runs, or the one
figure a provenance file names, written headlessly by the app's own figure functions."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tqdm import tqdm

from damcha.cli.flags import choice
from damcha.evidence.view import regenerate  # every named figure, the evidence's included
from damcha.inputs.model_inputs import (
    input_from_image,
    input_from_photo,
    input_from_text,
    run_modality,
    validation_input,
)
from damcha.inputs.uploads import MAX_UPLOAD_BYTES, InputError
from damcha.model.mechanisms import get_mechanism, mechanism_names
from damcha.runs.checkpoints import load_run
from damcha.runs.train_flags import ints
from damcha.views.export import (
    ALL_FORMATS,
    STATIC_FORMATS,
    ExportSettings,
    Provenance,
    static_export_status,
    write_item,
)
from damcha.views.model_figures import figure_set
from damcha.views.run_set_figures import paper_figures


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.ArgumentDefaultsHelpFormatter
    p.add_argument("--run", help="run directory")
    p.add_argument("--epochs", type=ints, default=(), help="e.g. 0,40 (default: every snapshot)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--image", help="image file (a digit for digit runs, any colour photo for patch runs)")
    src.add_argument("--text", help="UTF-8 text file (text runs)")
    src.add_argument("--val-index", type=int, default=None, help="validation sample index")
    p.add_argument("--figures", default="", help="comma-separated names (default: all that apply)")
    p.add_argument("--option", action="append", default=[], metavar="NAME=VALUE", type=choice,
                   help="a per-call choice of the run's mechanism (repeatable; default: the model as trained): "
                        + "; ".join(f"{c.name} ({m.name}): {'|'.join(c.values)}"
                                    for m in map(get_mechanism, mechanism_names()) for c in m.option_choices))
    p.add_argument("--layer", type=int, default=0)
    p.add_argument("--position", type=int, default=-1, help="query position index (causal runs), -1: last")
    p.add_argument("--formats", default="png,svg,pdf,html,csv,npz")
    p.add_argument("--column", choices=["single", "double"], default=None,
                   help="a journal column preset (single ≈ 3.3 in, double ≈ 7 in; titles wrap to it); overrides --width")
    p.add_argument("--width", type=int, default=460, help="px; 460 fits a single column, 940 a double column")
    p.add_argument("--height", type=int, default=0, help="px; 0: the figure's own (multi-panel) or 0.85 x width")
    p.add_argument("--scale", type=float, default=2.0)
    p.add_argument("--no-paper-style", action="store_true")
    p.add_argument("--vector-heatmaps", action="store_true",
                   help="SVG and PDF heatmaps as one vector rectangle per cell (up to 128 x 128 cells a figure), not images")
    p.add_argument("--from-provenance", help="a *.provenance.json written by an earlier export")
    p.add_argument("--run-root", help="with --from-provenance: the checkpoint folder its run is named relative to "
                                      "(the app names runs so; default: the current folder, then checkpoints/)")
    p.add_argument("--paper", help="comma-separated DAMCHA run directories (e.g. the w/o f(x) run, then DAMCHA): "
                                   "write the paper's figs. 8, 10 and 11 for the input instead")
    p.add_argument("--out", required=True, help="output directory")



def run(args) -> int:
    formats, settings = _export_settings(args)
    items, settings = _provenance_items(args, settings) if args.from_provenance else (_input_items(args), settings)
    written = []
    for item in tqdm(items, desc="writing figures"):
        written += write_item(item, args.out, formats, settings)
    print(f"wrote {len(written)} files for {len(items)} figures to {args.out}")
    return 0


def _export_settings(args):
    """The formats asked for (static ones dropped, with a warning, where no Chromium can draw them) and the
    export settings (a column preset over --width)."""
    formats = [f for f in args.formats.split(",") if f]
    bad = set(formats) - set(ALL_FORMATS)
    if bad:
        raise ValueError(f"unknown formats {sorted(bad)}; expected some of {ALL_FORMATS}")
    ok, message = static_export_status()
    if not ok and set(formats) & set(STATIC_FORMATS):
        print(f"warning: {message}; writing only {[f for f in formats if f not in STATIC_FORMATS]}", file=sys.stderr)
        formats = [f for f in formats if f not in STATIC_FORMATS]
    width = 940 if args.paper and args.width == 460 else args.width  # multi-panel paper figures: a double column
    settings = ExportSettings(width, args.height or None, args.scale, not args.no_paper_style,
                              vector_heatmaps=args.vector_heatmaps)
    if args.column:
        settings = ExportSettings.column(f"{args.column} column", height=args.height or None, scale=args.scale,
                                         paper_style=not args.no_paper_style, vector_heatmaps=args.vector_heatmaps)
    return formats, settings


def _provenance_items(args, settings):
    """The one figure a provenance file names, rebuilt, and the settings it was exported with."""

    path = Path(args.from_provenance)
    if not path.is_file():
        raise ValueError(f"{path}: no such provenance file")
    try:
        raw = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a provenance JSON ({e})") from None
    prov = Provenance.from_dict(raw)
    root = args.run_root
    named = prov.run or prov.params.get("results")  # a run, or the evidence folder
    if root is None and named and not Path(named).is_absolute() and not Path(named).exists():
        root = Path(__file__).resolve().parents[2] / "checkpoints"
    return [regenerate(prov, root)], ExportSettings(**raw["settings"]) if isinstance(raw.get("settings"), dict) else settings


# What --image is read as, by the upload kind the run's modality takes (any other kind is refused in words there).
IMAGE_READERS = {"image": input_from_image, "photo": input_from_photo}


def _input_items(args) -> list:
    """The figure set of a run (or the paper's figures of several) for the input asked for."""


    if not args.run and not args.paper:
        raise ValueError("--run is required (or --from-provenance, or --paper)")
    paper_runs = [load_run(p) for p in args.paper.split(",") if p] if args.paper else []
    run = paper_runs[0] if paper_runs else load_run(args.run)
    if args.image or args.text:
        path = Path(args.image or args.text)
        read = input_from_text if args.text else IMAGE_READERS.get(run_modality(run).upload or "", input_from_image)
        try:
            inp = read(run, _input_file_bytes(path), path.name)
        except InputError as e:
            raise InputError(f"{path}: {e}") from None
    else:
        inp = validation_input(run, args.val_index or 0)
    if paper_runs:
        return paper_figures(paper_runs, inp.tokens, inp.targets, inp.source)
    epochs = args.epochs or run.epochs
    names = [n for n in args.figures.split(",") if n] or None
    bar = tqdm(total=len(epochs), desc="inspecting snapshots")
    params = {"layer": args.layer, "position": args.position, "options": dict(args.option)}
    run.model_config.mechanism.options_from(params["options"])  # a choice the mechanism lacks is refused before any work
    items = figure_set(run, epochs, inp.tokens, inp.targets, params, names, inp.source, progress=lambda k, n: bar.update(1))
    bar.close()
    return items



def _input_file_bytes(path: Path) -> bytes:
    """An --image or --text file's bytes, its size checked against the upload limit before it is read."""
    if not path.is_file():
        raise InputError(f"{path}: not a file" + ("" if path.exists() else " (no such path)"))
    size = path.stat().st_size
    if size > MAX_UPLOAD_BYTES:
        raise InputError(f"{path}: {size:,} bytes; inputs up to {MAX_UPLOAD_BYTES:,} bytes (the app's upload limit) "
                         "are accepted, refused before it is read")
    return path.read_bytes()

