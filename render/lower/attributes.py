"""Config numbers by name: a number the torch line read from its module (`self.n_head`,
`self.config.rms_norm_eps`, a local computed from them) is written as a field of one `Config`.

    q = q.view(bsz, seqlen, self.n_head, self.head_dim)      # torch
    q = jnp.reshape(q, (bsz, seqlen, config.n_head, config.head_dim))

Evidence, never a guess by value alone: the trace records the numbers each module held
(`Call.seen.attributes`) and each number a line bound to a local (`Call.seen.numbers`). A literal of a
statement is named only when the torch expression it came from (the statement's site, or the
site of the value folded into it) reads an attribute, or a local made of attributes, whose value
is the literal's (in the literal's dtype: a float is the attribute rounded as torch rounded it),
and no other name that expression reads gives the same value; where two do, the position decides
(the third argument of `view` is the third entry of the shape). A local made only of attributes
(`kv_size = self.n_local_heads * self.head_dim`) is written in the def as torch wrote it, read
from the config. Where library code reads the numbers out of sight (the line hands `self` to a
function, or calls a child module of torch's: `self.ln_1(x)` and its `eps`), a literal exactly
one of that module's numbers gives is that number (its children's too where it is torch's own
container: a ResNet block's `self.downsample(x)`, a `Sequential(conv, norm)` only some blocks
have, and its norm's `eps`). Where torch wrote `-1` in a shape (or
`flatten`), the reshape writes `-1`; where it read a size from a shape (`x.shape[-1] // 2`,
and `q.shape[-1] ** -0.5` for the scale `scaled_dot_product_attention` computes), so does the
def. The numbers are the same Python numbers, so the def stages the very same equations.

Each def that reads the config, or calls one that does, takes it as a keyword-only `config`;
the entry defaults it to `Config()` (the traced model's values), and `config_from(model)` reads
the fields from another torch module (`render.module`).
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from typing import Any

from jaxside.render import source as torch_source
from jaxside.render.ir import Define, Function, Keyword, Loop, Program, Statement, fold_of, named
from jaxside.render.lower.config_fields import ConfigField, Fields, thread_config
from jaxside.render.lower.evidence import (
    Named,
    Owner,
    Reader,
    literal,
    owner_of,
    reads_config,
    same,
    self_path,
)
from jaxside.render.lower.places import put
from jaxside.tracing.trace import Site

_NOT_CONFIG_KEYWORDS = frozenset({"axis", "axes", "dimension", "keepdims", "dtype"})
"""Keywords whose numbers are positions, never a config number."""
_RESHAPES = frozenset({"view", "reshape"})


def name_config(program: Program, class_names: Callable[[str], str]) -> list[ConfigField]:
    """Name the config literals of every def of `program` (in place); the `Config` fields."""
    fields = Fields()
    taken = {f.name for f in program.functions + program.helpers} | {name for name, _ in program.constants}
    if taken & {"Config", "config_from", "dataclasses"}:
        return []  # the module's own names are the user's: no config rather than a clash
    for function in program.functions:
        owner = owner_of(function)
        if owner is not None:
            _name_literals(owner, fields)
            if owner.config is not None:
                function.keywords.append(Keyword(owner.config, {}))
    if not fields.fields:
        return []
    thread_config(program)
    classes = {f.calls[0].module_type: class_names(f.calls[0].module_type) for f in program.functions
               if f.calls[0].module_type}
    return fields.declared(classes)


# -- the literals of one def --------------------------------------------------------------------------


def _name_literals(owner: Owner, fields: Fields) -> None:
    function = owner.function
    torch_params = set(torch_source.parameters(function.calls[0].file, function.calls[0].line))
    holders: list[tuple[Statement | None, ast.expr, Site | None]] = [
        (s, s.value, s.site) for s in _statements(function.body)
    ]
    if function.returns is not None:
        holders.append((None, function.returns, None))
    for statement, value, site in holders:
        for parent, attr, index, node, at in _constants(value, site):
            if at is None:
                continue
            expression = _expression(at)
            if expression is None:
                continue
            reader = Reader(owner, fields, at.line, torch_params, _jax_names(owner, value))
            choice = _choose(reader, expression, parent, node, at)
            choice = choice or _attention_scale(owner, expression, value, node)
            if choice is None:
                continue
            for name, expr in choice.locals:
                fields.register(owner, expr)
                _define(owner, function, statement, name, _renamed(expr, owner.defined))
            fields.register(owner, choice.expr)
            expr = _renamed(choice.expr, owner.defined)
            if type(literal(node)) is float and type(choice.value) is int:  # `x ** 2.0` is not `x ** 2`
                expr = ast.Call(named("float"), [expr], [])
            put(parent, attr, index, expr)


def _jax_names(owner: Owner, value: ast.expr) -> dict[str, str]:
    """Per torch local, the one name the statement reads for it (`k`, or `k_1` where torch rebound
    `k`); none where the statement reads two."""
    bases = owner.function.scope.bases
    found: dict[str, set[str]] = {}
    for node in ast.walk(value):
        if isinstance(node, ast.Name):
            found.setdefault(bases.get(node.id, node.id), set()).add(node.id)
    return {base: ids.pop() for base, ids in found.items() if len(ids) == 1}


def _statements(body: list[Statement]) -> list[Statement]:
    out: list[Statement] = []
    for statement in body:
        if isinstance(statement, Loop):
            out += _statements(statement.body)
        elif not isinstance(statement, Define):
            out.append(statement)
    return out


def _constants(value: ast.expr, site: Any) -> list[tuple[ast.AST, str, int | None, ast.expr, Any]]:
    """Each number under `value` (not a position: `axis=2`), its place and the torch site it came
    from (the innermost folded value's, else the statement's)."""
    found: list[tuple[ast.AST, str, int | None, ast.expr, Any]] = []

    def walk(node: ast.AST, at: Any) -> None:
        mark = fold_of(node)
        at = mark.site if mark is not None and mark.site is not None else at
        indexes = _indexes(node)
        for parent, attr, index, child in _children(node):
            if isinstance(child, ast.keyword) and child.arg in _NOT_CONFIG_KEYWORDS:
                continue
            if _position(parent, attr, index) or id(child) in indexes:
                continue
            if isinstance(child, ast.Constant) and type(child.value) in (int, float):
                found.append((parent, attr, index, child, at))
            elif isinstance(child, ast.UnaryOp) and isinstance(child.op, ast.USub) and isinstance(
                child.operand, ast.Constant
            ) and type(child.operand.value) in (int, float):
                found.append((parent, attr, index, child, at))
            else:
                walk(child, at)

    walk(value, site)
    return found


def _position(parent: ast.AST, attr: str, index: int | None) -> bool:
    """The place holds positions, not sizes: a transpose's permutation, an index (`x[..., 0]`)."""
    if isinstance(parent, ast.Call) and attr == "args" and index == 1:
        return ast.unparse(parent.func).rsplit(".", 1)[-1] in ("transpose", "moveaxis", "swapaxes")
    return False


