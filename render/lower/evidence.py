"""The trace's evidence for a number: torch expressions evaluated on what the frame hook saw.

`Reader.read(node)` gives the value a torch expression had when it ran, and the JAX expression that
computes it from the export's names: `self.n_head` from the module's attributes as
`config.n_head`, a local bound to a number from the attributes its assignment read
(`kv_size`), `x.shape[-1]` from an argument's shape in every call of the def, and arithmetic of
them. Nothing is read that the trace did not record (`Call.seen`: its `attributes` and `numbers`;
`Call.args`); a node it cannot evaluate so gives None. `render.lower.attributes` decides which
literal a number is.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from jaxside.render import source as torch_source
from jaxside.render.ir import Function, named
from jaxside.render.lower.config_fields import Fields

_OPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
    ast.Div: operator.truediv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}


@dataclass
class Named:
    """A number torch's expression computed, with the JAX expression that computes it."""

    value: Any
    expr: ast.expr
    locals: list[tuple[str, ast.expr]] = field(default_factory=list)
    """Locals the expression reads, each with its value, to define in the def first."""


@dataclass
class Owner:
    """What one def knows while its literals are named."""

    function: Function
    attributes: dict[str, Any]
    module_path: str
    module_type: str
    numbers: dict[str, list[tuple[int, Any]]]
    shapes: dict[str, tuple[int | None, ...]]
    defined: dict[str, str] = field(default_factory=dict)
    """Torch locals already defined in the def, and the name they took."""
    config: str | None = None
    partial: dict[str, tuple[Any, str]] = field(default_factory=dict)
    """Attributes only some calls' modules have, alike where they do (a block's `downsample.1.eps`
    where other blocks have no `downsample`): each value, and the module path of a call having it."""


def owner_of(function: Function) -> Owner | None:
    """The evidence of a def's calls: the attributes every call's module had alike (and apart,
    those only some had), the first call's numeric locals, and per argument the sizes every call had."""
    calls = function.calls
    first = calls[0]
    attributes = {
        path: value for path, value in first.seen.attributes.items()
        if all(c.seen.attributes.get(path, None) == value for c in calls[1:])
    }
    partial: dict[str, tuple[Any, str]] = {}
    differing: set[str] = set()
    for call in calls:
        for path, value in call.seen.attributes.items():
            if path in attributes or path in differing:
                continue
            if path in partial and partial[path][0] != value:
                differing.add(path)
            partial.setdefault(path, (value, call.module_path or ""))
    numbers: dict[str, list[tuple[int, Any]]] = {}
    for name, line, value in first.seen.numbers:
        numbers.setdefault(name, []).append((line, value))
    shapes: dict[str, tuple[int | None, ...]] = {}
    for name, var in first.args:  # per axis: the size every call had, else None
        shape = list(getattr(getattr(var, "aval", None), "shape", ()))
        for call in calls[1:]:
            other = [tuple(getattr(getattr(v, "aval", None), "shape", ())) for n, v in call.args if n == name]
            if not other or len(other[0]) != len(shape):
                shape = []
                break
            shape = [a if a == b else None for a, b in zip(shape, other[0])]
        if shape:
            shapes[name] = tuple(shape)
    owner = Owner(function, attributes, first.module_path or "", first.module_type or "", numbers, shapes)
    owner.partial = {path: found for path, found in partial.items() if path not in differing}
    return owner


