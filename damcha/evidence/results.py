"""A claim's results: per-arm means and intervals, comparisons, verdicts; the files they are kept in."""

from __future__ import annotations

import csv
import errno
import io
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from damcha.evidence.efficiency import EFFICIENCY_BESIDE
from damcha.evidence.records import Arm, Claim, ConstructionCheck
from damcha.evidence.sanity import failed_checks
from damcha.evidence.statistics import (
    BY_CONSTRUCTION,
    CHECK_CONFIRMED,
    CONFIRMED,
    FAILS,
    FAMILY_ALPHA,
    HOLDS,
    LEARNED,
    NOT_CONFIRMED,
    SANITY_FAILED,
    claim_verdict,
    construction_outcome,
    holm_adjusted,
    mean_interval,
    paired_test,
    reading,
    seeds_to_detect,
    verdict,
)
from damcha.inputs.synthetic import SYNTHETIC_MODELS
from damcha.runs.checkpoints import write_text_atomic


def metric_values(claim: Claim, values: dict[str, list[dict]], metric: str) -> dict[str, list[float]]:
    """arm -> per-seed values of one metric (a constant arm has its level for every metric the claim compares,
    and nothing for the others: a threshold has no parameters or learning rate)."""
    level = math.nan if metric not in (claim.metric, *claim.compared) else None
    return {arm: [row.get(metric, row.get("constant", math.nan) if level is None else level) for row in rows]
            for arm, rows in values.items()}


RATIO_METRICS = ("params_ratio", "flops_ratio", "time_ratio", "memory_ratio", "relative_mse", *EFFICIENCY_BESIDE)


def _on_scale(claim: Claim, metric: str, values) -> np.ndarray:
    v = np.asarray(values, dtype=float)
    return np.log(v) if metric in RATIO_METRICS else v


def _interval(claim: Claim, metric: str, values) -> tuple[float, float, float]:
    """Mean and interval of one arm's values: geometric for ratio metrics, arithmetic otherwise."""
    m, lo, hi = mean_interval(_on_scale(claim, metric, values))
    if metric in RATIO_METRICS:
        return math.exp(m), math.exp(lo) if lo == lo else lo, math.exp(hi) if hi == hi else hi
    return m, lo, hi


def _against_trivial_baselines(claim: Claim, values: dict[str, list[dict]]) -> dict[str, tuple]:
    """metric -> (best trivial baseline, its mean, the models no better than it, the best model, every
    arm's mean) for each compared metric with a trivial baseline."""
    baselines = [a.name for a in claim.arms if a.kind == "baseline"]
    models = [a.name for a in claim.arms if a.kind not in ("baseline", "constant")]
    best_of = min if claim.lower_is_better else max
    found = {}
    for metric in claim.compared:
        means = {arm: float(np.mean(vs)) for arm, vs in metric_values(claim, values, metric).items()}
        trivial = [(means[b], b) for b in baselines if not math.isnan(means[b])]  # a baseline has no NLL
        if trivial and models:
            best_value, best = best_of(trivial)
            worse = [m for m in models if best_of(means[m], best_value) == best_value]
            found[metric] = (best, best_value, worse, best_of(models, key=lambda m: means[m]), means)
    return found


def trivial_baseline_warnings(against: dict[str, tuple]) -> list[str]:
    """One sentence per compared metric on which no model's mean beats the best trivial baseline (its
    comparisons leave the counted family), or else naming the models that are worse than it."""
    lines = []
    for metric, (best, best_value, worse, top, means) in against.items():
        if top in worse:
            lines.append(f"No model beats the trivial baseline on {metric}: {best} {best_value:.4g}, the best model "
                         f"({top}) {means[top]:.4g}; a verdict on {metric} says little about attention, so its "
                         "comparisons are reported, not counted.")
        elif worse:
            lines.append(f"Worse than the trivial baseline on {metric} ({best} {best_value:.4g}): "
                         + ", ".join(f"{m} {means[m]:.4g}" for m in worse)
                         + "; a comparison with these is one with models that miss a fill that needs no model.")
    return lines


