"""What a scale's training runs cost, read from a table of measured training steps keyed by device name.

    python -m damcha costs --scale paper --device cuda        (on each kind of GPU the runs will use)

A run's cost is its optimiser steps times the seconds one step of its exact configuration (model config,
batch, precision, compilation) took on the named device (`measure`: the training loop's own step,
damcha.runs.train.optimiser_step, timed after warm-up). The budget (`budget`) reads the table: a run whose
configuration has no row for the device is named as not measured, never costed at another arm's rate;
a run measured as not fitting the device says so. Evaluation is not counted.

The shipped table (cost_table.json beside this module) holds what was measured for this repository; a
user's own measurements go to another file (`--cost-table`), read over it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from damcha.evidence.records import Arm, Claim
from damcha.evidence.scales import SCALES, chosen_by, locate_data, run_config, scale_claims
from damcha.evidence.setting import Scale, Setting
from damcha.evidence.units import run_train_config
from damcha.inputs.datasets.generated import write_standard_format_files
from damcha.model.config import ModelConfig
from damcha.model.transformer import build_model
from damcha.runs.checkpoints import write_text_atomic
from damcha.runs.files import CheckpointError, read_json
from damcha.runs.memory import AUTO_MICRO_BATCH, DoesNotFit, device_memory, plan_training
from damcha.runs.train import Precision, TrainConfig, make_optimizer, optimiser_step

SHIPPED_TABLE = Path(__file__).with_name("cost_table.json")
WARMUP_STEPS = {False: 1, True: 3}  # (compiled: the first steps compile, for the full batch and again)


@dataclass(frozen=True)
class StepKind:
    """What one training step's cost depends on: the run's model config, its batch, precision and
    whether it is compiled."""

    config: str  # ModelConfig.to_dict() as sorted JSON text (hashable)
    batch: int
    precision: Precision
    compiled: bool

    @classmethod
    def of(cls, config: ModelConfig, batch: int, precision: Precision, compiled: bool) -> StepKind:
        return cls(json.dumps(config.to_dict(), sort_keys=True), batch, precision, compiled)

    def row_key(self) -> dict:
        return {"config": json.loads(self.config), "batch": self.batch, "precision": self.precision,
                "compiled": self.compiled}


@dataclass(frozen=True)
class PlannedRun:
    """One training run a claim asks for: what it is called, its step kind and its optimiser steps."""

    claim: str
    arm: str
    run: str
    kind: StepKind
    steps: int


def planned_runs(setting: Setting, claims: list[Claim], seeds: int) -> Iterator[PlannedRun]:
    """Every distinct training run of the claims (a run shared by claims: at its first), with its steps."""
    scale, seen = setting.at_scale, set()
    for claim in claims:
        for arm in claim.arms:
            if arm.kind not in ("train", "adaptivity"):
                continue
            for seed in range(claim.seeds(seeds, scale.smoke)):
                name = arm.run_name(seed, scale.smoke)
                if name in seen:
                    continue
                seen.add(name)
                yield _planned(claim, arm, name, setting)


def _planned(claim: Claim, arm: Arm, name: str, setting: Setting) -> PlannedRun:
    place = setting.at_scale.place(arm.dataset)
    tcfg = run_train_config(arm, 0, setting.at_scale.smoke, setting)
    per_epoch = tcfg.steps_per_epoch if "steps_per_epoch" in place.train else math.ceil(place.train_samples / tcfg.batch_size)
    kind = StepKind.of(run_config(arm, setting), tcfg.batch_size, tcfg.precision, setting.at_scale.compile)
    return PlannedRun(claim.key, arm.name, name, kind, tcfg.epochs * per_epoch)


# ----------------------------------------------------------------------------- the table

MAX_TABLE_BYTES = 8 * 2**20  # a table of every scale on a dozen devices is well under 1 MB
ROW_KEYS = {"config": dict, "batch": int, "precision": str, "compiled": bool}


class CostTable:
    """device name -> its measured rows ({config, batch, precision, compiled, step_seconds | does_not_fit,
    arms, ...}); later files' rows replace earlier ones of the same step kind."""

    def __init__(self, devices: dict[str, dict]):
        self.devices = devices

    @classmethod
    def read(cls, *paths: Path | str | None) -> CostTable:
        """The tables at `paths` merged (a path that does not exist adds nothing). Each is read as the run
        folder's files are (a regular file of at most MAX_TABLE_BYTES, bounded nesting) and refused in words,
        naming the file and the field, when it is not a cost table."""
        table = cls({})
        for path in (Path(p) for p in paths if p is not None):
            if not os.path.lexists(path):
                continue
            try:
                doc = read_json(path, MAX_TABLE_BYTES, None, "cost table")
            except CheckpointError as e:
                raise ValueError(f"{e}: it cannot be read as a cost table (one is written by `python -m damcha costs`)") from None
            for device, entry in validated_devices(doc, path).items():
                table = table.with_rows(device, entry["rows"], {k: v for k, v in entry.items() if k != "rows"})
        return table

    def row(self, device: str, kind: StepKind) -> dict | None:
        wanted = _key(kind.row_key())
        return next((r for r in self.devices.get(device, {}).get("rows", []) if _key(r) == wanted), None)

    def with_rows(self, device: str, rows: list[dict], about: dict) -> CostTable:
        entry = {**self.devices.get(device, {"rows": []}), **about}
        kept = [r for r in entry.get("rows", []) if _key(r) not in {_key(n) for n in rows}]
        return CostTable({**self.devices, device: {**entry, "rows": kept + rows}})

    def without(self, keys: set[str]) -> tuple[CostTable, list[tuple[str, dict]]]:
        """The table with only the rows whose step kind is in `keys` (as _key writes them), and (device, row) of
        each row left out."""
        dropped = [(device, r) for device, entry in self.devices.items() for r in entry.get("rows", [])
                   if _key(r) not in keys]
        return CostTable({device: {**entry, "rows": [r for r in entry.get("rows", []) if _key(r) in keys]}
                          for device, entry in self.devices.items()}), dropped

    def write(self, path: Path | str) -> None:
        write_text_atomic(Path(path), json.dumps({"devices": self.devices}, indent=1) + "\n")


