"""Names a person reuses: `k = k.reshape(...)` where torch rebinds `k`, not `k_1`, `k_2`, ...

Lowering gives every value its own name (`k`, `k_1`, ... for the values torch bound to `k`), so
a def is single-assignment.  `reuse_names` then renames, in order, each suffixed value to the
lowest of `k`, `k_1`, ... whose holder is dead by then (read for the last time at the latest by
the statement that rebinds it), as people write JAX: `q = jnp.reshape(q, ...)`; a suffix stays
only where the old value is still needed.  Nothing else moves, so what is computed is unchanged.

A name bound again later (a loop's carry) is renamed everywhere as one, from its first binding
to its last read.  A statement under a flag of its def (`if downsample:`) is taken in order like
any other: a value read after its `if` is bound on either path (before it, or in both branches),
so what is dead in that order is dead on either path.  Conservative where Python's scoping makes
rebinding subtle: a name read inside a nested def (which reads it when called, not when defined)
is never renamed, and a name it holds is never given to another value.

A name first bound inside a loop is renamed by the loop's own pass (`_reuse_in_loop`): only to a
name no code outside that loop has (the loop's own header names included: `for layer, (keys,
values) in ...: hidden_states, keys, values = layer_forward(..., keys, values)`), whose holders
the loop binds before and reads for the last time at the latest there, within one iteration.
"""

from __future__ import annotations

import ast
import copy
import math
from collections.abc import Callable

from jaxside.render.ir import Define, Function, Loop, Statement


def reuse_names(function: Function) -> None:
    """Rename `function`'s rebound values (and those of the defs nested in it) in place."""
    for statement in function.body:
        if isinstance(statement, Define) and statement.function is not None:
            reuse_names(statement.function)
    binds: dict[str, list[float]] = {p: [-1] for p in function.params}
    last, renamable = _uses(function, function.body, binds)
    if function.returns is not None:
        for name in _names(ast.Expr(function.returns))[1]:
            last[name] = max(last.get(name, -1), len(function.body))

    def fixed(name: str, position: int) -> bool:  # first bound by no statement of its own (a
        return min(binds[name]) < position or last.get(name) == math.inf  # loop's), or read by a nested def

    def unusable(candidate: str) -> bool:  # a name of the module's, a builtin the def calls
        return candidate not in binds and (candidate in last or not function.scope.free(candidate))

    renames = _chosen(function, renamable, binds, last, fixed, unusable)
    if renames:
        _apply(function, renames)
    for statement in function.body:
        if isinstance(statement, Loop):
            _reuse_in_loop(function, statement)


def _uses(
    function: Function, statements: list[Statement], binds: dict[str, list[float]]
) -> tuple[dict[str, float], dict[str, int]]:
    """Where `statements` bind each name (into `binds`), and (last read of each name, position of
    the first statement of its own binding each suffixed name)."""
    last: dict[str, float] = {}
    renamable: dict[str, int] = {}
    for position, statement in enumerate(statements):
        node = statement.node()
        stores, loads, pinned = _names(node)
        if isinstance(statement, Define):
            stores = {node.name} if isinstance(node, ast.FunctionDef) else set()
            pinned |= loads
        for name in stores:
            binds.setdefault(name, []).append(position)
        for name in loads:
            last[name] = max(last.get(name, -1), position)
        for name in pinned:
            last[name] = math.inf
        if type(statement) is Statement:  # its own targets: not a comprehension's variable
            for name in _targets(statement):  # in order: the names follow the targets' order
                if name in function.scope.bases:
                    renamable.setdefault(name, position)
    return last, renamable


def _chosen(
    function: Function,
    renamable: dict[str, int],
    binds: dict[str, list[float]],
    last: dict[str, float],
    fixed: Callable[[str, int], bool],
    unusable: Callable[[str], bool],
) -> dict[str, str]:
    """For each renamable name, in order, the lowest of its base's names whose holders are all
    bound before and read for the last time at the latest where it is bound."""
    current = {name: name for name in binds}
    renames: dict[str, str] = {}
    for name, position in sorted(renamable.items(), key=lambda item: item[1]):
        if fixed(name, position):
            continue
        base = function.scope.bases[name]
        for i in range(10_000):
            candidate = base if i == 0 else f"{base}_{i}"
            if candidate == name:
                break
            if unusable(candidate):
                continue
            holders = [old for old, new in current.items() if new == candidate]
            if all(max(binds[h]) < position and last.get(h, -1) <= position for h in holders):
                current[name] = renames[name] = candidate
                function.scope.names.setdefault(candidate, function.scope.names.get(name, "fallback"))
                break
    return renames


