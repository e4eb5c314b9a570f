"""Shape primitives: broadcasts, reshapes, transposes, slices and indexing, gathers and scatters, `iota`."""

from __future__ import annotations

import ast
from collections.abc import Sequence
from typing import Any

import numpy as np
from jax.extend.core import Literal

from jaxside.render.rules._core import (
    Rule,
    aval_of,
    call,
    dtype_expr,
    exact,
    is_traced,
    kw,
    literal,
    non_default,
    number_literal,
    promotes_to_itself,
    registrar,
    rewritten,
    scalar,
)
from jaxside.render.rules.emitter import Emitter

RULES: dict[str, Rule] = {}
rule = registrar(RULES)


@rule("broadcast_in_dim")
def _broadcast_in_dim(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    params = eqn.params
    shape, dims = tuple(params["shape"]), tuple(params["broadcast_dimensions"])
    x = eqn.invars[0]
    if params.get("sharding") is not None or len(eqn.invars) != 1:
        return exact(eqn, args, emitter)
    in_shape = tuple(x.aval.shape)
    if isinstance(x, Literal) and not aval_of(x).weak_type and not dims:
        return _full(shape, x)
    if is_traced(x) and in_shape == shape and dims == tuple(range(len(shape))):
        return args[0]  # jax binds nothing for an identity broadcast
    if is_traced(x) and in_shape and len(shape) > len(in_shape) and all(
        shape[d] == n for d, n in zip(dims, in_shape)
    ) and dims == tuple(sorted(dims)) and all(shape[d] == 1 for d in range(len(shape)) if d not in dims):
        return new_axes(args[0], shape, dims)
    if is_traced(x) and dims == tuple(range(len(shape) - len(in_shape), len(shape))) and all(
        n in (1, m) for n, m in zip(in_shape, shape[len(shape) - len(in_shape):])
    ):  # numpy broadcasting: size-1 axes stretched, new axes in front
        return call("jnp.broadcast_to", [args[0], literal(shape)])
    return call("lax.broadcast_in_dim", [args[0], literal(shape), literal(dims)])


def _full(shape: tuple[int, ...], value: Any) -> ast.expr:
    """`jnp.zeros(shape, dtype)`, `jnp.ones(...)` (all False, all True for booleans, as torch's
    `torch.ones(L, S, dtype=torch.bool)`) or `jnp.full(shape, value, dtype)` for a typed scalar."""
    dtype = np.dtype(value.aval.dtype)
    number = np.asarray(value.val, dtype)
    if number == 0 and (dtype == np.bool_ or not np.signbit(number)):
        return call("jnp.zeros", [literal(shape), dtype_expr(dtype)])
    if number == 1:
        return call("jnp.ones", [literal(shape), dtype_expr(dtype)])
    return call("jnp.full", [literal(shape), scalar(number, dtype), dtype_expr(dtype)])


def new_axes(x: ast.expr, shape: tuple[int, ...], dims: tuple[int, ...]) -> ast.expr:
    """`x[None]`, `x[:, None]`, `x[..., None]`: size-1 axes inserted where `dims` skips."""
    items: list[ast.expr] = [ast.Slice() if d in dims else ast.Constant(None) for d in range(len(shape))]
    trailing = 0
    while items and _is_full(items[-1]):
        items.pop()
        trailing += 1
    leading = 0
    while leading < len(items) and _is_full(items[leading]):
        leading += 1
    if not trailing and leading >= 2:
        items = [ast.Constant(Ellipsis), *items[leading:]]
    index = items[0] if len(items) == 1 else ast.Tuple(items, ast.Load())
    return ast.Subscript(x, index, ast.Load())


@rule("reshape")
def _reshape(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    params = eqn.params
    if params.get("sharding") is not None or len(eqn.invars) != 1:
        return exact(eqn, args, emitter)
    new_sizes = tuple(params["new_sizes"])
    if params.get("dimensions") is not None:
        return call("lax.reshape", [args[0], literal(new_sizes), literal(tuple(params["dimensions"]))])
    kept = inserted_axes(tuple(eqn.invars[0].aval.shape), new_sizes) if is_traced(eqn.invars[0]) else None
    if kept is not None:  # `v[None, :, None, None]`: a reshape that only adds axes of size one
        return rewritten("unit_axes", new_axes(args[0], new_sizes, kept), emitter)
    return call("jnp.reshape", [args[0], literal(new_sizes)])


def inserted_axes(shape: tuple[int, ...], new_sizes: tuple[int, ...]) -> tuple[int, ...] | None:
    """Where `shape`'s axes are among `new_sizes` when the reshape only inserts axes of size one
    (`(16,)` to `(1, 16, 1, 1)`: `(1,)`); None for any other reshape."""
    if len(new_sizes) <= len(shape):
        return None
    kept: list[int] = []
    for d, n in enumerate(new_sizes):
        if len(kept) < len(shape) and n == shape[len(kept)]:
            kept.append(d)
        elif n != 1:
            return None
    return tuple(kept) if len(kept) == len(shape) else None


@rule("squeeze")
def _squeeze(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    dims = tuple(eqn.params["dimensions"])
    axis = number_literal(dims[0]) if len(dims) == 1 else literal(dims)
    return call("jnp.squeeze", [args[0]], [ast.keyword("axis", axis)])


@rule("transpose")
def _transpose(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    perm = tuple(eqn.params["permutation"])
    if perm == (1, 0):
        return ast.Attribute(args[0], "T", ast.Load())
    if len(perm) > 2 and perm == (*range(len(perm) - 2), len(perm) - 1, len(perm) - 2):
        return ast.Attribute(args[0], "mT", ast.Load())  # the last two axes swapped
    if perm == tuple(range(len(perm))):
        return args[0]  # jax binds nothing for an identity permutation
    return call("jnp.transpose", [args[0], literal(perm)])


@rule("rev")
def _rev(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    return call("lax.rev", [args[0], literal(tuple(eqn.params["dimensions"]))])


@rule("pad")
def _pad(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    config = tuple(tuple(c) for c in eqn.params["padding_config"])
    return call("lax.pad", [args[0], args[1], literal(config)])


@rule("concatenate")
def _concatenate(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    dimension = eqn.params["dimension"]
    if all(is_traced(v) for v in eqn.invars) and promotes_to_itself(eqn):
        return call("jnp.concatenate", [ast.List(list(args), ast.Load())], [kw("axis", dimension)])
    return call("lax.concatenate", [ast.List(list(args), ast.Load()), number_literal(dimension)])


@rule("split")
def _split(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    parts = split_parts(args[0], tuple(eqn.params["sizes"]), eqn.params["axis"])
    if len(eqn.outvars) == 1:
        return ast.Subscript(parts, ast.Constant(0), ast.Load())
    return parts


def split_parts(x: ast.expr, sizes: tuple[int, ...], axis: int) -> ast.expr:
    """`jnp.split(x, 3, axis=2)` for equal parts, else `jnp.split(x, [64, 96], axis=2)` (where
    each part but the last ends): one `split` of these sizes."""
    ends = [int(n) for n in np.cumsum(sizes)[:-1]]
    at = number_literal(len(sizes)) if len(set(sizes)) == 1 else literal(ends)
    return call("jnp.split", [x, at], [kw("axis", axis)])


@rule("stack")
def _stack(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    # `jnp.stack` binds the one primitive when no operand needs converting (one dtype, one weak type).
    exact_jnp = all(is_traced(v) for v in eqn.invars) and promotes_to_itself(eqn)
    fn = "jnp.stack" if exact_jnp else "lax.stack"
    return call(fn, [ast.List(list(args), ast.Load())], [kw("axis", eqn.params["axis"])])


@rule("unstack")
def _unstack(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    parts = call("lax.unstack", args, [kw("axis", eqn.params["axis"])])
    if len(eqn.outvars) == 1:
        return ast.Subscript(parts, ast.Constant(0), ast.Load())
    return parts


@rule("tile")
def _tile(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    reps = tuple(eqn.params["reps"])
    tiled = len(reps) == eqn.invars[0].aval.ndim  # (`jnp.tile` binds the one `tile` for such reps)
    return call("jnp.tile" if tiled else "lax.tile", [args[0], literal(reps)])


@rule("slice")
def _slice(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    params = eqn.params
    start, limit = tuple(params["start_indices"]), tuple(params["limit_indices"])
    strides = params["strides"]
    x = eqn.invars[0]
    # `x[a:b]` binds strides=None when every step is 1, the steps themselves otherwise.
    steps = tuple(strides) if strides is not None else (1,) * len(start)
    basic = (strides is None) == all(s == 1 for s in steps)
    if basic and is_traced(x) and _slice_is_basic(tuple(x.aval.shape), start, limit, steps):
        return ast.Subscript(args[0], _slice_index(x.aval.shape, start, limit, steps), ast.Load())
    keywords = [kw("strides", tuple(strides))] if strides is not None else []
    return call("lax.slice", [args[0], literal(start), literal(limit)], keywords)


def _slice_is_basic(
    shape: tuple[int, ...], start: tuple[Any, ...], limit: tuple[Any, ...], steps: tuple[Any, ...]
) -> bool:
    """Whether `x[a:b:s, ...]` binds exactly this `slice`: jnp normalises the limit to the last
    element taken plus one, and binds nothing for a slice that takes everything."""
    for n, a, b, s in zip(shape, start, limit, steps):
        count = -(-(b - a) // s)
        if not 0 <= a < b <= n or count <= 0:
            return False
        if s != 1 and b != a + (count - 1) * s + 1:
            return False
    return any(a != 0 or b != n or s != 1 for n, a, b, s in zip(shape, start, limit, steps))


def _slice_index(
    shape: Sequence[int], start: tuple[Any, ...], limit: tuple[Any, ...], steps: tuple[Any, ...]
) -> ast.expr:
    items: list[ast.expr] = []
    for n, a, b, s in zip(shape, start, limit, steps):
        items.append(ast.Slice(
            number_literal(a) if a else None,
            number_literal(b) if b != n else None,
            number_literal(s) if s != 1 else None,
        ))
    while len(items) > 1 and _is_full(items[-1]):
        items.pop()
    return items[0] if len(items) == 1 else ast.Tuple(items, ast.Load())


def _is_full(item: ast.expr) -> bool:
    return isinstance(item, ast.Slice) and item.lower is None and item.upper is None and item.step is None


@rule("dynamic_slice")
def _dynamic_slice(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    sizes = literal(tuple(eqn.params["slice_sizes"]))
    indices = ast.Tuple(list(args[1:]), ast.Load())
    return call("lax.dynamic_slice", [args[0], indices, sizes], [kw("allow_negative_indices", False)])


@rule("dynamic_update_slice")
def _dynamic_update_slice(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    indices = ast.Tuple(list(args[2:]), ast.Load())
    keywords = [kw("allow_negative_indices", False)]
    return call("lax.dynamic_update_slice", [args[0], args[1], indices], keywords)


@rule("gather")
def _gather(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    p = eqn.params
    keywords = [
        kw("dimension_numbers", p["dimension_numbers"], emitter),
        kw("slice_sizes", tuple(p["slice_sizes"])),
        *non_default(p, {"indices_are_sorted": False, "unique_indices": False}),
        kw("mode", p["mode"], emitter),
        *non_default(p, {"fill_value": None}),
    ]
    return call("lax.gather", args, keywords)


_SCATTERS = {
    "scatter": "scatter", "scatter-add": "scatter_add", "scatter_add": "scatter_add",
    "scatter-sub": "scatter_sub", "scatter_sub": "scatter_sub", "scatter-mul": "scatter_mul",
    "scatter_mul": "scatter_mul", "scatter-min": "scatter_min", "scatter_min": "scatter_min",
    "scatter-max": "scatter_max", "scatter_max": "scatter_max",
}


@rule(*_SCATTERS)
def _scatter(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    p = eqn.params
    keywords = [
        *non_default(p, {"indices_are_sorted": False, "unique_indices": False}),
        kw("mode", p["mode"], emitter),
    ]
    fn = f"lax.{_SCATTERS[eqn.primitive.name]}"
    return call(fn, [*args, literal(p["dimension_numbers"], emitter)], keywords)


@rule("iota")
def _iota(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    p = eqn.params
    if p.get("sharding") is not None:
        return exact(eqn, args, emitter)
    shape = tuple(p["shape"])
    dtype = dtype_expr(p["dtype"])
    if len(shape) == 1:  # `jnp.arange` binds this very iota for an integer or float dtype
        if np.dtype(p["dtype"]).kind in "iuf":
            return call("jnp.arange", [number_literal(shape[0])], [ast.keyword("dtype", dtype)])
        return call("lax.iota", [dtype, number_literal(shape[0])])
    return call("lax.broadcasted_iota", [dtype, literal(shape), number_literal(p["dimension"])])