def validated_devices(doc, path: Path) -> dict[str, dict]:
    """The `devices` of a parsed cost table, every row's fields checked; a ValueError naming the file and the
    first field that is wrong."""
    if not isinstance(doc, dict) or not isinstance(doc.get("devices"), dict):
        found = f"a JSON {type(doc).__name__}" if not isinstance(doc, dict) else f"an object of {sorted(doc)[:5]}"
        raise ValueError(f"{path}: not a cost table ({found}, no 'devices' object); a cost table is written by "
                         "`python -m damcha costs`, and no other file is read or written as one")
    for device, entry in doc["devices"].items():
        where = f"{path}: devices[{device[:80]!r}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("rows"), list):
            raise ValueError(f"{where}: not an object with a 'rows' list")
        for i, row in enumerate(entry["rows"]):
            if not isinstance(row, dict):
                raise ValueError(f"{where}.rows[{i}]: not an object")
            for key, kind in ROW_KEYS.items():
                if not isinstance(row.get(key), kind) or (kind is int and isinstance(row.get(key), bool)):
                    raise ValueError(f"{where}.rows[{i}].{key}: {type(row.get(key)).__name__}, not {kind.__name__}")
            seconds = row.get("step_seconds")
            if seconds is None and not isinstance(row.get("does_not_fit"), str):
                raise ValueError(f"{where}.rows[{i}]: neither step_seconds nor does_not_fit")
            if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int | float)
                                        or not math.isfinite(seconds) or seconds <= 0):
                raise ValueError(f"{where}.rows[{i}].step_seconds: {str(seconds)[:40]}, not a positive number of seconds")
    return doc["devices"]


def replaced_rows(table: CostTable, device: str, kinds: Iterable[StepKind]) -> list[dict]:
    """The rows of `device` that measuring `kinds` would replace."""
    return [r for r in (table.row(device, kind) for kind in kinds) if r is not None]


def _key(row: dict) -> str:
    return json.dumps([row["config"], row["batch"], row["precision"], row["compiled"]], sort_keys=True)


# ----------------------------------------------------------------------------- measuring

