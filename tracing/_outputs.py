"""What an entry returned, as plain containers: the structure the export returns and `--check` compares.

Torch code returns tensors in many kinds of objects: tuples and dicts, transformers'
`ModelOutput`s, dataclasses, `NamedTuple`s, and caches (`DynamicCache`) that keep tensors in
their attributes. `plain_output` rewrites any of them into tuples, lists and dicts only, the same way
for the traced run and for torch eager, so the exported function returns a JAX pytree with the
torch structure and names:

- a tuple stays a tuple (a one-tuple too), a list a list, a dict (a `ModelOutput`) a dict with
  the same keys (a `ModelOutput` leaves out its `None` fields, as its own ``keys()`` does);
- a dataclass or a `NamedTuple` becomes a dict of its fields, by name;
- any other object holding tensors (a cache) becomes a dict of the attributes that hold
  tensors: ``DynamicCache`` is ``{"layers": [{"keys": k, "values": v}, ...]}``;
- everything else (numbers, strings, None, configs) is a constant leaf.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterable
from typing import Any, cast

import torch

# Far deeper than any output holds its tensors (a cache's layers' keys are three levels down).
_DEPTH = 32


def plain_output(value: Any, leaf: Callable[[Any], Any] | None = None) -> Any:
    """`value` with every container and tensor-holding object rewritten as tuples, lists and dicts.

    `leaf` may replace a value before it is looked at (a lazy view by its tensor); it returns
    None to leave the value alone. Tensors and arrays are leaves, returned as they are.
    """
    return _plain(value, leaf, 0)


def _plain(value: Any, leaf: Callable[[Any], Any] | None, depth: int) -> Any:
    if leaf is not None:
        replaced = leaf(value)
        if replaced is not None:
            return replaced
    if _is_array(value) or depth > _DEPTH:
        return value
    deeper = depth + 1
    if isinstance(value, tuple) and hasattr(type(value), "_fields"):  # a NamedTuple
        fields: tuple[str, ...] = cast(Any, value)._fields
        return {name: _plain(item, leaf, deeper) for name, item in zip(fields, value)}
    if isinstance(value, tuple):
        return tuple(_plain(item, leaf, deeper) for item in value)
    if isinstance(value, list):
        return [_plain(item, leaf, deeper) for item in value]
    if isinstance(value, dict):  # a ModelOutput too: its keys are its fields that are set
        return {key: _plain(item, leaf, deeper) for key, item in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name), leaf, deeper) for f in dataclasses.fields(value)}
    if holds_tensor(value):
        return {
            name: _plain(item, leaf, deeper) for name, item in vars(value).items() if holds_tensor(item)
        }
    return value


def held_tensors(value: Any) -> list[tuple[tuple[Any, ...], torch.Tensor]]:
    """The tensors an object (a cache passed in) keeps, each with its path in `plain_output`'s
    layout: ``(("layers", 0, "keys"), k)`` for a `DynamicCache`."""
    found: list[tuple[tuple[Any, ...], torch.Tensor]] = []

    def walk(item: Any, path: tuple[Any, ...], depth: int) -> None:
        if isinstance(item, torch.Tensor):
            found.append((path, item))
        elif depth <= _DEPTH and holds_tensor(item):
            if isinstance(item, list):
                children: Iterable[tuple[Any, Any]] = enumerate(item)
            elif isinstance(item, dict):
                children = item.items()
            elif isinstance(item, tuple):
                return  # not replaceable in place: left out
            else:
                children = vars(item).items()
            for key, child in children:
                walk(child, (*path, key), depth + 1)

    walk(value, (), 0)
    return found


def with_tensors(value: Any, tensors: list[Any]) -> Any:
    """A copy of `value` with the tensors `held_tensors` found replaced by `tensors`, in order;
    `value` itself is left as it was (the code may update the copy in place)."""
    paths = [path for path, _ in held_tensors(value)]
    copied = copy.deepcopy(value)
    for path, tensor in zip(paths, tensors):
        owner = copied
        for key in path[:-1]:
            owner = owner[key] if isinstance(owner, (list, dict)) else vars(owner)[key]
        if isinstance(owner, (list, dict)):
            owner[path[-1]] = tensor
        else:
            vars(owner)[path[-1]] = tensor
    return copied


def _is_array(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    module = type(value).__module__ or ""
    return module.startswith(("jax", "numpy")) and hasattr(value, "shape") and hasattr(value, "dtype")


def holds_tensor(value: Any, seen: set[int] | None = None) -> bool:
    """Whether a tensor hides in an object's items or attributes, at any depth."""
    if isinstance(value, torch.Tensor):
        return True
    seen = set() if seen is None else seen
    if id(value) in seen or isinstance(value, (str, bytes, int, float, type, torch.nn.Module, type(None))):
        return False
    seen.add(id(value))
    if isinstance(value, dict):
        items: Iterable[Any] = value.values()
    elif isinstance(value, (list, tuple, set)):
        items = value
    else:
        items = getattr(value, "__dict__", {}).values()
    return any(holds_tensor(item, seen) for item in items)
