"""What the Evidence page shows of one claim of the stored evidence (`damcha evidence`'s
results.json): named figures (the arms' means with their intervals, the differences the verdict
counts, the contrasts reported beside it), the arms' table and what the seeds could detect.
A figure's provenance names the results folder and the claim, so `regenerate` redraws it from the file
(and every other named figure through damcha.views.regeneration)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import plotly.graph_objects as go

from damcha.evidence.catalogue.common import PAPER_RESULTS_NOT_CLAIMED
from damcha.evidence.documents import EvidenceFileError, load_results
from damcha.evidence.results import RATIO_METRICS, compute_seconds_of_every_call
from damcha.evidence.sanity import SANITY_BOUNDS
from damcha.evidence.scales import SCALES
from damcha.evidence.statistics import (
    BY_CONSTRUCTION,
    CONFIRMED,
    FAILS,
    HOLDS,
    NO_VERDICT,
    NOT_CONFIRMED,
    SANITY_FAILED,
)
from damcha.evidence.tuning import LADDER, row_scores
from damcha.views import figures
from damcha.views.export import ExportItem, Provenance, library_params, run_name_in
from damcha.views.regeneration import regenerate as regenerate_named
from damcha.views.regeneration import resolved


@dataclass(frozen=True)
class EvidenceFigure:
    """missing(claim): why the claim has nothing to draw (None when it has); draw(claim) the figure.
    A claim is one entry of results.json's "claims"."""

    name: str
    missing: Callable[[dict], str | None]
    draw: Callable[[dict], go.Figure]


def _counted(claim: dict) -> list[dict]:
    return [c for c in claim["comparisons"] if c.get("counted", True)]


def _contrasts(claim: dict) -> list[dict]:
    return [c for c in claim["comparisons"] if c.get("measures")]


# The unit of each loss-like metric the evidence stores, said wherever its numbers are drawn (the
# evidence is computed in the library's units: a model's NLL in nats per token of its data set).
METRIC_UNITS = {"val_nll": "nats per token", "gap_nats": "nats per token", "val_bits_per_char": "bits per char",
                "val_mse": "squared error per patch", "val_completion_mse": "squared error per pixel or patch",
                "relative_mse": "ratio"}


# Drawn in the app's unit: an NLL stored in nats per token is shown in bits per token (numbers / ln 2), as every
# other page shows losses; the stored results and the CSVs keep nats.
SHOWN_IN_BITS = {"val_nll": "bits per token", "gap_nats": "bits per token"}


def shown_factor(metric: str) -> float:
    return 1 / math.log(2) if metric in SHOWN_IN_BITS else 1.0


def drawn_unit(metric: str, default: str | None = None) -> str | None:
    """The unit a metric is drawn in (bits for an NLL stored in nats), or `default` where it has none."""
    return SHOWN_IN_BITS.get(metric, METRIC_UNITS.get(metric, default))


def metric_label(metric: str) -> str:
    """The metric's name with the unit it is drawn in, where it has one."""
    unit = drawn_unit(metric)
    return f"{metric} ({unit})" if unit else metric


def difference_label(rows: list[dict]) -> str:
    """The axis of a set of differences: log ratios for ratio metrics, else differences in the drawn unit."""
    kinds = {"log ratio" if c.get("scale") == "log ratio" else
             f"difference ({drawn_unit(c['metric'], 'the metric')})" for c in rows}
    return " / ".join(sorted(kinds)) if kinds else "difference"


def _scaled(rows: list[dict], key: str, metric_of) -> list[float | None]:
    return [None if r.get(key) is None else r[key] * shown_factor(metric_of(r)) for r in rows]


def _summary(claim):
    rows = claim["summary"]
    better = "lower" if claim["lower_is_better"] else "higher"
    label = metric_label(claim["metric"])
    of = lambda r: claim["metric"]
    return figures.interval_figure([r["arm"] for r in rows], _scaled(rows, "mean", of), _scaled(rows, "low", of),
                                   _scaled(rows, "high", of), f"{label}, {better} is better: mean over seeds with 95% "
                                   "interval", label, _scaled(rows, "paper", of),
                                   log_scale=claim["metric"] in RATIO_METRICS)


def _differences(claim):
    rows = _counted(claim)
    of = lambda c: c["metric"]
    return figures.interval_figure([f"{c['metric']}: {c['better']} vs {c['than']}" for c in rows],
                                   _scaled(rows, "gain", of), _scaled(rows, "low", of), _scaled(rows, "high", of),
                                   "The verdict's differences, in the paper's direction (right of 0: as the paper claims), "
                                   "95% interval", difference_label(rows), zero_line=True, horizontal=True)


def _contrasts_figure(claim):
    rows = _contrasts(claim)
    of = lambda c: c["metric"]
    return figures.interval_figure([f"{c['measures']}: {c['better']} vs {c['than']}" for c in rows],
                                   _scaled(rows, "gain", of), _scaled(rows, "low", of), _scaled(rows, "high", of),
                                   "Reported, not counted: the contrasts between the other arms (right of 0: the first is "
                                   "better), 95% interval", difference_label(rows), zero_line=True, horizontal=True)


EVIDENCE_FIGURES = {f.name: f for f in (
    EvidenceFigure("evidence_summary", lambda claim: None if claim["summary"] else "no arm has results", _summary),
    EvidenceFigure("evidence_differences", lambda claim: None if _counted(claim) else "no counted comparison",
                   _differences),
    EvidenceFigure("evidence_contrasts", lambda claim: None if _contrasts(claim) else "no reported contrast",
                   _contrasts_figure),
)}


