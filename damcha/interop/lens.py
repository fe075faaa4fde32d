"""TransformerLens on the project's Transformer: `HookedDamcha(model)` is a TransformerLens HookedRootModule
whose hook points sit at TransformerLens's canonical names, so run_with_cache, run_with_hooks and the
tools built on them work on any registered mechanism:

    hook_embed                      the stack input (token + position embeddings)    (B, T, D)
    blocks.{i}.hook_resid_pre       a block's input                                  (B, T, D)
    blocks.{i}.attn.hook_v          the values, where the layer has a `value` map    (B, T, H, d)
    blocks.{i}.attn.hook_attn_scores  scores after the mask, before the softmax      (B, H', T, T)
    blocks.{i}.attn.hook_pattern    the weights that multiply the values             (B, H', T, T)
    blocks.{i}.attn.hook_z          the heads' outputs side by side, before the output projection (B, T, H, d)
    blocks.{i}.hook_attn_out        the attention's output                           (B, T, D)
    blocks.{i}.hook_resid_post      a block's output                                 (B, T, D)
    ln_final.hook_normalized        the final norm's output                          (B, T, D)

plus the mechanism's own sites (Mechanism.hook_sites; DAMCHA: metric.hook_context, the context mean
the metric is generated from (a record: editing it changes nothing), and metric.hook_head_metric, the
per-head metrics m_i the layers score with; metric_{i}.… for a metric per layer).
H' is the number of maps the mechanism's attend step computes (2H for differential attention, the
experts for MoA). Scores and patterns fire where a mechanism attends through the shared attend step;
the hooks run on the explicit path (the weights are built). What does not apply, declared in
UNSUPPORTED: W_Q/W_K and QK circuits (DAMCHA has no query or key projection), weight folding and
centring (the project's models are not refactored), the TransformerBridge and its adapter entry point
(the bridge drives a module with Hugging Face's call signature and split Q/K/V projections).
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

try:
    from transformer_lens import HookedRootModule
    from transformer_lens.hook_points import HookPoint
except ImportError:  # pragma: no cover - the message is the point
    raise ImportError("damcha.interop.lens needs TransformerLens: pip install 'damcha[lens]'") from None

from damcha.model.transformer import Transformer

UNSUPPORTED = {
    "W_Q, W_K, QK circuits": "DAMCHA scores q = x_i·m_i against k = x_i: there is no query or key projection "
                             "(other mechanisms keep theirs as ordinary weights of their layers)",
    "fold_ln, center_writing_weights": "the project's models are used as trained, never refactored",
    "TransformerBridge / architecture adapters": "the bridge drives modules with Hugging Face's call signature and "
                                                 "split Q/K/V projections; HookedDamcha is a HookedRootModule instead",
    "hook_attn_scores, hook_pattern of THA and DCMHA": "they mix scores across heads in their own steps, not "
                                                        "through the shared attend step",
}


class _Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.hook_v, self.hook_attn_scores, self.hook_pattern, self.hook_z = HookPoint(), HookPoint(), HookPoint(), HookPoint()


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.hook_resid_pre, self.hook_attn_out, self.hook_resid_post = HookPoint(), HookPoint(), HookPoint()
        self.attn = _Attention()


class _Named(nn.Module):
    """Hook points under one prefix (ln_final.hook_normalized, metric.hook_…)."""

    def __init__(self, names):
        super().__init__()
        for name in names:
            self.add_module(name, HookPoint())


class HookedDamcha(HookedRootModule):
    """A project Transformer (any registered mechanism) under TransformerLens's hook names. Its forward
    returns the logits, or the loss with return_type="loss" (targets given). The wrapped model is used
    as it is: the hooks are module hooks added for one call and removed after it."""

    def __init__(self, model: Transformer):
        super().__init__()
        self.model = model
        self.cfg = model.config
        self.hook_embed = HookPoint()
        self.blocks = nn.ModuleList(_Block() for _ in model.blocks)
        self.ln_final = _Named(["hook_normalized"])
        self.own_sites = model.mechanism.hook_sites(model)
        for prefix in sorted({name.rpartition(".")[0] for name in self.own_sites}):
            self.add_module(prefix, _Named(sorted(n.rpartition(".")[2] for n in self.own_sites
                                                  if n.rpartition(".")[0] == prefix)))
        self.setup()

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor | None = None, real: torch.Tensor | None = None,
                return_type: str = "logits"):
        handles = []
        try:
            handles += self._module_hooks()
            sites = [self._site(block) for block in self.blocks]
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
    def _site(block: _Block):
        hooks = {"attn_scores": block.attn.hook_attn_scores, "pattern": block.attn.hook_pattern}
        return lambda name, tensor: hooks[name](tensor)

    def _module_hooks(self) -> list:
        model, H = self.model, self.cfg.n_head
        handles = [model.blocks[0].register_forward_pre_hook(lambda m, args: (self.hook_embed(args[0]), *args[1:]))]
        for block, hooks in zip(model.blocks, self.blocks):
            handles.append(block.register_forward_pre_hook(lambda m, args, h=hooks: (h.hook_resid_pre(args[0]), *args[1:])))
            handles.append(block.register_forward_hook(lambda m, args, out, h=hooks: (h.hook_resid_post(out[0]), out[1])))
            handles.append(block.attn.register_forward_hook(
                lambda m, args, out, h=hooks: dataclasses.replace(out, y=h.hook_attn_out(out.y))))
            value = getattr(block.attn, "value", None)
            if isinstance(value, nn.Linear) and value.out_features == self.cfg.n_embd:
                handles.append(value.register_forward_hook(lambda m, args, out, h=hooks: _by_head(h.attn.hook_v, out, H)))
            site = model.mechanism.head_output_site(block.attn, self.cfg)
            if site is not None:
                handles.append(site.register_forward_pre_hook(
                    lambda m, args, h=hooks: (_by_head(h.attn.hook_z, args[0], H), *args[1:])))
        handles.append(model.ln_f.register_forward_hook(lambda m, args, out: self.ln_final.hook_normalized(out)))
        for name, (module, field) in self.own_sites.items():
            hook = self.get_submodule(name)
            handles.append(module.register_forward_hook(
                lambda m, args, out, hook=hook, field=field: dataclasses.replace(out, **{field: hook(getattr(out, field))})
                if getattr(out, field) is not None else out))
        return handles


def _by_head(hook: HookPoint, tensor: torch.Tensor, heads: int) -> torch.Tensor:
    """A (B, T, H·d) tensor through a hook that sees it as (B, T, H, d), TransformerLens's layout."""
    B, T, width = tensor.shape
    return hook(tensor.view(B, T, heads, width // heads)).reshape(B, T, width)
