"""nnsight on the project's Transformer. `nnsight.NNsight(model)` already traces it (read or edit any
module's output, DAMCHA's shared metric included, in execution order); `DamchaNNsight` adds what a trace
of several invokes needs: how many rows an invoke's input holds and how the invokes' inputs join into
one call (tokens, targets and the real-token mask stacked on the batch dimension; the other arguments
must agree), so each invoke reads and edits its own rows of one forward pass.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

try:
    from nnsight import NNsight
    from nnsight.intervention.batching import Batcher
except ImportError:  # pragma: no cover - the message is the point
    raise ImportError("damcha.interop.nnsight needs nnsight: pip install 'damcha[lens]'") from None

BATCHED = ("targets", "real")  # keyword inputs with a row per sequence, stacked like the tokens


class RecordBatcher(Batcher):
    """nnsight's batcher, also through the project's records: the model's ModelOutput, a layer's
    AttentionOutput, DAMCHA's HeadMetric are dataclasses, whose tensors nnsight's own walk (lists,
    tuples, dicts) does not reach; without this every invoke would read and edit every row."""

    def narrow(self, value: Any, group) -> Any:
        if not self.batching or group is None:
            return value
        return _each_tensor(value, lambda t: self._narrow_tensor(t, group) if t.dim() else t)  # a scalar: no rows

    def widen(self, full: Any, group, edited: Any) -> Any:
        if not self.batching or group is None:
            return edited
        if dataclasses.is_dataclass(full) and not isinstance(full, type):
            return dataclasses.replace(full, **{f.name: self.widen(getattr(full, f.name), group, getattr(edited, f.name))
                                                for f in dataclasses.fields(full) if f.init})
        if isinstance(full, list | tuple) and not hasattr(full, "_fields"):
            return type(full)(self.widen(f, group, e) for f, e in zip(full, edited))
        if isinstance(full, torch.Tensor) and not full.dim():
            return edited
        return super().widen(full, group, edited)


def _each_tensor(value: Any, fn) -> Any:
    if isinstance(value, torch.Tensor):
        return fn(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: _each_tensor(getattr(value, f.name), fn)
                                             for f in dataclasses.fields(value) if f.init})
    if isinstance(value, list | tuple):
        items = [_each_tensor(v, fn) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    if isinstance(value, dict):
        return type(value)({k: _each_tensor(v, fn) for k, v in value.items()})
    return value


class DamchaNNsight(NNsight):
    """NNsight for damcha.model.transformer.Transformer whose traces take several invokes:

        with DamchaNNsight(model).trace() as tracer:
            with tracer.invoke(tokens_a, targets=targets_a):
                loss_a = model.output.token_loss.save()   # rows of this invoke only
            with tracer.invoke(tokens_b, targets=targets_b):
                ...
    """

    _batcher_class = RecordBatcher

    def _batch_size(self, *inputs: Any, **kwargs: Any) -> int:
        tokens = inputs[0] if inputs else kwargs.get("tokens")
        return 0 if tokens is None else int(tokens.shape[0])

    def _batch(self, invokes: list[tuple], fn: Any) -> tuple:
        if len(invokes) <= 1:
            return invokes[0] if invokes else ((), {})
        tokens = [inputs[0] if inputs else kwargs["tokens"] for inputs, kwargs in invokes]
        lengths = {t.shape[1] for t in tokens}
        if len(lengths) > 1:
            raise ValueError(f"invokes of one trace must have inputs of one length (got {sorted(lengths)}); pad them "
                             "to one length and pass real= to mark the real tokens")
        joined: dict[str, Any] = {}
        for name in BATCHED:
            given = [kwargs.get(name) for _, kwargs in invokes]
            if any(g is not None for g in given):
                if any(g is None for g in given):
                    raise ValueError(f"{name}= must be given to every invoke of a trace or to none")
                joined[name] = torch.cat(given, dim=0)
        rest = [{k: v for k, v in kwargs.items() if k not in (*BATCHED, "tokens")} for _, kwargs in invokes]
        if any(r != rest[0] for r in rest[1:]):
            raise ValueError("invokes of one trace run as one forward pass: their other arguments (options, "
                             "need_intermediates, stochastic) must be the same")
        return (torch.cat(tokens, dim=0),), {**rest[0], **joined}