def evidence_figures(claim: dict) -> list[tuple[str, go.Figure]]:
    """Every evidence figure that applies to the claim, in the table's order: (name, figure)."""
    return [(name, f.draw(claim)) for name, f in EVIDENCE_FIGURES.items() if f.missing(claim) is None]


def arm_table(claim: dict) -> list[dict]:
    """One row per arm: the paper's number, its parameter count where it trains a model on a data set,
    then the claim's metric and each reported column as "mean [low, high]" (see interval_cell), each
    headed by its name and unit (metric_label)."""
    arms = [r["arm"] for r in claim["summary"]]
    def cell(metric: str, row: dict) -> str:
        k = shown_factor(metric)
        return figures.interval_cell(row["mean"] * k, row["low"] * k, row["high"] * k)

    cells = {(d["arm"], d["metric"]): cell(d["metric"], d) for d in claim.get("details", [])}
    if not cells:  # results written before the per-metric details
        cells = {(r["arm"], claim["metric"]): cell(claim["metric"], r) for r in claim["summary"]}
    k = shown_factor(claim["metric"])
    paper = {r["arm"]: None if r.get("paper") is None else r["paper"] * k for r in claim["summary"]}
    metrics = [claim["metric"], *claim.get("columns", [])]
    parameters, rates = claim.get("parameters", {}), claim.get("learning_rates", {})
    return [{"arm": arm, "paper": "—" if paper[arm] is None or paper[arm] != paper[arm] else f"{paper[arm]:.4g}",
             **({"parameters": f"{parameters[arm]:,}" if arm in parameters else "—"} if parameters else {}),
             **({"learning rate (tuned)": f"{rates[arm]:g}" if arm in rates else "—"} if rates else {}),
             **{metric_label(m): cells.get((arm, m), "—") for m in metrics}} for arm in arms]


def paper_beside(claim: dict) -> list[dict]:
    """One row per arm the paper gives a number for: the paper's number, ours on the test split (the claim's metric,
    evaluated once after the last epoch; mean and 95% interval over seeds) and ours minus the paper's. Empty where the
    claim has no test split (the demo's, whose paper numbers are another data set's, shown for scale only)."""
    metric = claim["metric"]
    tested = metric.replace("val_", "test_", 1)
    if not metric.startswith("val_") or tested not in claim.get("columns", []):
        return []
    ours = {d["arm"]: d for d in claim.get("details", []) if d["metric"] == tested}
    unit = drawn_unit(metric, "")
    rows = []
    for r in claim["summary"]:
        if r.get("paper") is None or r["paper"] != r["paper"] or r["arm"] not in ours:
            continue
        paper, d, k = r["paper"] * shown_factor(metric), ours[r["arm"]], shown_factor(tested)
        difference = d["mean"] * k - paper
        rows.append({"arm": r["arm"], f"paper{f' ({unit})' if unit else ''}": f"{paper:.4g}",
                     "ours, test split [95% interval]": figures.interval_cell(d["mean"] * k, d["low"] * k, d["high"] * k),
                     "ours − paper": f"{difference:+.4g} ({100 * difference / paper:+.1f}%)" if paper else f"{difference:+.4g}"})
    return rows


def tuning_rows(doc: dict) -> list[dict]:
    """One row per tuned configuration: what it chose by at each rate (a real-data run's hold-out loss, fitted on
    several tuning seeds: the mean, then each seed's; a synthetic configuration's validation score on the tuning
    seed) and the rate chosen, from a results document's `tuning` table."""
    def cell(scores: list[float]) -> str:
        if len(scores) == 1:
            return f"{scores[0]:.4f}"
        return f"{sum(scores) / len(scores):.4f} ({', '.join(f'{v:.4f}' for v in scores)})"
    return [{"run": row["run"], "scored by": f"validation {row['metric']}" if "metric" in row else "hold-out loss",
             **{f"at lr={lr}": cell(v) for lr, v in row_scores(row).items()},
             "chosen": f"{row['chosen']:g}"} for row in doc.get("tuning", [])]


def grid_edge_warning(doc: dict) -> str | None:
    """Which tuned configurations (real-data runs and synthetic models at a level) chose the top or bottom rate they
    tried short of the ladder's end: the best rate may lie beyond, so those arms may be under-tuned; and which
    chose an end of the ladder (a stated bound). None when every choice is inside the rates tried."""
    ends: dict[str, list[str]] = {"top": [], "bottom": []}
    bounds = []
    rows = doc.get("tuning", [])
    for row in rows:
        rates = sorted(float(lr) for lr in row_scores(row))
        if len(rates) > 1 and row["chosen"] in (rates[0], rates[-1]):
            said_row = f"{row['run']} ({row['chosen']:g})"
            if row["chosen"] in (LADDER[0], LADDER[-1]):  # tried up to the ladder's end: the stated bound
                bounds.append(said_row)
            else:
                ends["top" if row["chosen"] == rates[-1] else "bottom"].append(said_row)
    said = [f"the {end} rate: {', '.join(runs)}" for end, runs in ends.items() if runs]
    sizes = {len(row_scores(row)) for row in rows}
    under_tuned = (f"{sum(map(len, ends.values()))} of {len(rows)} tuned configurations chose the edge of the rates "
                   f"they tried{' (two rates have no inside)' if min(sizes, default=3) == 2 else ''}, {'; '.join(said)}. "
                   "A rate beyond the edge was not tried, so these arms may be under-tuned." if said else "")
    at_bound = (f"{len(bounds)} of {len(rows)} tuned configurations chose a bound of the tuning ladder, beyond "
                f"which no rate is tried ({LADDER[0]:g} and {LADDER[-1]:g}; a stated bound, not an edge left "
                f"untried): {', '.join(bounds)}." if bounds else "")
    return " ".join(filter(None, (under_tuned, at_bound))) or None


