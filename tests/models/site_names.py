"""A small decoder written to exercise how values are named at their torch call sites: a gated MLP
(`self.w2(F.silu(self.w1(x)) * self.w3(x))`), a rotary table applied to pairs cast to float
(`pairs[..., 0] * table[..., 0]`: a promotion at bf16), module results bound to locals
(`attn_out = ...`, `h = self.norm(h)`), a residual whose module result torch leaves unnamed
(`out = h + self.feed_forward(self.ffn_norm(h))`, its def named `feed_forward`), and one whose
unnamed result is read twice (`F.normalize`). `build(dtype)` makes the model, `example()` runs it."""

import torch
import torch.nn as nn
from torch.nn import functional as F

DIM, HEADS, VOCAB, SEQ = 32, 4, 48, 8


class Norm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(dim) + 0.5)

    def forward(self, x):
        scaled = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)
        return scaled.type_as(x) * self.weight


class FeedForward(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.w1 = nn.Linear(dim, 2 * dim, bias=False)
        self.w3 = nn.Linear(dim, 2 * dim, bias=False)
        self.w2 = nn.Linear(2 * dim, dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def rotate_pairs(x, table):
    pairs = x.float().reshape(*x.shape[:-1], -1, 2)
    table = table.view(1, pairs.size(1), 1, pairs.size(3), 2)
    turned = torch.stack(
        [
            pairs[..., 0] * table[..., 0] - pairs[..., 1] * table[..., 1],
            pairs[..., 1] * table[..., 0] + pairs[..., 0] * table[..., 1],
        ],
        -1,
    )
    return turned.flatten(3).type_as(x)


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.wqkv = nn.Linear(dim, 3 * dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)

    def forward(self, x, table):
        b, t, d = x.shape
        q, k, v = self.wqkv(x).split(d, dim=-1)
        q = rotate_pairs(q.view(b, t, self.heads, -1), table)
        k = rotate_pairs(k.view(b, t, self.heads, -1), table)
        v = v.view(b, t, self.heads, -1)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.attention_norm = Norm(dim)
        self.attention = Attention(dim, heads)
        self.ffn_norm = Norm(dim)
        self.feed_forward = FeedForward(dim)

    def forward(self, x, table):
        attn_out = self.attention(self.attention_norm(x), table)
        h = x + attn_out
        out = h + self.feed_forward(self.ffn_norm(h))
        return out


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList([Block(DIM, HEADS) for _ in range(2)])
        self.norm = Norm(DIM)
        self.feed_forward = FeedForward(DIM)
        self.output = nn.Linear(DIM, VOCAB, bias=False)
        angles = torch.outer(torch.arange(SEQ).float(), 1.0 / 100 ** (torch.arange(0, DIM // HEADS, 2) / DIM))
        self.register_buffer("table", torch.stack([angles.cos(), angles.sin()], -1))

    def forward(self, idx):
        x = self.embed(idx)
        table = self.table[: idx.shape[1]]
        for layer in self.layers:
            x = layer(x, table)
        x = self.norm(x)
        x = F.normalize(self.feed_forward(2 * x), dim=-1)
        logits = self.output(x)
        return logits


def build(dtype=torch.float32):
    torch.manual_seed(0)
    return Decoder().to(dtype).eval(), (torch.randint(0, VOCAB, (1, SEQ)),)


def example():
    return build()
