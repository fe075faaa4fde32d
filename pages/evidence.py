"""Evidence: the paper's claims tested at small scale, read from the stored results (no training here)."""

import os
from pathlib import Path

import pandas as pd
import streamlit as st

from app.export_widgets import provenance, show
from app.roots import SHIPPED_ROOT
from damcha.evidence.catalogue import claims
from damcha.evidence.results import RATIO_METRICS, EvidenceFileError, load_results
from damcha.evidence.sanity import SANITY_BOUNDS
from damcha.evidence.statistics import FAILS, HOLDS, SANITY_FAILED
from damcha.views import figures
from damcha.views.figures import interval_cell

st.title("Evidence")
folder = Path(os.environ.get("DAMCHA_EVIDENCE") or SHIPPED_ROOT / "evidence")  # results of `damcha evidence`
try:
    doc = load_results(folder)
except EvidenceFileError as e:
    st.error(f"The stored evidence cannot be shown: {e}")
    st.stop()
if doc is None:
    st.info(f"No stored results in {folder}: run `python -m damcha evidence` (about 95 minutes on two cores; "
            "`--quick` for a smoke run).")
    st.stop()
compute = (f"; over the {len(doc['calls'])} call(s) that built these results {doc['wall_seconds_all_calls']} s of "
           f"wall time and {doc['compute_seconds']} s of compute summed over workers" if "calls" in doc else "")
most_seeds = max((c.get("seeds") or 0 for c in doc["claims"]), default=0)
seeds_said = (f"seeds {doc['seeds']} by default, up to {most_seeds} where a claim needs more (each claim says how many)"
              if most_seeds > len(doc["seeds"]) else f"seeds {doc['seeds']}")
st.caption(f"`{doc['command'] or 'python -m damcha evidence'}` — {seeds_said}, {doc['wall_seconds']} s for "
           f"{doc.get('units_computed_in_this_call', '?')} of {doc.get('units', '?')} units (the others resumed)"
           f"{compute}, versions {doc['versions']}"
           + (f"; {doc['reused_units']} units taken over from an earlier run's results (`--reuse`)"
              if doc.get("reused_units") else "") + "." + (" **A quick run: its numbers are a smoke test, not evidence.**"
                                                         if doc["quick"] else ""))
st.markdown(f"**Verdict rule.** {doc['verdict_rule']}")
if doc.get("not_run") or not doc.get("complete", True):
    st.warning("Claims not in these results yet: " + ", ".join(doc.get("not_run", []) or ["(unknown)"]) +
               ("" if doc.get("complete", True) else " (the run has not finished them)"))
newer = [c.title for c in claims(bool(doc["quick"])) if c.key not in {k["key"] for k in doc["claims"]}]
if newer and doc.get("complete", True):
    st.info("Defined since these results were made, so not in them: " + "; ".join(newer) +
            ". `python -m damcha evidence` adds them.")
sanity = doc.get("sanity", {})
if sanity:
    st.caption("Checks of the synthetic tasks' construction (a claim that needs a failed one gets no verdict): " +
               "; ".join(f"{k} = {v:.3g}" + (f" ({'passes' if v < SANITY_BOUNDS[k] else 'FAILS'}: below "
                                             f"{SANITY_BOUNDS[k]:.3g})" if k in SANITY_BOUNDS else "")
                         for k, v in sanity.items()))
BADGE = {HOLDS: ":green-badge[holds]", FAILS: ":red-badge[does not hold]",
         SANITY_FAILED: ":gray-badge[not tested: sanity check failed]"}