def rate_edges_sentence(doc: dict) -> str:
    """Where the chosen learning rates lie against the rates tried, for the docs: the page's warning, or that
    every choice lies inside (the real-data and the synthetic configurations counted)."""
    rows = doc.get("tuning", [])
    synthetic = sum("metric" in row for row in rows)
    return grid_edge_warning(doc) or (f"All {len(rows)} tuned configurations ({len(rows) - synthetic} real-data runs, "
                                      f"{synthetic} synthetic models at a level) chose a rate inside the rates they tried.")


def fresh_run_sentence(doc: dict, workers: int = 2) -> str:
    """What a run of these results from an empty work folder costs: measured, where one call computed every unit
    the results use (nothing taken over, nothing resumed); else estimated from the compute the document records of
    every call that made it (units recomputed by a later call are counted twice)."""
    calls = doc.get("calls", [])
    if calls and not doc.get("reused_from") and not doc.get("reused_units"):
        wall = sum(c["wall_seconds"] for c in calls)
        said = "One call from an empty work folder" if len(calls) == 1 else \
            f"{len(calls)} calls over one work folder, begun empty,"
        return (f"{said} computed every unit these results use ({doc.get('units', 0)} "
                f"units, nothing taken over): {wall:,.0f} s ({wall / 60:.0f} minutes) of wall time on "
                f"{max(c['workers'] for c in calls)} one-thread workers, {doc.get('compute_seconds', 0.0):,.0f} s of "
                "compute summed over them, measured" + ("." if len(calls) == 1 else
                                                        " (a call stopped by a kill records no time of its own)."))
    compute = compute_seconds_of_every_call(doc)
    earlier = compute - doc.get("compute_seconds", 0.0)
    last = (f"The last call's work folder computed {doc.get('units', 0) - doc.get('reused_units', 0)} of the "
            f"{doc.get('units', 0)} units these results use ({doc.get('compute_seconds', 0.0):,.0f} s of compute) and "
            f"took {doc.get('reused_units', 0)} over from an earlier document, whose calls record {earlier:,.0f} s. "
            if doc.get("reused_from") else "")
    return (f"{last}The calls that made these results spent {compute:,.0f} s of compute in all, so a run from an empty "
            f"work folder on {workers} one-thread workers needs at most about {compute / workers / 3600:.1f} hours of "
            "wall time on their machines (not measured: units a later call recomputed are counted twice, idle workers at "
            "the end not at all).")


def reproduction_sentence(report: dict) -> str:
    """What benchmarks/reproduction.py measured (a sample of stored units recomputed on another machine),
    in words with its numbers: the reported values (real-data metrics, synthetic test scores) apart from the
    synthetic fits' validation scores, which only choose the rate."""
    def side(machine: dict | None) -> str:
        return f"{machine.get('cpu') or 'a CPU not recorded'}, torch kernels {machine.get('cpu_kernels', '?')}" if machine else "?"

    def said(label: str, rows: list[dict]) -> str:
        if not rows:
            return ""
        worst = max(rows, key=lambda r: r["relative_difference"])
        return (f"{label}: {sum(r['identical'] for r in rows)} of {len(rows)} identical to the last bit, relative "
                f"difference median {statistics.median(r['relative_difference'] for r in rows):.1e} and largest "
                f"{worst['relative_difference']:.1e} ({worst['metric']} {worst['stored']:.4g} stored, {worst['here']:.4g} here)")
    rows = [(u, r) for u in report["units"] for r in u["values"]]
    parts = [said(f"{sum(u['kind'] == 'train' for u in report['units'])} real-data units, every metric",
                  [r for u, r in rows if u["kind"] == "train"]),
             said(f"{sum(u['kind'] == 'synthetic' for u in report['units'])} synthetic units, the test score",
                  [r for u, r in rows if u["kind"] == "synthetic" and not r["metric"].startswith("validation_")]),
             said("their fits' validation scores (which choose the rate)",
                  [r for u, r in rows if u["kind"] == "synthetic" and r["metric"].startswith("validation_")])]
    differing = [u for u in report["units"] if not u.get("same_rate_chosen", True)]
    chosen = (f"; {len(differing)} synthetic unit(s) chose another rate here" if differing else
              "; every recomputed unit chose the rate it had chosen")
    return (f"Stored units recomputed with the current code and the same torch and Python on this session's machine "
            f"({side(report['recomputed_on'])}; stored on {side(report['stored_on'])}): "
            + "; ".join(filter(None, parts)) + chosen + ".")


