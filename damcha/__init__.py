"""DAMCHA Lab: data-adaptive Mahalanobis cross-head attention, its ablations and baselines.

Public API (stable names):
    ModelConfig, MetricMode, VARIANTS, variant_config   -- describe a model
    build_model, Transformer, ModelOutput               -- build and run it
    inspect_input, InspectionRecord, identifiability_note  -- look inside for one input
"""

from .config import VARIANTS, MetricMode, ModelConfig, variant_config
from .inspection import InspectionRecord, identifiability_note, inspect_input
from .model import IGNORE_INDEX, ModelOutput, Transformer, build_model

__version__ = "0.1.0"

__all__ = [
    "IGNORE_INDEX",
    "VARIANTS",
    "InspectionRecord",
    "MetricMode",
    "ModelConfig",
    "ModelOutput",
    "Transformer",
    "build_model",
    "identifiability_note",
    "inspect_input",
    "variant_config",
]
