"""Checks of the synthetic tasks' construction (not of any trained model) that must pass before a
claim on those tasks gets a verdict."""

from __future__ import annotations

from damcha.inputs import synthetic as syn

# Checks of the synthetic tasks' construction (not of any trained model): name -> the bound its value stays below.
SANITY_BOUNDS = {
    "regression teacher: batched vs loop reference, max abs": 1e-4,
    "permutation teacher (K = 24): batched vs loop reference, max abs": 1e-4,
    "regression oracle at the teacher's parameters: relative MSE": 1e-6,
    "permutation oracle (K = 1) at the teacher's parameters: relative MSE": 1e-6,
    "within-slice teacher (K = 16): batched vs loop reference, max abs": 1e-4,
    "within-slice oracle (each code's blocks as a row-sum metric): relative MSE": 1e-10,
    "regression teacher e = 0.25: cross-head share minus 0.25, abs": 1e-6,
    "classes d_e = 4: largest share minus 1/15": 0.02,
}
REGRESSION_CHECKS = tuple(k for k in SANITY_BOUNDS if k.startswith("regression"))
PERMUTATION_CHECKS = tuple(k for k in SANITY_BOUNDS if k.startswith("permutation"))
WITHIN_SLICE_CHECKS = tuple(k for k in SANITY_BOUNDS if k.startswith("within-slice"))
CLASSIFICATION_CHECKS = tuple(k for k in SANITY_BOUNDS if k.startswith("classes"))


def sanity_checks() -> dict[str, float]:
    """What must hold before the synthetic numbers are believed (SANITY_BOUNDS): the teachers' batched
    code against explicit loops, oracle models at the teachers' parameters (per code where the relation
    changes with the input), the entanglement share, the class balance."""
    regression = syn.regression_task(0.5, syn.task_seed(0.5, 0))
    values = [syn.loop_reference_error(regression),
              syn.loop_reference_error(syn.permutation_task(24, syn.task_seed(24, 0))),
              syn.oracle_error(regression),
              syn.oracle_error(syn.permutation_task(1, syn.task_seed(1, 0))),
              syn.loop_reference_error(syn.within_slice_task(16, syn.task_seed(16, 0))),
              syn.coded_oracle_error(syn.within_slice_task(16, syn.task_seed(16, 0))),
              abs(syn.cross_head_share(syn.teacher_metric(0.25, 1)) - 0.25),
              float(syn.label_balance(4).max()) - 1 / 15]
    return dict(zip(SANITY_BOUNDS, values))


def failed_checks(checks: dict[str, float], names: tuple[str, ...]) -> list[str]:
    """The named checks that are missing or not below their bound, as sentences."""
    return [f"{name}: {checks[name]:.3g} (needs below {SANITY_BOUNDS[name]:.3g})" if name in checks else
            f"{name}: not computed" for name in names
            if name not in checks or not checks[name] < SANITY_BOUNDS[name]]
