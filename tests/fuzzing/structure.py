"""Two jaxprs compared structurally: the same equations up to var names and independent order.

`jaxpr_difference` is the test `harness.check_structure` applies to a rendered equation
re-traced with `jax.make_jaxpr`: primitives, params, operand wiring and output types must match.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.extend.core import ClosedJaxpr, Jaxpr, Literal, Var

# Equations jax itself stages nothing for when they change nothing (an identity reshape,
# broadcast, transpose or convert): their rendering may be the operand itself.
IDENTITY_PRIMITIVES = frozenset(
    {"reshape", "broadcast_in_dim", "transpose", "convert_element_type", "squeeze"}
)



Values = tuple[dict, dict] | None
"""The values of the constants of two jaxprs compared (by var), when constants compare by value."""


def jaxpr_difference(
    a: Jaxpr, b: Jaxpr, where: str = "", elide: bool = False, values: Values = None
) -> str | None:
    """None if `b` is `a` up to var names (and `jit` names) and the order of independent
    equations (see `in_dataflow_order`); else where they first differ.

    With `elide`, an identity equation of `a` (see `IDENTITY_PRIMITIVES`) may be missing
    from `b`, its output standing for its operand. With `values` (the constants' values of
    `a`, of `b`), a constant `b` stages itself (an index list written where it is used) stands
    for any constant of `a` of the same bits, and is no input of `b`.
    """
    own = set(values[1]) if values else set()
    inputs_b = [v for v in [*b.constvars, *b.invars] if v not in own]
    if len(a.invars) + len(a.constvars) != len(inputs_b):
        return f"{where}: {len(a.constvars)}+{len(a.invars)} inputs vs {len(inputs_b)}"
    a, b = in_dataflow_order(a), in_dataflow_order(b)
    env: dict[Any, Any] = {}
    for x, y in zip([*a.constvars, *a.invars], inputs_b):
        if x.aval != y.aval:
            return f"{where}: input {x.aval} vs {y.aval}"
        env[x] = y
    position = 0
    for index, ea in enumerate(a.eqns):
        here = f"{where}/{index}:{ea.primitive.name}"
        eb = b.eqns[position] if position < len(b.eqns) else None
        problem = _eqn_difference(ea, eb, env, here, elide, values) if eb is not None else f"{here}: missing"
        if problem and elide and is_identity(ea):
            env[ea.outvars[0]] = env[ea.invars[0]]
            continue
        if problem:
            return problem
        env.update(zip(ea.outvars, eb.outvars))
        position += 1
    if position != len(b.eqns):
        extra = ", ".join(e.primitive.name for e in b.eqns[position:])
        return f"{where}: {len(b.eqns) - position} equations more than expected: {extra}"
    if len(a.outvars) != len(b.outvars):
        return f"{where}: {len(a.outvars)} outputs vs {len(b.outvars)}"
    for x, y in zip(a.outvars, b.outvars):
        problem = _atom_difference(x, y, env)
        if problem:
            return f"{where}: output {problem}"
    return None


def in_dataflow_order(jaxpr: Jaxpr) -> Jaxpr:
    """`jaxpr` with its equations in the order a walk from its outputs meets them (operands
    first, in order), the rest after in their own order: two jaxprs that compute the same
    values the same way, in different orders (an idiom stages its run together), compare equal."""
    made = {v: e for e in jaxpr.eqns for v in e.outvars if isinstance(v, Var)}
    order: list[Any] = []
    seen: set[int] = set()

    def visit(v: Any) -> None:
        eqn = made.get(v) if isinstance(v, Var) else None
        if eqn is None or id(eqn) in seen:
            return
        seen.add(id(eqn))
        for operand in eqn.invars:
            visit(operand)
        order.append(eqn)

    for v in jaxpr.outvars:
        visit(v)
    order += [e for e in jaxpr.eqns if id(e) not in seen]
    return jaxpr.replace(eqns=order)


def is_identity(eqn: Any) -> bool:
    """An equation that changes nothing: its one operand already has the output's type."""
    return (
        eqn.primitive.name in IDENTITY_PRIMITIVES and len(eqn.invars) == 1 and len(eqn.outvars) == 1
        and not isinstance(eqn.invars[0], Literal) and eqn.invars[0].aval == eqn.outvars[0].aval
    )


