"""Per-seed values for every arm of a claim, made up (uniform in [0.1, 1]; a threshold arm its level), for tests
of how the results code reads a claim's comparisons whatever the numbers."""

import numpy as np

from damcha.evidence.records import Claim


def made_up_values(claim: Claim, seeds: int = 3) -> dict[str, list[dict]]:
    rng = np.random.default_rng(0)
    return {a.name: [{"constant": a.level} if a.kind == "constant" else
                     {m: float(rng.uniform(0.1, 1.0)) for m in (claim.metric, *claim.columns, *claim.compared)}
                     for _ in range(seeds)] for a in claim.arms}
