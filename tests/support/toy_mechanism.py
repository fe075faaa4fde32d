"""A toy mechanism registered by tests: the plug-in path a new mechanism takes (one class, one
registry entry), used by the registry tests and the suite that walks every registered variant."""

import dataclasses

import numpy as np
import torch
from torch import nn

from damcha.model.mechanisms import (
    AttentionOutput,
    ForwardOptions,
    Identifiability,
    Mechanism,
    Structure,
    StructureKind,
    Variant,
    attend,
)

TOY_VARIANT = Variant("tied", "tied", {}, "a toy registered by a test")


@dataclasses.dataclass(frozen=True)
class TiedOptions(ForwardOptions):
    temperature: float = 1.0


class TiedAttention(nn.Module):
    """Queries and keys share one projection, q = k = x W; a learned H x H gate mixes head outputs."""

    def __init__(self, config):
        super().__init__()
        D = config.n_embd
        self.n_head, self.head_dim = config.n_head, config.head_dim
        self.qk = nn.Linear(D, D, bias=False)
        self.value = nn.Linear(D, D)
        self.mix = nn.Parameter(torch.eye(config.n_head))
        self.proj = nn.Linear(D, D)
        self.dropout = config.dropout

    def forward(self, x, call):
        mask, causal, options, need_weights = call.mask, call.causal, call.options, call.need_weights
        B, T, D = x.shape
        H, d = self.n_head, self.head_dim
        q = self.qk(x).view(B, T, H, d).transpose(1, 2)
        v = self.value(x).view(B, T, H, d).transpose(1, 2)
        out, weights = attend(q, q, v, mask, causal, 1.0 / (d ** 0.5 * options.temperature),
                              self.dropout if call.stochastic else 0.0, need_weights)
        out = torch.einsum("gh,bhtd->bgtd", self.mix, out)
        return AttentionOutput(self.proj(out.transpose(1, 2).reshape(B, T, D)), weights, internals=None)


class Tied(Mechanism):
    name = "tied"
    title = "Tied query-key attention (a toy)"
    options_type = TiedOptions

    def build_layer(self, config, layer_index):
        return TiedAttention(config)

    def structures(self, model, layers, positions, options):
        mix = np.stack([b.attn.mix.detach().numpy() for b in model.blocks])  # (L, H, H)
        forms = []
        for b in model.blocks:
            w = b.attn.qk.weight.detach().view(b.attn.n_head, b.attn.head_dim, -1)  # (H, d, D)
            forms.append(torch.einsum("hdi,hdj->hij", w, w).numpy())
        return [
            Structure("mix", "Head mixing", mix, ("layer", "head_out", "head_in"), StructureKind.HEAD_BY_HEAD,
                      "How each output head mixes the heads' attention outputs.", Identifiability.LEARNED),
            Structure("forms", "Tied forms W^h W^hᵀ", np.stack(forms), ("layer", "head", "row", "col"),
                      StructureKind.PER_HEAD_FORMS, "Each head's symmetric bilinear form.", Identifiability.LEARNED),
        ]
