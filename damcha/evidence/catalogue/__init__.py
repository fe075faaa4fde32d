"""The claim catalogue: each claim tested by `damcha evidence` is one module here defining
`claim(quick) -> Claim`, and one line in CLAIM_MODULES (page order). See docs/extending.md,
"Adding a claim"."""

from __future__ import annotations

from collections.abc import Callable

from damcha.evidence.catalogue import (
    adaptivity,
    fig12_regression,
    fig13_classification,
    fig13_entanglement,
    newer_head_interaction,
    permutation_relations,
    table1_digits,
    table1_images,
    table2_efficiency,
    table3_depth,
    table3_modes,
    table4_ablations,
    table5_text,
    table6_classification,
    within_slice_codes,
)
from damcha.evidence.records import Claim

CLAIM_MODULES = (table1_digits, table1_images, table2_efficiency, table3_depth, table4_ablations, table3_modes,
                 table5_text, table6_classification, adaptivity, fig12_regression, permutation_relations,
                 within_slice_codes, fig13_classification, fig13_entanglement, newer_head_interaction)
CLAIM_BUILDERS: list[Callable[[bool], Claim]] = [m.claim for m in CLAIM_MODULES]


def claims(quick: bool = False) -> list[Claim]:
    """The claims tested, in page order. quick: a subset of arms, for a smoke run."""
    return [build(quick) for build in CLAIM_BUILDERS]


def register(build: Callable[[bool], Claim]) -> None:
    """Add a claim (its builder), after the catalogue's own."""
    CLAIM_BUILDERS.append(build)


def unregister(key: str) -> None:
    CLAIM_BUILDERS[:] = [b for b in CLAIM_BUILDERS if b(True).key != key]
