"""Idiom patterns (see `render.rules.idioms`) for slices at traced positions, as people write them:
`lax.dynamic_slice_in_dim(x, i, 64, axis=1)` and `lax.dynamic_update_slice_in_dim(x, u, i, axis=1)`,
or `lax.dynamic_slice(x, (i, j), sizes)` where several starts move. jax wraps each negative
start (`select_n(i < 0, i, i + n)`) before the `dynamic_slice` or `dynamic_update_slice`; the
candidates take the starts before their wraps (or as they are, for starts jax does not wrap).
"""

from __future__ import annotations

from typing import Any

from jax.extend.core import Literal

from jaxside.render.rules._core import Graph, Pair, is_traced


def dynamic_slice(eqn: Any, graph: Graph) -> list[Pair]:
    """`lax.dynamic_slice_in_dim(x, i, 64, axis=1)`, `lax.dynamic_update_slice_in_dim(x, u, i, axis=1)`
    (`lax.dynamic_slice(x, (i, j), sizes)` where several starts move): the wraps of negative starts
    jax stages, and the slice."""
    update = eqn.primitive.name == "dynamic_update_slice"
    fixed = eqn.invars[:2] if update else eqn.invars[:1]
    starts = eqn.invars[len(fixed):]
    if not all(is_traced(v) for v in fixed):
        return []
    if not all(is_traced(s) or isinstance(s, Literal) for s in starts):
        return []
    candidates = []
    for unwrap in (True, False):
        operands = list(fixed)
        texts = []
        for start in starts:
            if isinstance(start, Literal):
                texts.append(repr(int(start.val)))
                continue
            raw = _unwrapped(start, graph) if unwrap else start
            if raw is None:
                break
            texts.append(f"_{len(operands)}")
            operands.append(raw)
        else:
            candidates.append((_code(eqn, update, texts), operands))
    return candidates


def _unwrapped(start: Any, graph: Graph) -> Any:
    """The start jax wrapped into `start` (`select_n(i < 0, i, i + n)`), or None."""
    wrap = graph.producer(start)
    if wrap is None or wrap.primitive.name != "select_n" or len(wrap.invars) != 3:
        return None
    return wrap.invars[1] if is_traced(wrap.invars[1]) else None


def _code(eqn: Any, update: bool, starts: list[str]) -> str:
    moving = [axis for axis, text in enumerate(starts) if text != "0"]
    head = "_0, _1" if update else "_0"
    if len(moving) == 1:
        (axis,) = moving
        if update:
            return f"lax.dynamic_update_slice_in_dim(_0, _1, {starts[axis]}, axis={axis})"
        size = eqn.params["slice_sizes"][axis]
        return f"lax.dynamic_slice_in_dim(_0, {starts[axis]}, {size}, axis={axis})"
    where = f"({', '.join(starts)}{',' if len(starts) == 1 else ''})"
    if update:
        return f"lax.dynamic_update_slice({head}, {where})"
    return f"lax.dynamic_slice({head}, {where}, {tuple(eqn.params['slice_sizes'])})"
