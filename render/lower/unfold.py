"""Long statements given shorter lines: a folded call that makes its statement sprawl is named.

Lowering folds a value used once into the expression that uses it, as the torch code nests
`self.feed_forward(self.ffn_norm(h))`. Where the statement that makes is one `ruff format` lays
over several lines,

    feed_forward = feed_forward_forward(
        params["feed_forward"], rms_norm_forward(params["ffn_norm"], h)
    )

a person names a part of it first:

    ffn_norm_h = rms_norm_forward(params["ffn_norm"], h)
    feed_forward = feed_forward_forward(params["feed_forward"], ffn_norm_h)

`unfold` does that for each statement (and `return`) of a def, once the def's text is final
(after sizes are generalized). A part is taken only if it has a name that is not a guess: a call
of another def, named as the torch call site names it (`self.ffn_norm(h)`), or a call of a
`jax.nn` function, named after the function (`softmax`); and not one named like the statement
it is taken from (`act_fn` out of `act_fn = self.act_fn(...) * self.up_proj(x)`). It is taken
only where the two statements take fewer lines than the one did (at the module's width), the
best such part first, and the statements that result are unfolded again. Values are only named,
never moved past anything that could change them, so what is computed is unchanged.
"""

from __future__ import annotations

import ast
import copy
import re
from collections.abc import Iterator

from jaxside.render.ir import Define, Fold, Function, Guard, Loop, Statement, fold_of, named, unfolded
from jaxside.render.layout import MODULE_WIDTH, format_statement
from jaxside.render.lower.places import place_under, put

__all__ = ["unfold"]

_OPAQUE = (ast.Lambda, ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp, ast.IfExp, ast.BoolOp)
"""Parts of an expression evaluated later, or only sometimes: nothing is taken out of them."""


def unfold(function: Function, width: int = MODULE_WIDTH) -> None:
    """Name the sprawling folded calls of `function`'s statements, in place."""
    function.body = _block(function, function.body, 4, width)
    if function.returns is not None:
        returned = Statement([], function.returns, [], None)
        *before, last = _split(function, returned, 4, width, ast.Return)
        function.body += before
        function.returns = last.value


def _block(function: Function, body: list[Statement], indent: int, width: int) -> list[Statement]:
    result: list[Statement] = []
    for statement in body:
        if isinstance(statement, Loop):
            statement.body = _block(function, statement.body, indent + 4, width)
            result.append(statement)
        elif isinstance(statement, (Guard, Define)):
            result.append(statement)
        else:
            result += _split(function, statement, indent + 4 * (statement.when is not None), width)
    return result


def _split(
    function: Function, statement: Statement, indent: int, width: int, kind: type = ast.Assign
) -> list[Statement]:
    """`statement`, or the statements naming parts of it, each again split where that helps."""
    lines = _lines(statement, indent, width, kind)
    if lines <= 2:
        return [statement]
    best: tuple[int, ast.expr, str, Fold] | None = None
    value = copy.deepcopy(statement.value)
    own = {re.sub(r"_\d+$", "", t) for t in statement.targets}
    for parent, field, index, part, fold, name in _parts(value):
        if name in own or (function.scope.outer is not None and function.scope.outer.taken(name)):
            continue  # `act_fn_1 = act_fn(...)` before `act_fn = act_fn_1 * ...` would mislead; a def's name
            # would be `feed_forward_out`
        hole = named(name)
        put(parent, field, index, hole)
        rest = _with_value(statement, value, statement.eqns)
        taken = _lines(Statement([name], part, [], None), indent, width, ast.Assign)
        total = taken + _lines(rest, indent, width, kind)
        put(parent, field, index, part)
        if total < lines and (best is None or total < best[0]):
            best = (total, part, name, fold)
    if best is None:
        return [statement]
    _, part, base, fold = best
    name = function.scope.fresh(base, "expression")
    parent, field, index = place_under(value, part)
    put(parent, field, index, named(name))
    eqns = [e for e in fold.eqns if e in statement.eqns] if statement.eqns else list(fold.eqns)
    first = Statement([name], part, eqns, fold.site, fold.call, when=copy.deepcopy(statement.when))
    unfolded(part, mark=True)
    rest = _with_value(statement, value, [e for e in statement.eqns if e not in eqns])
    return _split(function, first, indent, width) + _split(function, rest, indent, width, kind)


def _lines(statement: Statement, indent: int, width: int, kind: type) -> int:
    node = ast.Return(statement.value) if kind is ast.Return else statement.plain()
    return len(format_statement(node, indent, width))


def _with_value(statement: Statement, value: ast.expr, eqns: list[int]) -> Statement:
    rest = copy.copy(statement)
    rest.value, rest.eqns = value, eqns
    return rest


def _parts(value: ast.expr) -> Iterator[tuple[ast.AST, str, int | None, ast.expr, Fold, str]]:
    """The named folded calls in `value` (not `value` itself), outermost first, with where each is."""
    stack: list[ast.AST] = [value]
    while stack:
        parent = stack.pop(0)
        if isinstance(parent, _OPAQUE):
            continue
        for field, child in ast.iter_fields(parent):
            items = list(enumerate(child)) if isinstance(child, list) else [(None, child)]
            for index, item in items:
                if not isinstance(item, ast.AST):
                    continue
                fold = fold_of(item)
                name = _name(item, fold) if fold is not None else None
                if name is not None:
                    assert isinstance(item, ast.expr) and fold is not None
                    yield parent, field, index, item, fold, name
                stack.append(item)


def _name(node: ast.AST, fold: Fold) -> str | None:
    if not isinstance(node, ast.Call):
        return None
    if fold.name:
        return fold.name
    func = node.func
    if (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Attribute)
        and func.value.attr == "nn"
        and isinstance(func.value.value, ast.Name)
        and func.value.value.id == "jax"
    ):
        return func.attr
    return None
