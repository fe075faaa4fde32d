"""Run (or resume) the claims' units over seeds, in worker processes, and write the results as they come."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import platform
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import torch

from damcha import __version__
from damcha.evidence import tuning
from damcha.evidence.capacity import model_parameters
from damcha.evidence.catalogue import claims
from damcha.evidence.catalogue.common import SCALE
from damcha.evidence.documents import load_results, read_jsonl, read_results, read_unit_rows
from damcha.evidence.records import TRAINING_KINDS, Arm, Claim
from damcha.evidence.results import (
    append_lines,
    compute_record,
    matched_versions,
    robustness,
    summarise,
    write_csv,
)
from damcha.evidence.sanity import sanity_checks
from damcha.evidence.scales import chosen_by, scale_claims, scale_named
from damcha.evidence.setting import DEMO, Setting
from damcha.evidence.slurm import SlurmSettings, run_tasks
from damcha.evidence.statistics import LEARNED, VERDICT_RULE
from damcha.evidence.synthetic_fits import tuning_value_of_row
from damcha.evidence.units import run_task
from damcha.runs import distributed
from damcha.runs.checkpoints import write_text_atomic
from damcha.runs.machine import cpu_model
from damcha.runs.train import TrainConfig, pick_device
from damcha.runs.workers import workers_die_with_this_process

ARM_FIELDS = tuple(f.name for f in dataclasses.fields(Arm))


def measured_spec(spec: list) -> dict:
    """What decides a stored arm's measurement, by field: a document's arm list (older documents stored
    fewer fields, since appended, which then had their defaults); a training arm by the rate it trained
    at, not the grid that rate was chosen from."""
    fields = dict(zip(ARM_FIELDS, Arm.padded_spec(spec)))
    if fields["kind"] in TRAINING_KINDS:
        fields.update(lrs=[], lr=fields["lr"] or TrainConfig.lr)
    elif fields["kind"] == "synthetic" and fields["lr"] and not fields["tuning"]:  # (lr 0 with a grid: an older
        fields.update(lrs=[])  # document's unit that chose its own rate, a measurement no longer made)
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
    units: dict[str, dict] = {}
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
    redone = {json.dumps(tuning.configuration(a).spec()) for c in claims_now if c.key in redo for a in c.arms
              if a.rate_tuned}
    units = {}
    for config in tuning.tuning_arms(claims_now):
        if config.variant in redo or json.dumps(config.spec()) in redone:
            continue
        for row in previous.get("tuning", []):
            if measured_spec(row.get("configuration", [])) != measured_spec(config.spec()):
                continue
            for rate, losses in row.get("losses", {}).items():  # (the grid's rates and any beyond it fitted)
                lr = float(rate)
                arm = tuning.at_rate(config, lr)
                for seed, loss in zip(row.get("seeds", []), losses):
                    units[arm.unit(seed, quick)] = {"tuning_loss": loss, "lr": lr}
    seed = tuning.synthetic_tuning_seed(quick)
    for config, arm in tuning.synthetic_tuning_arms(claims_now).items():
        if config.variant in redo or json.dumps(config.spec()) in redone:
            continue
        for row in previous.get("tuning", []):
            if "validation" in row and measured_spec(row.get("configuration", [])) == measured_spec(config.spec()):
                units[arm.unit(seed, quick)] = tuning_value_of_row(row)
    needed = tuning.tuning_units(claims_now, quick, units)  # (an older document may hold fits no longer made)
    return {unit: value for unit, value in units.items() if unit in needed}


def claim_record(claim: Claim, values: dict[str, list[dict]], seeds: int, sanity: dict[str, float],
                 setting: Setting = DEMO, parameters: dict[str, int] | None = None) -> dict:
    """What results.json keeps of a claim: its definition, every arm's per-seed values and their statistics."""
    return {"key": claim.key, "title": claim.title, "statement": claim.statement, "metric": claim.metric,
            "columns": list(claim.columns), "lower_is_better": claim.lower_is_better, "note": claim.note,
            "scale": claim.scale or SCALE, "seeds": seeds, "arms": {a.name: a.spec() for a in claim.arms},
            "cannot_speak_to": list(claim.cannot_speak_to), "summary_pairs": list(claim.summary_pairs), "values": values,
            **({"deviations": list(claim.deviations)} if claim.deviations else {}),
            "parameters": arm_parameters(claim, setting) if parameters is None else parameters,
            **({"learning_rates": rates} if (rates := {a.name: a.lr for a in claim.arms if a.rate_tuned}) else {}),
            "matched_versions": matched_versions(claim),
            **(summary := summarise(claim, values, sanity)),
            "robustness": robustness(claim, values, sanity) if summary["verdict_kind"] == LEARNED else {}}


