"""Fusing: the runs of equations an idiom (`render.rules.idioms`) writes, found and checked.

`fuse` asks each pattern of `idioms.PATTERNS` for candidate expressions ending at an equation,
traces each candidate on its operands' types, and keeps it only when `match` finds the very
equations it stages in the program, wired the same way; the run becomes one `idiom` equation.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.extend.core import Literal, Var

from jaxside.render.rules.idioms import IDIOM, PATTERNS, Candidate
from jaxside.render.rules.known_calls import same_literal, same_params

_NAMESPACE = {"jax": jax, "jnp": jnp, "lax": lax}


@functools.lru_cache(maxsize=1024)
def _stage(code: str, avals: tuple[tuple[tuple[int, ...], Any, bool], ...]) -> Any:
    """The jaxpr `code` stages on operands of these types, or None when it does not trace."""
    params = ", ".join(f"_{i}" for i in range(len(avals)))
    fn = eval(f"lambda {params}: {code}", dict(_NAMESPACE))  # noqa: S307  (our own candidate code)
    structs = [jax.ShapeDtypeStruct(shape, dtype, weak_type=weak) for shape, dtype, weak in avals]
    try:
        return jax.make_jaxpr(fn)(*structs).jaxpr
    except Exception:  # the candidate does not apply to these operands
        return None


def _aval_key(var: Any) -> tuple[tuple[int, ...], Any, bool]:
    return tuple(var.aval.shape), var.aval.dtype, bool(var.aval.weak_type)


def match(staged: Any, terminal: int, eqns: list[Any], made_by: dict[Any, int], operands: list[Any],
          together: Callable[[int, int], bool]) -> set[int] | None:
    """The equations (by index) ending in `eqns[terminal]` that `staged` is, wired the same way
    with its inputs standing for `operands`; None when they differ anywhere."""
    if staged.constvars or len(staged.outvars) != len(eqns[terminal].outvars):
        return None
    inputs = dict(zip(staged.invars, operands))
    made_in = {v: e for e in staged.eqns for v in e.outvars}
    mapping: dict[Any, Any] = {}
    visited: dict[int, int] = {}

    def same(sv: Any, ov: Any) -> bool:
        if isinstance(sv, Literal) or isinstance(ov, Literal):
            return isinstance(sv, Literal) and isinstance(ov, Literal) and same_literal(sv, ov)
        if sv in inputs:
            return inputs[sv] is ov
        if sv in mapping:
            return mapping[sv] is ov
        mapping[sv] = ov
        se, oi = made_in.get(sv), made_by.get(ov)
        if se is None or oi is None:
            return False
        oe = eqns[oi]
        if se.outvars.index(sv) != oe.outvars.index(ov):
            return False
        if id(se) in visited:
            return visited[id(se)] == oi
        visited[id(se)] = oi
        if (
            se.primitive != oe.primitive or len(se.invars) != len(oe.invars) or oe.effects
            or not together(oi, terminal)
            or [v.aval for v in se.outvars] != [v.aval for v in oe.outvars]
            or not same_params(se.params, oe.params)
        ):
            return False
        return all(same(x, y) for x, y in zip(se.invars, oe.invars))

    if not all(same(s, o) for s, o in zip(staged.outvars, eqns[terminal].outvars)):
        return None
    if made_in.get(staged.outvars[0]) is None or visited.get(id(made_in[staged.outvars[0]])) != terminal:
        return None
    if len(visited) != len(staged.eqns):
        return None
    return set(visited.values())


def fuse(
    eqns: list[Any], outvars: list[Any], together: Callable[[int, int], bool] = lambda i, j: True
) -> list[Any]:
    """`eqns` with each run an idiom writes replaced by one `idiom` equation (at the run's last
    equation's place; the run's other equations are left for dead-code elimination)."""
    made_by = {v: i for i, e in enumerate(eqns) for v in e.outvars if isinstance(v, Var)}
    wanted = {v for v in outvars if isinstance(v, Var)}
    alive = live(eqns, wanted)
    uses: dict[Any, set[int]] = {}
    for i, e in enumerate(eqns):
        for v in e.invars if i in alive else ():
            if isinstance(v, Var):
                uses.setdefault(v, set()).add(i)

    def producer(v: Any) -> Any:
        i = made_by.get(v)
        return eqns[i] if i is not None else None

    runs: dict[int, tuple[Candidate, set[int]]] = {}
    claimed: set[int] = set()
    for i in range(len(eqns) - 1, -1, -1):
        eqn = eqns[i]
        pattern = PATTERNS.get(eqn.primitive.name)
        if pattern is None or i in claimed or i not in alive or eqn.effects:
            continue
        for found in pattern(eqn, producer):
            candidate = Candidate(*found)
            if not all(isinstance(v, Var) for v in candidate.operands):
                continue
            operands = candidate.operands
            staged = _stage(candidate.code, tuple(_aval_key(v) for v in operands))
            run = match(staged, i, eqns, made_by, operands, together) if staged is not None else None
            if run is not None:  # runs may share values (one index wrap for two gathers)
                runs[i] = (candidate, run)
                claimed |= run
                break
    changed = True
    while changed:  # a value made inside a run and read outside every run keeps the run apart
        changed = False
        inside = set().union(*(run for _, run in runs.values())) if runs else set()
        for i, (_, run) in list(runs.items()):
            made = {v for j in run - {i} for v in eqns[j].outvars}
            if any(v in wanted or uses.get(v, set()) - inside for v in made):
                del runs[i]
                changed = True
    fused = list(eqns)
    for i, (candidate, _) in runs.items():
        params = {"code": candidate.writes or candidate.code, "rewrite": candidate.rewrite}
        fused[i] = eqns[i].replace(primitive=IDIOM, invars=list(candidate.operands), params=params)
    return fused


def live(eqns: list[Any], wanted: set[Any]) -> set[int]:
    """The equations whose values reach `wanted` (or that have effects)."""
    needed, found = set(wanted), set()
    for i in range(len(eqns) - 1, -1, -1):
        if eqns[i].effects or any(v in needed for v in eqns[i].outvars):
            found.add(i)
            needed.update(v for v in eqns[i].invars if isinstance(v, Var))
    return found
