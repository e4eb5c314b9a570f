"""Calls of one function that differ only in numbers share one def (one per kind).

Defs written for the same torch function whose bodies differ only in numbers are merged. A
number that follows the sizes of the def's arguments becomes `x.shape[d]` (or `x.shape[1] * 2`),
else one that a parameter's size gives `params["conv"]["bias"].shape[0]`, else a keyword-only
argument each call passes (`stride=2`, `render.lower.config`): blocks of a ResNet or an
EfficientNet with other widths, strides and kernels share a def. Defs whose bodies differ
otherwise (a block that ran its downsample branch, one that did not) stay apart, one per kind,
named by the branch (`basic_block_forward_downsample`). Comparing defs and fitting numbers to
sizes (`parallel_diff`, `fit`) live here; `render.lower.dims` does the same across programs
traced at other input sizes.
"""

from __future__ import annotations

import ast
from typing import Any

from jaxside.render.ir import Function, named
from jaxside.render.lower.calltree import Group
from jaxside.render.lower.config import config_keywords, kind_suffixes

Atom = tuple[str, int]
"""A dimension of a def's argument: (parameter, axis)."""
Fit = tuple[str, tuple[Atom, ...], int]
"""How a number follows the sizes: (kind, atoms, constant); kinds in `_FORMS`."""

_FORMS = ("atom", "mul", "div", "prod", "add")
"""Tried in this order: `a`, `a * c`, `a // c`, `a * b`, `a + c`: the first that gives every value."""


def merge_variants(level: list[Group]) -> dict[int, str]:
    """Calls of one function that differ only in numbers share one def; the suffix of each def
    of a function with defs of several kinds (`_downsample`), by the def's `id`."""
    by_code: dict[tuple, list[Group]] = {}
    suffixes: dict[int, str] = {}
    for group in level:
        if group.nodes[0].parent is not None:
            by_code.setdefault(group.nodes[0].code, []).append(group)
    for variants in by_code.values():
        kinds: list[list[Group]] = []  # with and without a downsample branch: two kinds
        for group in variants:
            kind = next((k for k in kinds if _alike(k[0], group)), None)
            if kind is None:
                kinds.append([group])
            else:
                kind.append(group)
        for kind in kinds:
            if len(kind) > 1:
                _merge_shapes(kind)
        if len(kinds) > 1:
            functions = [kind[0].function for kind in kinds if kind[0].function is not None]
            suffixes.update(kind_suffixes(functions))
    return suffixes


def _alike(a: Group, b: Group) -> bool:
    """Whether two defs of one function are called alike and differ at most in numbers."""
    f, g = a.function, b.function
    assert f is not None and g is not None
    return (
        f.params == g.params and f.operands == g.operands and f.packing == g.packing
        and f.out_slots == g.out_slots and f.ret_paths == g.ret_paths and f.state_out == g.state_out
        and parallel_diff([_body_module(f), _body_module(g)], [], numbers=True)
    )


def _merge_shapes(variants: list[Group]) -> None:
    """Merge defs whose bodies differ only in numbers: those that follow the sizes of their
    arguments or parameters become shape expressions, the others keyword-only arguments."""
    functions = [g.function for g in variants if g.function is not None]
    first = functions[0]
    trees = [_body_module(f) for f in functions]
    differences: list[tuple[ast.AST, str, int | None, list[Any]]] = []
    if not parallel_diff(trees, differences, numbers=True):
        return
    if any(isinstance(parent, ast.stmt) for parent, _, _, _ in differences):
        return  # a statement's whole value: `Statement.node()` makes that node afresh each time
    shapes = [f.arg_shapes for f in functions]
    parents = {id(child): node for node in ast.walk(trees[0]) for child in ast.iter_child_nodes(node)}
    configs = []
    for parent, attr, index, values in differences:
        expr = None
        if all(type(v) is int for v in values):
            found = fit(values, shapes, forms=("atom", "mul"))  # a width, twice a width: not a stride
            expr = expression(found) if found else _param_size(values, functions, _call_of(parent, parents))
        if expr is None:
            configs.append((parent, attr, index, values))
        else:
            _put(parent, attr, index, expr)
    first.keywords = config_keywords(first, trees[0], configs, functions)
    for function in functions[1:]:
        first.calls += function.calls
    for group in variants[1:]:
        group.function = first


def _put(parent: ast.AST, attr: str, index: int | None, expr: ast.expr) -> None:
    if index is None:
        setattr(parent, attr, expr)
    else:
        getattr(parent, attr)[index] = expr


def _call_of(node: ast.AST, parents: dict[int, ast.AST]) -> str:
    """The source of the call a number is an argument of (`jnp.reshape(params["bias"], (1, 8))`)."""
    while node is not None and not isinstance(node, (ast.Call, ast.stmt)):
        node = parents.get(id(node))  # type: ignore[assignment]
    return ast.unparse(node) if isinstance(node, ast.Call) else ""


