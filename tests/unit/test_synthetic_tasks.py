"""The cross-subspace tasks' construction (issue 29): the teachers against explicit loops, oracle models
at the teachers' parameters, the slice-restricted MHA, the per-input permutation task, the class
subspace's entanglement knob, the learning-rate grid, and the evidence rules built on them."""

import json
import math

import pytest
import torch

from damcha.evidence.catalogue import claims
from damcha.evidence.records import Arm, Claim
from damcha.evidence.results import summarise
from damcha.evidence.runner import reusable_units
from damcha.evidence.sanity import SANITY_BOUNDS, sanity_checks
from damcha.evidence.statistics import FAILS, HOLDS, SANITY_FAILED
from damcha.inputs import synthetic as syn


def test_the_loop_reference_agrees_with_the_batched_teacher_and_catches_a_transposed_metric():
    task = syn.regression_task(0.5, 7)
    x = syn.inputs(2, 3)
    loop = syn.teacher_loop_reference(x, task.A, task.beta, task.W, task.heads)
    torch.testing.assert_close(task.targets(x), loop, atol=1e-5, rtol=0)
    transposed = syn.teacher_loop_reference(x, task.A.T, task.beta, task.W, task.heads)  # the orientation bug
    assert (task.targets(x) - transposed).abs().max() > 0.05
    assert syn.loop_reference_error(syn.permutation_task(24, 5)) < 1e-4  # per-sequence metrics too


def test_an_oracle_at_the_teachers_parameters_reproduces_it_and_a_wrong_orientation_does_not():
    task = syn.regression_task(0.75, 2)
    assert syn.oracle_error(task) < 1e-8
    x, y = task.sample(128, syn.TEST_INPUT_SEED)
    wrong = syn.oracle_model(task.A.T, task.beta, task.W)
    assert syn.evaluate(wrong, task, x, y) > 0.01
    assert syn.oracle_error(syn.permutation_task(1, 4)) < 1e-8
    with pytest.raises(ValueError, match="K = 1"):
        syn.oracle_error(syn.permutation_task(4, 4))  # no static oracle where the relation changes per input


