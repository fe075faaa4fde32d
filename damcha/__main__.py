"""`python -m damcha <command>` (or the `damcha` console script)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

from damcha.inputs.datasets import DataError
from damcha.inputs.uploads import InputError
from damcha.model.config import variant_config
from damcha.model.mechanisms import get_mechanism, mechanism_names, variants
from damcha.runs.checkpoints import CheckpointError
from damcha.runs.reference import READINGS
from damcha.runs.train_flags import add_settings_flags, ints, settings_from


def _choice(text: str) -> tuple[str, str]:
    """NAME=VALUE, the value kept as the word it is (a per-call choice)."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def _option(text: str) -> tuple[str, object]:
    """NAME=VALUE, the value read as an integer or a number when it is one (a setting)."""
    name, value = _choice(text)
    for kind in (int, float):
        try:
            return name, kind(value)
        except ValueError:
            pass
    return name, value


def _train_parser(sub) -> None:
    p = sub.add_parser("train", help="train a model, with per-epoch metrics and snapshots",
                       description="Train a model. Every setting's flag, type and default come from the config "
                                   "dataclasses (damcha.runs.train_flags); --config replays a saved run.")
    p.add_argument("--variant", choices=[v.name for v in variants()],
                   help="attention variant (default: damcha, or the replayed run's): "
                        + "; ".join(f"{v.name}: {v.description}" for v in variants()))
    p.add_argument("--option", action="append", default=[], metavar="NAME=VALUE", type=_option,
                   help="a setting of the variant's mechanism (repeatable): "
                        + "; ".join(f"{m.name}: " + ", ".join(s.describe() for s in m.declared_settings)
                                    for m in map(get_mechanism, mechanism_names()) if m.config_options))
    add_settings_flags(p)
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the training step (20-40 s to compile; pays for long runs of large models)")
    p.add_argument("--strategy", choices=("ddp", "fsdp", "auto"), default="ddp",
                   help="under torchrun: ddp (every process holds the model) or fsdp (FSDP2: each holds a shard "
                        "of the weights and optimiser state); the same steps either way. auto: ddp where one device "
                        "holds the whole model and its optimiser state, else fsdp. Either way a run that does not "
                        "fit its device is refused, with its estimated memory, before anything is allocated")
    p.add_argument("--activation-checkpointing", action="store_true",
                   help="recompute each block's and the shared metric's activations in the backward pass: "
                        "less memory, more compute")
    p.add_argument("--out", required=True, help="run directory (an interrupted run there is resumed)")
    p.add_argument("--log-dir", help="also write TensorBoard event files here while training (losses, learning rate, "
                                     "tokens/s; at snapshots the structures as images and an embedding); "
                                     "needs pip install 'damcha[tensorboard]'")


def _train(args) -> int:
    from damcha.runs.train import train

    base, tcfg, replaying = settings_from(args)
    model_config = base if replaying and not args.variant else variant_config(base, args.variant or "damcha")
    if args.option:
        model_config = dataclasses.replace(model_config, attention_options={**dict(model_config.attention_options),
                                                                            **dict(args.option)})
    observer = None
    if args.log_dir:
        from damcha.views.training_log import TensorBoardLog

        observer = TensorBoardLog(args.log_dir)
    result = train(model_config, tcfg, args.out, compile_model=args.compile, observer=observer, strategy=args.strategy,
                   activation_checkpointing=args.activation_checkpointing)
    print(f"done: {result.run_dir} ({result.seconds:.1f} s)")
    return 0


def _demo(args) -> int:
    from damcha.runs.demo_runs import DEMO_RUNS, build_demo_runs

    names = args.only or list(DEMO_RUNS)
    if not args.tables_only:
        seconds = build_demo_runs(args.out, names, quick=args.quick)
        for name, s in seconds.items():
            print(f"{name:28s} {s:7.1f} s")
        print(f"total {sum(seconds.values()):.1f} s")
    if not args.quick:
        _ship_tables([Path(args.out) / name for name in names])
    return 0


