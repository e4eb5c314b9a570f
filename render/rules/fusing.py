"""Fusing: the runs of equations an idiom (`render.rules.idioms`) writes, found and checked.

`fuse` asks each pattern of `idioms.PATTERNS` for candidate expressions ending at an equation,
traces each candidate on its operands' types, and keeps it only when `match` finds the very
equations it stages in the program, wired the same way; the run becomes one `idiom` equation
(with several results when the candidate has several outputs: `q, k, v = jnp.split(...)`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core import DropVar, Literal, Var

from jaxside.render.rules._core import Candidate, Graph, layout
from jaxside.render.rules.catalogue import catalogued, terminals
from jaxside.render.rules.fuse_memo import Memo, Questions
from jaxside.render.rules.idioms import IDIOM, IDIOMS, PATTERNS
from jaxside.render.rules.known_calls import same_literal, same_params

_NAMESPACE = {"jax": jax, "jnp": jnp, "lax": lax}


@functools.lru_cache(maxsize=1024)
def _stage(code: str, avals: tuple[tuple[tuple[int, ...], Any, bool], ...]) -> Any:
    """The jaxpr `code` stages on operands of these types, or None when it does not trace."""
    params = ", ".join(f"_{i}" for i in range(len(avals)))
    fn = eval(f"lambda {params}: {code}", dict(_NAMESPACE))  # noqa: S307  (our own candidate code)
    structs = [jax.ShapeDtypeStruct(shape, dtype, weak_type=weak) for shape, dtype, weak in avals]
    try:
        return jax.make_jaxpr(fn)(*structs)
    except Exception:  # the candidate does not apply to these operands
        return None


def _aval_key(var: Any) -> tuple[tuple[int, ...], Any, bool]:
    return tuple(var.aval.shape), var.aval.dtype, bool(var.aval.weak_type)


def match(closed: Any, terminal: int, eqns: list[Any], made_by: dict[Any, int], operands: list[Any],
          outputs: list[Any], together: Callable[[int, int], bool],
          consts: Mapping[Any, Any] = MappingProxyType({})) -> set[int] | None:
    """The equations (by index), `eqns[terminal]` among them, that `closed` stages, wired the same
    way with its inputs standing for `operands` and its outputs for `outputs`; None when they
    differ anywhere. A constant it stages (the list of `x[:, [-1]]`) stands for a constant of the
    program (`consts`, by value) of the same type and value."""
    staged = closed.jaxpr
    if len(staged.outvars) != len(outputs):
        return None
    inputs = dict(zip(staged.invars, operands))
    staged_consts = dict(zip(staged.constvars, closed.consts))
    made_in = layout(staged).made_in
    mapping: dict[Any, Any] = {}
    visited: dict[int, int] = {}

    def same(sv: Any, ov: Any) -> bool:
        if isinstance(sv, Literal) or isinstance(ov, Literal):
            return isinstance(sv, Literal) and isinstance(ov, Literal) and same_literal(sv, ov)
        if sv in inputs:
            return inputs[sv] is ov
        if sv in staged_consts:
            return ov in consts and same_constant(staged_consts[sv], consts[ov])
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

    if not all(same(s, o) for s, o in zip(staged.outvars, outputs)):
        return None
    if any(made_in.get(s) is None for s in staged.outvars) or terminal not in visited.values():
        return None  # an output that is an operand, or a run that does not end where it was asked
    if len(visited) != _live_count(closed):
        return None  # (an equation it stages for nothing, the `sign` of `logsumexp`, is dead code here)
    return set(visited.values())


def same_constant(a: Any, b: Any) -> bool:
    """Whether two constant arrays have the same dtype, shape and values (bit for bit)."""
    x, y = np.asarray(a), np.asarray(b)
    return x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


MEMO = True
"""Whether `fuse` matches a repeated call's equations once (`fuse_memo`); off, every call is
matched (the equivalence tests lower both ways)."""


def fuse(
    eqns: list[Any], outvars: list[Any], site: Callable[[int], Any] = lambda i: None,
    consts: Mapping[Any, Any] = MappingProxyType({}), calls: Sequence[object] | None = None,
) -> list[Any]:
    """`eqns` with each run an idiom writes replaced by one `idiom` equation, at the place of the
    first equation making one of its outputs (the run's last, for one output).  The run's other
    equations are left for dead-code elimination: those making another output drop it.

    `calls`: the call each equation is of (the lowering's), runs within one, and a call whose
    equations repeat an earlier one's is matched once (`fuse_memo`); without, any equations may
    be one run;
    `site(i)`: the source expression equation `i` came from.  The outputs of an idiom with
    several must come from one (`q, k, v = x.split(...)`: two torch lines stay two statements);
    `consts`: the values of the program's constants (an index list a pattern may write as it is)."""
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

    graph = Graph(producer, lambda v: [eqns[j] for j in sorted(uses.get(v, ()))], consts.get)
    program = _Program(eqns, made_by, alive, site, consts)
    runs: dict[int, tuple[Candidate, set[int]]] = {}
    if calls is None:
        runs = _match_span(program, range(len(eqns)), Questions(graph, set()), lambda i, j: True)
    else:
        spans: dict[int, list[int]] = {}
        for i, call in enumerate(calls):
            spans.setdefault(id(call), []).append(i)
        memo = Memo(eqns, graph, alive, consts)
        for span in spans.values():
            key, found = memo.replay(span) if MEMO else ((), None)
            if found is None:
                recorder = Questions(graph, {id(eqns[i]) for i in span})
                found = _match_span(program, span, recorder, lambda i, j: calls[i] is calls[j])
                if MEMO:
                    memo.remember(key, span, recorder, found)
            runs.update(found)
        runs = dict(sorted(runs.items(), reverse=True))  # (in the order one walk back finds them)
    changed = True
    while changed:  # a value made inside a run and read outside every run keeps the run apart
        changed = False
        inside = set().union(*(run for _, run in runs.values())) if runs else set()
        for i, (candidate, run) in list(runs.items()):
            made = {v for j in run for v in eqns[j].outvars} - set(candidate.outputs or eqns[i].outvars)
            if any(v in wanted or uses.get(v, set()) - inside for v in made):
                del runs[i]
                changed = True
    fused = list(eqns)
    for i, (candidate, _) in runs.items():
        params = {"code": candidate.writes or candidate.code, "rewrite": candidate.rewrite}
        outputs = candidate.outputs or eqns[i].outvars
        makers = sorted({made_by[v] for v in outputs})
        for j in makers[1:]:
            fused[j] = eqns[j].replace(outvars=[DropVar(v.aval) for v in eqns[j].outvars])
        primitive = IDIOM if candidate.outputs is None else IDIOMS
        fused[makers[0]] = eqns[makers[0]].replace(
            primitive=primitive, invars=list(candidate.operands), outvars=list(outputs), params=params
        )
    return fused


class _Program(NamedTuple):
    """What matching reads of the whole program (beyond the graph a pattern asks)."""

    eqns: list[Any]
    made_by: dict[Any, int]
    alive: set[int]
    site: Callable[[int], Any]
    consts: Mapping[Any, Any]


def _match_span(
    program: _Program, span: Sequence[int], recorder: Questions, together: Callable[[int, int], bool]
) -> dict[int, tuple[Candidate, set[int]]]:
    """The runs ending in the equations of `span` (ascending indices, all that may be one run
    with each other): each equation's candidates in turn, from the last equation back.  What it
    reads beyond the span it asks through `recorder` (`fuse_memo`)."""
    eqns, made_by, graph = program.eqns, program.made_by, recorder.graph
    runs: dict[int, tuple[Candidate, set[int]]] = {}
    claimed: set[int] = set()
    for i in reversed(span):
        eqn = eqns[i]
        pattern = PATTERNS.get(eqn.primitive.name)
        listed = eqn.primitive.name in terminals()
        if pattern is None and not listed or i in claimed or i not in program.alive or eqn.effects:
            continue
        # (the catalogue's whole functions first: `jax.nn.gelu(x)`, not the `x * y` it ends in)
        proposed = [*(catalogued(eqn, graph) if listed else ()), *(pattern(eqn, graph) if pattern else ())]
        for found in proposed:
            candidate = Candidate(*found)
            operands, outputs = candidate.operands, candidate.outputs or list(eqn.outvars)
            if not recorder.check(functools.partial(_placed, made_by, operands, outputs)):
                continue  # (the idiom, at its first output, reads its operands there)
            if not recorder.check(functools.partial(_one_site, program, outputs)):
                continue
            staged = _stage(candidate.code, tuple(_aval_key(v) for v in operands))
            run = None
            if staged is not None:
                run = match(staged, i, eqns, made_by, operands, outputs, together, program.consts)
            if run is not None:  # runs may share values (one index wrap for two gathers)
                runs[i] = (candidate, run)
                claimed |= run
                break
    return runs


def _placed(
    made_by: dict[Any, int], operands: list[Any], outputs: list[Any], same: Callable[[Any], Any]
) -> bool:
    """Whether every operand is a value made before the first output is."""
    first = min(made_by[same(v)] for v in outputs)
    return all(isinstance(v, Var) and made_by.get(v, -1) < first for v in map(same, operands))


def _one_site(program: _Program, outputs: list[Any], same: Callable[[Any], Any]) -> bool:
    """Whether the outputs come from one torch expression."""
    return len({program.site(program.made_by[same(v)]) for v in outputs}) <= 1


_LIVE_COUNTS: dict[int, tuple[Any, int]] = {}


def _live_count(closed: Any) -> int:
    """How many of a staged jaxpr's equations reach its outputs: once per jaxpr (`_stage` keeps
    each)."""
    hit = _LIVE_COUNTS.get(id(closed))
    if hit is None or hit[0] is not closed:
        if len(_LIVE_COUNTS) >= 2048:
            _LIVE_COUNTS.clear()
        staged = closed.jaxpr
        hit = _LIVE_COUNTS[id(closed)] = (closed, len(live(staged.eqns, set(staged.outvars))))
    return hit[1]


def live(eqns: list[Any], wanted: set[Any]) -> set[int]:
    """The equations whose values reach `wanted` (or that have effects)."""
    needed, found = set(wanted), set()
    for i in range(len(eqns) - 1, -1, -1):
        eqn = eqns[i]
        if eqn.effects or not needed.isdisjoint(eqn.outvars):
            found.add(i)
            needed.update([v for v in eqn.invars if isinstance(v, Var)])
    return found
