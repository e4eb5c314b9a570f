"""Sizes that follow the inputs: an export that runs at every shape the torch model accepts.

`generalize(program, relower)` takes the program lowered from the example inputs and asks for
the same torch code lowered again with the inputs' sizes changed (`relower(resize)`, traced
abstractly, so no value is needed). Where the programs differ only in numbers, each number is
fitted to an expression of its def's arguments' shapes (`x.shape[1]`, `x.shape[0] * 4`,
`x.shape[0] * x.shape[1]`, `x.shape[1] // 2`, `x.shape[1] + 1`) and written with the name the
torch code gave it (`bsz, seqlen, _ = x.shape`); a size the torch code did not name is read
where it is used (`x.shape[2]`).

Input dimensions of equal size move together (the batch of the arguments and of a KV cache).
A set whose change makes the torch code fail, changes the program's structure (a Python branch
or loop on the size) or gives a number no shape explains stays fixed: `Sizes` says why, the
module docstring lists it, and unless the torch code itself refuses other sizes there (a Linear's
features), the entry raises a `ValueError` for another size.

Comparing programs and fitting numbers (`parallel_diff`, `fit`) is `render.lower.variants`'
job, which does the same for the defs of one function called at other sizes.
"""

from __future__ import annotations

import ast
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jaxside.render import source as torch_source
from jaxside.render.ir import Define, Dim, Function, Guard, Loop, Program, Sizes, Statement, named
from jaxside.render.lower.context import LoweringError
from jaxside.render.lower.variants import Atom, Fit, expression, fit, parallel_diff, size_expr
from jaxside.tracing.trace import Trace

Resize = dict[str, tuple[int, ...]]
REFUSED = "the torch code fails at"
"""How the reason for a size the torch code itself does not take begins (no guard for those)."""


class Unfit(Exception):
    """The programs at two sizes cannot be one program; the message says why."""


def generalize(program: Program, relower: Callable[[Resize], Program]) -> None:
    """Make `program` (lowered from the example inputs) read its sizes from its inputs' shapes,
    where `relower` (the program traced at other sizes) shows they follow them."""
    trace = program.trace
    sets = dim_sets(trace)
    if not sets:  # no tensor argument: nothing to follow
        return
    fixed: list[tuple[list[Dim], str]] = []
    plan = _attempt(program, sets, relower)
    if isinstance(plan, str) and len(sets) > 1:
        movable = []
        for dims in sets:
            alone = _attempt(program, [dims], relower)
            arguments = [d for d in dims if not d.state]
            if isinstance(alone, str) and arguments and len(arguments) < len(dims):
                if not isinstance(_attempt(program, [arguments], relower), str):
                    fixed.append(([d for d in dims if d.state], alone))
                    dims, alone = arguments, None
            if isinstance(alone, str):
                fixed.append((dims, alone))
            else:
                movable.append(dims)
        sets = movable
        plan = _attempt(program, sets, relower) if sets else None
    if isinstance(plan, str):
        fixed += [(dims, plan) for dims in sets]
        sets = []
    elif plan is not None:
        sets, plan = _untie(program, sets, plan, relower)
        plan.apply()
        if plan.program is not program:
            _adopt(program, plan.program)
    guarded = [d for dims, why in fixed if not why.startswith(REFUSED) for d in dims if not d.state]
    _guard(program, guarded, [[d for d in dims if not d.state] for dims in sets])
    program.sizes = Sizes(generic=sets, fixed=fixed)


def _untie(
    program: Program, sets: list[list[Dim]], plan: Plan, relower: Callable[[Resize], Program]
) -> tuple[list[list[Dim]], Plan]:
    """Every argument dimension a set of its own, when the program follows each alone (a
    non-square image); else the sets as they are, the entry checking that tied sizes are equal."""
    split: list[list[Dim]] = []
    for dims in sets:
        arguments = [d for d in dims if not d.state]
        split.append([*arguments[:1], *(d for d in dims if d.state)])
        split += [[d] for d in arguments[1:]]
    if len(split) == len(sets):
        return sets, plan
    alone = _attempt(program, split, relower)
    return (sets, plan) if isinstance(alone, str) else (split, alone)