def detectable_sentence(claim: dict, not_counted_verdicts: tuple[str, ...]) -> str | None:
    """What the claim's seeds could detect (80% power, 5% two-sided, exact noncentral t) beside what was
    seen, and the paper's own difference where it gives one, for each counted comparison whose verdict
    is not in `not_counted_verdicts`; None when there is none."""
    power = [c for c in claim["comparisons"] if c.get("counted") and c["verdict"] not in not_counted_verdicts
             and c.get("mdd") is not None and c["mdd"] == c["mdd"]]
    if not power:
        return None
    def unit(c: dict) -> str:
        return " (log ratio)" if c.get("scale") == "log ratio" else (f" {SHOWN_IN_BITS[c['metric']]}"
                                                                    if c["metric"] in SHOWN_IN_BITS else "")
    return "What these seeds could detect (80% power, 5% two-sided), against what was seen: " + "; ".join(
        f"{c['metric']} {c['better']} vs {c['than']}: {c['gain'] * shown_factor(c['metric']):+.3g} observed (sd "
        f"{c['sd'] * shown_factor(c['metric']):.2g}, n = {c['n']}), detectable "
        f"{c['mdd'] * shown_factor(c['metric']):.2g}{unit(c)}{_papers_effect_words(c)}" for c in power)


def _papers_effect_words(c: dict) -> str:
    if "paper_gain" not in c:
        return ""
    gain = c["paper_gain"] * shown_factor(c["metric"])
    if c["paper_gain"] <= 0:
        return f"; the paper's own difference {gain:+.3g} is not in its claimed direction"
    if c["paper_gain"] >= c["mdd"]:
        return f"; the paper's difference {gain:+.3g} is detectable at n = {c['n']}"
    needs = c.get("seeds_for_paper_gain")
    return (f"; cannot detect the paper's difference ({gain:+.3g}) at {c['n']} seeds (needs "
            + (f"≈{needs})" if needs else "over 1,000)"))


def verdict_words(claim: dict) -> tuple[str, str]:
    """(badge colour, words) of a claim's verdict as the page shows it: a result fixed by the mechanism's
    arithmetic is confirmed in a neutral colour, never green or red; learned results hold (green), do
    not hold (red) or are inconclusive (orange, naming the paper's effect when it is below what the
    seeds can see); a claim whose sanity check failed is not tested (grey)."""
    if claim["verdict"] == SANITY_FAILED:
        return "gray", "not tested: a sanity check failed"
    if claim["verdict"] == NO_VERDICT:
        return "gray", "no verdict: none of the comparisons it counts was measured"
    if claim.get("verdict_kind") == BY_CONSTRUCTION:
        confirmed = claim["verdict"] in (HOLDS, CONFIRMED)
        return "blue", "confirmed, as its construction predicts" if confirmed else "not confirmed, against its construction"
    if claim["verdict"] == HOLDS:
        return "green", "holds"
    if claim["verdict"] == FAILS:
        return "red", "does not hold"
    undetectable = undetectable_papers_effect(claim)
    return "orange", f"inconclusive: {undetectable}" if undetectable else "inconclusive at this scale"


def _learned(claim: dict) -> bool:
    return claim.get("verdict_kind") != BY_CONSTRUCTION and claim["verdict"] not in (SANITY_FAILED, NO_VERDICT)


def _against(d: dict) -> str:
    return d["added_as"] or "a comparison the paper made"


def decided_by_words(claim: dict) -> str:
    """The comparisons that decided a learned verdict, in a table cell: against what, how it reads and who made
    the comparison (the paper, or this project as a control); "—" for a verdict of another kind or a document
    from before the record was kept."""
    deciding = claim.get("decided_by")
    if not deciding or not _learned(claim):
        return "—"
    if claim["verdict"] == FAILS:
        by_arm: dict[tuple[str, str], list[str]] = {}
        for d in deciding:
            by_arm.setdefault((d["than"], _against(d)), []).append(
                d["reads"] if len({e["metric"] for e in deciding}) == 1 else f"{metric_label(d['metric'])}: {d['reads']}")
        return "; ".join(f"{than} ({', '.join(reads)}; {made})" for (than, made), reads in by_arm.items())
    added = sum(bool(d["added_as"]) for d in deciding)
    said = "every counted comparison holds" if claim["verdict"] == HOLDS else "not holding"
    return f"{len(deciding)} comparison(s), {said}: {len(deciding) - added} the paper made, {added} this project added"


def papers_comparisons_words(claim: dict) -> str:
    """The verdict of the comparisons the paper made alone, where the counted ones mix them with controls this
    project added ("—" where they do not)."""
    papers = claim.get("papers_comparisons")
    return f"{papers['verdict']} ({papers['counted']})" if papers and _learned(claim) else "—"


def robustness_words(claim: dict) -> str:
    """How a learned verdict stands with each seed left out, and with the claim's stand-in (f from the identity)
    in DAMCHA's place, from the results ("—" where not recorded)."""
    found = claim.get("robustness") or {}
    if not found or not _learned(claim):
        return "—"
    said = []
    if loo := found.get("leave_one_out"):
        others = sorted({v for v in loo if v != claim["verdict"]})
        said.append(f"one seed left out: {sum(v == claim['verdict'] for v in loo)} of {len(loo)} the same"
                    + (f" (else {', '.join(others)})" if others else ""))
    if stand_in := found.get("stand_in"):
        said.append(f"{stand_in['arm']} in DAMCHA's place: {stand_in['verdict']}")
    return "; ".join(said)


