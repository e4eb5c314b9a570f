"""Equations made comparable: their parameters, types and literals as plain keys, each made once.

Finding repeated equations (`context.common_subexpressions`) and telling calls that render alike
(`calltree.CallTree.signature`) compare every equation of the trace by its parameters, the types of
its results and its literal operands. Written as text, those cost more than everything else the
comparison does (a type's `f32[8,128]`, a literal's numpy print), yet a trace of 80 layers has a few
dozen distinct types and literals among thousands of equations: `Comparable` makes each key once
and hands the same text back for an equal part.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from jax.extend.core import ClosedJaxpr, Jaxpr, Literal

_NUMBERS = frozenset({int, float, bool, type(None)})
"""Types whose `repr` has no address in it (nothing for `canonical` to strip)."""


class Comparable:
    """The keys of one lowering's equations, each computed once (per parameters dict, per type,
    per literal value)."""

    def __init__(self) -> None:
        self._params: dict[int, tuple[Any, Any]] = {}
        self._types: dict[Any, str] = {}
        self._literals: dict[Any, tuple[str, str, str]] = {}
        self._memo: dict[Any, Any] = {}
        """What `canonical` keeps: jaxprs' texts by id, strings' by the string."""

    def params(self, params: Any) -> Any:
        """`canonical(params)`, once per parameters dict (an equation and its copies share one)."""
        hit = self._params.get(id(params))
        if hit is None or hit[0] is not params:
            hit = self._params[id(params)] = (params, canonical(params, self._memo))
        return hit[1]

    def type(self, aval: Any) -> str:
        """`str(aval)` (`f32[8,128]`), once per distinct type."""
        try:
            text = self._types.get(aval)
        except TypeError:  # (a type that cannot be hashed: printed each time)
            return str(aval)
        if text is None:
            text = self._types[aval] = str(aval)
        return text

    def literal(self, v: Literal) -> tuple[str, str, str]:
        """`("literal", repr(v.val), str(v.aval))`: an array's printed once per value and type."""
        val = v.val
        if not isinstance(val, np.ndarray):
            return ("literal", repr(val), self.type(v.aval))
        key = (type(val), val.dtype.str, val.shape, val.tobytes(), getattr(val, "weak_type", None), v.aval)
        found = self._literals.get(key)
        if found is None:
            found = self._literals[key] = ("literal", repr(val), self.type(v.aval))
        return found


def canonical(value: Any, memo: dict[Any, Any] | None = None) -> Any:
    """A parameter's value as something `==` compares by content: nested tuples and text (jaxprs
    printed, arrays by their bytes, object addresses dropped).

    `memo`, if given, keeps each jaxpr's text by its id (a jaxpr does not change, and the calls of
    one jitted function share one: printed once) and each string's by the string (the code of every
    idiom equation `fuse` writes)."""
    kind = type(value)
    if kind in _NUMBERS:
        return repr(value)
    if kind is str and memo is not None:
        text = memo.get(value)
        if text is None:
            text = memo[value] = re.sub(r"0x[0-9a-f]+", "", repr(value))
        return text
    if isinstance(value, dict):
        return tuple([(k, canonical(v, memo)) for k, v in value.items()])
    if isinstance(value, (tuple, list)) and not hasattr(value, "_fields"):
        return tuple([canonical(v, memo) for v in value])
    if isinstance(value, (ClosedJaxpr, Jaxpr)):
        if memo is None:
            return str(value)
        hit = memo.get(id(value))  # (an int: no string is equal to it)
        if hit is None or hit[0] is not value:
            hit = memo[id(value)] = (value, str(value))
        return hit[1]
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    return re.sub(r"0x[0-9a-f]+", "", repr(value))
