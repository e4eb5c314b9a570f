"""Unifying programs traced at other sizes: the numbers of one program that differ in the others,
each fitted to an expression of its def's arguments' shapes (`unify`), written there (`Plan.apply`).

What `input_sizes` asks of each attempt at moving some of the inputs' sizes.
"""

from __future__ import annotations

import ast
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, cast

from jaxside.render.ir import Define, Function, Loop, Program, Statement, named
from jaxside.render.lower.merge.fitting import Fit, expression, fit, parallel_diff
from jaxside.render.lower.merge.size_names import bind_sizes

REFUSED = "the torch code fails at"
"""How the reason for a size the torch code itself does not take begins (no guard for those)."""

class Unfit(Exception):
    """The programs at two sizes cannot be one program; the message says why.

    `more`: the programs with any others cannot be one either. So for every reason but a statement
    of another form (`parallel_diff`): a number that is an int at one size and the same float at
    another is of another form, yet follows the size once a third size gives another number."""

    def __init__(self, message: str, more: bool = True) -> None:
        super().__init__(message)
        self.more = more


@dataclass
class _Change:
    function: Function
    parent: Any
    attr: str
    index: int | None
    fit: Fit
    is_float: bool


@dataclass
class Plan:
    """The numbers of a program to write as expressions of its defs' arguments' shapes."""

    program: Program
    """The program the changes are in (the one traced at the example sizes, or at twice a size 1)."""
    changes: list[_Change] = field(default_factory=list)
    redirect: dict[int, tuple[Any, str]] = field(default_factory=dict)
    trees: list[Any] = field(default_factory=list)
    """The `ast` the changes point into (kept alive: `redirect` is by id)."""
    bounded: dict[int, str] = field(default_factory=dict)
    """The sets (by index) fitted below their traced size, which is their largest: why no larger."""
    below: bool = False
    """Whether `program` is one at smaller sizes (the traced one lacked an equation they have)."""

    def apply(self) -> None:
        by_function: dict[int, list[_Change]] = {}
        for change in self.changes:
            by_function.setdefault(id(change.function), []).append(change)
        for changes in by_function.values():
            function = changes[0].function
            atoms = {a for c in changes for a in c.fit[1] if a[0] in function.arg_shapes}
            names = bind_sizes(function, atoms)
            for c in changes:
                expr = expression(c.fit, names)
                if c.is_float and not isinstance(c.parent, ast.BinOp):
                    expr = ast.Call(named("float"), [expr], [])
                owner, attr = self.redirect.get(id(c.parent), (c.parent, c.attr))
                if c.index is None:
                    setattr(owner, {"iter": "iterable"}.get(attr, attr), expr)
                else:
                    getattr(owner, attr)[c.index] = expr
            _leading_shapes(function)


def _leading_shapes(function: Function) -> None:
    """`(*x.shape[:3], 8, 2)` for `(x.shape[0], x.shape[1], x.shape[2], 8, 2)`, as torch code writes it."""
    for node in ast.walk(_tree(function)[0]):
        if not isinstance(node, ast.Tuple) or not isinstance(node.ctx, ast.Load):
            continue
        leading = 0
        while leading < len(node.elts) - 1 and _shape_at(node.elts[leading], leading, node.elts[0]):
            leading += 1
        if leading >= 2:
            shape = cast(ast.Subscript, node.elts[0]).value  # `x.shape` of `x.shape[0]` (`_shape_at`)
            prefix = ast.Subscript(shape, ast.Slice(None, ast.Constant(leading)), ast.Load())
            node.elts[:leading] = [ast.Starred(prefix, ast.Load())]


def _shape_at(node: ast.expr, axis: int, first: ast.expr) -> bool:
    """Whether `node` is `x.shape[axis]` for the `x` of `first`."""
    return (
        isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == axis
        and isinstance(node.value, ast.Attribute) and node.value.attr == "shape"
        and isinstance(first, ast.Subscript) and ast.dump(node.value) == ast.dump(first.value)
    )


