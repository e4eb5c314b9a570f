"""A small model written to exercise names the exports give what torch left unnamed, in the style of
vit-pytorch's LeViT: stages that keep a number only to hand it to their mixer (`Stage.heads`, read by
`Mixer` alone), one stage built without its residual (`x if self.residual else 0`: the same
`Stage.forward` lowered to a second def), gates whose activation module differs (one `Tanh` among
`ReLU`s: a def of its own), and a refinement step that reads a parameter tied to its
parent's, scaled by the step number its Python loop passes (`self.refine(x, i)`): a value hoisted
out of the unrolled calls. `build()` makes the model and its input, `example()` runs it."""

import torch
import torch.nn as nn

DIM, SEQ = 12, 5


class Mixer(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.out = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (t.reshape(b, n, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        attn = (q @ k.transpose(-2, -1)).softmax(dim=-1)
        return self.out((attn @ v).transpose(1, 2).reshape(b, n, -1))


class Stage(nn.Module):
    def __init__(self, dim, heads, residual=True):
        super().__init__()
        self.heads = heads  # only handed to the mixer
        self.residual = residual
        self.norm = nn.LayerNorm(dim)
        self.mixer = Mixer(dim, self.heads)

    def forward(self, x):
        res = x if self.residual else 0
        return self.mixer(self.norm(x)) + res


class Gate(nn.Module):
    def __init__(self, dim, act):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.act = act

    def forward(self, x):
        return x * self.act(self.fc(x))


class Refine(nn.Module):
    def __init__(self, dim, shift):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.shift = shift  # the parent's parameter, tied

    def forward(self, x, i):
        return self.proj(x) + self.shift * i


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.stages = nn.Sequential(Stage(DIM, 2), Stage(DIM, 3, residual=False), Stage(DIM, 3))
        self.gates = nn.Sequential(Gate(DIM, nn.ReLU()), Gate(DIM, nn.Tanh()), Gate(DIM, nn.ReLU()))
        self.shift = nn.Parameter(torch.randn(DIM) * 0.1)
        self.refine = Refine(DIM, self.shift)

    def forward(self, x):
        x = self.gates(self.stages(x))
        for i in range(3):
            x = self.refine(x, i)
        return x


def build():
    torch.manual_seed(0)
    return Model().eval(), (torch.randn(2, SEQ, DIM),)


def example():
    return build()