def _param_size(values: list[int], functions: list[Function], near: str) -> ast.expr | None:
    """`params["conv"]["bias"].shape[0]`: a size of a parameter the def reads, giving every value;
    first of a parameter the same call reads (`jnp.reshape` of that bias)."""
    leaves = sorted(functions[0].param_shapes.items(), key=lambda item: item[0] not in near)
    for leaf, shape in leaves:
        found = [f.param_shapes.get(leaf) for f in functions]
        for axis in range(len(shape)):
            if all(s is not None and len(s) == len(shape) and s[axis] == v for s, v in zip(found, values)):
                read = ast.Attribute(ast.parse(leaf, mode="eval").body, "shape", ast.Load())
                return ast.Subscript(read, ast.Constant(axis), ast.Load())
    return None


def _body_module(function: Function) -> ast.Module:
    body: list[ast.stmt] = [s.node() for s in function.body]
    if function.returns is not None:
        body.append(ast.Return(function.returns))
    return ast.Module(body, [])


# -- comparing defs -------------------------------------------------------------------------------


def parallel_diff(trees: list[Any], out: list, numbers: bool = False) -> bool:
    """Walk equal-shaped trees; collect the int constants that differ (any numbers, with
    `numbers`) as `(parent, field, index or None, values)`; False on any other difference."""
    first = trees[0]
    if any(type(t) is not type(first) for t in trees):
        return False
    for attr, value in ast.iter_fields(first):
        others = [getattr(t, attr) for t in trees]
        if isinstance(value, list):
            if any(not isinstance(o, list) or len(o) != len(value) for o in others):
                return False
            for i, item in enumerate(value):
                items = [o[i] for o in others]
                if isinstance(item, ast.AST):
                    if isinstance(item, ast.Constant) and _number_differs(items, numbers):
                        out.append((first, attr, i, [it.value for it in items]))
                    elif not parallel_diff(items, out, numbers):
                        return False
                elif any(it != item for it in items):
                    return False
        elif isinstance(value, ast.AST):
            if isinstance(value, ast.Constant) and _number_differs(others, numbers):
                out.append((first, attr, None, [o.value for o in others]))
            elif not parallel_diff(others, out, numbers):
                return False
        elif attr not in ("ctx", "lineno", "col_offset", "end_lineno", "end_col_offset") and any(
            o != value or type(o) is not type(value) for o in others
        ):
            return False
    return True


def _number_differs(nodes: list[Any], numbers: bool) -> bool:
    kinds = (int, float) if numbers else (int,)
    values = [n.value for n in nodes if isinstance(n, ast.Constant)]
    return len(values) == len(nodes) and all(type(v) in kinds for v in values) and len(set(values)) > 1


# -- fitting a number ---------------------------------------------------------------------------------


def fit(
    values: list[int], shapes: list[dict[str, tuple[int, ...]]], forms: tuple[str, ...] = _FORMS
) -> Fit | None:
    """The first form in `forms` over the arguments' dimensions that gives `values[k]` from
    `shapes[k]` for every k (the same def at each size), or None."""
    first = shapes[0]
    atoms = [
        (p, d) for p, shape in first.items() for d in range(len(shape))
        if all(p in s and len(s[p]) == len(shape) for s in shapes)
    ]

    def size(atom: Atom, k: int) -> int:
        return shapes[k][atom[0]][atom[1]]

    def gives(kind: str, used: tuple[Atom, ...], c: int) -> bool:
        return all(_value(kind, [size(a, k) for a in used], c) == v for k, v in enumerate(values))

    v0 = values[0]
    for kind in forms:
        pairs: list[tuple[Atom, ...]] = [(a,) for a in atoms]
        if kind == "prod":  # two dimensions before one squared
            pairs = [(a, b) for i, a in enumerate(atoms) for b in atoms[i + 1 :]]
            pairs += [(a, a) for a in atoms]
        for used in pairs:
            a0 = size(used[0], 0)
            c = {"mul": v0 // a0 if a0 and v0 % a0 == 0 else 0, "div": a0 // v0 if v0 else 0,
                 "add": v0 - a0}.get(kind, 0)
            if kind in ("mul", "div") and c < 2 or kind == "add" and c == 0:
                continue
            if gives(kind, used, c):
                return kind, used, c
    return None


def _value(kind: str, sizes: list[int], c: int) -> int:
    if kind == "atom":
        return sizes[0]
    if kind == "mul":
        return sizes[0] * c
    if kind == "div":
        return sizes[0] // c
    if kind == "prod":
        return sizes[0] * sizes[1]
    return sizes[0] + c


def size_expr(atom: Atom, names: dict[Atom, str] | None = None) -> ast.expr:
    """The name the def gave a dimension, else `x.shape[d]`."""
    if names and atom in names:
        return named(names[atom])
    shape = ast.Attribute(named(atom[0]), "shape", ast.Load())
    return ast.Subscript(shape, ast.Constant(atom[1]), ast.Load())


def expression(found: Fit, names: dict[Atom, str] | None = None) -> ast.expr:
    kind, atoms, c = found
    first = size_expr(atoms[0], names)
    if kind == "atom":
        return first
    if kind == "prod":
        return ast.BinOp(first, ast.Mult(), size_expr(atoms[1], names))
    op: ast.operator = {"mul": ast.Mult(), "div": ast.FloorDiv()}.get(kind, ast.Add() if c > 0 else ast.Sub())
    return ast.BinOp(first, op, ast.Constant(abs(c)))
