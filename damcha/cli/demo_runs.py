"""`damcha demo-runs`: (re)train the shipped demo runs into checkpoints/ and the tables shipped beside them."""

from __future__ import annotations

import argparse
from pathlib import Path

from tqdm import tqdm

from damcha.analysis.shipped_tables import ship_tables
from damcha.runs.allocator import keep_freed_memory
from damcha.runs.checkpoints import load_run
from damcha.runs.demo_runs import DEMO_RUNS, build_demo_runs


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="checkpoints")
    p.add_argument("--only", nargs="*", help="names of the runs to train (default: all)")
    p.add_argument("--quick", action="store_true", help="2 epochs each: a smoke test, not for shipping")
    p.add_argument("--tables-only", action="store_true",
                   help="only (re)compute the tables shipped beside the runs (data table, metric ablations)")


def run(args) -> int:
    keep_freed_memory()  # this process only trains: keep freed blocks rather than re-fault them
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

    with tqdm(folders, desc="tables shipped with the runs", unit="run") as bar:
        for folder in bar:
            ship_tables(load_run(folder), progress=bar.set_postfix_str)

