"""One input as the model takes it (a batch of one): the one place that knows token ids from vectors."""

from __future__ import annotations

import numpy as np
import torch


def as_model_input(values, cfg, device) -> torch.Tensor:
    """One input (or its targets) as a batch of one: (1, T) token ids, or (1, T, input_dim) floats."""
    if cfg.input_dim:
        return torch.as_tensor(np.asarray(values), dtype=torch.float32, device=device).reshape(1, -1, cfg.input_dim)
    return torch.as_tensor(np.asarray(values), dtype=torch.long, device=device).reshape(1, -1)