def arm_parameters(claim: Claim, setting: Setting = DEMO) -> dict[str, int]:
    """The parameter count of every arm that trains a model on a data set (synthetic arms report theirs
    per unit; efficiency arms as a ratio)."""
    return {a.name: model_parameters(a.variant, a.dataset, a.overrides, setting) for a in claim.arms if a.trains}


def restate(folder: Path, command: str = "") -> dict:
    """Recompute the statistics and verdicts of a results folder from the per-seed values it stores,
    with the claims' current definitions and statistics code: nothing is trained or timed. A claim
    whose arms changed since (or that no longer exists) is left as it was, and named. The document
    keeps its compute record and says when and by what its statistics were recomputed."""
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
    threads). Efficiency units are timed first, alone, in this process (under Slurm on a node). reuse: an earlier
    results.json whose units are taken over where the claims still define the arm (see
    `reusable_units`; `redo` names claims and variants recomputed anyway); the document says so.
    setting: the scale, files and device (default: the demo's); `recorded` joins the document (the
    scale's data records and budget). Under torchrun every rank trains each run with the others (DDP)
    in the same order, and rank 0 alone writes, then times and scores what trains nothing. slurm: run
    the tasks as Slurm job-array elements instead (damcha.evidence.slurm; the efficiency units first, as jobs
    of their own), each result recorded by the same code as a local worker's; the
    submitting process never touches the accelerator (each job checks its node)."""
    quick = setting.scale.smoke if setting.scale else quick
    # A Slurm submitter (a login node, often without a GPU) never touches the accelerator: each job checks its own.
    device = torch.device(setting.device) if slurm is not None else pick_device(setting.device)
    proc = distributed.start(distributed.device_for(device))
    if slurm is not None and proc.distributed:
        raise ValueError("--launcher slurm submits the units as Slurm jobs: start the command itself without torchrun")
    request = _Request(out=Path(out), work=Path(work), quick=quick, seeds=seeds, only=only, setting=setting, reuse=reuse,
                       redo=tuple(redo), previous=read_results(reuse) if reuse is not None else None)
    run = _EvidenceRun.planned(request, proc, _Launch(command, 1 if proc.distributed else workers, progress, slurm))
    run.start_document(recorded)
    run.compute({**run.timings(), **run.by_run(run.fits().values())})  # the timings and the first tuning seed's fits:
    while pending := run.by_run(run.fits().values()):  # the reported seeds train at the rates they choose; each
        run.compute(pending)  # later seed fits the best
    run.compute(run.plan_reported_units())
    if proc.distributed and not proc.main:
        return {"rank": proc.rank, "claims": []}  # rank 0 writes (and returns) the document
    run.record([])
    with (run.work / "calls.jsonl").open("a") as f:  # wall time over a run resumed in several calls
        f.write(json.dumps(run.doc["calls"][-1]) + "\n")
    return run.doc


@dataclasses.dataclass(frozen=True)
class _Launch:
    """How a call runs its tasks and says where it is."""

    command: str
    workers: int
    progress: Callable[[str, int], None] | None
    slurm: SlurmSettings | None


@dataclasses.dataclass(frozen=True)
class _Request:
    """What the caller asked of a call: where the results and the work go, the claims and seeds, the scale,
    and the earlier results.json to take units over from (read) with the claims and variants to redo."""

    out: Path
    work: Path
    quick: bool
    seeds: int
    only: list[str] | None
    setting: Setting
    reuse: Path | None
    redo: tuple[str, ...]
    previous: dict | None


Tasks = dict[str, dict[str, tuple[Arm, int]]]  # run -> unit -> (arm, seed)


@dataclasses.dataclass(kw_only=True)
class _EvidenceRun:
    """One call of the evidence command: what is done (read from the work folder, taken over from an
    earlier results.json, computed here), what is left, and the document written as units come in."""

    out: Path
    work: Path
    quick: bool
    seeds: int
    setting: Setting
    proc: distributed.Process
    launch: _Launch
    known: list[Claim]
    chosen: list[Claim]
    done: dict[str, dict]
    seconds: dict[str, float]
    carried: set[str]
    previous: dict | None
    reuse: Path | None
    redo: tuple[str, ...]
    earlier_calls: list[dict]
    t0: float = dataclasses.field(default_factory=time.perf_counter)
    claims_now: list[Claim] = dataclasses.field(default_factory=list)
    claim_units: dict[str, dict[str, list[str]]] = dataclasses.field(default_factory=dict)  # once the rates are chosen
    written: dict[str, dict] = dataclasses.field(default_factory=dict)
    doc: dict = dataclasses.field(default_factory=dict)
    total: int = 0
    fresh: int = 0  # units computed in this call
    tuned_here: bool = False  # whether any chosen claim's arms choose their rate (a scale's train untuned)

    @classmethod
    def planned(cls, request: _Request, proc: distributed.Process, launch: _Launch) -> _EvidenceRun:
        """The claims chosen, the units done (a bare number in units.jsonl: an older format, redone), and
        what an earlier results.json gives that trains nothing, and its fits."""
        out, work, quick, setting, previous = request.out, request.work, request.quick, request.setting, request.previous
        if proc.main:
            out.mkdir(parents=True, exist_ok=True)
            work.mkdir(parents=True, exist_ok=True)
        distributed.barrier(proc)
        rows = read_unit_rows(work / "units.jsonl")
        done = {row["unit"]: row["value"] for row in rows if isinstance(row.get("value"), dict)}
        seconds = {row["unit"]: row.get("seconds", 0.0) for row in rows if isinstance(row.get("value"), dict)}
        distributed.barrier(proc)  # every rank has read what is done before rank 0 adds to it
        known = evidence_claims(quick, setting)
        chosen = [c for c in known if chosen_by(c.key, request.only)]
        unknown = sorted(set(request.only or ()) - {k for c in known for k in (c.key, c.key.split("@")[0])})
        if unknown or not chosen:
            raise ValueError(f"unknown claims {unknown}; known: {[c.key for c in known]}")
        run = cls(out=out, work=work, quick=quick, seeds=request.seeds, setting=setting, proc=proc, launch=launch,
                  known=known, chosen=chosen, done=done, seconds=seconds,
                  carried={row["unit"] for row in rows if row.get("reused_from")}, previous=previous,
                  reuse=request.reuse, redo=request.redo,
                  earlier_calls=[c for c in read_jsonl(work / "calls.jsonl") if isinstance(c, dict)], claims_now=chosen,
                  tuned_here=bool(tuning.tuning_arms(chosen) or tuning.synthetic_tuning_arms(chosen)))
        if previous is not None:  # what trains nothing on a data set, and the fits (the rest once the rates are known)
            untrained = [dataclasses.replace(c, arms=tuple(a for a in c.arms if not (a.trains or a.rate_tuned)))
                         for c in chosen]
            run.take_over(reusable_units(previous, quick, request.redo, setting, untrained))
            run.take_over(reusable_tuning(previous, quick, request.redo, setting, chosen))
        run.total = run.remaining_units()
        return run

    def start_document(self, recorded: dict | None) -> None:
        self.doc = {"command": self.launch.command, "quick": self.quick, "seeds": list(range(self.seeds)),
                    "workers": self.launch.workers, "units": 0,
                    "scale": self.setting.scale.name if self.setting.scale else "demo", **(recorded or {}),
                    "versions": {"damcha": __version__, "torch": torch.__version__,
                                 "python": platform.python_version()},
                    # what float rounding depends on beyond the versions: units rerun bit-identical only where
                    # these match (docs/evidence.md, "What reproduces where")
                    "machine": {"architecture": platform.machine(), "cpu_kernels": torch.backends.cpu.get_cpu_capability(),
                                "cpu": cpu_model(),
                                "threads_per_unit": self.launch.slurm.cpus_per_unit if self.launch.slurm else 1,
                                "of": "the submitting host; the units ran on the cluster's nodes" if self.launch.slurm
                                else "the machine the units ran on"},
                    "verdict_rule": VERDICT_RULE, "sanity": sanity_checks(),
                    **({"tuning_rule": tuning.RULE} if self.tuned_here else {}), "reused_units": 0}

    def take_over(self, units: dict[str, dict]) -> None:
        """Units of an earlier results.json, written before they count as done (a full disk keeps only
        what was written)."""
        new = {unit: value for unit, value in units.items() if unit not in self.done}
        if self.proc.main:
            append_lines(self.work / "units.jsonl", [{"unit": unit, "value": value, "seconds": 0.0,
                                                      "reused_from": str(self.reuse)} for unit, value in new.items()])
        for unit, value in new.items():
            self.done[unit], self.seconds[unit] = value, 0.0
            self.carried.add(unit)

    def fits(self) -> dict[str, tuple[Arm, int]]:
        """The learning-rate choice's fits, before the reported seeds: as far as the done ones decide them."""
        return tuning.tuning_units(self.chosen, self.quick, self.done)

    def by_run(self, pairs) -> Tasks:
        """The (arm, seed) pairs not done yet by the run they train; a unit shared by claims once."""
        tasks: Tasks = {}
        for arm, seed in pairs:
            if arm.unit(seed, self.quick) not in self.done:
                tasks.setdefault(arm.run_name(seed, self.quick), {})[arm.unit(seed, self.quick)] = (arm, seed)
        return tasks

    def todo(self, claims_: list[Claim]) -> Tasks:
        return self.by_run((arm, seed) for claim in claims_ for arm in claim.arms
                           for seed in range(claim.seeds(self.seeds, self.quick)))

    def tuned_claims(self) -> list[Claim]:
        return tuning.tuned(self.chosen, tuning.tuning_table(self.chosen, self.quick, self.done))

    def remaining_units(self) -> int:
        return sum(u not in self.done for u in self.fits()) + sum(len(t) for t in self.todo(self.tuned_claims()).values())

    def timings(self) -> Tasks:
        return {k: t for k, t in self.todo(self.chosen).items() if next(iter(t.values()))[0].kind == "efficiency"}

    def plan_reported_units(self) -> Tasks:
        """Plans the reported seeds once the rates are chosen, and returns the units left to compute. It sets
        the claims at their chosen rates (claims_now), takes over what an earlier document has of them, sets
        the progress total and each claim's units (claim_units), and counts the units in the document."""
        self.claims_now = self.tuned_claims()
        if self.previous is not None:
            self.take_over(reusable_units(self.previous, self.quick, self.redo, self.setting, self.claims_now))
        self.total = self.fresh + self.remaining_units()  # (the reported units at their rates: some are taken over)
        self.claim_units.update({c.key: {a.name: [a.unit(s, self.quick) for s in range(c.seeds(self.seeds, self.quick))]
                                         for a in c.arms} for c in self.claims_now})
        self.doc["units"] = len(self.used_units())
        return self.todo(self.claims_now)

    def used_units(self) -> set[str]:
        """The tuning fits and the reported units the claims use (those known once the rates are chosen)."""
        return {*self.fits(), *(u for arms in self.claim_units.values() for us in arms.values() for u in us)}

    def record(self, results: list[tuple[str, dict, float]]) -> None:
        """Units computed: kept by every rank (the rates are chosen from them); rank 0 appends them to the
        work folder, writes each claim whose last unit is in, and the document after every task (a stopped
        run still shows)."""
        for unit, value, took in results:
            self.done[unit], self.seconds[unit] = value, took
        if not self.proc.main:
            return
        append_lines(self.work / "units.jsonl", [{"unit": u, "value": v, "seconds": took} for u, v, took in results])
        for unit, _, _ in results:
            self.fresh += 1
            if self.launch.progress:
                (name, *_), seed = json.loads(unit)[:2]
                self.launch.progress(f"{name}, seed {seed}", self.total)
        self._write_finished_claims()
        self._update_document()
        write_text_atomic(self.out / "results.json", json.dumps(self.doc, indent=2))

    def _write_finished_claims(self) -> None:
        for claim in self.claims_now:
            units = self.claim_units.get(claim.key, {})
            if units and claim.key not in self.written and all(u in self.done for us in units.values() for u in us):
                values = {arm: [self.done[u] for u in us] for arm, us in units.items()}
                self.written[claim.key] = claim_record(claim, values, claim.seeds(self.seeds, self.quick),
                                                       self.doc["sanity"], self.setting)
                write_csv(self.out / f"{claim.key}.csv", self.written[claim.key])

    def _update_document(self) -> None:
        doc = self.doc
        doc["claims"] = [self.written[c.key] for c in self.chosen if c.key in self.written]
        if self.tuned_here:
            doc["tuning"] = tuning.tuning_table(self.chosen, self.quick, self.done)
        this_call = {"command": self.launch.command, "wall_seconds": round(time.perf_counter() - self.t0, 1),
                     "units_computed": self.fresh, "workers": self.launch.workers,
                     "launcher": "slurm" if self.launch.slurm else "local",
                     **({"ranks_per_unit": self.launch.slurm.ranks} if self.launch.slurm else {}),
                     **({"processes": self.proc.world} if self.proc.distributed else {})}
        calls = [*self.earlier_calls, this_call]
        counted = self.used_units()
        doc.update(wall_seconds=this_call["wall_seconds"], calls=calls,
                   wall_seconds_all_calls=round(sum(c["wall_seconds"] for c in calls), 1),
                   compute_seconds=round(sum(self.seconds.get(u, 0.0) for u in counted), 1),  # every call, all workers
                   units_computed_in_this_call=self.fresh,  # the rest were resumed from the work folder
                   reused_units=len(self.carried & counted),  # of the units used, those taken over from an earlier
                   # results.json (compute not counted again: that document's record is kept under reused_from)
                   **({"reused_from": compute_record(self.previous)} if self.previous and self.carried & counted else {}),
                   complete=len(self.written) == len(self.chosen),
                   not_run=[c.key for c in self.known if c.key not in self.written])

    def compute(self, tasks: Tasks) -> None:
        """Run the tasks: under torchrun the training ones on every rank together (DDP), then rank 0 alone
        the rest; efficiency units timed first, alone, before any training competes for the cores (under Slurm
        as jobs of their own, on compute nodes); the rest as Slurm jobs, in `workers` processes, or here."""
        if self.proc.distributed:
            for key in [k for k, t in tasks.items() if next(iter(t.values()))[0].trains]:
                self.record(run_task(list(tasks.pop(key).values()), self.quick, self.work, self.setting))
            if not self.proc.main:
                return
        timed = [tasks.pop(k) for k in [k for k, t in tasks.items() if next(iter(t.values()))[0].kind == "efficiency"]]
        # under Slurm timed on a compute node like any unit, not on the submitting machine; here one at a time
        for results in (self._results(timed) if self.launch.slurm is not None else
                        (run_task(list(t.values()), self.quick, self.work, self.setting) for t in timed)):
            self.record(results)
        for results in self._results(list(tasks.values())):
            self.record(results)

    def _results(self, tasks: list[dict[str, tuple[Arm, int]]]):
        """Each task's results as it finishes: Slurm job-array elements, worker processes, or one by one here."""
        if self.launch.slurm is not None and tasks:
            yield from run_tasks([list(t.values()) for t in tasks], self.quick, self.work, self.setting,
                                 self.launch.slurm)
        elif self.launch.workers > 1 and len(tasks) > 1:
            with workers_die_with_this_process(), ProcessPoolExecutor(
                    self.launch.workers, mp_context=multiprocessing.get_context("spawn"),
                    initializer=_start_worker) as pool:
                for future in as_completed([pool.submit(run_task, list(t.values()), self.quick, self.work,
                                                        self.setting) for t in tasks]):
                    yield future.result()
        else:
            for task in tasks:
                yield run_task(list(task.values()), self.quick, self.work, self.setting)


def _start_worker() -> None:
    """One thread per worker (that it dies with the command, damcha.runs.workers saw to at import)."""
    torch.set_num_threads(1)
