"""Fusing a repeated call once: a call's equations matched, and what the match read, replayed on a
later call with the same equations (`render.rules.fusing.fuse`, issue #37).

Decoder layer 2 emits exactly the equations layer 1 emits.  The first time a call's equations (a
*span*) are matched, every question asked of the program around them is recorded (`Questions`):
each `Graph` answer (the producer, users or constant value of a value, maybe outside the span)
and each check `fuse` makes beyond the span (where an operand is made, which torch expression
made an output).  A later span with the same signature is taken as the same when its equations
correspond one to one (primitive, parameters, types, literals, effects, liveness; wiring through
a one-to-one correspondence of values, `Correspondence`), and when every recorded question,
asked again of the corresponding values, gets the corresponding answer.  Then the patterns, the
staging and `match` would do exactly what they did (they read nothing else), so the first
span's runs are carried over by position instead.  Anything that does not correspond is matched
afresh.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from jax.extend.core import ClosedJaxpr, Jaxpr, Literal, Var

from jaxside.render.rules._core import Candidate, Graph
from jaxside.render.rules.known_calls import same_value

Runs = dict[int, tuple[Candidate, set[int]]]
"""A span's runs: at the index of the equation each ends in, its candidate and its equations."""
Check = Callable[[Callable[[Any], Any]], Any]
"""A question `fuse` asks beyond the span, over values given through a map (identity, or the
correspondence), answered the same way for a span that is the same."""


class Questions:
    """Every question a span's matching asks of the program: graph answers and `fuse`'s checks.

    The graph does not change while `fuse` runs, so each question is kept once; a producer inside
    the span is not kept (the span's own wiring, which a same span shares, answers it)."""

    def __init__(self, graph: Graph, inside: set[int]) -> None:
        self.log: dict[tuple[str, Any], Any] = {}
        self.checks: list[tuple[Check, Any]] = []
        self.graph = Graph(self._producer, self._users, self._constant)
        self._inner, self._inside = graph, inside

    def _producer(self, v: Any) -> Any:
        found = self._inner.producer(v)
        if isinstance(v, Var) and found is not None and id(found) not in self._inside:
            self.log[("producer", v)] = found
        elif isinstance(v, Var) and found is None:
            self.log[("producer", v)] = None
        return found

    def _users(self, v: Any) -> list[Any]:
        found = self._inner.users(v)
        if isinstance(v, Var):
            self.log[("users", v)] = found
        return found

    def _constant(self, v: Any) -> Any:
        found = self._inner.constant(v)
        if isinstance(v, Var):
            self.log[("constant", v)] = found
        return found

    def check(self, question: Check) -> Any:
        answer = question(lambda v: v)
        self.checks.append((question, answer))
        return answer


class Correspondence:
    """A one-to-one map of one span's values (and the values around it) onto another's."""

    def __init__(self) -> None:
        self.forward: dict[Any, Any] = {}
        self.backward: dict[Any, Any] = {}
        self.paired: set[tuple[int, int]] = set()

    def bind(self, x: Any, y: Any) -> bool:
        if isinstance(x, Literal) or isinstance(y, Literal):
            return isinstance(x, Literal) and isinstance(y, Literal) and same_literal_bits(x, y)
        known = self.forward.get(x)
        if known is not None:
            return known is y
        if y in self.backward or type(x) is not type(y) or (x is not y and x.aval != y.aval):
            return False
        self.forward[x] = y
        self.backward[y] = x
        return True

    def binds(self, xs: Sequence[Any], ys: Sequence[Any]) -> bool:
        """`bind` of each pair, in order (its cases of values, the many, inline)."""
        forward, backward = self.forward, self.backward
        for x, y in zip(xs, ys):
            if type(x) is Literal or type(y) is Literal:  # (`Literal` is final)
                if not self.bind(x, y):
                    return False
                continue
            known = forward.get(x)
            if known is None:
                if y in backward or type(x) is not type(y) or (x is not y and x.aval != y.aval):
                    return False
                forward[x] = y
                backward[y] = x
            elif known is not y:
                return False
        return True

    def spans(self, eqns: list[Any], first: Sequence[int], span: Sequence[int], alive: set[int]) -> bool:
        """Whether the equations of `first` and `span`, by position, are the same but for their
        values (`equations`), and alive alike."""
        paired, binds = self.paired, self.binds
        for i, j in zip(first, span):
            if (i in alive) is not (j in alive):
                return False
            a, b = eqns[i], eqns[j]
            pair = (id(a), id(b))
            if pair in paired:
                continue
            if (
                a.primitive is not b.primitive or len(a.invars) != len(b.invars)
                or len(a.outvars) != len(b.outvars) or a.effects != b.effects
                or not (a.params is b.params or same_params_strictly(a.params, b.params))
                or not binds(a.outvars, b.outvars) or not binds(a.invars, b.invars)
            ):
                return False
            paired.add(pair)
        return True

    def __call__(self, x: Any) -> Any:
        if not isinstance(x, Var):
            return x
        return self.forward[x]  # (a KeyError: a value the first span never met, not the same)

    def equations(self, a: Any, b: Any) -> bool:
        """Whether two equations are the same but for their values, which correspond."""
        if a is None or b is None:
            return a is b
        pair = (id(a), id(b))  # (both are held by the program, so their ids stay theirs)
        if pair in self.paired:
            return True
        if a.primitive is not b.primitive or len(a.invars) != len(b.invars):
            return False
        if len(a.outvars) != len(b.outvars):
            return False
        if a.effects != b.effects or not same_params_strictly(a.params, b.params):
            return False
        if not self.binds(a.outvars, b.outvars) or not self.binds(a.invars, b.invars):
            return False
        self.paired.add(pair)
        return True


