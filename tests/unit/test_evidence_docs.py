"""docs/evidence.md's verdict table is what the shipped results.json says (tools/generated_docs.py writes it;
tests/unit/test_generated_docs.py fails when the two drift), and it changes when a verdict does."""

import copy
from pathlib import Path

from damcha.evidence.documents import load_results
from damcha.evidence.view import verdict_table_markdown

ROOT = Path(__file__).resolve().parents[2]


def test_the_docs_verdict_table_names_every_shipped_claim_with_its_verdict():
    text = (ROOT / "docs" / "evidence.md").read_text()
    shipped = load_results(ROOT / "checkpoints" / "evidence")
    table = text.split("<!-- generated: verdicts -->\n", 1)[1].split("<!-- end: verdicts -->", 1)[0]
    assert table.strip() == verdict_table_markdown(shipped)
    for claim in shipped["claims"]:
        assert f"| {claim['title']} |" in table


def test_a_changed_verdict_changes_the_generated_table():
    shipped = load_results(ROOT / "checkpoints" / "evidence")
    changed = copy.deepcopy(shipped)
    changed["claims"][0].update(verdict="holds", verdict_kind="learned")
    assert verdict_table_markdown(changed) != verdict_table_markdown(shipped)


def test_the_docs_numbers_are_the_shipped_results_and_a_changed_number_changes_them():
    """Every claim's arms table and counted comparisons in docs/evidence.md are generated from results.json:
    each arm's mean as the page shows it stands there, and moving one mean moves the block."""
    from damcha.evidence.view import arm_table, claim_numbers_markdown

    text = (ROOT / "docs" / "evidence.md").read_text()
    shipped = load_results(ROOT / "checkpoints" / "evidence")
    block = text.split("<!-- generated: numbers -->\n", 1)[1].split("<!-- end: numbers -->", 1)[0]
    assert block.strip() == claim_numbers_markdown(shipped)
    for claim in shipped["claims"]:
        assert f"#### {claim['title']}" in block
        for row in arm_table(claim):
            assert "| " + " | ".join(str(v) for v in row.values()) + " |" in block, (claim["key"], row["arm"])
    changed = copy.deepcopy(shipped)
    changed["claims"][0]["details"][0]["mean"] += 1.0  # (the arms table reads each metric's details)
    assert claim_numbers_markdown(changed) != claim_numbers_markdown(shipped)


def test_every_shipped_evidence_csv_reads_back_with_the_csv_module_as_its_results():
    """An arm named with a comma ("DAMCHA, f from the identity") is quoted: each of the four tables of every
    claim's CSV reads back with Python's csv module at its header's width, and its values are the results'."""
    import csv

    from damcha.evidence.results import CSV_SECTIONS

    doc = load_results(ROOT / "checkpoints" / "evidence")
    for claim in doc["claims"]:
        text = (ROOT / "checkpoints" / "evidence" / f"{claim['key']}.csv").read_text()
        tables = [list(csv.reader(part.splitlines())) for part in text.rstrip("\n").split("\n\n")]
        assert [",".join(t[0]) for t in tables] == list(CSV_SECTIONS), claim["key"]
        for table in tables:
            assert all(len(row) == len(table[0]) for row in table), (claim["key"], table[0])
        values = {(arm, int(seed), metric): float(value) for arm, seed, metric, value in tables[0][1:]}
        assert values == {(arm, s, k): v for arm, rows in claim["values"].items() for s, row in enumerate(rows)
                          for k, v in row.items()}, claim["key"]


def test_no_interval_in_the_evidence_docs_prose_is_typed_by_hand():
    """An interval written in docs/evidence.md outside its generated sections reads as a current result: each must
    be one the results generate (inside a generated section), or not be there (a restatement's old figures were)."""
    import re

    text = (ROOT / "docs" / "evidence.md").read_text()
    generated = re.compile(r"<!-- generated: (\S+) -->\n.*?<!-- end: \1 -->", re.S)
    inside = " ".join(" ".join(m.group(0).split()) for m in generated.finditer(text))
    interval = re.compile(r"-?\d[\d.,e+-]*\s+\[-?\d[\d.,e+-]*,\s+-?\d[\d.,e+-]*\]")
    typed = [" ".join(i.split()) for i in interval.findall(generated.sub("", text))]
    assert not [i for i in typed if i not in inside], typed
