"""JAX for samples/rnn.py: SequenceModel, exported by jaxside from one traced run
(torchax).

Traced with x: float32[2,5,8]; non-tensor inputs are baked in as they were then.

Generic sizes, read from the inputs' shapes (any value the torch code accepts):
`x.shape[0]`; `x.shape[1]`.

Fixed sizes: `x.shape[2]` = 8: the torch code fails at x.shape[2] = 16 (8 is the size
of a parameter, `cell.weight_ih.shape[1]`).

Call it:

    params = load_params(model)  # the torch module, or its state_dict
    outputs = forward(params, x)

Config: the numbers the torch code read from its modules are the fields of `Config`,
the traced model's by default; for another model built the same way, pass
`config=config_from(model)` (under `jax.jit`, as a static argument).

`params` nests the torch tensors by their dotted names, numbered children as lists:
`cell.weight_ih` is `params["cell"]["weight_ih"]`.

`forward` works under `jax.jit`, `jax.vmap` and `jax.grad` (differentiate with
respect to the float leaves of `params`, or pass `allow_int=True`).
"""

import dataclasses

import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class Config:
    """The numbers the torch code read from its modules, as the traced model had them
    (`config.hidden_size` for `self.hidden_size`). `config_from(model)` reads them
    from a torch module; `dataclasses.replace(Config(), hidden_size=...)` changes
    one."""

    hidden_size: int = 32


def forward(params, x, *, config=Config()):
    """`SequenceModel.forward`, rnn.py:30."""
    h = jnp.zeros((x.shape[0], config.hidden_size), jnp.float32)
    outputs = []
    for t in range(x.shape[1]):
        x_t = x[:, t]
        h = elman_cell_forward(params["cell"], x_t, h)
        outputs.append(h)
    hidden_states = jnp.stack(outputs, axis=1)
    return hidden_states @ params["head"]["weight"].T + params["head"]["bias"]


def elman_cell_forward(params, x_t, h):
    """`ElmanCell.forward`, rnn.py:19, for 5 calls of `cell`."""
    bias = x_t @ params["weight_ih"].T + h @ params["weight_hh"].T + params["bias"]
    return jnp.tanh(bias)


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
        hidden_size=model.hidden_size,
    )
