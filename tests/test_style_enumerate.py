"""Class styles on gpt-fast's layer loop, `for i, layer in enumerate(self.layers)`: each layer
writes its KV cache in place, so the functional export reads `state["layers"][i]`, and the module
styles call `layer(...)` in `for i, layer in enumerate(self.layers)` (they refused the loop: "the
module a call runs is not a path"). The counter stays bound, as the body may use it."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

import jaxside


class Cache(nn.Module):
    def __init__(self, length: int, width: int) -> None:
        super().__init__()
        self.register_buffer("k_cache", torch.zeros(1, length, width))

    def update(self, input_pos: Tensor, k: Tensor) -> Tensor:
        self.k_cache[:, input_pos] = k
        return self.k_cache


class Layer(nn.Module):
    def __init__(self, width: int, length: int) -> None:
        super().__init__()
        self.wk = nn.Linear(width, width, bias=False)
        self.kv_cache = Cache(length, width)

    def forward(self, x: Tensor, input_pos: Tensor) -> Tensor:
        keys = self.kv_cache.update(input_pos, self.wk(x))
        return x + keys[:, input_pos].tanh()


class Cached(nn.Module):
    def __init__(self, width: int = 8, length: int = 6) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Layer(width, length) for _ in range(2))

    def forward(self, x: Tensor, input_pos: Tensor) -> Tensor:
        for i, layer in enumerate(self.layers):  # noqa: B007 (as gpt-fast writes it)
            x = layer(x, input_pos)
        return x


@pytest.mark.parametrize("style", ["nnx", "equinox"])
def test_an_enumerated_layer_loop_is_a_loop_over_the_layers(style: str):
    torch.manual_seed(0)
    model = Cached().eval()
    exported = jaxside.export(model, torch.randn(1, 3, 8), torch.arange(3), style=style, static_shapes=True)
    assert "for i, layer in enumerate(self.layers):" in exported.source
    assert exported.check().ok
