"""Which module calls of a trace repeat: calls of one `forward` whose equations, numbers, attributes
and nested calls are alike (the 80 decoder layers of a Llama), read from a trace already made.

A retrace (`Capture(like=...)`, `tracing._replay`) replays a call only where the trace at the example
sizes shows it and the call it is replayed from alike: a layer that branches on its own index
differs there in its attributes, and is run again instead.
"""

from __future__ import annotations

import enum
import weakref
from collections.abc import Hashable
from types import CodeType
from typing import Any

import numpy as np

from jaxside.tracing import _internals
from jaxside.tracing.trace import Call, Trace


class Repeats:
    """The module calls of one trace by module path, in call order, and what each call is like."""

    def __init__(self, trace: Trace) -> None:
        self.eqns = trace.jaxpr.jaxpr.eqns
        self.by_path: dict[str, list[Call]] = {}
        self.by_function: dict[tuple[str, str, int], list[Call]] = {}
        for call in trace.root.walk():  # pre-order: each path's calls in the order they ran
            if call.module_path is not None:
                self.by_path.setdefault(call.module_path, []).append(call)
                self.by_function.setdefault((call.function, call.file, call.line), []).append(call)
        self._kinds: dict[int, int] = {}
        self._counts: dict[tuple[str, str, int], dict[int, int]] = {}
        self._jaxprs: dict[int, str] = {}
        self._equations: dict[int, int] = {}
        self._interned: dict[Hashable, int] = {}

    def kind(self, module_path: str, occurrence: int, code: CodeType) -> int | None:
        """What the `occurrence`-th call of the module at `module_path` was like in the trace (a
        number, the same for calls alike), if it ran `code` there and another call of `code` was
        alike; else None (not worth replaying)."""
        calls = [c for c in self.by_path.get(module_path, ()) if _runs(c, code)]
        if occurrence >= len(calls):
            return None
        function = (code.co_qualname, code.co_filename, code.co_firstlineno)
        counts = self._counts.get(function)
        if counts is None:
            counts = self._counts[function] = {}
            if len(self.by_function.get(function, ())) > 1:
                for call in self.by_function[function]:
                    alike = self._kind(call)
                    counts[alike] = counts.get(alike, 0) + 1
        kind = self._kind(calls[occurrence]) if counts else None
        return kind if kind is not None and counts.get(kind, 0) > 1 else None

    def _kind(self, call: Call) -> int:
        """Everything about `call` but its vars, its module path and where it was called from: what
        each call below it was like and which of its equations each emitted, then its equations."""
        known = self._kinds.get(id(call))
        if known is None:
            eqns = call.all_eqns()
            place = {index: n for n, index in enumerate(eqns)}
            tree: list[Hashable] = []
            _shape(call, place, tree)
            known = self._kinds[id(call)] = self._intern((tuple(tree), self._body(eqns)))
        return known

    def _intern(self, value: Hashable) -> int:
        """A number for `value`, the same for equal values: the kinds compared and kept in keys are
        numbers, hashed in no time, instead of nested tuples hashed whole at each lookup."""
        return self._interned.setdefault(value, len(self._interned))

    def _body(self, eqns: list[int]) -> tuple[Hashable, ...]:
        """The equations `eqns` with their inputs as positions: which equation made each, or which
        outside value it is, in the order first read."""
        made: dict[Any, tuple[int, int]] = {}
        outside: dict[Any, int] = {}
        body: list[Hashable] = []
        var_type = _internals.Var
        for n, index in enumerate(eqns):
            eqn = self.eqns[index]
            inputs: list[Hashable] = []
            for var in eqn.invars:
                if isinstance(var, var_type):
                    where = made.get(var)
                    inputs.append(where if where is not None else outside.setdefault(var, len(outside)))
                else:
                    inputs.append(("literal", repr(var)))
            for i, var in enumerate(eqn.outvars):
                made[var] = (n, i)
            equation = self._equations.get(index)
            if equation is None:
                equation = self._equations[index] = self._intern(self._equation(eqn))
            body.append((equation, tuple(inputs)))
        return tuple(body)

    def _equation(self, eqn: Any) -> Hashable:
        """An equation but for its vars: primitive, params, output types."""
        params = tuple((name, self._param(value)) for name, value in eqn.params.items())
        return (eqn.primitive.name, params, tuple(v.aval for v in eqn.outvars))

    def _param(self, value: object) -> Hashable:
        """A param as something to compare: plain values as they are, jaxprs by their text, other
        objects by their type (the rule a primitive stages per call, `custom_jvp_call`'s, is a new
        object each time; the params a replay emits are the template's own)."""
        kind = type(value)
        if kind in _PLAIN:
            return value
        if isinstance(value, tuple) and kind is tuple and all(type(item) in _PLAIN for item in value):
            return value
        if isinstance(value, (bool, int, float, str, type(None), np.dtype, enum.Enum)):
            return value
        if isinstance(value, tuple):
            return tuple(self._param(item) for item in value)
        if hasattr(value, "eqns") or hasattr(value, "jaxpr"):
            text = self._jaxprs.get(id(value))
            if text is None:
                text = self._jaxprs[id(value)] = str(value)
            return text
        return type(value).__qualname__


_PLAIN = frozenset({bool, int, float, str, type(None)})
"""Params compared as they are, by exact type (`_param` asks no more of them)."""


def _runs(call: Call, code: CodeType) -> bool:
    return (call.function, call.file, call.line) == (code.co_qualname, code.co_filename, code.co_firstlineno)


def _shape(call: Call, place: dict[int, int], tree: list[Hashable]) -> None:
    """`call` and each call below it, in pre-order, as a kind compares them: all but its vars, its
    module path (each one's relative to its parent's) and its equations, with which of the asked
    call's equations (their places in `place`) it emitted itself."""
    seen = call.seen
    tree.append((
        call.function, call.file, call.line, call.module_type, call.raised,
        tuple((name, line, _plain(value)) for name, line, value in seen.numbers),
        tuple(sorted((path, _plain(value)) for path, value in seen.attributes.items())),
        seen.lines, len(seen.bindings), tuple(map(place.__getitem__, call.eqns)), len(call.children),
    ))
    base = call.module_path or ""
    for child in call.children:
        tree.append((_relative(child.module_path, base), child.call_site))
        _shape(child, place, tree)


def _relative(path: str | None, base: str) -> str | None:
    if path is None or not base:
        return path
    if path == base:
        return ""
    return path[len(base) + 1:] if path.startswith(base + ".") else "/" + path


def _plain(value: Any) -> Hashable:
    return tuple(value) if isinstance(value, list) else value


_LATEST: dict[int, Repeats] = {}
"""The `Repeats` of the last trace asked about, by its id, for the next retrace against it; dropped
when that trace is (a `Repeats` holds its calls and equations, not the trace)."""


def repeats_of(trace: Trace) -> Repeats:
    """The `Repeats` of `trace`, kept while `trace` lives."""
    known = _LATEST.get(id(trace))
    if known is None:
        _LATEST.clear()
        known = _LATEST[id(trace)] = Repeats(trace)
        weakref.finalize(trace, _LATEST.pop, id(trace), None)
    return known
