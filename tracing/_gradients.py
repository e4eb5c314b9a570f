"""The backward pass of a gradient program: which forward value each backward value is the gradient of.

JAX keeps each equation's source through transposition, so a backward equation points at the
forward expression it differentiates; `gradients` reads that. Also the JVP rules of the
`jax.custom_jvp` functions a program calls, which an export writes beside them.
"""

from __future__ import annotations

from typing import Any

from jaxside.tracing import _internals
from jaxside.tracing._jaxprs import is_backward, walk
from jaxside.tracing.trace import Call, Origin, Site


def gradients(
    top: Any, eqn_sites: list[Site | None], eqn_calls: list[Call], origins: dict[Any, Origin]
) -> tuple[dict[Any, Any], dict[Any, Any]]:
    """Each value a backward pass made -> the forward value it is the gradient of (None if unsure);
    and each forward value only the backward pass reads -> the value its expression computes.

    JAX keeps each equation's source through transposition: the backward of ``jnp.sin(x)``
    points at ``jnp.sin(x)`` still, and what it computes is the gradient of one of that
    expression's operands: the one of its type that the backward equation does not itself
    read (``d(a * b)/da`` reads ``b``). A step the backward of an expression takes on the way
    (read only by more of that expression's backward) is the gradient of nothing named: None.

    `top` is the program's jaxpr; `eqn_sites`, `eqn_calls` and `origins` are the `Trace`'s.
    """
    forward: dict[Site, list[tuple[int, Any]]] = {}
    scopes: dict[int, tuple[Any, list[tuple[Any, Site | None, bool]]]] = {id(top): (top, [])}
    instance: dict[int, int] = {}  # equation -> the call (or sub-jaxpr) it ran in
    for index, eqn in enumerate(top.eqns):
        stack = _internals.name_stack(eqn)
        scopes[id(top)][1].append((eqn, eqn_sites[index], is_backward(stack)))
        instance[id(eqn)] = id(eqn_calls[index])
        inner_eqns = (item for sub in _internals.sub_jaxprs(eqn) for item in walk(sub, stack))
        for inner_eqn, scope, inner_stack in inner_eqns:
            origin = next((origins[v] for v in inner_eqn.outvars if v in origins), None)
            entry = (inner_eqn, origin.site if origin is not None else None, is_backward(inner_stack))
            scopes.setdefault(id(scope), (scope, []))[1].append(entry)
            instance[id(inner_eqn)] = id(scope)
    for _jaxpr, entries in scopes.values():
        for eqn, site, backward in entries:
            if not backward and site is not None:
                forward.setdefault(site, []).append((instance[id(eqn)], eqn))
    result: dict[Any, Any] = {}
    factors: dict[Any, Any] = {}
    for jaxpr, entries in scopes.values():
        readers: dict[Any, list[tuple[Site | None, bool]]] = {}
        for eqn, site, backward in entries:
            for v in eqn.invars:
                if isinstance(v, _internals.Var):
                    readers.setdefault(v, []).append((site, backward))
        for v in jaxpr.outvars:
            if isinstance(v, _internals.Var):
                readers.setdefault(v, []).append((None, False))
        made_by = {v: (eqn, site, backward) for eqn, site, backward in entries for v in eqn.outvars}
        for eqn, site, backward in entries:
            if backward:
                reads = _reads(eqn, site, made_by)
                near = _forward_values(eqn, made_by)
                candidates = forward.get(site, []) if site is not None else []
                at_site = _forward_instance(candidates, near, made_by, instance)
                _name_cotangents(eqn, site, at_site, readers, reads, result)
        _derivative_factors(entries, readers, factors)
    return result, factors


def _derivative_factors(entries: list[Any], readers: dict[Any, list[Any]], factors: dict[Any, Any]) -> None:
    """Forward values of an expression that only its backward reads (`jax.grad` computes `2.0 * x`
    beside `x ** 2`) -> the value the expression itself computes (the one the forward reads on)."""
    by_site: dict[Site, list[Any]] = {}
    for eqn, site, backward in entries:
        if not backward and site is not None and not _internals.sub_jaxprs(eqn):  # a loop's are its residuals
            by_site.setdefault(site, []).extend(v for v in eqn.outvars if type(v) is _internals.Var)
    for values in by_site.values():
        primal = [v for v in values if any(not backward for _, backward in readers.get(v, []))]
        if not primal:
            continue
        for v in values:
            uses = readers.get(v, [])
            if uses and all(backward for _, backward in uses):
                factors[v] = primal[-1]


