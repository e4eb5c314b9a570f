"""JAX for samples/moe.py: MoE, exported by jaxside from one traced run (torchax).

Traced with x: float32[2,6,32]; non-tensor inputs are baked in as they were then.

Generic sizes, read from the inputs' shapes (any value the torch code accepts):
`x.shape[0]`; `x.shape[1]`.

Fixed sizes: `x.shape[2]` = 32: the torch code fails at x.shape[2] = 64 (32 is the
size of a parameter, `router.weight.shape[1]`).

Call it:

    params = load_params(model)  # the torch module, or its state_dict
    outputs = forward(params, x)

Config: the numbers the torch code read from its modules are the fields of `Config`,
the traced model's by default; for another model built the same way, pass
`config=config_from(model)` (under `jax.jit`, as a static argument).

`params` nests the torch tensors by their dotted names, numbered children as lists:
`experts.0.w1.weight` is `params["experts"][0]["w1"]["weight"]`.

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
    (`config.top_k` for `self.top_k`). `config_from(model)` reads them from a torch
    module; `dataclasses.replace(Config(), top_k=...)` changes one."""

    top_k: int = 2


def forward(params, x, *, config=Config()):
    """`MoE.forward`, moe.py:28."""
    tokens = jnp.reshape(x, (x.shape[0] * x.shape[1], x.shape[-1]))
    logits = tokens @ params["router"]["weight"].T
    logits, logits_1 = lax.top_k(logits, config.top_k, axis=1)
    topk_logits = jnp.sort(logits, axis=1, descending=True)
    topk_idx = jnp.take_along_axis(
        logits_1, jnp.argsort(topk_logits, axis=1, descending=True)
    )
    topk_w = jax.nn.softmax(topk_logits, axis=-1)
    weights = (
        jnp.zeros((topk_idx.shape[0], 4), jnp.float32)
        .at[
            jnp.broadcast_to(
                jnp.arange(topk_idx.shape[0], dtype=jnp.int32)[:, None],
                (topk_idx.shape[0], 2),
            ),
            topk_idx,
        ]
        .set(topk_w)
    )
    expert_out = jnp.stack(
        [expert_forward(expert, tokens) for expert in params["experts"]], axis=1
    )
    out = jnp.einsum("ab,abc->ac", weights, expert_out)
    return jnp.reshape(out, (*x.shape[:2], 32))


def expert_forward(params, x):
    """`Expert.forward`, moe.py:17, for 4 calls: `experts.0` ... `experts.3`."""
    silu = jax.nn.silu(x @ params["w1"]["weight"].T)
    silu_times_w3 = silu * (x @ params["w3"]["weight"].T)
    return silu_times_w3 @ params["w2"]["weight"].T


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
        top_k=model.top_k,
    )
