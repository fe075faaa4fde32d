"""TransformerLens on the project's Transformer: `HookedDamcha(model)` is a TransformerLens HookedRootModule
whose hook points sit at TransformerLens's canonical names, so run_with_cache, run_with_hooks and the
tools built on them work on any registered mechanism:

    hook_embed                      the token embeddings                             (B, T, D)
    hook_pos_embed                  the position embeddings (learned or sinusoidal)  (B, T, D)
    blocks.{i}.hook_resid_pre       a block's input                                  (B, T, D)
    blocks.{i}.ln1.hook_scale       the norm's divisor at its input, sqrt(var + eps) for LayerNorm,
                                    sqrt(mean square + eps) for RMSNorm (a record)    (B, T, 1)
    blocks.{i}.ln1.hook_normalized  the norm's output, weights applied                (B, T, D)
    blocks.{i}.ln2.…                the same at the MLP's norm (ln1_post, ln2_post in post-norm models,
                                    whose norms follow the residual add)
    blocks.{i}.hook_resid_mid       after the attention's residual add (pre-norm models; read only: an
                                    edit reaches the MLP's input, not the residual)  (B, T, D)
    blocks.{i}.mlp.hook_pre         the MLP's hidden pre-activation (SwiGLU: the gate's; hook_pre_linear
                                    the up map's)                                     (B, T, d_mlp)
    blocks.{i}.mlp.hook_post        the hidden activations the output map reads       (B, T, d_mlp)
    blocks.{i}.hook_mlp_out         the MLP's output (pre-norm models)               (B, T, D)
    blocks.{i}.attn.hook_v          the values, where the layer has a `value` map    (B, T, H, d)
    blocks.{i}.attn.hook_attn_scores  scores after the mask, before the softmax      (B, H', T, T)
    blocks.{i}.attn.hook_pattern    the weights that multiply the values             (B, H', T, T)
    blocks.{i}.attn.hook_z          the heads' outputs side by side, before the output projection (B, T, H, d)
    blocks.{i}.hook_attn_out        the attention's output                           (B, T, D)
    blocks.{i}.hook_resid_post      a block's output                                 (B, T, D)
    ln_final.hook_scale             the final norm's divisor                          (B, T, 1)
    ln_final.hook_normalized        the final norm's output                          (B, T, D)

plus the mechanism's own sites (Mechanism.hook_sites; DAMCHA: metric.hook_context, the context mean
the metric is generated from (a record: editing it changes nothing), and metric.hook_head_metric, the
per-head metrics m_i the layers score with; metric_{i}.… for a metric per layer).
H' is the number of maps the mechanism's attend step computes (2H for differential attention, the
experts for MoA). Scores and patterns fire where a mechanism attends through the shared attend step;
the hooks run on the explicit path (the weights are built). run_with_cache returns TransformerLens's
ActivationCache, and `cfg` holds the field names its helpers read (n_layers, d_model, n_heads, d_head, ...),
so accumulated_resid, decompose_resid, stack_head_results (from hook_z and each layer's W_O, where the heads
meet at an output projection), stack_neuron_results (W_out), get_full_resid_decomposition (accumulated_bias),
logit_attrs (W_U, tokens_to_residual_directions; next-token models), apply_ln at any layer (the cached
scales: TransformerLens's parameter-free norm, as with fold_ln; at the unembed the final norm itself),
transformer_lens.patching and head_detector (a list of prompts too) run on every mechanism; which
canonical hook a mechanism does not fire is said by `silent_hooks`. What does not apply, declared in
UNSUPPORTED: W_Q/W_K and QK circuits (DAMCHA has no query or key projection), weight folding and
centring (the project's models are not refactored), the TransformerBridge and its adapter entry point
(the bridge drives a module with Hugging Face's call signature and split Q/K/V projections).
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import cast

import torch
from torch import nn
from torch.nn import functional as F

try:
    from transformer_lens import ActivationCache, HookedRootModule
    from transformer_lens.config import TransformerBridgeConfig
    from transformer_lens.hook_points import HookPoint
except ImportError:  # pragma: no cover - the message is the point
    raise ImportError("damcha.interop.lens needs TransformerLens: pip install 'damcha[lens]'") from None

from damcha.model.transformer import MLP, Block, NextTokenHead, SwiGLU, Transformer

UNSUPPORTED = {
    "W_Q, W_K, QK circuits": "DAMCHA scores q = x_i·m_i against k = x_i: there is no query or key projection "
                             "(other mechanisms keep theirs as ordinary weights of their layers)",
    "fold_ln, center_writing_weights": "the project's models are used as trained, never refactored",
    "TransformerBridge / architecture adapters": "the bridge drives modules with Hugging Face's call signature and "
                                                 "split Q/K/V projections; HookedDamcha is a HookedRootModule instead",
    "head_detector on interleaved heads (IHA)": "its patterns are over T·P interleaved pseudo-tokens, not the T "
                                                "positions the detector's patterns are drawn over",
    "hook_attn_scores of THA and DCMHA": "they mix scores across heads in their own steps, not through the shared "
                                         "attend step (their hook_pattern is the weights they return: a record)",
}


class _Attention(nn.Module):
    def __init__(self, output: nn.Linear | None, heads: int):
        super().__init__()
        self.hook_v, self.hook_attn_scores, self.hook_pattern, self.hook_z = HookPoint(), HookPoint(), HookPoint(), HookPoint()
        self._output, self._heads = [output], heads  # a list: the model's module, not a submodule of this one

    @property
    def W_O(self) -> torch.Tensor:
        """(H, d, D): each head's columns of the output projection, as TransformerLens lays them out."""
        output = self._output[0]
        if output is None:
            raise AttributeError("this mechanism's heads do not meet at an output projection: no W_O")
        return output.weight.T.reshape(self._heads, output.in_features // self._heads, output.out_features)

    @property
    def b_O(self) -> torch.Tensor:
        output = self._output[0]
        if output is None or output.bias is None:
            return torch.zeros(output.out_features if output is not None else 0)
        return output.bias


class _Norm(nn.Module):
    """A norm's hooks (hook_scale, hook_normalized); callable as the model's norm itself (ActivationCache's
    apply_ln calls ln_final at the unembed)."""

    def __init__(self, norm: nn.Module):
        super().__init__()
        self.hook_scale, self.hook_normalized = HookPoint(), HookPoint()
        self._norm = [norm]  # a list: the model's module, not a submodule of this one

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._norm[0](x)

    def watch(self) -> torch.utils.hooks.RemovableHandle:
        """A forward hook on the model's norm for one call: the scale it divided by, then its output."""
        def hook(module, args, out):
            self.hook_scale(norm_scale(module, args[0]))  # a record: the norm computes its own
            return self.hook_normalized(out)
        return self._norm[0].register_forward_hook(hook)


class _MLP(nn.Module):
    """A block's feed-forward: hook_pre (hook_pre_linear for SwiGLU), hook_post, and W_in, W_out, b_out as
    TransformerLens lays them out (d_model x d_mlp, d_mlp x d_model, d_model)."""

    def __init__(self, mlp: MLP | SwiGLU):
        super().__init__()
        self.hook_pre, self.hook_post = HookPoint(), HookPoint()
        if isinstance(mlp, SwiGLU):
            self.hook_pre_linear = HookPoint()
        self._mlp = [mlp]

    @property
    def W_in(self) -> torch.Tensor:
        mlp = self._mlp[0]
        return (mlp.up if isinstance(mlp, SwiGLU) else mlp.fc).weight.T

    @property
    def W_out(self) -> torch.Tensor:
        return self._mlp[0].proj.weight.T

    @property
    def b_out(self) -> torch.Tensor:
        proj = self._mlp[0].proj
        return proj.bias if proj.bias is not None else torch.zeros(proj.out_features)

    def watch(self) -> list:
        mlp = self._mlp[0]
        handles = [(mlp.gate if isinstance(mlp, SwiGLU) else mlp.fc).register_forward_hook(
                       lambda m, args, out: self.hook_pre(out)),
                   mlp.proj.register_forward_pre_hook(lambda m, args: (self.hook_post(args[0]),))]
        if isinstance(mlp, SwiGLU):
            handles.append(mlp.up.register_forward_hook(lambda m, args, out: self.hook_pre_linear(out)))
        return handles


class _Block(nn.Module):
    def __init__(self, block: Block, output: nn.Linear | None, heads: int, post_norm: bool):
        super().__init__()
        self.hook_resid_pre, self.hook_attn_out, self.hook_resid_post = HookPoint(), HookPoint(), HookPoint()
        self.hook_resid_mid, self.hook_mlp_out = HookPoint(), HookPoint()
        self.attn = _Attention(output, heads)
        self.mlp = _MLP(block.mlp)
        # TransformerLens's names: ln1/ln2 normalise a sublayer's input; ln1_post/ln2_post (post-norm models) its
        # output after the residual add, so its apply_ln at a layer says it is undefined there instead of guessing.
        suffix = "_post" if post_norm else ""
        self.add_module(f"ln1{suffix}", _Norm(block.ln_1))
        self.add_module(f"ln2{suffix}", _Norm(block.ln_2))
        if post_norm:
            self.ln1 = self.ln2 = None

    def norms(self) -> list[_Norm]:
        return [m for m in self.children() if isinstance(m, _Norm)]


def norm_scale(norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """(..., 1): what `norm` (a LayerNorm or RMSNorm) divides `x` by."""
    if isinstance(norm, nn.RMSNorm):
        eps = norm.eps if norm.eps is not None else torch.finfo(x.dtype).eps
        return (x.pow(2).mean(-1, keepdim=True) + eps).sqrt()
    if not isinstance(norm, nn.LayerNorm):
        raise TypeError(f"{type(norm).__name__}: the lens reads a LayerNorm's or an RMSNorm's scale only")
    return (x.var(-1, unbiased=False, keepdim=True) + norm.eps).sqrt()


class _Named(nn.Module):
    """Hook points under one prefix (ln_final.hook_normalized, metric.hook_…)."""

    def __init__(self, names):
        super().__init__()
        for name in names:
            self.add_module(name, HookPoint())


def model_blocks(model: Transformer) -> list[Block]:
    """The model's blocks, typed (an nn.ModuleList yields Modules)."""
    return cast(list[Block], list(model.blocks))


class HookedDamcha(HookedRootModule):
    """A project Transformer (any registered mechanism) under TransformerLens's hook names. Its forward
    returns the logits, or the loss with return_type="loss" (targets given). The wrapped model is used
    as it is: the hooks are module hooks added for one call and removed after it."""

    def __init__(self, model: Transformer):
        super().__init__()
        self.model = model
        self.config = model.config
        self.cfg = lens_config(model.config)
        self.hook_embed, self.hook_pos_embed = HookPoint(), HookPoint()
        post_norm = model.config.norm_placement == "post"
        self.blocks = nn.ModuleList(_Block(block, model.mechanism.head_output_site(block.attn, model.config),
                                           model.config.n_head, post_norm) for block in model_blocks(model))
        self.ln_final = _Norm(model.ln_f)
        self.own_sites = model.mechanism.hook_sites(model)
        for prefix in sorted({name.rpartition(".")[0] for name in self.own_sites}):
            self.add_module(prefix, _Named(sorted(n.rpartition(".")[2] for n in self.own_sites
                                                  if n.rpartition(".")[0] == prefix)))
        self.setup()
        self.train(model.training)  # the wrapper takes the wrapped model's mode (TransformerLens's tools check it)

    def run_with_cache(self, *args, return_cache_object: bool = True, remove_batch_dim: bool = False, **kwargs):
        """TransformerLens's run_with_cache; the cache is its ActivationCache (return_cache_object=False: a dict)."""
        out, cache = super().run_with_cache(*args, remove_batch_dim=remove_batch_dim, **kwargs)
        return (out, ActivationCache(cache, self, has_batch_dim=not remove_batch_dim)) if return_cache_object else (out, cache)

    def to_tokens(self, seq) -> torch.Tensor:
        """Tokens as TransformerLens's tools ask for them (B, T): a tensor of ids as it is, a string as its UTF-8
        bytes for a model whose vocabulary is bytes (the text runs), a list of either as a batch right-padded with
        token 0 to its longest (TransformerLens pads with its tokenizer's pad token); otherwise refused in words."""
        if isinstance(seq, (list, tuple)):
            if not seq:
                raise ValueError("to_tokens was given an empty list")
            rows = [self.to_tokens(item) for item in seq]  # each (b, t)
            longest = max(row.shape[1] for row in rows)
            return torch.cat([F.pad(row, (0, longest - row.shape[1])) for row in rows])  # (B, T)
        if torch.is_tensor(seq):
            return seq.long()[None] if seq.dim() == 1 else seq.long()
        if isinstance(seq, str):
            if self.config.vocab_size != 256:
                raise ValueError(f"a string needs a tokenizer, and this model's {self.config.vocab_size} tokens are "
                                 "not bytes: pass the token ids as a tensor")
            return torch.tensor(list(seq.encode("utf-8")), dtype=torch.long)[None]
        raise TypeError(f"to_tokens takes a tensor of token ids, a string or a list of them, not {type(seq).__name__}")

    def to_single_token(self, token: str) -> int:
        """The id of a one-token string (one byte, for a model whose vocabulary is bytes)."""
        ids = self.to_tokens(token)[0]
        if ids.numel() != 1:
            raise ValueError(f"{token!r} is {ids.numel()} tokens, not one")
        return int(ids[0])

    @property
    def W_U(self) -> torch.Tensor:
        """(D, V): the unembedding, the next-token head's weight as TransformerLens lays it out."""
        return self._unembed().weight.T

    @property
    def b_U(self) -> torch.Tensor:
        head = self._unembed()
        return head.bias if head.bias is not None else torch.zeros(head.out_features)

    def _unembed(self) -> nn.Linear:
        head = self.model.head
        if not isinstance(head, NextTokenHead):
            # (ValueError: an AttributeError inside a module's property is replaced by nn.Module's own message)
            raise ValueError(f"this model's head ({type(head).__name__}) predicts no next token from each "
                                 "position: no unembedding W_U")
        return head

    def tokens_to_residual_directions(self, tokens) -> torch.Tensor:
        """W_U's columns for `tokens` (an id, a one-token string, or a tensor of ids): (..., D)."""
        if isinstance(tokens, str):
            tokens = self.to_single_token(tokens)
        index = torch.as_tensor(tokens, dtype=torch.long)
        return self.W_U.T[index]  # (*tokens.shape, D)

    def hooked_blocks(self) -> list[_Block]:
        """The hook points of each block, typed (an nn.ModuleList yields Modules)."""
        return cast(list[_Block], list(self.blocks))

    def accumulated_bias(self, layer: int, mlp_input: bool = False, include_mlp_biases: bool = True) -> torch.Tensor:
        """(D,): the output biases the residual stream has taken in before `layer`'s attention (mlp_input: before
        its MLP, so its attention's b_O too): each attention's b_O and, with include_mlp_biases, each MLP's b_out."""
        total = torch.zeros(self.cfg.d_model)
        for i in range(layer + (1 if mlp_input else 0)):
            total = total + self.hooked_blocks()[i].attn.b_O
            if include_mlp_biases and i < layer:
                total = total + self.hooked_blocks()[i].mlp.b_out
        return total

    def silent_hooks(self) -> dict[str, str]:
        """Every hook point of layer 0 and of the whole model (the mechanism's own sites included) that this model
        does not fire, each with the reason. Found by running a short input with every hook point watched, so a
        hook that never fires is never left out; the reasons are what this mechanism and config lack there."""
        config, attn = self.config, model_blocks(self.model)[0].attn
        known = {"blocks.0.attn.hook_attn_scores": "its scores are mixed across heads in steps of its own, not formed "
                                                   "per head in the shared attend step (hook_pattern records the weights)"}
        if _value_map(attn, config) is None:
            known["blocks.0.attn.hook_v"] = "no value map of width D split into the H heads"
        if self.model.mechanism.head_output_site(attn, config) is None:
            known["blocks.0.attn.hook_z"] = "its heads do not meet at an output projection"
        if config.norm_placement == "post":
            known["blocks.0.hook_resid_mid"] = known["blocks.0.hook_mlp_out"] = "post-norm blocks"
        if self.model.pos_emb is None:
            known["hook_pos_embed"] = "rotary positions act inside the attend step"
        watched = [name for name in self.hook_dict if not name.startswith("blocks.") or name.startswith("blocks.0.")]
        fired: set[str] = set()
        shape = (1, min(4, config.block_size), *((config.input_dim,) if config.input_dim else ()))
        probe = torch.zeros(shape) if config.input_dim else torch.zeros(shape, dtype=torch.long)
        with torch.no_grad():
            self.run_with_hooks(probe, fwd_hooks=[(n, lambda tensor, hook, n=n: fired.add(n)) for n in watched])
        own = {name: field for name, (_, field) in self.own_sites.items()}
        return {name: known.get(name) or (f"this {config.mechanism.title} computes no {own[name]} (its settings "
                                          "leave it out)" if name in own else "this mechanism computes nothing there")
                for name in watched if name not in fired}

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor | None = None, real: torch.Tensor | None = None,
                return_type: str = "logits"):
        handles: list = []
        attended: set[int] = set()  # the layers whose pattern went through the shared attend step this call
        try:
            handles += self._module_hooks(tokens.shape[0], attended)
            sites = [self._site(block, i, attended) for i, block in enumerate(self.hooked_blocks())]
            out = self.model(tokens, targets=targets, real=real, need_intermediates=True, stochastic=False,
                             layer_sites=sites)
        finally:
            for handle in handles:
                handle.remove()
        if return_type == "loss":
            if out.loss is None:
                raise ValueError('return_type="loss" needs targets')
            return out.loss
        return out.logits

    @staticmethod
    def _site(block: _Block, index: int, attended: set):
        hooks = {"attn_scores": block.attn.hook_attn_scores, "pattern": block.attn.hook_pattern}

        def site(name, tensor):
            attended.add(index)
            return hooks[name](tensor)
        return site

    def _module_hooks(self, batch: int, attended: set) -> list:
        model, H = self.model, self.config.n_head
        handles = [model.tok_emb.register_forward_hook(lambda m, args, out: self.hook_embed(out))]
        if model.pos_emb is not None:  # (T, D) in the model: (B, T, D) as TransformerLens lays it out
            handles.append(model.pos_emb.register_forward_hook(
                lambda m, args, out: self.hook_pos_embed(out.expand(batch, *out.shape))))
        for i, (block, hooks) in enumerate(zip(model_blocks(model), self.hooked_blocks())):
            if self.config.norm_placement != "post":
                handles.append(block.ln_2.register_forward_pre_hook(lambda m, args, h=hooks: (h.hook_resid_mid(args[0]),)))
                handles.append(block.mlp.register_forward_hook(lambda m, args, out, h=hooks: h.hook_mlp_out(out)))
            handles += [norm.watch() for norm in hooks.norms()] + hooks.mlp.watch()
            handles.append(block.register_forward_pre_hook(lambda m, args, h=hooks: (h.hook_resid_pre(args[0]), *args[1:])))
            handles.append(block.register_forward_hook(lambda m, args, out, h=hooks: (h.hook_resid_post(out[0]), out[1])))
            handles.append(block.attn.register_forward_hook(
                lambda m, args, out, h=hooks: dataclasses.replace(out, y=h.hook_attn_out(out.y))))
            # A mechanism that mixes its scores in steps of its own (THA, DCMHA) still returns the weights that
            # multiply the values: hook_pattern reads them, a record (an edit there changes nothing).
            handles.append(block.attn.register_forward_hook(partial(_record_pattern, hooks.attn.hook_pattern, i, attended)))
            value = _value_map(block.attn, self.config)
            if value is not None:
                handles.append(value.register_forward_hook(lambda m, args, out, h=hooks: _by_head(h.attn.hook_v, out, H)))
            site = model.mechanism.head_output_site(block.attn, self.config)
            if site is not None:
                handles.append(site.register_forward_pre_hook(
                    lambda m, args, h=hooks: (_by_head(h.attn.hook_z, args[0], H), *args[1:])))
        handles.append(self.ln_final.watch())
        for name, (module, field) in self.own_sites.items():
            hook = self.get_submodule(name)
            handles.append(module.register_forward_hook(
                lambda m, args, out, hook=hook, field=field: dataclasses.replace(out, **{field: hook(getattr(out, field))})
                if getattr(out, field) is not None else out))
        return handles


def lens_config(config) -> TransformerBridgeConfig:
    """The project's ModelConfig under the field names TransformerLens's helpers read."""
    return TransformerBridgeConfig(
        d_model=config.n_embd, d_head=config.n_embd // config.n_head, n_layers=config.n_layer, n_ctx=config.block_size,
        n_heads=config.n_head, d_vocab=config.vocab_size, d_mlp=config.mlp_width or config.mlp_ratio * config.n_embd,
        act_fn="silu" if config.feed_forward == "swiglu" else "gelu", gated_mlp=config.feed_forward == "swiglu",
        normalization_type="RMS" if config.norm == "rms" else "LN", model_name=f"damcha-{config.variant}",
        attention_dir="causal" if config.causal else "bidirectional",
        positional_embedding_type=config.position_encoding if config.position_encoding == "rotary" else "standard")


def _value_map(layer: nn.Module, config) -> nn.Linear | None:
    """The layer's value map where its output splits into the H heads (hook_v's site), else None."""
    value = getattr(layer, "value", None)
    return value if isinstance(value, nn.Linear) and value.out_features == config.n_embd else None


def _record_pattern(hook: HookPoint, index: int, attended: set, module, args, out) -> None:
    if index not in attended and out.weights is not None:
        hook(out.weights)  # read only: the forward hook returns None, so the layer's output stands


def _by_head(hook: HookPoint, tensor: torch.Tensor, heads: int) -> torch.Tensor:
    """A (B, T, H·d) tensor through a hook that sees it as (B, T, H, d), TransformerLens's layout."""
    B, T, width = tensor.shape
    return hook(tensor.view(B, T, heads, width // heads)).reshape(B, T, width)
