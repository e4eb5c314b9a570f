"""Idioms of masks: torch's decomposition of `x.tril(k)` and `x.triu(k)` written `jnp.tril(x, k)`.

torchax has no lowering of its own for `aten.tril`, so torch decomposes it (`torch._refs.tril`)
into a mask of `arange(S) - arange(L)[:, None] <= k` (`>= k` for `triu`) kept by
`torch.where(mask, x, 0)`, or `mask & x` for booleans (the causal mask of `torch.ones(L, S,
dtype=torch.bool).tril()`).  jnp binds other equations for `jnp.tril(x, k)` (`i + k >= j` on two
2-d iotas and a select of zero), so the form is a rewrite (`triangular_mask`), proven bitwise by
`tests/fuzzing/rewrites.py`.  The pattern `triangle` is registered in `idioms.PATTERNS`.
"""

from __future__ import annotations

from typing import Any

from jax.extend.core import Literal

from jaxside.render.rules._core import Candidate, Graph, Proposal, aval_of, is_traced

_SIDES = {"le": "tril", "ge": "triu"}
_BOUND = 2**30
"""`|k|`, `L` and `S` below this: neither `j - i` nor jnp's `i + k` overflows int32."""


def triangle(eqn: Any, graph: Graph) -> list[Proposal]:
    """`jnp.tril(x, k)` (`jnp.triu`) for the mask torch decomposes `x.tril(k)` into, kept by a
    `jnp.where(mask, x, 0)` or, for booleans, `mask & x` (the rewrite `triangular_mask`)."""
    name = eqn.primitive.name
    if name == "jit":
        if eqn.params.get("name") != "_where" or len(eqn.invars) != 3:
            return []
        mask, x, zero = eqn.invars
        if not isinstance(zero, Literal) or zero.val != 0 or not is_traced(x):
            return []
        keep = "jnp.where({mask}, _0, 0)"
    elif name == "and" and all(is_traced(v) for v in eqn.invars):
        first = _mask_of(eqn.invars[0], graph) is not None
        mask, x = eqn.invars if first else eqn.invars[::-1]
        keep = "jnp.logical_and({mask}, _0)" if first else "jnp.logical_and(_0, {mask})"
    else:
        return []
    found = _mask_of(mask, graph)
    out = eqn.outvars[0].aval
    if found is None or x.aval.ndim < 2 or (out.shape, out.dtype) != (x.aval.shape, x.aval.dtype):
        return []  # (`jnp.tril` keeps `x`'s shape and dtype)
    compare, k = found
    rows, cols = x.aval.shape[-2:]
    if max(abs(k), rows, cols) >= _BOUND:
        return []
    sub = graph.producer(compare.invars[0])
    ends = [_iota_of(v, graph) for v in sub.invars]
    subtrahend = graph.producer(sub.invars[1]) if is_traced(sub.invars[1]) else None
    scaled = subtrahend is not None and subtrahend.primitive.name == "mul"
    times = " * 1" if scaled else ""  # (torchax's `a - b * alpha`)
    op = "<=" if compare.primitive.name == "le" else ">="
    if ends[0] is not None and ends[0] is ends[1]:  # one `arange` for both (a square mask)
        arange = f"jnp.arange({rows}, dtype=jnp.int32)"
        mask_code = f"(lambda r: r[None, :] - r[:, None]{times} {op} {k})({arange})"
    else:
        mask_code = (f"jnp.arange({cols}, dtype=jnp.int32)[None, :] - "
                     f"jnp.arange({rows}, dtype=jnp.int32)[:, None]{times} {op} {k}")
    side = _SIDES[compare.primitive.name]
    writes = f"jnp.{side}(_0, {k})" if k else f"jnp.{side}(_0)"
    return [Candidate(keep.format(mask=mask_code), [x], writes, "triangular_mask")]


def _mask_of(value: Any, graph: Graph) -> tuple[Any, int] | None:
    """The comparison making `value` (through a broadcast that adds leading axes) of a
    difference with an integer literal `k`, and `k`; None for any other value."""
    made = graph.producer(value) if is_traced(value) else None
    if made is not None and made.primitive.name == "broadcast_in_dim" and is_traced(made.invars[0]):
        made = graph.producer(made.invars[0])
    if made is None or made.primitive.name not in _SIDES:
        return None
    difference, k = made.invars
    sub = graph.producer(difference) if is_traced(difference) else None
    if sub is None or sub.primitive.name != "sub" or not isinstance(k, Literal):
        return None
    if aval_of(k).dtype.kind != "i":
        return None
    return made, int(k.val)


def _iota_of(value: Any, graph: Graph) -> Any:
    """The iota behind a side of the difference (a broadcast of it, maybe times one), or None."""
    made = graph.producer(value) if is_traced(value) else None
    if made is not None and made.primitive.name == "mul" and is_traced(made.invars[0]):
        made = graph.producer(made.invars[0])
    if made is None or made.primitive.name != "broadcast_in_dim" or not is_traced(made.invars[0]):
        return None
    return graph.producer(made.invars[0])
