"""``--style equinox``: torch's buffers are array fields like its parameters, so each float buffer
is read through `jax.lax.stop_gradient` (Equinox's way to mark an array non-trainable). Here
`eqx.filter_grad` of the export gives zeros for every buffer (a rotary table, BatchNorm's running
statistics) and, for every parameter, torch's gradient."""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import torch
from torch import nn

import jaxside


class Rotary(nn.Module):
    def __init__(self, dim: int, length: int) -> None:
        super().__init__()
        inverse = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
        angles = torch.outer(torch.arange(length).float(), inverse)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        cos, sin = self.cos[positions], self.sin[positions]
        even, odd = x[..., ::2], x[..., 1::2]
        return torch.cat([even * cos - odd * sin, even * sin + odd * cos], -1)


class Block(nn.Module):
    """Buffers of each kind: float tables and statistics, a boolean mask, integer positions."""

    def __init__(self, dim: int, length: int) -> None:
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.rotary = Rotary(dim, length)
        self.register_buffer("mask", torch.tril(torch.ones(length, length, dtype=torch.bool)))
        self.register_buffer("positions", torch.arange(length))
        self.norm = nn.BatchNorm1d(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        length = x.shape[1]
        q, k, v = self.qkv(x).chunk(3, -1)
        positions = self.positions[:length]
        q, k = self.rotary(q, positions), self.rotary(k, positions)
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(~self.mask[:length, :length], float("-inf")).softmax(-1)
        return self.norm((scores @ v).transpose(1, 2)).transpose(1, 2)


class Stack(nn.Module):
    def __init__(self, dim: int = 8, length: int = 6) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(dim, length) for _ in range(2)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = x + block(x)
        return x


def _at(tree: object, path: str) -> object:
    """`blocks.0.norm.running_mean` of the Equinox model (lists by position)."""
    for part in path.split("."):
        tree = tree[int(part)] if part.isdecimal() else getattr(tree, part)
    return tree


def test_equinox_buffers_get_no_gradient_and_parameters_torchs():
    torch.manual_seed(0)
    model = Stack().eval()
    for block in model.blocks:  # statistics a gradient would show in
        block.norm.running_mean.normal_()
        block.norm.running_var.uniform_(0.5, 2.0)
    x = torch.randn(2, 6, 8)
    exported = jaxside.export(model, x, style="equinox", static_shapes=True)
    assert "jax.lax.stop_gradient(self.norm.running_mean)" in exported.source
    assert "stop_gradient(self.mask" not in exported.source  # booleans: no gradient to stop
    ported = exported.module.from_torch(model)

    def loss(module: eqx.Module, inputs: jax.Array) -> jax.Array:
        return jnp.sum(module(inputs) ** 2)

    grads = eqx.filter_jit(eqx.filter_grad(loss))(ported, jnp.asarray(x.numpy()))
    model.zero_grad(set_to_none=True)
    (model(x) ** 2).sum().backward()
    for name, parameter in model.named_parameters():
        np.testing.assert_allclose(np.asarray(_at(grads, name)), parameter.grad.numpy(), rtol=1e-4, atol=1e-5,
                                   err_msg=name)
    buffers = [name for name, b in model.named_buffers() if b.is_floating_point()]
    assert {"blocks.0.rotary.cos", "blocks.1.norm.running_var"} <= set(buffers)
    for name in buffers:
        assert not np.any(np.asarray(_at(grads, name))), name