def dim_sets(trace: Trace) -> list[list[Dim]]:
    """The entry's argument dimensions by size (in order of first appearance), each with the
    dimensions of state buffers of that size (a KV cache's batch)."""
    state = {s.input.name for s in trace.state}
    arguments = [
        Dim(i.name, axis, int(n)) for i in trace.inputs if i.kind == "arg"
        for axis, n in enumerate(i.var.aval.shape)
    ]
    buffers = [
        Dim(i.name, axis, int(n), state=True) for i in trace.inputs if i.name in state
        for axis, n in enumerate(i.var.aval.shape)
    ]
    sizes = list(dict.fromkeys(d.size for d in arguments if d.size))
    return [[d for d in arguments + buffers if d.size == n] for n in sizes]


def resized(trace: Trace, sets: list[list[Dim]], factors: list[int]) -> Resize:
    """Each input's shape with every dimension of `sets[k]` times `factors[k]`."""
    shapes = {i.name: list(i.var.aval.shape) for i in trace.inputs}
    changed: set[str] = set()
    for dims, factor in zip(sets, factors):
        for d in dims:
            shapes[d.input][d.axis] = d.size * factor
            changed.add(d.input)
    return {name: tuple(shapes[name]) for name in changed}


def _attempt(program: Program, sets: list[list[Dim]], relower: Callable[[Resize], Program]) -> Plan | str:
    """The plan unifying the program at three sizes of `sets`, or why there is none.

    The sizes are the traced ones, then twice and 3, 4, ... times them (a set each). A size of
    1 broadcasts where no other does (torch and jnp bind nothing for an identity broadcast), so
    sets traced at 1 are unified at 2, 3 and 4, ..., and the program at 2 is the one written:
    it computes the same at 1."""
    base = program if all(dims[0].size > 1 for dims in sets) else None
    programs = []
    for row in range(0 if base is None else 1, 3):
        factors = [
            (2, 3, 4 + k)[row] if dims[0].size == 1 else (1, 2, 3 + k)[row] for k, dims in enumerate(sets)
        ]
        sizes = ", ".join(f"{d} = {d.size * f}" for dims, f in zip(sets, factors) for d in dims[:1])
        try:
            programs.append(relower(resized(program.trace, sets, factors)))
        except LoweringError as error:
            return f"the program at {sizes} cannot be written ({_first_line(error)})"
        except Exception as error:  # the torch code (or JAX) refused the sizes: they are fixed
            return f"{REFUSED} {sizes} ({_refusal(program.trace, sets, error)})"
    if base is None:
        base = programs.pop(0)
    try:
        return _plan(base, programs)
    except Unfit as error:
        return str(error)


def _refusal(trace: Trace, sets: list[list[Dim]], error: Exception) -> str:
    """Why the torch code refused the sizes, in plain words where a parameter has the size (a
    Linear's `in_features`, an RNN's hidden size), else the error's first line."""
    if len(sets) == 1:
        size = sets[0][0].size
        for item in trace.inputs:
            shape = tuple(item.var.aval.shape) if item.kind == "param" else ()
            if size > 1 and size in shape:
                return f"{size} is the size of a parameter, `{item.name}.shape[{shape.index(size)}]`"
    return _first_line(error)


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:100]


def _adopt(program: Program, other: Program) -> None:
    """`program` written as `other` (the same code traced at other sizes), still of its own trace."""
    for name in ("functions", "helpers", "constants", "entry", "arg_names", "param_paths", "state_paths"):
        setattr(program, name, getattr(other, name))


# -- unifying programs -------------------------------------------------------------------------------


@dataclass
class _Change:
    function: Function
    parent: Any
    attr: str
    index: int | None
    fit: Fit
    is_float: bool


