"""One def for the calls of one torch method that took other branches, under static flags.

Blocks of one class can run other lines: a ResNet block with a downsample computes its shortcut,
one without adds its input; an EfficientNet block adds its input only where it `has_skip`.  The
kinds' bodies are lined up by the torch expression each statement came from (`Statement.site`,
a longest common subsequence); a statement only some kinds ran goes under a keyword-only flag
named after the torch branch around it (`if self.downsample is not None:` gives `downsample`,
`if not self.x:` gives `x` False; a line with no `if` around it the attribute it calls, `act`
for `x = self.act(x)`), and each call passes its kind's value:

    if downsample:
        shortcut = ...
    else:
        shortcut = x
    x = x_1 + shortcut

Where the kinds read other values at one place, a value of the same torch name is rebound in the
branch (`if has_skip: x_5 = x_5 + x`), another is aliased in the other branch (`shortcut = x`).
The flags are Python bools, so under `jax.jit` each call stages just its kind's equations.  The
merged body is checked kind by kind (its statements under that kind's flags, read through the
names they bind, must be that kind's very statements, numbers aside); anything else (kinds
whose statements differ otherwise, a branch with no name) keeps one def per kind.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
from dataclasses import dataclass
from typing import Any

from jaxside.render import source as torch_source
from jaxside.render.ir import Function, Statement, named

Element = dict[int, int]
"""A statement of the merged def: its index in the body of each kind that ran it."""

_MAX_CELLS = 250_000
"""Longest bodies lined up (the product of two kinds' lengths): beyond it, one def per kind."""


@dataclass
class Merged:
    """The merged def of the kinds' first functions: its body, return, flags and number rows."""

    body: list[Statement]
    returns: ast.expr | None
    rows: list[list[tuple[Function, ast.stmt, ast.stmt]]]
    """For each statement of `body`, then the return: every function that ran it, with the
    statement there and the same with that function's own names; the merged def's first (the
    node whose numbers become expressions, with the merged names)."""
    flags: list[tuple[str, list[bool]]]
    """Each flag's name and value in each kind."""
    names: list[dict[str, str]]
    """For each kind, the merged name of each of its names."""


def merge_kinds(kinds: list[list[Function]]) -> Merged | None:
    """The kinds (each a list of defs alike but for numbers) as one def, or None."""
    reps = [kind[0] for kind in kinds]
    first = reps[0]
    if any(
        (f.params, f.calling) != (first.params, first.calling)
        or any(type(s) is not Statement or s.when is not None for s in f.body)
        or (f.returns is None) != (first.returns is None)
        for f in reps
    ):
        return None
    elements = _align(reps)
    if elements is None:
        return None
    guards = _flags(reps, elements)
    if guards is None:
        return None
    flags, whens = guards
    scope = first.scope
    names, bases = dict(scope.names), dict(scope.bases)
    for rebind in (True, False):
        scope.names, scope.bases = dict(names), dict(bases)  # none taken by a failed attempt
        builder = _Builder(reps, elements, whens, rebind)
        built = builder.build()
        if built is not None and _verified(reps, flags, *built):
            body, returns, origins = built
            rows = [_row(kinds, reps, origin, statement.plain()) for statement, origin in zip(body, origins)]
            if returns is not None:
                rows.append(_row(kinds, reps, dict.fromkeys(range(len(reps)), -1), ast.Return(returns)))
            return Merged(body, returns, rows, flags, builder.maps)
    scope.names, scope.bases = names, bases
    return None


def _row(
    kinds: list[list[Function]], reps: list[Function], origin: Element | None, node: ast.stmt
) -> list[Any]:
    if origin is None:  # an alias: no numbers
        return [(reps[0], node, node)]

    def own(function: Function, index: int) -> ast.stmt:
        return ast.Return(function.returns) if index < 0 else function.body[index].plain()

    r = min(origin)
    row = [(reps[r], node, own(reps[r], origin[r]))]
    for k in sorted(origin):
        row += [(f, own(f, origin[k]), own(f, origin[k])) for f in kinds[k] if f is not reps[r]]
    return row


# -- lining up ---------------------------------------------------------------------------------------


def _keys(function: Function) -> list[tuple[Any, ...]]:
    """What lines up between kinds, for each statement: its torch expression and its form."""
    local = _locals(function)
    keys = []
    for statement in function.body:
        site = statement.site
        where = (site.file, site.line, site.col, site.end_line, site.end_col) if site else None
        keys.append((where, _skeleton(statement.plain(), local)))
    return keys


def _align(reps: list[Function]) -> list[Element] | None:
    """The merged statements in order: the first kind's, with each other kind's lined up."""
    elements: list[Element] = [{0: i} for i in range(len(reps[0].body))]
    of = [_keys(f) for f in reps]
    for k in range(1, len(reps)):
        keys = [of[min(e)][e[min(e)]] for e in elements]
        mine = of[k]
        n, m = len(keys), len(mine)
        if n * m > _MAX_CELLS:
            return None
        table = [[0] * (m + 1) for _ in range(n + 1)]
        for i in range(n - 1, -1, -1):
            for j in range(m - 1, -1, -1):
                table[i][j] = (table[i + 1][j + 1] + 1 if keys[i] == mine[j]
                               else max(table[i + 1][j], table[i][j + 1]))
        merged: list[Element] = []
        i = j = 0
        while i < n or j < m:
            if i < n and j < m and keys[i] == mine[j]:
                merged.append({**elements[i], k: j})
                i, j = i + 1, j + 1
            elif j == m or i < n and table[i + 1][j] >= table[i][j + 1]:
                merged.append(elements[i])
                i += 1
            else:
                merged.append({k: j})
                j += 1
        elements = merged
    return elements


def _locals(function: Function) -> set[str]:
    names = set(function.params)
    for statement in function.body:
        names.update(n.id for n in ast.walk(statement.plain()) if isinstance(n, ast.Name)
                     and isinstance(n.ctx, ast.Store))
    return names


def _skeleton(node: ast.AST, local: set[str]) -> str:
    """The statement with its numbers and the def's own names blanked."""
    node = copy.deepcopy(node)
    for child in ast.walk(node):
        if isinstance(child, ast.Name) and child.id in local:
            child.id = "_"
        elif isinstance(child, ast.Constant) and type(child.value) in (int, float):
            child.value = 0
    return ast.dump(node)


# -- flags ----------------------------------------------------------------------------------------------


def _flags(
    reps: list[Function], elements: list[Element]
) -> tuple[list[tuple[str, list[bool]]], list[ast.expr | None]] | None:
    """The flags (name, value per kind) and the condition of each merged statement. A line some
    kinds ran otherwise (`self.act(x)`, a ReLU here, a Tanh there) is no branch: None."""
    every = set(range(len(reps)))
    lines = [{(s.site.file, s.site.line) for s in f.body if s.site is not None} for f in reps]
    flags: list[tuple[str, list[bool]]] = []
    whens: list[ast.expr | None] = []
    for element in elements:
        if set(element) == every:
            whens.append(None)
            continue
        r = min(element)
        site = reps[r].body[element[r]].site
        found = branch(reps[r], site) if site is not None else None
        if site is None or found is None:
            return None
        if any((site.file, site.line) in lines[k] for k in every - set(element)):
            return None
        name, value = found
        vector = [(k in element) == value for k in range(len(reps))]
        index = next((i for i, f in enumerate(flags) if f[1] == vector), None)
        negated = next((i for i, f in enumerate(flags) if f[1] == [not v for v in vector]), None)
        if index is None and negated is None:
            flags.append((name, vector))
            index = len(flags) - 1
        runs = value if index is not None else not value
        chosen = index if index is not None else negated
        assert chosen is not None  # (one was found, or appended)
        flag = named(flags[chosen][0])
        whens.append(flag if runs else ast.UnaryOp(ast.Not(), flag))
    names = [name for name, _ in flags]
    return (flags, whens) if len(set(names)) == len(names) else None


def branch(function: Function, site: Any) -> tuple[str, bool] | None:
    """The flag a statement at `site` runs under and the value it runs at: (`downsample`, True)
    inside `if self.downsample is not None:`, (`x`, False) in its `else` or under `if not
    self.x:`; else (the attribute the line calls, True)."""
    if site is None:
        return None
    around = torch_source.around(site, (ast.If,))
    atom = _condition(around.test) if isinstance(around, ast.If) else None
    if isinstance(around, ast.If) and atom and around.lineno > function.calls[0].line:
        taken = not around.orelse or site.line < around.orelse[0].lineno
        return atom[0], atom[1] == taken
    found = torch_source.expression(site)
    call = next((n for n in ast.walk(found[0]) if isinstance(n, ast.Call)), None) if found else None
    return (call.func.attr, True) if call is not None and isinstance(call.func, ast.Attribute) else None


def _condition(test: ast.expr) -> tuple[str, bool] | None:
    """The name a torch `if` tests and whether the test holds when it is set: (`downsample`,
    True) for `self.downsample is not None`, (`has_skip`, False) for `not self.has_skip`."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _condition(test.operand)
        return (inner[0], not inner[1]) if inner else None
    if (
        isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Is, ast.IsNot))
        and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None
    ):
        inner = _condition(test.left)
        return (inner[0], inner[1] == isinstance(test.ops[0], ast.IsNot)) if inner else None
    name = test.attr if isinstance(test, ast.Attribute) else test.id if isinstance(test, ast.Name) else None
    return (name, True) if name else None


# -- names ----------------------------------------------------------------------------------------------


class _Builder:
    """The merged statements, named: the first kind's names, new ones for the other kinds'
    statements; where kinds read other values at one place, a rebinding or an alias."""

    def __init__(self, reps: list[Function], elements: list[Element], whens: list[Any], rebind: bool) -> None:
        self.reps, self.elements, self.whens, self.rebind = reps, elements, whens, rebind
        self.every = frozenset(range(len(reps)))
        self.maps: list[dict[str, str]] = [{p: p for p in reps[0].params} for _ in reps]
        self.defined: dict[str, frozenset[int]] = {p: self.every for p in reps[0].params}
        self.when_of: dict[str, ast.expr | None] = {}
        self.taken = _locals(reps[0])
        self.body: list[Statement] = []
        self.origins: list[Element | None] = []

    def build(self) -> tuple[list[Statement], ast.expr | None, list[Element | None]] | None:
        for element, when in zip(self.elements, self.whens):
            r = min(element)
            statement = self.reps[r].body[element[r]]
            plains = {k: self.reps[k].body[element[k]].plain() for k in element}
            plain = self._reconciled(element, plains, statement.site)
            if plain is None:
                return None
            stores = [n for n in ast.walk(plain) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
            originals = {k: _stores(self.reps[k].body[element[k]].plain()) for k in element}
            if any(len(o) != len(stores) for o in originals.values()):
                return None
            for p, store in enumerate(stores):
                store.id = self._fresh(store.id, r)
                for k in element:
                    self.maps[k][originals[k][p]] = store.id
                self.defined[store.id] = frozenset(element)
                self.when_of[store.id] = when
            self._add(_statement(statement, plain, when), dict(element))
        returns = None
        if self.reps[0].returns is not None:
            every = {k: f.returns for k, f in enumerate(self.reps) if f.returns is not None}
            plains = {k: ast.Expr(e) for k, e in every.items()}
            node = self._reconciled(dict.fromkeys(self.every, -1), plains, None)
            if node is None:
                return None
            assert isinstance(node, ast.Expr)  # what `plains` holds
            returns = node.value
        return self.body, returns, self.origins

    def _add(self, statement: Statement, origin: Element | None) -> None:
        self.body.append(statement)
        self.origins.append(origin)

    def _fresh(self, name: str, r: int) -> str:
        if r == 0:
            return name
        scope, theirs = self.reps[0].scope, self.reps[r].scope
        base = theirs.bases.get(name)
        if name in self.taken or not scope.free(name):
            name = scope.fresh(base or name, theirs.names.get(name, "local"))
        else:
            scope.claim(name, theirs.names.get(name, "local"))
            if base:
                scope.bases[name] = base
        self.taken.add(name)
        return name

    def _reconciled(self, element: Element, plains: dict[int, ast.stmt], site: Any) -> ast.stmt | None:
        """The statement of the element's first kind, its reads renamed to the merged names."""
        r = min(element)
        plain = copy.deepcopy(plains[r])
        loads = [n for n in ast.walk(plain) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
        reads = {k: [self.maps[k].get(n.id, n.id) for n in ast.walk(plains[k])
                     if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)] for k in element}
        if any(len(names) != len(loads) for names in reads.values()):
            return None
        for p, load in enumerate(loads):
            by_name: dict[str, set[int]] = {}
            for k in sorted(element):
                by_name.setdefault(reads[k][p], set()).add(k)
            if len(by_name) > 1:
                chosen = self._one(by_name, site)
                if chosen is None:
                    return None
                for k in element:
                    reads[k][p] = chosen
            load.id = reads[r][p]
        return plain

    def _one(self, by_name: dict[str, set[int]], site: Any) -> str | None:
        """One name for a place where kinds read other values: the value only some kinds bound,
        rebound for them on the others' name of its torch base, or else aliased for the others."""
        own = [m for m in by_name if self.defined.get(m, self.every) != self.every]
        if len(own) != 1 or len(by_name) != 2:
            return None
        (m,) = own
        (n,) = [name for name in by_name if name != m]
        scope = self.reps[0].scope
        if self.rebind and scope.bases.get(m, m) == scope.bases.get(n, n) and n in self.defined:
            self._rename(m, n)
            return n
        when = self.when_of.get(m)
        if when is None or by_name[n] != self.every - self.defined[m]:
            return None
        negation = when.operand if isinstance(when, ast.UnaryOp) else ast.UnaryOp(ast.Not(), when)
        self._add(Statement([m], named(n), [], site, when=negation), None)
        self.defined[m] = self.every
        return m

    def _rename(self, old: str, new: str) -> None:
        for statement in self.body:
            statement.targets = [new if t == old else t for t in statement.targets]
            for node in (statement.value, statement.target):
                for child in ast.walk(node) if node is not None else ():
                    if isinstance(child, ast.Name) and child.id == old:
                        child.id = new
        for mapping in self.maps:
            for key, value in mapping.items():
                if value == old:
                    mapping[key] = new
        self.defined[new] = self.defined[new] | self.defined.pop(old)


def _stores(node: ast.AST) -> list[str]:
    return [n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]


def _statement(original: Statement, plain: ast.stmt, when: ast.expr | None) -> Statement:
    """`original` with the merged names of `plain` (its `plain()`, renamed) under `when`."""
    if isinstance(plain, ast.Expr):
        return dataclasses.replace(original, value=plain.value, when=when)
    assert isinstance(plain, ast.Assign)
    target = plain.targets[0]
    flat = [target] if isinstance(target, ast.Name) else target.elts if isinstance(target, ast.Tuple) else []
    names = [t for t in flat if isinstance(t, ast.Name)]
    if original.target is None and len(names) == len(flat):
        return dataclasses.replace(original, targets=[t.id for t in names], value=plain.value, when=when)
    return dataclasses.replace(original, targets=_stores(target), target=target, value=plain.value, when=when)


# -- checking -------------------------------------------------------------------------------------------


def _runs(when: ast.expr | None, values: dict[str, bool]) -> bool:
    """Whether a statement under `when` (`flag`, `not flag`, or none) runs with these flags."""
    if when is None:
        return True
    if isinstance(when, ast.Name):
        return values[when.id]
    assert isinstance(when, ast.UnaryOp) and isinstance(when.operand, ast.Name)  # `not flag`
    return not values[when.operand.id]


def _verified(
    reps: list[Function], flags: list[tuple[str, list[bool]]], body: list[Statement],
    returns: ast.expr | None, origins: list[Element | None],
) -> bool:
    """Whether the merged body, under each kind's flags, is that kind's body (numbers aside)."""
    local = set(reps[0].params).union(*(_stores(s.plain()) for s in body))
    for k, function in enumerate(reps):
        values = {name: vector[k] for name, vector in flags}
        env = {p: p for p in function.params}
        ran = []
        for statement, origin in zip(body, origins):
            runs = _runs(statement.when, values)
            if origin is not None and runs != (k in origin):
                return False
            if not runs:
                continue
            if origin is None:  # an alias
                (target,) = statement.targets
                assert isinstance(statement.value, ast.Name)  # an alias reads a name
                env[target] = env.get(statement.value.id, "")
                continue
            mine = function.body[origin[k]].plain()
            if not _same(statement.plain(), mine, env, local):
                return False
            ran.append(origin[k])
        if ran != list(range(len(function.body))):
            return False
        if returns is not None and (
            function.returns is None or not _same(ast.Expr(returns), ast.Expr(function.returns), env, local)
        ):
            return False
    return True


def _same(merged: ast.stmt, mine: ast.stmt, env: dict[str, str], local: set[str]) -> bool:
    """Whether `merged`, its reads named as this kind names them, is `mine`; binds its names."""
    merged = copy.deepcopy(merged)
    names = [n for n in ast.walk(merged) if isinstance(n, ast.Name)]
    stores = _stores(mine)
    merged_stores = [n for n in names if isinstance(n.ctx, ast.Store)]
    if len(stores) != len(merged_stores):
        return False
    for n in names:
        if isinstance(n.ctx, ast.Load) and (n.id in env or n.id in local):
            n.id = env.get(n.id, "")  # a local this kind has not bound here: no match
    bound = {}
    for n, name in zip(merged_stores, stores):
        bound[n.id] = name
        n.id = name
    if _skeleton(merged, set()) != _skeleton(mine, set()):
        return False
    env.update(bound)
    return True


# -- naming the kinds that stay apart ------------------------------------------------------------


def kind_suffixes(functions: list[Function]) -> dict[int, str]:
    """The suffix of each def of one torch function whose calls took other branches (a block with
    a downsample, one without), by `id`: from the `if` around a line only that def ran
    (`_downsample` for `if self.downsample is not None:`, `_has_skip` for `if self.has_skip:`),
    else the attribute that line calls (`_act`); none for a def that ran no line of its own."""
    lines = [{(s.site.file, s.site.line): s.site for s in f.body if s.site is not None} for f in functions]
    suffixes = {}
    for k, function in enumerate(functions):
        others = set().union(*(set(lines[j]) for j in range(len(functions)) if j != k))
        own = sorted(set(lines[k]) - others)
        found = branch(function, lines[k][own[0]]) if own else None
        if found:  # `_downsample`, `_no_downsample` in its `else`
            suffixes[id(function)] = f"_{found[0]}" if found[1] else f"_no_{found[0]}"
    return suffixes