def _comparison(claim: Claim, metric: str, by_arm: dict[str, list[float]], better: str, than: str) -> dict:
    """`better` against `than`, paired by seed, in the paper's direction (log ratios for ratio metrics)."""
    sign = -1.0 if claim.lower_is_better else 1.0
    gains = sign * (_on_scale(claim, metric, by_arm[better]) - _on_scale(claim, metric, by_arm[than]))
    v, m, lo, hi = verdict(gains)
    test = paired_test(gains)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = float(np.exp(np.mean(np.log(np.asarray(by_arm[better], float) / np.asarray(by_arm[than], float)))))
    return {"metric": metric, "better": better, "than": than, "gain": m, "low": lo, "high": hi,
            "scale": "log ratio" if metric in RATIO_METRICS else "difference", "ratio": ratio,
            "p": test["p"], "sd": test["sd"], "mdd": test["mdd"], "n": test["n"], "verdict": v}


def _papers_effect(claim: Claim, comparison: dict) -> dict:
    """The paper's own difference between the two arms, on the comparison's scale and in the paper's
    direction, and the seeds our spread would need to find it with 80% power (where the paper gives both)."""
    better, than = (claim.paper.get(comparison["better"]), claim.paper.get(comparison["than"]))
    if comparison["metric"] != claim.metric or better is None or than is None:
        return {}
    sign = -1.0 if claim.lower_is_better else 1.0
    gain = float(sign * (_on_scale(claim, claim.metric, [better]) - _on_scale(claim, claim.metric, [than]))[0])
    return {"paper_gain": gain, "seeds_for_paper_gain": seeds_to_detect(gain, comparison["sd"])}


UNREPRESENTED = ("neither arm can represent the task here: the comparison measures how each approximates it, "
                 "not what the claim is about")


def representability_checks(claim: Claim) -> tuple[ConstructionCheck, ...]:
    """The comparisons the claim would count whose outcome its declared representability fixes (only one
    arm can represent the task there), as construction checks, whichever side they favour; those the
    claim declares itself are kept as declared."""
    declared = {(c.better, c.than) for c in claim.construction_checks}
    groups = claim.groups or ((claim.reference, *(a.name for a in claim.arms if a.name != claim.reference)),)
    checks = []
    for ref, *others in groups:
        for other in others:
            fixed = claim.representability(ref, other)
            counted = claim.counts(other) and ref not in claim.controls and other not in claim.controls
            if fixed in ("ahead", "behind") and counted and (ref, other) not in declared:
                able, unable = (ref, other) if fixed == "ahead" else (other, ref)
                checks.append(ConstructionCheck(ref, other, fixed, f"{able} can represent the task here and {unable} "
                                                "cannot: what the arms can represent fixes the outcome, whichever side "
                                                "it favours."))
    return tuple(checks)


def _construction_checks(claim: Claim, comparisons: list[dict]) -> list[dict]:
    """Mark the comparisons the claim's construction checks name (declared, and those its representability
    fixes) as checks, never counted, and return each check's prediction, outcome and reason."""
    checks, seen = [], set()
    for check in (*claim.construction_checks, *representability_checks(claim)):
        for c in comparisons:
            if (c["better"], c["than"]) != (check.better, check.than):
                continue
            if (c["metric"], c["better"], c["than"]) in seen:  # also a reported pair: checked once
                c.update(counted=False, construction=check.predicted)
                continue
            seen.add((c["metric"], c["better"], c["than"]))
            outcome, p = construction_outcome(c, check.predicted, check.margin)
            c.update(counted=False, construction=check.predicted, construction_outcome=outcome)
            checks.append({"metric": c["metric"], "better": check.better, "than": check.than,
                           "predicted": check.predicted, "margin": check.margin, "outcome": outcome, "p": p,
                           "gain": c["gain"], "low": c["low"], "high": c["high"], "why": check.why})
    return checks


def _measured(values: list[float]) -> bool:
    return not np.isnan(np.asarray(values, float)).all()  # a baseline has no NLL


