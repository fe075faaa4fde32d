"""The registry of data sets: what `--dataset` takes, each declared once by its own module.

A data set is one module here defining `SPECS` (its `DataSetSpec`s: name, modality, task, loader,
whether it ships with the install, what path it needs) and one line in `DATA_SET_MODULES`; nothing
outside its module asks its name (see docs/extending.md, "Adding a data set").
"""

from __future__ import annotations

from damcha.inputs.datasets import (
    benchmark_corpora,
    cifar,
    digits,
    image_folder,
    parquet_sets,
    sample_images,
    text,
)
from damcha.inputs.datasets.base import TASKS, DataError, DataSet, DataSetSpec, fixed_val_windows, windows

DATA_SET_MODULES = (digits, text, benchmark_corpora, cifar, sample_images, parquet_sets, image_folder)
DATA_SETS: dict[str, DataSetSpec] = {s.name: s for module in DATA_SET_MODULES for s in module.SPECS}

__all__ = ["DATA_SETS", "TASKS", "DataError", "DataSet", "DataSetSpec", "bundled", "data_set_spec",
           "fixed_val_windows", "load_dataset", "modality_of_dataset", "register", "unregister", "windows"]


def register(spec: DataSetSpec) -> None:
    """Add a data set (replacing one of the same name): `load_dataset`, `train` and the app then know it."""
    DATA_SETS[spec.name] = spec


def unregister(name: str) -> None:
    DATA_SETS.pop(name, None)


def data_set_spec(name: str) -> DataSetSpec:
    if name not in DATA_SETS:
        raise DataError(f"unknown data set {name!r}; expected one of {', '.join(DATA_SETS)}")
    return DATA_SETS[name]


def bundled(name: str) -> bool:
    """Whether the data set ships with the install (its validation samples need no file of the user's)."""
    return name in DATA_SETS and DATA_SETS[name].bundled


def modality_of_dataset(name: str) -> str:
    """The modality a data set's tokens are ('tokens' for a name not registered here, e.g. an import)."""
    return DATA_SETS[name].modality if name in DATA_SETS else "tokens"


def load_dataset(name: str, path: str | None = None, block_size: int = 128, split_seed: int = 0,
                 nonstandard_ok: bool = False) -> DataSet:
    """A registered data set, its modality (and so its loss unit) stamped from its declaration.
    nonstandard_ok: a data set checked against published files (`spec.published`) accepts a copy
    that differs (recorded as `standard_files: false`) instead of refusing it."""
    spec = data_set_spec(name)
    if spec.needs_path and not path:
        raise DataError(f"data set {name!r} needs --data-path to {spec.needs_path}")
    if spec.published:
        data = spec.load(path, block_size, split_seed, nonstandard_ok=nonstandard_ok)
    else:
        data = spec.load(path, block_size, split_seed)
    data.modality = spec.modality
    return data
