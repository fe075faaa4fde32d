"""Every arm of every paper-scale claim builds on the meta device at its exact parameter count, and the memory
rule (damcha.runs.memory) says how each trains on the devices at hand: whole on one 80 GB GPU, sharded where
only that fits, refused with the numbers where nothing does, before anything trains."""

import dataclasses

import pytest
import torch

from damcha import build_model
from damcha.evidence.capacity import base_config, data_of
from damcha.evidence.scales import PAPER, scale_claims
from damcha.evidence.setting import Setting
from damcha.inputs.datasets.generated import write_standard_format_files
from damcha.runs.memory import ADAM_STATES, DoesNotFit, check_fits, training_memory
from damcha.runs.train import model_config_for

GPU_80GB = 80 * 10**9


@pytest.fixture(scope="module")
def paper_scale(tmp_path_factory):
    """The paper scale's setting and claims on generated files in the standard formats (same vocabularies,
    shapes and sequence lengths as the published files)."""
    files = write_standard_format_files(tmp_path_factory.mktemp("data"))
    setting = Setting(dataclasses.replace(PAPER, nonstandard_ok=True), tuple((n, str(p)) for n, p in files.items()),
                      "cpu")
    return setting, scale_claims(setting.scale, setting)


@pytest.fixture(scope="module")
def paper_arms(paper_scale):
    """(claim key, arm, config, batch) of every training arm of every paper-scale claim."""
    setting, claims = paper_scale
    out = []
    for claim in claims:
        for arm in claim.arms:
            if arm.trains:
                place = setting.scale.place(arm.dataset)
                data = data_of(arm.dataset, place.block_size or 64, setting)
                out.append((claim.key, arm, model_config_for(data, base_config(arm.variant, arm.overrides)),
                            place.train["batch_size"]))
    return out


def test_every_paper_scale_arm_builds_on_the_meta_device_at_its_exact_count(paper_arms):
    assert {key.split("@")[0] for key, *_ in paper_arms} == {"table1_images", "table3_depth", "table4_ablations",
                                                             "table5_text"}
    for key, arm, config, _ in paper_arms:
        with torch.device("meta"):
            model = build_model(config)
        assert sum(p.numel() for p in model.parameters()) == config.parameter_estimate(), (key, arm.name)
        assert config.n_layer == 10 and config.n_embd >= 512
    unshared = [c for _, arm, c, _ in paper_arms if arm.variant == "damcha-unshared"]
    assert unshared and all(c.parameter_estimate() > 1.3e9 for c in unshared)  # the arm the old 200M cap refused


def test_the_memory_rule_decides_every_paper_scale_arm_on_one_80_gb_gpu(paper_arms):
    decided = {}
    for key, arm, config, batch in paper_arms:
        whole = training_memory(config, batch)
        assert whole.activations is not None and whole.activations > 0, (key, arm.name)
        assert whole.optimiser == ADAM_STATES * whole.weights == 2 * 4 * config.parameter_estimate()
        try:
            check_fits(whole, GPU_80GB, "one 80 GB GPU")
            decided[(key, arm.name)] = "whole"
        except DoesNotFit as e:
            assert f"{config.parameter_estimate():,} parameters" in str(e) and "--strategy fsdp" in str(e)
            sharded = training_memory(config, -(-batch // 8), shards=8)
            assert sharded.weights * 8 >= whole.weights and sharded.activations < whole.activations
            decided[(key, arm.name)] = "sharded over 8" if sharded.total <= 0.85 * GPU_80GB else "refused"
    assert "refused" not in decided.values(), decided
    mha = next(v for (key, name), v in decided.items() if name == "mha")
    assert mha == "whole"


def test_the_paper_scale_plan_refuses_every_run_that_does_not_fit_before_anything_trains(paper_scale, paper_arms,
                                                                                          monkeypatch):
    from damcha.evidence import scales

    setting, claims = paper_scale
    monkeypatch.setattr(scales, "device_memory", lambda device: GPU_80GB)
    rows = scales.memory_plan(setting, claims)
    assert {r["arm"] for r in rows} == {arm.name for _, arm, _, _ in paper_arms}
    unshared = max(rows, key=lambda r: r["parameters"])
    assert unshared["arm"] == "w/o sharing" and unshared["parameters"] > 1.3e9
    assert {r["strategy"] for r in rows} == {"ddp"}  # one 80 GB GPU holds every run whole
    monkeypatch.setattr(scales, "device_memory", lambda device: 24 * 2**30)  # the paper's RTX 3090
    with pytest.raises(DoesNotFit, match="nothing was trained") as refused:
        scales.memory_plan(setting, claims)
    too_big = [r for r in rows if r["gib_per_device"] * 2**30 > 0.85 * 24 * 2**30]
    assert sorted(r["arm"] for r in too_big) == ["dcmha", "dcmha", "w/o sharing"]  # as docs/reproduce.md says
    assert too_big and all(f"{r['claim']}, {r['arm']}:" in str(refused.value) for r in too_big)
    monkeypatch.setenv("WORLD_SIZE", "8")  # under torchrun: each rank its share of the batch, sharded if need be
    sharded = scales.memory_plan(setting, claims)
    assert {r["arm"] for r in sharded if r["strategy"] == "fsdp"} == {"w/o sharing"}
    assert all(r["gib_per_device"] <= 0.85 * 24 for r in sharded)
    monkeypatch.delenv("WORLD_SIZE")  # a Slurm unit of 8 ranks (--gpus-per-unit 8), planned on the login node
    assert scales.memory_plan(setting, claims, world=8) == sharded


def test_an_arm_with_its_own_training_length_is_left_out_at_a_scale_and_said_to_be(paper_scale):
    """The compute-matched MHA's epochs match DAMCHA's FLOPs at the demo size; at a scale they would not."""
    from damcha.evidence.catalogue import claims as catalogue
    from damcha.evidence.scales import AT_DEMO_LENGTH

    _, claims = paper_scale
    assert not any(arm.train_overrides for claim in claims for arm in claim.arms)
    demo = {c.key for c in catalogue(quick=False) if any(a.train_overrides for a in c.arms)}
    at_scale = [c for c in claims if c.key.split("@")[0] in demo]
    assert at_scale and all(AT_DEMO_LENGTH in c.note for c in at_scale)
    assert not any(AT_DEMO_LENGTH in c.note for c in claims if c.key.split("@")[0] not in demo)