def decided_by_sentence(claim: dict) -> str | None:
    """decided_by_words in full: every deciding comparison with its metric and reading, the verdict of the paper's
    comparisons alone, and the robustness with what decided the stand-in's verdict; None where not recorded."""
    deciding = claim.get("decided_by")
    if not deciding or not _learned(claim):
        return None
    lead = {FAILS: "Decided by what Holm rejects against the paper's direction",
            HOLDS: "Holds because every counted comparison holds"}.get(claim["verdict"],
                                                                       "Inconclusive through the comparisons that do not hold")
    by_metric: dict[str, dict[tuple[str, str], list[str]]] = {}
    for d in deciding:
        by_metric.setdefault(d["metric"], {}).setdefault((d["reads"], _against(d)), []).append(d["than"])
    said = [f"{lead}: " + "; ".join(f"on {metric_label(metric)}, against " + "; ".join(
        f"{', '.join(thans)} ({reads}; {made})" for (reads, made), thans in groups.items())
        for metric, groups in by_metric.items())]
    if papers := claim.get("papers_comparisons"):
        said.append(f"Against the {papers['counted']} comparison(s) the paper made alone (Holm over those): "
                    f"{papers['verdict']} — " + "; ".join(papers["reads"]))
    stand_in = (claim.get("robustness") or {}).get("stand_in")
    if (robust := robustness_words(claim)) != "—":
        shown = [d for d in (stand_in or {}).get("decided_by", []) if d["reads"] != "within noise"]
        said.append(f"Robustness: {robust}" + (" (" + "; ".join(f"against {d['than']}: {d['reads']}" for d in shown) + ")"
                                               if shown else ""))
    return ". ".join(said) + "."


def _matching(rows: list[dict], **match) -> int:
    return sum(all(r.get(k) == v for k, v in match.items()) for r in rows)


def verdict_table_markdown(doc: dict) -> str:
    """One row per claim: its verdict as the page words it, what kind of result it is, how many seeds, and
    how its comparisons were used (counted; construction checks and how many came out as predicted;
    reported because no arm can represent the task there)."""
    lines = ["| claim | verdict | decided by | the paper's comparisons alone | robustness | kind | seeds | counted "
             "comparisons | construction checks (confirmed) | reported: no arm can represent the task |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for claim in doc["claims"]:
        comparisons = claim["comparisons"]
        checks = claim.get("construction_checks", [])
        confirmed = sum(c["outcome"] in ("confirmed", "tie confirmed") for c in checks)
        unrepresented = sum(1 for c in comparisons if c.get("not_counted") and not c.get("measures"))
        lines.append(f"| {claim['title']} | {verdict_words(claim)[1]} | {decided_by_words(claim)} | "
                     f"{papers_comparisons_words(claim)} | {robustness_words(claim)} | {claim.get('verdict_kind', '')} | "
                     f"{claim.get('seeds', '')} | {_matching(comparisons, counted=True)} | "
                     f"{len(checks)} ({confirmed}) | {unrepresented} |")
    return "\n".join(lines)


def _markdown_table(rows: list[dict]) -> list[str]:
    if not rows:
        return []
    heads = list(rows[0])
    return ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads),
            *("| " + " | ".join(str(r.get(h, "—")).replace("|", "\\|") for h in heads) + " |" for r in rows)]


def comparison_rows(claim: dict) -> list[dict]:
    """The claim's counted comparisons: what against what, the difference in the drawn unit (log ratio for a
    ratio metric) with its 95% interval, the Holm-adjusted p over the claim's family, and how it reads."""
    rows = []
    for c in _counted(claim):
        k = shown_factor(c["metric"])
        unit = "log ratio" if c.get("scale") == "log ratio" else drawn_unit(c["metric"], "")
        p = c.get("holm_p", c.get("p"))
        rows.append({"counted comparison": f"{c['better']} against {c['than']} ({c['metric']})",
                     "gain, as the paper claims it (95% interval)": f"{figures.interval_cell(c['gain'] * k, c['low'] * k, c['high'] * k)}"
                                                                     f"{f' {unit}' if unit else ''}",
                     "Holm-adjusted p": "—" if p is None or p != p else f"{p:.2g}",
                     "reads": c.get("reads") or c.get("verdict", ""),
                     "parameters, against ÷ reference": capacity_words(claim, c["better"], c["than"])})
    return rows


UNMATCHED_BEYOND = 1.5  # Claim.matched_arms: a counted comparison of arms further apart than this is unmatched


def arm_parameters(claim: dict, arm: str) -> float | None:
    """An arm's parameter count: the claim's record for an arm that trains on a data set, the count its units
    report for a synthetic arm; None for an arm without a model (a threshold, a trivial baseline)."""
    if arm in claim.get("parameters", {}):
        return claim["parameters"][arm]
    counts = [row["parameters"] for row in claim.get("values", {}).get(arm, []) if "parameters" in row]
    return statistics.fmean(counts) if counts else None


def capacity_words(claim: dict, reference: str, other: str) -> str:
    """How far apart in parameters a comparison's arms are: the ratio, and beyond UNMATCHED_BEYOND either way the
    arm matched to the reference's count that stands in for `other`, or "unmatched" where the claim has none; "—"
    where either has no model."""
    mine, theirs = arm_parameters(claim, reference), arm_parameters(claim, other)
    if not mine or not theirs:
        return "—"
    ratio = theirs / mine
    apart = max(ratio, 1 / ratio)
    if apart <= UNMATCHED_BEYOND:
        return f"{ratio:.2f}x"
    if matched := claim.get("matched_versions", {}).get(other):
        failed = any(c.get("failed_control") and matched in (c["better"], c["than"]) for c in claim.get("comparisons", []))
        return f"{ratio:.2f}x — matched by {matched}" + (", a failed control (not counted)" if failed else "")
    return f"{ratio:.2f}x — unmatched ({apart:.2f}x apart; no arm at the reference's count stands in)"


