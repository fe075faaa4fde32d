"""Cross-subspace tasks of the paper's Figs. 12 and 13, as **our reconstruction** (the paper's text
defining them is not in what we have; see issues 18 and 29 and the evidence page).

Inputs: T tokens x_t in R^D, entries N(0, 1), non-causal; x_{t,i} is the i-th of H slices of size d.

Regression (Fig. 12), entanglement e: a fixed teacher metric A = sqrt(1 - e) A_diag + sqrt(e) A_off,
A_diag block-diagonal with H Gaussian d x d blocks, A_off Gaussian off the diagonal blocks and zero
on them, each scaled to unit Frobenius norm, so e is the share of ||A||^2 in cross-head blocks.
The teacher is cross-head attention with metric A: head i scores beta x_{t,i}^T sum_j A_ij x_{s,j},
takes its own softmax and averages its own slice x_{s,i}; y_t = concat_i(head_i) W, W a fixed random
orthogonal matrix, beta chosen so the teacher's mean attention entropy is half of log T. Loss MSE;
report MSE / Var(y). One softmax per head, not one over x_t^T A x_s as first specified: with a single
softmax over a full-rank A no per-head mechanism, MHA included, can represent even e = 0, so the
sanity check "at e = 0 every mechanism learns the task" could not hold. At e = 0 this teacher is
an MHA whose heads read only their own slices, the paper's picture of MHA as the diagonal blocks.

Slice permutation (input-dependent cross-head relations), K codes: each sequence draws a code k of
K and every token carries the code's offset mu_k (x_t = g_t + mu_k, g_t ~ N(0, I), mu_k ~ N(0, I/4)),
so the code is readable from the sequence's mean. Teacher head i scores beta x_{t,i} . x_{s,pi_k(i)}
(the regression teacher with A = the block permutation matrix of pi_k), averages its own slice and
y = concat(heads) W as above. K = 1: the cyclic shift i -> i + 1; K = 4: the four cyclic shifts
(identity included); K = 24: every permutation of the 4 slices. A static model has one relation for
every input, so it cannot cover K > 1; an input-dependent cross-head metric can.

Within-slice codes (the input dependence a row-sum DAMCHA can represent), K codes: as the
permutation task, but code k's teacher metric is block-diagonal, A_k = blockdiag(B_k1 .. B_kH)
(Gaussian d x d blocks, unit Frobenius norm, drawn per code): head i scores beta x_{t,i}^T B_ki x_{s,i},
its own slice against its own slice under a relation the code chooses. Under the row sum, m_i(x) =
B_ki is a per-head metric an adaptive DAMCHA can produce (f reads the code from the context mean);
MHA and a static row-sum model hold one relation per head for every input, which covers K = 1 only.

Classification (Fig. 13), subspace dimension d_e: U a random D x d_e orthonormal matrix; the label
is the position s >= 1 whose token best matches the first inside the subspace,
argmax_s (U^T x_0) . (U^T x_s), read out at position 0 (T - 1 classes). Its entanglement knob
(d_e = 4): U spans sqrt(1 - e) U_in + sqrt(e) U_all, U_in inside head 0's slice (which one head of
any per-head mechanism represents exactly) and U_all a random subspace of the whole space (e = 1).

Models: one attention layer of a registered variant, or of one of SYNTHETIC_MODELS (an MHA whose
heads' queries and keys read only their own slice; a static bilinear DAMCHA), a residual and a
linear read-out; the same width, optimiser and steps for all. A fit may go over a small grid of
learning rates and keep the one best on a validation set (its own generator seed), scored on the
test set: the evidence's tuning unit of a configuration, whose rate its reported seeds train at
(damcha/evidence/tuning.py).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize

from damcha.model.config import ModelConfig, split_fields, variant_config
from damcha.model.mechanisms import LayerCall

T_SYN, D_SYN, H_SYN = 16, 32, 4
OFFSET_SCALE = 0.5  # std of the permutation task's per-code offsets


def cross_head_attention(x: torch.Tensor, A: torch.Tensor, beta: float, heads: int) -> torch.Tensor:
    """(B, T, D) inputs, A (D, D) or one per sequence (B, D, D) -> (B, H, T, T): head i scores
    beta x_{t,i}^T sum_j A_ij x_{s,j}, the cross-head bilinear form, with its own softmax over s."""
    B, T, D = x.shape
    rows = (x @ A.transpose(-1, -2)).view(B, T, heads, D // heads).transpose(1, 2)  # (B, H, T, d): (A x_s)_i
    slices = x.view(B, T, heads, D // heads).transpose(1, 2)  # (B, H, T, d)
    return (beta * slices @ rows.transpose(-1, -2)).softmax(-1)  # (B, H, T, T): [t, s] = x_{t,i} . (A x_s)_i


def teacher_outputs(x: torch.Tensor, A: torch.Tensor, beta: float, heads: int) -> torch.Tensor:
    """(B, T, D): head i averages its own slice x_{s,i} under its own attention; heads concatenated."""
    B, T, D = x.shape
    slices = x.view(B, T, heads, D // heads).transpose(1, 2)  # (B, H, T, d)
    return (cross_head_attention(x, A, beta, heads) @ slices).transpose(1, 2).reshape(B, T, D)  # (B, T, D)


def teacher_loop_reference(x: torch.Tensor, A: torch.Tensor, beta: float, W: torch.Tensor, heads: int) -> torch.Tensor:
    """The teacher's targets by explicit loops over sequences, heads, queries and keys, in Python floats
    (no batched algebra shared with `teacher_outputs`): the check that the batched code scores the
    query's own slice against (A x_s)_i and not, say, the transposed form. A: (D, D) or (B, D, D)."""
    B, T, D = x.shape
    d = D // heads
    xs, Ws = x.tolist(), W.tolist()
    As = [A.tolist()] * B if A.dim() == 2 else A.tolist()
    y = [[[0.0] * D for _ in range(T)] for _ in range(B)]
    for b in range(B):
        for i in range(heads):
            for t in range(T):
                scores = [beta * sum(xs[b][t][i * d + p] * As[b][i * d + p][c] * xs[b][s][c]
                                     for p in range(d) for c in range(D)) for s in range(T)]
                top = max(scores)
                weights = [math.exp(v - top) for v in scores]
                total = sum(weights)
                head = [sum(weights[s] / total * xs[b][s][i * d + p] for s in range(T)) for p in range(d)]
                for o in range(D):
                    y[b][t][o] += sum(head[p] * Ws[i * d + p][o] for p in range(d))
    return torch.tensor(y)


