"""Run (or resume) the claims' units over seeds, in worker processes, and write the results as they come."""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

import torch

from damcha.evidence.catalogue import claims
from damcha.evidence.catalogue.common import SCALE
from damcha.evidence.records import Arm, Claim
from damcha.evidence.results import load_results, read_jsonl, summarise, write_csv
from damcha.evidence.sanity import sanity_checks
from damcha.evidence.scales import DEMO, Setting, chosen_by, scale_claims, scale_named
from damcha.evidence.statistics import VERDICT_RULE
from damcha.evidence.units import run_unit
from damcha.runs.checkpoints import write_text_atomic


def arm_spec(arm: Arm) -> list:
    return list(json.loads(json.dumps(dataclasses.astuple(arm))))


def same_arm(arm: Arm, stored: list | None) -> bool:
    """Whether an earlier document's arm of this name is this arm. Documents before arms were stored name
    only; they predate the fields added since (`lrs`), so theirs had those fields' defaults."""
    if stored is None:
        return arm == dataclasses.replace(arm, lrs=())
    return arm_spec(arm) == stored


def evidence_claims(quick: bool, setting: Setting = DEMO) -> list[Claim]:
    """The claims a run tests: the catalogue's at the demo size, or those a scale runs at its own."""
    return scale_claims(setting.scale, setting) if setting.scale else claims(quick)


def setting_of(doc: dict) -> Setting:
    """The setting an earlier results document was made in (its scale and files; the device does not matter)."""
    if doc.get("scale", "demo") == "demo":
        return DEMO
    return Setting(scale_named(doc["scale"]), tuple(doc.get("files", {}).items()))


def reusable_units(previous: dict, quick: bool, redo: tuple[str, ...] = (), setting: Setting = DEMO) -> dict[str, dict]:
    """unit -> value for the arms of an earlier results document that the claims still define alike (same
    name and definition), except the claims and variants named in `redo` (their code changed since, or
    they are timed)."""
    if previous.get("scale", "demo") != (setting.scale.name if setting.scale else "demo"):
        return {}
    known = {c.key: c for c in evidence_claims(quick, setting)}
    units = {}
    for stored in previous.get("claims", []):
        claim = known.get(stored.get("key"))
        if claim is None or claim.key in redo or bool(previous.get("quick")) != quick:
            continue
        specs = stored.get("arms", {})
        for arm in claim.arms:
            if arm.variant in redo and arm.kind != "constant" or not same_arm(arm, specs.get(arm.name)):
                continue
            for seed, value in enumerate(stored.get("values", {}).get(arm.name, [])):
                units.setdefault(arm.unit(seed, quick), value)
    return units


def claim_record(claim: Claim, values: dict[str, list[dict]], seeds: int, sanity: dict[str, float],
                 setting: Setting = DEMO, parameters: dict[str, int] | None = None) -> dict:
    """What results.json keeps of a claim: its definition, every arm's per-seed values and their statistics."""
    return {"key": claim.key, "title": claim.title, "statement": claim.statement, "metric": claim.metric,
            "columns": list(claim.columns), "lower_is_better": claim.lower_is_better, "note": claim.note,
            "scale": claim.scale or SCALE, "seeds": seeds, "arms": {a.name: arm_spec(a) for a in claim.arms},
            "cannot_speak_to": list(claim.cannot_speak_to), "values": values,
            "parameters": arm_parameters(claim, setting) if parameters is None else parameters,
            **summarise(claim, values, sanity)}


def arm_parameters(claim: Claim, setting: Setting = DEMO) -> dict[str, int]:
    """The parameter count of every arm that trains a model on a data set (synthetic arms report theirs
    per unit; efficiency arms as a ratio)."""
    from damcha.evidence.units import model_parameters

    return {a.name: model_parameters(a.variant, a.dataset, a.overrides, setting) for a in claim.arms
            if a.kind in ("train", "adaptivity")}


