"""Evaluate two traces on real inputs, align their values and find where the port first diverges."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np

from jaxside.annotate.review.counterparts import TorchValues, choose, constant, fill_limit, following


@dataclass(eq=False)
class Constant:
    """A program output the jaxpr writes as a literal (Gemma 2's constant results): a value no
    equation produces. It stands in for the `Literal`, which is unhashable, and is its own key: two
    outputs of one literal are two values, never one looked up by identity."""

    literal: Any

    @property
    def aval(self) -> Any:
        return self.literal.aval


@dataclass
class Side:
    """One traced program, every value it computed, and its checkpoints (values leaving an expression)."""

    trace: Any
    values: dict[Any, np.ndarray]
    checkpoints: list[Any]
    producer: dict[Any, int]
    ancestors: dict[Any, frozenset[Any]] = field(default_factory=dict)
    outvars: list[Any] = field(default_factory=list)
    """The jaxpr's outvars, a `Constant` for each literal: the keys the program's results have here."""

    @property
    def outputs(self) -> list[tuple[str, Any]]:
        """`trace.outputs` by these keys: (path, var or `Constant`) per returned leaf."""
        return [(path, var) for (path, _), var in zip(self.trace.outputs, self.outvars)]

    @property
    def state(self) -> list[tuple[Any, Any]]:
        """`trace.state` by these keys: (update, var or `Constant`) per input updated in place."""
        return list(zip(self.trace.state, self.outvars[len(self.trace.outputs):]))


def is_literal(var: Any) -> bool:
    """A constant operand or result (a jaxpr `Literal`): no producer, unhashable, never a dict key."""
    return hasattr(var, "val")


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
    outvars = [Constant(v) if is_literal(v) else v for v in jaxpr.outvars]
    values.update({v: np.asarray(v.literal.val) for v in outvars if isinstance(v, Constant)})
    producer = {v: i for i, eqn in enumerate(jaxpr.eqns) for v in eqn.outvars}
    consumers: dict[Any, list[int]] = {}
    for i, eqn in enumerate(jaxpr.eqns):
        for var in eqn.invars:
            if hasattr(var, "aval") and not is_literal(var):
                consumers.setdefault(var, []).append(i)
    outs = set(outvars)
    checkpoints = []
    for i, eqn in enumerate(jaxpr.eqns):
        for var in eqn.outvars:
            if var not in values or not _numeric(values[var]):
                continue
            sites = {trace.eqn_sites[j] for j in consumers.get(var, [])}
            if var in outs or sites - {trace.eqn_sites[i]}:
                checkpoints.append(var)
    result = Side(trace, values, checkpoints, producer, outvars=outvars)
    result.ancestors = _ancestors(jaxpr)
    return result


def _numeric(value: np.ndarray) -> bool:
    return value.dtype.kind in "fc" and value.size > 0


def _ancestors(jaxpr: Any) -> dict[Any, frozenset[Any]]:
    """Every var -> the vars it was computed from (inputs included)."""
    seen: dict[Any, frozenset[Any]] = {v: frozenset() for v in jaxpr.invars}
    for eqn in jaxpr.eqns:
        reads = [v for v in eqn.invars if not is_literal(v)]
        above = frozenset(reads).union(*(seen.get(v, frozenset()) for v in reads))
        for var in eqn.outvars:
            seen[var] = above
    return seen


def _both_fill(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elements both sides fill alike: the same infinity, or huge values of one sign (torch's
    `finfo.min` where the port writes `-inf`, or `-1e10`): what a mask fills agrees whatever the value."""
    limit = min(fill_limit(a.dtype), fill_limit(b.dtype))
    with np.errstate(invalid="ignore"):
        return (np.abs(a) >= limit) & (np.abs(b) >= limit) & (np.sign(a) == np.sign(b))


def close(a: np.ndarray, b: np.ndarray, rtol: float, atol: float) -> bool:
    """Equal within tolerance, element by element in row-major order (a reshape is the same value);
    mask fills that agree (`_both_fill`) count as equal."""
    if a.size != b.size:
        return False
    a, b = a.reshape(-1), b.reshape(-1)
    fills = _both_fill(a, b)
    if fills.any():
        a, b = a[~fills], b[~fills]
    return bool(np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True))


