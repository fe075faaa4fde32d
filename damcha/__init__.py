"""DAMCHA Lab: data-adaptive Mahalanobis cross-head attention, its ablations and baselines.

Public API (stable names), each imported on first use (PEP 562), so `import damcha.model.config`
loads the model layer only:
    ModelConfig, variant_config, variant_names          -- describe a model
    build_model, Transformer, ModelOutput               -- build and run it
    DamchaOptions, MetricMode                           -- DAMCHA's per-call options
    inspect_input, InspectionRecord, identifiability_note  -- look inside for one input
    mechanisms                                          -- the registry of attention mechanisms
"""

import tomllib
from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from damcha.runs.workers import guard_worker

guard_worker()  # before anything heavy: a worker whose command is killed while it imports dies too


def _version() -> str:
    """The installed distribution's version; from pyproject.toml in a checkout that is not installed."""
    try:
        return version("damcha")
    except PackageNotFoundError:
        with (Path(__file__).resolve().parent.parent / "pyproject.toml").open("rb") as f:
            return tomllib.load(f)["project"]["version"]


__version__ = _version()

_EXPORTS = {
    "IGNORE_INDEX": "damcha.model.transformer",
    "DamchaOptions": "damcha.model.mechanisms",
    "InspectionRecord": "damcha.analysis.inspection",
    "MetricMode": "damcha.model.mechanisms.damcha.metric",
    "ModelConfig": "damcha.model.config",
    "ModelOutput": "damcha.model.transformer",
    "Transformer": "damcha.model.transformer",
    "build_model": "damcha.model.transformer",
    "identifiability_note": "damcha.analysis.inspection",
    "inspect_input": "damcha.analysis.inspection",
    "variant_config": "damcha.model.config",
    "variant_names": "damcha.model.mechanisms",
}
__all__ = sorted([*_EXPORTS, "mechanisms"])


def __getattr__(name: str):
    if name == "mechanisms":
        value = import_module("damcha.model.mechanisms")
    elif name in _EXPORTS:
        value = getattr(import_module(_EXPORTS[name]), name)
    else:
        raise AttributeError(f"module 'damcha' has no attribute {name!r}")
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
