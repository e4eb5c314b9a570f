"""What a rolled loop reads in place of the integers that counted along the run: the loop's
header (`for i in range(n)`, `for block in params["blocks"]`, `zip` of several lists), shared by
the loops and the comprehensions `loops` writes.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable
from typing import Any

from jaxside.render.ir import Function, named
from jaxside.render.lower.context import Context
from jaxside.render.lower.places import Place, positions, put
from jaxside.render.names import Scope

Places = dict[int, Place]
"""Where each node of a tree sits, by `id`."""
Varying = list[tuple[ast.Constant, int, int]]
"""The integers of a loop body that count along the run, each with its first value and step."""


def list_name(indexed: ast.expr, element: str, zipped: dict[str, str], another: bool) -> str:
    """The name of the elements of the list `indexed` (`params["blocks"]`) a loop goes over:
    torch's (`block`), the zipped one (`gate` of `zip(self.blocks, self.gates)`), or the
    element's and the list's (`block_gates`) for `another` list beside the first."""
    root = chain_root(indexed)
    base = element if root == "params" else f"{element}_{root}"
    keys = [k for k in chain_keys(indexed) if isinstance(k, str)]
    if keys and keys[-1] in zipped:  # `for block, gate in zip(self.blocks, self.gates)`
        return zipped[keys[-1]]
    if another and keys and root == "params":  # another list beside the first (`block_gates`)
        return f"{element}_{keys[-1]}"
    return base


def list_header(
    scope: Scope, varying: Varying, places: Places, name_of: Callable[[ast.expr, bool], str]
) -> tuple[ast.expr, ast.expr]:
    """`for block in params["blocks"]` (`zip` for several lists): each `list[i]` becomes the
    element, named by `name_of(list, whether another list came first)`."""
    lists: dict[str, tuple[ast.expr, str]] = {}
    for node, _, _ in varying:
        parent = indexed_list(places, node)
        key = ast.dump(parent.value)
        if key not in lists:
            lists[key] = (parent.value, scope.fresh(name_of(parent.value, bool(lists)), "loop"))
        put(*places[id(parent)], named(lists[key][1]))
    names: list[ast.expr] = [named(n, ast.Store()) for _, n in lists.values()]
    iterables = [copy.deepcopy(e) for e, _ in lists.values()]
    target = names[0] if len(names) == 1 else ast.Tuple(names, ast.Store())
    iterable = iterables[0] if len(iterables) == 1 else ast.Call(named("zip"), iterables, [])
    return target, iterable


def unpacked(scope: Scope, target: ast.expr, tree: ast.AST, names: list[str], length: int | None) -> ast.expr:
    """`for attn, ff in params["layers"]` where the body reads its element only as `layer[0]`,
    `layer[1]`, torch unpacked it into `names` and each element is a list of that `length` (not
    where a module without parameters left it shorter): the target unpacked, each item read by
    torch's name. Otherwise `target` as it was."""
    if not names or not isinstance(target, ast.Name) or length != len(names):
        return target
    element = target.id
    places = places_of(tree)
    items: list[tuple[Place, int]] = []
    for parent, attr, _, node in positions(tree):
        if isinstance(node, ast.Name) and node.id == element:
            item = isinstance(parent, ast.Subscript) and isinstance(parent.slice, ast.Constant)
            if not (item and attr == "value"):
                return target  # the element read whole: it stays one name
            assert isinstance(parent, ast.Subscript) and isinstance(parent.slice, ast.Constant)
            k = parent.slice.value
            if type(k) is not int or not 0 <= k < len(names):
                return target
            items.append((places[id(parent)], k))
    fresh = [scope.fresh(name, "loop") for name in names]
    for place, k in items:
        put(*place, named(fresh[k]))
    return ast.Tuple([named(n, ast.Store()) for n in fresh], ast.Store())


def places_of(tree: ast.AST) -> Places:
    """Where each node of `tree` sits, by `id`."""
    return {id(node): (parent, attr, index) for parent, attr, index, node in positions(tree)}


