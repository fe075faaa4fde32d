"""The guides' examples as the suite holds them: each guide's code block, run as written (docs/mechanisms.md's
mechanism, docs/extending.md's data set, figure, claim and page), so a guide that drifts from the code fails
CI. The registry-walking tests walk the guide's mechanism beside the toy of tests/support/toy_mechanism.py."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from damcha.model import mechanisms
from damcha.model.mechanisms import Mechanism, Variant
from tests.support.toy_mechanism import TOY_VARIANT, Tied

ROOT = Path(__file__).resolve().parents[2]
MECHANISM_GUIDE = ("mechanisms.md", "## Adding an attention mechanism")
FIGURE_GUIDE = ("extending.md", "## Adding a figure")


def guide_block(page: str, heading: str) -> str:
    """The first Python block under `heading` in docs/`page`, as a reader copies it."""
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    start = text.index("```python", text.index(heading)) + len("```python")
    return text[start:text.index("```", start)]


@functools.cache
def guide_mechanism() -> tuple[Mechanism, tuple[Variant, ...]]:
    """docs/mechanisms.md's example, run as written (it registers itself), then taken off the registry again:
    its mechanism and variants."""
    before = set(mechanisms.mechanism_names())
    exec(compile(guide_block(*MECHANISM_GUIDE), f"docs/{MECHANISM_GUIDE[0]}", "exec"), {})
    [name] = set(mechanisms.mechanism_names()) - before
    mechanism = mechanisms.get_mechanism(name)
    variants = tuple(v for v in mechanisms.variants() if v.mechanism == name)
    mechanisms.unregister(name)
    return mechanism, variants


@contextmanager
def examples_registered() -> Iterator[None]:
    """The toy mechanism and the guide's example on the registry for the length of the block (those already on
    it, in an enclosing block, stay)."""
    mechanism, variants = guide_mechanism()
    added = [(m, vs) for m, vs in ((Tied(), (TOY_VARIANT,)), (mechanism, variants))
             if m.name not in mechanisms.mechanism_names()]
    for m, vs in added:
        mechanisms.register(m, *vs)
    try:
        yield
    finally:
        for m, _ in added:
            mechanisms.unregister(m.name)


def walked_variants() -> tuple[str, ...]:
    """Every registered variant, the toy's and the guide example's included: what a registry-walking test
    parametrises over (its tests run under examples_registered)."""
    with examples_registered():
        return mechanisms.variant_names()


@contextmanager
def guide_figure_registered() -> Iterator[list[str]]:
    """docs/extending.md's figure, run as written (it adds itself to RECORD_FIGURES), for the length of the
    block: the names it added."""
    from damcha.views.figure_sets import RECORD_FIGURES

    before = set(RECORD_FIGURES)
    exec(compile(guide_block(*FIGURE_GUIDE), f"docs/{FIGURE_GUIDE[0]}", "exec"), {})
    added = [name for name in RECORD_FIGURES if name not in before]
    try:
        yield added
    finally:
        for name in added:
            RECORD_FIGURES.pop(name, None)
