"""How an evidence unit runs: the size it trains at (`Scale`; None: the demo's) and where it finds its
data and device (`Setting`). The scales themselves, and which claims they run, live in scales.py."""

from __future__ import annotations

from dataclasses import dataclass, field

from damcha.inputs.datasets import DATA_SETS, data_set_spec, load_dataset
from damcha.inputs.datasets.base import AtScale
from damcha.runs.memory import AUTO_MICRO_BATCH


@dataclass(frozen=True, eq=False)  # compared (and cached) by identity: one object per scale
class Scale:
    """name: what --scale takes. claims: catalogue keys run at this scale. model: ModelConfig fields of
    every model arm. The data sets a scale runs on declare their place in it themselves
    (`DataSetSpec.scales[name]`: the demo data sets they stand in for, the files, the training settings).
    smoke: claims are built as --quick builds them (fewer arms). deviations: what the scale's models differ in
    from the paper's, declared on every claim the scale runs. What its runs cost is measured per device
    (damcha.evidence.costs)."""

    name: str
    description: str
    claims: tuple[str, ...]
    model: dict
    efficiency_model: dict
    efficiency_case: dict
    smoke: bool
    nonstandard_ok: bool
    compile: bool = False
    default_device: str = "cpu"
    notes: tuple[str, ...] = field(default_factory=tuple)
    deviations: tuple[str, ...] = field(default_factory=tuple)

    def place(self, dataset: str) -> AtScale:
        return data_set_spec(dataset).scales[self.name]

    def stands_for(self, demo: str) -> tuple[str, ...]:
        """The data sets the claims on the demo data set `demo` run on at this scale (one claim each)."""
        return tuple(n for n, spec in DATA_SETS.items() if self.name in spec.scales and demo in spec.scales[self.name].replaces)

    def model_overrides(self, dataset: str) -> tuple:
        block = self.place(dataset).block_size
        return tuple({**self.model, **({"block_size": block} if block else {})}.items())


@dataclass(frozen=True)
class Setting:
    """How a unit runs: at which scale (None: the demo's), on which files (data set -> path) and device."""

    scale: Scale | None = None
    files: tuple[tuple[str, str], ...] = ()
    device: str = "cpu"

    def path(self, dataset: str) -> str | None:
        return dict(self.files).get(dataset)

    def load(self, dataset: str, block_size: int = 128):
        return load_dataset(dataset, self.path(dataset), block_size,
                            nonstandard_ok=bool(self.scale and self.scale.nonstandard_ok))

    @property
    def at_scale(self) -> Scale:
        """The scale this setting runs at (the demo's setting has none: asking for it is refused)."""
        if self.scale is None:
            raise ValueError("the demo's setting runs at no scale (a scale's setting is built with --scale)")
        return self.scale

    def train_fields(self, dataset: str) -> dict:
        """A unit's TrainConfig fields at the scale: the data set's training there, each step's batch in the
        micro-batches the memory plan fits the unit's device (unless the data set sets its own)."""
        return {"micro_batch_size": AUTO_MICRO_BATCH, **self.at_scale.place(dataset).train,
                "data_path": self.path(dataset), "nonstandard_data": self.at_scale.nonstandard_ok,
                "device": self.device}


DEMO = Setting()