def literal(node: ast.AST) -> Any:
    """The number a literal (`8`, `-1`) writes; None for anything else."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.operand, ast.Constant):
        value = node.operand.value
        return -value if isinstance(value, (int, float)) and type(value) in (int, float) else None
    return node.value if isinstance(node, ast.Constant) else None


def same(number: Any, literal: Any) -> bool:
    """`number` (as torch computed it) is the literal: equal, or equal once rounded to float32."""
    if type(number) not in (int, float) or type(number) is bool:
        return False
    if type(literal) is int:
        return type(number) is int and number == literal
    try:
        number = float(number)
    except OverflowError:  # an int beyond any float: no literal of a float op
        return False
    if number == literal:
        return True
    finite = abs(number) < 3.0e38 and abs(literal) < 3.0e38  # no overflow casting to float32
    return finite and bool(np.float32(number) == np.float32(literal))


class Reader:
    """Torch expressions of one line evaluated on the evidence: the module's attributes, the
    locals the line's function bound to numbers before it, the shapes of the def's arguments."""

    def __init__(
        self, owner: Owner, fields: Fields, line: int, torch_params: set[str],
        names: dict[str, str] | None = None,
    ) -> None:
        self.owner = owner
        self.fields = fields
        self.line = line
        self.torch_params = torch_params
        self.names = names or {}
        """The one name the JAX statement reads for each torch local (`k` -> `k_1`)."""

    def read(self, node: ast.AST, depth: int = 0) -> Named | None:
        if depth > 8:
            return None
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return Named(node.value, ast.Constant(node.value))
        path = self_path(node)
        if path is not None:
            number = self.owner.attributes.get(path)
            if isinstance(number, (int, float)) and type(number) in (int, float) and math.isfinite(number):
                return Named(self.owner.attributes[path], self.fields.node(self.owner, path))
            return None
        if isinstance(node, ast.Name):
            return self._local(node.id, depth)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            left, right = self.read(node.left, depth + 1), self.read(node.right, depth + 1)
            if left is None or right is None:
                return None
            try:
                if isinstance(node.op, ast.Pow) and abs(right.value) > 64:
                    return None  # not a size; and `10 ** 10 ** 10` would never end
                value = _OPS[type(node.op)](left.value, right.value)
            except (ArithmeticError, ValueError, OverflowError):
                return None
            return Named(value, ast.BinOp(left.expr, node.op, right.expr), left.locals + right.locals)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            inner = self.read(node.operand, depth + 1)
            if inner is None:
                return None
            return Named(-inner.value, ast.UnaryOp(ast.USub(), inner.expr), inner.locals)
        if isinstance(node, ast.Subscript):
            return self._subscript(node, depth)
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "math.sqrt" and len(node.args) == 1:
            inner = self.read(node.args[0], depth + 1)
            if inner is None or inner.value < 0:
                return None
            sqrt = ast.Attribute(named("math"), "sqrt", ast.Load())
            return Named(math.sqrt(inner.value), ast.Call(sqrt, [inner.expr], []), inner.locals)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "size":
            if len(node.args) == 1 and not node.keywords:
                index = self.read(node.args[0], depth + 1)
                if index is not None and not reads_config(index.expr):
                    return self._shape(node.func.value, index.value)
        return None

    def _subscript(self, node: ast.Subscript, depth: int) -> Named | None:
        index = self.read(node.slice, depth + 1)
        if index is None or type(index.value) is not int or reads_config(index.expr):
            return None
        holder = node.value
        if isinstance(holder, ast.Attribute) and holder.attr == "shape":
            return self._shape(holder.value, index.value)
        path = self_path(holder)
        if path is not None and type(self.owner.attributes.get(path)) in (tuple, list):
            values = self.owner.attributes[path]
            if -len(values) <= index.value < len(values):
                holder_node = self.fields.node(self.owner, path)
                return Named(values[index.value], ast.Subscript(holder_node, index.expr))
        return None

    def _shape(self, holder: ast.AST, axis: int, line: int | None = None) -> Named | None:
        """`x.shape[-1]` of a tensor argument the def takes under torch's name (as it was at
        `line`, this line by default)."""
        line = self.line if line is None else line
        if isinstance(holder, ast.Name) and holder.id in self.names and holder.id not in self.torch_params:
            return self._local_shape(holder.id, axis, line)
        if not isinstance(holder, ast.Name) or holder.id not in self.torch_params:
            return None
        shape = self.owner.shapes.get(holder.id)
        first = self.owner.function.calls[0]
        if any(name == holder.id and at < line for name, at, _ in first.seen.bindings):
            return None  # torch rebound it before this line: not the argument any more
        if shape is None or holder.id not in self.owner.function.params:
            return None
        if not -len(shape) <= axis < len(shape):
            return None
        if shape[axis] is None:
            return None
        return Named(shape[axis], ast.Subscript(ast.Attribute(named(holder.id), "shape", ast.Load()),
                                                ast.Constant(axis), ast.Load()))

    def _local_shape(self, name: str, axis: int, line: int) -> Named | None:
        """`k.shape[-1]` of a tensor local torch bound before `line`, the same size in every call,
        under the one name the JAX statement gives that local."""
        sizes = set()
        for call in self.owner.function.calls:
            if any(local == name and line <= at < self.line for local, at, _ in call.seen.bindings):
                return None  # rebound between: the statement reads another value of that name
            bound = [var for local, at, var in call.seen.bindings if local == name and at < line]
            shape = tuple(getattr(getattr(bound[-1], "aval", None), "shape", ())) if bound else ()
            sizes.add(shape[axis] if -len(shape) <= axis < len(shape) else None)
        if len(sizes) != 1 or None in sizes:
            return None
        expr = ast.Subscript(ast.Attribute(named(self.names[name]), "shape", ast.Load()), ast.Constant(axis))
        return Named(sizes.pop(), expr)

    def _local(self, name: str, depth: int) -> Named | None:
        """A local the function bound to a number before this line, from attributes alone."""
        bound = [(line, value) for line, value in self.owner.numbers.get(name, ()) if line < self.line]
        if not bound or type(bound[-1][1]) not in (int, float):
            return None
        line, value = bound[-1]
        right = assigned(self.owner.function, line, name)
        if right is None:  # `B, T, C = x.size()`: C is `x.shape[2]`
            found = unpacked(self.owner.function, line, name)
            shape = self._shape(found[0], found[1], line) if found else None
            return shape if shape is not None and shape.value == value else None
        inner = self.read(right, depth + 1)
        if inner is None or inner.value != value or type(inner.value) is not type(value):
            return None
        if not reads_config(inner.expr):
            return None
        return Named(value, named(name), inner.locals + [(name, inner.expr)])

    def elements(self, node: ast.AST) -> list[ast.expr] | None:
        """The items of a shape torch passed as one tuple (literal, or a local bound to one)."""
        if isinstance(node, (ast.Tuple, ast.List)):
            return list(node.elts)
        if isinstance(node, ast.Name) and self.owner.numbers.get(node.id):
            bound = [line for line, _ in self.owner.numbers[node.id] if line < self.line]
            right = assigned(self.owner.function, bound[-1], node.id) if bound else None
            if isinstance(right, (ast.Tuple, ast.List)):
                return list(right.elts)
        return None

    def sums(self, node: ast.AST) -> list[Named]:
        """The split points of a list of sizes (`[self.dim, kv_size, kv_size]`, `self.split_sizes`):
        what `jnp.split` takes for torch's `split(sizes)`."""
        out: list[Named] = []
        path = self_path(node)
        if path is not None and type(self.owner.attributes.get(path)) in (tuple, list):
            values = self.owner.attributes[path]
            first = ast.Subscript(self.fields.node(self.owner, path), ast.Constant(0))
            out.append(Named(values[0], first))
            for i in range(2, len(values)):
                upto = ast.Subscript(self.fields.node(self.owner, path), ast.Slice(None, ast.Constant(i)))
                out.append(Named(sum(values[:i]), ast.Call(named("sum"), [upto], [])))
            return out
        if isinstance(node, ast.List) and len(node.elts) > 2:
            read = [self.read(e) for e in node.elts]
            items = [i for i in read if i is not None]
            if len(items) < len(read):
                return out
            total = items[0]
            for item in items[1 : len(items) - 1]:
                total = Named(total.value + item.value, ast.BinOp(total.expr, ast.Add(), item.expr),
                              total.locals + item.locals)
                if reads_config(total.expr):
                    out.append(total)
        return out