def error(a: np.ndarray, b: np.ndarray) -> float:
    """The largest difference; NaN where one side has NaN and the other not (no distance says
    how far that is), none for NaN on both sides or mask fills that agree (`_both_fill`)."""
    a, b = a.reshape(-1), b.reshape(-1)
    if not a.size:
        return 0.0
    fills = _both_fill(a, b)  # at the arrays' own dtypes: a narrow float's fill is smaller
    a, b = a.astype(np.float64), b.astype(np.float64)
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    if np.any(nan_a != nan_b):
        return float("nan")
    with np.errstate(invalid="ignore"):
        diff = np.abs(a - b)
    same = (nan_a & nan_b) | fills
    return float(np.where(same, 0.0, diff).max())


def align(torch: Side, port: Side, inputs: dict[Any, Any], rtol: float, atol: float,
          uncompared: set[Any] = frozenset()) -> Alignment:
    """Pair each torch checkpoint with a port value: first one equal within tolerance (same size and
    dtype, compared in row-major order or with the port's axes reordered); failing that, the first
    unpaired port value of that shape (axes in any order) computed from the port partners of the
    torch value's nearest paired ancestors: that one is where the numbers part. `uncompared`:
    torch results the port does not return (a difference that agrees again before them is none).
    """
    partner: dict[Any, Any] = dict(inputs)
    used: set[Any] = set(inputs.values())
    port_order = {v: i for i, v in enumerate(port.checkpoints)}
    found: dict[Any, Pair] = {}
    uniform = _uniform_weights(torch, port, inputs)
    # Equal values first, all of them: a port value equal to a later torch value (a library call
    # such as `nnx.dot_product_attention` computing several torch lines at once) is that value's
    # partner, never the counterpart of the torch lines inside the call.
    for var in torch.checkpoints:
        value = torch.values[var]
        read = {p for t, p in uniform.items() if t in torch.ancestors[var]}
        equal = [p for p in port.checkpoints if _same_type(port.values[p], value)
                 and read <= port.ancestors[p] and _equal(value, port.values[p], rtol, atol)]
        fresh = [p for p in equal if p not in used]
        if equal and not fresh and constant(value):
            equal = []  # all one number, equal to a value paired already: no evidence; by ancestry
        if equal:
            fresh = fresh or equal
            chosen = min(fresh, key=port_order.__getitem__)
            partner[var] = chosen
            used.add(chosen)
            found[var] = Pair(var, chosen, _distance(value, port.values[chosen]), True)
    # Values that agree well inside the tolerance: a difference that agrees again only at its edge
    # (a misplaced epsilon, below the tolerance at first) is still carried on, not healed.
    agreed = [(var, pair.port_var) for var, pair in found.items()
              if pair.error is not None and pair.error <= (atol + rtol * _scale(torch.values[var])) / 10]
    agreed_vars = {var for var, _ in agreed}
    differing = {v for v in torch.outvars
                 if v in torch.values and v not in found and v not in uncompared}
    consumers: dict[Any, list[int]] = {}
    for i, eqn in enumerate(torch.trace.jaxpr.jaxpr.eqns):
        for read in eqn.invars:
            if not is_literal(read):
                consumers.setdefault(read, []).append(i)
    known = TorchValues(torch.values, lambda a, b: _equal(a, b, rtol, atol), rtol, atol)
    checkpoints = set(torch.checkpoints)
    for var in torch.checkpoints:
        if var in found:
            continue
        value = torch.values[var]
        anchors = {partner[a] for a in _anchors(var, torch, partner)}
        # Of that shape, or of its axes in another order (a port keeping queries as (batch, seq,
        # heads, head_dim) where torch has (batch, heads, seq, head_dim)).
        below = sorted(_below(port, value, anchors, used), key=port_order.__getitem__)
        if not below:  # a port that does not use an input torch uses here (positions for a mask it omits)
            below = sorted(_below(port, value, anchors - set(port.trace.jaxpr.jaxpr.invars), used),
                           key=port_order.__getitem__)
        before = sorted(anchors, key=lambda p: port_order.get(p, -1))
        counterpart = choose(var, torch, port, below, known, before, lambda v: following(
            v, torch.trace.jaxpr.jaxpr.eqns, consumers, checkpoints))
        # A counterpart both of whose sides flow into values that agree again, while no torch
        # result that differs comes of it but through those, is another quantity (torch's
        # `rsqrt(var + eps)` where the port divides by `sqrt(var + eps)`; the port's attention
        # weights where torch's fused attention has none), not a divergence: left uncompared.
        if counterpart is not None and any(var in torch.ancestors[t] and counterpart in port.ancestors[q]
                                           for t, q in agreed) and not _reaches(
                var, differing, agreed_vars, torch.trace.jaxpr.jaxpr.eqns, consumers):
            counterpart = None
        err = _distance(value, port.values[counterpart]) if counterpart is not None else None
        found[var] = Pair(var, counterpart, err, False)
    pairs = [found[var] for var in torch.checkpoints]
    first = next((p for p in pairs if p.port_var is not None and not p.close), None)
    unmatched = [p for p in port.checkpoints if p not in used]
    return Alignment(pairs, first, unmatched)


