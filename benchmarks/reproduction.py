"""How far stored evidence units move when recomputed on this machine: the cross-machine spread.

    .venv/bin/python benchmarks/reproduction.py [--results checkpoints/evidence/results.json]
        [--units 12] [--work DIR] [--json benchmarks/results/reproduction.json]

Takes a sample of the units a results document stores (its first seed of the first arms of each claim
that train a model, alternating real-data runs and synthetic fits), recomputes each here with the current
code, and compares value for value: a real-data unit's every metric; a synthetic unit's test score at its
tuned rate (a document from before the synthetic tuning: its every fit at the rates the unit tried, validation
score, and the chosen fit's test score, without the ladder, so the fits compared are the same fits). Prints and writes the relative differences with the machine of each
side (results.json's `machine`, this one's), and how many values came out identical to the last bit.
A benchmark, not a test: it measures this machine against another one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import torch  # noqa: E402

from damcha.evidence import tuning  # noqa: E402
from damcha.evidence.catalogue.common import synthetic_steps  # noqa: E402
from damcha.evidence.runner import cpu_model, evidence_claims  # noqa: E402
from damcha.evidence.synthetic_fits import rates_tried, stored_value  # noqa: E402
from damcha.evidence.units import run_unit  # noqa: E402
from damcha.inputs.synthetic import train_synthetic  # noqa: E402


def sample(doc: dict, units: int) -> list[tuple[str, object, dict]]:
    """(claim key, arm, stored value at seed 0): real-data and synthetic units in turn, each of a claim and
    a variant not sampled yet where one is left, never a run sampled already."""
    claims = {c.key: c for c in tuning.tuned(evidence_claims(False), doc.get("tuning", []))}
    queues = {"train": [], "synthetic": []}
    for stored in doc["claims"]:
        claim = claims.get(stored["key"])
        for arm in claim.arms if claim else ():
            rows = stored["values"].get(arm.name)
            if arm.kind in queues and rows and not arm.tuning:
                if arm.kind == "train" and arm.lr != stored["learning_rates"].get(arm.name):
                    raise SystemExit(f"{stored['key']}: {arm.name} would train at {arm.lr:g}, the document's at "
                                     f"{stored['learning_rates'].get(arm.name)}: not the unit it stores")
                queues[arm.kind].append((stored["key"], arm, rows[0]))
    picked: list[tuple[str, object, dict]] = []
    for kind in ("train", "synthetic") * units:
        runs = {p[1].run_name(0, False) for p in picked}
        queue = [q for q in queues[kind] if q[1].run_name(0, False) not in runs]
        if len(picked) == units or not queue:
            continue
        claims_in, variants_in = {p[0] for p in picked}, {p[1].variant for p in picked}
        picked.append(min(queue, key=lambda q: (q[0] in claims_in, q[1].variant in variants_in)))
    return picked


def recompute(arm, stored: dict, work: Path) -> tuple[dict[str, float], bool]:
    """This machine's value of what `stored` holds (a synthetic unit: its fits at the stored rates, and
    the chosen fit's test score where this machine chose the same rate), and whether it chose the same."""
    if arm.kind != "synthetic":
        return run_unit(arm, 0, False, work), True
    rates = tuple(sorted(rates_tried(stored))) or (stored["lr"],)  # (a tuned unit stores its one rate)
    result = train_synthetic(arm.variant, arm.task, arm.level, 0, synthetic_steps(False), lrs=rates)
    same = result.lr == stored.get("lr", result.lr)
    here = stored_value(result)
    return {k: v for k, v in here.items() if same or k != result.metric}, same


def compared(stored: dict, here: dict) -> list[dict]:
    rows = []
    for key, value in here.items():
        if key in stored and isinstance(value, float) and key not in ("lr", "parameters"):
            before = float(stored[key])
            rows.append({"metric": key, "stored": before, "here": value, "identical": before == value,
                         "relative_difference": abs(value - before) / max(abs(before), 1e-12)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--results", type=Path, default=ROOT / "checkpoints" / "evidence" / "results.json")
    parser.add_argument("--units", type=int, default=12)
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "reproduction.json")
    args = parser.parse_args()
    torch.set_num_threads(1)  # as every evidence unit runs
    doc = json.loads(args.results.read_text())
    work = args.work or Path(tempfile.mkdtemp(prefix="reproduction-"))
    units = []
    for key, arm, stored in sample(doc, args.units):
        t0 = time.perf_counter()
        here, same_choice = recompute(arm, stored, work)
        rows = compared(stored, here)
        units.append({"claim": key, "arm": arm.name, "kind": arm.kind, "seed": 0, "values": rows,
                      "same_rate_chosen": same_choice,
                      "seconds": round(time.perf_counter() - t0, 1)})
        worst = max((r["relative_difference"] for r in rows), default=0.0)
        print(f"{key:28s} {arm.name:34s} {len(rows):3d} values, {sum(r['identical'] for r in rows):3d} identical, "
              f"largest relative difference {worst:.2e}", flush=True)
    values = [r for u in units for r in u["values"]]
    summary = {kind: {"units": sum(u["kind"] == kind for u in units),
                      "values": len(vs := [r for u in units if u["kind"] == kind for r in u["values"]]),
                      "identical": sum(r["identical"] for r in vs),
                      "median_relative_difference": statistics.median(r["relative_difference"] for r in vs) if vs else None,
                      "largest_relative_difference": max((r["relative_difference"] for r in vs), default=None)}
               for kind in ("train", "synthetic")}
    report = {"stored_on": doc.get("machine"), "recomputed_on": {"cpu": cpu_model(),
                                                                   "cpu_kernels": torch.backends.cpu.get_cpu_capability()},
              "versions": {"stored": doc.get("versions"), "here": {"torch": torch.__version__}},
              "results": str(args.results), "summary": summary, "values_compared": len(values), "units": units}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
