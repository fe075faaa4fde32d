"""A small pre-LN transformer around any registered attention mechanism (DAMCHA, its ablations, MHA, ...).

Read top to bottom: the task heads (each owns its loss), the block, the transformer. The
attention itself lives in `damcha.model.mechanisms`; this file only calls its shared interface.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from damcha.model.config import ModelConfig
from damcha.model.mechanisms import ForwardOptions, LayerCall, attention_mask
from damcha.model.mechanisms.cache import PrefixCache

IGNORE_INDEX = -100


@dataclass
class LayerIntermediates:
    """What one layer computed besides its output: the layer's `AttentionOutput` without `y`, its
    fields named alike. weights: (B, H, T, T) when asked for; internals: the mechanism's own record
    (DAMCHA: the HeadMetric it used); aux_loss: what it adds to the training loss."""

    weights: torch.Tensor | None
    internals: Any
    aux_loss: torch.Tensor | None = None


@dataclass(frozen=True)
class Snapshot:
    """Where a model's weights came from: the run folder, the epoch and the snapshot file's SHA-256
    (set by `damcha.runs.checkpoints.load_model`; None for a model built here)."""

    run: str
    epoch: int
    sha256: str


@dataclass
class ModelOutput:
    """logits: (B, T, V) for a decoder, (B, C) for a classifier, (B, T, input_dim) for vectors.
    loss: what training minimises, the task loss plus the mechanism's auxiliary losses (if any);
    task_loss: mean loss over real targets; token_loss: (B, T) per-token task loss (0 where
    ignored), (B,) for a classifier; aux_loss: the sum of the layers' auxiliary losses, or None.
    hidden_states: when asked for, the stack input and every block's output, (B, T, D) each, the last
    after the final norm (as Hugging Face models return them)."""

    logits: torch.Tensor
    loss: torch.Tensor | None = None
    token_loss: torch.Tensor | None = None
    layers: list[LayerIntermediates] | None = None
    task_loss: torch.Tensor | None = None
    aux_loss: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None


# ----------------------------------------------------------------------------- task heads

# Each head is the final linear map itself (so its weights keep the checkpoint name `head.*`)
# with a forward that returns (output, mean loss, per-token loss).

class NextTokenHead(nn.Linear):
    """Next-token logits at every position; cross-entropy over targets that are not IGNORE_INDEX."""

    def __init__(self, config: ModelConfig):
        super().__init__(config.n_embd, config.vocab_size, bias=config.head_bias)

    def forward(self, x, real, targets):
        logits = super().forward(x)  # (B, T, V)
        if targets is None:
            return logits, None, None
        B, T = targets.shape
        token_loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX,
                                     reduction="none").view(B, T)  # (B, T)
        return logits, token_loss.sum() / (targets != IGNORE_INDEX).sum().clamp_min(1), token_loss


class ClassificationHead(nn.Linear):
    """Class logits from the mean of the real tokens' features; cross-entropy per sequence."""

    def __init__(self, config: ModelConfig):
        super().__init__(config.n_embd, config.n_classes)

    def forward(self, x, real, targets):
        B, T, _ = x.shape
        w = torch.ones(B, T, 1, dtype=x.dtype, device=x.device) if real is None else real.unsqueeze(-1).to(x.dtype)
        pooled = (x * w).sum(1) / w.sum(1).clamp_min(1.0)  # (B, D)
        logits = super().forward(pooled)  # (B, C)
        if targets is None:
            return logits, None, None
        token_loss = F.cross_entropy(logits, targets, reduction="none")  # (B,)
        return logits, token_loss.mean(), token_loss


class NextVectorHead(nn.Linear):
    """Continuous vector prediction (image patches); mean squared error per vector. With
    config.head_hidden, a hidden layer with GELU comes first (the reference code's head)."""

    def __init__(self, config: ModelConfig):
        super().__init__(config.head_hidden or config.n_embd, config.input_dim)
        self.hidden = nn.Linear(config.n_embd, config.head_hidden) if config.head_hidden else None

    def forward(self, x, real, targets):
        pred = super().forward(F.gelu(self.hidden(x)) if self.hidden is not None else x)  # (B, T, input_dim)
        if targets is None:
            return pred, None, None
        token_loss = (pred - targets).pow(2).mean(dim=-1)  # (B, T)
        return pred, token_loss.mean(), token_loss