def _indexes(node: ast.AST) -> set[int]:
    """`0` in `x[..., 0]`, `x[0]`: the indexes of a subscript, by `id` (its slices' bounds are sizes,
    but for a shape's: `3` in `x.shape[:3]` counts dimensions)."""
    if not isinstance(node, ast.Subscript):
        return set()
    if isinstance(node.value, ast.Attribute) and node.value.attr == "shape":
        return {id(n) for n in ast.walk(node.slice)}
    items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    return {id(item) for item in items if isinstance(item, (ast.Constant, ast.UnaryOp))}


def _children(node: ast.AST) -> list[tuple[ast.AST, str, int | None, ast.AST]]:
    out: list[tuple[ast.AST, str, int | None, ast.AST]] = []
    for attr, value in ast.iter_fields(node):
        if isinstance(value, list):
            out += [(node, attr, i, v) for i, v in enumerate(value) if isinstance(v, ast.AST)]
        elif isinstance(value, ast.AST):
            out.append((node, attr, None, value))
    return out


_EXPRESSIONS: dict[Any, ast.expr | None] = {}


def _expression(site: Any) -> ast.expr | None:
    if site not in _EXPRESSIONS:
        found = torch_source.expression(site)
        _EXPRESSIONS[site] = found[0] if found else None
    return _EXPRESSIONS[site]


