"""`damcha evidence`: the paper's claims tested at a scale (seeds, intervals, verdicts), here or on Slurm;
--restate recomputes the verdicts of stored values."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

import torch
from tqdm import tqdm

from damcha.cli.flags import choice
from damcha.evidence.costs import SHIPPED_TABLE, CostTable, budget, budget_lines, uncosted
from damcha.evidence.runner import restate, run_evidence
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
from damcha.evidence.slurm import SlurmSettings, check, job_minutes
from damcha.runs.machine import device_name


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true", help="a reduced run for CI (its numbers are not the shipped ones)")
    p.add_argument("--seeds", type=int, help="seeds per arm (default 3; --quick: 2)")
    p.add_argument("--only", nargs="*", help="claim keys to run (default: all)")
    p.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1),
                   help="processes of one thread each that train and evaluate units side by side (default 2)")
    p.add_argument("--out", help="where results.json and the CSVs go (default checkpoints/evidence; with --scale "
                   "S: checkpoints/evidence-S)")
    p.add_argument("--scale", default="demo", help="demo (the shipped sizes), paper (the paper's model sizes on your "
                   "standard files under --data-dir, on GPUs) or tiny (the paper path at a tiny size: a rehearsal)")
    p.add_argument("--data-dir", help="with --scale: the folder holding cifar-10-batches-py, enwik8(.zip), text8(.zip)")
    p.add_argument("--device", help="with --scale: cpu, cuda (default: the scale's; under torchrun each rank its GPU)")
    p.add_argument("--budget", type=float, help="with --scale: refuse to start when the claims' device-hours "
                   "(from the cost table) exceed this, or when some of their runs have no measured cost")
    p.add_argument("--cost-table", help="with --scale: a cost table written by `damcha costs --table`, read over the "
                   "shipped one")
    p.add_argument("--cost-device", help="with --scale: the device the budget costs the runs on, as the cost table "
                   "names it (default: where the units train: --device, at the threads a unit uses)")
    p.add_argument("--reuse", metavar="RESULTS_JSON", help="take over the units of an earlier results.json for the "
                   "arms the claims still define (recorded in the document)")
    p.add_argument("--redo", nargs="*", default=[], metavar="CLAIM_OR_VARIANT",
                   help="with --reuse: claims and variants to recompute anyway (code changed, or timed)")
    p.add_argument("--launcher", choices=("local", "slurm"), default="local",
                   help="local: the units run here (--workers processes); slurm: each task a Slurm job-array element "
                        "through submitit (pip install 'damcha[cluster]'), the work folder on shared storage")
    p.add_argument("--slurm-partition", help="with --launcher slurm: the partition (default: the cluster's)")
    p.add_argument("--slurm-account", help="with --launcher slurm: the account to charge")
    p.add_argument("--slurm-qos", help="with --launcher slurm: the quality of service")
    p.add_argument("--slurm-time", type=int, metavar="MINUTES", help="with --launcher slurm: each job's time limit "
                   "(default: from the cost table, the longest run's training x1.5 + 15 minutes where every run is "
                   "costed, else 60; a job that reaches it is submitted again and resumes its run)")
    p.add_argument("--cpus-per-unit", type=int, help="with --launcher slurm: CPUs (and torch threads) per rank "
                   "(default 1)")
    p.add_argument("--gpus-per-unit", type=int, help="with --launcher slurm: GPUs per node of a unit's allocation, "
                   "one rank each (default 0)")
    p.add_argument("--nodes-per-unit", type=int, help="with --launcher slurm: nodes a unit spans (default 1)")
    p.add_argument("--ranks-per-node", type=int, help="with --launcher slurm: processes a unit trains with on each "
                   "node (default: one per GPU, else 1; on CPUs, Gloo ranks)")
    p.add_argument("--slurm-parallel", type=int, help="with --launcher slurm: jobs of one array running at once "
                   "(default 64)")
    p.add_argument("--slurm-retries", type=int, help="with --launcher slurm: resubmissions of a task whose job left "
                   "the queue without a result: cancelled, preempted, timed out (default 2)")
    p.add_argument("--slurm-mem", help="with --launcher slurm: each job's memory (sbatch --mem, e.g. 64G)")
    p.add_argument("--slurm-constraint", help="with --launcher slurm: node features each job needs (sbatch "
                   "--constraint, e.g. a100)")
    p.add_argument("--slurm-setup", action="append", metavar="LINE", help="with --launcher slurm: a shell line each "
                   "job runs before its units (repeatable: module load ..., source venv/bin/activate)")
    p.add_argument("--slurm-sbatch", action="append", metavar="NAME=VALUE", type=choice,
                   help="with --launcher slurm: a further sbatch option for each job (repeatable: exclude=node7, "
                        "reservation=lab)")
    p.add_argument("--work", help="trained runs and finished units (resumable; default .evidence-work, with --scale "
                   "OUT/work)")
    p.add_argument("--restate", action="store_true", help="recompute the statistics and verdicts of --out's results "
                   "from the per-seed values it stores (after a change to the statistics or the claims' wording; "
                   "nothing is trained)")


def run(args) -> int:
    demo = args.scale == "demo"
    args.out = args.out or ("checkpoints/evidence" if demo else f"checkpoints/evidence-{args.scale}")
    args.work = args.work or (".evidence-work" if demo else str(Path(args.out) / "work"))
    if args.restate:
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
    slurm = _slurm_settings(args, (recorded or {}).get("budget"))  # (the cluster is asked once the budget holds)
    with tqdm(desc="evidence", unit="unit") as bar:
        def finished(text: str, total: int) -> None:
            bar.total = total
            bar.set_postfix_str(text[-60:])
            bar.update(1)

        doc = run_evidence(args.out, args.work, args.quick, seeds, args.only, progress=finished,
                           command="python -m damcha " + " ".join(sys.argv[1:]), workers=args.workers,
                           reuse=args.reuse, redo=tuple(args.redo), setting=setting, recorded=recorded, slurm=slurm)
    if doc.get("rank"):  # another rank of a torchrun job: rank 0 reports
        return 0
    for claim in doc["claims"]:
        print(f"{claim['verdict']:>28s}  {claim['title']}")
    print(f"wrote {args.out}/results.json ({doc['wall_seconds']} s)")
    return 0


SLURM_FLAGS = ("slurm_partition", "slurm_account", "slurm_qos", "slurm_time", "cpus_per_unit", "gpus_per_unit",
               "nodes_per_unit", "ranks_per_node", "slurm_parallel", "slurm_retries", "slurm_mem", "slurm_constraint",
               "slurm_setup", "slurm_sbatch")


def _slurm_settings(args, budget: dict | None = None):
    """--launcher slurm's settings, checked against the cluster before anything is submitted; Slurm flags
    without it are refused (they would be ignored). Without --slurm-time, each job's limit is derived from the
    budget's longest run where every run is costed (job_minutes), said in a line."""
    given = [f"--{name.replace('_', '-')}" for name in SLURM_FLAGS if getattr(args, name) is not None]
    if args.launcher != "slurm":
        if given:
            raise ValueError(f"{', '.join(given)} only apply with --launcher slurm (the local launcher runs the units "
                             "here); add --launcher slurm or leave them out")
        return None
    settings = _slurm_settings_given(args)
    if args.slurm_time is None and budget is not None:
        minutes, said = job_minutes(budget["claims"], budget["device"], settings.time_minutes)
        settings = dataclasses.replace(settings, time_minutes=minutes)
        print(f"--slurm-time {minutes}: {said}")
    check(settings, Path(args.work))
    return settings


