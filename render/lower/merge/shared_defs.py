"""Calls of one function share one def: numbers as sizes or arguments, branches under flags.

Defs written for the same torch function whose bodies differ only in numbers are merged. A
number that follows the sizes of the def's arguments becomes `x.shape[d]` (or `x.shape[1] * 2`),
else one that a parameter's size gives `params["conv"]["bias"].shape[0]`, else a keyword-only
argument each call passes (`stride=2`, `render.lower.merge.keyword_args`): blocks of a ResNet or an
EfficientNet with other widths, strides and kernels share a def. Defs whose bodies differ
otherwise (a block that ran its downsample branch, one that did not: two kinds) are merged too,
the statements only some ran under a flag each call passes (`downsample=True`,
`render.lower.merge.branch_flags`); numbers are fitted over the calls that ran each statement. Kinds that
cannot be merged stay apart, named by the branch (`basic_block_forward_downsample`). Comparing
defs and fitting numbers to sizes (`parallel_diff`, `fit`) live in `render.lower.merge.fitting`,
which `render.lower.merge.input_sizes` uses across programs traced at other input sizes.
"""

from __future__ import annotations

import ast
from typing import Any

from jaxside.render.ir import Function, Keyword
from jaxside.render.lower.calltree import Group
from jaxside.render.lower.merge.branch_flags import Merged, kind_suffixes, merge_kinds
from jaxside.render.lower.merge.fitting import expression, fit, parallel_diff
from jaxside.render.lower.merge.keyword_args import config_keywords
from jaxside.render.lower.places import put


def merge_variants(level: list[Group]) -> dict[int, str]:
    """The variants of each function share one def, or one per set of kinds that merge (a block whose
    `self.act` is a ReLU and one whose is a Hardswish do not); the suffix of each def of a
    function with several (`_se`), by the def's `id`."""
    by_code: dict[tuple[Any, ...], list[Group]] = {}
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
        merged: list[list[Group]] = []  # the first group of each def
        for together in _mergeable(kinds):
            if len(together) > 1 and _merge_kinds(together):
                merged.append(together[0])
                continue
            for kind in together:
                if len(kind) > 1:
                    _merge_shapes(kind)
                merged.append(kind)
        if len(merged) > 1:
            functions = [kind[0].function for kind in merged if kind[0].function is not None]
            suffixes.update(kind_suffixes(functions))
    return suffixes


def _mergeable(kinds: list[list[Group]]) -> list[list[list[Group]]]:
    """The kinds in sets that merge into one def each: each kind joins the first set it merges
    with (`render.lower.merge.branch_flags`), else starts its own."""
    sets: list[list[list[Group]]] = []
    for kind in kinds:
        for together in sets:
            lead = together[0][0].function
            assert lead is not None  # a group in a kind has its def written
            scope = lead.scope
            names, bases = dict(scope.names), dict(scope.bases)
            trial = [[g.function for g in k if g.function is not None] for k in [*together, kind]]
            fits = merge_kinds(trial) is not None
            scope.names, scope.bases = names, bases  # a trial: the merge itself comes later
            if fits:
                together.append(kind)
                break
        else:
            sets.append([kind])
    return sets


def _alike(a: Group, b: Group) -> bool:
    """Whether two defs of one function are called alike and differ at most in numbers."""
    f, g = a.function, b.function
    assert f is not None and g is not None
    return (
        f.params == g.params and f.calling == g.calling
        and parallel_diff([_body_module(f), _body_module(g)], [], numbers=True)
    )


def _merge_shapes(kind: list[Group]) -> None:
    """Merge the variants of one kind: defs whose bodies differ only in numbers."""
    functions = [g.function for g in kind if g.function is not None]
    first = functions[0]
    nodes = [[(f, f.body[i].node()) for f in functions] for i in range(len(first.body))]
    if first.returns is not None:
        nodes.append([(f, ast.Return(f.returns)) for f in functions])
    rows = [[(f, node, node) for f, node in row] for row in nodes]
    if _fit_numbers(first, rows, functions):
        _share(kind, first, functions)


def _merge_kinds(kinds: list[list[Group]]) -> bool:
    """Merge the kinds of one function into one def under flags (`render.lower.merge.branch_flags`)."""
    functions = [[g.function for g in kind if g.function is not None] for kind in kinds]
    merged = merge_kinds(functions)
    every = [f for kind in functions for f in kind]
    first = every[0]
    if merged is None:
        return False
    before = first.body, first.returns
    first.body, first.returns = merged.body, merged.returns  # what the config's names read
    if not _fit_numbers(first, merged.rows, every):
        first.body, first.returns = before
        return False
    first.keywords += _flags(first, merged, functions)
    for k, names in enumerate(merged.names):
        first.param_shapes = {**functions[k][0].param_shapes, **first.param_shapes}
        for name, new in names.items():
            if name in functions[k][0].value_shapes:
                first.value_shapes.setdefault(new, functions[k][0].value_shapes[name])
    _share([g for kind in kinds for g in kind], first, every)
    return True


