"""Flax NNX for samples/mlp.py: MLP, exported by jaxside from one traced run (torchax).

Traced with x: float32[8,32]; non-tensor inputs are baked in as they were then.

Generic sizes, read from the inputs' shapes (any value the torch code accepts):
`x.shape[0]`.

Fixed sizes: `x.shape[1]` = 32: the torch code fails at x.shape[1] = 64 (32 is the
size of a parameter, `fc1.weight.shape[1]`).

Call it:

    model = from_torch(torch_model)  # the torch module, or its state_dict
    outputs = model(x)

One class per torch class, attributes named as in torch. `from_torch` is the one
place tensors change layout (`nnx.Linear` kernels are torch's weights transposed);
the other tensors keep torch's.

Config: the numbers the torch code read from its modules are the fields of `Config`,
the traced model's by default; for another model built the same way, pass
`config=config_from(model)` to `from_torch`.
"""

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx
from jax import lax


@dataclasses.dataclass(frozen=True)
class Config:
    """The numbers the torch code read from its modules, as the traced model had them
    (`config.eps` for `self.norm.eps`). `config_from(model)` reads them from a torch
    module; `dataclasses.replace(Config(), eps=...)` changes one."""

    eps: float = 1e-05


class MLP(nnx.Module):
    """`MLP`: the traced torch module."""

    def __init__(self, fc1, fc2, norm, head, *, config):
        self.fc1 = fc1
        self.fc2 = fc2
        self.norm = norm
        self.head = head
        self.config = config

    def __call__(self, x):
        """`MLP.forward`, mlp.py:16."""
        h = jax.nn.gelu(self.fc1(x), approximate=False)
        relu = jax.nn.relu(self.fc2(h))
        h_plus_relu = h + relu
        h = (h_plus_relu - jnp.mean(h_plus_relu, axis=1, keepdims=True)) * lax.rsqrt(
            jnp.var(h_plus_relu, axis=1, keepdims=True, ddof=0) + self.config.eps
        ) * self.norm.weight[...] + self.norm.bias[...]
        return self.head(h)


class LayerNorm(nnx.Module):
    """`LayerNorm`: the tensors of the torch module at `norm`."""

    def __init__(self, weight, bias):
        self.weight = nnx.Param(weight)
        self.bias = nnx.Param(bias)


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


def _linear_layer(tensors, path):
    """A torch `Linear` as an `nnx.Linear`: torch keeps `weight` as (out, in), NNX's `kernel`
    is (in, out), so it is transposed; the bias is the same."""
    weight = tensors[path + "weight"]
    bias = tensors.get(path + "bias")
    layer = nnx.Linear(
        weight.shape[1],
        weight.shape[0],
        use_bias=bias is not None,
        param_dtype=weight.dtype,
        rngs=nnx.Rngs(0),
    )
    layer.kernel[...] = weight.T
    if bias is not None:
        layer.bias[...] = bias
    return layer


def _mlp(tensors, path, config):
    """`MLP` from the tensors under `path`."""
    return MLP(
        fc1=_linear_layer(tensors, path + "fc1."),
        fc2=_linear_layer(tensors, path + "fc2."),
        norm=_layer_norm(tensors, path + "norm."),
        head=_linear_layer(tensors, path + "head."),
        config=config,
    )


def _layer_norm(tensors, path):
    """`LayerNorm` from the tensors under `path`."""
    return LayerNorm(weight=tensors[path + "weight"], bias=tensors[path + "bias"])


def from_torch(model, *, config=Config()):
    """The `MLP` holding a torch module's weights (the module, or its
    `state_dict`): every layout change is made here, in the helpers it calls.
    """
    tensors = _tensors(model)
    return _mlp(tensors, "", config)


def config_from(model):
    """The `Config` of a torch module built as the traced one, for
    `from_torch(..., config=config_from(model))`."""
    return Config(
        eps=model.norm.eps,
    )
