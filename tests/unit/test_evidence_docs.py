"""docs/evidence.md's verdict table is what the shipped results.json says (tools/generated_docs.py writes it;
tests/unit/test_generated_docs.py fails when the two drift), and it changes when a verdict does."""

import copy
from pathlib import Path

from damcha.evidence.results import load_results
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
