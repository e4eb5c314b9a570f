"""Where values sit in the params and state trees and in pytree arguments, as paths and as `ast`.

`params["layers"][0]["attention"]["wqkv"]["weight"]` for `layers.0.attention.wqkv.weight`:
dotted module paths nest as dicts, numbered children (a ModuleList) as lists.  A def's operands
may be packed into pytree parameters (`params` of a JAX function); `call_args` rebuilds them.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Any

from jaxside.render.ir import Function, named
from jaxside.render.names import is_index
from jaxside.render.text import value_expr
from jaxside.tracing import OutputError


def under(path: str, anchor: str | None) -> bool:
    if anchor is None:
        return False
    return anchor == "" or path == anchor or path.startswith(anchor + ".")


def relative(path: str, anchor: str) -> str:
    return path if anchor == "" else path[len(anchor) + 1 :]


class Tree:
    """The nesting of dotted paths: digit segments 0..n-1 under one prefix become a list."""

    def __init__(self, paths: list[str]) -> None:
        children: dict[str, set[str]] = {}
        for path in paths:
            parts = path.split(".")
            for i in range(len(parts)):
                children.setdefault(".".join(parts[:i]), set()).add(parts[i])
        self.lists = {
            prefix
            for prefix, keys in children.items()
            if all(is_index(k) for k in keys) and sorted(int(k) for k in keys) == list(range(len(keys)))
        }
        self.lengths = {prefix: len(children[prefix]) for prefix in self.lists}

    def subscript(self, base: ast.expr, path: str, prefix: str = "") -> ast.expr:
        """`base["a"][0]["b"]` for `path` (relative to `prefix` in this tree)."""
        node = base
        current = prefix
        for part in path.split(".") if path else []:
            key: Any = int(part) if current in self.lists else part
            node = ast.Subscript(node, ast.Constant(key), ast.Load())
            current = f"{current}.{part}" if current else part
        return node


_PATH_PART = re.compile(r"\[([0-9]+|'[^']*'|\"[^\"]*\")\]")
_PATH = re.compile(r"(\[([0-9]+|'[^']*'|\"[^\"]*\")\])+")


def _path_parts(path: str) -> list[int | str]:
    return [int(p) if is_index(p) else p[1:-1] for p in _PATH_PART.findall(path)]


def tree_root(path: str) -> str | None:
    """`params` for `params['w1']` or `params[0]`: an argument's name when `path` is inside it."""
    match = re.match(r"[A-Za-z_][A-Za-z0-9_]*", path)
    if match is None or match.end() == len(path):
        return None
    return match.group(0) if _PATH.fullmatch(path[match.end() :]) else None


def tree_arg(leaves: list[tuple[str, ast.expr]]) -> ast.expr:
    """The pytree holding these leaves: the caller's own tree when each leaf is that tree at its
    path (`params`), else a literal of the leaves (`{"w1": w1, "b1": b1}`)."""
    bases = []
    for path, expr in leaves:
        parts = _path_parts(path)
        node = expr
        for part in reversed(parts):
            if not (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
                    and node.slice.value == part):
                return paths_expr(leaves)
            node = node.value
        bases.append(node)
    if bases and all(ast.dump(b) == ast.dump(bases[0]) for b in bases):
        return bases[0]
    return paths_expr(leaves)


def path_expr(name: str, path: str) -> ast.expr:
    node: ast.expr = named(name)
    for part in _path_parts(path):
        node = ast.Subscript(node, ast.Constant(part), ast.Load())
    return node


def paths_expr(leaves: list[tuple[str, ast.expr]]) -> ast.expr:
    """A tuple/dict structure from pytree paths (`''`, `[0]`, `['logits']`) and leaf expressions."""
    if len(leaves) == 1 and leaves[0][0] == "":
        return leaves[0][1]
    tree: dict[Any, Any] = {}
    for path, expr in leaves:
        parts = _path_parts(path)
        node = tree
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1] if parts else ""] = expr
    return _tree_expr(tree)


