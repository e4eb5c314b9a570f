"""A tiny torch decoder the review tests port three ways: rotate-half rotary, RMSNorm (its epsilon
large enough that misplacing it shows above the tolerance), a causal
attention with an explicit scale, a gated MLP. Its ports live beside it, each laid out as real ports
are: a package of several modules (nnx_port/, eqx_port/) or a module an entry file imports."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

DIM, HEADS, HEAD_DIM, HIDDEN, VOCAB, EPS, THETA = 16, 2, 8, 40, 24, 1e-3, 10000.0


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = EPS) -> None:
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q_proj = nn.Linear(DIM, HEADS * HEAD_DIM, bias=False)
        self.k_proj = nn.Linear(DIM, HEADS * HEAD_DIM, bias=False)
        self.v_proj = nn.Linear(DIM, HEADS * HEAD_DIM, bias=False)
        self.o_proj = nn.Linear(HEADS * HEAD_DIM, DIM, bias=False)
        self.scale = HEAD_DIM**-0.5

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        q = self.q_proj(x).view(batch, seq, HEADS, HEAD_DIM).transpose(1, 2)
        k = self.k_proj(x).view(batch, seq, HEADS, HEAD_DIM).transpose(1, 2)
        v = self.v_proj(x).view(batch, seq, HEADS, HEAD_DIM).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.scale
        causal = torch.ones(seq, seq, dtype=torch.bool).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(batch, seq, HEADS * HEAD_DIM)
        return self.o_proj(out)


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(DIM, HIDDEN, bias=False)
        self.up_proj = nn.Linear(DIM, HIDDEN, bias=False)
        self.down_proj = nn.Linear(HIDDEN, DIM, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(DIM)
        self.self_attn = Attention()
        self.post_attention_layernorm = RMSNorm(DIM)
        self.mlp = MLP()

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Decoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList([Block()])
        self.norm = RMSNorm(DIM)
        self.lm_head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], dtype=torch.float32)
        inv_freq = 1.0 / THETA ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float32) / HEAD_DIM)
        freqs = torch.outer(positions, inv_freq)
        angles = torch.cat((freqs, freqs), dim=-1)
        cos, sin = angles.cos(), angles.sin()
        x = self.embed_tokens(tokens)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.norm(x))


def example():
    torch.manual_seed(0)
    return Decoder(), (torch.randint(0, VOCAB, (1, 6)),)
