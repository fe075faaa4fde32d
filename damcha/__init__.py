"""DAMCHA Lab: data-adaptive Mahalanobis cross-head attention, its ablations and baselines.

Public API (stable names):
    ModelConfig, variant_config, variant_names          -- describe a model
    build_model, Transformer, ModelOutput               -- build and run it
    DamchaOptions, MetricMode                           -- DAMCHA's per-call options
    inspect_input, InspectionRecord, identifiability_note  -- look inside for one input
    mechanisms                                          -- the registry of attention mechanisms
"""

from damcha.runs.workers import guard_worker

guard_worker()  # before anything heavy: a worker whose command is killed while it imports dies too

__version__ = "0.1.0"

from damcha.analysis.inspection import InspectionRecord, identifiability_note, inspect_input  # noqa: E402
from damcha.model import mechanisms  # noqa: E402
from damcha.model.config import ModelConfig, variant_config  # noqa: E402
from damcha.model.mechanisms import DamchaOptions, variant_names  # noqa: E402
from damcha.model.mechanisms.damcha.metric import MetricMode  # noqa: E402
from damcha.model.transformer import IGNORE_INDEX, ModelOutput, Transformer, build_model  # noqa: E402

__all__ = [
    "IGNORE_INDEX",
    "DamchaOptions",
    "InspectionRecord",
    "MetricMode",
    "ModelConfig",
    "ModelOutput",
    "Transformer",
    "build_model",
    "identifiability_note",
    "inspect_input",
    "mechanisms",
    "variant_config",
    "variant_names",
]