def _tree_expr(tree: Any) -> ast.expr:
    if not isinstance(tree, dict):
        leaf: ast.expr = tree
        return leaf
    keys = list(tree)
    if all(isinstance(k, int) for k in keys):  # positions kept: a result not computed here is None
        items = [_tree_expr(tree[k]) if k in tree else ast.Constant(None) for k in range(max(keys) + 1)]
        return ast.Tuple(items, ast.Load())
    return ast.Dict([ast.Constant(k) for k in keys], [_tree_expr(tree[k]) for k in keys])


def spec_expr(
    spec: Any, leaves: Iterator[ast.expr], static: dict[int, Any], counter: list[int] | None = None
) -> ast.expr:
    """The entry's return value rebuilt from its torch pytree spec (static leaves as constants)."""
    counter = counter if counter is not None else [0]
    if spec.is_leaf():
        index = counter[0]
        counter[0] += 1
        if index in static:
            return _constant(static[index])
        return next(leaves)
    specs = spec.children() if hasattr(spec, "children") else spec.children_specs
    children = [spec_expr(c, leaves, static, counter) for c in specs]
    if spec.type is dict or (isinstance(spec.type, type) and issubclass(spec.type, dict)):
        return ast.Dict([ast.Constant(k) for k in spec.context], children)
    if spec.type is list:
        return ast.List(children, ast.Load())
    return ast.Tuple(children, ast.Load())


def _constant(value: Any) -> ast.expr:
    """A returned Python value as a literal of the export, or refused (never its repr as a string)."""
    expr = value_expr(value)
    if expr is None:
        raise OutputError(
            f"the entry returns a {type(value).__qualname__} ({_short(value)}), which the export cannot "
            "rebuild as a value",
            fix="return tensors, numbers, strings, bytes, dtypes, slices, ranges, sets and containers of "
            "them; drop or convert the rest (a generator: a tuple)",
        )
    return expr


def _short(value: Any) -> str:
    text = re.sub(r" at 0x[0-9a-f]+", "", repr(value))
    return text if len(text) <= 40 else text[:37] + "..."


def nested_dict(entries: dict[str, ast.expr], tree: Tree, anchor: str) -> ast.expr:
    nested: dict[str, Any] = {}
    splats: list[ast.expr] = []
    for path, expr in entries.items():
        if path == "":
            splats.append(expr)
            continue
        node = nested
        parts = path.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = expr

    def build(node: dict[str, Any], prefix: str) -> ast.expr:
        keys = list(node)
        values = [build(node[k], _join(prefix, k)) if isinstance(node[k], dict) else node[k] for k in keys]
        if prefix in tree.lists and sorted(int(k) for k in keys) == list(range(tree.lengths[prefix])):
            ordered = [v for _, v in sorted(zip((int(k) for k in keys), values), key=lambda kv: kv[0])]
            return ast.List(ordered, ast.Load())
        constants: list[ast.expr | None] = [ast.Constant(int(k) if prefix in tree.lists else k) for k in keys]
        return ast.Dict(constants, values)

    result = build(nested, anchor)
    if splats and isinstance(result, ast.Dict):
        result.keys = [*(None for _ in splats), *result.keys]
        result.values = splats + result.values
    return result


def _join(prefix: str, part: str) -> str:
    return f"{prefix}.{part}" if prefix else part


def plain_params(function: Function) -> list[tuple[str, int]]:
    """`(parameter, operand position)` for the parameters that take one operand."""
    count = len(function.calling.packing) if function.calling.packing else len(function.calling.operands)
    names = function.params[len(function.params) - count :]
    if not function.calling.packing:
        return list(zip(names, range(len(function.calling.operands))))
    result, position = [], 0
    for name, pack in zip(names, function.calling.packing):
        if pack is None:
            result.append((name, position))
            position += 1
        else:
            position += len(pack)
    return result

def call_args(function: Function, values: list[ast.expr]) -> list[ast.expr]:
    """The arguments that pass these operand expressions (pytree parameters rebuilt)."""
    if not any(function.calling.packing):
        return list(values)
    args, position = [], 0
    for pack in function.calling.packing:
        if pack is None:
            args.append(values[position])
            position += 1
        else:
            args.append(tree_arg([(path, values[i]) for path, i in pack]))
            position += len(pack)
    return args