def construction_checks_sentence(doc: dict) -> str | None:
    """The checks of the synthetic tasks' construction the results record, each with its value and bound
    (sanity.SANITY_BOUNDS); None when there are none."""
    sanity = doc.get("sanity", {})
    if not sanity:
        return None
    return ("Checks of the synthetic tasks' construction (a claim that needs a failed one gets no verdict): " +
            "; ".join(f"{k} = {v:.3g}" + (f" ({'passes' if v < SANITY_BOUNDS[k] else 'FAILS'}: below "
                                          f"{SANITY_BOUNDS[k]:.3g})" if k in SANITY_BOUNDS else "")
                      for k, v in sanity.items()))


def scale_claims_markdown(scale, claims: list) -> str:
    """Per claim a scale runs: its arms, each with the settings that set it apart from the scale's model, and every
    deviation from the paper it declares and what it cannot speak to (docs/reproduce.md, generated from the
    claims, so a deviation added to a claim, a data set or the scale shows there)."""
    out = []
    for claim in claims:
        def apart(arm) -> str:
            base = dict(scale.model_overrides(arm.dataset)) if arm.kind == "train" else {}
            own = [f"{k} {v}" for k, v in arm.overrides if k not in base or base[k] != v]
            return arm.name + (f" ({', '.join(own)})" if own and arm.kind == "train" else "")
        out += [f"**`{claim.key}`**, {claim.title}. Arms: {'; '.join(apart(a) for a in claim.arms)}.", "",
                *(f"- {d}" for d in claim.deviations),
                *(f"- Cannot speak to: {c}." for c in claim.cannot_speak_to), ""]
    return "\n".join(out).rstrip()


def claim_numbers_markdown(doc: dict) -> str:
    """Every claim's numbers and the sentences the page says beside them (the summary pairs, what the seeds
    could detect, the trivial baselines, the arms that missed the easiest case, the implementation bound),
    then its arms table, counted comparisons, construction checks and families, for the docs: generated
    from the results, so no figure there is typed by hand."""
    lines = [line for said in (verdict_tally(doc["claims"]), construction_checks_sentence(doc)) if said
             for line in (said, "")]
    for claim in doc["claims"]:
        said = [decided_by_sentence(claim), *claim.get("failed_controls", []), summary_pair_sentence(claim),
                *claim.get("trivial_baselines", []),
                detectable_sentence(claim, (HOLDS,)) if claim["verdict"] not in (HOLDS, SANITY_FAILED) else None,
                ("Did not learn the easiest case: " + "; ".join(claim["sanity_caveats"]) + "."
                 if claim.get("sanity_caveats") else None),
                ("Learned the easiest case on some seeds only: " + "; ".join(claim["sanity_seeds_short"]) + "."
                 if claim.get("sanity_seeds_short") else None), implementation_bound_sentence(claim)]
        lines += ["", f"#### {claim['title']}", "", f"{verdict_words(claim)[1].capitalize()} ({claim.get('seeds', '')} "
                  f"{samples_word(claim)}). " + " ".join(s.rstrip(".") + "." for s in said if s), "",
                  *_markdown_table(arm_table(claim))]
        for rows in (comparison_rows(claim), construction_table(claim), family_table(claim)):
            if rows:
                lines += ["", *_markdown_table(rows)]
    return "\n".join(lines).strip()


def record_caption(doc: dict) -> str:
    """What a results document records of how it was made, in one caption: the command, seeds, units computed
    and resumed, wall time and compute over its calls, versions, the machine its units ran on, and the units
    taken over from an earlier document with that document's own record."""
    compute = (f"; over the {len(doc['calls'])} call(s) that built these results {doc['wall_seconds_all_calls']} s of "
               f"wall time and {doc['compute_seconds']} s of compute summed over workers" if "calls" in doc else "")
    most_seeds = max((c.get("seeds") or 0 for c in doc["claims"]), default=0)
    seeds = (f"seeds {doc['seeds']} by default, up to {most_seeds} where a claim needs more (each claim says how many)"
             if most_seeds > len(doc["seeds"]) else f"seeds {doc['seeds']}")
    machine = doc.get("machine")
    cpu = f", {machine['cpu']}" if machine and machine.get("cpu") else ""
    where = (f", CPU kernels {machine['cpu_kernels']} on {machine['architecture']}{cpu} ({machine['of']}; units rerun "
             "bit-identical only on the same CPU model with the same versions)" if machine else "")
    chain, earlier = [], doc.get("reused_from")
    while earlier:  # each earlier document's record, the one it took units from nested in it
        chain.append(earlier)
        earlier = earlier.get("reused_from")
    computed = (f", computed over {len(chain)} earlier document(s) in {sum(e.get('wall_seconds_all_calls', 0) for e in chain):.1f} "
                f"s of wall time and {sum(e.get('compute_seconds', 0) for e in chain):.1f} s of compute (the first by "
                f"`{chain[-1].get('command')}`)" if chain else "")
    # (a document whose record holds no machine, or no CPU model, ran on one not recorded)
    elsewhere = sorted({(e.get("machine") or {}).get("cpu") or "" for e in chain}
                       - {(machine or {}).get("cpu") or "-"})
    other = (f"; units taken over ran on another CPU ({', '.join(c or 'one not recorded' for c in elsewhere)}), so they "
             "need not be bit-identical to what this machine computes" if elsewhere else "")
    reused = (f"; {doc['reused_units']} units taken over from earlier results (`--reuse`){computed}{other}"
              if doc.get("reused_units") else "")
    quick = " **A quick run: its numbers are a smoke test, not evidence.**" if doc["quick"] else ""
    computed_here, units = doc.get("units_computed_in_this_call", "?"), doc.get("units", "?")
    resumed = "" if computed_here == units else " (the others resumed)"
    return (f"`{doc['command'] or 'python -m damcha evidence'}` — {seeds}, {doc['wall_seconds']} s for "
            f"{computed_here} of {units} units{resumed}{compute}, versions {doc['versions']}{where}{reused}.{quick}")


