"""JAX for samples/cnn.py: SmallCNN, exported by jaxside from one traced run (torchax).

Traced with x: float32[2,3,16,16]; non-tensor inputs are baked in as they were then.

Generic sizes, read from the inputs' shapes (any value the torch code accepts):
`x.shape[0]`; `x.shape[2]`; `x.shape[3]`.

Fixed sizes: `x.shape[1]` = 3: the torch code fails at x.shape[1] = 6 (3 is the size
of a parameter, `conv1.weight.shape[1]`).

Call it:

    params = load_params(model)  # the torch module, or its state_dict
    outputs = forward(params, x)

Config: the numbers the torch code read from its modules are the fields of `Config`,
the traced model's by default; for another model built the same way, pass
`config=config_from(model)` (under `jax.jit`, as a static argument).

`params` nests the torch tensors by their dotted names, numbered children as lists:
`bn1.num_batches_tracked` is `params["bn1"]["num_batches_tracked"]`.

`forward` works under `jax.jit`, `jax.vmap` and `jax.grad` (differentiate with
respect to the float leaves of `params`, or pass `allow_int=True`).

Gradients are torch's: the float buffers the torch code only reads
(`bn1.running_mean`, `bn1.running_var`, `bn2.running_mean`, ...) are read through
`lax.stop_gradient`, so `jax.grad` gives them zeros where torch gives no gradient.
"""

import dataclasses

import jax
import jax.numpy as jnp
from jax import lax


@dataclasses.dataclass(frozen=True)
class Config:
    """The numbers the torch code read from its modules, as the traced model had them
    (`config.eps` for `self.bn1.eps`). `config_from(model)` reads them from a torch
    module; `dataclasses.replace(Config(), eps=...)` changes one."""

    eps: float = 1e-05


def forward(params, x, *, config=Config()):
    """`SmallCNN.forward`, cnn.py:19."""
    conv1_x = (
        lax.conv(
            x,
            params["conv1"]["weight"],
            window_strides=(1, 1),
            padding=((1, 1), (1, 1)),
        )
        + params["conv1"]["bias"][:, None, None]
    )
    bn1 = (
        conv1_x - lax.stop_gradient(params["bn1"]["running_mean"])[:, None, None]
    ) * lax.rsqrt(
        lax.stop_gradient(params["bn1"]["running_var"])[None, :, None, None]
        + config.eps
    ) * params["bn1"]["weight"][:, None, None] + params["bn1"]["bias"][:, None, None]
    x_1 = lax.reduce_window(
        jax.nn.relu(bn1),
        -jnp.inf,
        lax.max,
        window_dimensions=(1, 1, 2, 2),
        window_strides=(1, 1, 2, 2),
    )
    conv2_x = (
        lax.conv(
            x_1,
            params["conv2"]["weight"],
            window_strides=(1, 1),
            padding=((1, 1), (1, 1)),
        )
        + params["conv2"]["bias"][:, None, None]
    )
    bn2 = (
        conv2_x - lax.stop_gradient(params["bn2"]["running_mean"])[:, None, None]
    ) * lax.rsqrt(
        lax.stop_gradient(params["bn2"]["running_var"])[None, :, None, None]
        + config.eps
    ) * params["bn2"]["weight"][:, None, None] + params["bn2"]["bias"][:, None, None]
    x_1 = lax.reduce_window(
        jax.nn.relu(bn2),
        -jnp.inf,
        lax.max,
        window_dimensions=(1, 1, 2, 2),
        window_strides=(1, 1, 2, 2),
    )
    features = jnp.reshape(jnp.mean(x_1, axis=(3, 2), keepdims=True), (x.shape[0], -1))
    return features @ params["fc"]["weight"].T + params["fc"]["bias"]


def load_params(model):
    """`params` for `forward` from the torch module (or its `state_dict`).

    torch is imported here only. Every tensor becomes a `jnp` array of the dtype JAX
    traced (int64 -> int32 unless x64 is enabled); pass the module to include
    non-persistent buffers.
    """
    import torch

    if isinstance(model, torch.nn.Module):
        tensors = {**dict(model.named_parameters()), **dict(model.named_buffers())}
        for prefix, module in model.named_modules():
            for name, value in vars(module).items():
                if isinstance(value, torch.Tensor):
                    path = f"{prefix}.{name}" if prefix else name
                    tensors.setdefault(path, value)
    else:
        tensors = dict(model)
    params = {}
    for path, tensor in tensors.items():
        tensor = tensor.detach().cpu()
        if tensor.dtype == torch.bfloat16:
            value = jnp.asarray(tensor.float().numpy(), dtype=jnp.bfloat16)
        else:
            value = jnp.asarray(tensor.numpy())
        node = params
        *parents, leaf = path.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return _lists(params)


def _lists(node):
    """Dicts keyed 0..n-1 (a ModuleList) as lists, as in `params["layers"][3]`."""
    if not isinstance(node, dict):
        return node
    # Positions are ASCII digits: a child named "²" or "١" is a name, not a list index.
    positions = node and all(k.isascii() and k.isdecimal() for k in node)
    keys = sorted(map(int, node)) if positions else None
    if keys == list(range(len(node))):
        return [_lists(node[str(i)]) for i in range(len(node))]
    return {k: _lists(v) for k, v in node.items()}


def config_from(model):
    """The `Config` of a torch module built as the traced one, for
    `forward(..., config=config_from(model))`."""
    return Config(
        eps=model.bn1.eps,
    )
