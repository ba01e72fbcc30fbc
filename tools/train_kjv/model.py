"""TinyGPT: the byte-level GPT that train.py trains (PyTorch nn.Module, used only for training).

Pre-LayerNorm blocks, exact (erf) GELU, bias-free attention projections, MLP with biases,
learned positions, final LayerNorm, head tied to the token embedding (logits = x wte^T).
Parameter names follow Hugging Face GPT-2 so export.py only has to transpose the Linear weights
into GPT-2's Conv1D orientation.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GPTConfig:
    vocab_size: int = 256  # raw UTF-8 bytes, id = byte value
    n_ctx: int = 256
    n_embd: int = 128
    n_layer: int = 4
    n_head: int = 4


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=False)  # [3C, C]: q | k | v
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)  # [C, C]
        mask = torch.tril(torch.ones(cfg.n_ctx, cfg.n_ctx, dtype=torch.bool))
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x):  # [B, T, C] -> [B, T, C]
        B, T, C = x.shape
        H, D = self.n_head, C // self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)
        # Heads are consecutive D-wide slices of each C-wide block: [B, T, C] -> [B, H, T, D].
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))  # [B, H, T, T]
        att = att.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)  # [4C, C]
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd)  # [C, 4C]

    def forward(self, x):  # [B, T, C] -> [B, T, C]
        return self.c_proj(F.gelu(self.c_fc(x)))  # F.gelu's default is the exact erf form


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=1e-5)
        self.attn = Attention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=1e-5)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TinyGPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)  # [V, C], also the head
        self.wpe = nn.Embedding(cfg.n_ctx, cfg.n_embd)  # [n_ctx, C]
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, eps=1e-5)
        self.apply(self._init)
        # GPT-2's scaled init: each residual branch's output projection shrinks with depth.
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx):  # [B, T] byte ids -> [B, T, V] logits
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()
