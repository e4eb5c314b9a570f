"""`--check` at another shape: the example inputs resized where the export's sizes are generic.

Every set of generic argument dimensions is doubled (sets shared with state buffers, a KV cache's
batch, stay as traced: the model's buffers have their size). Float tensors get new random values,
a range of positions (`torch.arange(8)`) the longer range, other tensors their values repeated
along the longer dimensions, so indices stay valid. A cache passed in (a `DynamicCache`) is
copied with its tensors resized, as the capture lays them out (`past_key_values['layers'][0]['keys']`).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.utils._pytree as torch_pytree

from jaxside.render.ir import Program
from jaxside.render.lower.dims import resized
from jaxside.tracing import held_tensors, with_tensors


def other_shape(program: Program, fn: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict, str] | None:
    """The example inputs at another shape the export takes, and what changed; None when it
    takes no other (every size fixed, or generic only together with state)."""
    if program.sizes is None:
        return None
    sets = [dims for dims in program.sizes.generic if not any(d.state for d in dims)]
    if not sets:
        return None
    shapes = resized(program.trace, sets, [2] * len(sets))
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    try:
        bound = inspect.signature(target).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return None
    generator = torch.Generator().manual_seed(0)
    def at(key: str, tensor: torch.Tensor) -> torch.Tensor:
        return _resized(tensor, shapes[key], generator) if key in shapes else tensor

    for name, value in bound.arguments.items():
        leaves, spec = torch_pytree.tree_flatten_with_path(value)
        new = []
        for path, leaf in leaves:
            key = name + torch_pytree.keystr(path)
            held = [] if isinstance(leaf, torch.Tensor) else held_tensors(leaf)
            if held:  # a cache object: a copy holding the resized tensors
                tensors = [at(key + "".join(f"[{k!r}]" for k in inner), t) for inner, t in held]
                new.append(with_tensors(leaf, tensors))
            else:
                new.append(at(key, leaf) if isinstance(leaf, torch.Tensor) else leaf)
        bound.arguments[name] = torch_pytree.tree_unflatten(new, spec)
    where = ", ".join(f"{name}: {list(shape)}" for name, shape in shapes.items())
    return bound.args, bound.kwargs, where


def _resized(tensor: torch.Tensor, shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    if tensor.is_floating_point():
        return torch.randn(shape, generator=generator).to(tensor.dtype)
    if tensor.ndim == 1 and len(tensor) > 1 and torch.equal(tensor, torch.arange(len(tensor)) + tensor[0]):
        return torch.arange(shape[0], dtype=tensor.dtype) + tensor[0]
    for axis, size in enumerate(shape):
        tensor = tensor.index_select(axis, torch.arange(size) % tensor.shape[axis])
    return tensor