def unify(base: Program, others: list[Program]) -> Plan:
    """The plan writing `base`'s numbers that differ in `others` (the same code at other sizes) as
    shape expressions, or `Unfit` saying why there is none."""
    programs = [base, *others]
    if any(_dumps(p.constants) != _dumps(base.constants) for p in others):
        raise Unfit("module-level constants change with the size")
    if any([f.name for f in p.functions] != [f.name for f in base.functions] for p in others):
        raise Unfit("the defs change with the size (a Python branch or loop on it)")
    helpers = [h.name for h in base.helpers]
    if any([h.name for h in p.helpers] != helpers for p in others):
        raise Unfit("the helper defs change with the size")
    plan = Plan(base)
    for index, function in enumerate(base.functions + base.helpers):
        versions = [(p.functions + p.helpers)[index] for p in programs]
        trees = []
        for version in versions:
            tree, redirect = _tree(version)
            trees.append(tree)
            if version is function:
                plan.redirect.update(redirect)
        plan.trees += trees
        for statements in zip(*(t.body for t in trees)):
            diffs: list[Any] = []
            if not parallel_diff(list(statements), diffs, numbers=True):
                raise Unfit(f"`{function.name}` changes with the size (a Python branch or loop on it)", False)
            if not diffs:
                continue
            # Values the statement reads exist before it; in a loop or a nested def, maybe not.
            flat = not isinstance(statements[0], (ast.For, ast.FunctionDef))
            names = [n for n in ast.walk(statements[0]) if isinstance(n, ast.Name) and flat]
            read = {n.id for n in names if isinstance(n.ctx, ast.Load)}
            shapes = [{**v.arg_shapes, **_read(v, read)} for v in versions]
            for parent, attr, at, values in diffs:
                whole = all(math.isfinite(v) and v == int(v) for v in values)
                found = fit([int(v) for v in values], shapes) if whole else None
                if found is None:
                    where = f"{values[0]} in `{function.name}`"
                    raise Unfit(f"{where} follows the size, but no shape of its values gives it")
                is_float = any(isinstance(v, float) for v in values)
                plan.changes.append(_Change(function, parent, attr, at, found, is_float))
        if len({len(t.body) for t in trees}) > 1:  # `zip` stopped at the shortest: statements more or fewer
            raise Unfit(f"`{function.name}` changes with the size (a Python branch or loop on it)")
    return plan


def _read(function: Function, read: set[str]) -> dict[str, tuple[int, ...]]:
    """The shapes of the values of `function` a statement reads (not its parameters), for names
    bound once: a name a loop rebinds (`x = block(x)` rolled up) holds values of other shapes."""
    tree = _tree(function)[0]
    stores = Counter(_stored(tree))
    for loop in (n for n in ast.walk(tree) if isinstance(n, ast.For)):
        stores.update(_stored(loop))  # once more: bound again each time round
    return {
        n: s for n, s in function.value_shapes.items()
        if n in read and n not in function.arg_shapes and stores[n] == 1
    }


def _stored(tree: ast.AST) -> list[str]:
    return [n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]


def _dumps(items: Any) -> list[str]:
    """Comparable text of the module's constants (`(name, value)` pairs) or of `ast` nodes."""
    def dump(item: Any) -> str:
        if isinstance(item, ast.AST):
            return ast.dump(item)
        return repr([dump(part) for part in item]) if isinstance(item, tuple) else repr(item)

    return [dump(item) for item in items]


def _tree(function: Function) -> tuple[ast.Module, dict[int, tuple[Any, str]]]:
    """The body of `function` as one `ast`, and for each statement node made for it (not shared
    with the program) the object whose field holds that node's value."""
    redirect: dict[int, tuple[Any, str]] = {}

    def statements(body: list[Statement], owner: Function) -> list[ast.stmt]:
        nodes: list[ast.stmt] = []
        for statement in body:
            node = statement.node()
            held = cast(ast.If, node).body[0] if statement.when is not None else node  # `if when: ...`
            redirect[id(held)] = (statement, "value")
            if isinstance(statement, Loop) and isinstance(node, ast.For):
                node.body = statements(statement.body, owner)
            elif isinstance(statement, Define) and statement.function is not None:
                inner = statement.function
                assert isinstance(node, ast.FunctionDef)
                node.body = statements(inner.body, inner) + returns(inner)
            nodes.append(node)
        return nodes

    def returns(owner: Function) -> list[ast.stmt]:
        if owner.returns is None:
            return []
        node = ast.Return(owner.returns)
        redirect[id(node)] = (owner, "returns")
        return [node]

    return ast.Module(statements(function.body, function) + returns(function), []), redirect
