"""Lists of identical calls rolled back into comprehensions, inside one statement:
`[f(p[0], x), f(p[1], x)]` -> `[f(item, x) for item in p]` (`[expert(x) for expert in experts]`).

Split from `loops`, which rolls runs of statements into `for` loops and calls `reroll_lists` on
each statement after.
"""

from __future__ import annotations

import ast
import copy
from typing import cast

from jaxside.render import source as torch_source
from jaxside.render.ir import Function, Loop, Statement
from jaxside.render.lower.context import Context
from jaxside.render.lower.loop_headers import (
    Places,
    counting_ints,
    even_steps,
    list_header,
    list_length,
    list_name,
    range_header,
)
from jaxside.render.lower.places import positions, put
from jaxside.tracing.trace import Site


def reroll_lists(ctx: Context, function: Function, statement: Statement) -> None:
    """`[f(p[0], x), f(p[1], x)]` -> `[f(item, x) for item in p]`, inside one statement."""
    if isinstance(statement, Loop):
        return
    wrapped = ast.Expr(statement.value)
    holder = ast.Module([wrapped], [])
    for parent, attr, index, node in list(positions(holder)):
        if not isinstance(node, (ast.List, ast.Tuple)) or len(node.elts) < 2:
            continue
        if not all(isinstance(e, ast.Call) and isinstance(e.func, ast.Name) for e in node.elts):
            continue
        comprehension = _comprehension(ctx, function, node.elts, statement.site)
        if comprehension is None:
            continue
        if isinstance(node, ast.Tuple) and not (isinstance(parent, ast.Call) and attr == "args"):
            comprehension = ast.Call(ast.Name("tuple", ast.Load()), [comprehension], [])
        put(parent, attr, index, comprehension)
    statement.value = wrapped.value


def _comprehension(
    ctx: Context, function: Function, elements: list[ast.expr], site: Site | None
) -> ast.expr | None:
    progressions = _element_progressions(elements)
    if progressions is None:
        return None
    element = copy.deepcopy(elements[0])
    holder = ast.Expr(element)
    places: Places = {id(node): (parent, attr, index) for parent, attr, index, node in positions(holder)}
    varying = [(node, v0, step) for node, (v0, step) in zip(counting_ints(holder), progressions) if step]
    if not varying:
        return None
    comprehension = torch_source.within(site, torch_source.COMPREHENSIONS) if site else None
    torch_index, target = torch_source.loop_names(comprehension)
    count = len(elements)
    if all(
        v0 == 0 and step == 1 and list_length(ctx, function, places, node) == count
        for node, v0, step in varying
    ):
        loop_target, iterable = list_header(function.scope, varying, places, lambda indexed, _: list_name(
            indexed, target or "item", {}, False))
    else:
        loop_target, iterable = range_header(function.scope, varying, places, torch_index or "i", count)
    return ast.ListComp(holder.value, [ast.comprehension(loop_target, iterable, [], 0)])


def _element_progressions(elements: list[ast.expr]) -> list[tuple[int, int]] | None:
    """Each integer of the elements as (first value, step), if they are one form up to integers
    that step evenly."""
    forms = []
    for element in elements:
        copy_ = copy.deepcopy(element)
        ints = counting_ints(ast.Expr(copy_))
        values = [cast(int, n.value) for n in ints]  # `counting_ints` holds ints only
        for n in ints:
            n.value = 0
        forms.append((ast.dump(copy_), values))
    if any(f[0] != forms[0][0] or len(f[1]) != len(forms[0][1]) for f in forms):
        return None
    return even_steps([f[1] for f in forms])
