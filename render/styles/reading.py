"""Reading the functional defs' trees in a class-style export: `params["a"][0]["b"]` chains, what
they reach in the module tree, and the loop variables bound to lists of modules."""

from __future__ import annotations

import ast
from typing import Any

from jaxside.render.ir import Function, Loop, Statement
from jaxside.render.names import is_index
from jaxside.render.styles.tree import Child, Node, Tree

__all__ = ["all_statements", "attribute_chain", "enumerated", "keys_of", "loop_aliases", "loop_modules",
           "walk"]


def keys_of(node: ast.expr) -> tuple[str, list[str | int]] | None:
    """`params["a"][0]["b"]` as ("params", ["a", 0, "b"]); None when not such a chain."""
    keys: list[str | int] = []
    while isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(
            node.slice.value, (str, int)):
        keys.append(node.slice.value)
        node = node.value
    if isinstance(node, ast.Name):
        return node.id, keys[::-1]
    return None


def attribute_chain(base: ast.expr, keys: list[str | int]) -> ast.expr:
    """`self.layers[0].attention` for ["layers", 0, "attention"]; a list position the functional
    export keys as a string (`params["to_out"]["1"]`, a `Sequential` whose item 0 holds no tensor) is
    an index here, as the class's list keeps torch's positions."""
    node = base
    for key in keys:
        if isinstance(key, int) or is_index(key):
            node = ast.Subscript(node, ast.Constant(int(key)), ast.Load())
        else:
            node = ast.Attribute(node, key, ast.Load())
    return node


def walk(node: Child | None, keys: list[str | int]) -> Child | str | None:
    """What `keys` reach from `node`: a node, a list, a leaf's name (str), or None. A key an
    instance lacks is looked up in the other instances of its class (a def shared by blocks with and
    without a `downsample` reads it under `if downsample:`)."""
    for position, key in enumerate(keys):
        if isinstance(node, list):
            index = key if isinstance(key, int) else int(key) if is_index(key) else None
            if index is None or not -len(node) <= index < len(node):
                return None
            node = node[index]
        elif isinstance(node, Node) and isinstance(key, str):
            owner = next((n for n in [node, *node.peers] if key in n.children or key in n.leaves), node)
            if key in owner.leaves and position == len(keys) - 1:
                return f"leaf:{key}"
            node = owner.children.get(key)
        else:
            return None
    return node


def all_statements(statements: list[Statement]) -> list[Statement]:
    found: list[Statement] = []
    for statement in statements:
        found.append(statement)
        if isinstance(statement, Loop):
            found += all_statements(statement.body)
    return found


def loop_aliases(function: Function, node: Node, tree: Tree) -> dict[str, Child]:
    """`params`, `state` and the loop variables over a list of modules, each to what it holds."""
    scope: dict[str, Child] = {"params": node, "state": node}
    for statement in all_statements(function.body):
        if isinstance(statement, Loop) and statement.loop_target is not None:
            for name, items in loop_modules(statement, scope):
                scope[name] = items
    return scope


def enumerated(loop: Loop) -> bool:
    """Whether the loop is `for i, item in enumerate(items)` (gpt-fast's loop over its layers)."""
    iterable, target = loop.iterable, loop.loop_target
    return (isinstance(iterable, ast.Call) and ast.unparse(iterable.func) == "enumerate"
            and len(iterable.args) == 1 and not iterable.keywords
            and isinstance(target, ast.Tuple) and len(target.elts) == 2)


def loop_modules(loop: Loop, scope: dict[str, Any]) -> list[tuple[str, list[Child | None]]]:
    """The loop variables bound to list items: `layer` in `zip(params["layers"], state["layers"])`."""
    iterable, target = loop.iterable, loop.loop_target
    if enumerated(loop) and isinstance(iterable, ast.Call) and isinstance(target, ast.Tuple):
        iterable, target = iterable.args[0], target.elts[1]  # `for i, layer in enumerate(...)`
    sources = iterable.args if isinstance(iterable, ast.Call) and ast.unparse(iterable.func) == "zip" else [
        iterable]
    names = target.elts if isinstance(target, ast.Tuple) and len(sources) > 1 else [target]
    found = []
    for source, name in zip(sources, names, strict=False):
        listed, start = list_tail(source)
        chain = keys_of(listed) if listed is not None else None
        if chain is None or not isinstance(name, ast.Name):
            continue
        base = scope.get(chain[0])
        items = walk(base, chain[1]) if base is not None else None
        if isinstance(items, list):
            found.append((name.id, items[start:]))
    return found


def list_tail(source: Any) -> tuple[Any, int]:
    """A loop's list and where it starts in it: (`params["block"]`, 1) for `params["block"][1:]`."""
    if isinstance(source, ast.Subscript) and isinstance(source.slice, ast.Slice):
        lower, upper, step = source.slice.lower, source.slice.upper, source.slice.step
        if isinstance(lower, ast.Constant) and type(lower.value) is int and upper is None and step is None:
            return source.value, lower.value
    return source, 0
