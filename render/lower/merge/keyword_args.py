"""Config numbers that differ between the variants sharing a def, as its keyword-only arguments.

Blocks of one class built with other strides (a ResNet block that downsamples, one that does not)
run the same torch code with other static numbers: `window_strides=(2, 2)` here, `(1, 1)` there.
No size gives them, so the shared def takes them as arguments, `*, stride`, and each call passes
its own (`basic_block_forward(params["layer2"][0], x, stride=2)`), as a hand port does. A number
inside a keyword of a call takes that keyword's torch name (`stride`, `padding`, `dilation`,
`groups`, `kernel_size`; a def's own keyword keeps its name, so one passed down reads
`stride=stride`); a tuple whose numbers are equal in each call is one number (`(stride, stride)`),
any other is passed whole. Numbers with the same name and the same value in every call are one
argument; the same name with other values takes the torch attribute called
(`conv_dw_stride`). A number only some calls' statements have (one under a flag of the def,
`render.lower.merge.branch_flags`) defaults to the commonest value, which those calls leave out. The def runs
the very same Python numbers at each call, so it stages the same equations as the defs it
replaces.
"""

from __future__ import annotations

import ast
import copy
from collections import Counter
from typing import Any

from jaxside.render import source as torch_source
from jaxside.render.ir import Function, Keyword, named
from jaxside.render.lower.places import place_in, put

Difference = tuple[ast.AST, str, int | None, list[Any]]
"""Where a number differs between the defs: (parent, field, index or None, value in each def,
None in a def that did not run that statement)."""

TORCH_NAMES = {
    "window_strides": "stride",
    "rhs_dilation": "dilation",
    "feature_group_count": "groups",
    "window_dimensions": "kernel_size",
}
"""The torch attribute (`nn.Conv2d.stride`) for the keyword of the JAX call that takes it."""


def config_keywords(
    function: Function, tree: ast.Module, differences: list[Difference], functions: list[Function]
) -> list[Keyword]:
    """Replace each difference in `tree` (the body of `function`, the first of `functions`) by a
    keyword-only argument; the keywords with the value each call of `functions[k]` passes."""
    parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    statements = {id(node): i for i, top in enumerate(tree.body) for node in ast.walk(top)}
    by_place: dict[int, tuple[ast.keyword | None, list[ast.Constant], list[Any]]] = {}
    for parent, attr, index, values in differences:
        constant = getattr(parent, attr) if index is None else getattr(parent, attr)[index]
        holder = _keyword_of(constant, parents)
        key = id(holder) if holder is not None else id(constant)
        by_place.setdefault(key, (holder, [], []))
        by_place[key][1].append(constant)
        by_place[key][2].append(values)
    found: list[tuple[str, list[ast.expr | None], int, list[tuple[ast.AST, str, int | None]]]] = []
    for holder, constants, rows in by_place.values():
        name = _base_name(holder, [v for v in rows[0] if v is not None])
        uniform = all(len({row[k] for row in rows}) == 1 for k in range(len(functions)))
        ran = [k for k in range(len(functions)) if rows[0][k] is not None]
        given: list[ast.expr | None] = [None] * len(functions)
        if holder is None or uniform:
            for k in ran:
                given[k] = ast.Constant(rows[0][k])
            places = [place_in(parents[id(c)], c) for c in constants]
        else:
            for k in ran:
                for constant, row in zip(constants, rows):
                    constant.value = row[k]
                given[k] = copy.deepcopy(holder.value)
            places = [(holder, "value", None)]
        found.append((name, given, statements.get(id(constants[0]), -1), places))
    return _named(function, functions, found)


def _keyword_of(node: ast.AST, parents: dict[int, ast.AST]) -> ast.keyword | None:
    """The keyword of a call whose value holds the number (through tuples and signs), if any."""
    parent = parents.get(id(node))
    while isinstance(parent, (ast.Tuple, ast.List, ast.UnaryOp)):
        parent = parents.get(id(parent))
    return parent if isinstance(parent, ast.keyword) and parent.arg else None


def _base_name(holder: ast.keyword | None, values: list[Any]) -> str:
    if holder is not None and holder.arg:
        return TORCH_NAMES.get(holder.arg, holder.arg)
    return "n" if all(type(v) is int for v in values) else "value"


def _named(
    function: Function,
    functions: list[Function],
    found: list[tuple[str, list[ast.expr | None], int, list[tuple[ast.AST, str, int | None]]]],
) -> list[Keyword]:
    """One keyword per name and values; a name with other values prefixed by its torch attribute."""
    values_of: dict[str, set[str]] = {}
    for name, given, _, _ in found:
        values_of.setdefault(name, set()).add(_dumps(given))
    keywords: dict[tuple[str, str], Keyword] = {}
    for name, given, statement, places in found:
        values = _dumps(given)
        base = name
        if len(values_of[name]) > 1:
            attribute = _attribute(function, statement)
            base = f"{attribute}_{name}" if attribute else name
        keyword = keywords.get((base, values))
        if keyword is None:
            by_call = {id(c): expr for f, expr in zip(functions, given) if expr is not None for c in f.calls}
            default = None
            if None in given:  # calls that do not run it pass nothing: the commonest value
                dumps = Counter(ast.dump(v) for v in by_call.values())
                default = next(v for v in by_call.values() if ast.dump(v) == dumps.most_common(1)[0][0])
            fresh = function.scope.fresh(base, "argument")
            keyword = keywords[(base, values)] = Keyword(fresh, by_call, copy.deepcopy(default))
        for parent, attr, index in places:
            put(parent, attr, index, named(keyword.name))
    return list(keywords.values())


def _dumps(given: list[ast.expr | None]) -> str:
    return repr([None if g is None else ast.dump(g) for g in given])


def _attribute(function: Function, statement: int) -> str | None:
    """The torch attribute the statement's source calls (`conv_dw` for `self.conv_dw(x)`)."""
    if not 0 <= statement < len(function.body) or function.body[statement].site is None:
        return None
    found = torch_source.expression(function.body[statement].site)
    expr = found[0] if found else None
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
        return expr.func.attr
    return None
