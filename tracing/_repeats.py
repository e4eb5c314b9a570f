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
        self._kinds: dict[int, Hashable] = {}
        self._counts: dict[tuple[str, str, int], dict[Hashable, int]] = {}
        self._jaxprs: dict[int, str] = {}
        self._equations: dict[int, Hashable] = {}

    def kind(self, module_path: str, occurrence: int, code: CodeType) -> Hashable | None:
        """What the `occurrence`-th call of the module at `module_path` was like in the trace, if it
        ran `code` there and another call of `code` was alike; else None (not worth replaying)."""
        calls = [c for c in self.by_path.get(module_path, ()) if _runs(c, code)]
        if occurrence >= len(calls):
            return None
        function = (code.co_qualname, code.co_filename, code.co_firstlineno)
        counts = self._counts.get(function)
        if counts is None:
            counts = self._counts[function] = {}
            if len(self.by_function.get(function, ())) > 1:
                for call in self.by_function[function]:
                    kind = self._kind(call)
                    counts[kind] = counts.get(kind, 0) + 1
        kind = self._kind(calls[occurrence]) if counts else None
        return kind if kind is not None and counts.get(kind, 0) > 1 else None

    def _kind(self, call: Call) -> Hashable:
        """Everything about `call` but its vars, its module path and where it was called from."""
        known = self._kinds.get(id(call))
        if known is not None:
            return known
        base = call.module_path or ""
        children = tuple(
            (_relative(child.module_path, base), child.call_site, self._kind(child))
            for child in call.children
        )
        seen = call.seen
        kind = (
            call.function, call.file, call.line, call.module_type, call.raised, self._body(call),
            tuple((name, line, _plain(value)) for name, line, value in seen.numbers),
            tuple(sorted((path, _plain(value)) for path, value in seen.attributes.items())),
            seen.lines, len(seen.bindings), children,
        )
        self._kinds[id(call)] = kind
        return kind

    def _body(self, call: Call) -> tuple[Hashable, ...]:
        """The call's equations (its own and its children's) with their inputs as positions: which
        equation made each, or which outside value it is, in the order first read."""
        made: dict[Any, tuple[str, int, int]] = {}
        outside: dict[Any, tuple[str, int]] = {}
        body = []
        for n, index in enumerate(call.all_eqns()):
            eqn = self.eqns[index]
            inputs: list[Hashable] = []
            for var in eqn.invars:
                if isinstance(var, _internals.Var):
                    inputs.append(made.get(var) or outside.setdefault(var, ("in", len(outside))))
                else:
                    inputs.append(("literal", repr(var)))
            for i, var in enumerate(eqn.outvars):
                made[var] = ("eqn", n, i)
            body.append((self._equation(index), tuple(inputs)))
        return tuple(body)

    def _equation(self, index: int) -> Hashable:
        """An equation but for its vars: primitive, params, output types (once per equation)."""
        known = self._equations.get(index)
        if known is None:
            eqn = self.eqns[index]
            params = tuple((name, self._param(value)) for name, value in eqn.params.items())
            known = (eqn.primitive.name, params, tuple(v.aval for v in eqn.outvars))
            self._equations[index] = known
        return known

    def _param(self, value: object) -> Hashable:
        """A param as something to compare: plain values as they are, jaxprs by their text, other
        objects by their type (the rule a primitive stages per call, `custom_jvp_call`'s, is a new
        object each time; the params a replay emits are the template's own)."""
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


def _runs(call: Call, code: CodeType) -> bool:
    return (call.function, call.file, call.line) == (code.co_qualname, code.co_filename, code.co_firstlineno)


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
