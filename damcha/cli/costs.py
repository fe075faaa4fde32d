"""`damcha costs`: one training step of every run configuration of a scale's claims, timed on this device,
into the cost table the evidence budget reads."""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import torch

from damcha.evidence.costs import SHIPPED_TABLE, CostTable, measure, planned_row_keys, replaced_rows, step_kinds
from damcha.evidence.scales import scale_named
from damcha.runs.machine import device_name
from damcha.runs.train import pick_device


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Measure what the evidence at --scale costs on the device at hand: one optimiser step of each "
                     "distinct run configuration (model, batch, precision, compilation), timed after warm-up, written "
                     "to the cost table under this device's name.")
    p.add_argument("--scale", help="paper or tiny (required unless --drop-stale)")
    p.add_argument("--device", help="cpu or cuda (default: the scale's)")
    p.add_argument("--threads", type=int, help="on the CPU: torch threads a step uses (default 1, as a local "
                   "evidence worker)")
    p.add_argument("--repeats", type=int, default=3, help="timed steps after warm-up (their median is stored)")
    p.add_argument("--only", nargs="*", help="claim keys to measure (default: all of the scale's)")
    p.add_argument("--table", help="the cost table to write into (default: the shipped one, "
                   "damcha/evidence/cost_table.json); a file that is not a cost table is refused, never replaced")
    p.add_argument("--replace", action="store_true", help="time again step kinds the table already holds for this "
                   "device, replacing their rows (refused without it)")
    p.add_argument("--missing-only", action="store_true", help="time only the step kinds the table lacks for this "
                   "device (after a call --time-limit cut short)")
    p.add_argument("--time-limit", type=float, metavar="SECONDS", help="start no step kind once the time spent plus "
                   "the longest kind so far would pass it; what was timed is written, what was not is named (run "
                   "again with --missing-only)")
    p.add_argument("--drop-stale", action="store_true", help="time nothing: remove from the table every device's rows "
                   "that no claim at any scale trains any more (the code changed their configuration), naming them")


def run(args) -> int:
    if args.drop_stale:
        return _drop_stale(args)
    _refuse_what_cannot_run(args)
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
        if args.missing_only:
            kinds = {k: arms for k, arms in kinds.items() if table.row(name, k) is None}
            if not kinds:
                print(f"{path} already holds every step kind asked for, measured on {name}: nothing to time")
                return 0
        earlier = replaced_rows(table, name, kinds)
        if earlier and not args.replace:
            dates = sorted({str(r.get("measured") or table.devices[name].get("measured", "an earlier day")) for r in earlier})
            raise ValueError(f"{path} already holds {len(earlier)} of these {len(kinds)} step kinds measured on {name} "
                             f"({', '.join(dates)}): pass --replace to time them again into it, or --table a file of "
                             "your own (read over the shipped table with evidence --cost-table)")
        rows = measure(kinds, device, args.repeats, seconds=args.time_limit)
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
    if len(rows) < len(kinds):
        print(f"{len(kinds) - len(rows)} step kind(s) not timed within --time-limit {args.time_limit:g}: run the same "
              "command again with --missing-only to time them")
    return 0


def _refuse_what_cannot_run(args) -> None:
    """Flags that cannot time anything, refused in words before any file is read."""
    if args.scale is None:
        raise ValueError("--scale is required (paper or tiny), unless --drop-stale")
    if args.repeats < 1:
        raise ValueError(f"--repeats {args.repeats}: at least one timed step is needed for a median")
    if args.missing_only and args.replace:
        raise ValueError("--missing-only times what the table lacks, --replace what it holds: give one")
    if args.time_limit is not None and args.time_limit <= 0:
        raise ValueError(f"--time-limit {args.time_limit:g}: a positive number of seconds")
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads {args.threads}: a step runs on at least one thread")


def _drop_stale(args) -> int:
    if args.scale or args.only or args.replace or args.missing_only or args.device or args.threads is not None \
            or args.time_limit is not None:
        raise ValueError("--drop-stale times nothing: it takes --table only")
    path = Path(args.table) if args.table else SHIPPED_TABLE
    kept, dropped = CostTable.read(path).without(planned_row_keys())
    if dropped:
        kept.write(path)
    for device, row in dropped:
        arms = ", ".join(row.get("arms", [])) or "a row"
        print(f"dropped {device}: {arms} (measured {row.get('measured', 'before')})")
    print(f"{path}: {len(dropped)} row(s) no claim plans any more {'removed' if dropped else 'found'}")
    return 0