def _reads(eqn: Any, site: Site | None, made_by: dict[Any, tuple[Any, Site | None, bool]]) -> set[Any]:
    """What a backward equation reads, and what the earlier backward steps of its expression read."""
    reads: set[Any] = set()
    stack = [v for v in eqn.invars if isinstance(v, _internals.Var)]
    while stack:
        v = stack.pop()
        if v in reads:
            continue
        reads.add(v)
        producer = made_by.get(v)
        if producer is not None and producer[2] and producer[1] == site:
            stack.extend(u for u in producer[0].invars if isinstance(u, _internals.Var))
    return reads


def _forward_values(
    eqn: Any, made_by: dict[Any, tuple[Any, Site | None, bool]], limit: int = 64
) -> list[Any]:
    """The forward values a backward equation depends on, nearest first (through earlier backward steps)."""
    found: list[Any] = []
    seen: set[Any] = set()
    queue = [v for v in eqn.invars if isinstance(v, _internals.Var)]
    while queue and len(seen) < limit:
        v = queue.pop(0)
        if v in seen:
            continue
        seen.add(v)
        producer = made_by.get(v)
        if producer is None or not producer[2]:
            found.append(v)
        else:
            queue.extend(u for u in producer[0].invars if isinstance(u, _internals.Var))
    return found


def _name_cotangents(
    eqn: Any, site: Site | None, at_site: list[Any], readers: dict[Any, list[Any]], reads: set[Any],
    result: dict[Any, Any],
) -> None:
    outside, inside = _operands(at_site)
    taken: set[Any] = set()
    for var in eqn.outvars:
        if type(var) is not _internals.Var:
            continue  # a dropped output
        uses = readers.get(var, [])
        if site is not None and uses and all(s == site and backward for s, backward in uses):
            result[var] = None  # a step on the way to the expression's operands' gradients
            continue
        # The expression's operands first; a step inside it only when none fits.
        same = [v for v in outside if _same_type(v, var)] or [v for v in inside if _same_type(v, var)]
        if len(same) > 1:
            same = [v for v in same if v not in reads] or same
        # Several gradients out of one equation (a loop's) follow its operands' order.
        fresh = [v for v in same if v not in taken] or same
        result[var] = fresh[0] if fresh else None
        taken.add(result[var])


def _forward_instance(
    eqns: list[tuple[int, Any]], near: list[Any], made_by: dict[Any, tuple[Any, ...]],
    instance: dict[int, int],
) -> list[Any]:
    """The forward equations of an expression in the call a backward equation differentiates: the
    expression ran once per call (a block per layer), and the backward depends on that call's
    values (`near`, nearest first): ones the expression read (`x` of `x @ w`), else ones made
    in the same call (a bias's gradient depends on nothing the expression itself read)."""
    calls: dict[int, list[Any]] = {}
    for call, eqn in eqns:
        calls.setdefault(call, []).append(eqn)
    if len(calls) < 2:
        return [eqn for _, eqn in eqns]
    read = {
        call: {v for e in members for v in e.invars if isinstance(v, _internals.Var)}
        for call, members in calls.items()
    }
    for v in near:
        for call, values in read.items():
            if v in values:
                return calls[call]
    for v in near:
        found = instance.get(id(made_by[v][0])) if v in made_by else None
        if found in calls:
            return calls[found]
    return [eqn for _, eqn in eqns]


def _operands(eqns: list[Any]) -> tuple[list[Any], list[Any]]:
    """What an expression's equations read that they did not make (in order), and what they made
    and read again themselves (its intermediate steps)."""
    made = {v for eqn in eqns for v in eqn.outvars}
    outside: dict[Any, None] = {}
    inside: dict[Any, None] = {}
    for eqn in eqns:
        for v in eqn.invars:
            if isinstance(v, _internals.Var):
                (inside if v in made else outside).setdefault(v)
    return list(outside), list(inside)


def _same_type(a: Any, b: Any) -> bool:
    return bool(a.aval.shape == b.aval.shape and a.aval.dtype == b.aval.dtype)


def custom_jvp_rules(jaxpr: Any) -> dict[int, Any]:
    """The JVP rule of every `jax.custom_jvp` function called, by its equation's rule param."""
    rules = {}
    for eqn, _scope, _stack in walk(jaxpr):
        if eqn.primitive.name == "custom_jvp_call":
            rule = _internals.custom_jvp_rule(eqn)
            if rule is not None:
                rules[id(eqn.params["jvp_jaxpr_fun"])] = rule
    return rules