def restate(folder: Path, command: str = "") -> dict:
    """Recompute the statistics and verdicts of a results folder from the per-seed values it stores,
    with the claims' current definitions and statistics code: nothing is trained or timed. A claim
    whose arms changed since (or that no longer exists) is left as it was, and named. The document
    keeps its compute record and says when and by what its statistics were recomputed."""
    from damcha import __version__

    folder = Path(folder)
    doc = load_results(folder)
    if doc is None:
        raise ValueError(f"{folder}: no results.json to restate")
    setting = setting_of(doc)
    known = {c.key: c for c in evidence_claims(bool(doc.get("quick")), setting)}
    kept = []
    for i, stored in enumerate(doc["claims"]):
        claim = known.get(stored.get("key"))
        specs = stored.get("arms", {})
        if claim is None or set(specs) != {a.name for a in claim.arms} or \
                not all(same_arm(a, specs.get(a.name)) for a in claim.arms):
            kept.append(stored.get("key"))
            continue
        doc["claims"][i] = claim_record(claim, stored["values"], stored.get("seeds"), doc.get("sanity", {}), setting,
                                        stored.get("parameters"))
        write_csv(folder / f"{claim.key}.csv", doc["claims"][i])
    doc["verdict_rule"] = VERDICT_RULE
    doc["restated"] = {"command": command, "damcha": __version__, "unchanged_claims": kept,
                       "when": time.strftime("%Y-%m-%d")}
    write_text_atomic(folder / "results.json", json.dumps(doc, indent=2))
    return doc