def verdict_tally(claims: list[dict]) -> str:
    """Learned results counted apart from results the construction fixes and from claims not tested."""
    learned = [c for c in claims if c.get("verdict_kind") != BY_CONSTRUCTION and c["verdict"] != SANITY_FAILED]
    count = {v: sum(c["verdict"] == v for c in learned) for v in (HOLDS, FAILS, NO_VERDICT)}
    built = [c for c in claims if c.get("verdict_kind") == BY_CONSTRUCTION]
    untested = sum(c["verdict"] == SANITY_FAILED for c in claims)
    checks = [k for c in learned for k in c.get("construction_checks", [])]
    within = (f" Within the learned claims, {len(checks)} comparisons fixed by construction are checks, not counted "
              f"({sum(k['outcome'] in ('confirmed', 'tie confirmed') for k in checks)} confirmed)." if checks else "")
    return (f"Learned results ({len(learned)} claims): {count[HOLDS]} hold, {count[FAILS]} do not hold, "
            f"{len(learned) - count[HOLDS] - count[FAILS] - count[NO_VERDICT]} inconclusive"
            f"{f', {count[NO_VERDICT]} without a verdict (no counted comparison measured)' if count[NO_VERDICT] else ''}"
            ". Expected by construction, not evidence "
            f"({len(built)}): {sum(c['verdict'] in (HOLDS, CONFIRMED) for c in built)} confirmed"
            f"{'' if all(c['verdict'] != NOT_CONFIRMED for c in built) else ', the rest not'}. Not tested (a sanity "
            f"check failed): {untested}.{within}")


def samples_word(claim: dict) -> str:
    """What a claim's repetitions are: seeds of trained models, or repeats of a timing (efficiency arms)."""
    kinds = {spec[1] for spec in claim.get("arms", {}).values() if isinstance(spec, list) and len(spec) > 1}
    return "repeats" if kinds and kinds <= {"efficiency", "constant"} else "seeds"


def cannot_speak_to(claims: list[dict]) -> list[tuple[str, list[str]]]:
    """(claim title, what the paper reports there that it does not measure) for each claim with gaps,
    then the paper's results no claim tests: the page's "What this evidence cannot speak to"."""
    gaps = [(c["title"], list(c.get("cannot_speak_to", []))) for c in claims if c.get("cannot_speak_to")]
    return [*gaps, ("Tested by no claim here", list(PAPER_RESULTS_NOT_CLAIMED))]


def family_table(claim: dict) -> list[dict]:
    """Per family and metric, the arms the reference is ahead of, behind and within noise of (results
    written before families: none)."""
    return claim.get("families", [])


def summary_pair_sentence(claim: dict) -> str | None:
    """The claim's summary pairs (Claim.summary_pairs) at every level, in words: which arm is ahead, by how much,
    and whether the 95% interval excludes 0 ("nominally" where it does not); None when it declares none."""
    def reads(c: dict) -> str:
        side = "ahead of" if c["gain"] > 0 else "behind"
        sure = c["low"] > 0 or c["high"] < 0
        return (f"{c['better']} {side if sure else 'nominally ' + side} {c['than']} "
                f"({c['gain']:+.3g} [{c['low']:+.3g}, {c['high']:+.3g}])")

    said = [reads(c) for c in claim["comparisons"] if c.get("measures") in claim.get("summary_pairs", ())]
    if not said:
        return None
    return (f"{', '.join(dict.fromkeys(claim['summary_pairs']))}, {claim['metric']} (the first's lead, 95% interval "
            "over seeds; \"nominally\" where it contains 0): " + "; ".join(said) + ".")


def unrepresented_comparisons(claim: dict) -> list[str]:
    """The comparisons a claim reports but does not count because neither arm can represent its task there
    (records.Claim.represents), once each."""
    return list(dict.fromkeys(f"{c['better']} vs {c['than']}" for c in claim["comparisons"]
                              if c.get("not_counted") and not c.get("measures")))


# An arm whose time against MHA is this many times its FLOPs against MHA is read as slowed by its implementation
# here (an unfused form, a loop), not by its arithmetic: its times are not the method's.
IMPLEMENTATION_BOUND = 2.5


def implementation_bound_sentence(claim: dict) -> str | None:
    """For a claim that times arms against MHA and counts their FLOPs: the arms whose time ratio is more than
    IMPLEMENTATION_BOUND times their FLOP ratio, in words with their numbers and how far every other arm is;
    None when there is none."""
    means: dict[str, dict[str, float]] = {}
    for row in claim.get("details", []):
        if row["metric"] in ("time_ratio", "flops_ratio"):
            means.setdefault(row["arm"], {})[row["metric"]] = row["mean"]
    kinds = {arm: spec[1] for arm, spec in claim.get("arms", {}).items()}
    per_flop = {arm: m["time_ratio"] / m["flops_ratio"] for arm, m in means.items()
                if kinds.get(arm) != "constant" and {"time_ratio", "flops_ratio"} <= m.keys()
                and m["flops_ratio"] > 0 and math.isfinite(m["time_ratio"])}
    bound = {arm: r for arm, r in per_flop.items() if r > IMPLEMENTATION_BOUND}
    if not bound:
        return None
    rest = max((r for arm, r in per_flop.items() if arm not in bound), default=math.nan)
    said = "; ".join(f"{arm} takes {means[arm]['time_ratio']:.2g}x MHA's time for {means[arm]['flops_ratio']:.3g}x its "
                     f"FLOPs ({ratio:.2g}x MHA's time per FLOP)" for arm, ratio in bound.items())
    return (f"{said}; every other arm is within {rest:.2g}x. That time is this implementation's, not the method's: read "
            "the arm on FLOPs, and its time comparisons as a bound on this code, not on the mechanism.")


