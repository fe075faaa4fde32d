"""An independent re-implementation of the DAMCHA authors' reference code (erwinmsmith/DAMCHA at
ffa99807), written from reading theirs: their decoder in every configuration their `main.py`
builds, with the full D x D metric at every position, their components (patcher, heads), their
config dict and the two ways their code saves a checkpoint. Converted runs are checked against it."""

import math
import random

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

D, H, L, T, WIDTHS, V = 48, 4, 2, 12, (16, 24), 37


class Generator(nn.Module):
    """Their StructuredMLPForM in the 'mlp' mode: M = (mlp(c) [+ U diag(s_l) V^T]) * scales."""

    def __init__(self, diag_scale, off_diag_scale, layer_bias=False):
        super().__init__()
        layers, width = [], D
        for w in WIDTHS:
            layers += [nn.Linear(width, w), nn.GELU(), nn.Dropout(0.0)]
            width = w
        self.mlp = nn.Sequential(*layers, nn.Linear(width, D * D))
        d = D // H
        diag = torch.block_diag(*[torch.ones(d, d)] * H)
        self.register_buffer("diag_mask", diag)
        self.register_buffer("off_diag_mask", 1 - diag)
        self.diag_scale, self.off_diag_scale = diag_scale, off_diag_scale
        if layer_bias:
            self.layer_bias_U = nn.Parameter(torch.randn(D, 3) * 0.1)
            self.layer_bias_V = nn.Parameter(torch.randn(D, 3) * 0.1)
            self.layer_scales = nn.Parameter(torch.randn(L, 3))

    def metric(self, context, layer):  # (..., D) -> (..., D, D)
        M = self.mlp(context).unflatten(-1, (D, D))
        if hasattr(self, "layer_scales"):
            M = M + (self.layer_bias_U * self.layer_scales[layer]) @ self.layer_bias_V.T
        return M * (self.diag_mask * self.diag_scale + self.off_diag_mask * self.off_diag_scale)


class Attention(nn.Module):
    def __init__(self, kind, shared, scales):
        super().__init__()
        self.W_v, self.out_proj = nn.Linear(D, D), nn.Linear(D, D)
        self._shared_mlp = shared if kind in ("shared", "layer_bias") else None
        if kind == "own":
            self._own_mlp = Generator(**scales)
        if kind == "static":
            self.M0 = nn.Parameter(torch.eye(D) + 0.1 * torch.randn(D, D))
        if kind == "qk":
            self.W_q, self.W_k = nn.Linear(D, D), nn.Linear(D, D)


class Layer(nn.Module):
    def __init__(self, kind, shared, scales, d_ff):
        super().__init__()
        self.self_attn = Attention(kind, shared, scales)
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.ff = nn.Module()
        self.ff.net = nn.Sequential(nn.Linear(D, d_ff), nn.GELU(), nn.Dropout(0.0), nn.Linear(d_ff, D), nn.Dropout(0.0))


class Decoder(nn.Module):
    """Their TransformerPC: kind is shared | layer_bias | own | static | qk (use_M off)."""

    def __init__(self, kind, diag_scale=1.0, off_diag_scale=1.0, d_ff=2 * D):
        super().__init__()
        self.kind, scales = kind, dict(diag_scale=diag_scale, off_diag_scale=off_diag_scale)
        self.decoder = nn.Module()
        shared = None
        if kind in ("shared", "layer_bias"):
            shared = self.decoder.shared_mlp_module = Generator(**scales, layer_bias=kind == "layer_bias")
        self.decoder.layers = nn.ModuleList(Layer(kind, shared, scales, d_ff) for _ in range(L))
        pe = torch.zeros(4096, D)
        pos = torch.arange(4096)[:, None].float()
        div = torch.exp(torch.arange(0, D, 2).float() * (-math.log(10000.0) / D))
        pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * div), torch.cos(pos * div)
        self.decoder.pe = nn.Module()
        self.decoder.pe.register_buffer("pe", pe)

    def row_sums(self, x, layer):  # (B, T, H, d, d): the metric every query position scores with
        d = D // H
        a = layer.self_attn
        if self.kind == "static":
            return a.M0.reshape(H, d, H, d).sum(2).expand(x.shape[0], x.shape[1], H, d, d)
        generator = a._shared_mlp if a._shared_mlp is not None else a._own_mlp
        c = x.cumsum(1) / torch.arange(1, x.shape[1] + 1)[None, :, None]  # prefix means
        return generator.metric(c, self.layer_index(layer)).reshape(*c.shape[:2], H, d, H, d).sum(-2)

    def layer_index(self, layer):
        return list(self.decoder.layers).index(layer)

    def forward(self, X):  # (B, T, D) embedded input -> (B, T, D)
        x = X + self.decoder.pe.pe[: X.shape[1]]
        d = D // H
        stack_metric = self.row_sums(x, self.decoder.layers[0]) if self.kind == "shared" else None
        for layer in self.decoder.layers:
            a = layer.self_attn
            xh = x.reshape(*x.shape[:2], H, d).transpose(1, 2)  # (B, H, T, d)
            if self.kind == "qk":
                q = a.W_q(x).reshape(*x.shape[:2], H, d).transpose(1, 2)
                k = a.W_k(x).reshape(*x.shape[:2], H, d).transpose(1, 2)
            else:  # shared: from the stack input; the others from the layer's own input
                m = stack_metric if stack_metric is not None else self.row_sums(x, layer)
                q, k = torch.einsum("bhtd,bthde->bhte", xh, m), xh
            s = q @ k.transpose(-1, -2) / math.sqrt(d)
            s = s.masked_fill(torch.ones(s.shape[-1], s.shape[-1], dtype=torch.bool).triu(1), float("-inf"))
            v = a.W_v(x).reshape(*x.shape[:2], H, d).transpose(1, 2)
            x = layer.ln1(x + a.out_proj((F.softmax(s, -1) @ v).transpose(1, 2).reshape(x.shape)))
            x = layer.ln2(x + layer.ff.net(x))
        return x


