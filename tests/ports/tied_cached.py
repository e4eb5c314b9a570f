"""A tiny GPT in nanoGPT's style for tests/test_review_unread.py: the output head tied to the token
embedding (`lm_head.weight` is `wte.weight`), a boolean causal mask buffer and a zeroed KV cache
each attention layer writes in place, as gpt-fast's decoders keep one. Its ports, beside it, are
one-shot forwards: no cache, the mask made on the fly or held by the port, the head read as the
embedding's transpose."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

DIM, HEADS, VOCAB, MAX, LAYERS = 16, 2, 24, 12, 2
HEAD_DIM = DIM // HEADS


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c_attn = nn.Linear(DIM, 3 * DIM)
        self.c_proj = nn.Linear(DIM, DIM)
        self.register_buffer("k_cache", torch.zeros(1, HEADS, MAX, HEAD_DIM))
        self.register_buffer("v_cache", torch.zeros(1, HEADS, MAX, HEAD_DIM))

    def forward(self, x: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(DIM, dim=-1)
        q, k, v = (t.view(B, T, HEADS, HEAD_DIM).transpose(1, 2) for t in (q, k, v))
        self.k_cache[:, :, pos] = k
        self.v_cache[:, :, pos] = v
        att = (q @ self.k_cache.transpose(-2, -1)) * HEAD_DIM**-0.5
        att = att.masked_fill(~mask, float("-inf"))
        y = F.softmax(att, dim=-1) @ self.v_cache
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(DIM)
        self.attn = Attention()
        self.ln_2 = nn.LayerNorm(DIM)
        self.c_fc = nn.Linear(DIM, 4 * DIM)
        self.c_out = nn.Linear(4 * DIM, DIM)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), mask, pos)
        return x + self.c_out(F.gelu(self.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte = nn.Embedding(VOCAB, DIM)
        self.h = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(DIM)
        self.lm_head = nn.Linear(DIM, VOCAB, bias=False)
        self.wte.weight = self.lm_head.weight
        self.register_buffer("causal_mask", torch.tril(torch.ones(MAX, MAX, dtype=torch.bool)))
        # Kept beside the one in use, as transformers keeps `original_inv_freq`: forward never reads it.
        self.register_buffer("original_mask", self.causal_mask.clone(), persistent=False)

    def forward(self, idx: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        mask = self.causal_mask[pos]
        x = self.wte(idx)
        for block in self.h:
            x = block(x, mask, pos)
        return self.lm_head(self.ln_f(x))


def example():
    torch.manual_seed(0)
    model = GPT().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "ln" in name:  # not the ones and zeros a fresh norm has: every step is a step
                p.add_(0.1 * torch.randn_like(p))
    return model, (torch.randint(0, VOCAB, (1, 6)), torch.arange(6))
