"""`--check` at other shapes: the example inputs resized where the export's sizes are generic.

At a larger shape every set of generic argument dimensions is doubled (one whose traced size is its
largest, a sequence traced at `block_size`, stays); at a smaller one each set goes to the first
of `smaller` (halved; a set traced at 2 or less stays). Sets shared with state
buffers (a KV cache's batch) stay as traced: the model's buffers have their size. Float tensors
get new random values, a range of positions (`torch.arange(8)`) the longer or shorter range,
other tensors their values repeated or cut along the resized dimensions, so indices stay valid. A
cache passed in (a `DynamicCache`) is copied with its tensors resized, as the capture lays them
out (`past_key_values['layers'][0]['keys']`).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.utils._pytree as torch_pytree

from jaxside.render.ir import Program
from jaxside.render.lower.merge.input_sizes import resized, smaller
from jaxside.tracing import held_tensors, with_tensors


def other_shape(
    program: Program, fn: Any, args: tuple, kwargs: dict, *, larger: bool = True
) -> tuple[tuple, dict, str] | None:
    """The example inputs at a larger (or smaller) shape the export takes, and what changed; None
    when it takes none (every size fixed, generic only together with state, or nothing smaller)."""
    if program.sizes is None:
        return None
    bounded = [[str(d) for d in dims] for dims, _ in program.sizes.bounded]
    sets, sizes = [], []
    for dims in program.sizes.generic:
        n = dims[0].size
        if larger:  # a bounded set stays at its largest
            size = n if [str(d) for d in dims] in bounded else 2 * n
        else:
            size = (smaller(n) or [n])[0]
        if not any(d.state for d in dims) and size != n:
            sets.append(dims)
            sizes.append(size)
    if not sets:
        return None
    shapes = resized(program.trace, sets, sizes)
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
