"""Evaluate two traces on real inputs, align their values and find where the port first diverges."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np


@dataclass
class Side:
    """One traced program, every value it computed, and its checkpoints (values leaving an expression)."""

    trace: Any
    values: dict[Any, np.ndarray]
    checkpoints: list[Any]
    producer: dict[Any, int]
    ancestors: dict[Any, frozenset[Any]] = field(default_factory=dict)


@dataclass
class Pair:
    torch_var: Any
    port_var: Any | None
    error: float | None
    """Max abs difference, None when nothing on the port side lines up."""
    close: bool


@dataclass
class Alignment:
    pairs: list[Pair]
    first: Pair | None
    """The first torch value whose port counterpart exists and differs."""
    unmatched_port: list[Any]


def evaluate(closed: Any, args: list[Any]) -> dict[Any, np.ndarray]:
    """Run a ClosedJaxpr equation by equation, keeping every intermediate value."""
    from jax.extend.core import DropVar, Literal

    jaxpr = closed.jaxpr
    env: dict[Any, Any] = dict(zip(jaxpr.constvars, closed.consts))
    env.update(zip(jaxpr.invars, args))

    def read(var: Any) -> Any:
        return var.val if isinstance(var, Literal) else env[var]

    for eqn in jaxpr.eqns:
        bound = eqn.primitive.get_bind_params(eqn.params)
        # JAX 0.10 returns the params alone; older releases (subfuns, params).
        subfuns, params = bound if isinstance(bound, tuple) else ((), bound)
        out = eqn.primitive.bind(*subfuns, *map(read, eqn.invars), **params)
        outs = out if eqn.primitive.multiple_results else [out]
        for var, value in zip(eqn.outvars, outs):
            if not isinstance(var, DropVar):
                env[var] = value
    # Random keys (torchax threads one through every capture) are not values a port computes.
    return {
        var: np.asarray(value)
        for var, value in env.items()
        if not jax.dtypes.issubdtype(getattr(value, "dtype", np.float32), jax.dtypes.prng_key)
    }


def side(trace: Any, args: list[Any]) -> Side:
    """Values, and the checkpoints: results of an expression used by another one (or returned)."""
    jaxpr = trace.jaxpr.jaxpr
    values = evaluate(trace.jaxpr, args)
    producer = {v: i for i, eqn in enumerate(jaxpr.eqns) for v in eqn.outvars}
    consumers: dict[Any, list[int]] = {}
    for i, eqn in enumerate(jaxpr.eqns):
        for var in eqn.invars:
            if hasattr(var, "aval") and not hasattr(var, "val"):
                consumers.setdefault(var, []).append(i)
    outs = {v for v in jaxpr.outvars if not hasattr(v, "val")}
    checkpoints = []
    for i, eqn in enumerate(jaxpr.eqns):
        for var in eqn.outvars:
            if var not in values or not _numeric(values[var]):
                continue
            sites = {trace.eqn_sites[j] for j in consumers.get(var, [])}
            if var in outs or sites - {trace.eqn_sites[i]}:
                checkpoints.append(var)
    result = Side(trace, values, checkpoints, producer)
    result.ancestors = _ancestors(jaxpr)
    return result


def _numeric(value: np.ndarray) -> bool:
    return value.dtype.kind in "fc" and value.size > 0


def _ancestors(jaxpr: Any) -> dict[Any, frozenset[Any]]:
    """Every var -> the vars it was computed from (inputs included)."""
    seen: dict[Any, frozenset[Any]] = {v: frozenset() for v in jaxpr.invars}
    for eqn in jaxpr.eqns:
        reads = [v for v in eqn.invars if not hasattr(v, "val")]
        above = frozenset(reads).union(*(seen.get(v, frozenset()) for v in reads))
        for var in eqn.outvars:
            seen[var] = above
    return seen


def close(a: np.ndarray, b: np.ndarray, rtol: float, atol: float) -> bool:
    """Equal within tolerance, element by element in row-major order (a reshape is the same value)."""
    return a.size == b.size and bool(np.allclose(a.reshape(-1), b.reshape(-1), rtol=rtol, atol=atol,
                                                 equal_nan=True))


def error(a: np.ndarray, b: np.ndarray) -> float:
    """The largest difference; NaN where one side has NaN and the other not (no distance says
    how far that is), none for NaN on both sides or one infinity on both."""
    a, b = a.reshape(-1).astype(np.float64), b.reshape(-1).astype(np.float64)
    if not a.size:
        return 0.0
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    if np.any(nan_a != nan_b):
        return float("nan")
    with np.errstate(invalid="ignore"):
        diff = np.abs(a - b)
    same = (nan_a & nan_b) | (np.isinf(a) & np.isinf(b) & (np.sign(a) == np.sign(b)))
    return float(np.where(same, 0.0, diff).max())


def align(torch: Side, port: Side, inputs: dict[Any, Any], rtol: float, atol: float) -> Alignment:
    """Pair each torch checkpoint with a port value: first one equal within tolerance (same size and
    dtype, compared in row-major order); failing that, the first unpaired port value of that shape
    computed from the port
    partners of the torch value's nearest paired ancestors: that one is where the numbers part."""
    partner: dict[Any, Any] = dict(inputs)
    used: set[Any] = set(inputs.values())
    port_order = {v: i for i, v in enumerate(port.checkpoints)}
    pairs: list[Pair] = []
    for var in torch.checkpoints:
        value = torch.values[var]
        same = [p for p in port.checkpoints if _same_type(port.values[p], value)]
        equal = [p for p in same if close(value, port.values[p], rtol, atol)]
        if equal:
            fresh = [p for p in equal if p not in used] or equal
            chosen = min(fresh, key=port_order.__getitem__)
            partner[var] = chosen
            used.add(chosen)
            pairs.append(Pair(var, chosen, error(value, port.values[chosen]), True))
            continue
        anchors = {partner[a] for a in _anchors(var, torch, partner)}
        below = [p for p in same if p not in used and anchors and anchors <= port.ancestors[p]
                 and port.values[p].shape == value.shape]
        counterpart = min(below, key=port_order.__getitem__) if below else None
        err = error(value, port.values[counterpart]) if counterpart is not None else None
        pairs.append(Pair(var, counterpart, err, False))
    first = next((p for p in pairs if p.port_var is not None and not p.close), None)
    unmatched = [p for p in port.checkpoints if p not in used]
    return Alignment(pairs, first, unmatched)


def _same_type(a: np.ndarray, b: np.ndarray) -> bool:
    """Comparable: as many elements of one dtype (the port may keep a value in another shape,
    `(batch, seq, heads, head_dim)` for torch's `(batch, seq, heads * head_dim)`)."""
    return a.size == b.size and a.dtype == b.dtype


def _anchors(var: Any, torch: Side, partner: dict[Any, Any]) -> set[Any]:
    """The nearest ancestors of `var` that have a port partner."""
    found: set[Any] = set()
    stack = [var]
    seen = {var}
    eqns = torch.trace.jaxpr.jaxpr.eqns
    while stack:
        current = stack.pop()
        if current is not var and current in partner:
            found.add(current)
            continue
        index = torch.producer.get(current)
        if index is None:
            continue
        for read in eqns[index].invars:
            if not hasattr(read, "val") and read not in seen:
                seen.add(read)
                stack.append(read)
    return found
