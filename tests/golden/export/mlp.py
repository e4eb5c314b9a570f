"""JAX for samples/mlp.py: MLP, exported by jaxside from one traced run (torchax).

Traced with x: float32[8,32]; shapes and non-tensor inputs are baked in as they were
then.

Call it:

    params = load_params(model)  # the torch module, or its state_dict
    outputs = forward(params, x)

`params` nests the torch tensors by their dotted names, numbered children as lists:
`norm.weight` is `params["norm"]["weight"]`.

`forward` works under `jax.jit`, `jax.vmap` and `jax.grad` (differentiate with
respect to the float leaves of `params`, or pass `allow_int=True`).
"""

import jax
import jax.numpy as jnp
from jax import lax


def forward(params, x):
    """`MLP.forward`, mlp.py:16."""
    fc1_x = (
        lax.dot_general(
            x,
            params["fc1"]["weight"],
            (((1,), (1,)), ((), ())),
            preferred_element_type=jnp.float32,
        )
        + params["fc1"]["bias"][None]
    )
    h = jnp.copy(0.5 * fc1_x * lax.erfc(-fc1_x * 0.70710677))
    fc2_h = (
        lax.dot_general(
            h,
            params["fc2"]["weight"],
            (((1,), (1,)), ((), ())),
            preferred_element_type=jnp.float32,
        )
        + params["fc2"]["bias"][None]
    )
    h_1 = h + jax.nn.relu(fc2_h) * 1.0
    h_2 = (h_1 - jnp.sum(h_1, axis=1)[:, None] / 64.0) * lax.rsqrt(
        jax.jit(_var)(h_1, 0) + 1e-05
    ) * params["norm"]["weight"][None] + params["norm"]["bias"][None]
    return (
        lax.dot_general(
            h_2,
            params["head"]["weight"],
            (((1,), (1,)), ((), ())),
            preferred_element_type=jnp.float32,
        )
        + params["head"]["bias"][None]
    )


def _var(x, y):
    var = 64.0 - y.astype(jnp.float32)
    return jnp.where(
        var > 0.0,
        jnp.sum(jnp.square(x - jnp.sum(x, axis=1)[:, None] / 64.0), axis=1)[:, None]
        / var,
        jnp.nan,
    )


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
    keys = sorted(map(int, node)) if node and all(k.isdigit() for k in node) else None
    if keys == list(range(len(node))):
        return [_lists(node[str(i)]) for i in range(len(node))]
    return {k: _lists(v) for k, v in node.items()}