def measure_step(kind: StepKind, device: torch.device, repeats: int = 3) -> dict:
    """The seconds of one optimiser step of `kind` on `device` (the median of `repeats` after warm-up),
    on a batch of random tokens or vectors; a run the memory rule refuses is recorded as not fitting."""
    config = ModelConfig.from_dict(json.loads(kind.config))
    try:  # the step a run takes there: its batch in the micro-batches the memory plan fits (runs.memory)
        plan = plan_training(config, kind.batch, device_memory(device), micro_batch=AUTO_MICRO_BATCH,
                             strategies=("ddp",))
    except DoesNotFit as e:
        return {"does_not_fit": f"this run does not fit one {device.type} device: {e}"}
    model = build_model(config, seed=0).to(device)
    stepped = torch.compile(model) if kind.compiled else model
    tcfg = TrainConfig(precision=kind.precision, batch_size=kind.batch, micro_batch_size=plan.micro_batch)
    opt = make_optimizer(model, tcfg)
    x, y = _random_batch(config, kind.batch, device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    seconds = []
    for _ in range(WARMUP_STEPS[kind.compiled] + repeats):
        _synchronise(device)
        t0 = time.perf_counter()
        optimiser_step(stepped, opt, x, y, tcfg, device)
        _synchronise(device)
        seconds.append(time.perf_counter() - t0)
    timed = seconds[WARMUP_STEPS[kind.compiled]:]
    row = {"step_seconds": statistics.median(timed), "timed_steps": len(timed),
           "spread": [min(timed), max(timed)], "micro_batch": plan.micro_batch}
    if device.type == "cuda":
        row["peak_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
    return row


def _random_batch(config: ModelConfig, batch: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    T = config.block_size
    if config.input_dim:
        x = torch.randn(batch, T, config.input_dim, generator=gen)  # (B, T, input_dim)
        return x.to(device), x.to(device)
    x = torch.randint(0, config.vocab_size, (batch, T), generator=gen)  # (B, T)
    y = torch.randint(0, config.n_classes, (batch,), generator=gen) if config.n_classes else x  # (B,) or (B, T)
    return x.to(device), y.to(device)


def _synchronise(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def step_kinds(scale: Scale, device_type: str, only: list[str] | None = None) -> dict[StepKind, list[str]]:
    """Every distinct step kind of the scale's claims (those `only` names), with the arms that train it."""
    with generated_setting(scale, device_type) as setting:
        kinds: dict[StepKind, list[str]] = {}
        for run in planned_runs(setting, scale_claims_chosen(setting, only), 1):
            kinds.setdefault(run.kind, []).append(f"{run.claim}: {run.arm}")
    return kinds


def measure(kinds: dict[StepKind, list[str]], device: torch.device, repeats: int = 3,
            progress: bool = True, seconds: float | None = None) -> list[dict]:
    """One row per step kind, measured on `device`, each with what it was measured under: the date, torch's
    threads and the machine's load per core as the row began (a row timed beside other work is slower).
    seconds: a kind is started only while the time spent plus the longest kind so far stays within it (the
    kinds left are not measured: the rows returned say which were)."""
    rows: list[dict] = []
    start, longest = time.monotonic(), 0.0
    for kind, arms in tqdm(kinds.items(), desc="timing one training step of each configuration", disable=not progress):
        if seconds is not None and rows and time.monotonic() - start + longest > seconds:
            break
        began = time.monotonic()
        under = {"measured": time.strftime("%Y-%m-%d"), "threads": torch.get_num_threads(),
                 "load_per_core": round(os.getloadavg()[0] / (os.cpu_count() or 1), 2)}
        rows.append({**kind.row_key(), "arms": sorted(set(arms)), **measure_step(kind, device, repeats), **under})
        if device.type == "cuda":
            torch.cuda.empty_cache()
        longest = max(longest, time.monotonic() - began)
    return rows


def planned_row_keys() -> set[str]:
    """The step kinds the claims of every registered scale train now, keyed as a table's rows are: a row whose
    kind is not among them costs a run nothing plans any more (its configuration changed)."""
    return {_key(kind.row_key()) for scale in SCALES.values() for kind in step_kinds(scale, "cpu")}


@contextmanager
def generated_setting(scale: Scale, device: str = "cpu") -> Iterator[Setting]:
    """The scale's setting on generated files in the standard formats (same vocabularies, shapes and sequence
    lengths as the published files): what a step costs depends on the shapes, not on the bytes."""
    with tempfile.TemporaryDirectory() as folder:
        write_standard_format_files(folder)
        yield Setting(dataclasses.replace(scale, nonstandard_ok=True), locate_data(scale, folder), device)


def scale_claims_chosen(setting: Setting, only: list[str] | None = None) -> list[Claim]:
    return [c for c in scale_claims(setting.at_scale, setting) if chosen_by(c.key, only)]


# ----------------------------------------------------------------------------- the budget

def budget(setting: Setting, claims: list[Claim], seeds: int, table: CostTable, device: str) -> list[dict]:
    """Per claim: its runs, the device-hours of those measured on `device` (their steps at the measured
    step time), the arms whose runs have no measurement there (with how many runs) or do not fit it, and its
    longest measured run (arm, hours; None: none measured)."""
    rows: dict[str, dict] = {c.key: {"claim": c.key, "hours": 0.0, "runs": 0, "measured_runs": 0, "unmeasured": {},
                                     "does_not_fit": {}, "longest_run": None} for c in claims}
    for run in planned_runs(setting, claims, seeds):
        row, measured = rows[run.claim], table.row(device, run.kind)
        row["runs"] += 1
        if measured is None:
            row["unmeasured"][run.arm] = row["unmeasured"].get(run.arm, 0) + 1
        elif "does_not_fit" in measured:
            row["does_not_fit"][run.arm] = row["does_not_fit"].get(run.arm, 0) + 1
        else:
            hours = run.steps * measured["step_seconds"] / 3600
            row["hours"] += hours
            row["measured_runs"] += 1
            if row["longest_run"] is None or hours > row["longest_run"][1]:
                row["longest_run"] = (run.arm, hours)
    return list(rows.values())


def budget_lines(rows: list[dict], device: str, table: CostTable, scale: Scale) -> list[str]:
    """The budget as the command prints it, with what it cannot cost said in words."""
    known = ", ".join(sorted(table.devices)) or "none"
    lines = [f"budget at --scale {scale.name} on {device} (training steps only, from the cost table):"]
    for r in rows:
        lines.append(f"  {r['claim']:<28s} {r['runs']:>3d} runs  {r['hours']:10.3g} device-hours for the "
                     f"{r['measured_runs']} measured{_gaps(r)}")
    total = sum(r["hours"] for r in rows)
    lines.append(f"  {'total':<28s}           {total:10.3g} device-hours")
    if any(r["unmeasured"] for r in rows):
        lines.append(f"  not measured on {device}: cost those runs with `python -m damcha costs --scale {scale.name} "
                     f"--device ...` on that device, or name a measured one with --cost-device (measured: {known})")
    return lines


def _gaps(row: dict) -> str:
    said = [f"{what}: {', '.join(f'{arm} ({n} run{_s(n)})' for arm, n in arms.items())}"
            for what, arms in (("not measured", row["unmeasured"]), ("does not fit the device", row["does_not_fit"]))
            if arms]
    return f"; {'; '.join(said)}" if said else ""


def _s(n: int) -> str:
    return "s" if n != 1 else ""


def uncosted(rows: list[dict]) -> int:
    return sum(sum(r["unmeasured"].values()) + sum(r["does_not_fit"].values()) for r in rows)


def budget_markdown(table: CostTable, scales: list[Scale]) -> str:
    """The budget of every scale's claims (the default seeds) on every device the table has measured some of
    its runs on: docs/reproduce.md's table, generated from the cost table."""
    out = []
    for scale in scales:
        with generated_setting(scale) as setting:
            claims = scale_claims_chosen(setting)
            by_device = {d: budget(setting, claims, 2 if scale.smoke else 3, table, d) for d in sorted(table.devices)}
        for device, rows in by_device.items():
            if not any(r["measured_runs"] or r["does_not_fit"] for r in rows):
                continue
            out += [f"`--scale {scale.name}` on {device}:", "",
                    "| claim | runs | device time of the measured runs | not costed |", "|---|---|---|---|"]
            for r in rows:
                if r["runs"]:
                    gaps = _gaps(r).removeprefix("; ") or "—"
                    out.append(f"| `{r['claim']}` | {r['runs']} | {_hours(r['hours'])} ({r['measured_runs']} runs) | {gaps} |")
            out += [f"| all | {sum(r['runs'] for r in rows)} | {_hours(sum(r['hours'] for r in rows))} "
                    f"({sum(r['measured_runs'] for r in rows)} runs) | {uncosted(rows)} runs |", ""]
    return "\n".join(out).rstrip() or "No device has been measured yet."


def _hours(hours: float) -> str:
    return f"{hours:.3g} h" if hours >= 0.1 else f"{hours * 3600:.3g} s"