def calibrated_beta(attention, probe: torch.Tensor, T: int = T_SYN) -> float:
    """The inverse temperature at which attention(probe, beta) has mean entropy half of log T (bisection
    on log beta: the entropy falls as beta grows)."""
    target = 0.5 * math.log(T)
    lo, hi = 1e-3, 1e3
    for _ in range(60):
        beta = math.sqrt(lo * hi)
        p = attention(probe, beta)  # (N, H, T, T)
        entropy = float(-(p * p.clamp_min(1e-30).log()).sum(-1).mean())
        lo, hi = (beta, hi) if entropy > target else (lo, beta)
    return math.sqrt(lo * hi)


# Generator seeds live in three spaces that never meet: training batches (seed * 100_003 + step) below
# TEACHER_SEEDS, teachers (and class subspaces) in TEACHER_SEEDS, the validation and test inputs above it;
# all below 2**32, because torch's CPU generator seeds its Mersenne twister with the seed's low 32 bits only.
TEST_INPUT_SEED = 2**32 - 1
VALIDATION_INPUT_SEED = 2**32 - 2  # the learning-rate grid chooses on these, never on the test set
TEACHER_SEEDS = range(2**31, VALIDATION_INPUT_SEED)


def inputs(n: int, seed: int, T: int = T_SYN, D: int = D_SYN) -> torch.Tensor:
    return torch.randn(n, T, D, generator=torch.Generator().manual_seed(seed))