def construction_table(claim: dict) -> list[dict]:
    """One row per construction check of a claim: the prediction, what was seen, and whether it held."""
    return [{"compared": f"{k['better']} vs {k['than']}", "metric": metric_label(k["metric"]),
             "predicted": k["predicted"] + (f" (within ±{k['margin'] * shown_factor(k['metric']):.3g})"
                                            if k["predicted"] == "tie" else ""),
             "difference": k["gain"] * shown_factor(k["metric"]), "low": k["low"] * shown_factor(k["metric"]),
             "high": k["high"] * shown_factor(k["metric"]), "p of the check": k["p"],
             "outcome": k["outcome"]} for k in claim.get("construction_checks", [])]


def undetectable_papers_effect(claim: dict) -> str | None:
    """'cannot detect the paper's effect at N seeds (needs ≈M)' when an inconclusive claim's counted
    comparisons that the paper quantifies are all below what its seeds could detect; else None."""
    open_ = [c for c in claim["comparisons"] if c.get("counted") and c["verdict"] != HOLDS]
    quantified = [c for c in open_ if c.get("paper_gain", 0) > 0]
    if not quantified or any(c["paper_gain"] >= c["mdd"] for c in quantified):
        return None
    needs = [c.get("seeds_for_paper_gain") for c in quantified]
    most = "over 1,000" if None in needs else f"≈{max(needs)}"
    return f"cannot detect the paper's effect at {quantified[0]['n']} seeds (needs {most})"


def evidence_item(name: str, folder: str | Path, claim_key: str, root=None):
    """The named figure of one claim read from a results folder, with its provenance (the folder
    named relative to `root`, as the app names runs)."""
    doc = load_results(Path(folder))
    if doc is None:
        raise EvidenceFileError(f"{folder}: no results.json")
    claim = next((c for c in doc["claims"] if c["key"] == claim_key), None)
    if claim is None:
        raise ValueError(f"{folder}: no claim {claim_key!r} in its results")
    figure = EVIDENCE_FIGURES[name]
    why = figure.missing(claim)
    if why:
        raise ValueError(f"{name} of {claim_key}: {why}")
    prov = Provenance.of(name, params={"claim": claim_key, "results": run_name_in(folder, root)}, regenerable=True)
    return ExportItem(f"{name}_{claim_key}", figure.draw(claim), prov)


def regenerate(prov, run_root=None):
    """The figure a provenance describes: an evidence figure redrawn from its results folder, any other
    named figure rebuilt by damcha.views.regeneration (folders and runs named relative to `run_root`)."""
    if not (prov.regenerable and prov.figure in EVIDENCE_FIGURES):
        return regenerate_named(prov, run_root)
    params = library_params(prov.params)
    return evidence_item(prov.figure, resolved(params["results"], run_root), params["claim"], run_root)


def results_at_other_scales(folder: str | Path) -> list[tuple[str, dict, str]]:
    """(scale, results, a problem or "") for each scale whose results sit beside the demo's folder, as
    `damcha evidence --scale S` writes them by default (`<folder>-S`): the page shows them beside the demo's.
    A folder that cannot be read is named with its problem instead of hiding the rest."""
    folder = Path(folder)
    found: list[tuple[str, dict, str]] = []
    for name in SCALES:
        try:
            doc = load_results(folder.with_name(f"{folder.name}-{name}"))
        except EvidenceFileError as e:
            found.append((name, {}, str(e)))
            continue
        if doc is not None:
            found.append((name, doc, ""))
    return found


def claims_at_scale(doc: dict, key: str) -> list[dict]:
    """The claims of a scale's results that are the demo claim `key` (on each data set it stands for)."""
    return [c for c in doc.get("claims", []) if c.get("key", "").split("@")[0] == key]


def _rehearsal(name: str) -> bool:
    return name in SCALES and SCALES[name].smoke


def scale_words(name: str) -> str:
    """How the page names a scale's results: a smoke scale's (tiny) are a rehearsal, never evidence."""
    return f"at the {name} scale" + (" (a rehearsal of the code path: not evidence)" if _rehearsal(name) else "")


def scale_data_words(doc: dict) -> str:
    """What a scale's results were computed on, where that is not the published data sets (the files' checksums
    are not the published ones: generated files of the standard formats, a copy of another size)."""
    data: dict = doc["data"] if isinstance(doc.get("data"), dict) else {}
    other = sorted(name for name, entry in data.items() if isinstance(entry, dict) and entry.get("standard_files") is False)
    return (f", on files that are not the published data sets ({', '.join(other)}: the standard formats, other "
            "content)") if other else ""


def scale_verdict_words(name: str, claim: dict) -> tuple[str, str]:
    """verdict_words of a claim at a scale; a rehearsal's verdict in grey, never green or red."""
    colour, words = verdict_words(claim)
    return ("gray", f"{words} (rehearsal)") if _rehearsal(name) else (colour, words)
