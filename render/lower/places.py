"""Where a node sits in an `ast` tree, and putting another node there: what the steps that
rewrite statements in place (`loops`, `merge.shared_defs`, `merge.keyword_args`, `unfold`) share.

A place is `(parent, field, index)`: the node is `parent.field`, or `parent.field[index]`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

Place = tuple[ast.AST, str, int | None]


def positions(node: ast.AST) -> Iterator[tuple[ast.AST, str, int | None, ast.AST]]:
    """Every node under `node` with its parent and place, depth first, in field order."""
    for field, value in ast.iter_fields(node):
        if isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, ast.AST):
                    yield node, field, i, item
                    yield from positions(item)
        elif isinstance(value, ast.AST):
            yield node, field, None, value
            yield from positions(value)


def place_in(parent: ast.AST, node: ast.AST) -> Place:
    """The place of `node` among `parent`'s fields."""
    for field, value in ast.iter_fields(parent):
        if value is node:
            return parent, field, None
        if isinstance(value, list) and any(item is node for item in value):
            return parent, field, next(i for i, item in enumerate(value) if item is node)
    raise AssertionError("a node not under its parent")


def place_under(tree: ast.AST, node: ast.AST) -> Place:
    """The place of `node` somewhere under `tree`."""
    for parent, field, index, child in positions(tree):
        if child is node:
            return parent, field, index
    raise AssertionError("a node not under the tree")


def put(parent: ast.AST, field: str, index: int | None, node: ast.AST) -> None:
    """`node` at the place `(parent, field, index)`, instead of what was there."""
    if index is None:
        setattr(parent, field, node)
    else:
        getattr(parent, field)[index] = node
