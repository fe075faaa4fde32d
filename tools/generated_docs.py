"""The lists in the docs that the registries decide (variants, mechanism settings, data sets) and the verdict
table and every claim's numbers that the shipped evidence results decide, and the budget the cost table gives.

The docs hold each between `<!-- generated: NAME -->` and `<!-- end: NAME -->`; `python
tools/generated_docs.py` rewrites them from the registries, and tests/unit/test_generated_docs.py fails
when a block differs from what the registries give (a data set, variant or setting added or
renamed without the docs following).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from damcha.evidence.costs import SHIPPED_TABLE, CostTable, budget_markdown, generated_setting, scale_claims_chosen
from damcha.evidence.documents import load_results
from damcha.evidence.scales import PAPER, SCALES
from damcha.evidence.view import (
    claim_numbers_markdown,
    fresh_run_sentence,
    rate_edges_sentence,
    reproduction_sentence,
    scale_claims_markdown,
    verdict_table_markdown,
)
from damcha.inputs.datasets import DATA_SETS
from damcha.model.mechanisms import get_mechanism, mechanism_names, variant_names

DOCS = Path(__file__).resolve().parent.parent / "docs"  # tools/ sits beside docs/
SHIPPED_EVIDENCE = DOCS.parent / "checkpoints" / "evidence"
REPRODUCTION = DOCS.parent / "benchmarks" / "results" / "reproduction.json"  # benchmarks/reproduction.py


def _names(names) -> str:
    return ", ".join(f"`{n}`" for n in names)


def variants_block() -> str:
    return f"Variants ({len(variant_names())}): {_names(variant_names())}."


def options_block() -> str:
    settings = [s.name for m in mechanism_names() for s in get_mechanism(m).declared_settings]
    return f"`--option NAME=VALUE` takes a mechanism's own settings: {_names(settings)}; unknown names are refused."


def data_sets_block() -> str:
    rows = ["| `--dataset` | what it is | task | `--data-path` |", "|---|---|---|---|"]
    for spec in DATA_SETS.values():
        path = "none (bundled)" if spec.bundled else (spec.needs_path or "none").replace("<", "&lt;").replace(">", "&gt;")
        rows.append(f"| `{spec.name}` | {spec.title} | {spec.task.replace('_', ' ')} | {path} |")
    return "\n".join(rows)


def verdicts_block() -> str:
    return verdict_table_markdown(load_results(SHIPPED_EVIDENCE))


def numbers_block() -> str:
    return claim_numbers_markdown(load_results(SHIPPED_EVIDENCE))


def rate_edges_block() -> str:
    return rate_edges_sentence(load_results(SHIPPED_EVIDENCE))


def fresh_run_block() -> str:
    return fresh_run_sentence(load_results(SHIPPED_EVIDENCE))


def reproduction_block() -> str:
    return reproduction_sentence(json.loads(REPRODUCTION.read_text()))


def budget_block() -> str:
    return budget_markdown(CostTable.read(SHIPPED_TABLE), list(SCALES.values()))


def paper_claims_block() -> str:
    with generated_setting(PAPER) as setting:
        return scale_claims_markdown(PAPER, scale_claims_chosen(setting))


BLOCKS = {"variants": variants_block, "options": options_block, "data-sets": data_sets_block,
          "verdicts": verdicts_block, "numbers": numbers_block, "rate-edges": rate_edges_block,
          "reproduction": reproduction_block, "fresh-run": fresh_run_block,
          "budget": budget_block, "paper-claims": paper_claims_block}
PAGES = ("library.md", "evidence.md", "reproduce.md")


def _pattern(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- generated: {re.escape(name)} -->\n)(?:.*?\n)?(<!-- end: {re.escape(name)} -->)", re.S)


def rendered(text: str) -> str:
    """`text` with every generated block it holds rewritten from the registries."""
    for name, block in BLOCKS.items():
        text = _pattern(name).sub(lambda m, b=block: m.group(1) + b() + "\n" + m.group(2), text)
    return text


def main(argv: list[str] | None = None, docs: Path = DOCS) -> int:
    """Rewrite the generated blocks of the pages in `docs`; with --check, write nothing and exit 1 naming each page
    whose blocks differ from what the registries and results give."""
    parser = argparse.ArgumentParser(description="The docs' generated blocks, from the registries and the results.")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a page's blocks are stale")
    args = parser.parse_args(argv)
    stale = []
    for page in PAGES:
        path = docs / page
        text = path.read_text(encoding="utf-8")
        new = rendered(text)
        if new == text:
            continue
        stale.append(path)
        if not args.check:
            path.write_text(new, encoding="utf-8")
            print(f"rewrote the generated blocks of {path}", file=sys.stderr)
    if args.check and stale:
        print("stale generated blocks in " + ", ".join(map(str, stale)) + ": run `python tools/generated_docs.py`",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