def task_head(config: ModelConfig) -> nn.Linear:
    if config.n_classes:
        return ClassificationHead(config)  # over token ids, or over vectors (image patches: the ViT layout)
    return NextVectorHead(config) if config.input_dim else NextTokenHead(config)


# ----------------------------------------------------------------------------- the transformer

class SwiGLU(nn.Module):
    """The Llama layout's feed-forward: proj(silu(gate(x)) * up(x)), no biases."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.gate = nn.Linear(config.n_embd, config.feed_forward_width, bias=False)
        self.up = nn.Linear(config.n_embd, config.feed_forward_width, bias=False)
        self.proj = nn.Linear(config.feed_forward_width, config.n_embd, bias=False)
        self.dropout = config.dropout

    def forward(self, x: torch.Tensor, stochastic: bool) -> torch.Tensor:
        return F.dropout(self.proj(F.silu(self.gate(x)) * self.up(x)), self.dropout, training=stochastic)  # (B, T, D)


def norm_layer(config: ModelConfig) -> nn.Module:
    return nn.RMSNorm(config.n_embd, eps=1e-6) if config.norm == "rms" else nn.LayerNorm(config.n_embd)


class MLP(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.fc = nn.Linear(config.n_embd, config.feed_forward_width)
        self.proj = nn.Linear(config.feed_forward_width, config.n_embd)
        self.dropout = config.dropout

    def forward(self, x: torch.Tensor, stochastic: bool) -> torch.Tensor:
        return F.dropout(self.proj(F.gelu(self.fc(x))), self.dropout, training=stochastic)  # (B, T, D)


class Block(nn.Module):
    """Pre-LN: x + attention(LN(x)), then x + MLP(LN(x)) (this project's models).
    Post-LN: LN(x + attention(x)), then LN(x + MLP(x)) (the authors' reference layout)."""

    def __init__(self, config: ModelConfig, layer_index: int):
        super().__init__()
        self.ln_1 = norm_layer(config)
        self.ln_2 = norm_layer(config)
        self.attn = config.mechanism.build_layer(config, layer_index)
        self.mlp = SwiGLU(config) if config.feed_forward == "swiglu" else MLP(config)
        self.dropout = config.dropout
        self.post_norm = config.norm_placement == "post"

    def forward(self, x: torch.Tensor, call: LayerCall) -> tuple[torch.Tensor, LayerIntermediates]:
        stochastic = call.stochastic
        a = self.attn(x if self.post_norm else self.ln_1(x), call)
        x = x + F.dropout(a.y, self.dropout, training=stochastic)  # (B, T, D)
        if self.post_norm:
            x = self.ln_1(x)  # (B, T, D)
            x = self.ln_2(x + self.mlp(x, stochastic))  # (B, T, D)
        else:
            x = x + self.mlp(self.ln_2(x), stochastic)  # (B, T, D)
        return x, LayerIntermediates(a.weights, a.internals, a.aux_loss)


class SinusoidalPositions(nn.Module):
    """Fixed positions (Vaswani et al.): sin on even features, cos on odd ones. Not a parameter and
    not saved: the table is a function of block_size and n_embd."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        T, D = config.block_size, config.n_embd
        position = torch.arange(T, dtype=torch.float32)[:, None]  # (T, 1)
        frequency = torch.exp(torch.arange(0, D, 2, dtype=torch.float32) * (-math.log(10000.0) / D))  # (ceil(D/2),)
        table = torch.zeros(T, D)  # (T, D)
        table[:, 0::2] = torch.sin(position * frequency)
        table[:, 1::2] = torch.cos(position * frequency[: D // 2])
        self.table: torch.Tensor
        self.register_buffer("table", table, persistent=False)

    def forward(self, pos: torch.Tensor) -> torch.Tensor:
        return self.table[pos]  # (T, D)


class Transformer(nn.Module):
    """Token embedding + positions -> n_layer pre-LN blocks -> final norm -> task head.

    Every choice that could differ between requests (the mechanism's options such as DAMCHA's
    metric mode, returned internals, dropout on or off) is an argument of forward, never module
    state, so one model can serve many callers at once.
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.mechanism = config.mechanism
        # Tokens are embedded by a table; continuous inputs (image patches) by a linear map.
        self.tok_emb = nn.Linear(config.input_dim, config.n_embd) if config.input_dim else nn.Embedding(config.vocab_size, config.n_embd)
        # Rotary positions act inside every layer's attend step (LayerCall.rotary): no table here.
        self.pos_emb = {"learned": lambda: nn.Embedding(config.block_size, config.n_embd),
                        "sinusoidal": lambda: SinusoidalPositions(config),
                        "rotary": lambda: None}[config.position_encoding]()
        self.blocks = nn.ModuleList(Block(config, i) for i in range(config.n_layer))
        self.ln_f = norm_layer(config) if config.final_norm else nn.Identity()
        # A module the mechanism runs once per stack (DAMCHA's shared metric); the name is kept
        # from the first checkpoint format, whose files name their tensors after it.
        self.metric_source = self.mechanism.build_shared(config)
        self.head = task_head(config)
        self.apply(_init_weights)
        self.snapshot: Snapshot | None = None  # where the weights were loaded from, if they were

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor | None = None, real: torch.Tensor | None = None,
                options: ForwardOptions | None = None, need_intermediates: bool = False,
                stochastic: bool | None = None, need_hidden_states: bool = False,
                layer_sites: Sequence[Callable] | None = None, positions: torch.Tensor | None = None,
                cache: PrefixCache | None = None) -> ModelOutput:
        """tokens: (B, T) ids, or (B, T, input_dim) vectors. targets: (B, T) next tokens (IGNORE_INDEX to
        skip), (B,) class ids, or (B, T, input_dim) next vectors. real: (B, T) bool, True for real tokens
        (default: tokens not equal to config.pad_token). options: the mechanism's per-call options
        (None: its defaults). stochastic: dropout on; None follows self.training. need_hidden_states:
        return the stack input and every block's output (references to tensors the pass makes anyway).
        layer_sites: one LayerCall.site per layer (with need_intermediates), where hooks read or replace
        each layer's scores and weights (damcha.interop.lens). positions: (B, T) the position of each token
        (a left-padded row's real tokens from 0; default: 0..T-1 for every row), for learned, sinusoidal
        and rotary positions alike. cache: what the model kept of the tokens read before (a PrefixCache,
        extended here): tokens are then the new ones only, their positions follow the cache's (unless
        given), and the logits are those a call with the whole sequence gives at the new positions
        (decoding only: mechanisms that declare decodes_with_cache, default options, no dropout)."""
        cfg = self.config
        B, T = tokens.shape[:2]
        past = 0 if cache is None else cache.length
        if past + T > cfg.block_size:
            raise ValueError(f"sequence of {past + T} tokens is longer than the model's block_size {cfg.block_size}")
        options = self.mechanism.options(options)
        stochastic = self.training if stochastic is None else stochastic
        real = self._real_tokens(tokens, real)  # (B, T) or None: no padding
        mask = attention_mask(real, cfg.causal, T, tokens.device)  # (B, 1, T, T) or None
        if cache is not None:
            self._check_cache(options, stochastic, need_intermediates or layer_sites is not None)
            new_real = torch.ones(B, T, dtype=torch.bool, device=tokens.device) if real is None else real  # (B, T)
            mask = cache.mask(new_real)  # (B, 1, T, past + T) or None
            if positions is None:
                positions = torch.arange(past, past + T, device=tokens.device).expand(B, T)  # (B, T)

        if positions is not None and (positions.shape != (B, T) or int(positions.min()) < 0
                                      or int(positions.max()) >= cfg.block_size):
            raise ValueError(f"positions must be (batch, length) = ({B}, {T}) in 0..{cfg.block_size - 1}, got shape "
                             f"{tuple(positions.shape)}")
        x = self.tok_emb(tokens)  # (B, T, D)
        if self.pos_emb is not None:
            x = x + self.pos_emb(torch.arange(T, device=tokens.device) if positions is None else positions)  # (B, T, D)
        x = F.dropout(x, cfg.dropout, training=stochastic)  # (B, T, D)
        shared = None
        if self.metric_source is not None:  # computed once from the stack input, used by every layer
            shared = (self.mechanism.run_shared(self.metric_source, x, real, options, stochastic) if cache is None
                      else self.mechanism.run_shared(self.metric_source, x, real, options, stochastic, cache.state))
        rotary = cfg.position_encoding == "rotary"
        call = LayerCall(real, mask, cfg.causal, options, need_intermediates, stochastic, shared,
                         rotary=positions if rotary and positions is not None else rotary)
        layers, hidden = [], [x]
        for i, block in enumerate(self.blocks):
            layer_call = call if layer_sites is None else replace(call, site=layer_sites[i])
            layer_call = layer_call if cache is None else replace(layer_call, cache=cache.layers[i])
            x, inter = block(x, layer_call)  # (B, T, D)
            layers.append(inter)
            hidden.append(x)
        if cache is not None:
            cache.advance(new_real)
        x = self.ln_f(x)  # (B, T, D)
        hidden[-1] = x
        logits, task_loss, token_loss = self.head(x, real, targets)
        aux = [inter.aux_loss for inter in layers if inter.aux_loss is not None]
        aux_loss = torch.stack(aux).sum() if aux else None
        loss = task_loss if aux_loss is None or task_loss is None else task_loss + aux_loss
        return ModelOutput(logits, loss, token_loss, layers if need_intermediates else None, task_loss, aux_loss,
                           tuple(hidden) if need_hidden_states else None)

    def _check_cache(self, options: ForwardOptions, stochastic: bool, inspected: bool) -> None:
        """A cache serves decoding: refused in words wherever its logits could differ from a full call's."""
        mechanism = self.mechanism
        if not self.config.causal:
            raise ValueError("a cache is for causal decoders: an encoder's every token reads every other, so a new "
                             "token changes what the earlier ones computed")
        if not mechanism.decodes_with_cache:
            raise ValueError(f"{mechanism.title} keeps no cache of the tokens read: its layers do not attend through "
                             "the shared cached step (Mechanism.decodes_with_cache); call it with the whole sequence "
                             "(generate() then recomputes the prefix at every step)")
        if stochastic or inspected:
            raise ValueError("a cache serves decoding only: no dropout (stochastic / training mode), intermediates "
                             "or hooks; call the model with the whole sequence for those")
        if options != mechanism.options(None):
            raise ValueError(f"a cache serves {mechanism.title}'s default options only: interventions and explicit "
                             "paths recompute the whole sequence")

    def _real_tokens(self, tokens: torch.Tensor, real: torch.Tensor | None) -> torch.Tensor | None:
        if real is None and self.config.pad_token is not None and not self.config.input_dim:
            real = tokens != self.config.pad_token  # (B, T)
        if real is None or torch.compiler.is_compiling():  # a traced graph cannot branch on the data: masks kept
            return real
        return None if bool(real.all()) else real  # no padding: the plain path is exact and faster

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def _init_weights(module: nn.Module) -> None:
    # nanoGPT-style init for the transformer; the metric generator keeps PyTorch's default
    # Linear init so its random initial residue is as a plain MLP would have it.
    if isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, std=0.02)


def build_model(config: ModelConfig, seed: int | None = None) -> Transformer:
    """Build a transformer from its config; with a seed the initial weights are reproducible."""
    if seed is None:
        return Transformer(config)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return Transformer(config)


def sequence_losses(token_loss: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Each sequence's loss as the model's own loss reads it: (B, T) per-position losses averaged over
    the positions that have a target (IGNORE_INDEX marks none; vector targets all have one), or
    (B,) per-sequence losses (a classifier) as they are. (B,)"""
    if token_loss.dim() == 1:
        return token_loss  # (B,)
    known = torch.ones_like(token_loss) if targets.is_floating_point() else (targets != IGNORE_INDEX).to(token_loss.dtype)
    return (token_loss * known).sum(dim=1) / known.sum(dim=1).clamp_min(1)  # (B,)


def non_finite(tensors: dict[str, torch.Tensor]) -> str:
    """The names of the floating tensors holding NaN or infinity, the first five and a count ('' if none)."""
    names = sorted(k for k, v in tensors.items() if v.is_floating_point() and not torch.isfinite(v).all())
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
