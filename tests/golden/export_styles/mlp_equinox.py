"""Equinox for samples/mlp.py: MLP, exported by jaxside from one traced run (torchax).

Traced with x: float32[8,32]; non-tensor inputs are baked in as they were then.

Generic sizes, read from the inputs' shapes (any value the torch code accepts):
`x.shape[0]`.

Fixed sizes: `x.shape[1]` = 32: the torch code fails at x.shape[1] = 64 (32 is the
size of a parameter, `fc1.weight.shape[1]`).

Call it:

    model = from_torch(torch_model)  # the torch module, or its state_dict
    outputs = model(x)

One class per torch class, attributes named as in torch. Every tensor keeps torch's
layout: `from_torch` only places them.

Config: the numbers the torch code read from its modules are the fields of `Config`,
the traced model's by default; for another model built the same way, pass
`config=config_from(model)` to `from_torch`.
"""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax


@dataclasses.dataclass(frozen=True)
class Config:
    """The numbers the torch code read from its modules, as the traced model had them
    (`config.eps` for `self.norm.eps`). `config_from(model)` reads them from a torch
    module; `dataclasses.replace(Config(), eps=...)` changes one."""

    eps: float = 1e-05


class Linear(eqx.Module):
    """`Linear`: the tensors of the torch module at `fc1` and 2 more."""

    weight: jax.Array
    bias: jax.Array


class LayerNorm(eqx.Module):
    """`LayerNorm`: the tensors of the torch module at `norm`."""

    weight: jax.Array
    bias: jax.Array


class MLP(eqx.Module):
    """`MLP`: the traced torch module."""

    fc1: Linear
    fc2: Linear
    norm: LayerNorm
    head: Linear
    config: Config = eqx.field(static=True)

    def __call__(self, x):
        """`MLP.forward`, mlp.py:16."""
        h = jax.nn.gelu(x @ self.fc1.weight.T + self.fc1.bias, approximate=False)
        relu = jax.nn.relu(h @ self.fc2.weight.T + self.fc2.bias)
        h_plus_relu = h + relu
        h = (h_plus_relu - jnp.mean(h_plus_relu, axis=1, keepdims=True)) * lax.rsqrt(
            jnp.var(h_plus_relu, axis=1, keepdims=True, ddof=0) + self.config.eps
        ) * self.norm.weight + self.norm.bias
        return h @ self.head.weight.T + self.head.bias


def _tensors(model):
    """Every tensor of a torch module (parameters, buffers, tensor attributes) or of a
    `state_dict` (of torch tensors, or of NumPy arrays: then torch is not needed), by
    dotted path, as `jnp` arrays."""
    if isinstance(model, dict):
        tensors = dict(model)
    else:
        import torch

        tensors = {**dict(model.named_parameters()), **dict(model.named_buffers())}
        for prefix, module in model.named_modules():
            for name, value in vars(module).items():
                if isinstance(value, torch.Tensor):
                    tensors.setdefault(f"{prefix}.{name}" if prefix else name, value)
    arrays = {}
    for path, tensor in tensors.items():
        if hasattr(tensor, "detach"):  # a torch tensor
            tensor = tensor.detach().cpu()
            if str(tensor.dtype) == "torch.bfloat16":
                tensor = jnp.asarray(tensor.float().numpy(), dtype=jnp.bfloat16)
            else:
                tensor = tensor.numpy()
        arrays[path] = jnp.asarray(tensor)
    return arrays


def _count(tensors, prefix):
    """How many numbered children (a ModuleList) the tensors have under `prefix`."""
    numbers = {
        path[len(prefix) :].split(".")[0] for path in tensors if path.startswith(prefix)
    }
    return len(numbers)


def _linear(tensors, path):
    """`Linear` from the tensors under `path`."""
    return Linear(weight=tensors[path + "weight"], bias=tensors[path + "bias"])


def _layer_norm(tensors, path):
    """`LayerNorm` from the tensors under `path`."""
    return LayerNorm(weight=tensors[path + "weight"], bias=tensors[path + "bias"])


def _mlp(tensors, path, config):
    """`MLP` from the tensors under `path`."""
    return MLP(
        fc1=_linear(tensors, path + "fc1."),
        fc2=_linear(tensors, path + "fc2."),
        norm=_layer_norm(tensors, path + "norm."),
        head=_linear(tensors, path + "head."),
        config=config,
    )


def from_torch(model, *, config=Config()):
    """The `MLP` holding a torch module's weights (the module, or its
    `state_dict`): every tensor keeps torch's layout.
    """
    tensors = _tensors(model)
    return _mlp(tensors, "", config)


def config_from(model):
    """The `Config` of a torch module built as the traced one, for
    `from_torch(..., config=config_from(model))`."""
    return Config(
        eps=model.norm.eps,
    )