def _choose(reader: Reader, expression: ast.expr, parent: ast.AST, node: ast.AST, site: Any) -> Named | None:
    """The named number the literal `node` is, by the torch expression it came from."""
    value = literal(node)
    aligned, positional = _positional(reader, expression, parent, node)
    if aligned:
        return positional
    if type(value) is int and value in (-1, 0, 1) or type(value) is float and value in (0.0, 1.0, -1.0):
        return None  # too common to tell by value: only by position
    matches: dict[str, Named] = {}
    todo = [expression]
    # the outermost expression giving the value: `self.n_head // self.n_local_heads`, not its second half
    while todo:
        sub = todo.pop()
        found = reader.read(sub)
        if found is not None and reads_config(found.expr) and same(found.value, value):
            matches.setdefault(ast.dump(found.expr), found)
            continue
        totals = [t for t in reader.sums(sub) if same(t.value, value)]
        for total in totals:
            matches.setdefault(ast.dump(total.expr), total)
        if not totals:
            todo += [n for n in ast.iter_child_nodes(sub) if isinstance(n, ast.expr)]
    prefix = _handed(expression) if not matches and isinstance(parent, (ast.Call, ast.BinOp)) else None
    if prefix is not None:  # the module's own numbers; a child's, its children's too where torch's
        owner = reader.owner
        # A line calling a child runs only where the module has it: there, the numbers of that
        # child only some calls' modules have (a downsample some blocks have) are evidence too.
        partial = {path: found[0] for path, found in owner.partial.items() if prefix}
        held = {**partial, **owner.attributes}
        for path, number in held.items():
            own = path.startswith(prefix) and (prefix != "" or "." not in path)
            if own and type(number) in (int, float) and math.isfinite(number) and same(number, value):
                matches.setdefault(path, Named(number, reader.fields.node(owner, path)))
    return next(iter(matches.values())) if len(matches) == 1 else None


def _attention_scale(owner: Owner, expression: ast.expr, value: ast.expr, node: ast.AST) -> Named | None:
    """torch's `F.scaled_dot_product_attention(q, k, v)` scales by `1 / sqrt(q.size(-1))` when no
    `scale=` is given: `q.shape[-1] ** -0.5`, where that is the literal in float32 and `q` is
    the one value of that torch name the statement reads."""
    if not isinstance(expression, ast.Call) or not expression.args:
        return None
    if not isinstance(expression.args[0], ast.Name):
        return None
    func = expression.func
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    if called != "scaled_dot_product_attention" or any(k.arg == "scale" for k in expression.keywords):
        return None
    torch_name = expression.args[0].id
    bases = owner.function.scope.bases
    ids = {n.id for n in ast.walk(value) if isinstance(n, ast.Name) and bases.get(n.id, n.id) == torch_name}
    line = getattr(expression, "lineno", 0)
    sizes: set[int | None] = set()
    for call in owner.function.calls:
        bound = [var for name, at, var in call.seen.bindings if name == torch_name and at <= line]
        sizes.add(bound[-1].aval.shape[-1] if bound and bound[-1].aval.shape else None)
    if len(ids) != 1 or len(sizes) != 1 or None in sizes:
        return None
    (size,) = sizes
    assert size is not None  # (refused above)
    traced = literal(node)
    if type(traced) is not float or not (same(1 / math.sqrt(size), traced) and same(size**-0.5, traced)):
        return None
    shape = ast.Subscript(ast.Attribute(named(ids.pop()), "shape", ast.Load()), ast.Constant(-1), ast.Load())
    return Named(size**-0.5, ast.BinOp(shape, ast.Pow(), ast.Constant(-0.5)))


