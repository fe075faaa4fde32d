"""DAMCHA as a registered mechanism: its settings, per-call choices, structures (M(x), learned part,
residue, block norms, m_i), interventions and notes. The layer is `damcha.model.mechanisms.damcha.layer`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from damcha.model.mechanisms.base import Choice, InferenceAblation, Mechanism, Setting
from damcha.model.mechanisms.damcha.access import DamchaMetricAccess
from damcha.model.mechanisms.damcha.interventions import metric_interventions
from damcha.model.mechanisms.damcha.layer import (
    METRIC_INPUTS,
    METRIC_SHARINGS,
    PROFILE_CHUNK,
    SCORE_FORMS,
    DamchaOptions,
    MetricAttention,
    metric_sources,
    run_source,
)
from damcha.model.mechanisms.damcha.metric import HeadMetric, MetricMode, MetricSource, block_norms, learned_and_residue
from damcha.model.mechanisms.structures import Identifiability, Structure, StructureKind, ValueKind

if TYPE_CHECKING:
    from damcha.model.config import ModelConfig

MODE_TITLES = {MetricMode.FULL: "full", MetricMode.DIAGONAL: "diagonal only", MetricMode.OFF_DIAGONAL: "off-diagonal only",
               MetricMode.DIAGONAL_SCALED: "diagonal only × H"}

# How to read the validation set under each metric mode (the Ablation page), by the run's score form.
ABLATION_NOTES = {
    "row_sum": "**Row-sum runs:** the diagonal-only metric is M_ii = m_i / H + its initialisation residue, and the "
               "off-diagonal-only metric is (H−1)/H · m_i minus that residue. Neither 'the diagonal' nor 'the "
               "off-diagonal' was learned as such, so a gap between them measures the random residue and the "
               "1 : (H−1) scaling, not what cross-head blocks learned. The mode 'diagonal only × H' (H · M_ii = m_i + "
               "H · residue) restores the scale: where it ties with full, the diagonal-only loss is that arithmetic.",
    "bilinear": "**Bilinear runs:** every block M_ij is trained for its own role (head i's queries against head j's "
                "keys), so the diagonal/off-diagonal split is meaningful there.",
}


class Damcha(Mechanism[DamchaOptions]):
    rotary_positions = True  # every score goes through the shared attend step, call.rotary passed on
    decodes_with_cache = True  # keys are the layer inputs; the metric's context a running sum and count
    name = "damcha"
    title = "DAMCHA (data-adaptive Mahalanobis cross-head attention)"
    reference = "Duan et al. 2026, 'Data-Adaptive Mahalanobis Metric Learning for Cross-Head Attention in Transformers'"
    options_type = DamchaOptions
    shared_entry_points = ("intervened",)  # the metric under an intervention (run_source)
    option_choices = (Choice("metric_mode", tuple(m.value for m in MetricMode),
                             "Inference-time row sum: full m_i = Σ_j M_ij, diagonal-only M_ii, off-diagonal-only "
                             "Σ_{j≠i} M_ij.", "mode",
                             tuple(MODE_TITLES[m] for m in MetricMode)),)
    inference_ablation = InferenceAblation("metric_mode", lambda config: ABLATION_NOTES[config.setting("score_form")],
                                           lambda config: {"score_form": config.setting("score_form")})
    # The first five were ModelConfig fields until December 2026 (config.MOVED_SETTINGS: saved runs open as before).
    declared_settings = (
        Setting("metric_sharing", str, "shared", "one generator f for the whole stack (the paper) or one per layer",
                METRIC_SHARINGS),
        Setting("metric_input", str, "adaptive", "M = f(x) from each input, or one learned M ('w/o f(x)')",
                METRIC_INPUTS),
        Setting("score_form", str, "row_sum", "the paper's row sum (Eq. 4) or the full cross-head bilinear form "
                "(an extension beyond the paper)", SCORE_FORMS),
        Setting("generator_widths", tuple, (64, 128), "hidden widths of f (the paper: 256,512)", minimum=1),
        Setting("generator_dropout", float, 0.0, "dropout inside f", minimum=0),
        Setting("generator_start", str, "uniform", "how f's last layer starts: nn.Linear's uniform start (every "
                "shipped run; M(c) and each m_i start as small random numbers) or with its bias at M(c) = I, each head "
                "a dot product on its slice like w/o f(x) (an implementation choice: the paper's start is not known)",
                ("uniform", "identity")),
    )

    def validate(self, config: ModelConfig) -> None:
        super().validate(config)
        if config.setting("generator_dropout") >= 1:
            raise ValueError(f"generator_dropout must be in [0, 1), got {config.setting('generator_dropout')!r}")

    def build_layer(self, config, layer_index: int) -> nn.Module:
        return MetricAttention(config, own_metric=config.setting("metric_sharing") == "per_layer", index=layer_index)

    def hook_sites(self, model) -> dict[str, tuple[nn.Module, str]]:
        sources = metric_sources(model)
        prefixes = ["metric"] if model.metric_source is not None else [f"metric_{i}" for i in range(len(sources))]
        # context: the mean the metric is generated from (a record: editing it changes nothing downstream);
        # head: the per-head metrics m_i every layer scores with (editing them changes the output).
        return {f"{prefix}.{hook}": (source, field) for prefix, source in zip(prefixes, sources)
                for hook, field in (("hook_context", "context"), ("hook_head_metric", "head"))}

    def build_shared(self, config) -> nn.Module | None:
        return MetricSource(config) if config.setting("metric_sharing") == "shared" else None

    def run_shared(self, module: MetricSource, x, real, options: DamchaOptions, stochastic: bool,
                   prefix: dict | None = None) -> HeadMetric:
        return run_source(module, 0, x, real, options, stochastic, prefix)

    def structures(self, model, layers: Sequence, positions: np.ndarray,
                   options: DamchaOptions) -> list[Structure]:
        H = model.config.n_head
        arrays = metric_arrays(model, layers, positions)
        words = StructureWords.of(model.config.setting("score_form") == "row_sum", MetricMode(options.metric_mode))
        axes = ("layer", "position", "row", "col")
        grid: dict[str, Any] = dict(axis_titles=words.grid_titles, unit="metric entry")
        norms: dict[str, Any] = dict(labels={"head_q": [f"head {i + 1}" for i in range(H)],
                                             "head_k": [f"head {j + 1}" for j in range(H)]},
                                     axis_titles=words.norm_titles, value_kind=ValueKind.MAGNITUDE, unit="‖·‖_F")
        return [
            Structure("metric", "M(x)", _np(arrays.metric), axes, StructureKind.HEAD_GRID_MATRIX, words.metric,
                      words.metric_part, **grid),
            Structure("metric_learned", words.learned_title, _np(arrays.learned), axes, StructureKind.HEAD_GRID_MATRIX,
                      "Each block replaced by the mean of its block row, m_i / H: all the row sum can see.",
                      Identifiability.LEARNED, **grid),
            Structure("metric_residue", words.residue_title, _np(arrays.residue), axes, StructureKind.HEAD_GRID_MATRIX,
                      words.residue, words.residue_part, **grid),
            Structure("block_norms_learned", words.learned_norms_title, _np(block_norms(arrays.learned, H)),
                      ("layer", "position", "head_q", "head_k"), StructureKind.HEAD_BY_HEAD, words.learned_norms,
                      Identifiability.LEARNED, **norms),
            Structure("block_norms_residue", words.residue_norms_title, _np(block_norms(arrays.residue, H)),
                      ("layer", "position", "head_q", "head_k"), StructureKind.HEAD_BY_HEAD, words.residue_norms,
                      words.residue_part, **norms),
            Structure("head_metrics", words.head_metrics_title, _np(arrays.head_metrics),
                      ("layer", "position", "head", "d", "d_key" if words.row_sum else "D"),
                      StructureKind.PER_HEAD_FORMS, words.head_metrics, words.mode_part,
                      labels={"head": [f"m_{i + 1}" for i in range(H)]},
                      axis_titles={"d": "query coordinate of head i's slice",
                                   "d_key": "key coordinate of head i's slice", "D": "key coordinate of x"},
                      unit="metric entry", drawn_under=words.mode.value),
        ]

    def metric_access(self) -> DamchaMetricAccess:
        return DamchaMetricAccess()

    def metric(self, config) -> str:
        return config.setting("metric_input")

    def metric_count(self, config) -> int:
        return config.n_layer if config.setting("metric_sharing") == "per_layer" else 1

    def single_layer(self, config):
        return config.with_settings(metric_sharing="per_layer")  # alone, a layer owns its generator

    def interventions(self, config) -> list:
        return metric_interventions(config)

    def structure_sources(self, model) -> dict:
        if model.config.setting("metric_input") == "static":
            return {}  # one learned M for every input
        if model.metric_source is not None:
            return {"the shared metric": [model.metric_source]}
        return {f"layer {i + 1}": [source] for i, source in enumerate(metric_sources(model))}

    def inference_bytes(self, config, T: int) -> int:
        if config.setting("metric_sharing") != "shared" or config.setting("metric_input") == "static":
            return 0  # per-layer metrics are streamed in chunks at inference; a static one is one matrix
        P = T if config.causal else 1
        width = config.n_embd if config.setting("score_form") == "bilinear" else config.head_dim
        return P * config.n_embd * width * 4  # (P, H, d, d|D) float32

    def sequence_profile(self, model, layers: Sequence, options: DamchaOptions, progress=None,
                         chunk: int | None = None) -> list[Structure]:
        cfg = model.config
        chunk = chunk or PROFILE_CHUNK
        if not cfg.causal or cfg.setting("metric_input") == "static":
            return []  # one metric for the whole input: the structures themselves are the profile
        H = cfg.n_head
        sources = metric_sources(model)
        metrics = [layers[0].internals] if model.metric_source is not None else [layer.internals for layer in layers]
        norms, shares = [], []
        steps = sum(-(-hm.context.shape[1] // chunk) for hm in metrics)
        done = 0
        for source, hm in zip(sources, metrics):
            norms.append(hm.head[0].flatten(-2).norm(dim=-1))  # (T, H)
            ctx = hm.context[0]  # (T, D)
            rows = []
            for s in range(0, ctx.shape[0], chunk):
                M = source.full_metric(ctx[s:s + chunk])  # (c, D, D): the only per-position matrices, one chunk at a time
                total = M.pow(2).sum(dim=(-2, -1)).clamp_min(1e-30)  # (c,)
                residue = learned_and_residue(M, H)[1].pow(2).sum(dim=(-2, -1))  # (c,)
                blocks = block_norms(M, H).pow(2)  # (c, H, H)
                off = blocks.sum(dim=(-2, -1)) - blocks.diagonal(dim1=-2, dim2=-1).sum(-1)  # (c,)
                rows.append(torch.stack([residue / total, off / total], dim=-1))  # (c, 2)
                done += 1
                if progress:
                    progress(done, steps)
            shares.append(torch.cat(rows))  # (T, 2)
        heads = {"head": [f"head {i + 1}" for i in range(H)]}
        unidentifiable = "unidentifiable part" if cfg.setting("score_form") == "row_sum" else "deviation from the row mean"
        return [
            Structure("head_metric_norms", "‖m_i(c_t)‖ along the input", _np(torch.stack(norms)), ("layer", "token", "head"),
                      StructureKind.MATRIX, "Frobenius norm of each head's metric at every query position.",
                      Identifiability.LEARNED, heads, value_kind=ValueKind.MAGNITUDE, unit="‖m_i‖_F"),
            Structure("metric_shares", "Shares of ‖M(c_t)‖² along the input", _np(torch.stack(shares)),
                      ("layer", "token", "share"), StructureKind.MATRIX,
                      f"At every query position: the residue's share ({unidentifiable}) and the off-diagonal blocks' "
                      f"share of the metric's energy. The block count alone puts (H−1)/H = {(H - 1) / H:.2f} of the "
                      "learned part's energy off the diagonal.", Identifiability.PARTLY,
                      {"share": ["residue", "off-diagonal blocks"]}, value_kind=ValueKind.PROBABILITY, unit="share"),
        ]

    def settings(self, config) -> dict:
        return {"metric": config.setting("metric_input"), "sharing": config.setting("metric_sharing"), "score form": config.setting("score_form"),
                "generator widths": list(config.setting("generator_widths"))}

    def identifiability_note(self, config) -> str:
        if config.setting("score_form") == "row_sum":
            return ("Row-sum form (paper Eq. 4): every block of row i reaches the loss only through "
                    "m_i = sum_j M_ij, so only the learned part (each block = m_i / H) is identifiable; "
                    "the residue (zero row mean) is a fixed random read-out of the generator's "
                    "features set at initialisation, and the diagonal/off-diagonal split it creates "
                    "is not learned.")
        return ("Bilinear form (an extension beyond the paper): each block M_ij scores head i's "
                "queries against head j's keys, so every block, and the diagonal/off-diagonal "
                "split, is learned.")

    def notes(self, config) -> list[str]:
        return [self.identifiability_note(config)]


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().copy()


@dataclass(frozen=True)
class MetricArrays:
    """DAMCHA's structures at the positions asked for: the full metric, its learned part and residue,
    (L_m, P, D, D) each, and what each head scores with, (L_m, P, H, d, d) (the bilinear form: d x D)."""

    metric: torch.Tensor
    learned: torch.Tensor
    residue: torch.Tensor
    head_metrics: torch.Tensor


def metric_arrays(model, layers: Sequence, positions: np.ndarray) -> MetricArrays:
    """The metrics of one input (batch of one) at `positions` (causal; one for a non-causal model)."""
    cfg = model.config
    sources = metric_sources(model)
    metrics = [layers[0].internals] if model.metric_source is not None else [layer.internals for layer in layers]
    device = next(model.parameters()).device
    sel = torch.as_tensor(positions if cfg.causal else [0], device=device)  # (P,)
    fulls, heads_m = [], []
    for source, hm in zip(sources, metrics):
        head = hm.head[0]  # (1 or T, H, d, d|D): one metric per sequence (or static) or per position
        heads_m.append(head[sel] if head.shape[0] > 1 else head.expand(len(sel), *head.shape[1:]))  # (P, H, d, d|D)
        ctx = hm.context[0] if hm.context is not None else torch.zeros(1, cfg.n_embd, device=device)
        ctx = ctx[sel] if ctx.shape[0] > 1 else ctx.expand(len(sel), cfg.n_embd)  # (P, D)
        fulls.append(source.full_metric(ctx))  # (P, D, D)
    M = torch.stack(fulls)  # (L_m, P, D, D)
    learned, residue = learned_and_residue(M, cfg.n_head)  # (L_m, P, D, D) each
    return MetricArrays(M, learned, residue, torch.stack(heads_m))  # heads: (L_m, P, H, d, d|D)


@dataclass(frozen=True)
class StructureWords:
    """What DAMCHA's structures say under its score form and metric mode: titles, axis titles, captions and
    what of each is learned."""

    row_sum: bool
    mode: MetricMode
    grid_titles: dict[str, str]
    norm_titles: dict[str, str]
    learned_title: str
    residue_title: str
    metric: str
    residue: str
    learned_norms_title: str
    learned_norms: str
    residue_norms_title: str
    residue_norms: str
    head_metrics_title: str
    head_metrics: str
    metric_part: Identifiability
    residue_part: Identifiability
    mode_part: Identifiability

    @classmethod
    def of(cls, row_sum: bool, mode: MetricMode) -> StructureWords:
        if row_sum:  # head i scores its own slice with m_i = Σ_j M_ij: a block's columns are no other head's keys
            grid_titles = {"row": "row: head i's query coordinates",
                           "col": "column: coordinate within the block (summed over j into m_i)"}
            norm_titles = {"head_q": "block row i (head i's metric m_i)", "head_k": "block column j (a term of m_i)"}
        else:
            grid_titles = {"row": "row: head i's query coordinates", "col": "column: head j's key coordinates"}
            norm_titles = {"head_q": "query head i", "head_k": "key head j"}
        residue_name = "the residue" if row_sum else "the deviation from the row mean"
        # What head i scores with under the mode: the row sum m_i is learned; a single block M_ii or the
        # off-diagonal sum is m_i / H (or (H−1)/H · m_i) plus the residue's diagonal block, partly unidentifiable.
        mode_part = Identifiability.PARTLY if row_sum and mode is not MetricMode.FULL else Identifiability.LEARNED
        mode_note = ("" if mode_part is Identifiability.LEARNED else
                     f" Under the '{mode.value}' mode head i scores with a multiple of m_i plus a multiple of the "
                     "residue's diagonal block R_ii, which the row sum never trains: partly unidentifiable.")
        unchanged = ("" if mode is MetricMode.FULL else
                     f" The '{mode.value}' metric mode does not change M(x) itself, only which of its blocks each head "
                     "sums (see the per-head metrics).")
        block_meaning = ("Under the row sum all blocks of row i enter only through their sum m_i, so these norms "
                         "say how the metric happens to be split, not what head i reads of head j."
                         if row_sum else "Under the bilinear form block M_ij scores head i's queries against head j's "
                         "keys: its norm is how strongly head i reads head j.")
        return cls(
            row_sum, mode, grid_titles, norm_titles,
            learned_title="learned (m_i / H)" if row_sum else "row mean (m_i / H)",
            residue_title="residue (unidentifiable)" if row_sum else "deviation from the row mean (learned)",
            metric="The full D×D metric at this input, H×H head blocks outlined; block row i is head i's."
                   + (" Under the row sum head i uses only Σ_j M_ij: see the learned part and the residue."
                      if row_sum else "") + unchanged,
            residue="M minus the learned part: zero mean along each block row."
                    + (" It receives no gradient of its own under the row sum." if row_sum else ""),
            learned_norms_title=f"Block norms of the {'learned part' if row_sum else 'row mean'} ‖m_i / H‖",
            learned_norms="Frobenius norm of each block of the learned part: the same along a block row (every block "
                          "of row i is m_i / H). " + block_meaning,
            residue_norms_title=f"Block norms of {residue_name}",
            residue_norms=f"Frobenius norm of each block of {residue_name} (M minus the row means). " + block_meaning,
            head_metrics_title="Per-head metrics m_i" if row_sum else "Scaled rows of each head (bilinear)",
            head_metrics=f"What each head scores with under the '{mode.value}' metric mode." + mode_note,
            metric_part=Identifiability.PARTLY if row_sum else Identifiability.LEARNED,
            residue_part=Identifiability.UNIDENTIFIABLE if row_sum else Identifiability.LEARNED,
            mode_part=mode_part)
