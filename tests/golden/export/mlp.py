"""JAX for samples/mlp.py: MLP, exported by jaxside from one traced run (torchax).

Traced with x: float32[8,32]; non-tensor inputs are baked in as they were then.

Generic sizes, read from the inputs' shapes (any value the torch code accepts):
`x.shape[0]`.

Fixed sizes: `x.shape[1]` = 32: the torch code fails at x.shape[1] = 64 (32 is the
size of a parameter, `fc1.weight.shape[1]`).

Call it:

    params = load_params(model)  # the torch module, or its state_dict
    outputs = forward(params, x)

Config: the numbers the torch code read from its modules are the fields of `Config`,
the traced model's by default; for another model built the same way, pass
`config=config_from(model)` (under `jax.jit`, as a static argument).

`params` nests the torch tensors by their dotted names, numbered children as lists:
`norm.weight` is `params["norm"]["weight"]`.

`forward` works under `jax.jit`, `jax.vmap` and `jax.grad` (differentiate with
respect to the float leaves of `params`, or pass `allow_int=True`).
"""

import dataclasses

import jax
import jax.numpy as jnp
from jax import lax


@dataclasses.dataclass(frozen=True)
class Config:
    """The numbers the torch code read from its modules, as the traced model had them
    (`config.eps` for `self.norm.eps`). `config_from(model)` reads them from a torch
    module; `dataclasses.replace(Config(), eps=...)` changes one."""

    eps: float = 1e-05


def forward(params, x, *, config=Config()):
    """`MLP.forward`, mlp.py:16."""
    h = jax.nn.gelu(
        x @ params["fc1"]["weight"].T + params["fc1"]["bias"], approximate=False
    )
    relu = jax.nn.relu(h @ params["fc2"]["weight"].T + params["fc2"]["bias"])
    h_plus_relu = h + relu
    h = (h_plus_relu - jnp.mean(h_plus_relu, axis=1, keepdims=True)) * lax.rsqrt(
        jnp.var(h_plus_relu, axis=1, keepdims=True, ddof=0) + config.eps
    ) * params["norm"]["weight"] + params["norm"]["bias"]
    return h @ params["head"]["weight"].T + params["head"]["bias"]


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
        eps=model.norm.eps,
    )
