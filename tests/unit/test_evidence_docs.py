"""docs/evidence.md's verdict table is what the shipped results.json says, generated, never typed."""

import copy
from pathlib import Path

import pytest

from damcha.evidence.docs_table import BEGIN, END, verdict_table, with_table
from damcha.evidence.results import load_results

ROOT = Path(__file__).resolve().parents[2]


def test_the_docs_verdict_table_is_generated_from_the_shipped_results():
    text = (ROOT / "docs" / "evidence.md").read_text()
    shipped = load_results(ROOT / "checkpoints" / "evidence")
    assert text.split(BEGIN, 1)[1].split(END, 1)[0].strip() == verdict_table(shipped), \
        "docs/evidence.md's verdict table differs from results.json: run python -m damcha.evidence.docs_table"
    assert with_table(text, shipped) == text
    for claim in shipped["claims"]:
        assert f"| {claim['title']} |" in text


def test_a_changed_verdict_changes_the_generated_table():
    shipped = load_results(ROOT / "checkpoints" / "evidence")
    changed = copy.deepcopy(shipped)
    changed["claims"][0]["verdict"] = "holds"
    changed["claims"][0]["verdict_kind"] = "learned"
    assert verdict_table(changed) != verdict_table(shipped)
    with pytest.raises(ValueError, match="markers"):
        with_table("no markers here", shipped)
