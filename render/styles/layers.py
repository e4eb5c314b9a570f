"""Which torch Linear and Embedding modules a class-style export writes as the framework's own layers:
those whose every read in the program is exactly that layer's computation."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from jaxside.render.ir import Function, Statement
from jaxside.render.styles.lists import uniform
from jaxside.render.styles.reading import all_statements, keys_of, loop_aliases, walk
from jaxside.render.styles.tree import EMBEDDING, LINEAR, Child, Node, Tree, members

__all__ = ["Match", "find_layers", "layer_match"]


@dataclass
class Match:
    """An expression that is exactly a torch layer's computation: `kind` ("linear", "linear_bias",
    "embed"), the chain to the module (`("params", ["wqkv"])`), its input and the whole expression."""

    kind: str
    module: tuple[str, list[str | int]]
    argument: ast.expr
    expr: ast.expr


def layer_match(expr: ast.AST) -> Match | None:
    """How `expr` is exactly a Linear (`x @ w.T`, `x @ w.T + b`) or an Embedding
    (`jnp.take(w, idx, axis=0)`), if it is."""
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        inner = layer_match(expr.left)
        bias = keys_of(expr.right)
        if inner and inner.kind == "linear" and bias == (inner.module[0], [*inner.module[1], "bias"]):
            return Match("linear_bias", inner.module, inner.argument, expr)
    if (isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.MatMult)
            and isinstance(expr.right, ast.Attribute) and expr.right.attr == "T"):
        weight = keys_of(expr.right.value)
        if weight and weight[1] and weight[1][-1] == "weight":
            return Match("linear", (weight[0], weight[1][:-1]), expr.left, expr)
    if (isinstance(expr, ast.Call) and ast.unparse(expr.func) == "jnp.take" and len(expr.args) == 2
            and [ast.unparse(k) for k in expr.keywords] == ["axis=0"]):
        weight = keys_of(expr.args[0])
        if weight and weight[1] and weight[1][-1] == "weight":
            return Match("embed", (weight[0], weight[1][:-1]), expr.args[1], expr)
    return None


def matches(tree: ast.AST) -> list[Match]:
    """The layer computations in `tree`, a `x @ w.T + b` once (not again as its `x @ w.T`)."""
    found = [m for m in map(layer_match, ast.walk(tree)) if m is not None]
    biased = {id(m.expr.left) for m in found if m.kind == "linear_bias" and isinstance(m.expr, ast.BinOp)}
    return [m for m in found if id(m.expr) not in biased]


def find_layers(tree: Tree) -> None:
    """Mark the torch Linear and Embedding modules whose every read is that layer's computation
    (`x @ w.T + b`, `jnp.take(w, idx, axis=0)`) as framework layers (`Node.layer`)."""
    matched: dict[str, str] = {}
    raw: set[str] = set()
    for function in tree.program.functions:
        if function.calls[0].module_type is None:
            continue
        for path in dict.fromkeys(c.module_path for c in function.calls):
            node = tree.nodes.get(path or "")
            if node is not None:
                _reads(function, loop_aliases(function, node, tree), matched, raw)
    for path, kind in matched.items():
        node = tree.nodes[path]
        want = LINEAR if kind == "linear" else EMBEDDING
        frozen = "frozen" in node.leaves.values()  # a framework layer's weights are `nnx.Param`s
        if path not in raw and node.torch_type == want and not node.children and node.path and not frozen:
            node.layer = kind
    places: dict[Place, list[Node]] = {}  # a class's code is shared: all its instances or none
    for owner in tree.nodes.values():
        for name, child in owner.children.items():
            for place, item in _places(child, (owner.cls, name)):
                places.setdefault(place, []).append(item)
    for items in places.values():
        if len({item.layer for item in items}) > 1:
            for item in items:
                item.layer = None


Place = tuple[str | int, ...]
"""A module's place in its owner's class: (class, attribute, positions in a list built item by item)."""


def _places(child: Child | None, place: Place) -> list[tuple[Place, Node]]:
    """Each module `child` holds with its place in its owner's class: the attribute, and in a list
    built item by item its position (a `Sequential`'s `net[1]` and `net[4]` are other code), in a
    list of alike items none (the loop over `layers` runs one code for all)."""
    if child is None:
        return []
    if isinstance(child, Node):
        return [(place, child)]
    listed = uniform(child)
    return [found for k, item in enumerate(child)
            for found in _places(item, place if listed else (*place, k))]


def _reads(function: Function, scope: dict[str, Child], matched: dict[str, str],
           raw: set[str]) -> None:
    """Note each module whose tensors `function` reads as a layer computes (`matched`, by path) and
    each it reads any other way (`raw`)."""

    def nodes_of(chain: tuple[str, list[str | int]]) -> list[Node]:
        base = scope.get(chain[0])
        found = walk(base, chain[1]) if base is not None else None
        return members(found) if isinstance(found, (Node, list)) else []

    returns = [Statement([], function.returns, [], None)] if function.returns is not None else []
    for statement in all_statements(function.body) + returns:
        tree = statement.node()
        inside: set[int] = set()
        for match in matches(tree):
            argument = {id(n) for n in ast.walk(match.argument)}
            inside |= {id(n) for n in ast.walk(match.expr) if id(n) not in argument}
            kind = "embed" if match.kind == "embed" else "linear"
            for hit in nodes_of(match.module):
                if kind == "linear" and ("bias" in hit.leaves) != (match.kind == "linear_bias"):
                    raw.add(hit.path)
                elif matched.setdefault(hit.path, kind) != kind:
                    raw.add(hit.path)
        for expr in ast.walk(tree):
            chain = keys_of(expr) if isinstance(expr, ast.Subscript) else None
            if chain is not None and chain[1] and id(expr) not in inside:
                raw |= {hit.path for hit in nodes_of((chain[0], chain[1][:-1])) if chain[1][-1] in hit.leaves}