def summarise(claim: Claim, values: dict[str, list[dict]], checks: dict[str, float] | None = None) -> dict:
    """Per-arm means and intervals, comparisons with the reference (or within groups) and the claim's
    reported pairs, verdicts. checks: the values of `sanity_checks`, for the claim's `requires`."""
    primary = metric_values(claim, values, claim.metric)
    summary: list[dict[str, Any]] = []
    details: list[dict[str, Any]] = []
    for arm in claim.arms:
        m, lo, hi = _interval(claim, claim.metric, primary[arm.name])
        summary.append({"arm": arm.name, "mean": m, "low": lo, "high": hi, "n": len(primary[arm.name]),
                        "paper": claim.paper.get(arm.name), "control": arm.name in claim.controls})
    for metric in (claim.metric, *claim.columns):
        for name, vs in metric_values(claim, values, metric).items():
            m, lo, hi = _interval(claim, metric, vs)
            details.append({"arm": name, "metric": metric, "mean": m, "low": lo, "high": hi})
    against = _against_trivial_baselines(claim, values)
    unbeaten = {metric for metric, (_, _, worse, top, _) in against.items() if top in worse}
    failed = failed_controls(claim, {r["arm"]: r["mean"] for r in summary}, primary)
    comparisons = _comparisons(claim, values, unbeaten, failed)
    for c in comparisons:
        c.update(_papers_effect(claim, c))
    construction = _construction_checks(claim, comparisons)
    counted = [c for c in comparisons if c["counted"]]
    for c, adjusted in zip(counted, holm_adjusted([c["p"] for c in counted])):
        c.update(holm_rejected=adjusted <= FAMILY_ALPHA, holm_p=adjusted)
        c["reads"] = reading(c)
    verdict_, kind = claim_verdict(counted), BY_CONSTRUCTION if claim.by_construction else LEARNED
    if construction and not counted:  # every comparison the claim would count is fixed in advance
        verdict_ = CONFIRMED if all(c["outcome"] in CHECK_CONFIRMED for c in construction) else NOT_CONFIRMED
        kind = BY_CONSTRUCTION
    result = {"summary": summary, "details": details, "comparisons": comparisons, "families": _families(claim, comparisons),
              "verdict": verdict_,
              "verdict_kind": kind, "construction_checks": construction,  # kinds apart in every tally
              "by_construction": claim.by_construction, "trivial_baselines": trivial_baseline_warnings(against),
              "sanity_failures": [], "sanity_caveats": [], "failed_controls": list(failed.values()),
              "decided_by": deciding_comparisons(claim, counted, verdict_), **_papers_comparisons_alone(claim, counted)}
    if claim.sanity:  # the task must be learnable where it is easiest before its numbers are believed
        means = {r["arm"]: r["mean"] for r in summary}
        result["sanity_failures"] = claim.sanity.misses(means, claim.sanity.arms)
        result["sanity_caveats"] = claim.sanity.misses(means, claim.sanity.also, primary)
        result["sanity_seeds_short"] = claim.sanity.some_seeds_short(means, primary)
    result["sanity_failures"] += failed_checks(checks or {}, claim.requires)
    if result["sanity_failures"]:
        result["verdict"] = SANITY_FAILED
    return result


def failed_controls(claim: Claim, means: dict[str, float], per_seed: dict[str, list[float]]) -> dict[str, str]:
    """matched arm -> why it failed as a control: it misses the claim's sanity bound at the easiest level, which
    the instruments (the unmatched arms it widens) reach there. A control that does not learn what the model it
    widens learns measures its own training, not capacity: its comparisons are reported, never counted (nor are
    those of its other levels: the same configuration). Claims without a sanity bound (the real data sets) have
    no such check."""
    sanity = claim.sanity
    if sanity is None or not all(sanity.reached(means[a]) for a in sanity.arms if a in means):
        return {}
    variant = {a.name: a.variant for a in claim.arms}
    missed = [a for a in claim.matched_arms if a in sanity.also and a in means and not sanity.reached(means[a])]
    why = {variant[a]: f"A failed control: {'; '.join(sanity.misses(means, (a,), per_seed))} at the easiest level, "
                       f"which {', '.join(sanity.arms)} (the model it widens) reaches: reported, not counted"
           for a in missed}
    return {a: why[variant[a]] for a in claim.matched_arms if variant[a] in why}


def deciding_comparisons(claim: Claim, counted: list[dict], verdict_: str) -> list[dict]:
    """The counted comparisons that decided the verdict, each with who made it (the paper, or this project as a
    control: Claim.added_as): "does not hold", those against the paper that Holm rejects; "inconclusive",
    those that do not hold; "holds", every one (each had to)."""
    if verdict_ == FAILS:
        deciding = [c for c in counted if c.get("holm_rejected") and c["gain"] < 0]
    elif verdict_ == HOLDS:
        deciding = counted
    else:
        deciding = [c for c in counted if c["verdict"] != HOLDS]
    return [{"metric": c["metric"], "better": c["better"], "than": c["than"], "reads": c.get("reads", ""),
             "holm_p": c.get("holm_p"), "added_as": claim.added_as(c["than"])} for c in deciding]