@dataclass
class Plan:
    """The numbers of a program to write as expressions of its defs' arguments' shapes."""

    program: Program
    """The program the changes are in (the one traced at the example sizes, or at twice a size 1)."""
    changes: list[_Change] = field(default_factory=list)
    redirect: dict[int, tuple[Any, str]] = field(default_factory=dict)
    trees: list[Any] = field(default_factory=list)
    """The `ast` the changes point into (kept alive: `redirect` is by id)."""

    def apply(self) -> None:
        by_function: dict[int, list[_Change]] = {}
        for change in self.changes:
            by_function.setdefault(id(change.function), []).append(change)
        for changes in by_function.values():
            function = changes[0].function
            atoms = {a for c in changes for a in c.fit[1] if a[0] in function.arg_shapes}
            names = _bind(function, atoms)
            for c in changes:
                expr = expression(c.fit, names)
                if c.is_float and not isinstance(c.parent, ast.BinOp):
                    expr = ast.Call(named("float"), [expr], [])
                owner, attr = self.redirect.get(id(c.parent), (c.parent, c.attr))
                if c.index is None:
                    setattr(owner, {"iter": "iterable"}.get(attr, attr), expr)
                else:
                    getattr(owner, attr)[c.index] = expr
            _leading_shapes(function)


def _leading_shapes(function: Function) -> None:
    """`(*x.shape[:3], 8, 2)` for `(x.shape[0], x.shape[1], x.shape[2], 8, 2)`, as torch code writes it."""
    for node in ast.walk(_tree(function)[0]):
        if not isinstance(node, ast.Tuple) or not isinstance(node.ctx, ast.Load):
            continue
        leading = 0
        while leading < len(node.elts) - 1 and _shape_at(node.elts[leading], leading, node.elts[0]):
            leading += 1
        if leading >= 2:
            shape = node.elts[0].value  # type: ignore[attr-defined]
            prefix = ast.Subscript(shape, ast.Slice(None, ast.Constant(leading)), ast.Load())
            node.elts[:leading] = [ast.Starred(prefix, ast.Load())]


def _shape_at(node: ast.expr, axis: int, first: ast.expr) -> bool:
    """Whether `node` is `x.shape[axis]` for the `x` of `first`."""
    return (
        isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == axis
        and isinstance(node.value, ast.Attribute) and node.value.attr == "shape"
        and isinstance(first, ast.Subscript) and ast.dump(node.value) == ast.dump(first.value)
    )


def _plan(base: Program, others: list[Program]) -> Plan:
    programs = [base, *others]
    if any(_dumps(p.constants) != _dumps(base.constants) for p in others):
        raise Unfit("module-level constants change with the size")
    if any([f.name for f in p.functions] != [f.name for f in base.functions] for p in others):
        raise Unfit("the defs change with the size (a Python branch or loop on it)")
    helpers = [h.name for h in base.helpers]
    if any([h.name for h in p.helpers] != helpers for p in others):
        raise Unfit("the helper defs change with the size")
    plan = Plan(base)
    for index, function in enumerate(base.functions + base.helpers):
        versions = [(p.functions + p.helpers)[index] for p in programs]
        trees = []
        for version in versions:
            tree, redirect = _tree(version)
            trees.append(tree)
            if version is function:
                plan.redirect.update(redirect)
        plan.trees += trees
        for statements in zip(*(t.body for t in trees)):
            diffs: list = []
            if not parallel_diff(list(statements), diffs, numbers=True):
                raise Unfit(f"`{function.name}` changes with the size (a Python branch or loop on it)")
            if not diffs:
                continue
            # Values the statement reads exist before it; in a loop or a nested def, maybe not.
            flat = not isinstance(statements[0], (ast.For, ast.FunctionDef))
            names = [n for n in ast.walk(statements[0]) if isinstance(n, ast.Name) and flat]
            read = {n.id for n in names if isinstance(n.ctx, ast.Load)}
            shapes = [{**v.arg_shapes, **_read(v, read)} for v in versions]
            for parent, attr, at, values in diffs:
                whole = all(math.isfinite(v) and v == int(v) for v in values)
                found = fit([int(v) for v in values], shapes) if whole else None
                if found is None:
                    where = f"{values[0]} in `{function.name}`"
                    raise Unfit(f"{where} follows the size, but no shape of its values gives it")
                is_float = any(isinstance(v, float) for v in values)
                plan.changes.append(_Change(function, parent, attr, at, found, is_float))
    return plan


