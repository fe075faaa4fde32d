"""Evidence: the paper's claims tested at small scale, read from the stored results (no training here)."""

import os
from pathlib import Path

import pandas as pd
import streamlit as st

from app.named_figures import show_evidence_figures
from app.roots import SHIPPED_ROOT
from app.sharing import redacted
from app.url_state import bound
from damcha.evidence.catalogue import claims
from damcha.evidence.documents import EvidenceFileError, load_results
from damcha.evidence.results import wall_seconds_of_every_call
from damcha.evidence.statistics import BY_CONSTRUCTION, HOLDS, LEARNED, SANITY_FAILED
from damcha.evidence.view import (
    arm_table,
    cannot_speak_to,
    claims_at_scale,
    construction_checks_sentence,
    construction_table,
    decided_by_sentence,
    decided_by_words,
    detectable_sentence,
    family_table,
    grid_edge_warning,
    implementation_bound_sentence,
    paper_beside,
    papers_comparisons_words,
    record_caption,
    results_at_other_scales,
    robustness_words,
    samples_word,
    scale_data_words,
    scale_verdict_words,
    scale_words,
    summary_pair_sentence,
    tuning_rows,
    unrepresented_comparisons,
    verdict_tally,
    verdict_words,
)
from damcha.runs.train import TrainConfig
from damcha.views.export import run_name_in

# The named figures this page places itself (app.named_figures.not_placed: the others go under "More figures").
PLACED_FIGURES = ()

st.title("Evidence")
folder = Path(os.environ.get("DAMCHA_EVIDENCE") or SHIPPED_ROOT / "evidence")  # results of `damcha evidence`
try:
    doc = load_results(folder)
except EvidenceFileError as e:
    st.error(f"The stored evidence cannot be shown: {redacted(str(e), folder.parent)}")  # (no server path)
    st.stop()
results_name = run_name_in(folder, SHIPPED_ROOT)  # as a provenance names it: never the server's absolute path
if doc is None:
    try:  # what the shipped run took, as its results record it (no number typed by hand)
        shipped = load_results(SHIPPED_ROOT / "evidence")
        took = (f"the shipped results took {wall_seconds_of_every_call(shipped) / 60:.0f} minutes of wall time"
                if shipped else "")
    except EvidenceFileError:
        took = ""
    st.info(f"No stored results in {folder}: run `python -m damcha evidence` ({took + ', ' if took else ''}see "
            "docs/evidence.md; `--quick` for a smoke run).")
    st.stop()
st.caption(record_caption(doc))
if doc.get("restated"):
    st.caption(f"Statistics and verdicts recomputed on {doc['restated']['when']} from the stored per-seed values "
               f"(`{doc['restated']['command'] or 'python -m damcha evidence --restate'}`; nothing retrained)"
               + (f"; left as they were (their arms changed): {', '.join(doc['restated']['unchanged_claims'])}"
                  if doc["restated"]["unchanged_claims"] else "") + ".")
st.markdown(f"**Verdict rule.** {doc['verdict_rule']}")
if doc.get("not_run") or not doc.get("complete", True):
    st.warning("Claims not in these results yet: " + ", ".join(doc.get("not_run", []) or ["(unknown)"]) +
               ("" if doc.get("complete", True) else " (the run has not finished them)"))
newer = [c.title for c in claims(bool(doc["quick"])) if c.key not in {k["key"] for k in doc["claims"]}]
if newer and doc.get("complete", True):
    st.info("Defined since these results were made, so not in them: " + "; ".join(newer) +
            ". `python -m damcha evidence` adds them.")
checked = construction_checks_sentence(doc)
if checked:
    st.caption(checked)
KIND_WORDS = {BY_CONSTRUCTION: "expected by construction (not evidence)", LEARNED: "learned at this scale"}
scaled = results_at_other_scales(folder)  # `damcha evidence --scale S` results beside these
for name, scale_doc, problem in scaled:
    if problem:
        st.warning(f"The results {scale_words(name)} cannot be shown: {redacted(problem, folder.parent)}")
    else:
        st.info(f"Beside these demo-scale results: results {scale_words(name)}{scale_data_words(scale_doc)} "
                f"(`{scale_doc.get('command') or 'python -m damcha evidence --scale ' + name}`), in a column of the "
                "table and under each claim they cover.")
