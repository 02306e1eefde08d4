"""The two models of ``bench_llc.py``, shared by both sides of the benchmark (torch only).

It is imported by ``bench_llc.py`` (our estimator, in ``.venv``) and by
``devinterp_baseline.py`` (in the devinterp venvs), so both sample exactly the same
network from exactly the same state dict.

* :func:`rrr_model`: reduced-rank regression y = B A x, two bias-free ``nn.Linear``
  (M -> H -> N), the model of devinterp's ``tests/slt/rrr_test.py``.
* :class:`TinyTransformer`: a nanoGPT-style decoder (pre-LayerNorm, learned positional
  embeddings, causal self-attention, MLP 4x, untied bias-free head). The default
  (d_model 128, 4 heads, 2 layers, context 32, vocabulary 64) has 417,280 parameters.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def rrr_model(m: int, h: int, n: int) -> nn.Module:
    """y = B A x with A: M -> H and B: H -> N, no biases (state-dict keys ``0.weight``, ``1.weight``)."""
    return nn.Sequential(nn.Linear(m, h, bias=False), nn.Linear(h, n, bias=False))


class Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int, mlp_ratio: int = 4, context: int = 32, sdpa: bool = False):
        super().__init__()
        self.n_heads, self.sdpa = n_heads, sdpa
        self.register_buffer("mask", torch.ones(context, context, dtype=torch.bool).triu(1), persistent=False)
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, mlp_ratio * d_model)
        self.fc_out = nn.Linear(mlp_ratio * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.reshape(b, t, self.n_heads, d // self.n_heads).transpose(1, 2) for z in (q, k, v))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # nanoGPT's explicit path (torch.func.vmap has no batching rule for CPU SDPA)
            att = (q @ k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)
            att = att.masked_fill(self.mask[:t, :t], float("-inf"))
            y = att.softmax(dim=-1) @ v
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.fc_out(F.gelu(self.fc(self.ln2(x))))


class TinyTransformer(nn.Module):
    """Token ids (B, T <= context) -> next-token logits (B, T, vocab)."""

    def __init__(self, vocab: int = 64, context: int = 32, d_model: int = 128, n_heads: int = 4,
                 n_layers: int = 2, mlp_ratio: int = 4, sdpa: bool = False):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(context, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, mlp_ratio, context, sdpa) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.register_buffer("positions", torch.arange(context), persistent=False)
        for name, p in self.named_parameters():  # nanoGPT's initialisation
            if p.dim() >= 2:
                nn.init.normal_(p, 0.0, 0.02 / (2 * n_layers) ** 0.5 if name.endswith(("proj.weight", "fc_out.weight"))
                                else 0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(self.positions[: idx.shape[-1]])
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def per_sequence_loss(model: nn.Module, seqs: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross entropy of each sequence (B, T+1) -> (B,)."""
    return per_token_loss(model, seqs).mean(dim=1)


def per_token_loss(model: nn.Module, seqs: torch.Tensor) -> torch.Tensor:
    """Next-token cross entropy of each position (B, T+1) -> (B, T)."""
    logits = model(seqs[:, :-1])
    return F.cross_entropy(logits.transpose(1, 2), seqs[:, 1:], reduction="none")