def _flags(first: Function, merged: Merged, functions: list[list[Function]]) -> list[Keyword]:
    """A keyword-only bool per flag, its default the value most calls pass."""
    keywords = []
    for name, vector in merged.flags:
        fresh = first.scope.fresh(name, "argument")
        for statement in merged.body:
            for node in ast.walk(statement.when) if statement.when is not None else ():
                if isinstance(node, ast.Name) and node.id == name:
                    node.id = fresh
        values: dict[int, ast.expr] = {
            id(c): ast.Constant(v) for kind, v in zip(functions, vector) for f in kind for c in f.calls
        }
        set_by = sum(len(f.calls) for kind, v in zip(functions, vector) if v for f in kind)
        default = ast.Constant(set_by > sum(len(f.calls) for kind in functions for f in kind) - set_by)
        keywords.append(Keyword(fresh, values, default))
    return keywords


Row = list[tuple[Function, ast.stmt, ast.stmt]]
"""One statement of a merged def in each function that ran it, the merged def's own first:
(function, statement, the statement as that function names its values)."""


def _fit_numbers(first: Function, rows: list[Row], functions: list[Function]) -> bool:
    """Where the statements of a row (one statement of the merged def, in each function that ran
    it, `first`'s first) differ in numbers: those that follow the sizes of their arguments or
    parameters become shape expressions, the others keyword-only arguments of `first`."""
    differences: list[tuple[ast.AST, str, int | None, list[Any], list[Function], list[dict[Any, Any]]]] = []
    for row in rows:
        found: list[tuple[ast.AST, str, int | None, list[Any]]] = []
        if not parallel_diff([node for _, node, _ in row], found, numbers=True, names=False):
            return False
        read = _read_shapes(row)
        differences += [(*difference, [f for f, _, _ in row], read) for difference in found]
    if any(isinstance(parent, ast.stmt) for parent, *_ in differences):
        return False  # a statement's whole value: `Statement.node()` makes that node afresh each time
    tree = ast.Module([row[0][1] for row in rows], [])
    parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    position = {id(f): k for k, f in enumerate(functions)}
    configs = []
    for parent, attr, index, values, ran, read in differences:
        expr = None
        if all(type(v) is int for v in values):
            # a width, twice a width (not a stride), else a width of a value the statement reads
            sized = fit(values, [f.arg_shapes for f in ran], ("atom", "mul")) or fit(values, read, ("atom",))
            expr = expression(sized) if sized else _param_size(values, ran, _call_of(parent, parents))
        if expr is None:
            aligned: list[Any] = [None] * len(functions)
            for f, v in zip(ran, values):
                aligned[position[id(f)]] = v
            configs.append((parent, attr, index, aligned))
        else:
            put(parent, attr, index, expr)
    first.keywords = config_keywords(first, tree, configs, functions)
    return True


def _read_shapes(row: Row) -> list[dict[str, tuple[int, ...]]]:
    """For each function of the row, the shapes of the values its statement reads, by the names
    the merged statement (the row's first) reads them by; none where a name may be another's (a
    nested def's, a lambda's or a comprehension's)."""
    scoped = (ast.FunctionDef, ast.Lambda, ast.For, ast.comprehension)
    if any(isinstance(n, scoped) for n in ast.walk(row[0][1])):
        return [{} for _ in row]

    def loads(node: ast.stmt) -> list[str]:
        return [n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]

    merged = loads(row[0][1])
    return [
        {name: f.value_shapes[own] for name, own in zip(merged, loads(mine)) if own in f.value_shapes}
        for f, _, mine in row
    ]


def _share(groups: list[Group], first: Function, functions: list[Function]) -> None:
    """`first` for every group, its calls in the order they ran."""
    for function in functions[1:]:
        first.calls += function.calls
    order = {id(node.call): node.position for group in groups for node in group.nodes}
    first.calls.sort(key=lambda call: order.get(id(call), -1))
    for group in groups:
        group.function = first


def _call_of(node: ast.AST, parents: dict[int, ast.AST]) -> str:
    """The source of the call a number is an argument of (`jnp.reshape(params["bias"], (1, 8))`)."""
    current: ast.AST | None = node
    while current is not None and not isinstance(current, (ast.Call, ast.stmt)):
        current = parents.get(id(current))
    return ast.unparse(current) if isinstance(current, ast.Call) else ""


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