def _ship_tables(folders: list[Path]) -> None:
    """The tables the app would compute over each run's validation set, written into its folder."""
    from tqdm import tqdm

    from damcha.analysis.shipped_tables import ship_tables
    from damcha.runs.checkpoints import load_run

    with tqdm(folders, desc="tables shipped with the runs", unit="run") as bar:
        for folder in bar:
            ship_tables(load_run(folder), progress=bar.set_postfix_str)


def _figures_parser(sub) -> None:
    p = sub.add_parser("figures", help="regenerate a figure set headlessly (same figure functions as the app)",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--run", help="run directory")
    p.add_argument("--epochs", type=ints, default=(), help="e.g. 0,40 (default: every snapshot)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--image", help="image file (a digit for digit runs, any colour photo for patch runs)")
    src.add_argument("--text", help="UTF-8 text file (text runs)")
    src.add_argument("--val-index", type=int, default=None, help="validation sample index")
    p.add_argument("--figures", default="", help="comma-separated names (default: all that apply)")
    p.add_argument("--option", action="append", default=[], metavar="NAME=VALUE", type=_choice,
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


def _figures(args) -> int:
    from tqdm import tqdm

    from damcha.views.export import write_item

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
    from damcha.views.export import ALL_FORMATS, STATIC_FORMATS, ExportSettings, static_export_status

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
    import json
    from pathlib import Path

    from damcha.evidence.view import regenerate  # every named figure, the evidence's included
    from damcha.views.export import ExportSettings, Provenance

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
        root = Path(__file__).resolve().parent.parent / "checkpoints"
    return [regenerate(prov, root)], ExportSettings(**raw["settings"]) if isinstance(raw.get("settings"), dict) else settings


def _input_items(args) -> list:
    """The figure set of a run (or the paper's figures of several) for the input asked for."""
    from pathlib import Path

    from tqdm import tqdm

    from damcha.inputs.model_inputs import input_from_image, input_from_photo, input_from_text, validation_input
    from damcha.runs.checkpoints import load_run
    from damcha.views.model_figures import figure_set
    from damcha.views.run_set_figures import paper_figures

    if not args.run and not args.paper:
        raise ValueError("--run is required (or --from-provenance, or --paper)")
    paper_runs = [load_run(p) for p in args.paper.split(",") if p] if args.paper else []
    run = paper_runs[0] if paper_runs else load_run(args.run)
    if args.image or args.text:
        path = Path(args.image or args.text)
        read = input_from_text if args.text else input_from_photo if run.model_config.input_dim else input_from_image
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


def _import_reference(args) -> int:
    import json

    from tqdm import tqdm

    from damcha.runs.reference import import_reference

    with tqdm(desc="converting", unit="file") as bar:
        out = import_reference(args.source, args.out, args.modality, args.block_size, args.vocab_size, args.tokenizer,
                               args.diag_scale, args.n_head, args.off_diag_scale,
                               progress=lambda k, n: (setattr(bar, "total", n), bar.update(1)))
    config = json.loads((out / "config.json").read_text())
    report = next(iter(config["train"]["import_report"].values()))
    print(f"wrote {out}: {config['model']['attention']} ({len(report['mapped'])} tensors mapped, "
          f"{len(report['duplicates'])} shared copies checked, {len(report['unknown'])} unknown)")
    for key in report["unknown"]:
        print(f"  unknown key (not used): {key}")
    for note in config["notes"]:
        print(f"  note: {note}")
    return 0


def _evidence(args) -> int:
    from tqdm import tqdm

    from damcha.evidence.runner import run_evidence
    from damcha.evidence.scales import scale_named

    demo = args.scale == "demo"
    args.out = args.out or ("checkpoints/evidence" if demo else f"checkpoints/evidence-{args.scale}")
    args.work = args.work or (".evidence-work" if demo else str(Path(args.out) / "work"))
    if args.restate:
        from damcha.evidence.runner import restate

        launch = [f"--{n.replace('_', '-')}" for n in SLURM_FLAGS if getattr(args, n) is not None]
        if args.launcher != "local" or launch:
            raise ValueError(f"--restate trains nothing, so {', '.join(launch or ['--launcher ' + args.launcher])} "
                             "does not apply: leave it out")

        doc = restate(args.out, "python -m damcha " + " ".join(sys.argv[1:]))
        for claim in doc["claims"]:
            print(f"{claim['verdict']:>28s}  {claim['title']}")
        if doc["restated"]["unchanged_claims"]:
            print("not restated (their arms changed: run them again): " + ", ".join(doc["restated"]["unchanged_claims"]))
        print(f"restated {args.out}/results.json from its stored values (nothing trained)")
        return 0
    if args.seeds is not None and args.seeds < 1:
        raise ValueError(f"--seeds {args.seeds}: every arm needs at least one seed (default 3; --quick 2)")
    if args.workers < 1:
        raise ValueError(f"--workers {args.workers}: the units need at least one worker process")
    smoke = args.quick or (not demo and scale_named(args.scale).smoke)
    seeds = args.seeds or (2 if smoke else 3)
    if args.launcher != "slurm":
        _slurm_settings(args)  # Slurm flags without its launcher refused before the data is read (no cluster asked)
    setting, recorded = _evidence_setting(args, seeds)
    slurm = _slurm_settings(args)  # (the cluster is asked once the budget holds)
    with tqdm(desc="evidence", unit="unit") as bar:
        doc = run_evidence(args.out, args.work, args.quick, seeds, args.only,
                           progress=lambda text, total: (setattr(bar, "total", total), bar.set_postfix_str(text[-60:]),
                                                         bar.update(1)),
                           command="python -m damcha " + " ".join(sys.argv[1:]), workers=args.workers,
                           reuse=args.reuse, redo=tuple(args.redo), setting=setting, recorded=recorded, slurm=slurm)
    if doc.get("rank"):  # another rank of a torchrun job: rank 0 reports
        return 0
    for claim in doc["claims"]:
        print(f"{claim['verdict']:>28s}  {claim['title']}")
    print(f"wrote {args.out}/results.json ({doc['wall_seconds']} s)")
    return 0


SLURM_FLAGS = ("slurm_partition", "slurm_account", "slurm_qos", "slurm_time", "cpus_per_unit", "gpus_per_unit",
               "nodes_per_unit", "ranks_per_node", "slurm_parallel", "slurm_retries")


def _slurm_settings(args):
    """--launcher slurm's settings, checked against the cluster before anything is submitted; Slurm flags
    without it are refused (they would be ignored)."""
    from damcha.evidence.slurm import check

    given = [f"--{name.replace('_', '-')}" for name in SLURM_FLAGS if getattr(args, name) is not None]
    if args.launcher != "slurm":
        if given:
            raise ValueError(f"{', '.join(given)} only apply with --launcher slurm (the local launcher runs the units "
                             "here); add --launcher slurm or leave them out")
        return None
    settings = _slurm_settings_given(args)
    check(settings, Path(args.work))
    return settings


def _slurm_settings_given(args):
    from damcha.evidence.slurm import SlurmSettings

    return SlurmSettings(**{field: value for field, value in (
        ("partition", args.slurm_partition), ("account", args.slurm_account), ("qos", args.slurm_qos),
        ("time_minutes", args.slurm_time), ("cpus_per_unit", args.cpus_per_unit),
        ("gpus_per_unit", args.gpus_per_unit), ("nodes_per_unit", args.nodes_per_unit),
        ("ranks_per_node", args.ranks_per_node), ("max_parallel", args.slurm_parallel),
        ("retries", args.slurm_retries)) if value is not None})


def _evidence_setting(args, seeds: int):
    """The scale's setting, its data read and checked and its budget printed (and held to --budget),
    all before anything trains; the demo's when no --scale is given."""
    from damcha.evidence.costs import SHIPPED_TABLE, CostTable, budget, budget_lines, uncosted
    from damcha.evidence.scales import (
        check_data,
        check_only,
        chosen_by,
        locate_data,
        memory_plan,
        scale_claims,
        scale_named,
    )
    from damcha.evidence.setting import DEMO, Setting

    if args.scale == "demo":
        for flag in ("cost_table", "cost_device", "budget"):
            if getattr(args, flag) is not None:
                raise ValueError(f"--{flag.replace('_', '-')} applies with --scale (the demo's runs are not costed)")
        return DEMO, None
    scale = scale_named(args.scale)
    check_only(scale, args.only)
    os.environ.setdefault("DAMCHA_CACHE", str(Path(args.out) / "cache"))  # a zip's member: written under --out
    setting = Setting(scale, locate_data(scale, args.data_dir, args.only), args.device or scale.default_device)
    here = _device_here(setting.device)
    if not here and args.launcher == "local":
        raise ValueError(f"--device {setting.device}: no such device on this machine; run where it is, or submit the "
                         "units to the cluster's nodes with --launcher slurm")
    if args.cost_table is not None and not Path(args.cost_table).is_file():
        raise ValueError(f"--cost-table {args.cost_table}: no such file; write one with `python -m damcha costs "
                         f"--scale {scale.name} --table {args.cost_table}` on the units' device")
    data = check_data(setting)
    chosen = [c for c in scale_claims(scale, setting) if chosen_by(c.key, args.only)]
    table = CostTable.read(SHIPPED_TABLE, args.cost_table)
    device = args.cost_device or _unit_device_name(args, setting.device)
    rows = budget(setting, chosen, seeds, table, device)
    # every run that does not fit the device is refused here, at once (on the nodes, by each unit, where the
    # device is not on the submitting machine)
    ranks = _slurm_settings_given(args).ranks if args.launcher == "slurm" else None  # (None: torchrun's, or 1)
    memory = memory_plan(setting, chosen, ranks) if here else []
    hours = sum(r["hours"] for r in rows)
    lines = budget_lines(rows, device, table, scale)
    largest = max(memory, key=lambda r: r["gib_per_device"], default=None)
    if largest:
        lines.append(f"memory: every run fits one {setting.device} device; the largest, {largest['claim']} "
                     f"{largest['arm']}, holds about {largest['gib_per_device']} GiB")
    if not here:
        lines.append(f"memory: no {setting.device} device on this machine; each unit checks that its run fits on its "
                     "node before it trains")
    lines += [f"  {dataset}: {record.get('source')} (standard files: {'yes' if record.get('standard_files') else 'no'})"
              for dataset, record in data.items()]
    if os.environ.get("RANK", "0") == "0":  # under torchrun, rank 0 speaks
        print("\n".join(lines))
    if args.budget is not None and uncosted(rows):
        raise ValueError(f"--budget cannot be held to: {uncosted(rows)} run(s) have no measured cost on {device} "
                         f"(named above); measure them with `python -m damcha costs --scale {scale.name}` on that "
                         "device, name a measured device with --cost-device, or narrow the claims with --only")
    if args.budget is not None and hours > args.budget:
        raise ValueError(f"the claims need about {hours:.2f} device-hours, more than --budget {args.budget:g}: "
                         "narrow them with --only or --seeds, or raise --budget")
    return setting, {"data": data, "files": dict(setting.files), "memory": memory,
                     "budget": {"hours": round(hours, 4), "device": device, "claims": rows}}


def _device_here(device: str) -> bool:
    import torch

    return torch.device(device).type != "cuda" or torch.cuda.is_available()


def _unit_device_name(args, device: str) -> str:
    """The device a unit trains on, as the cost table names it: a GPU, or the CPU at the threads a unit
    uses (one a local worker; --cpus-per-unit under Slurm)."""
    from damcha.runs.machine import device_name

    return device_name(device, args.cpus_per_unit or 1)


def _costs(args) -> int:
    import re
    import time

    import torch

    from damcha.evidence.costs import SHIPPED_TABLE, CostTable, measure, replaced_rows, step_kinds
    from damcha.evidence.scales import scale_named
    from damcha.runs.machine import device_name
    from damcha.runs.train import pick_device

    if args.repeats < 1:
        raise ValueError(f"--repeats {args.repeats}: at least one timed step is needed for a median")
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads {args.threads}: a step runs on at least one thread")
    scale = scale_named(args.scale)
    wanted = args.device or scale.default_device
    if not re.fullmatch(r"cpu|cuda(:\d+)?", wanted):
        raise ValueError(f"--device {wanted!r}: cpu, cuda or cuda:N")
    device = pick_device(wanted)
    if device.type != "cpu" and args.threads is not None:
        raise ValueError("--threads sets the CPU's threads; a GPU's step is timed as it runs")
    path = Path(args.table) if args.table else SHIPPED_TABLE
    table = CostTable.read(path)  # a file that is not a cost table is refused here, before anything is timed
    kinds = step_kinds(scale, device.type, args.only)
    if not kinds:
        raise ValueError(f"--only {' '.join(args.only or [])}: no claim at --scale {scale.name} trains a run there, so "
                         "there is nothing to time")
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(args.threads or 1)
    try:
        name = device_name(device)
        earlier = replaced_rows(table, name, kinds)
        if earlier and not args.replace:
            dates = sorted({str(r.get("measured") or table.devices[name].get("measured", "an earlier day")) for r in earlier})
            raise ValueError(f"{path} already holds {len(earlier)} of these {len(kinds)} step kinds measured on {name} "
                             f"({', '.join(dates)}): pass --replace to time them again into it, or --table a file of "
                             "your own (read over the shipped table with evidence --cost-table)")
        rows = measure(kinds, device, args.repeats)
    finally:
        torch.set_num_threads(threads)
    about = {"torch": torch.__version__, "measured": time.strftime("%Y-%m-%d"),
             "command": "python -m damcha " + " ".join(sys.argv[1:])}
    table.with_rows(name, rows, about).write(path)
    for r in rows:
        cost = f"{r['step_seconds'] * 1e3:10.1f} ms a step" if "step_seconds" in r else "   does not fit"
        print(f"{cost}  {', '.join(r['arms'])}")
    load = max(r["load_per_core"] for r in rows)
    print(f"wrote {len(rows)} step kinds measured on {name} to {path}"
          + (f", replacing {len(earlier)} rows measured before" if earlier else "")
          + f" (load per core up to {load:.2f} while timing{': beside other work, so slower than alone' if load > 0.5 else ''})")
    return 0


def _standard_files(args) -> int:
    from damcha.inputs.datasets.generated import write_standard_format_files

    out = Path(args.out)
    if os.path.lexists(out):
        raise ValueError(f"--out {out}: already exists; name a folder to create (nothing of yours is written into)")
    written = write_standard_format_files(out)
    for name, path in written.items():
        print(f"{name}: {path}")
    print(f"generated files in the standard formats (not the data sets): python -m damcha evidence --scale tiny "
          f"--data-dir {out}")
    return 0


APP_DIR = Path(__file__).resolve().parent.parent / "app"


def app_command(host: str, port: int, allow_roots: list[str]) -> tuple[list[str], dict[str, str]]:
    """The command and environment that start the app: its own config (app/.streamlit/config.toml:
    5 MB uploads, no usage statistics) plus the address, port and the folders visitors may open."""
    env = dict(os.environ)
    if allow_roots:
        env["DAMCHA_ALLOWED_ROOTS"] = os.pathsep.join(str(Path(r).expanduser().resolve()) for r in allow_roots)
    command = [sys.executable, "-m", "streamlit", "run", str(APP_DIR), "--server.address", host,
               "--server.port", str(port)]
    if host not in ("127.0.0.1", "localhost", "::1"):  # visitors: exception types only, tracebacks to the log
        command += ["--client.showErrorDetails", "type"]
    return command, env


def _export_hf(args) -> int:
    try:
        from damcha.hf import export_run
    except ImportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    done = export_run(args.run, args.out, args.epoch, with_code=args.with_code)
    print(f"wrote {done.folder} (epoch {done.epoch}); its logits match the run's to {done.max_difference:.1e}")
    print("it carries its modelling code: it loads with trust_remote_code=True where damcha is not installed"
          if args.with_code else "it loads where the damcha package is installed (import damcha.hf); "
          "--with-code writes a folder that loads without it")
    return 0


def _app(args) -> int:
    if not (APP_DIR / "streamlit_app.py").is_file():
        raise OSError(f"the app is not next to this package ({APP_DIR}): run from a checkout of DAMCHA Lab")
    command, env = app_command(args.host, args.port, args.allow_root)
    # The server takes this process's place, so a signal that stops `damcha app` (a terminal's Ctrl-C, a
    # supervisor's SIGTERM) stops the server: as a child it outlived a terminated parent.
    os.execve(command[0], command, env)
    return 0  # (not reached)


def _input_file_bytes(path: Path) -> bytes:
    """An --image or --text file's bytes, its size checked against the upload limit before it is read."""
    from damcha.inputs.uploads import MAX_UPLOAD_BYTES

    if not path.is_file():
        raise InputError(f"{path}: not a file" + ("" if path.exists() else " (no such path)"))
    size = path.stat().st_size
    if size > MAX_UPLOAD_BYTES:
        raise InputError(f"{path}: {size:,} bytes; inputs up to {MAX_UPLOAD_BYTES:,} bytes (the app's upload limit) "
                         "are accepted, refused before it is read")
    return path.read_bytes()


def _close_progress_bars() -> None:
    """End the progress bars a refusal interrupted, so its error line stands alone and last."""
    from tqdm import tqdm

    for bar in list(getattr(tqdm, "_instances", ())):
        bar.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="damcha", description="DAMCHA Lab command line")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("version", help="print the package version")
    _train_parser(sub)
    _figures_parser(sub)
    ref = sub.add_parser("import-reference", help="convert checkpoints of the authors' reference code into a run",
                         description="Convert a .pt file (or a folder of checkpoint_epoch_N.pt files) written by the "
                                     "authors' reference implementation into a DAMCHA Lab run (config + safetensors). "
                                     "Loaded with torch.load(weights_only=True): nothing is unpickled.")
    ref.add_argument("source", help="a .pt file or a folder of them")
    ref.add_argument("--out", required=True, help="run directory to write")
    ref.add_argument("--modality", choices=tuple(READINGS),
                     help="what the model read (default: from the file's components — patches read in place for an "
                          "image run, token ids for a text run — else CIFAR patches)")
    ref.add_argument("--tokenizer", help="text models: the tokenizer it used (facebook/bart-base, "
                                         "bert-base-multilingual-cased), for its vocabulary size")
    ref.add_argument("--vocab-size", type=int, help="text models: vocabulary size (instead of --tokenizer)")
    ref.add_argument("--block-size", type=int, help="context length (default: 64 patches, 128 tokens)")
    ref.add_argument("--n-head", type=int, help="heads (default: the file's config, else the head-block masks; needed "
                                                "for older files of M0 or W_q/W_k models)")
    ref.add_argument("--diag-scale", type=float, help="overrides the file's diag_scale (default: its config, else 1)")
    ref.add_argument("--off-diag-scale", type=float,
                     help="overrides the file's off_diag_scale (default: off_diag_params, else its config, else 1)")
    ev = sub.add_parser("evidence", help="test the paper's claims at small scale (seeds, intervals, verdicts)")
    ev.add_argument("--quick", action="store_true", help="a reduced run for CI (its numbers are not the shipped ones)")
    ev.add_argument("--seeds", type=int, help="seeds per arm (default 3; --quick: 2)")
    ev.add_argument("--only", nargs="*", help="claim keys to run (default: all)")
    ev.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1),
                    help="processes of one thread each that train and evaluate units side by side (default 2)")
    ev.add_argument("--out", help="where results.json and the CSVs go (default checkpoints/evidence; with --scale "
                    "S: checkpoints/evidence-S)")
    ev.add_argument("--scale", default="demo", help="demo (the shipped sizes), paper (the paper's model sizes on your "
                    "standard files under --data-dir, on GPUs) or tiny (the paper path at a tiny size: a rehearsal)")
    ev.add_argument("--data-dir", help="with --scale: the folder holding cifar-10-batches-py, enwik8(.zip), text8(.zip)")
    ev.add_argument("--device", help="with --scale: cpu, cuda (default: the scale's; under torchrun each rank its GPU)")
    ev.add_argument("--budget", type=float, help="with --scale: refuse to start when the claims' device-hours "
                    "(from the cost table) exceed this, or when some of their runs have no measured cost")
    ev.add_argument("--cost-table", help="with --scale: a cost table written by `damcha costs --table`, read over the "
                    "shipped one")
    ev.add_argument("--cost-device", help="with --scale: the device the budget costs the runs on, as the cost table "
                    "names it (default: where the units train: --device, at the threads a unit uses)")
    ev.add_argument("--reuse", metavar="RESULTS_JSON", help="take over the units of an earlier results.json for the "
                    "arms the claims still define (recorded in the document)")
    ev.add_argument("--redo", nargs="*", default=[], metavar="CLAIM_OR_VARIANT",
                    help="with --reuse: claims and variants to recompute anyway (code changed, or timed)")
    ev.add_argument("--launcher", choices=("local", "slurm"), default="local",
                    help="local: the units run here (--workers processes); slurm: each task a Slurm job-array element "
                         "through submitit (pip install 'damcha[cluster]'), the work folder on shared storage")
    ev.add_argument("--slurm-partition", help="with --launcher slurm: the partition (default: the cluster's)")
    ev.add_argument("--slurm-account", help="with --launcher slurm: the account to charge")
    ev.add_argument("--slurm-qos", help="with --launcher slurm: the quality of service")
    ev.add_argument("--slurm-time", type=int, metavar="MINUTES", help="with --launcher slurm: each job's time limit "
                    "(default 60; a job that reaches it is submitted again)")
    ev.add_argument("--cpus-per-unit", type=int, help="with --launcher slurm: CPUs (and torch threads) per rank "
                    "(default 1)")
    ev.add_argument("--gpus-per-unit", type=int, help="with --launcher slurm: GPUs per node of a unit's allocation, "
                    "one rank each (default 0)")
    ev.add_argument("--nodes-per-unit", type=int, help="with --launcher slurm: nodes a unit spans (default 1)")
    ev.add_argument("--ranks-per-node", type=int, help="with --launcher slurm: processes a unit trains with on each "
                    "node (default: one per GPU, else 1; on CPUs, Gloo ranks)")
    ev.add_argument("--slurm-parallel", type=int, help="with --launcher slurm: jobs of one array running at once "
                    "(default 64)")
    ev.add_argument("--slurm-retries", type=int, help="with --launcher slurm: resubmissions of a task whose job left "
                    "the queue without a result: cancelled, preempted, timed out (default 2)")
    ev.add_argument("--work", help="trained runs and finished units (resumable; default .evidence-work, with --scale "
                    "OUT/work)")
    ev.add_argument("--restate", action="store_true", help="recompute the statistics and verdicts of --out's results "
                    "from the per-seed values it stores (after a change to the statistics or the claims' wording; "
                    "nothing is trained)")
    hf = sub.add_parser("export-hf", help="write a run as a Hugging Face folder (damcha.hf's classes)",
                        description="Convert a token run (digits, text, classifier) into a folder that "
                                    "AutoModelForCausalLM / AutoModelForSequenceClassification load after "
                                    "`import damcha.hf`; the folder is loaded back and its logits compared with the "
                                    "run's. Needs pip install 'damcha[hf]'.")
    hf.add_argument("run", help="run directory")
    hf.add_argument("--out", required=True, help="a new (or empty) folder to write: config.json, model.safetensors; "
                    "an existing folder holding anything is refused")
    hf.add_argument("--epoch", type=int, help="the snapshot to export (default: the last)")
    hf.add_argument("--with-code", action="store_true", help="also write the modelling code and an auto_map, so the "
                    "folder loads with trust_remote_code=True where damcha is not installed (the Hub's way of sharing "
                    "custom models)")
    app = sub.add_parser("app", help="start the app (127.0.0.1 unless --host says otherwise)",
                         description="Start the Streamlit app with its safe settings wherever it is started from. "
                                     "To share it, give --host 0.0.0.0 and --allow-root for each folder visitors "
                                     "may open runs from; without --allow-root, a shared app's checkpoint folder "
                                     "field is read-only.")
    app.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    app.add_argument("--port", type=int, default=8501)
    app.add_argument("--allow-root", action="append", default=[], metavar="DIR",
                     help="a folder visitors may open runs from (repeatable); sets DAMCHA_ALLOWED_ROOTS")
    costs = sub.add_parser("costs", help="time one training step of every run configuration of a scale's claims on "
                           "this device, into the cost table the evidence budget reads",
                           description="Measure what the evidence at --scale costs on the device at hand: one "
                                       "optimiser step of each distinct run configuration (model, batch, precision, "
                                       "compilation), timed after warm-up, written to the cost table under this "
                                       "device's name.")
    costs.add_argument("--scale", required=True, help="paper or tiny")
    costs.add_argument("--device", help="cpu or cuda (default: the scale's)")
    costs.add_argument("--threads", type=int, help="on the CPU: torch threads a step uses (default 1, as a local "
                       "evidence worker)")
    costs.add_argument("--repeats", type=int, default=3, help="timed steps after warm-up (their median is stored)")
    costs.add_argument("--only", nargs="*", help="claim keys to measure (default: all of the scale's)")
    costs.add_argument("--table", help="the cost table to write into (default: the shipped one, "
                       "damcha/evidence/cost_table.json); a file that is not a cost table is refused, never replaced")
    costs.add_argument("--replace", action="store_true", help="time again step kinds the table already holds for this "
                       "device, replacing their rows (refused without it)")
    standard = sub.add_parser("standard-files", help="write generated files in the published data sets' formats "
                              "(CIFAR-10 batches, enwik8.zip, text8) for a rehearsal of --scale tiny",
                              description="Generated files with the published files' names, formats and vocabularies "
                                          "(random content): `evidence --scale tiny --data-dir DIR` runs on them. They "
                                          "are not the data sets; results on them are a rehearsal of the code path.")
    standard.add_argument("--out", required=True, help="a folder to create (refused when it exists)")
    demo = sub.add_parser("demo-runs", help="(re)train the shipped demo runs into checkpoints/")
    demo.add_argument("--out", default="checkpoints")
    demo.add_argument("--only", nargs="*", help="names of the runs to train (default: all)")
    demo.add_argument("--quick", action="store_true", help="2 epochs each: a smoke test, not for shipping")
    demo.add_argument("--tables-only", action="store_true",
                      help="only (re)compute the tables shipped beside the runs (data table, metric ablations)")
    args = parser.parse_args(argv)
    try:
        if args.command == "version":
            from damcha import __version__

            print(__version__)
            return 0
        if args.command in ("train", "demo-runs"):
            from damcha.runs.allocator import keep_freed_memory

            keep_freed_memory()  # this process only trains: keep freed blocks rather than re-fault them
            return _train(args) if args.command == "train" else _demo(args)
        if args.command == "figures":
            return _figures(args)
        if args.command == "import-reference":
            return _import_reference(args)
        if args.command == "evidence":
            return _evidence(args)
        if args.command == "costs":
            return _costs(args)
        if args.command == "standard-files":
            return _standard_files(args)
        if args.command == "app":
            return _app(args)
        if args.command == "export-hf":
            return _export_hf(args)
    except (DataError, CheckpointError, InputError, ValueError, OSError) as e:
        _close_progress_bars()
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted: the last complete epoch is saved; run the same command again to resume", file=sys.stderr)
        return 130
    return 1



if __name__ == "__main__":
    sys.exit(main())
