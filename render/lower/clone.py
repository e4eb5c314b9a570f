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
from typing import Any

_SHARED = (str, int, float, bool, bytes, complex, type(None), type(Ellipsis))


def clone(value: Any, memo: dict[int, Any] | None = None) -> Any:
    """A deep copy of `value` (an `ast` node, or a list or tuple of them)."""
    memo = {} if memo is None else memo
    if isinstance(value, _SHARED):
        return value
    hit = memo.get(id(value))
    if hit is not None:
        return hit
    if isinstance(value, ast.AST):
        new = type(value).__new__(type(value))
        memo[id(value)] = new
        for name, item in vars(value).items():
            setattr(new, name, clone(item, memo))
        return new
    if type(value) is list:
        new_list: list[Any] = []
        memo[id(value)] = new_list
        new_list.extend(clone(item, memo) for item in value)
        return new_list
    if type(value) is tuple:
        return tuple(clone(item, memo) for item in value)
    return copy.deepcopy(value, memo)