def run_evidence(out: Path, work: Path, quick: bool = False, seeds: int = 3, only: list[str] | None = None,
                 progress: Callable[[str, int], None] | None = None, command: str = "", workers: int = 1,
                 reuse: Path | None = None, redo: tuple[str, ...] = (), setting: Setting = DEMO,
                 recorded: dict | None = None) -> dict:
    """Run (or resume) every claim's units and write results.json and one CSV per claim to `out`.

    Units that share a trained run go to one task; tasks run in `workers` processes of one thread
    each (the models are small: two one-thread processes do about twice the work of one with two
    threads). Efficiency units are timed first, alone, in this process. reuse: an earlier
    results.json whose units are taken over where the claims still define the arm (see
    `reusable_units`; `redo` names claims and variants recomputed anyway); the document says so.
    setting: the scale, files and device (default: the demo's); `recorded` joins the document (the
    scale's data records and budget). Under torchrun every rank trains each run with the others (DDP)
    in the same order, and rank 0 alone writes, then times and scores what trains nothing."""
    from damcha import __version__
    from damcha.runs import distributed
    from damcha.runs.train import pick_device
    from damcha.runs.workers import workers_die_with_this_process

    quick = setting.scale.smoke if setting.scale else quick
    proc = distributed.start(distributed.device_for(pick_device(setting.device)))
    workers = 1 if proc.distributed else workers
    out, work = Path(out), Path(work)
    if proc.main:
        out.mkdir(parents=True, exist_ok=True)
        work.mkdir(parents=True, exist_ok=True)
    distributed.barrier(proc)
    done_path = work / "units.jsonl"
    done, seconds = {}, {}
    for row in read_jsonl(done_path):
        if isinstance(row, dict) and isinstance(row.get("value"), dict):  # (a bare number: an older format, redone)
            done[row["unit"]], seconds[row["unit"]] = row["value"], row.get("seconds", 0.0)
    distributed.barrier(proc)  # every rank has read what is done before rank 0 adds to it
    reused = {}
    if reuse is not None:
        previous = json.loads(Path(reuse).read_text())
        reused = {u: v for u, v in reusable_units(previous, quick, tuple(redo), setting).items() if u not in done}
        with done_path.open("a") if proc.main else open(os.devnull, "w") as f:
            for unit, value in reused.items():
                done[unit], seconds[unit] = value, 0.0
                f.write(json.dumps({"unit": unit, "value": value, "seconds": 0.0, "reused_from": str(reuse)}) + "\n")
    carried = sum(1 for row in read_jsonl(done_path) if isinstance(row, dict) and row.get("reused_from"))
    calls_path = work / "calls.jsonl"
    earlier_calls = [c for c in read_jsonl(calls_path) if isinstance(c, dict)]
    t0 = time.perf_counter()
    known = evidence_claims(quick, setting)
    chosen = [c for c in known if chosen_by(c.key, only)]
    unknown = sorted(set(only or ()) - {k for c in known for k in (c.key, c.key.split("@")[0])})
    if unknown or not chosen:
        raise ValueError(f"unknown claims {unknown}; known: {[c.key for c in known]}")
    claim_units = {c.key: {a.name: [a.unit(s, quick) for s in range(c.seeds(seeds, quick))] for a in c.arms}
                   for c in chosen}
    all_units = {u for arms in claim_units.values() for us in arms.values() for u in us}
    tasks: dict[str, dict[str, tuple[Arm, int]]] = {}  # run -> unit -> (arm, seed); a unit shared by claims once
    for claim in chosen:
        for arm in claim.arms:
            for seed in range(claim.seeds(seeds, quick)):
                if arm.unit(seed, quick) not in done:
                    tasks.setdefault(arm.run_name(seed, quick), {})[arm.unit(seed, quick)] = (arm, seed)
    total, fresh = sum(len(t) for t in tasks.values()), 0  # to compute in this call
    written: dict[str, dict] = {}
    sanity = sanity_checks()

    def record(results: list[tuple[str, dict, float]]) -> None:
        nonlocal fresh
        if not proc.main:
            return
        with done_path.open("a") as f:
            for unit, value, took in results:
                done[unit], seconds[unit] = value, took
                fresh += 1
                f.write(json.dumps({"unit": unit, "value": value, "seconds": took}) + "\n")
                if progress:
                    (name, *_), seed = json.loads(unit)[:2]
                    progress(f"{name}, seed {seed}", total)
        for claim in chosen:  # a claim is written as soon as its last unit is in
            units = claim_units[claim.key]
            if claim.key not in written and all(u in done for us in units.values() for u in us):
                values = {arm: [done[u] for u in us] for arm, us in units.items()}
                written[claim.key] = claim_record(claim, values, claim.seeds(seeds, quick), sanity, setting)
                write_csv(out / f"{claim.key}.csv", written[claim.key])
        doc["claims"] = [written[c.key] for c in chosen if c.key in written]
        this_call = {"command": command, "wall_seconds": round(time.perf_counter() - t0, 1), "units_computed": fresh,
                     "workers": workers, **({"processes": proc.world} if proc.distributed else {})}
        doc.update(wall_seconds=this_call["wall_seconds"], calls=[*earlier_calls, this_call],
                   wall_seconds_all_calls=round(sum(c["wall_seconds"] for c in [*earlier_calls, this_call]), 1),
                   compute_seconds=round(sum(seconds.get(u, 0.0) for u in all_units), 1),  # every call, all workers
                   units_computed_in_this_call=fresh,  # the rest were resumed from the work folder
                   complete=len(written) == len(chosen),
                   not_run=[c.key for c in known if c.key not in written])
        write_text_atomic(out / "results.json", json.dumps(doc, indent=2))  # after every task: a stopped run still shows

    doc = {"command": command, "quick": quick, "seeds": list(range(seeds)), "workers": workers,
           "units": len(all_units), "scale": setting.scale.name if setting.scale else "demo", **(recorded or {}),
           "versions": {"damcha": __version__, "torch": torch.__version__, "python": platform.python_version()},
           "verdict_rule": VERDICT_RULE, "sanity": sanity,
           "reused_units": carried}  # taken over from an earlier results.json (compute not counted again)
    trains = {k for k, t in tasks.items() if next(iter(t.values()))[0].kind in ("train", "adaptivity")}
    exclusive = [k for k, t in tasks.items() if next(iter(t.values()))[0].kind == "efficiency"]
    if proc.distributed:  # the runs together first; then rank 0 alone times and scores the rest
        for key in [k for k in tasks if k in trains]:
            record(run_task(list(tasks.pop(key).values()), quick, work, setting))
        if not proc.main:
            return {"rank": proc.rank, "claims": []}  # rank 0 writes (and returns) the document
    for key in exclusive:  # timed alone, before any training competes for the cores
        record(run_task(list(tasks.pop(key).values()), quick, work, setting))
    if workers > 1 and len(tasks) > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with workers_die_with_this_process(), ProcessPoolExecutor(
                workers, mp_context=multiprocessing.get_context("spawn"), initializer=_start_worker) as pool:
            for future in as_completed([pool.submit(run_task, list(t.values()), quick, work, setting)
                                        for t in tasks.values()]):
                record(future.result())
    else:
        for task in tasks.values():
            record(run_task(list(task.values()), quick, work, setting))
    record([])
    with (work / "calls.jsonl").open("a") as f:  # wall time over a run resumed in several calls
        f.write(json.dumps(doc["calls"][-1]) + "\n")
    return doc


def _start_worker() -> None:
    """One thread per worker (that it dies with the command, damcha.runs.workers saw to at import)."""
    torch.set_num_threads(1)


def run_task(units: list[tuple[Arm, int]], quick: bool, work: Path,
             setting: Setting = DEMO) -> list[tuple[str, dict, float]]:
    """Units that share one trained run, in order (the first trains it): (unit, metrics, seconds)."""
    results = []
    for arm, seed in units:
        t0 = time.perf_counter()
        value = run_unit(arm, seed, quick, work, setting)
        results.append((arm.unit(seed, quick), value, round(time.perf_counter() - t0, 2)))
    return results
