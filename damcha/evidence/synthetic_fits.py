"""A synthetic tuning unit's fits at each learning rate, kept in the work folder (a unit stopped between its fits
resumes where it stopped), and what synthetic units store of their results.

A fit is deterministic in (unit, rate) on one machine (damcha.inputs.synthetic.fit seeds itself), so a fit
read here is the fit a fresh unit would make (docs/evidence.md, "What reproduces where")."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from damcha.inputs.synthetic import RateFit, SyntheticResult
from damcha.runs.checkpoints import write_text_atomic

FOLDER = "synthetic-fits"
_VALIDATION_KEY = re.compile(r"^validation_(?P<metric>.+)_lr=(?P<lr>[^_]+)$")


class FitRecord:
    """The fits of one unit (its key in units.jsonl), one JSON file in the work folder's FOLDER."""

    def __init__(self, work: Path, unit: str):
        self.unit = unit
        self.path = Path(work) / FOLDER / f"{hashlib.sha1(unit.encode()).hexdigest()}.json"

    def read(self) -> dict[float, RateFit]:
        try:
            doc = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        if doc.get("unit") != self.unit:  # (a hash collision or a foreign file: fit afresh)
            return {}
        return {float(lr): RateFit(**fit) for lr, fit in doc.get("fits", {}).items()}

    def write(self, lr: float, fit: RateFit) -> None:
        self.save({**self.read(), lr: fit})

    def save(self, fits: dict[float, RateFit]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(self.path, json.dumps({"unit": self.unit, "fits": {
            f"{rate:g}": vars(f) for rate, f in sorted(fits.items())}}))


def stored_value(result: SyntheticResult) -> dict[str, float]:
    """What a synthetic unit stores of its result (parsed back by `rates_tried`): the test score, the parameter
    count, the rate chosen, and each rate's validation score."""
    return {result.metric: result.score, "parameters": float(result.parameters), "lr": result.lr,
            **{f"validation_{result.metric}_lr={lr:g}": v for lr, v in result.validation.items()}}


def rates_tried(value: dict) -> dict[float, float]:
    """rate -> validation score of a synthetic unit's stored value (empty for any other unit's)."""
    return {float(m["lr"]): v for key, v in value.items() if (m := _VALIDATION_KEY.match(key))}


def validation_scores(value: dict) -> tuple[str, dict[float, float]]:
    """A synthetic tuning unit's metric and rate -> validation score."""
    metric = next((m["metric"] for key in value if (m := _VALIDATION_KEY.match(key))), "")
    return metric, rates_tried(value)


def tuning_value(result: SyntheticResult) -> dict[str, float]:
    """What a synthetic tuning unit stores: the rate chosen and each rate's validation score (its test score is
    never read: the tuning seed is not reported)."""
    return {key: v for key, v in stored_value(result).items() if key == "lr" or _VALIDATION_KEY.match(key)}


def tuning_value_of_row(row: dict) -> dict[str, float]:
    """The tuning unit's value that a results document's synthetic tuning row (tuning.tuning_table) records."""
    return {"lr": float(row["chosen"]), **{f"validation_{row['metric']}_lr={float(lr):g}": scores[0]
                                           for lr, scores in row["validation"].items()}}
