"""damcha.interop.nnsight: several invokes of one trace run as one forward pass, each reading and editing
only its own rows of the project's records; inputs that cannot be joined are refused in words."""

from pathlib import Path

import pytest
import torch

pytest.importorskip("nnsight", reason="nnsight is not installed (pip install 'damcha[lens]'); CI installs it")

from damcha.interop.nnsight import DamchaNNsight  # noqa: E402
from damcha.runs.checkpoints import load_model  # noqa: E402

CHECKPOINTS = Path(__file__).resolve().parents[2] / "checkpoints"

TOKENS = torch.randint(0, 18, (3, 20), generator=torch.Generator().manual_seed(0))
TARGETS = torch.randint(0, 18, (3, 20), generator=torch.Generator().manual_seed(1))


def test_each_invoke_reads_its_own_rows_and_an_edit_stays_in_its_invoke():
    model = DamchaNNsight(load_model(CHECKPOINTS / "digits-damcha"))
    with model.trace() as tracer:
        with tracer.invoke(TOKENS[:2], targets=TARGETS[:2]):
            metrics = model.metric_source.output.head.save()
            first = model.output.token_loss.save()
        with tracer.invoke(TOKENS[2:], targets=TARGETS[2:]):
            model.blocks[1].attn.output.y[:] = 0  # the last layer's attention of this invoke silenced
            second = model.output.token_loss.save()
    own = model._module(TOKENS, targets=TARGETS)
    assert metrics.shape[0] == 2 and first.shape == (2, 20) and second.shape == (1, 20)
    torch.testing.assert_close(first, own.token_loss[:2], rtol=0, atol=1e-6)
    assert not torch.allclose(second, own.token_loss[2:])


def test_invokes_that_cannot_be_joined_are_refused():
    model = DamchaNNsight(load_model(CHECKPOINTS / "digits-damcha"))
    with pytest.raises(ValueError, match="inputs of one length"):
        with model.trace() as tracer:
            with tracer.invoke(TOKENS[:1, :10]):
                model.output.logits.save()
            with tracer.invoke(TOKENS[1:, :12]):
                model.output.logits.save()
    with pytest.raises(ValueError, match="targets= must be given to every invoke"):
        with model.trace() as tracer:
            with tracer.invoke(TOKENS[:1], targets=TARGETS[:1]):
                model.output.logits.save()
            with tracer.invoke(TOKENS[1:]):
                model.output.logits.save()
