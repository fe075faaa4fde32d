"""The docs' lists of variants, mechanism settings and data sets are the registries' (tools/generated_docs.py)."""

import sys
from pathlib import Path

from damcha.inputs.datasets import DataSetSpec, register, unregister

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from generated_docs import BLOCKS, DOCS, PAGES, rendered  # noqa: E402


def test_every_generated_block_is_what_the_registries_give():
    found = set()
    for page in PAGES:
        text = (DOCS / page).read_text(encoding="utf-8")
        assert rendered(text) == text, f"docs/{page} is behind the registries: run python tools/generated_docs.py"
        found |= {name for name in BLOCKS if f"<!-- generated: {name} -->" in text}
    assert found == set(BLOCKS)  # every block is placed somewhere


def test_a_data_set_registered_without_the_docs_following_is_caught():
    text = (DOCS / "library.md").read_text(encoding="utf-8")
    register(DataSetSpec("my-corpus", "a corpus of mine", "byte_text", "next_token", lambda *a: None,
                         needs_path="a local text file"))
    try:
        assert rendered(text) != text and "`my-corpus`" in rendered(text)
    finally:
        unregister("my-corpus")
