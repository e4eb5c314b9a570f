"""The names the torch code gave sizes: `bsz, seqlen, _ = x.shape` bound at the top of a def whose
numbers `render.lower.merge.input_sizes` writes as sizes of its arguments, `n = x.size(0)` likewise."""

from __future__ import annotations

import ast
from typing import Any, cast

from jaxside.render import source as torch_source
from jaxside.render.ir import Function, Statement, named
from jaxside.render.lower.merge.fitting import Atom, size_expr


def bind_sizes(function: Function, atoms: set[Atom]) -> dict[Atom, str]:
    """Bind at the top of `function` the sizes the torch def named (`bsz, seqlen, _ = x.shape`,
    `n = x.size(0)`); their names."""
    call = function.calls[0] if function.calls else None
    node = torch_source.function_at(torch_source.tree(call.file), call.line) if call else None
    if node is None:
        return {}
    ranks = {p: len(s) for p, s in function.arg_shapes.items()}
    unpacked: dict[str, list[str]] = {}
    single: dict[Atom, str] = {}
    for statement in node.body:
        if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
            continue
        target, value = statement.targets[0], statement.value
        whole = _shape_of(value)
        if whole in ranks and isinstance(target, ast.Tuple) and len(target.elts) == ranks[whole]:
            if all(isinstance(e, ast.Name) for e in target.elts):
                unpacked.setdefault(whole, [e.id for e in target.elts if isinstance(e, ast.Name)])
        dim = _dim_of(value)
        if dim is not None and dim[0] in ranks and isinstance(target, ast.Name):
            single.setdefault((dim[0], dim[1] % max(ranks[dim[0]], 1)), target.id)
    names: dict[Atom, str] = {}
    bindings: list[Statement] = []
    for param in function.arg_shapes:
        used = sorted(axis for p, axis in atoms if p == param)
        if param in unpacked and any(unpacked[param][axis] != "_" for axis in used):
            elements: list[ast.expr] = []
            for axis, torch_name in enumerate(unpacked[param]):
                if axis in used and torch_name != "_":
                    names[(param, axis)] = function.scope.fresh(torch_name, "local")
                    elements.append(named(names[(param, axis)], ast.Store()))
                else:
                    elements.append(named("_", ast.Store()))
            target = ast.Tuple(elements, ast.Store())
            flat = [e.id for e in elements if isinstance(e, ast.Name) and e.id != "_"]
            shape = ast.Attribute(named(param), "shape", ast.Load())
            bindings.append(Statement(flat, shape, [], None, target=target))
            continue
        for axis in used:
            if (param, axis) in single:
                name = names[(param, axis)] = function.scope.fresh(single[(param, axis)], "local")
                bindings.append(Statement([name], size_expr((param, axis)), [], None))
    function.body[:0] = bindings
    return names


def _shape_of(value: ast.expr) -> str | None:
    """`p` for `p.shape` or `p.size()`."""
    if isinstance(value, ast.Call) and not value.args and not value.keywords:
        value = value.func
        if isinstance(value, ast.Attribute) and value.attr == "size" and isinstance(value.value, ast.Name):
            return value.value.id
        return None
    if isinstance(value, ast.Attribute) and value.attr == "shape" and isinstance(value.value, ast.Name):
        return value.value.id
    return None


def _dim_of(value: ast.expr) -> Atom | None:
    """`(p, d)` for `p.shape[d]` or `p.size(d)` with a literal `d`."""
    if isinstance(value, ast.Subscript) and _shape_of(value.value) and isinstance(value.slice, ast.Constant):
        index = value.slice.value
        return (_shape_of(value.value) or "", index) if isinstance(index, int) else None
    if (
        isinstance(value, ast.Call) and len(value.args) == 1 and isinstance(value.func, ast.Attribute)
        and value.func.attr == "size" and isinstance(value.func.value, ast.Name)
        and isinstance(value.args[0], ast.Constant) and isinstance(value.args[0].value, int)
    ):
        return value.func.value.id, value.args[0].value
    if isinstance(value, ast.Subscript) and isinstance(value.slice, ast.UnaryOp):  # p.shape[-1]
        operand = value.slice.operand
        whole = _shape_of(value.value)
        if isinstance(value.slice.op, ast.USub) and isinstance(operand, ast.Constant) and whole:
            return whole, -int(cast(Any, operand.value))
    return None