def _handed(expression: ast.expr) -> str | None:
    """Whose numbers library code read on this line, where the trace does not watch: the module's
    own (`""`) where the line hands it to a function (`attention_interface(self, q, k, v)`
    reads `module.num_key_value_groups`), a child's (`"ln_1."`) where the line calls a child
    module of library code (`self.ln_1(x)`: `nn.LayerNorm` reads its `eps`)."""
    if isinstance(expression, ast.Call):
        child = self_path(expression.func)
        if child is not None and "." not in child:
            return child + "."
    for node in ast.walk(expression):
        if isinstance(node, ast.Call) and any(isinstance(a, ast.Name) and a.id == "self" for a in node.args):
            return ""
    return None


def _positional(
    reader: Reader, expression: ast.expr, parent: ast.AST, node: ast.AST
) -> tuple[bool, Named | None]:
    """In `jnp.reshape(x, (a, b, 9, 8))` for torch's `x.view(a, b, self.n_head, -1)`: whether
    the shapes line up, and the torch argument at the literal's position if it is a named one."""
    if not isinstance(parent, ast.Tuple) or not isinstance(expression, ast.Call):
        return False, None
    func = expression.func
    if isinstance(func, ast.Attribute) and func.attr == "flatten" and 0 < len(expression.args) < 3:
        # `x.flatten(3)` merges every dimension from the third on: the last entry is `-1`
        end = expression.args[1] if len(expression.args) == 2 else None
        last = node is parent.elts[-1] and not _has_minus_one(parent, node)
        if (end is None or literal(end) == -1) and last:
            return True, Named(-1, ast.UnaryOp(ast.USub(), ast.Constant(1)))
        return True, None
    if not isinstance(func, ast.Attribute) or func.attr not in _RESHAPES:
        return False, None
    items = list(expression.args)
    if len(items) == 1:
        items = reader.elements(items[0]) or items
    if len(items) != len(parent.elts) or any(
        isinstance(a, ast.Starred) != isinstance(b, ast.Starred) for a, b in zip(items, parent.elts)
    ):
        return False, None
    position = next(i for i, e in enumerate(parent.elts) if e is node)
    torch_item = items[position]
    if isinstance(torch_item, ast.UnaryOp) and isinstance(torch_item.operand, ast.Constant):
        if torch_item.operand.value == 1 and isinstance(torch_item.op, ast.USub):
            if not _has_minus_one(parent, node):
                return True, Named(-1, ast.UnaryOp(ast.USub(), ast.Constant(1)))
        return True, None
    found = reader.read(torch_item)
    if found is None or not reads_config(found.expr) or not same(found.value, literal(node)):
        return True, None
    return True, found


def _has_minus_one(shape: ast.Tuple, node: ast.AST) -> bool:
    """Another entry of the shape is already `-1` (a reshape takes one)."""
    others = [e for e in shape.elts if e is not node]
    return any(isinstance(e, (ast.Constant, ast.UnaryOp)) and literal(e) == -1 for e in others)


def _define(owner: Owner, function: Function, before: Statement | None, name: str, expr: ast.expr) -> None:
    """`name = expr` in the def, before the first statement reading it (once)."""
    if name in owner.defined:
        return
    taken = function.scope.fresh(name, "local")
    owner.defined[name] = taken
    statement = Statement([taken], expr, [], None)
    body = function.body
    if before is None:  # for the returned value: last
        body.append(statement)
        return
    body.insert(next(i for i, s in enumerate(body) if s is before or _holds(s, before)), statement)


def _renamed(expr: ast.expr, defined: dict[str, str]) -> ast.expr:
    for node in ast.walk(expr):
        if isinstance(node, ast.Name) and node.id in defined:
            node.id = defined[node.id]
    return expr


def _holds(loop: Statement, statement: Statement) -> bool:
    return isinstance(loop, Loop) and any(s is statement or _holds(s, statement) for s in loop.body)
