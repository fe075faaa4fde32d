"""Evidence: the paper's claims tested at small scale, read from the stored results (no training here)."""

import pandas as pd
import streamlit as st

from app.ui import SHIPPED_ROOT, provenance, show
from damcha import figures
from damcha.evidence import FAILS, HOLDS, SANITY_FAILED, load_results

st.title("Evidence")
folder = SHIPPED_ROOT / "evidence"
doc = load_results(folder)
if doc is None:
    st.info(f"No stored results in {folder}: run `python -m damcha evidence` (about 90 minutes on two cores; "
            "`--quick` for a smoke run).")
    st.stop()
st.caption(f"`{doc['command'] or 'python -m damcha evidence'}` — seeds {doc['seeds']}, {doc['wall_seconds']} s for "
           f"{doc.get('units_computed_in_this_call', '?')} of {doc.get('units', '?')} units (the others resumed), "
           f"versions {doc['versions']}." + (" **A quick run: its numbers are a smoke test, not evidence.**"
                                               if doc["quick"] else ""))
st.markdown(f"**Verdict rule.** {doc['verdict_rule']}")
if doc.get("not_run") or not doc.get("complete", True):
    st.warning("Claims not in these results yet: " + ", ".join(doc.get("not_run", []) or ["(unknown)"]) +
               ("" if doc.get("complete", True) else " (the run has not finished them)"))
sanity = doc.get("sanity", {})
if sanity:
    st.caption("Sanity checks of the synthetic tasks: " + "; ".join(f"{k} = {v:.3g}" for k, v in sanity.items()))
BADGE = {HOLDS: ":green-badge[holds]", FAILS: ":red-badge[does not hold]",
         SANITY_FAILED: ":gray-badge[not tested: sanity check failed]"}
for claim in doc["claims"]:
    st.header(claim["title"])
    st.markdown(f"> {claim['statement']}")
    st.markdown(f"**Verdict:** {BADGE.get(claim['verdict'], ':orange-badge[inconclusive at this scale]')}. "
                f"{claim['scale']}")
    if claim["note"]:
        st.caption(claim["note"])
    if claim.get("sanity_failures"):
        st.error("Sanity check failed, so no verdict: where the task is easiest every model must learn it first. "
                 + "; ".join(claim["sanity_failures"]))
    summary = pd.DataFrame(claim["summary"])
    comparisons = pd.DataFrame(claim["comparisons"])
    better = "lower" if claim["lower_is_better"] else "higher"
    show(figures.interval_figure(summary["arm"], summary["mean"], summary["low"], summary["high"],
                                 f"{claim['metric']} ({better} is better), mean over seeds with 95% interval",
                                 claim["metric"], list(summary["paper"])),
         f"evidence_{claim['key']}", provenance(f"evidence_{claim['key']}", None, params={"claim": claim["key"]}))
    a, b = st.columns(2)
    a.dataframe(summary, hide_index=True)
    b.dataframe(comparisons, hide_index=True)
    a.download_button("Download CSV", (folder / f"{claim['key']}.csv").read_bytes(), f"{claim['key']}.csv",
                      "text/csv", key=f"csv_{claim['key']}")
