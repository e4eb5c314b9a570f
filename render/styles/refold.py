"""Statements a class style folds back: `render.lower.unfold` names a part of a statement where that
gives fewer lines at the functional export's width, and a method's lines are shorter
(`self.w1(x)` for `x @ params["w1"]["weight"].T`), so a part taken out there may fit back here.

    silu = jax.nn.silu(self.w1(x))          # the functional export's split, as a method
    silu_times_w3 = silu * self.w3(x)
    return self.w2(silu_times_w3)

    return self.w2(jax.nn.silu(self.w1(x)) * self.w3(x))   # folded back: one line

A part is folded back into the statement right after it (or the `return`) that reads it once, where
no other statement reads it, and only where `unfold` would not have taken it at the method's
indent: the statement is at most two lines, or no longer than the two were. Nothing moves past
anything else, so what is computed is unchanged.
"""

from __future__ import annotations

import ast
import copy

from jaxside.render.ir import Statement, unfolded
from jaxside.render.layout import MODULE_WIDTH, format_statement
from jaxside.render.lower.places import place_under, put

__all__ = ["refold"]


def refold(
    pairs: list[tuple[Statement, Statement]], returns: ast.expr | None, indent: int
) -> tuple[list[Statement], ast.expr | None]:
    """The method's statements (each with the functional def's statement it was written from) and
    its returned value, with the parts `unfold` took out that fit back in at `indent` folded back."""
    body = [styled for _, styled in pairs]
    marked = [unfolded(original.value) for original, _ in pairs]
    for k in range(len(body) - 1, -1, -1):
        statement = body[k]
        if not marked[k] or type(statement) is not Statement or statement.when is not None:
            continue
        if len(statement.targets) != 1:
            continue
        if statement.target is not None and not isinstance(statement.target, ast.Name):
            continue
        name = statement.targets[0]
        later = [s.node() for s in body[k + 1 :]] + ([ast.Return(returns)] if returns is not None else [])
        reads = [[n for n in ast.walk(node) if isinstance(n, ast.Name) and n.id == name] for node in later]
        if not later or len(reads[0]) != 1 or any(reads[1:]) or _bound(later, name):
            continue
        if k + 1 < len(body):
            user = body[k + 1]
            if type(user) is not Statement or user.when is not None:
                continue
            value = _put(user.value, reads[0][0], statement.value)
            if value is None:
                continue
            folded = copy.copy(user)
            folded.value = value
            if not _fits(folded.plain(), [statement.plain(), user.plain()], indent):
                continue
            folded.eqns = [*statement.eqns, *user.eqns]
            body[k : k + 2] = [folded]
            marked[k : k + 2] = [marked[k + 1]]
        else:
            assert returns is not None
            value = _put(returns, reads[0][0], statement.value)
            split = [statement.plain(), ast.Return(returns)]
            if value is None or not _fits(ast.Return(value), split, indent):
                continue
            returns = value
            del body[k], marked[k]
    return body, returns


def _put(root: ast.expr, hole: ast.Name, part: ast.expr) -> ast.expr | None:
    """`root` with the name `hole` read as `part` (a copy); None where `hole` is not in it."""
    if root is hole:
        return copy.deepcopy(part)
    found = [n for n in ast.walk(root) if n is hole]
    if not found:
        return None
    copied = copy.deepcopy(root)
    index = [n for n in ast.walk(root)].index(hole)
    place = [n for n in ast.walk(copied)][index]
    parent, field, at = place_under(copied, place)
    put(parent, field, at, copy.deepcopy(part))
    return copied


def _bound(nodes: list[ast.stmt], name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
               for node in nodes for n in ast.walk(node))


def _fits(one: ast.stmt, two: list[ast.stmt], indent: int) -> bool:
    """Whether `unfold` would have left `one` as it is at `indent`: two lines at most, or no more
    lines than the `two` it was split into."""
    lines = len(format_statement(one, indent, MODULE_WIDTH))
    return lines <= 2 or lines <= sum(len(format_statement(s, indent, MODULE_WIDTH)) for s in two)