def self_path(node: ast.AST) -> str | None:
    """`n_head` for `self.n_head`, `config.dim` for `self.config.dim`."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id == "self" and parts:
        return ".".join(reversed(parts))
    return None


def reads_config(expr: ast.expr) -> bool:
    return any(isinstance(n, (ast.Attribute, ast.Name)) for n in ast.walk(expr))


def assigned(function: Function, line: int, name: str) -> ast.expr | None:
    """The right side of `name = ...` at `line` of the torch def of `function`."""
    call = function.calls[0]
    node = torch_source.function_at(torch_source.tree(call.file), call.line)
    if node is None:
        return None
    for statement in ast.walk(node):
        if isinstance(statement, ast.Assign) and statement.lineno <= line <= (statement.end_lineno or 0):
            if len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name) and (
                statement.targets[0].id == name
            ):
                return statement.value
    return None


def unpacked(function: Function, line: int, name: str) -> tuple[ast.expr, int] | None:
    """`(x, 2)` where `name` is the third of `B, T, C = x.size()` (or `= x.shape`) at `line`."""
    call = function.calls[0]
    node = torch_source.function_at(torch_source.tree(call.file), call.line)
    for statement in ast.walk(node) if node is not None else ():
        if not isinstance(statement, ast.Assign):
            continue
        if not statement.lineno <= line <= (statement.end_lineno or 0):
            continue
        target, value = statement.targets[0], statement.value
        if len(statement.targets) != 1 or not isinstance(target, ast.Tuple):
            continue
        if isinstance(value, ast.Call) and not value.args and not value.keywords:
            if isinstance(value.func, ast.Attribute) and value.func.attr == "size":
                value = value.func
        names = [t.id if isinstance(t, ast.Name) else None for t in target.elts]
        if isinstance(value, ast.Attribute) and value.attr in ("shape", "size") and name in names:
            return value.value, names.index(name)
    return None
