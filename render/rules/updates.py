"""Idiom patterns (see `render.rules.idioms`) for writes at basic indices: `x.at[:, 0].set(0.0)`,
`x.at[:, 1:3].set(v)`, `x.at[..., ::2, -1].add(v)`.

torch's `c[:, 0] = 0.0` and `d[:, 1:3] = v` (torchax's `index_put` / `copy_` on a `select` or
`slice` view) stage what jnp's `.at[...]` stages for integers and slices: constant start
indices (a `broadcast_in_dim` of a literal per indexed axis, an `iota * step + start` for a slice
with a step, `concatenate`d), the update broadcast to the window, and a `scatter` with mode
`FILL_OR_DROP`, sorted unique indices.  The pattern reads the start indices' values (they are
made from literals alone), puts them beside the scatter's dimension numbers and the update's
window sizes, and proposes the subscript they describe; `fuse` keeps it only when jnp's
`.at[subscript]` stages the very same equations, so the export re-traces to the same scatter
(same mode, same indices), bit for bit.  The subscript is written with the in-bounds start
jnp normalises to (`x.at[:, 3]` for torch's `x[:, -1]` on four columns).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from jax.extend.core import Literal

from jaxside.render.rules._core import Graph, Pair, is_traced

AT_METHODS = {"scatter": "set", "scatter-add": "add", "scatter_add": "add", "scatter-mul": "multiply",
              "scatter_mul": "multiply", "scatter-min": "min", "scatter_min": "min",
              "scatter-max": "max", "scatter_max": "max"}
"""The `.at[...]` method of each scatter primitive."""
_UPDATE_PREP = frozenset({"broadcast_in_dim", "reshape", "convert_element_type"})
# What jnp stages to make constant start indices from literals (and the program's constants).
_INDEX_MAKERS = frozenset({"broadcast_in_dim", "iota", "mul", "add", "concatenate", "reshape",
                           "convert_element_type"})
_MAKER_LIMIT = 16


def update_values(updates: Any, graph: Graph) -> Iterator[Any]:
    """The value a scatter writes, as given (`updates` itself first, then before jnp's broadcasts)."""
    seen = updates
    while True:
        if is_traced(seen):
            yield seen
        eqn = graph.producer(seen) if is_traced(seen) else None
        if eqn is None or eqn.primitive.name not in _UPDATE_PREP:
            return
        seen = eqn.invars[0]


def written_values(updates: Any, graph: Graph, slot: int) -> list[tuple[str, list[Any]]]:
    """How to write the value a scatter writes, each with its operands: the literal jnp broadcast
    (`0.0`, no operand) first, then `_slot` for `updates` itself or before jnp's broadcasts."""
    scalar = _scalar_written(updates, graph)
    written: list[tuple[str, list[Any]]] = [(scalar, [])] if scalar is not None else []
    return written + [(f"_{slot}", [v]) for v in update_values(updates, graph)]


def basic_update(eqn: Any, graph: Graph) -> list[Pair]:
    """`x.at[:, 0].set(0.0)`, `x.at[:, 1:3].set(v)`, `x.at[..., ::2].add(v)`: the constant start
    indices, the broadcast of `v` and the scatter (mode `FILL_OR_DROP`) jnp stages for an update
    at integers and slices (torch's `x[:, 0] = 0.0`)."""
    x, indices, updates = eqn.invars
    numbers = eqn.params["dimension_numbers"]
    if not is_traced(x) or numbers.operand_batching_dims or not numbers.scatter_dims_to_operand_dims:
        return []
    starts = _constant(indices, graph, [0])
    if starts is None:
        return []
    items = _items(tuple(x.aval.shape), numbers, starts, tuple(updates.aval.shape))
    if items is None:
        return []
    method = AT_METHODS[eqn.primitive.name]
    index = _subscript(items)
    values = written_values(updates, graph, 1)
    return [(f"_0.at[{index}].{method}({text})", [x, *value]) for text, value in values]


def _constant(var: Any, graph: Graph, budget: list[int]) -> np.ndarray | None:
    """The value of `var` when jnp made it from literals and constants alone (`broadcast_in_dim`,
    `iota`, `mul`, `add`, `concatenate`), else None."""
    if isinstance(var, Literal):
        return np.asarray(var.val)
    held = graph.constant(var)
    if held is not None:
        return np.asarray(held)
    maker = graph.producer(var)
    budget[0] += 1
    if maker is None or maker.primitive.name not in _INDEX_MAKERS or budget[0] > _MAKER_LIMIT:
        return None
    operands = [_constant(v, graph, budget) for v in maker.invars]
    if any(value is None for value in operands):
        return None
    try:
        value = np.asarray(maker.primitive.bind(*operands, **maker.params))
    except Exception:  # (params this evaluation does not take: no constant starts then)
        return None
    return value if value.dtype.kind in "iu" else None


def _items(shape: tuple[int, ...], numbers: Any, starts: Any, window: tuple[int, ...]) -> list[str] | None:
    """The subscript items (`0`, `1:3`, `::2`, `:`) a scatter at constant `starts` describes, or None
    when it is no basic indexing (a start out of bounds, a batch of windows, indices of no step)."""
    axes = list(numbers.scatter_dims_to_operand_dims)
    if starts.ndim < 1 or starts.shape[-1] != len(axes):
        return None
    columns = [_column(starts[..., c]) for c in range(len(axes))]
    claimed = sorted(column[1] for column in columns if column is not None and column[1] is not None)
    if any(column is None for column in columns) or claimed != list(range(starts.ndim - 1)):
        return None  # (each axis of the batch of starts is one strided axis: `x.at[::2, 1::2]`)
    sizes = dict(zip([d for d in range(len(shape)) if d not in numbers.inserted_window_dims],
                     [window[d] for d in numbers.update_window_dims]))
    items = []
    for d, n in enumerate(shape):
        inserted = d in numbers.inserted_window_dims
        if d not in axes:
            if inserted or sizes[d] != n:
                return None
            items.append(":")
            continue
        values, along = columns[axes.index(d)] or ([], None)
        item = _item(values, n, sizes.get(d), inserted, along is not None)
        if item is None:
            return None
        items.append(item)
    return items


def _column(column: Any) -> tuple[list[int], int | None] | None:
    """One component of the starts: `([3], None)` when it is the same everywhere, `([0, 2, 4], b)`
    when it moves along batch axis `b` alone (a strided slice), else None."""
    moving = [b for b in range(column.ndim) if column.shape[b] > 1 and (np.diff(column, axis=b) != 0).any()]
    if not moving:
        return ([int(column.flat[0])], None) if column.size else None
    if len(moving) > 1 or any(size == 1 for size in column.shape):
        return None
    (b,) = moving
    line = np.moveaxis(column, b, 0).reshape(column.shape[b], -1)[:, 0]
    return [int(v) for v in line], b


def _item(column: list[int], n: int, size: int | None, inserted: bool, strided: bool) -> str | None:
    """One axis's item: `0` (an integer), `1:3` (a window), `1::2` (an integer per step)."""
    start = column[0]
    if not strided and inserted:
        return str(start) if 0 <= start < n else None
    if not strided and size is not None:
        if not (0 <= start and start + size <= n):
            return None
        return _slice(start, start + size, 1, n)
    step = column[1] - column[0]
    if not inserted or step <= 0 or column != list(range(start, start + step * len(column), step)):
        return None
    if not (0 <= start and column[-1] < n):
        return None
    return _slice(start, column[-1] + 1, step, n)


def _slice(start: int, stop: int, step: int, n: int) -> str:
    """`a:b:s` with the defaults left out (`:`, `1:`, `::2`); `b` left out when the slice runs to the end."""
    ends = stop + step > n  # (no further element: the slice to the end takes the same ones)
    text = f"{start or ''}:{'' if ends else stop}"
    return f"{text}:{step}" if step != 1 else text


def _subscript(items: list[str]) -> str:
    """`:, 0` for the items, the trailing `:` left out; `..., 0` for two or more leading `:` when
    the last axis is indexed."""
    lead = next((k for k, item in enumerate(items) if item != ":"), 0)
    if lead >= 2 and items[-1] != ":":
        return ", ".join(["...", *items[lead:]])
    while len(items) > 1 and items[-1] == ":":
        items = items[:-1]
    return ", ".join(items)


def _scalar_written(updates: Any, graph: Graph) -> str | None:
    """`0.0` for an update that is a literal broadcast to the window (torch's `x[:, 0] = 0.0`)."""
    maker = graph.producer(updates) if is_traced(updates) else None
    if maker is None or maker.primitive.name != "broadcast_in_dim":
        return None
    (scalar,) = maker.invars
    if not isinstance(scalar, Literal) or np.ndim(scalar.val) != 0:
        return None
    value = np.asarray(scalar.val).item()
    if isinstance(value, float) and not np.isfinite(value):
        return f"float('{value}')"
    return repr(value)
