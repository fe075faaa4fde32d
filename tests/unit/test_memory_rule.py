"""Whether a run fits its device is decided from its memory, before anything is allocated: the activations
counted on the meta device against a real forward for every registered variant, the refusal in words, and
the choice between whole and sharded training (the paper-scale arms: tests/integration/test_memory_at_paper_scale.py)."""

import dataclasses

import pytest
import torch

from damcha import ModelConfig, build_model
from damcha.model.config import variant_config
from damcha.runs.memory import (
    AUTO_MICRO_BATCH,
    HEADROOM,
    DoesNotFit,
    check_fits,
    check_training_fits,
    plan_training,
    saved_activation_bytes,
    training_memory,
)
from tests.support.guide_examples import walked_variants

pytestmark = pytest.mark.usefixtures("guide_examples")  # the guide's mechanism walked too


def test_a_run_that_does_not_fit_is_refused_with_its_numbers_before_anything_is_allocated():
    config = variant_config(ModelConfig(vocab_size=256, block_size=256, n_layer=2, n_head=4, n_embd=64,
                                        attention_options={"generator_widths": (32, 64)}), "damcha")
    estimate = training_memory(config, 8)
    with pytest.raises(DoesNotFit, match=r"does not fit one tiny device: .* parameters: weights .* activations of a "
                                         r"batch of 8 .* against 85% of its 0\.0 GiB"):
        check_fits(estimate, estimate.total // 2, "one tiny device")
    check_fits(estimate, estimate.total * 2, "a roomy device")
    assert check_training_fits(config, 8, torch.device("cpu")).total == estimate.total  # this machine has room


def _saved_on_cpu(config, batch):
    model = build_model(config)
    weights = {id(p) for p in model.parameters()}
    held, keep = {}, []

    def pack(t):
        base = t._base if t._base is not None else t
        if id(base) not in weights and id(base) not in held:
            held[id(base)] = base.untyped_storage().nbytes()
            keep.append(base)
        return t

    x = torch.randint(0, config.vocab_size, (batch, config.block_size))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x, targets=x, stochastic=True)
    return sum(held.values())


@pytest.mark.parametrize("variant", walked_variants())
def test_the_activations_counted_on_the_meta_device_are_what_a_real_forward_saves(variant):
    """With dropout on, the meta count equals what autograd saves in a real CPU forward, byte for byte;
    without it a real forward may take fused kernels that save less (measured here: 0.92x to 2.14x of the
    real saves, interleaved heads the most), so the count is mostly an upper bound."""
    base = ModelConfig(vocab_size=32, block_size=24, n_layer=2, n_head=4, n_embd=32, attention_options={"generator_widths": (16,)})
    with_dropout = variant_config(dataclasses.replace(base, dropout=0.1), variant)
    assert saved_activation_bytes(with_dropout, 3) == _saved_on_cpu(with_dropout, 3)
    plain = variant_config(base, variant)
    assert 0.9 <= saved_activation_bytes(plain, 3) / _saved_on_cpu(plain, 3) <= 2.2
    assert saved_activation_bytes(with_dropout, 6) > saved_activation_bytes(with_dropout, 3)  # it grows with the batch


def test_auto_trains_whole_where_it_fits_and_sharded_where_only_that_fits():
    config = variant_config(ModelConfig(vocab_size=256, block_size=64, n_layer=2, n_head=4, n_embd=64,
                                        attention_options={"generator_widths": (32, 64)}), "damcha-unshared")
    whole = training_memory(config, 4)
    plan = plan_training(config, 16, int(whole.total * 2), world=4)
    assert (plan.strategy, plan.micro_batch, plan.estimate) == ("ddp", 4, whole)
    weights_share = whole.weights + whole.gradients + whole.optimiser
    sharded = plan_training(config, 16, int((weights_share / 4 + whole.activations) * 1.3), world=4)
    assert sharded.strategy == "fsdp" and sharded.estimate.shards == 4 and sharded.estimate.total < whole.total
    with pytest.raises(DoesNotFit, match="sharded over 4 ranks"):
        plan_training(config, 16, int(whole.activations * 0.5), world=4)


def _tight(config, rows: int) -> int:
    """Bytes a device has where `rows` rows a micro-batch just fit (HEADROOM of them)."""
    return int(training_memory(config, rows).total / HEADROOM) + 1


def test_auto_micro_batches_are_the_largest_halving_of_a_ranks_share_that_fits():
    config = variant_config(ModelConfig(vocab_size=256, block_size=64, n_layer=2, n_head=4, n_embd=64,
                                        attention_options={"generator_widths": (32, 64)}), "damcha")
    for rows in (24, 12, 6, 3, 2, 1):  # 24, then halved, rounded up
        plan = plan_training(config, 24, _tight(config, rows), micro_batch=AUTO_MICRO_BATCH)
        assert (plan.strategy, plan.micro_batch, plan.estimate) == ("ddp", rows, training_memory(config, rows))
    two_ranks = plan_training(config, 24, _tight(config, 6), world=2, micro_batch=AUTO_MICRO_BATCH)
    assert two_ranks.micro_batch == 6  # each rank's 12 rows, in two micro-batches
    assert plan_training(config, 24, _tight(config, 6), micro_batch=5).micro_batch == 5  # given: as given, if it fits
    with pytest.raises(DoesNotFit, match=r"^in micro-batches of 1 row, .* parameters"):
        plan_training(config, 24, training_memory(config, 1).total // 2, micro_batch=AUTO_MICRO_BATCH)
    assert plan_training(config, 24, _tight(config, 24) * 4, micro_batch=AUTO_MICRO_BATCH).micro_batch == 24  # room
