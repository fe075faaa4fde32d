"""A small pre-LN transformer whose attention is DAMCHA (any ablation) or standard MHA."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .attention import MetricAttention, MultiHeadAttention, attention_mask
from .config import MetricMode, ModelConfig
from .metric import HeadMetric, MetricSource

IGNORE_INDEX = -100


@dataclass
class LayerIntermediates:
    """What one layer computed, returned only when asked for.
    attention: (B, H, T, T); metric: the HeadMetric the layer used (None for MHA)."""

    attention: torch.Tensor | None
    metric: HeadMetric | None


@dataclass
class ModelOutput:
    """logits: (B, T, V) for a decoder, (B, C) for a classifier.
    loss: mean loss over real targets; token_loss: (B, T) per-token loss (0 where ignored)."""

    logits: torch.Tensor
    loss: torch.Tensor | None = None
    token_loss: torch.Tensor | None = None
    layers: list[LayerIntermediates] | None = None


class MLP(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.fc = nn.Linear(config.n_embd, config.mlp_ratio * config.n_embd)
        self.proj = nn.Linear(config.mlp_ratio * config.n_embd, config.n_embd)
        self.dropout = config.dropout

    def forward(self, x: torch.Tensor, stochastic: bool) -> torch.Tensor:
        return F.dropout(self.proj(F.gelu(self.fc(x))), self.dropout, training=stochastic)  # (B, T, D)


class Block(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        if config.is_damcha:
            self.attn = MetricAttention(config, own_metric=config.metric_sharing == "per_layer")
        else:
            self.attn = MultiHeadAttention(config)
        self.mlp = MLP(config)
        self.dropout = config.dropout


class Transformer(nn.Module):
    """Token embedding + positions -> n_layer pre-LN blocks -> final norm -> LM or class head.

    Every choice that could differ between requests (metric mode, explicit path, returned
    internals, dropout on or off) is an argument of forward, never module state, so one
    model can serve many callers at once.
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        # Tokens are embedded by a table; continuous inputs (CIFAR patches) by a linear map.
        self.tok_emb = nn.Linear(config.input_dim, config.n_embd) if config.input_dim else nn.Embedding(config.vocab_size, config.n_embd)
        self.pos_emb = nn.Embedding(config.block_size, config.n_embd)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)
        shared = config.is_damcha and config.metric_sharing == "shared"
        self.metric_source = MetricSource(config) if shared else None
        out = config.input_dim or config.n_classes or config.vocab_size
        self.head = nn.Linear(config.n_embd, out, bias=bool(config.n_classes or config.input_dim))
        self.apply(_init_weights)

    def forward(
        self,
        tokens: torch.Tensor,
        targets: torch.Tensor | None = None,
        real: torch.Tensor | None = None,
        metric_mode: MetricMode | str = MetricMode.FULL,
        explicit: bool = False,
        need_intermediates: bool = False,
        stochastic: bool | None = None,
    ) -> ModelOutput:
        """tokens: (B, T) int64, or (B, T, input_dim) floats for continuous inputs. targets: (B, T)
        next tokens (IGNORE_INDEX to skip) for a decoder, (B,) class ids for a classifier,
        (B, T, input_dim) next vectors (loss: mean squared error) for continuous inputs. real: (B, T) bool, True for real tokens
        (default: every token not equal to config.pad_token). explicit: build the full
        M(x) and explicit scores (inspection and tests). stochastic: dropout on; None
        follows self.training.
        """
        cfg = self.config
        B, T = tokens.shape[:2]
        if T > cfg.block_size:
            raise ValueError(f"sequence of {T} tokens is longer than the model's block_size {cfg.block_size}")
        stochastic = self.training if stochastic is None else stochastic
        if real is None and cfg.pad_token is not None and not cfg.input_dim:
            real = tokens != cfg.pad_token  # (B, T)
        if real is not None and bool(real.all()):
            real = None  # no padding: the plain causal path is exact and faster
        mask = attention_mask(real, cfg.causal, T, tokens.device)  # (B, 1, T, T) or None

        pos = torch.arange(T, device=tokens.device)  # (T,)
        x = self.tok_emb(tokens) + self.pos_emb(pos)  # (B, T, D)
        x = F.dropout(x, cfg.dropout, training=stochastic)  # (B, T, D)
        shared = None
        if self.metric_source is not None:  # stack-wise sharing: M from the stack input, once
            shared = self.metric_source(x, real, metric_mode, explicit=explicit, stochastic=stochastic)

        layers: list[LayerIntermediates] = []
        for block in self.blocks:
            a = block.attn(
                block.ln_1(x), real, mask, metric_mode,
                shared_metric=shared, explicit=explicit, need_weights=need_intermediates, stochastic=stochastic,
            )
            x = x + F.dropout(a.y, cfg.dropout, training=stochastic)  # (B, T, D)
            x = x + block.mlp(block.ln_2(x), stochastic)  # (B, T, D)
            if need_intermediates:
                layers.append(LayerIntermediates(attention=a.weights, metric=a.metric))
        x = self.ln_f(x)  # (B, T, D)

        if cfg.n_classes:
            w = torch.ones(B, T, 1, dtype=x.dtype, device=x.device) if real is None else real.unsqueeze(-1).to(x.dtype)
            pooled = (x * w).sum(1) / w.sum(1).clamp_min(1.0)  # (B, D)
            logits = self.head(pooled)  # (B, C)
        else:
            logits = self.head(x)  # (B, T, V)

        loss = token_loss = None
        if targets is not None:
            if cfg.input_dim:
                token_loss = (logits - targets).pow(2).mean(dim=-1)  # (B, T) squared error per vector
                loss = token_loss.mean()
            elif cfg.n_classes:
                token_loss = F.cross_entropy(logits, targets, reduction="none")  # (B,)
                loss = token_loss.mean()
            else:
                token_loss = F.cross_entropy(
                    logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX, reduction="none"
                ).view(B, T)  # (B, T)
                n = (targets != IGNORE_INDEX).sum().clamp_min(1)
                loss = token_loss.sum() / n
        return ModelOutput(logits=logits, loss=loss, token_loss=token_loss, layers=layers if need_intermediates else None)

    def metric_sources(self) -> list[MetricSource]:
        """The generator(s) of M: one for a shared metric, one per layer otherwise, none for MHA."""
        if self.metric_source is not None:
            return [self.metric_source]
        return [b.attn.metric_source for b in self.blocks if getattr(b.attn, "metric_source", None) is not None]

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