@dataclass(frozen=True)
class RegressionTask:
    A: torch.Tensor  # (D, D) teacher metric
    W: torch.Tensor  # (D, D) orthogonal read-out
    beta: float
    entanglement: float
    heads: int = H_SYN
    kind = "regression"
    metric = "relative_mse"  # the test score's name
    outputs = D_SYN

    def targets(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, D) inputs -> (B, T, D) targets: head i averages its own slice x_{s,i} under its own
        attention, the heads are concatenated and mixed by W."""
        return self.head_outputs(x) @ self.W  # (B, T, D)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, D) -> (B, H, T, T) under the teacher's metric."""
        return cross_head_attention(x, self.A, self.beta, self.heads)

    def head_outputs(self, x: torch.Tensor) -> torch.Tensor:
        return teacher_outputs(x, self.A, self.beta, self.heads)  # (B, T, D)

    def sample(self, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = inputs(n, seed)
        return x, self.targets(x)

    def reference_case(self, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Inputs, the metric each sequence's teacher uses, and the batched targets (the loop reference's check)."""
        x = inputs(n, seed)
        return x, self.A, self.targets(x)


def teacher_metric(entanglement: float, seed: int, D: int = D_SYN, H: int = H_SYN) -> torch.Tensor:
    """A whose cross-head blocks hold exactly `entanglement` of its squared Frobenius norm."""
    g = torch.Generator().manual_seed(seed)
    d = D // H
    blocks = torch.block_diag(*[torch.ones(d, d)] * H)  # (D, D) 1 on the diagonal blocks
    diag = torch.randn(D, D, generator=g) * blocks
    off = torch.randn(D, D, generator=g) * (1 - blocks)
    return math.sqrt(1 - entanglement) * diag / diag.norm() + math.sqrt(entanglement) * off / off.norm()


def cross_head_share(A: torch.Tensor, H: int = H_SYN) -> float:
    d = A.shape[0] // H
    blocks = torch.block_diag(*[torch.ones(d, d)] * H)
    return float((A * (1 - blocks)).pow(2).sum() / A.pow(2).sum())


def regression_task(entanglement: float, seed: int, D: int = D_SYN, H: int = H_SYN, T: int = T_SYN) -> RegressionTask:
    A = teacher_metric(entanglement, seed, D, H)
    g = torch.Generator().manual_seed(seed + 1)
    W = torch.linalg.qr(torch.randn(D, D, generator=g))[0]
    probe = torch.randn(512, T, D, generator=g)
    beta = calibrated_beta(lambda p, b: cross_head_attention(p, A, b, H), probe, T)
    return RegressionTask(A, W, beta, entanglement, H)


def slice_permutations(K: int, H: int = H_SYN) -> list[tuple[int, ...]]:
    """The K relations of the permutation task: pi(i) is the slice head i's query scores against."""
    shifts = [tuple((i + r) % H for i in range(H)) for r in range(H)]
    if K == 1:
        return [shifts[1]]
    if K == H:
        return shifts
    if K == math.factorial(H):
        return list(itertools.permutations(range(H)))
    raise ValueError(f"K must be 1, {H} or {math.factorial(H)}, not {K}")


def permutation_metric(pi: tuple[int, ...], D: int = D_SYN) -> torch.Tensor:
    """(D, D) block permutation: block (i, pi(i)) is the identity, so (A x)_i = x_{pi(i)}."""
    H = len(pi)
    d = D // H
    A = torch.zeros(D, D)
    for i, j in enumerate(pi):
        A[i * d:(i + 1) * d, j * d:(j + 1) * d] = torch.eye(d)
    return A


@dataclass(frozen=True)
class CodedRelationTask:
    """K relations between heads, one per code; each sequence draws a code and carries its offset.
    The permutation task (block permutations) and the within-slice task (block-diagonal metrics)."""

    metrics: torch.Tensor  # (K, D, D) the teacher metric of each code
    offsets: torch.Tensor  # (K, D) the code's offset, carried by every token of the sequence
    W: torch.Tensor  # (D, D) orthogonal read-out
    beta: float
    heads: int = H_SYN
    kind = "regression"
    metric = "relative_mse"  # the test score's name
    outputs = D_SYN

    def draw(self, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(n, T, D) inputs and their (n,) codes."""
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(n, T_SYN, D_SYN, generator=g)  # (n, T, D)
        codes = torch.randint(len(self.metrics), (n,), generator=g)  # (n,)
        return x + self.offsets[codes][:, None], codes

    def targets(self, x: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
        return teacher_outputs(x, self.metrics[codes], self.beta, self.heads) @ self.W  # (n, T, D)

    def sample(self, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, codes = self.draw(n, seed)
        return x, self.targets(x, codes)

    def reference_case(self, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x, codes = self.draw(n, seed)
        return x, self.metrics[codes], self.targets(x, codes)  # (n, D, D): one metric per sequence

    @property
    def A(self) -> torch.Tensor:
        """The one metric of K = 1 (the oracle's)."""
        if len(self.metrics) != 1:
            raise ValueError("a static oracle exists for K = 1 only")
        return self.metrics[0]


def coded_task(metrics: torch.Tensor, seed: int, H: int = H_SYN, T: int = T_SYN) -> CodedRelationTask:
    """A task with one teacher metric per code (K, D, D): its offsets and read-out drawn from `seed`,
    beta calibrated over the codes as they are drawn."""
    K, D, _ = metrics.shape
    g = torch.Generator().manual_seed(seed)
    offsets = OFFSET_SCALE * torch.randn(K, D, generator=g)  # (K, D)
    W = torch.linalg.qr(torch.randn(D, D, generator=g))[0]
    task = CodedRelationTask(metrics, offsets, W, 1.0, H)
    x, codes = task.draw(512, seed + 1)
    beta = calibrated_beta(lambda p, b: cross_head_attention(p, metrics[codes], b, H), x, T)
    return CodedRelationTask(metrics, offsets, W, beta, H)


def permutation_task(K: int, seed: int, D: int = D_SYN, H: int = H_SYN, T: int = T_SYN) -> CodedRelationTask:
    metrics = torch.stack([permutation_metric(pi, D) for pi in slice_permutations(K, H)])  # (K, D, D)
    return coded_task(metrics, seed, H, T)


WITHIN_SLICE_CODES = (1, 4, 16)  # the within-slice task's levels


def within_slice_task(K: int, seed: int, D: int = D_SYN, H: int = H_SYN, T: int = T_SYN) -> CodedRelationTask:
    """K block-diagonal teacher metrics (teacher_metric at e = 0, each from its own generator seed)."""
    if K < 1:
        raise ValueError(f"K must be a positive number of codes, not {K}")
    picks = torch.randint(len(TEACHER_SEEDS), (K,), generator=torch.Generator().manual_seed(seed)).tolist()
    seeds = [TEACHER_SEEDS[i] for i in picks]
    metrics = torch.stack([teacher_metric(0.0, s, D, H) for s in seeds])  # (K, D, D) block-diagonal
    return coded_task(metrics, seed, H, T)


def classification_labels(x: torch.Tensor, U: torch.Tensor) -> torch.Tensor:
    """(B, T, D) -> (B,) class = (best-matching position s >= 1) - 1."""
    z = x @ U  # (B, T, d_e)
    return (z[:, 1:] @ z[:, 0, :, None]).squeeze(-1).argmax(-1)  # (B,)


def subspace(d_e: int, seed: int, D: int = D_SYN) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.linalg.qr(torch.randn(D, d_e, generator=g))[0]  # (D, d_e)


SPREAD_DIM = 4  # d_e of the classification task's entanglement knob


def spread_subspace(entanglement: float, seed: int, d_e: int = SPREAD_DIM, D: int = D_SYN, H: int = H_SYN) -> torch.Tensor:
    """(D, d_e) orthonormal: span of sqrt(1 - e) U_in + sqrt(e) U_all, U_in a random d_e-subspace of head
    0's slice (coordinates 0 .. d - 1), U_all one of the whole space."""
    g = torch.Generator().manual_seed(seed)
    inside = torch.zeros(D, d_e)
    inside[:D // H] = torch.linalg.qr(torch.randn(D // H, d_e, generator=g))[0]  # (d, d_e) in head 0's slice
    spread = torch.linalg.qr(torch.randn(D, d_e, generator=g))[0]  # (D, d_e)
    return torch.linalg.qr(math.sqrt(1 - entanglement) * inside + math.sqrt(entanglement) * spread)[0]


@dataclass(frozen=True)
class ClassificationTask:
    U: torch.Tensor  # (D, d_e)
    kind = "classification"
    metric = "accuracy"
    outputs = T_SYN - 1

    def sample(self, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = inputs(n, seed)
        return x, classification_labels(x, self.U)


def task_seed(level: float, seed: int) -> int:
    """The teacher (or class subspace) of a level for one training seed: drawn anew per seed, so the
    intervals over seeds include the teacher's variability (a task also draws from the next seed up)."""
    return TEACHER_SEEDS.start + int(level * 100) + 10_000 * seed


TASKS = ("regression", "permutation", "within-slice", "classification", "subspace-spread")


def make_task(task: str, level: float, seed: int):
    """The task a unit trains on: its teacher (or class subspace) for this level and training seed."""
    s = task_seed(level, seed)
    if task == "regression":
        return regression_task(level, s)
    if task == "permutation":
        return permutation_task(int(level), s)
    if task == "within-slice":
        return within_slice_task(int(level), s)
    if task == "classification":
        return ClassificationTask(subspace(int(level), s))
    if task == "subspace-spread":
        return ClassificationTask(spread_subspace(level, s))
    raise ValueError(f"unknown synthetic task {task!r}; expected one of {TASKS}")


@dataclass(frozen=True)
class SyntheticModel:
    """A model of the synthetic tasks that is not a registered variant: a variant with config fields
    changed, and optionally each head's query and key projections restricted to its own slice."""

    variant: str
    fields: tuple = ()  # (ModelConfig field or setting of the variant's mechanism, value)
    slice_qk: bool = False
    description: str = ""


SYNTHETIC_MODELS = {
    "mha-slice": SyntheticModel("mha", slice_qk=True, description="MHA whose heads' queries and keys read only "
                                "their own slice: the paper's picture of MHA as the diagonal blocks"),
    "damcha-static-bilinear": SyntheticModel("damcha-static", (("score_form", "bilinear"),),
                                             description="one learned cross-head bilinear form for every input"),
    "mha-matched": SyntheticModel("mha", (("attention_options", (("head_width", 534),)),),
                                  description="MHA with heads 534 wide: DAMCHA's parameter count on these tasks (within "
                                              "2%), the same function class as MHA; the capacity-matched baseline"),
    "damcha-identity": SyntheticModel("damcha", (("attention_options", (("generator_start", "identity"),)),),
                                      description="DAMCHA with f's last layer started at M(c) = I (an implementation "
                                                  "choice; the paper's start is not known)"),
}


class HeadSliceMask(nn.Module):
    """Zeroes every weight by which head h's rows read outside slice h (a parametrisation, so the
    optimiser never moves them)."""

    mask: torch.Tensor

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.register_buffer("mask", torch.block_diag(*[torch.ones(width // heads, width // heads)] * heads))

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        return weight * self.mask


def _weight(module: nn.Module | None, name: str) -> torch.Tensor:
    """The weight of `module`'s map `name` (a static layer's value, proj; its shared generator)."""
    weight = getattr(module.get_submodule(name), "weight", None) if module is not None else None
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f"the layer has no map {name!r} with a weight to set to the teacher's parameters")
    return weight


class OneLayer(nn.Module):
    """One attention layer, a residual and a linear read-out (every position, or position 0 for classes).
    Head i's slice of the layer's input holds the token's i-th d-slice and d learned position channels,
    so a head's slice is still the teacher's block i and a position (the classification label is one)
    never shares dimensions with the token's content."""

    def __init__(self, model: str, outputs: int, D: int = D_SYN, H: int = H_SYN):
        super().__init__()
        spec = SYNTHETIC_MODELS.get(model, SyntheticModel(model))
        base = ModelConfig(vocab_size=2, block_size=T_SYN, n_layer=1, n_head=H, n_embd=2 * D, causal=False,
                           n_classes=2)
        fields, settings = split_fields(spec.fields)
        self.config = dataclasses.replace(variant_config(base, spec.variant), **fields).with_settings(**settings)
        mech = self.config.mechanism
        self.mechanism = mech
        self.heads = H
        self.attn = mech.build_layer(self.config, 0)
        if spec.slice_qk:
            for projection in (self.attn.get_submodule("query"), self.attn.get_submodule("key")):
                parametrize.register_parametrization(projection, "weight", HeadSliceMask(2 * D, H))
        self.shared = mech.build_shared(self.config)
        self.readout = nn.Linear(2 * D, outputs)
        self.positions = nn.Parameter(torch.randn(T_SYN, H, D // H))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        B, T, D = x.shape
        slices = x.view(B, T, self.heads, D // self.heads)  # (B, T, H, d)
        z = torch.cat([slices, self.positions.expand(B, -1, -1, -1)], -1).reshape(B, T, 2 * D)  # (B, T, 2D)
        options = self.mechanism.options(None)
        shared = None if self.shared is None else self.mechanism.run_shared(self.shared, z, None, options, self.training)
        a = self.attn(z, LayerCall(None, None, False, options, stochastic=self.training, shared=shared))
        aux = a.aux_loss if a.aux_loss is not None else z.new_zeros(())
        return self.readout(z + a.y), aux  # (B, T, outputs)


def token_channels(D: int = D_SYN, H: int = H_SYN) -> torch.Tensor:
    """(D,) the channel of OneLayer's input holding x's channel c = i * d + p (head i's slice starts
    with its d token channels, then its d position channels)."""
    d = D // H
    return torch.tensor([2 * d * i + p for i in range(H) for p in range(d)])


def oracle_model(A: torch.Tensor, beta: float, W: torch.Tensor, model_name: str = "damcha-static-bilinear") -> OneLayer:
    """A static OneLayer (bilinear, or the row sum for a block-diagonal A) set to the teacher's
    parameters: metric beta * sqrt(head width) * A on the token channels, values copying each head's
    token slice, the output projection writing head outputs into the (zeroed) position channels, the
    read-out applying W there. It must reproduce the teacher to rounding: the check that the model's
    scores and the teacher's have one orientation."""
    model = OneLayer(model_name, W.shape[1])
    token = token_channels(A.shape[0], model.heads)  # (D,)
    place = token + A.shape[0] // model.heads  # (D,) the position channel beside each token channel
    width = 2 * A.shape[0]
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        M = torch.zeros(width, width)
        M[token[:, None], token[None]] = beta * math.sqrt(width // model.heads) * A  # head_scale divides by it
        _weight(model.shared, "generator").copy_(M)
        _weight(model.attn, "value")[token, token] = 1.0
        _weight(model.attn, "proj")[place, token] = 1.0
        model.readout.weight[:, place] = W.T
    return model.eval()


@dataclass(frozen=True)
class SyntheticResult:
    score: float  # relative test MSE (regression) or accuracy (classification)
    parameters: int
    lr: float  # the learning rate used (the best of the rates tried on the validation set)
    validation: dict  # lr -> validation score (empty without a grid)
    metric: str  # what score is: "relative_mse" or "accuracy"


@dataclass(frozen=True)
class RateFit:
    """What one fit at one rate scored: on the validation set, and on the test set where it was tested
    (None: it lost on validation, so its test score was never needed)."""

    validation: float
    test: float | None = None
    parameters: int = 0


def evaluate(model: OneLayer, task, x: torch.Tensor, target: torch.Tensor) -> float:
    """Relative MSE (regression) or accuracy at position 0 (classification)."""
    model.eval()
    with torch.no_grad():
        out, _ = model(x)
    if task.kind == "regression":
        return float(F.mse_loss(out, target) / target.var())
    return float((out[:, 0].argmax(-1) == target).float().mean())


def fit(model_name: str, task, seed: int, steps: int, lr: float, batch: int = 64) -> OneLayer:
    """Adam on fresh inputs every step (batch seeds seed * 100_003 + step)."""
    torch.manual_seed(seed)
    model = OneLayer(model_name, task.outputs)
    opt = torch.optim.Adam(model.parameters(), lr, fused=True)  # as training's: the per-tensor loop was 40% of a step
    for step in range(steps):
        x, target = task.sample(batch, seed * 100_003 + step)
        out, aux = model(x)
        loss = F.mse_loss(out, target) if task.kind == "regression" else F.cross_entropy(out[:, 0], target)
        opt.zero_grad()
        (loss + aux).backward()
        opt.step()
    return model


def train_synthetic(model_name: str, task: str, level: float, seed: int, steps: int, batch: int = 64,
                    n_test: int = 1024, lrs: tuple[float, ...] = (3e-3,),
                    beyond: Callable[[float, list[float]], float | None] | None = None,
                    known: dict[float, RateFit] | None = None,
                    on_fit: Callable[[float, RateFit], None] | None = None) -> SyntheticResult:
    """Train one model on a synthetic task and score it on a fixed test set; with several learning rates,
    the one whose model scores best on a validation set (another generator seed) is tested. `beyond`
    (chosen rate, rates tried -> the next rate to try, or None) extends the rates while the choice is an
    edge of them. A fit is deterministic in its rate, so the fits in `known` (earlier calls' `on_fit`
    records of this same unit) are read, not refitted."""
    if seed * 100_003 + steps >= TEACHER_SEEDS.start:
        raise ValueError("training batches would reach the teachers', validation or test inputs' generator seeds")
    teacher = make_task(task, level, seed)  # every model of this seed sees this teacher
    x, y = teacher.sample(n_test, TEST_INPUT_SEED)  # never a training batch
    if len(lrs) == 1:
        model = fit(model_name, teacher, seed, steps, lrs[0], batch)
        return SyntheticResult(evaluate(model, teacher, x, y), _parameters(model), lrs[0], {}, teacher.metric)
    x_val, y_val = teacher.sample(n_test, VALIDATION_INPUT_SEED)
    fits: dict[float, RateFit] = dict(known or {})
    kept: tuple[float, OneLayer] | None = None  # only the best model fitted here so far stays alive
    tried = list(lrs)

    def rank(lr: float) -> tuple[float, int]:  # lower is better; a diverged fit (NaN) worst; a tie: the earlier tried
        v = fits[lr].validation
        return (math.inf if math.isnan(v) else v if teacher.kind == "regression" else -v), tried.index(lr)

    def try_rate(lr: float) -> None:
        nonlocal kept
        if lr in fits:
            return
        candidate = fit(model_name, teacher, seed, steps, lr, batch)
        fits[lr] = RateFit(evaluate(candidate, teacher, x_val, y_val), parameters=_parameters(candidate))
        if on_fit:
            on_fit(lr, fits[lr])
        if kept is None or rank(lr) < rank(kept[0]):
            kept = lr, candidate

    for lr in lrs:
        try_rate(lr)
    while beyond and (step := beyond(min(tried, key=rank), tried)) is not None:
        tried.append(step)
        try_rate(step)
    best = min(tried, key=rank)
    if fits[best].test is None:
        model = kept[1] if kept is not None and kept[0] == best else fit(model_name, teacher, seed, steps, best, batch)
        fits[best] = dataclasses.replace(fits[best], test=evaluate(model, teacher, x, y), parameters=_parameters(model))
        if on_fit:
            on_fit(best, fits[best])
    test = fits[best].test
    assert test is not None  # evaluated above
    return SyntheticResult(test, fits[best].parameters, best,
                           {lr: fits[lr].validation for lr in sorted(tried)}, teacher.metric)


def _parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def oracle_error(task) -> float:
    """Relative test MSE of the oracle at a task's (static) teacher parameters: ~0 when model and
    teacher agree on how a head scores."""
    x, y = task.sample(256, TEST_INPUT_SEED)
    return evaluate(oracle_model(task.A, task.beta, task.W), task, x, y)


def coded_oracle_error(task: CodedRelationTask, model_name: str = "damcha-static", n: int = 256) -> float:
    """Relative test MSE of the per-code oracle: each sequence scored by a static oracle at its own
    code's teacher metric (`model_name`'s form), which is what an input-dependent metric that reads
    the code exactly computes; ~0 when that form represents every code's relation."""
    x, codes = task.draw(n, TEST_INPUT_SEED)
    y = task.targets(x, codes)  # (n, T, D)
    out = torch.zeros_like(y)
    for k, A in enumerate(task.metrics):
        chosen = codes == k
        with torch.no_grad():
            out[chosen] = oracle_model(A, task.beta, task.W, model_name)(x[chosen])[0]
    return float(F.mse_loss(out, y) / y.var())


def loop_reference_error(task, n: int = 2) -> float:
    """Largest |batched targets - loop reference| on n test sequences (per-sequence metrics included)."""
    x, A, batched = task.reference_case(n, TEST_INPUT_SEED)
    return float((batched - teacher_loop_reference(x, A, task.beta, task.W, task.heads)).abs().max())


def label_balance(d_e: int, n: int = 4096) -> np.ndarray:
    """Share of each class on n inputs (1 / (T - 1) each when balanced)."""
    labels = classification_labels(inputs(n, 11), subspace(d_e, task_seed(d_e, 0)))
    return np.bincount(labels.numpy(), minlength=T_SYN - 1) / n