def same_literal_bits(a: Any, b: Any) -> bool:
    """Literals of one type and the same bits (-0.0 is not 0.0: a pattern may write either)."""
    if a.aval != b.aval:
        return False
    x, y = a.val, b.val
    if type(x) is type(y) and type(x) in (int, bool):
        return bool(x == y)
    u, w = np.asarray(x), np.asarray(y)
    return u.dtype == w.dtype and u.shape == w.shape and u.tobytes() == w.tobytes()


RULE_THUNKS = frozenset({"jvp_jaxpr_fun", "fwd_jaxpr_thunk", "bwd", "out_trees"})
"""Parameters of `custom_jvp_call` / `custom_vjp_call` holding the derivative rule: per-call thunks
that never compare equal, and that nothing fusing reads (no pattern, no catalogue entry, and
`match` compares parameters with `same_params`, which skips them); their `call_jaxpr` is compared."""


def same_params_strictly(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Equation parameters equal in every key, names included, and of the same types (a pattern
    may write `1` where it read `1`, never `1.0`)."""
    return a is b or (
        a.keys() == b.keys() and all(k in RULE_THUNKS or _same_strictly(a[k], b[k]) for k in a)
    )


def _same_strictly(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, (ClosedJaxpr, Jaxpr)):
        return same_value(a, b)
    if isinstance(a, np.ndarray):
        return bool(a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes())
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same_strictly(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return same_params_strictly(a, b)
    try:
        return bool(a == b)
    except Exception:  # an array-like that does not compare to one bool
        return False


def signature(eqns: list[Any], span: Sequence[int]) -> tuple[Any, ...]:
    """A cheap key for a span: its primitives in order; `Memo.replay` checks everything else
    (wiring, types, parameters, literals, liveness)."""
    return tuple([eqns[i].primitive for i in span])


class Memo:
    """The spans matched so far, by signature, with what their matching asked and found."""

    LIMIT = 8
    """Spans kept per signature (same wiring, different parameters: each a different body)."""

    def __init__(self, eqns: list[Any], graph: Graph, alive: set[int], consts: Mapping[Any, Any]) -> None:
        self.eqns, self.graph, self.alive, self.consts = eqns, graph, alive, consts
        self.seen: dict[tuple[Any, ...], list[tuple[Sequence[int], Questions, Runs]]] = {}

    def replay(self, span: Sequence[int]) -> tuple[tuple[Any, ...], Runs | None]:
        """The span's signature, and its runs when an earlier span is the same (else None)."""
        key = signature(self.eqns, span)
        for first, recorder, runs in reversed(self.seen.get(key, ())):  # (layer 9 is like layer 8)
            mapped = self._carry(first, recorder, runs, span)
            if mapped is not None:
                return key, mapped
        return key, None

    def remember(self, key: tuple[Any, ...], span: Sequence[int], recorder: Questions, runs: Runs) -> None:
        kept = self.seen.setdefault(key, [])
        if len(kept) < self.LIMIT:
            kept.append((span, recorder, runs))

    def _carry(
        self, first: Sequence[int], recorder: Questions, runs: Runs, span: Sequence[int]
    ) -> Runs | None:
        same, alive, eqns = Correspondence(), self.alive, self.eqns
        if not same.spans(eqns, first, span, alive):
            return None
        if not self._same_constants(same):
            return None
        try:
            if not self._same_answers(recorder, same):
                return None
            position = dict(zip(first, span))
            return {
                position[i]: (_mapped(candidate, same), {position[j] for j in run})
                for i, (candidate, run) in runs.items()
            }
        except KeyError:  # a value or equation beyond what corresponds
            return None

    def _same_answers(self, recorder: Questions, same: Correspondence) -> bool:
        graph, forward, equations = self.graph, same.forward, same.equations
        for (kind, v), answer in recorder.log.items():  # (in the order asked: answers bind values)
            w = forward[v]  # `same(v)`: the log holds values only
            if kind == "producer":
                if not equations(answer, graph.producer(w)):
                    return False
            elif kind == "users":
                theirs = graph.users(w)
                if len(theirs) != len(answer) or not all(map(equations, answer, theirs)):
                    return False
            elif answer is None:
                if graph.constant(w) is not None:
                    return False
            elif not _same_value(answer, graph.constant(w)):
                return False
        return all(question(same) == answer for question, answer in recorder.checks)

    def _same_constants(self, same: Correspondence) -> bool:
        """Whether values that correspond are both constants of the program of the same value, or
        neither (`match` compares a constant a candidate stages with the program's by value)."""
        consts, forward, backward = self.consts, same.forward, same.backward
        return all(
            _same_value(consts[x], consts.get(forward[x])) for x in consts if x in forward
        ) and all(consts.get(backward[y]) is not None for y in consts if y in backward)


def _same_value(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    if a is b:
        return True
    x, y = np.asarray(a), np.asarray(b)
    return x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


def _mapped(candidate: Candidate, same: Correspondence) -> Candidate:
    outputs = None if candidate.outputs is None else [same(v) for v in candidate.outputs]
    return candidate._replace(operands=[same(v) for v in candidate.operands], outputs=outputs)