def _slurm_settings_given(args):
    return SlurmSettings(**{field: value for field, value in (
        ("partition", args.slurm_partition), ("account", args.slurm_account), ("qos", args.slurm_qos),
        ("time_minutes", args.slurm_time), ("cpus_per_unit", args.cpus_per_unit),
        ("gpus_per_unit", args.gpus_per_unit), ("nodes_per_unit", args.nodes_per_unit),
        ("ranks_per_node", args.ranks_per_node), ("max_parallel", args.slurm_parallel),
        ("retries", args.slurm_retries), ("mem", args.slurm_mem), ("constraint", args.slurm_constraint),
        ("setup", tuple(args.slurm_setup) if args.slurm_setup else None),
        ("sbatch", tuple(args.slurm_sbatch) if args.slurm_sbatch else None)) if value is not None})


def _evidence_setting(args, seeds: int):
    """The scale's setting, its data read and checked and its budget printed (and held to --budget),
    all before anything trains; the demo's when no --scale is given."""
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
        micro = sorted({r["micro_batch"] for r in memory})
        rows_at_once = str(micro[0]) if len(micro) == 1 else f"{micro[0]} to {micro[-1]}"
        lines.append(f"memory: every run fits one {setting.device} device; the largest, {largest['claim']} "
                     f"{largest['arm']}, holds about {largest['gib_per_device']} GiB; each step's batch in "
                     f"micro-batches of {rows_at_once} rows")
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
    return torch.device(device).type != "cuda" or torch.cuda.is_available()


def _unit_device_name(args, device: str) -> str:
    """The device a unit trains on, as the cost table names it: a GPU, or the CPU at the threads a unit
    uses (one a local worker; --cpus-per-unit under Slurm)."""
    return device_name(device, args.cpus_per_unit or 1)

