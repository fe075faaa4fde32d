"""Run (or resume) the claims' units over seeds, in worker processes, and write the results as they come."""

from __future__ import annotations

import dataclasses
import json
import platform
import time
from collections.abc import Callable
from pathlib import Path

import torch

from damcha.evidence import tuning
from damcha.evidence.catalogue import claims
from damcha.evidence.catalogue.common import SCALE
from damcha.evidence.records import TRAINING_KINDS, Arm, Claim
from damcha.evidence.results import append_lines, load_results, read_jsonl, summarise, write_csv
from damcha.evidence.sanity import sanity_checks
from damcha.evidence.scales import DEMO, Setting, chosen_by, scale_claims, scale_named
from damcha.evidence.slurm import SlurmSettings
from damcha.evidence.statistics import VERDICT_RULE
from damcha.evidence.units import run_unit
from damcha.runs.checkpoints import write_text_atomic

ARM_FIELDS = tuple(f.name for f in dataclasses.fields(Arm))


def measured_spec(spec: list) -> dict:
    """What decides a stored arm's measurement, by field: a document's arm list (older documents stored
    fewer fields, since appended, which then had their defaults); a training arm by the rate it trained
    at, not the grid that rate was chosen from."""
    from damcha.runs.train import TrainConfig

    fields = {**dict(zip(ARM_FIELDS, Arm("").spec())), **dict(zip(ARM_FIELDS, spec))}
    if fields["kind"] in TRAINING_KINDS:
        fields.update(lrs=[], lr=fields["lr"] or TrainConfig.lr)
    return fields


def same_arm(arm: Arm, stored: list | None) -> bool:
    """Whether an earlier document's arm of this name measures what this arm does. Documents before arms
    were stored kept names only; they predate the fields added since, which then had their defaults."""
    if stored is None:
        stored = dataclasses.replace(arm, lrs=(), lr=0.0, tuning=False).spec()
    return measured_spec(arm.spec()) == measured_spec(stored)


def evidence_claims(quick: bool, setting: Setting = DEMO) -> list[Claim]:
    """The claims a run tests: the catalogue's at the demo size, every arm that trains on a data set
    with its learning-rate grid (tuning.py; not yet at its chosen rate), or those a scale runs at its own."""
    return scale_claims(setting.scale, setting) if setting.scale else tuning.with_grid(claims(quick), quick)


def setting_of(doc: dict) -> Setting:
    """The setting an earlier results document was made in (its scale and files; the device does not matter)."""
    if doc.get("scale", "demo") == "demo":
        return DEMO
    return Setting(scale_named(doc["scale"]), tuple(doc.get("files", {}).items()))


def _reusable(previous: dict, quick: bool, setting: Setting) -> bool:
    return (previous.get("scale", "demo") == (setting.scale.name if setting.scale else "demo")
            and bool(previous.get("quick")) == quick)


def reusable_units(previous: dict, quick: bool, redo: tuple[str, ...] = (), setting: Setting = DEMO,
                   claims_now: list[Claim] | None = None) -> dict[str, dict]:
    """unit -> value for the arms of an earlier results document that the claims (`claims_now`, at their
    chosen rates; default: the catalogue's) still define alike, except the claims and variants named in
    `redo` (their code changed since, or they are timed)."""
    if not _reusable(previous, quick, setting):
        return {}
    known = {c.key: c for c in (evidence_claims(quick, setting) if claims_now is None else claims_now)}
    units = {}
    for stored in previous.get("claims", []):
        claim = known.get(stored.get("key"))
        if claim is None or claim.key in redo:
            continue
        specs = stored.get("arms", {})
        for arm in claim.arms:
            if arm.variant in redo and arm.kind != "constant" or not same_arm(arm, specs.get(arm.name)):
                continue
            for seed, value in enumerate(stored.get("values", {}).get(arm.name, [])):
                units.setdefault(arm.unit(seed, quick), value)
    return units


