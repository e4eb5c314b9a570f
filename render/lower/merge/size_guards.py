"""Fixed and bounded sizes: at the top of the entry, a `ValueError` for an argument (or a
buffer) called at a size the export does not take, instead of wrong numbers or a shape error."""

from __future__ import annotations

import ast
import re

from jaxside.render.ir import Dim, Guard, Program, Statement, named
from jaxside.render.names import is_index


def guard_sizes(program: Program, fixed: list[Dim], tied: list[list[Dim]], at_most: list[Dim]) -> None:
    """At the top of the entry, a `ValueError` for each fixed argument dimension called at another
    size, each bounded one called at a larger size, and each one called at another size than the
    first of its tied set."""
    checks: list[tuple[Dim, ast.cmpop, ast.expr, str]] = [
        (d, ast.NotEq(), ast.Constant(d.size), f"is fixed at {d.size} (the docstring says why)")
        for d in fixed
    ]
    checks += [(d, ast.Gt(), ast.Constant(d.size), f"is at most {d.size} (the docstring says why)")
               for d in at_most]
    for dims in filter(None, tied):
        first = _dim_expr(program, dims[0])
        if first is not None:
            checks += [(d, ast.NotEq(), first, f"must equal {_shown(program, dims[0])}") for d in dims[1:]]
    guards: list[Statement] = []
    for d, op, expected, said in checks:
        shape = _dim_expr(program, d)
        if shape is not None:
            message = f"{_shown(program, d)} {said}"
            test = ast.Compare(shape, [op], [expected])
            guards.append(Guard([], test, [], None, message=message))
    program.entry.body[:0] = guards


def _shown(program: Program, d: Dim) -> str:
    """`d` as the export names it: its argument renamed where it is (`params` -> `params_1`)."""
    root = re.match(r"[^\W\d]\w*", d.input)
    new = program.entry.arg_names.get(root.group(0)) if root and not d.state else None
    return str(d) if root is None or new is None else new + str(d)[len(root.group(0)):]


def _dim_expr(program: Program, d: Dim) -> ast.expr | None:
    """`x.shape[1]` for an argument dimension of the entry (None if its argument has no name there),
    `state["layers"][0]["k_cache"].shape[2]` for a buffer's."""
    if d.state:
        tree = "state" if d.input in program.state_paths else "params"
        if tree not in ("state" if program.takes_state else "", "params" if program.takes_params else ""):
            return None
        reference: ast.expr = named(tree)
        for part in d.input.split("."):
            key = ast.Constant(int(part) if is_index(part) else part)
            reference = ast.Subscript(reference, key, ast.Load())
        return ast.Subscript(ast.Attribute(reference, "shape", ast.Load()), ast.Constant(d.axis), ast.Load())
    try:
        reference = ast.parse(d.input, mode="eval").body
    except SyntaxError:
        return None
    root = reference
    while isinstance(root, ast.Subscript):
        root = root.value
    if isinstance(root, ast.Name):  # the input's name in the export (`params` -> `params_1`)
        root.id = program.entry.arg_names.get(root.id, root.id)
    if not isinstance(root, ast.Name) or root.id not in program.entry.params:
        return None
    return ast.Subscript(ast.Attribute(reference, "shape", ast.Load()), ast.Constant(d.axis), ast.Load())
