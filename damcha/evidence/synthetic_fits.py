"""A synthetic unit's fits at each learning rate, kept in the work folder: a unit stopped between its fits
resumes where it stopped, and a unit whose stored choice lies at an edge of the rates it tried (results
made before the choice extended along the ladder, issue 63) goes on from its stored fits, not from scratch.

A fit is deterministic in (unit, rate) on one machine (damcha.inputs.synthetic.fit seeds itself), so a fit
read here is the fit a fresh unit would make (docs/evidence.md, "What reproduces where")."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from damcha.evidence import tuning
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


def choice_open(value: dict, quick: bool) -> bool:
    """Whether a stored synthetic unit chose an edge of the rates it tried that the ladder goes beyond:
    its value is not what the unit computes now (a quick run keeps its two rates)."""
    rates = rates_tried(value)
    return not quick and len(rates) > 1 and "lr" in value and tuning.beyond(value["lr"], list(rates)) is not None


def seed_from_value(work: Path, unit: str, value: dict) -> None:
    """Write a stored value's fits into the unit's record where it has none: every rate's validation score,
    and the chosen rate's test score and parameter count."""
    metric = next(m["metric"] for key in value if (m := _VALIDATION_KEY.match(key)))
    record = FitRecord(work, unit)
    stored = {lr: RateFit(validation, value[metric] if lr == value["lr"] else None,
                          int(value["parameters"]) if lr == value["lr"] else 0)
              for lr, validation in rates_tried(value).items()}
    record.save({**stored, **record.read()})


def settled(units: dict[str, dict], quick: bool, work: Path, write: bool = True) -> dict[str, dict]:
    """The stored units whose values stand; each synthetic unit whose choice is open is left out, to be
    computed on from its stored fits (written into the work folder where `write`: the main rank)."""
    still_open = {unit: value for unit, value in units.items() if choice_open(value, quick)}
    if write:
        for unit, value in still_open.items():
            seed_from_value(work, unit, value)
    return {unit: value for unit, value in units.items() if unit not in still_open}