def _reuse_in_loop(function: Function, loop: Loop) -> None:
    """Rename the suffixed values first bound in `loop`'s body that no code outside it reads to
    the lowest of their base's names free there (see the module's docstring)."""
    outside: set[str] = set(function.params)
    for statement in function.body:
        if statement is not loop:
            outside |= {n for names in _names(statement.node())[:2] for n in names}
    if function.returns is not None:
        outside |= _names(ast.Expr(function.returns))[1]
    assert loop.iterable is not None and loop.loop_target is not None  # a Loop is made with both
    outside |= _names(ast.Expr(loop.iterable))[1]
    binds: dict[str, list[float]] = {n: [-1] for n in _names(ast.Expr(loop.loop_target))[0]}
    last, renamable = _uses(function, loop.body, binds)

    def fixed(name: str, position: int) -> bool:
        return name in outside or len(binds[name]) > 1 or last.get(name) == math.inf

    def unusable(candidate: str) -> bool:  # (a name nobody binds here may be the module's, a builtin)
        return candidate in outside or candidate not in binds

    renames = _chosen(function, renamable, binds, last, fixed, unusable)
    if renames:
        _apply(function, renames)
    while (carry := _into_carry(function, loop, outside)) is not None:
        _apply(function, carry)


def _into_carry(function: Function, loop: Loop, outside: set[str]) -> dict[str, str] | None:
    """One value first bound in `loop` renamed to the carry its base names (`x = attn(x) + x;
    x = ff(x) + x` for torch's two rebindings of `x`, not `x_1 = ...`): where the carry's value
    is dead from that binding until the loop binds the carry again, and the value is read for the
    last time at the latest there."""
    if any(type(s) is not Statement for s in loop.body):
        return None  # a nested loop or def: not followed here
    names = [_names(s.node()) for s in loop.body]
    binds: dict[str, list[int]] = {}
    reads: dict[str, list[int]] = {}
    for position, (stores, loads, pinned) in enumerate(names):
        if pinned:
            return None
        for name in stores:
            binds.setdefault(name, []).append(position)
        for name in loads:
            reads.setdefault(name, []).append(position)
    for statement in loop.body:
        for name in _targets(statement):
            base = function.scope.bases.get(name)
            if base is None or base == name or name in outside or len(binds.get(name, ())) != 1:
                continue
            if base not in outside or base not in binds:
                continue  # not a carry of the loop
            bound = binds[name][0]
            later = [b for b in binds[base] if b > bound]
            if not later:
                continue
            again = later[0]
            dead = not any(bound < r <= again for r in reads.get(base, ()))
            if dead and max(reads.get(name, [bound])) <= again:
                return {name: base}
    return None


def _targets(statement: Statement) -> list[str]:
    """The names a statement binds itself, in order (not a comprehension's variable)."""
    targets = list(statement.targets)
    if statement.target is not None:
        targets += [n.id for n in ast.walk(statement.target) if isinstance(n, ast.Name)]
    return targets


def _names(node: ast.AST) -> tuple[set[str], set[str], set[str]]:
    """(names `node` binds, names it reads, names read inside defs and lambdas nested in it)."""
    stores: set[str] = set()
    loads: set[str] = set()
    pinned: set[str] = set()
    for child in ast.walk(node):
        if isinstance(child, ast.Name):
            (stores if isinstance(child.ctx, ast.Store) else loads).add(child.id)
        elif isinstance(child, (ast.FunctionDef, ast.Lambda)) and child is not node:
            pinned |= {n.id for n in ast.walk(child) if isinstance(n, ast.Name)}
    return stores, loads, pinned


class _Rename(ast.NodeTransformer):
    def __init__(self, renames: dict[str, str]) -> None:
        self.renames = renames

    def visit_Name(self, node: ast.Name) -> ast.Name:
        return ast.Name(self.renames.get(node.id, node.id), node.ctx)


def _apply(function: Function, renames: dict[str, str]) -> None:
    rename = _Rename(renames)

    def renamed(node: ast.expr) -> ast.expr:
        # A copy: statements may share `ast` nodes, and each must be renamed once.
        copied: ast.expr = rename.visit(copy.deepcopy(node))
        return copied

    def expr(node: ast.expr | None) -> ast.expr | None:
        return None if node is None else renamed(node)

    def statement(s: Statement) -> None:
        s.targets = [renames.get(t, t) for t in s.targets]
        s.value = renamed(s.value)
        s.target = expr(s.target)
        if isinstance(s, Loop):
            s.loop_target = expr(s.loop_target)
            s.iterable = expr(s.iterable)
            for inner in s.body:
                statement(inner)

    for s in function.body:
        if not isinstance(s, Define):  # a nested def reads no renamed name (see above)
            statement(s)
    function.returns = expr(function.returns)
