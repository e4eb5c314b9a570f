"""Class styles on a minGPT-style model: the transformer's parts and each block's MLP are both
`nn.ModuleDict`s, so one export class `ModuleDict` holds a list of `Block`s and each `Block` a
`ModuleDict` (a cycle of classes no definition order satisfies), and the MLP's activation is a
module with no tensors, present in one `ModuleDict` instance only. Both exports import, convert
the torch weights and give torch's numbers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

import jaxside


class Gelu(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x * (1.0 + torch.tanh(0.7978845608 * (x + 0.044715 * torch.pow(x, 3.0))))


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(width)
        self.mlp = nn.ModuleDict(dict(
            fc=nn.Linear(width, 2 * width),
            proj=nn.Linear(2 * width, width),
            act=Gelu(),
        ))
        m = self.mlp
        self.mlpf = lambda x: m.proj(m.act(m.fc(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlpf(self.ln(x))


class Tiny(nn.Module):
    def __init__(self, vocab: int = 16, width: int = 8) -> None:
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, width),
            h=nn.ModuleList([Block(width) for _ in range(2)]),
        ))
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.transformer.wte(idx)
        for block in self.transformer.h:
            x = block(x)
        return F.softmax(self.head(x), dim=-1)


@pytest.mark.parametrize("style", ["nnx", "equinox"])
def test_a_cycle_of_classes_and_a_tensorless_child_export(style: str):
    torch.manual_seed(0)
    model = Tiny().eval()
    idx = torch.randint(0, 16, (1, 5))
    exported = jaxside.export(model, idx, style=style, static_shapes=True)
    if style == "equinox":
        assert '    mlp: "ModuleDict"' in exported.source  # defined below `Block`, which holds it
    ported = exported.module.from_torch(model)
    if style == "equinox":
        ported = ported[0] if isinstance(ported, tuple) else ported
    assert ported.transformer.h[1].mlp.act is not None  # built though no tensor marks where it is
    got = ported(np.asarray(idx.numpy()))
    with torch.no_grad():
        expected = model(idx).numpy()
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-5, atol=1e-6)
    assert exported.check().ok