def _read(function: Function, read: set[str]) -> dict[str, tuple[int, ...]]:
    """The shapes of the values of `function` a statement reads (not its parameters), for names
    bound once: a name a loop rebinds (`x = block(x)` rolled up) holds values of other shapes."""
    tree = _tree(function)[0]
    stores = Counter(_stored(tree))
    for loop in (n for n in ast.walk(tree) if isinstance(n, ast.For)):
        stores.update(_stored(loop))  # once more: bound again each time round
    return {
        n: s for n, s in function.value_shapes.items()
        if n in read and n not in function.arg_shapes and stores[n] == 1
    }


def _stored(tree: ast.AST) -> list[str]:
    return [n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]


def _dumps(items: Any) -> list[str]:
    return [ast.dump(item) if isinstance(item, ast.AST) else repr(item) for item in items]


def _tree(function: Function) -> tuple[ast.Module, dict[int, tuple[Any, str]]]:
    """The body of `function` as one `ast`, and for each statement node made for it (not shared
    with the program) the object whose field holds that node's value."""
    redirect: dict[int, tuple[Any, str]] = {}

    def statements(body: list[Statement], owner: Function) -> list[ast.stmt]:
        nodes: list[ast.stmt] = []
        for statement in body:
            node = statement.node()
            redirect[id(node.body[0] if statement.when is not None else node)] = (statement, "value")
            if isinstance(statement, Loop) and isinstance(node, ast.For):
                node.body = statements(statement.body, owner)
            elif isinstance(statement, Define) and statement.function is not None:
                inner = statement.function
                assert isinstance(node, ast.FunctionDef)
                node.body = statements(inner.body, inner) + returns(inner)
            nodes.append(node)
        return nodes

    def returns(owner: Function) -> list[ast.stmt]:
        if owner.returns is None:
            return []
        node = ast.Return(owner.returns)
        redirect[id(node)] = (owner, "returns")
        return [node]

    return ast.Module(statements(function.body, function) + returns(function), []), redirect


# -- names the torch code gave sizes ------------------------------------------------------------------


def _bind(function: Function, atoms: set[Atom]) -> dict[Atom, str]:
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
            elements = []
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
            return whole, -int(operand.value)
    return None


# -- fixed sizes ------------------------------------------------------------------------------------


def _guard(program: Program, fixed: list[Dim], tied: list[list[Dim]]) -> None:
    """At the top of the entry, a `ValueError` for each fixed argument dimension called at another
    size, and for each one called at another size than the first of its tied set."""
    checks = [(d, ast.Constant(d.size), f"is fixed at {d.size} (the docstring says why)") for d in fixed]
    for dims in tied:
        first = _dim_expr(program.entry, dims[0])
        if first is not None:
            checks += [(d, first, f"must equal {ast.unparse(first)}") for d in dims[1:]]
    guards: list[Statement] = []
    for d, expected, said in checks:
        shape = _dim_expr(program.entry, d)
        if shape is not None:
            message = f"{ast.unparse(shape)} {said}"  # as the export names it (`params_1.shape[0]`)
            test = ast.Compare(shape, [ast.NotEq()], [expected])
            guards.append(Guard([], test, [], None, message=message))
    program.entry.body[:0] = guards


def _dim_expr(entry: Function, d: Dim) -> ast.expr | None:
    """`x.shape[1]` for an argument dimension of the entry (None if its argument has no name there)."""
    try:
        reference = ast.parse(d.input, mode="eval").body
    except SyntaxError:
        return None
    root = reference
    while isinstance(root, ast.Subscript):
        root = root.value
    if isinstance(root, ast.Name):  # the input's name in the export (`params` -> `params_1`)
        root.id = entry.arg_names.get(root.id, root.id)
    if not isinstance(root, ast.Name) or root.id not in entry.params:
        return None
    return ast.Subscript(ast.Attribute(reference, "shape", ast.Load()), ast.Constant(d.axis), ast.Load())