def reusable_tuning(previous: dict, quick: bool, redo: tuple[str, ...], setting: Setting,
                    claims_now: list[Claim]) -> dict[str, dict]:
    """unit -> value for the tuning fits of an earlier results document (its `tuning` rows) that the claims
    still need, except those of variants or claims named in `redo`."""
    if not _reusable(previous, quick, setting):
        return {}
    redone = {json.dumps(tuning.configuration(a).spec()) for c in claims_now if c.key in redo for a in c.arms if a.trains}
    units = {}
    for config, rates in tuning.tuning_arms(claims_now).items():
        if config.variant in redo or json.dumps(config.spec()) in redone:
            continue
        for row in previous.get("tuning", []):
            if measured_spec(row.get("configuration", [])) != measured_spec(config.spec()):
                continue
            for lr, arm in rates.items():
                for seed, loss in zip(row.get("seeds", []), row.get("losses", {}).get(f"{lr:g}", [])):
                    units[arm.unit(seed, quick)] = {"tuning_loss": loss, "lr": lr}
    needed = tuning.tuning_units(claims_now, quick, units)  # (an older document may hold fits no longer made)
    return {unit: value for unit, value in units.items() if unit in needed}


def claim_record(claim: Claim, values: dict[str, list[dict]], seeds: int, sanity: dict[str, float],
                 setting: Setting = DEMO, parameters: dict[str, int] | None = None) -> dict:
    """What results.json keeps of a claim: its definition, every arm's per-seed values and their statistics."""
    return {"key": claim.key, "title": claim.title, "statement": claim.statement, "metric": claim.metric,
            "columns": list(claim.columns), "lower_is_better": claim.lower_is_better, "note": claim.note,
            "scale": claim.scale or SCALE, "seeds": seeds, "arms": {a.name: a.spec() for a in claim.arms},
            "cannot_speak_to": list(claim.cannot_speak_to), "values": values,
            "parameters": arm_parameters(claim, setting) if parameters is None else parameters,
            **({"learning_rates": rates} if (rates := {a.name: a.lr for a in claim.arms if a.trains and a.lrs}) else {}),
            **summarise(claim, values, sanity)}