def _eqn_difference(
    ea: Any, eb: Any, env: dict[Any, Any], where: str, elide: bool = False, values: Values = None
) -> str | None:
    if ea.primitive != eb.primitive:
        return f"{where}: primitive {eb.primitive.name}"
    if len(ea.invars) != len(eb.invars):
        return f"{where}: {len(ea.invars)} operands vs {len(eb.invars)}"
    for i, (x, y) in enumerate(zip(ea.invars, eb.invars)):
        problem = _atom_difference(x, y, env, values)
        if problem:
            return f"{where}: operand {i}: {problem}"
    out_a, out_b = [v.aval for v in ea.outvars], [v.aval for v in eb.outvars]
    if out_a != out_b or [getattr(v, "weak_type", None) for v in out_a] != [
        getattr(v, "weak_type", None) for v in out_b
    ]:
        return f"{where}: outputs {out_a} vs {out_b}"
    if set(ea.params) != set(eb.params):
        return f"{where}: params {sorted(ea.params)} vs {sorted(eb.params)}"
    for key in ea.params:
        if key == "name" and ea.primitive.name in ("jit", "pjit"):
            continue  # the name of the function jax.jit wrapped: cosmetic
        if key in _RULE_PARAMS:
            # A custom derivative rule: a per-trace thunk, unequal across traces.  Compare the
            # function it belongs to by where it is defined (check_numbers compares JVPs too).
            if _source(ea.params["call_jaxpr"]) != _source(eb.params["call_jaxpr"]):
                return f"{where}: derivative rule of {_source(eb.params['call_jaxpr'])}"
            continue
        problem = _param_difference(ea.params[key], eb.params[key], f"{where}.{key}", elide)
        if problem:
            return problem
    return None


_RULE_PARAMS = frozenset({"jvp_jaxpr_fun", "fwd_jaxpr_thunk", "bwd", "out_trees"})


def _source(closed: Any) -> str | None:
    return getattr(getattr(closed.jaxpr, "debug_info", None), "func_src_info", None)


def _atom_difference(x: Any, y: Any, env: dict[Any, Any], values: Values = None) -> str | None:
    if isinstance(x, Literal) or isinstance(y, Literal):
        if not (isinstance(x, Literal) and isinstance(y, Literal)):
            return f"{x} vs {y}"
        dtype = x.aval.dtype
        if dtype != y.aval.dtype or not same_bits(np.asarray(x.val, dtype), np.asarray(y.val, dtype)):
            return f"literal {x}:{x.aval} vs {y}:{y.aval}"
        return None
    if values and x in values[0] and y in values[1]:
        same = same_bits(np.asarray(values[0][x]), np.asarray(values[1][y]))
        return None if same else f"constant {values[1][y]} for {values[0][x]}"
    if env.get(x) is not y:
        return f"wired to {y}, expected {env.get(x)}"
    return None


def _param_difference(a: Any, b: Any, where: str, elide: bool = False) -> str | None:
    if isinstance(a, ClosedJaxpr) and isinstance(b, ClosedJaxpr):
        if len(a.consts) != len(b.consts) or not all(
            same_bits(np.asarray(x), np.asarray(y)) for x, y in zip(a.consts, b.consts)
        ):
            return f"{where}: closed-over constants differ"
        return jaxpr_difference(a.jaxpr, b.jaxpr, where, elide)
    if isinstance(a, Jaxpr) and isinstance(b, Jaxpr):
        return jaxpr_difference(a, b, where, elide)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        if len(a) != len(b) or hasattr(a, "_fields") and type(a) is not type(b):
            return f"{where}: {a} vs {b}"
        for i, (x, y) in enumerate(zip(a, b)):
            problem = _param_difference(x, y, f"{where}[{i}]", elide)
            if problem:
                return problem
        return None
    if isinstance(a, (np.ndarray, jax.Array)):
        return None if same_bits(np.asarray(a), np.asarray(b)) else f"{where}: arrays differ"
    return None if _same_param(a, b) else f"{where}: {a!r} vs {b!r}"


def _same_param(a: Any, b: Any) -> bool:
    """Equal as params: numbers by value and kind (`np.int64(3)` is `3`), NaN equal to NaN,
    dtypes by what they mean (`jnp.float32` is `dtype('float32')`)."""
    numbers = (int, float, np.integer, np.floating)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, (bool, np.bool_)):
        if isinstance(a, (float, np.floating)) != isinstance(b, (float, np.floating)):
            return False
        return a == b or (a != a and b != b)
    if _dtype_like(a) and _dtype_like(b):
        return np.dtype(a) == np.dtype(b)
    return type(a) is type(b) and bool(a == b)


def _dtype_like(value: Any) -> bool:
    if isinstance(value, np.dtype):
        return True
    if isinstance(value, type):
        try:
            np.dtype(value)
        except TypeError:
            return False
        return True
    return False


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()
