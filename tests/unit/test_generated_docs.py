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


def test_check_writes_nothing_and_fails_on_a_stale_block_and_the_plain_run_rewrites_it(tmp_path, monkeypatch, capsys):
    import generated_docs

    monkeypatch.setattr(generated_docs, "BLOCKS", {"variants": BLOCKS["variants"]})  # the one block this test edits
    for page in PAGES:
        (tmp_path / page).write_text((DOCS / page).read_text(encoding="utf-8"), encoding="utf-8")
    library = tmp_path / "library.md"
    stale = library.read_text(encoding="utf-8").replace("Variants (", "Variants (a stale count, ", 1)
    library.write_text(stale, encoding="utf-8")
    assert generated_docs.main(["--check"], docs=tmp_path) == 1
    assert library.read_text(encoding="utf-8") == stale and "stale generated blocks in" in capsys.readouterr().err
    assert generated_docs.main([], docs=tmp_path) == 0
    assert library.read_text(encoding="utf-8") == (DOCS / "library.md").read_text(encoding="utf-8")
    assert generated_docs.main(["--check"], docs=tmp_path) == 0