def _papers_comparisons_alone(claim: Claim, counted: list[dict]) -> dict:
    """Where the counted comparisons mix the paper's with ones this project added: the verdict of the paper's
    alone, each worded under Holm over those alone, so a verdict decided by an added control is not read as one
    on the paper's comparisons."""
    papers = [c for c in counted if not claim.added_as(c["than"])]
    if not papers or len(papers) == len(counted):
        return {}
    reads = [reading({**c, "holm_p": adjusted}) for c, adjusted in zip(papers, holm_adjusted([c["p"] for c in papers]))]
    return {"papers_comparisons": {"verdict": claim_verdict(papers), "counted": len(papers),
                                   "reads": [f"{c['than']} ({c['metric']}): {r}" for c, r in zip(papers, reads)]}}


def matched_versions(claim: Claim) -> dict[str, str]:
    """arm -> the matched arm (Claim.matched_arms) that is the same model at the reference's parameter count: the
    same variant (a synthetic model's own: the matched MHA widens MHA), data set and level."""
    def model(arm: Arm) -> tuple:
        variant = SYNTHETIC_MODELS[arm.variant].variant if arm.variant in SYNTHETIC_MODELS else arm.variant
        return variant, arm.dataset, arm.task, arm.level

    matched = {model(a): a.name for a in claim.arms if a.name in claim.matched_arms}
    return {a.name: matched[model(a)] for a in claim.arms if a.name not in claim.matched_arms and model(a) in matched}


def robustness(claim: Claim, values: dict[str, list[dict]], checks: dict[str, float] | None = None) -> dict:
    """How the verdict stands with each seed left out in turn (three seeds or more), and with the claim's
    stand-in (DAMCHA with f from the identity) in the reference's place: each a verdict and what decided it."""
    seeds = max(len(rows) for rows in values.values())
    found: dict[str, Any] = {}
    if seeds >= 3:
        found["leave_one_out"] = [summarise(claim, {arm: [r for i, r in enumerate(rows) if i != left] if len(rows) == seeds
                                                    else rows for arm, rows in values.items()}, checks)["verdict"]
                                  for left in range(seeds)]
    if claim.stand_in in values:
        swapped = summarise(claim, {**values, claim.reference: values[claim.stand_in]}, checks)
        found["stand_in"] = {"arm": claim.stand_in, "verdict": swapped["verdict"], "decided_by": swapped["decided_by"]}
    return found


def _comparisons(claim: Claim, values: dict[str, list[dict]], unbeaten: set[str], failed: dict[str, str]) -> list[dict]:
    """Each compared metric's comparisons: within each group (its first arm the reference), counted unless
    a control, a failed control (`failed`: arm -> why) or a metric no arm beats the trivial baseline on, and
    the claim's reported pairs (never counted)."""
    groups = claim.groups or ((claim.reference, *(a.name for a in claim.arms if a.name != claim.reference)),)
    comparisons = []
    for metric in claim.compared:
        by_arm = metric_values(claim, values, metric)
        for ref, *others in groups:
            for other in others:
                if not _measured(by_arm[other]) or not _measured(by_arm[ref]):
                    continue
                control = ref in claim.controls or other in claim.controls
                fixed = claim.representability(ref, other)
                broken = failed.get(other) or failed.get(ref)
                comparisons.append({**_comparison(claim, metric, by_arm, ref, other), "control": control,
                                    "counted": claim.counts(other) and not control and metric not in unbeaten
                                    and fixed is None and not broken,
                                    **({"not_counted": UNREPRESENTED} if fixed == "neither" else {}),
                                    **({"failed_control": broken} if broken else {})})
        for better, than, measures in claim.pairs:
            comparisons.append({**_comparison(claim, metric, by_arm, better, than), "control": True, "counted": False,
                                "measures": measures,
                                **({"not_counted": UNREPRESENTED} if claim.representability(better, than) == "neither"
                                   else {})})
    return comparisons


