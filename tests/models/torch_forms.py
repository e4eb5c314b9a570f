"""Small models in the forms public model files write, for how their export names values and loops:
a ViT-style `for attn, ff in self.layers` over pairs of modules (`x = attn(x) + x`), an HF-style
attention returning `(attn_output, attn_weights)` with the weights None, Gemma-2-style masks as the
values of a dict display (`{"full_attention": ..., "sliding_attention": ...}`), a minGPT-style MLP
behind a lambda (`self.mlpf = lambda x: m.c_proj(m.act(m.c_fc(x)))`), an in-place item update
(`e[..., 1] += 1.0`) and a slice written into another tensor (`d[:, 1:3] = h[:, :2]`).
`build(name)` makes one with its inputs."""

import math

import torch
import torch.nn as nn

DIM = 16


class FeedForward(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.net = nn.Sequential(
            nn.LayerNorm(dim), nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim)
        )

    def forward(self, x):
        return self.net(x)


class Mixer(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        x = self.norm(x)
        return self.proj(x).tanh()


class Pairs(nn.Module):
    """vit-pytorch's Transformer: a list of `[attention, feed-forward]` pairs, unpacked by the loop."""

    def __init__(self, dim, depth=3):
        super().__init__()
        self.layers = nn.ModuleList([nn.ModuleList([Mixer(dim), FeedForward(dim)]) for _ in range(depth)])

    def forward(self, x):
        for attn, ff in self.layers:
            x = attn(x) + x
            x = ff(x) + x
        return x


class Halves(nn.Module):
    """Pairs whose second module has no parameters: each element of `params["layers"]` holds one."""

    def __init__(self, dim, depth=3):
        super().__init__()
        self.layers = nn.ModuleList([nn.ModuleList([Mixer(dim), nn.ReLU()]) for _ in range(depth)])

    def forward(self, x):
        for attn, ff in self.layers:
            x = ff(attn(x)) + x
        return x


class Attention(nn.Module):
    """transformers' attention: `(attn_output, attn_weights)`, the weights None unless asked for."""

    def __init__(self, dim):
        super().__init__()
        self.q_proj = nn.Linear(dim, dim, bias=False)
        self.k_proj = nn.Linear(dim, dim, bias=False)
        self.o_proj = nn.Linear(dim, dim, bias=False)

    def forward(self, hidden_states, attention_mask, output_attentions=False):
        q, k = self.q_proj(hidden_states), self.k_proj(hidden_states)
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + attention_mask
        attn_weights = torch.softmax(scores, dim=-1)
        attn_output = self.o_proj(attn_weights @ hidden_states)
        return attn_output, attn_weights if output_attentions else None


class DecoderLayer(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.self_attn = Attention(dim)

    def forward(self, hidden_states, attention_mask):
        residual = hidden_states
        hidden_states, _ = self.self_attn(hidden_states, attention_mask)
        return residual + hidden_states


class Decoder(nn.Module):
    """Gemma 2's masks: one per kind of layer, the values of a dict the layers index by their kind.
    The entry returns a tuple whose second item is None, as transformers' models without a cache."""

    def __init__(self, dim, kinds=("sliding_attention", "full_attention")):
        super().__init__()
        self.kinds = kinds
        self.layers = nn.ModuleList([DecoderLayer(dim) for _ in kinds])

    def forward(self, x):
        n = x.shape[1]
        scores = torch.ones(n, n)
        mask_mapping = {
            "full_attention": (torch.tril(scores) - 1.0) * 1e9,
            "sliding_attention": (torch.tril(torch.triu(scores, diagonal=-2)) - 1.0) * 1e9,
        }
        for layer, kind in zip(self.layers, self.kinds):
            x = layer(x, mask_mapping[kind])
        return x, None


class NewGELU(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Block(nn.Module):
    """minGPT's Block: the MLP's forward a lambda over its modules."""

    def __init__(self, dim):
        super().__init__()
        self.ln_2 = nn.LayerNorm(dim)
        self.mlp = nn.ModuleDict(
            dict(c_fc=nn.Linear(dim, 4 * dim), c_proj=nn.Linear(4 * dim, dim), act=NewGELU())
        )
        m = self.mlp
        self.mlpf = lambda x: m.c_proj(m.act(m.c_fc(x)))  # MLP forward

    def forward(self, x):
        x = x + self.mlpf(self.ln_2(x))
        return x


class Bump(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        e = self.proj(x)
        e[..., 1] += 1.0
        return e.sum(-1)


class Write(nn.Module):
    def forward(self, d, h):
        d = d.clone()
        d[:, 1:3] = h[:, :2]
        return d * 2


def build(name):
    """One of the models, in eval mode with fixed weights, and its inputs."""
    torch.manual_seed(0)
    x = torch.randn(2, 5, DIM)
    if name == "write":
        return Write(), (torch.randn(3, 5), torch.randn(3, 4))
    model = {"pairs": Pairs, "halves": Halves, "decoder": Decoder, "block": Block, "bump": Bump}[name](DIM)
    return model.eval(), (x,)
