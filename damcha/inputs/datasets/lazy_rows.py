"""Rows of a data set made when they are indexed, so a large split trains batch by batch.

`LazyRows` stands where a split's tensor would (`train_inputs`, `test_targets`…): indexing it with
an index tensor, a slice or an int makes those rows only, from a compact store (uint8 images, an
Arrow column, image files); `len` and `shape` answer without making anything.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch


class LazyRows:
    def __init__(self, n: int, row_shape: tuple[int, ...], make: Callable[[np.ndarray], torch.Tensor]):
        self._n, self._row_shape, self._make = n, tuple(row_shape), make

    def __len__(self) -> int:
        return self._n

    @property
    def shape(self) -> torch.Size:
        return torch.Size((self._n, *self._row_shape))

    @property
    def ndim(self) -> int:
        return 1 + len(self._row_shape)

    def __getitem__(self, index) -> torch.Tensor:
        if isinstance(index, tuple):  # rows first, then the rest within them: rows[i, 0]
            return self[index[0]][(slice(None), *index[1:]) if not isinstance(index[0], int | np.integer) else index[1:]]
        if isinstance(index, int | np.integer):
            return self._make(np.arange(self._n)[[int(index)]])[0]
        if isinstance(index, slice):
            return self._make(np.arange(self._n)[index])
        return self._make(np.asarray(index.cpu() if isinstance(index, torch.Tensor) else index, dtype=np.int64))

    def numpy(self) -> np.ndarray:
        """Every row at once (small splits only: this is what the lazy store avoids)."""
        return self[:].numpy()

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        rows = self.numpy()
        return rows if dtype is None else rows.astype(dtype)