def sliced(iterable: ast.expr, start: int) -> ast.expr:
    """The header's lists from `start` on (`params["block"][1:]`, each list of a `zip`)."""
    if not start:
        return iterable
    def tail(node: ast.expr) -> ast.expr:
        return ast.Subscript(node, ast.Slice(ast.Constant(start), None, None), ast.Load())
    if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name) and iterable.func.id == "zip":
        return ast.Call(iterable.func, [tail(a) for a in iterable.args], [])
    return tail(iterable)


def range_header(
    scope: Scope, varying: Varying, places: Places, index: str, count: int
) -> tuple[ast.expr, ast.expr]:
    """`for i in range(count)`: each integer that counts becomes `i` (`2 * i + 1`)."""
    index_name = scope.fresh(index, "loop")
    for node, v0, step in varying:
        put(*places[id(node)], affine(index_name, v0, step))
    return named(index_name, ast.Store()), ast.Call(named("range"), [ast.Constant(count)], [])


def indexed_list(places: Places, node: ast.Constant) -> ast.Subscript:
    """The `list[i]` an index of a params/state list sits in (`list_length` found it there)."""
    parent = places[id(node)][0]
    assert isinstance(parent, ast.Subscript)
    return parent


def affine(index: str, start: int, step: int) -> ast.expr:
    term: ast.expr = named(index) if step == 1 else ast.BinOp(ast.Constant(step), ast.Mult(), named(index))
    if start == 0:
        return term
    return (
        ast.BinOp(term, ast.Add(), ast.Constant(start))
        if start > 0
        else ast.BinOp(term, ast.Sub(), ast.Constant(-start))
    )


def chain_root(node: ast.expr) -> str | None:
    while isinstance(node, ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def chain_keys(node: ast.expr) -> list[Any]:
    keys = []
    while isinstance(node, ast.Subscript):
        if not isinstance(node.slice, ast.Constant):
            return []
        keys.append(node.slice.value)
        node = node.value
    return list(reversed(keys))


def list_length(ctx: Context, function: Function, places: Places, node: ast.AST) -> int | None:
    """How long the params/state list that `node` indexes is (None if it is not such an index)."""
    parent, attr, _ = places.get(id(node), (None, None, None))
    if not isinstance(parent, ast.Subscript) or attr != "slice":
        return None
    return tree_length(ctx, function, parent.value)


def tree_length(ctx: Context, function: Function, listed: ast.expr, *more: int) -> int | None:
    """How long the params/state list `listed` (`params["layers"]`) is, or its item `listed[i]`
    for `more` = (i,); None where it is no such list."""
    root = chain_root(listed)
    if root not in ("params", "state") or function.anchor is None:
        return None
    keys = chain_keys(listed)
    if not keys and not isinstance(listed, ast.Name):
        return None
    tree = ctx.roles.param_tree if root == "params" else ctx.roles.state_tree
    path = ".".join([function.anchor] * bool(function.anchor) + [str(k) for k in [*keys, *more]])
    return tree.lengths.get(path)


def even_steps(ints: list[list[int]]) -> list[tuple[int, int]] | None:
    """Per position, the integers of each segment as (first value, step), if they step evenly."""
    progressions = []
    for values in zip(*ints):
        step = values[1] - values[0]
        if any(v != values[0] + step * j for j, v in enumerate(values)):
            return None
        progressions.append((values[0], step))
    return progressions


def counting_ints(tree: ast.AST) -> list[ast.Constant]:
    """The integers under `tree` that may count up along a run, in field order: not the config a
    call passes to a shared def (`stride=2`), which must be equal for the calls to be one loop."""
    config = {
        id(n) for call in ast.walk(tree) if isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
        for keyword in call.keywords for n in ast.walk(keyword)
    }
    return [
        node for _, _, _, node in positions(tree)
        if isinstance(node, ast.Constant) and type(node.value) is int and id(node) not in config
    ]
