"""A GPT-2 style block whose projections are transformers' `Conv1D`: a linear layer that keeps its
weight (in, out), where `nn.Linear` keeps (out, in). Written for tests/test_review_unread.py in
the style of `transformers.pytorch_utils.Conv1D` (class name, `nf`, `nx`); its ports are an NNX
module (kernels (in, out), as Conv1D's) and an Equinox one (`eqx.nn.Linear`, (out, in)), both
holding the `gain` buffer as a (DIM,) array."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

DIM, HIDDEN = 8, 24


class Conv1D(nn.Module):
    def __init__(self, nf: int, nx: int) -> None:
        super().__init__()
        self.nf, self.nx = nf, nx
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.3)
        self.bias = nn.Parameter(torch.randn(nf) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size_out = x.size()[:-1] + (self.nf,)
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(size_out)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c_fc = Conv1D(HIDDEN, DIM)
        self.c_proj = Conv1D(DIM, HIDDEN)
        self.c_out = Conv1D(DIM, DIM)  # square: its layout is told by the class, not the shape
        # A buffer with leading axes of size 1, as minGPT keeps its (1, 1, T, T) mask.
        self.register_buffer("gain", 1.0 + 0.1 * torch.randn(1, 1, DIM))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))
        return self.c_out(h) * self.gain


def example():
    torch.manual_seed(0)
    return Block().eval(), (torch.randn(2, 5, DIM),)
