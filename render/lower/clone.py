"""A deep copy of `ast` expressions, as `copy.deepcopy` makes it, at a fraction of its cost.

A def writer copies an operand's expression each time an equation reads it (thousands of times at
70B); `copy.deepcopy` spends most of that in its generic dispatch. Here an `ast.AST` is copied
attribute by attribute (its fields, positions and whatever else a writer hung on it), lists and
tuples item by item, text and numbers shared, and anything else left to `copy.deepcopy`; a node
met twice is copied once (the memo), as `copy.deepcopy` does.
"""

from __future__ import annotations

import ast
import copy
from typing import Any, TypeVar, cast

_SHARED = (str, int, float, bool, bytes, complex, type(None), type(Ellipsis))


T = TypeVar("T")


def clone(value: T) -> T:
    """A deep copy of `value` (an `ast` node, or a list or tuple of them)."""
    return cast(T, _clone(value, {}))


def _clone(value: Any, memo: dict[int, Any]) -> Any:
    if isinstance(value, _SHARED):
        return value
    hit = memo.get(id(value))
    if hit is not None:
        return hit
    if isinstance(value, ast.AST):
        new = type(value).__new__(type(value))
        memo[id(value)] = new
        for name, item in vars(value).items():
            setattr(new, name, _clone(item, memo))
        return new
    if type(value) is list:
        new_list: list[Any] = []
        memo[id(value)] = new_list
        new_list.extend(_clone(item, memo) for item in value)
        return new_list
    if type(value) is tuple:
        return tuple(_clone(item, memo) for item in value)
    return copy.deepcopy(value, memo)