scaled = [(name, scale_doc) for name, scale_doc, problem in scaled if not problem]
st.caption(verdict_tally(doc["claims"]))
st.dataframe(pd.DataFrame([{"claim": c["title"], "verdict": verdict_words(c)[1], "decided by": decided_by_words(c),
                            "the paper's comparisons alone": papers_comparisons_words(c),
                            "robustness": robustness_words(c),
                            **{f"{name} scale": "; ".join(f"{s['key'].split('@')[1]}: {scale_verdict_words(name, s)[1]}"
                                                          for s in claims_at_scale(scale_doc, c["key"])) or "not run"
                               for name, scale_doc in scaled},
                            "what the verdict is": "not tested" if c["verdict"] == SANITY_FAILED
                            else KIND_WORDS.get(c.get("verdict_kind", ""), ""),
                            "seeds or repeats": f"{c.get('seeds') or len(doc['seeds'])} {samples_word(c)}"}
                           for c in doc["claims"]]),
             hide_index=True, column_config={"verdict": st.column_config.TextColumn(width="large"),
                                             "decided by": st.column_config.TextColumn(width="large")})
st.caption("Decided by: the counted comparisons the verdict turned on, and who made each (the paper, or this project "
           "as a control). The paper's comparisons alone: their verdict under Holm over those alone, where the counted "
           "ones mix them with added controls. Robustness: the verdict with each seed left out in turn, and with DAMCHA "
           "started from the identity in DAMCHA's place where that arm ran.")
if doc.get("tuning_rule"):
    st.markdown(f"**Learning rates.** {doc['tuning_rule']}")
    with st.expander(f"The rates chosen for the {len(doc.get('tuning', []))} tuned configurations (what each chose "
                     "by: a run's hold-out loss, mean and per tuning seed; a synthetic model's validation score)"):
        st.dataframe(pd.DataFrame(tuning_rows(doc)), hide_index=True)
    if edge := grid_edge_warning(doc):
        st.warning(edge)
elif not doc.get("quick"):
    st.caption(f"**Learning rates.** These results predate the tuning: every arm that trains on a data set trained at "
               f"one rate, {TrainConfig.lr:g}.")
EVERY_CLAIM = "every claim, one after another"
titles = [c["title"] for c in doc["claims"]]
shown = st.selectbox("Claim shown in full (its statement, verdict, figures and tables)", [*titles, EVERY_CLAIM],
                     **bound("claim"))  # one claim at a time: the page stays short and builds only its figures