class Patcher(nn.Module):  # their Patchify: (C, p, p) patches of images normalised to [-1, 1]
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(48, D)

    def patches(self, images):  # (B, 3, 32, 32) -> (B, 64, 48)
        p = images.unfold(2, 4, 4).unfold(3, 4, 4).permute(0, 2, 3, 1, 4, 5)  # (B, 8, 8, C, 4, 4)
        return p.reshape(images.shape[0], 64, 48)


class ReconstructionHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Sequential(nn.Linear(D, 2 * D), nn.GELU(), nn.Linear(2 * D, 48))


class Seq2SeqHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(D, V)


def their_config(kind, **changes):
    """The `config` dict their main.py builds (the keys a conversion reads, and others it ignores)."""
    cfg = {"dev_mode": False, "device": "cpu", "seed": 42, "dataset": "cifar10", "data_dir": "./data", "img_size": 32,
           "in_ch": 3, "patch_size": 4, "batch_size": 64, "mask_ratio": 0.15, "d_model": D, "n_heads": H,
           "d_ff": 2 * D, "n_layers": L, "use_M": kind != "qk", "use_mlp": kind in ("shared", "layer_bias", "own"),
           "share_mlp": kind in ("shared", "layer_bias"), "mlp_hidden": WIDTHS, "off_diag_mode": "mlp",
           "kl_weight": 1e-4, "diag_scale": 1.0, "off_diag_scale": 1.0, "off_diag_alpha_init": 0.1,
           "use_layer_bias": kind == "layer_bias", "layer_bias_rank": 3, "use_multihead_M": kind != "qk",
           "compact_rank": 0, "free_M": False, "epochs": 10, "lr": 3e-4, "weight_decay": 0.0, "save_every": 10,
           "resume": None, "baseline": None, "experiment_name": "mlp_shared_depth3_20260101_000000"}
    return {**cfg, **changes}


def save_like_their_code(path, decoder, components, config, epoch=10):
    """What their utils.save_checkpoint writes: the dict, its nesting and value types."""
    params = [*decoder.parameters(), *(p for m in components.values() for p in m.parameters())]
    opt = torch.optim.Adam(params, lr=3e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
    decoder(torch.randn(1, T, D)).sum().backward()
    opt.step()
    sched.step()
    generator = getattr(decoder.decoder, "shared_mlp_module", None)
    off_diag = {"off_diag_mode": "mlp"}  # their get_off_diag_params: the whole dict only for a shared generator
    if generator is not None:
        off_diag.update(off_diag_scale=generator.off_diag_scale, use_layer_bias=hasattr(generator, "layer_scales"),
                        n_layers=L)
    np_state = np.random.get_state()
    torch.save({"format_version": 2, "epoch": epoch, "loss": 0.125, "best_loss": 0.125,
                "model_state_dict": decoder.state_dict(), "optimizer_state_dict": opt.state_dict(),
                "components": {name: m.state_dict() for name, m in components.items()}, "config": config,
                "torch_rng_state": torch.get_rng_state(), "python_rng_state": random.getstate(),
                "numpy_rng_state": (np_state[0], np_state[1].tolist(), *np_state[2:]),
                "scheduler_state_dict": sched.state_dict(), "off_diag_params": off_diag}, path)


def jiggle(*modules):
    with torch.no_grad():  # off their initial values, so LayerNorms, biases and masks are all exercised
        for m in modules:
            for p in m.parameters():
                p.add_(0.05 * torch.randn_like(p))


def identity_ends(model):
    """Embedding and head as identities: the converted model's output is then its decoder's."""
    with torch.no_grad():
        model.tok_emb.weight.copy_(torch.eye(D))
        model.tok_emb.bias.zero_()
        model.head.weight.copy_(torch.eye(D))
        model.head.bias.zero_()
    return model


def their_model(diag_scale=1.0, off_diag_scale=1.0, layer_bias=False):
    """Their decoder with one shared generator (with their per-layer low-rank term when layer_bias)."""
    return Decoder("layer_bias" if layer_bias else "shared", diag_scale=diag_scale, off_diag_scale=off_diag_scale)


def save_like_them(model, path, epoch=3, **off_diag):
    opt = torch.optim.AdamW(model.parameters(), 1e-3)
    model(torch.randn(1, T, D)).sum().backward()
    opt.step()
    torch.save({"epoch": epoch, "model_state_dict": model.state_dict(), "optimizer_state_dict": opt.state_dict(),
                "loss": 0.25, "off_diag_params": {"off_diag_mode": "mlp", **off_diag}}, path)