def _families(claim: Claim, comparisons: list[dict]) -> list[dict]:
    """Each of the claim's families: its comparisons of the reference (not counted, not contrasts) worded
    under Holm over the family, and one row per metric naming the arms the reference is ahead of, behind
    and within noise of."""
    variant = {a.name: a.variant for a in claim.arms}
    rows = []
    for label, variants in claim.families:
        members = [c for c in comparisons if not c["counted"] and not c.get("measures") and
                   c["better"] == claim.reference and variant.get(c["than"]) in variants]
        for c, adjusted in zip(members, holm_adjusted([c["p"] for c in members])):
            c.update(family=label, family_holm_p=adjusted, reads=reading({**c, "holm_p": adjusted}))
        for metric in claim.compared:
            said = [(c["than"], c["reads"]) for c in members if c["metric"] == metric]
            rows.append({"against": label, "metric": metric,
                         **{side: ", ".join(arm for arm, reads in said if reads.split(" (")[0] == side) or "—"
                            for side in ("ahead", "behind", "within noise")},
                         "nominally": ", ".join(f"{arm}: {reads}" for arm, reads in said
                                                if reads.startswith("nominally")) or "—"})
    return rows


CSV_SECTIONS = ("arm,seed,metric,value", "arm,metric,mean,low,high", "arm,paper",
                "metric,better,than,scale,gain,low,high,ratio,p,holm_rejected,mdd,sd,n,counted,verdict")


def write_csv(path: Path, result: dict) -> None:
    """A claim's values, intervals, the paper's numbers and its comparisons: four tables, each under its header
    line and separated by an empty line, written by the csv module (an arm named with a comma is quoted)."""
    sections = [
        [[arm, s, k, v] for arm, rows in result["values"].items() for s, row in enumerate(rows) for k, v in row.items()],
        [[r["arm"], r["metric"], r["mean"], r["low"], r["high"]] for r in result["details"]],
        [[r["arm"], r["paper"]] for r in result["summary"] if r["paper"] is not None],
        [[c["metric"], c["better"], c["than"], c["scale"], c["gain"], c["low"], c["high"], c["ratio"], c["p"],
          c.get("holm_rejected", ""), c["mdd"], c["sd"], c["n"], c["counted"], c["verdict"]] for c in result["comparisons"]],
    ]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    for i, (header, rows) in enumerate(zip(CSV_SECTIONS, sections, strict=True)):
        if i:
            writer.writerow([])
        writer.writerow(header.split(","))
        writer.writerows(rows)
    write_text_atomic(path, buffer.getvalue())


def compute_record(doc: dict) -> dict:
    """What an earlier results document records of the calls that computed it (its own earlier documents
    included), kept in a document that takes its units over so their measured cost, and the machine they ran
    on, are not lost."""
    return {k: doc[k] for k in ("command", "units", "wall_seconds_all_calls", "compute_seconds", "machine", "reused_from")
            if k in doc}


def wall_seconds_of_every_call(doc: dict) -> float:
    """Wall time of every call that computed a results document's units, through the documents it reused."""
    earlier = doc.get("reused_from")
    return doc.get("wall_seconds_all_calls", doc.get("wall_seconds", 0.0)) + (
        wall_seconds_of_every_call(earlier) if earlier else 0.0)


def compute_seconds_of_every_call(doc: dict) -> float:
    """Compute (seconds summed over workers) of every call that computed a results document's units, through
    the documents it reused."""
    earlier = doc.get("reused_from")
    return doc.get("compute_seconds", 0.0) + (compute_seconds_of_every_call(earlier) if earlier else 0.0)


def append_lines(path: Path, rows: list[dict]) -> None:
    """Append `rows` to a JSON-lines file one whole line at a time. When the disk fills, the line being
    written is cut off again, so the file keeps only whole lines (the ones before it), and the error
    names the file and the disk."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        for row in rows:
            end, line = os.lseek(fd, 0, os.SEEK_END), (json.dumps(row) + "\n").encode()
            try:
                written = 0
                while written < len(line):
                    written += os.write(fd, line[written:])
            except OSError as e:
                os.ftruncate(fd, end)
                if e.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise OSError(e.errno, f"cannot write {path}: no space left on the disk that holds "
                                           f"{path.parent.resolve()}; the lines before it are kept: make room and "
                                           "rerun the same command to go on from them") from None
                raise
    finally:
        os.close(fd)