for claim in doc["claims"] if shown == EVERY_CLAIM else [c for c in doc["claims"] if c["title"] == shown]:
    st.header(claim["title"])
    st.markdown(f"> {claim['statement']}")
    unrepresented = unrepresented_comparisons(claim)
    kind = {BY_CONSTRUCTION: " Expected by construction, not evidence for the mechanism: "
            + (claim.get("by_construction") or "every comparison it would count is a construction check (below)"
               + (" or compares arms that cannot represent the task (reported, not counted)." if unrepresented else "."))}
    seeds = f" {claim['seeds']} {samples_word(claim)}." if claim.get("seeds") else ""
    colour, words = verdict_words(claim)
    st.markdown(f"**Verdict:** :{colour}-badge[{words}]."
                f"{kind.get(claim.get('verdict_kind', ''), '')}{seeds} {claim['scale']}")
    if decided := decided_by_sentence(claim):
        st.markdown(decided)
    for failed in claim.get("failed_controls", []):
        st.warning(failed)
    beside = summary_pair_sentence(claim)
    if beside:
        st.warning("Beside the verdict — " + beside)
    power = detectable_sentence(claim, (HOLDS,)) if claim["verdict"] not in (HOLDS, SANITY_FAILED) else None
    if power:
        st.caption(power)
    if claim["note"]:
        st.caption(claim["note"])
    for line in claim.get("trivial_baselines", []):
        st.warning(line)
    if claim.get("sanity_failures"):
        st.error("Sanity check failed, so no verdict: where the task is easiest the compared models must learn it "
                 "first. " + "; ".join(claim["sanity_failures"]))
    if claim.get("sanity_caveats"):
        st.warning("Did not learn the easiest case (a finding about these arms, reported; only the instruments' "
                   "misses withhold a verdict): "
                   + "; ".join(claim["sanity_caveats"]))
    if claim.get("sanity_seeds_short"):
        st.warning("Learned the easiest case on some seeds only (the mean reaches the bound, these seeds do not): "
                   + "; ".join(claim["sanity_seeds_short"]))
    checks = construction_table(claim)
    if checks:
        st.subheader("Construction checks (fixed in advance, not counted)")
        st.caption(" ".join(dict.fromkeys(k["why"] for k in claim["construction_checks"])) + " Differences are in the "
                   "paper's direction (log ratios for ratio metrics); 'ahead'/'behind': the 95% interval wholly on that "
                   "side of zero; 'tie': two one-sided t-tests within the margin at 5%.")
        st.dataframe(pd.DataFrame(checks), hide_index=True)
    if unrepresented:
        st.caption(f"Reported, not counted — neither arm can represent the task there, so these measure how each "
                   f"approximates it, not what the claim is about: {'; '.join(unrepresented)}.")
    families = family_table(claim)
    if families:
        st.subheader("Beside the verdict: families of comparisons (reported, not counted)")
        st.caption("The reference against each family's arms, metric by metric, worded under Holm's correction over "
                   "the family: 'ahead'/'behind' where it still rejects, 'nominally' where only the unadjusted "
                   "interval excludes zero, 'exact' for metrics with no spread over repeats.")
        st.dataframe(pd.DataFrame(families), hide_index=True)
    bound = implementation_bound_sentence(claim)
    if bound:
        st.warning(bound)
    show_evidence_figures(claim, results_name)
    a, b = st.columns(2)
    a.dataframe(pd.DataFrame(arm_table(claim)), hide_index=True)
    b.dataframe(pd.DataFrame(claim["comparisons"]), hide_index=True)
    csv = folder / f"{claim['key']}.csv"
    if csv.is_file():
        a.download_button("Download CSV", csv.read_bytes(), csv.name, "text/csv", key=f"csv_{claim['key']}", on_click="ignore")
    else:
        a.caption(f"{csv.name} is missing from the results folder.")
    for name, scale_doc in scaled:
        for at in claims_at_scale(scale_doc, claim["key"]):
            st.subheader(f"{at['title']}, {scale_words(name)}")
            st.caption(f"Computed {scale_data_words(scale_doc).removeprefix(', ') or 'on the published data sets'}.")
            colour, words = scale_verdict_words(name, at)
            st.markdown(f"**Verdict:** :{colour}-badge[{words}]. {at.get('seeds', '')} {samples_word(at)}. {at['scale']}")
            beside = paper_beside(at)
            if beside:
                st.markdown("**Beside the paper:** its number, ours on the test split, and the difference")
                st.dataframe(pd.DataFrame(beside), hide_index=True)
            if at.get("deviations"):
                st.caption("Where the paper is silent or this differs from it: " + " ".join(at["deviations"]))
            a, b = st.columns(2)
            a.dataframe(pd.DataFrame(arm_table(at)), hide_index=True)
            b.dataframe(pd.DataFrame(at["comparisons"]), hide_index=True)

st.header("What this evidence cannot speak to")
st.caption("What the paper reports that these results do not measure, from each claim's own list; a verdict above is "
           "about what it measured, at this scale, and nothing here.")
for title, gaps in cannot_speak_to(doc["claims"]):
    st.markdown(f"**{title}**\n" + "\n".join(f"- {gap}" for gap in gaps))