def _below(port: Side, value: np.ndarray, anchors: set[Any], used: set[Any]) -> list[Any]:
    """Unpaired port values of `value`'s shape (axes in any order) computed from all of `anchors`."""
    return [p for p in port.checkpoints if p not in used and anchors and anchors <= port.ancestors[p]
            and _same_type(port.values[p], value) and _orders(port.values[p].shape, value.shape)]


def _uniform_weights(torch: Side, port: Side, inputs: dict[Any, Any]) -> dict[Any, Any]:
    """Torch weights of one number throughout (a LayerNorm's ones and zeros as initialised) -> their
    port partners. Such a weight can make its step no step (`x * 1 + 0` is `x`): a port value equal
    to a torch value computed from one, but not computed from its partner, is equal by its grace
    (the port's value before the step, where the port's step itself may be wrong), no evidence."""
    weights = {item.var for item in torch.trace.inputs if item.kind != "arg"}
    # A partner the port reads but computes nothing from (a zeroed cache it holds, never written)
    # has no step of its own to check: the port's values come without it, by no grace.
    used = frozenset().union(*(port.ancestors.get(v, frozenset()) for v in port.outvars))
    return {t: p for t, p in inputs.items()
            if t in weights and t in torch.values and constant(torch.values[t]) and p in used}


def _reaches(start: Any, targets: set[Any], through: set[Any], eqns: Any,
             consumers: dict[Any, list[int]]) -> bool:
    """Whether a value computed from `start` without passing a value of `through` is in `targets`."""
    stack, seen = [start], {start}
    while stack:
        for index in consumers.get(stack.pop(), ()):
            for out in eqns[index].outvars:
                if out in targets:
                    return True
                if out not in seen and out not in through:
                    seen.add(out)
                    stack.append(out)
    return False


def _equal(value: np.ndarray, theirs: np.ndarray, rtol: float, atol: float) -> bool:
    """Equal in row-major order, or with the port's axes in torch's order."""
    if close(value, theirs, rtol, atol):
        return True
    return theirs.shape != value.shape and any(
        close(value, np.transpose(theirs, axes), rtol, atol) for axes in _orders(theirs.shape, value.shape))


def _scale(value: np.ndarray) -> float:
    finite = np.abs(value[np.isfinite(value)]) if value.dtype.kind in "fc" else np.abs(value)
    return float(finite.max()) if finite.size else 0.0


def _distance(value: np.ndarray, theirs: np.ndarray) -> float:
    """The max error in row-major order or, the port's axes in torch's order, the least of those."""
    found = [error(value, np.transpose(theirs, axes)) for axes in _orders(theirs.shape, value.shape)]
    return min([error(value, theirs), *found])


def _orders(shape: tuple[int, ...], target: tuple[int, ...]) -> list[tuple[int, ...]]:
    """The orders of `shape`'s axes that make it `target` (the identity first), up to 5 axes."""
    if shape == target:
        return [tuple(range(len(shape)))]
    if len(shape) != len(target) or len(shape) > 5 or sorted(shape) != sorted(target):
        return []
    return [order for order in itertools.permutations(range(len(shape)))
            if all(shape[axis] == size for axis, size in zip(order, target))]


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
            if not is_literal(read) and read not in seen:
                seen.add(read)
                stack.append(read)
    return found