def test_the_slice_restricted_mha_reads_only_its_own_slice_and_stays_so_under_training():
    torch.manual_seed(0)
    model = syn.OneLayer("mha-slice", syn.D_SYN)
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    task = syn.regression_task(1.0, 1)
    for step in range(3):
        x, y = task.sample(8, step)
        loss = torch.nn.functional.mse_loss(model(x)[0], y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    width = model.attn.query.weight.shape[0] // model.heads
    for projection in (model.attn.query, model.attn.key):
        w = projection.weight.detach()  # (2D, 2D) as the layer uses it
        for h in range(model.heads):
            rows = w[h * width:(h + 1) * width]
            assert rows[:, h * width:(h + 1) * width].abs().sum() > 0
            outside = torch.cat([rows[:, :h * width], rows[:, (h + 1) * width:]], 1)
            assert outside.abs().max() == 0
    full = syn.OneLayer("mha", syn.D_SYN)
    assert not torch.nn.utils.parametrize.is_parametrized(full.attn.query)


def test_the_permutation_task_draws_its_relations_per_sequence_and_the_code_from_the_mean():
    assert [len(syn.slice_permutations(k)) for k in (1, 4, 24)] == [1, 4, 24]
    assert len(set(syn.slice_permutations(24))) == 24 and syn.slice_permutations(1) == [(1, 2, 3, 0)]
    task = syn.permutation_task(24, 9)
    x, codes = task.draw(512, 3)
    means = x.mean(1)  # (n, D)
    nearest = torch.cdist(means, task.offsets).argmin(-1)
    assert (nearest == codes).float().mean() > 0.99  # the code is readable from the sequence's mean
    assert torch.equal(task.sample(4, 3)[1], task.targets(*task.draw(4, 3)))
    one = syn.CodedRelationTask(task.metrics[:1], task.offsets[:1], task.W, task.beta)
    xs, cs = one.draw(3, 1)
    permuted = syn.RegressionTask(syn.permutation_metric(syn.slice_permutations(24)[0]), task.W, task.beta, 1.0)
    torch.testing.assert_close(one.targets(xs, cs), permuted.targets(xs))
    p = syn.cross_head_attention(x[:256], task.metrics[codes[:256]], task.beta, task.heads)
    entropy = float(-(p * p.clamp_min(1e-30).log()).sum(-1).mean())
    assert entropy == pytest.approx(0.5 * math.log(syn.T_SYN), rel=0.1)


def test_the_class_subspace_knob_moves_from_one_heads_slice_to_the_whole_space():
    d = syn.D_SYN // syn.H_SYN
    for e in (0.0, 0.5, 1.0):
        U = syn.spread_subspace(e, 3)
        torch.testing.assert_close(U.T @ U, torch.eye(syn.SPREAD_DIM), atol=1e-5, rtol=0)
        outside = float(U[d:].pow(2).sum() / U.pow(2).sum())
        assert (outside < 1e-10) if e == 0 else (outside > 0.3)


def test_the_learning_rate_grid_chooses_on_validation_and_reports_its_choice():
    lrs = (1e-4, 1e-2)
    r = syn.train_synthetic("mha", "classification", 2, 0, steps=30, n_test=64, lrs=lrs)
    assert set(r.validation) == set(lrs) and r.lr == max(r.validation, key=r.validation.get)
    assert r.metric == "accuracy" and 0 <= r.score <= 1
    single = syn.train_synthetic("mha", "regression", 0.0, 0, steps=5, n_test=64)
    assert single.validation == {} and single.lr == 3e-3 and single.metric == "relative_mse"
    assert syn.VALIDATION_INPUT_SEED not in {syn.TEST_INPUT_SEED} and syn.VALIDATION_INPUT_SEED > 100_003 * 5 + 1500
    with pytest.raises(ValueError, match="validation or test"):
        syn.train_synthetic("mha", "regression", 0.0, 50_000, steps=10)


def test_every_task_and_synthetic_model_builds_and_trains_a_step():
    for task in syn.TASKS:
        level = {"permutation": 4, "within-slice": 4, "classification": 4}.get(task, 0.5)
        teacher = syn.make_task(task, level, 0)
        for name in syn.SYNTHETIC_MODELS:
            model = syn.fit(name, teacher, 0, steps=1, lr=1e-3, batch=4)
            x, y = teacher.sample(4, 1)
            assert model(x)[0].shape == (4, syn.T_SYN, teacher.outputs)


def test_the_construction_checks_pass_and_a_failed_one_withholds_the_verdict():
    checks = sanity_checks()
    assert set(checks) == set(SANITY_BOUNDS)
    assert all(v < SANITY_BOUNDS[k] for k, v in checks.items()), checks
    arms = (Arm("damcha K=1", variant="damcha"), Arm("mha K=1", variant="mha"))
    claim = Claim("c", "t", "s", "relative_mse", True, arms, "damcha K=1", verdict_against=("mha",),
                  groups=(tuple(a.name for a in arms),), requires=tuple(SANITY_BOUNDS)[:1])
    values = {"mha K=1": [{"relative_mse": v} for v in (0.5, 0.52, 0.51)],
              "damcha K=1": [{"relative_mse": v} for v in (0.1, 0.11, 0.1)]}
    assert summarise(claim, values, checks)["verdict"] == HOLDS
    broken = {**checks, tuple(SANITY_BOUNDS)[0]: 0.3}
    result = summarise(claim, values, broken)
    assert result["verdict"] == SANITY_FAILED and "0.3 (needs below" in result["sanity_failures"][0]
    assert summarise(claim, values, {})["verdict"] == SANITY_FAILED  # a check not computed is no pass


def test_reported_pairs_never_count_for_the_verdict():
    arms = (Arm("damcha e=0", variant="damcha"), Arm("mha e=0", variant="mha"), Arm("mha-slice e=0", variant="mha-slice"))
    claim = Claim("c", "t", "s", "relative_mse", True, arms, "damcha e=0", verdict_against=("mha",),
                  groups=(tuple(a.name for a in arms),), pairs=(("mha-slice e=0", "mha e=0", "what it measures"),))
    values = {"mha e=0": [{"relative_mse": v} for v in (0.5, 0.52, 0.51)],
              "damcha e=0": [{"relative_mse": v} for v in (0.1, 0.11, 0.1)],
              "mha-slice e=0": [{"relative_mse": v} for v in (0.9, 0.95, 0.92)]}
    result = summarise(claim, values)
    pair = next(c for c in result["comparisons"] if c.get("measures"))
    assert pair["verdict"] == FAILS and not pair["counted"] and result["verdict"] == HOLDS
    assert [c["than"] for c in result["comparisons"] if c["counted"]] == ["mha e=0"]  # counted by variant: not mha-slice


def test_the_new_synthetic_claims_name_their_pairs_sanity_and_grid():
    full = {c.key: c for c in claims(quick=False)}
    for key in ("fig12_regression", "permutation_relations", "within_slice_codes", "fig13_classification",
                "fig13_entanglement"):
        claim = full[key]
        names = {a.name for a in claim.arms}
        assert claim.requires and claim.pairs and all(b in names and t in names for b, t, _ in claim.pairs)
        assert claim.sanity and set(claim.sanity.arms) <= names
    assert all(len(a.lrs) > 1 for key in ("permutation_relations", "fig13_classification", "fig13_entanglement")
               for a in full[key].arms)
    tuned = {a.variant for a in full["fig12_regression"].arms if a.lrs}
    assert {"mha", "damcha", "mha-slice", "damcha-static-bilinear"} <= tuned and "tha" not in tuned
    assert {a.level for a in full["permutation_relations"].arms} == {1, 4, 24}
    assert {a.level for a in full["within_slice_codes"].arms if a.kind == "synthetic"} == set(syn.WITHIN_SLICE_CODES) \
        == {1, 4, 16}


def test_the_within_slice_task_chooses_block_diagonal_relations_per_input_which_a_row_sum_metric_represents():
    task = syn.within_slice_task(16, 3)
    d = syn.D_SYN // syn.H_SYN
    blocks = torch.block_diag(*[torch.ones(d, d)] * syn.H_SYN)
    assert task.metrics.shape == (16, syn.D_SYN, syn.D_SYN) and (task.metrics * (1 - blocks)).abs().max() == 0
    assert len({tuple(m.flatten().tolist()) for m in task.metrics}) == 16  # one relation per code
    assert syn.loop_reference_error(task) < 1e-4
    for K in syn.WITHIN_SLICE_CODES:  # each code's blocks as a row-sum metric: the teacher to rounding
        assert syn.coded_oracle_error(syn.within_slice_task(K, 5)) < 1e-10
    assert syn.coded_oracle_error(syn.permutation_task(4, 5)) > 0.1  # the row sum cannot cross slices
    x, codes = task.draw(256, syn.TEST_INPUT_SEED)
    y = task.targets(x, codes)
    with torch.no_grad():  # one static relation for every input (what MHA or w/o f(x) hold) misses K > 1
        static = syn.oracle_model(task.metrics[0], task.beta, task.W, "damcha-static")(x)[0]
    assert float(torch.nn.functional.mse_loss(static, y) / y.var()) > 0.05


def test_the_within_slice_claim_counts_what_f_learns_and_checks_what_representability_fixes():
    """Where the relation changes (K > 1) only DAMCHA can represent the task: against MHA and w/o f(x) the
    outcome is fixed (construction checks); counted is whether DAMCHA reaches the threshold there."""
    claim = next(c for c in claims(quick=False) if c.key == "within_slice_codes")
    values = {a.name: [{"constant": a.level} if a.kind == "constant" else
                       {"relative_mse": (0.01 if a.variant == "damcha" or a.level == 1 else 0.3) + 0.001 * s} for s in range(3)]
              for a in claim.arms}
    result = summarise(claim, values, sanity_checks())
    bound = next(a.name for a in claim.arms if a.kind == "constant")
    assert sorted((c["better"], c["than"]) for c in result["comparisons"] if c["counted"]) == \
        [("damcha K=16", bound), ("damcha K=4", bound)]
    assert sorted((c["better"], c["than"], c["outcome"]) for c in result["construction_checks"]) == sorted(
        (f"damcha K={k}", f"{m} K={k}", "confirmed") for k in (4, 16) for m in ("mha", "damcha-static"))
    assert result["verdict"] == "holds" and result["verdict_kind"] == "learned"


def test_reuse_takes_over_only_arms_defined_alike():
    """An older document stored arms by name; an arm given a learning-rate grid since is another arm."""
    grid, plain = Arm("mha e=0.0", kind="synthetic", variant="mha", task="regression", lrs=(1e-3, 3e-3)), \
        Arm("tha e=0.0", kind="synthetic", variant="tha", task="regression")
    from damcha.evidence.runner import same_arm
    assert same_arm(plain, None) and not same_arm(grid, None)
    assert same_arm(grid, json.loads(json.dumps(grid.spec()))) and not same_arm(grid, plain.spec())
    regression = next(c for c in claims(quick=True) if c.key == "fig12_regression")
    legacy = {"quick": True, "claims": [{"key": regression.key,
                                         "values": {a.name: [{"relative_mse": 0.5}] * 2 for a in regression.arms}}]}
    taken = {json.loads(u)[0][0] for u in reusable_units(legacy, True)}
    assert taken == {a.name for a in regression.arms if not a.lrs}
    stored = {"quick": True, "claims": [{**legacy["claims"][0], "arms": {a.name: a.spec() for a in regression.arms}}]}
    assert {json.loads(u)[0][0] for u in reusable_units(stored, True)} == {a.name for a in regression.arms}