for claim in doc["claims"]:
    st.header(claim["title"])
    st.markdown(f"> {claim['statement']}")
    kind = {"by construction": " Expected by construction, not evidence for the mechanism: "
            + claim.get("by_construction", ""), "evidence": " Evidence for the mechanism at this scale."}
    seeds = f" {claim['seeds']} seeds." if claim.get("seeds") else ""
    st.markdown(f"**Verdict:** {BADGE.get(claim['verdict'], ':orange-badge[inconclusive at this scale]')}."
                f"{kind.get(claim.get('verdict_kind', ''), '')}{seeds} {claim['scale']}")
    power = [c for c in claim["comparisons"] if c.get("counted") and c["verdict"] != HOLDS and not pd.isna(c.get("mdd"))]
    if claim["verdict"] not in (HOLDS, SANITY_FAILED) and power:
        st.caption("What these seeds could detect (80% power, 5% two-sided), against what was seen: " + "; ".join(
            f"{c['metric']} {c['better']} vs {c['than']}: {c['gain']:+.3g} observed (sd {c['sd']:.2g}, n = {c['n']}), "
            f"detectable {c['mdd']:.2g}{' (log ratio)' if c.get('scale') == 'log ratio' else ''}" for c in power))
    if claim["note"]:
        st.caption(claim["note"])
    for line in claim.get("trivial_baselines", []):
        st.warning(line)
    if claim.get("sanity_failures"):
        st.error("Sanity check failed, so no verdict: where the task is easiest the compared models must learn it "
                 "first. " + "; ".join(claim["sanity_failures"]))
    if claim.get("sanity_caveats"):
        st.warning("Did not learn the easiest case (their numbers say little at any level): "
                   + "; ".join(claim["sanity_caveats"]))
    summary = pd.DataFrame(claim["summary"])
    better = "lower" if claim["lower_is_better"] else "higher"
    show(figures.interval_figure(summary["arm"], summary["mean"], summary["low"], summary["high"],
                                 f"{claim['metric']} ({better} is better), mean over seeds with 95% interval",
                                 claim["metric"], list(summary["paper"]), log_scale=claim["metric"] in RATIO_METRICS),
         f"evidence_{claim['key']}", provenance(f"evidence_{claim['key']}", None, params={"claim": claim["key"]}))
    comparisons = pd.DataFrame(claim["comparisons"])
    counted = comparisons[comparisons["counted"]] if "counted" in comparisons else comparisons
    if len(counted):
        label = counted["metric"] + ": " + counted["better"] + " vs " + counted["than"]
        show(figures.interval_figure(label, counted["gain"], counted["low"], counted["high"],
                                     "The verdict's differences, in the paper's direction (above 0: as the paper "
                                     "claims), 95% interval",
                                     "difference", zero_line=True),
             f"evidence_{claim['key']}_differences",
             provenance(f"evidence_{claim['key']}_differences", None, params={"claim": claim["key"]}))
    pairs = comparisons[comparisons["measures"].notna()] if "measures" in comparisons else comparisons.iloc[:0]
    if len(pairs):  # reported beside the verdict: what the other arms tell apart
        label = pairs["measures"] + ": " + pairs["better"] + " vs " + pairs["than"]
        show(figures.interval_figure(label, pairs["gain"], pairs["low"], pairs["high"],
                                     "Reported, not counted: the contrasts between the other arms (above 0: the first "
                                     "is better), 95% interval", "difference", zero_line=True, horizontal=True),
             f"evidence_{claim['key']}_contrasts",
             provenance(f"evidence_{claim['key']}_contrasts", None, params={"claim": claim["key"]}))
    a, b = st.columns(2)
    details = pd.DataFrame(claim.get("details", claim["summary"]))
    if "metric" in details:  # one column per metric: mean [low, high]
        details["value"] = [interval_cell(m, lo, hi) for m, lo, hi in zip(details["mean"], details["low"], details["high"])]
        details = details.pivot(index="arm", columns="metric", values="value").reindex(summary["arm"])
        details = details[[claim["metric"], *claim.get("columns", [])]].reset_index()
        details.insert(1, "paper", ["—" if p is None or p != p else f"{p:.4g}" for p in summary["paper"]])
    a.dataframe(details, hide_index=True)
    b.dataframe(comparisons, hide_index=True)
    csv = folder / f"{claim['key']}.csv"
    if csv.is_file():
        a.download_button("Download CSV", csv.read_bytes(), csv.name, "text/csv", key=f"csv_{claim['key']}")
    else:
        a.caption(f"{csv.name} is missing from the results folder.")