def arm_parameters(claim: Claim, setting: Setting = DEMO) -> dict[str, int]:
    """The parameter count of every arm that trains a model on a data set (synthetic arms report theirs
    per unit; efficiency arms as a ratio)."""
    from damcha.evidence.units import model_parameters

    return {a.name: model_parameters(a.variant, a.dataset, a.overrides, setting) for a in claim.arms if a.trains}


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
    known = {c.key: c for c in tuning.tuned(evidence_claims(bool(doc.get("quick")), setting), doc.get("tuning", []))}
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
                 recorded: dict | None = None, slurm: SlurmSettings | None = None) -> dict:
    """Run (or resume) every claim's units and write results.json and one CSV per claim to `out`.

    Units that share a trained run go to one task; tasks run in `workers` processes of one thread
    each (the models are small: two one-thread processes do about twice the work of one with two
    threads). Efficiency units are timed first, alone, in this process. reuse: an earlier
    results.json whose units are taken over where the claims still define the arm (see
    `reusable_units`; `redo` names claims and variants recomputed anyway); the document says so.
    setting: the scale, files and device (default: the demo's); `recorded` joins the document (the
    scale's data records and budget). Under torchrun every rank trains each run with the others (DDP)
    in the same order, and rank 0 alone writes, then times and scores what trains nothing. slurm: run
    the tasks as Slurm job-array elements instead (damcha.evidence.slurm; efficiency units are still
    timed here, alone), each result recorded by the same code as a local worker's."""
    from damcha import __version__
    from damcha.runs import distributed
    from damcha.runs.train import pick_device
    from damcha.runs.workers import workers_die_with_this_process

    quick = setting.scale.smoke if setting.scale else quick
    proc = distributed.start(distributed.device_for(pick_device(setting.device)))
    if slurm is not None and proc.distributed:
        raise ValueError("--launcher slurm submits the units as Slurm jobs: start the command itself without torchrun")
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
    previous = json.loads(Path(reuse).read_text()) if reuse is not None else None
    carried = {row["unit"] for row in read_jsonl(done_path) if isinstance(row, dict) and row.get("reused_from")}

    def take_over(units: dict[str, dict]) -> None:
        new = {unit: value for unit, value in units.items() if unit not in done}
        if proc.main:  # written before it is counted as done: a full disk keeps only what was written
            append_lines(done_path, [{"unit": unit, "value": value, "seconds": 0.0, "reused_from": str(reuse)}
                                     for unit, value in new.items()])
        for unit, value in new.items():
            done[unit], seconds[unit] = value, 0.0
            carried.add(unit)

    calls_path = work / "calls.jsonl"
    earlier_calls = [c for c in read_jsonl(calls_path) if isinstance(c, dict)]
    t0 = time.perf_counter()
    known = evidence_claims(quick, setting)
    chosen = [c for c in known if chosen_by(c.key, only)]
    unknown = sorted(set(only or ()) - {k for c in known for k in (c.key, c.key.split("@")[0])})
    if unknown or not chosen:
        raise ValueError(f"unknown claims {unknown}; known: {[c.key for c in known]}")
    tuned_here = bool(tuning.tuning_arms(chosen))  # (a scale's claims train untuned)

    def fits() -> dict[str, tuple[Arm, int]]:
        """The learning-rate choice's fits, before the reported seeds: as far as the done ones decide them."""
        return tuning.tuning_units(chosen, quick, done)
    if previous is not None:  # what trains nothing on a data set, and the fits (the rest once the rates are known)
        untrained = [dataclasses.replace(c, arms=tuple(a for a in c.arms if not a.trains)) for c in chosen]
        take_over(reusable_units(previous, quick, tuple(redo), setting, untrained))
        take_over(reusable_tuning(previous, quick, tuple(redo), setting, chosen))

    def by_run(pairs) -> dict[str, dict[str, tuple[Arm, int]]]:
        """run -> unit -> (arm, seed) of the (arm, seed) pairs not done yet; a unit shared by claims once."""
        tasks: dict[str, dict[str, tuple[Arm, int]]] = {}
        for arm, seed in pairs:
            if arm.unit(seed, quick) not in done:
                tasks.setdefault(arm.run_name(seed, quick), {})[arm.unit(seed, quick)] = (arm, seed)
        return tasks

    def todo(claims_: list[Claim]) -> dict[str, dict[str, tuple[Arm, int]]]:
        return by_run((arm, seed) for claim in claims_ for arm in claim.arms for seed in range(claim.seeds(seeds, quick)))

    def tuned_claims() -> list[Claim]:
        return tuning.tuned(chosen, tuning.tuning_table(chosen, quick, done))

    def remaining_units() -> int:
        return sum(u not in done for u in fits()) + sum(len(t) for t in todo(tuned_claims()).values())

    total, fresh = remaining_units(), 0  # to compute in this call
    written: dict[str, dict] = {}
    claim_units: dict[str, dict[str, list[str]]] = {}  # claim -> arm -> units, once the rates are chosen
    sanity = sanity_checks()

    def used_units() -> set[str]:
        """The tuning fits and the reported units the claims use (those known once the rates are chosen)."""
        return {*fits(), *(u for arms in claim_units.values() for us in arms.values() for u in us)}

    def record(results: list[tuple[str, dict, float]]) -> None:
        nonlocal fresh
        for unit, value, took in results:  # every rank keeps what is done (the rates are chosen from it)
            done[unit], seconds[unit] = value, took
        if not proc.main:
            return
        append_lines(done_path, [{"unit": unit, "value": value, "seconds": took} for unit, value, took in results])
        for unit, _, _ in results:
            fresh += 1
            if progress:
                (name, *_), seed = json.loads(unit)[:2]
                progress(f"{name}, seed {seed}", total)
        for claim in claims_now:  # a claim is written as soon as its last unit is in
            units = claim_units.get(claim.key, {})
            if units and claim.key not in written and all(u in done for us in units.values() for u in us):
                values = {arm: [done[u] for u in us] for arm, us in units.items()}
                written[claim.key] = claim_record(claim, values, claim.seeds(seeds, quick), sanity, setting)
                write_csv(out / f"{claim.key}.csv", written[claim.key])
        doc["claims"] = [written[c.key] for c in chosen if c.key in written]
        if tuned_here:
            doc["tuning"] = tuning.tuning_table(chosen, quick, done)
        this_call = {"command": command, "wall_seconds": round(time.perf_counter() - t0, 1), "units_computed": fresh,
                     "workers": workers, "launcher": "slurm" if slurm else "local",
                     **({"processes": proc.world} if proc.distributed else {})}
        counted = used_units()
        doc.update(wall_seconds=this_call["wall_seconds"], calls=[*earlier_calls, this_call],
                   wall_seconds_all_calls=round(sum(c["wall_seconds"] for c in [*earlier_calls, this_call]), 1),
                   compute_seconds=round(sum(seconds.get(u, 0.0) for u in counted), 1),  # every call, all workers
                   units_computed_in_this_call=fresh,  # the rest were resumed from the work folder
                   reused_units=len(carried & counted),  # of the units used, those taken over from an earlier
                   # results.json (compute not counted again)
                   complete=len(written) == len(chosen),
                   not_run=[c.key for c in known if c.key not in written])
        write_text_atomic(out / "results.json", json.dumps(doc, indent=2))  # after every task: a stopped run still shows

    def compute(tasks: dict[str, dict[str, tuple[Arm, int]]]) -> None:
        """Run the tasks: under torchrun the training ones on every rank together (DDP), then rank 0 alone
        the rest; efficiency units timed first, alone, before any training competes for the cores; the
        rest in `workers` processes."""
        if proc.distributed:
            for key in [k for k, t in tasks.items() if next(iter(t.values()))[0].trains]:
                record(run_task(list(tasks.pop(key).values()), quick, work, setting))
            if not proc.main:
                return
        for key in [k for k, t in tasks.items() if next(iter(t.values()))[0].kind == "efficiency"]:
            record(run_task(list(tasks.pop(key).values()), quick, work, setting))
        if slurm is not None and tasks:
            from damcha.evidence.slurm import run_tasks

            for results in run_tasks([list(t.values()) for t in tasks.values()], quick, work, setting, slurm):
                record(results)
        elif workers > 1 and len(tasks) > 1:
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

    doc = {"command": command, "quick": quick, "seeds": list(range(seeds)), "workers": workers,
           "units": 0, "scale": setting.scale.name if setting.scale else "demo", **(recorded or {}),
           "versions": {"damcha": __version__, "torch": torch.__version__, "python": platform.python_version()},
           "verdict_rule": VERDICT_RULE, "sanity": sanity,
           **({"tuning_rule": tuning.RULE} if tuned_here else {}), "reused_units": 0}
    claims_now = chosen
    timed = {k: t for k, t in todo(chosen).items() if next(iter(t.values()))[0].kind == "efficiency"}
    compute({**timed, **by_run(fits().values())})  # the timings and the first tuning seed's fits: the reported
    while pending := by_run(fits().values()):  # seeds train at the rates they choose; each later seed fits the best
        compute(pending)
    claims_now = tuned_claims()
    if previous is not None:
        take_over(reusable_units(previous, quick, tuple(redo), setting, claims_now))
    total = fresh + remaining_units()  # (the reported units at their rates: some are taken over)
    claim_units.update({c.key: {a.name: [a.unit(s, quick) for s in range(c.seeds(seeds, quick))] for a in c.arms}
                        for c in claims_now})
    doc["units"] = len(used_units())
    compute(todo(claims_now))
    if proc.distributed and not proc.main:
        return {"rank": proc.rank, "claims": []}  # rank 0 writes (and returns) the document
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
