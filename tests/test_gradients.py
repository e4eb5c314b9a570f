"""Exported code differentiates what torch differentiates, and nothing else. A model with float
buffers its forward reads (a table, per-block scales, BatchNorm's running statistics in eval), a
boolean mask and a frozen parameter (`requires_grad=False`) is exported in each style; `jax.grad`
(functional), `nnx.grad` and `eqx.filter_grad` of a scalar loss give torch's `.grad` for every
trained parameter and nothing (NNX) or zeros (functional, Equinox) for the rest."""

from __future__ import annotations

import functools
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from torch import nn

import jaxside


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.register_buffer("scale", torch.linspace(0.5, 1.5, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.fc(x)) * self.scale + x


class Net(nn.Module):
    def __init__(self, dim: int = 8, length: int = 6) -> None:
        super().__init__()
        self.embed = nn.Linear(4, dim)
        self.register_buffer("table", torch.randn(length, dim))
        self.register_buffer("mask", torch.tril(torch.ones(length, length, dtype=torch.bool)))
        self.blocks = nn.ModuleList([Block(dim) for _ in range(3)])
        self.norm = nn.BatchNorm1d(dim)
        self.head = nn.Linear(dim, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[1]
        h = self.embed(x) + self.table[:n]
        h = h.masked_fill(~self.mask[:n, :n].any(-1, keepdim=True), 0.0)
        for block in self.blocks:
            h = block(h)
        return self.head(self.norm(h.transpose(1, 2)).transpose(1, 2))


def _model(frozen: tuple[str, ...]) -> nn.Module:
    torch.manual_seed(0)
    model = Net().eval()
    model.norm.running_mean.normal_()  # statistics a gradient would show in
    model.norm.running_var.uniform_(0.5, 2.0)
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(name not in frozen)
    return model


@functools.cache
def _exported(style: str, frozen: tuple[str, ...]) -> tuple[nn.Module, torch.Tensor, Any]:
    model = _model(frozen)
    x = torch.randn(2, 6, 4)
    return model, x, jaxside.export(model, x, style=style, static_shapes=True)


def _torch_grads(model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor | None]:
    model.zero_grad(set_to_none=True)
    (model(x) ** 2).sum().backward()
    return {name: p.grad for name, p in model.named_parameters()}


def _dotted(path: tuple[Any, ...]) -> str:
    parts = []
    for key in path:
        part = getattr(key, "key", getattr(key, "idx", getattr(key, "name", key)))
        parts.append(str(part))
    return ".".join(parts)


def _float_leaves(tree: Any) -> dict[str, np.ndarray]:
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {_dotted(path): np.asarray(leaf) for path, leaf in leaves
            if hasattr(leaf, "dtype") and jnp.issubdtype(leaf.dtype, jnp.floating)}


def _assert_torchs(got: dict[str, np.ndarray], want: dict[str, torch.Tensor | None], buffers: list[str]
                   ) -> None:
    """Each trained parameter's gradient is torch's; a frozen one's and every float buffer's is zero
    (or absent)."""
    for name, grad in want.items():
        if grad is not None:
            np.testing.assert_allclose(got[name], grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)
        elif name in got:
            assert not np.any(got[name]), f"{name}: torch gives it no gradient"
    for name in buffers:
        if name in got:
            assert not np.any(got[name]), f"{name}: a buffer, which torch never differentiates"


FROZEN = ("embed.weight",)
BUFFERS = ["table", "blocks.0.scale", "blocks.2.scale", "norm.running_mean", "norm.running_var"]


def _grads(style: str, model: nn.Module, x: torch.Tensor, module: Any) -> dict[str, np.ndarray]:
    """The export's gradient of `sum(outputs ** 2)` by torch path: `jax.grad` of the functional
    export, `nnx.grad` (its `nnx.Param`s only; a kernel as torch's weight) or `eqx.filter_grad`."""
    inputs = jnp.asarray(x.numpy())
    if style == "functional":
        def loss(params: Any) -> jax.Array:
            return jnp.sum(module.forward(params, inputs) ** 2)

        return _float_leaves(jax.jit(jax.grad(loss, allow_int=True))(module.load_params(model)))

    def method_loss(ported: Any) -> jax.Array:
        return jnp.sum(ported(inputs) ** 2)

    ported = module.from_torch(model)
    if style == "equinox":
        return _float_leaves(eqx.filter_jit(eqx.filter_grad(method_loss))(ported))
    grads = _float_leaves(nnx.grad(method_loss)(ported))
    got = {name.removesuffix(".value"): value for name, value in grads.items()}
    for name in list(got):  # `nnx.Linear`: torch's weight is the kernel, transposed
        if name.endswith(".kernel"):
            got[name.removesuffix("kernel") + "weight"] = got.pop(name).T
    return got


def test_functional_export_stops_buffers_and_frozen_parameters():
    model, x, exported = _exported("functional", FROZEN)
    text = exported.source
    assert "lax.stop_gradient(params[\"table\"])" in text
    assert "lax.stop_gradient(params[\"scale\"])" in text  # in the def the three blocks share
    assert "lax.stop_gradient(params[\"embed\"][\"weight\"])" in text
    assert "stop_gradient(params[\"mask\"]" not in text  # booleans: no gradient to stop
    assert "lax.stop_gradient(params[\"head\"]" not in text
    assert "Gradients are torch's" in text and "`blocks.*.scale`" in text and "`embed.weight`" in text
    got = _grads("functional", model, x, exported.module)
    assert set(BUFFERS) <= set(got)  # the buffers are in `params`, and their gradients are zeros
    _assert_torchs(got, _torch_grads(model, x), BUFFERS)


def test_nnx_grad_takes_the_trained_parameters_only():
    model, x, exported = _exported("nnx", FROZEN)
    assert "class FrozenParam(nnx.Variable):" in exported.source
    assert "self.weight = FrozenParam(weight)" in exported.source
    got = _grads("nnx", model, x, exported.module)
    want = _torch_grads(model, x)
    assert set(got) == {name for name, grad in want.items() if grad is not None}
    _assert_torchs(got, want, BUFFERS)


def test_equinox_filter_grad_gives_zeros_where_torch_gives_none():
    model, x, exported = _exported("equinox", FROZEN)
    assert "jax.lax.stop_gradient(self.embed.weight)" in exported.source
    assert "stop_gradient(self.head" not in exported.source
    got = _grads("equinox", model, x, exported.module)
    assert set(BUFFERS) <= set(got)
    _assert_torchs(got, _torch_grads(model, x), BUFFERS)


@pytest.mark.parametrize("style", ["functional", "nnx", "equinox"])
def test_nothing_frozen_differentiates_every_parameter(style):
    """With every parameter trained, nothing of theirs is stopped: only the buffers are."""
    model, x, exported = _exported(style, ())
    assert "FrozenParam" not in exported.source
    assert "stop_gradient(params[\"embed\"]" not in exported.source
    assert "stop_gradient(self.embed" not in exported.source
    _assert_torchs(_grads(style, model, x, exported.module), _torch_grads(model, x), BUFFERS)


MIXED = ("embed.weight", "blocks.0.fc.weight")


def test_nnx_makes_each_instance_frozen_or_not_as_torch_has_it():
    """The first block's weight frozen, the others trained: NNX's converter gives each `Linear` its
    own variable type (`_param`), so `nnx.grad` still takes exactly torch's trained parameters."""
    model, x, exported = _exported("nnx", MIXED)
    assert "weight=_param(tensors, path + \"weight\")" in exported.source
    assert "froze in some instances" not in exported.source
    got = _grads("nnx", model, x, exported.module)
    want = _torch_grads(model, x)
    assert set(got) == {name for name, grad in want.items() if grad is not None}
    _assert_torchs(got, want, BUFFERS)


@pytest.mark.parametrize("style", ["functional", "equinox"])
def test_a_parameter_frozen_in_one_call_of_a_shared_def_is_said(style):
    """One def (one method) reads every block's weight, so the first block's, frozen, cannot be
    stopped there: the docstring names it; the rest still differentiate as torch does."""
    model, x, exported = _exported(style, MIXED)
    doc = " ".join(exported.source.split('"""')[1].split())
    assert "froze in some instances of" in doc and "(`blocks.0.fc.weight`)" in doc, doc
    assert "stop_gradient(params[\"fc\"]" not in exported.source
    assert "stop_gradient(self.fc" not in exported.source
    got = _grads(style, model, x, exported.module)
    assert np.any(got["blocks.0.fc.weight"])  # as the docstring says
    want = {name: grad for name, grad in _torch_grads(model, x).items() if name != "blocks.0.fc.weight"}
    _assert_torchs(got, want, BUFFERS)
