"""What torch differentiates: the leaves of `params` torch gives no gradient (float buffers the torch
code only reads, parameters with `requires_grad=False`), and the functional export's
`lax.stop_gradient` where a def reads one, so `jax.grad` gives them zeros as torch gives them none.

A def's reads are resolved to torch paths through its calls' module paths and its loops over
lists of modules (`for block in params["blocks"]`); a read some calls make of such a leaf and others
of a trained one (the first layers of a stack frozen, the rest not) cannot be written in a shared
def: it is listed (`Stops.mixed`) and said in the docstring.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass, field

import jax.numpy as jnp

from jaxside.render.ir import Function, Program, named
from jaxside.render.names import is_index

__all__ = ["Stops", "gradients_paragraph", "no_gradient", "stop_gradients", "unstopped_sentence"]

_METADATA = frozenset({"shape", "dtype", "ndim", "size"})
"""Attributes read of an array that no gradient flows through (`params["w"].shape[0]`)."""


def no_gradient(program: Program, frozen: frozenset[str] = frozenset()) -> set[str]:
    """The `params` leaves (by torch path) torch gives no gradient: the float buffers the torch code
    only reads, and the parameters in `frozen` (`requires_grad=False`). Integer and boolean buffers
    have no gradient in JAX either, and written buffers are `state`, not `params`."""
    state = set(program.state_paths)
    found = set()
    for item in program.trace.inputs:
        if item.kind == "arg" or item.name in state:
            continue
        floating = jnp.issubdtype(item.var.aval.dtype, jnp.inexact)
        if floating and (item.kind == "buffer" or item.name in frozen):
            found.add(item.name)
    return found


@dataclass
class Stops:
    """The defs with their reads of no-gradient leaves wrapped, and what could not be."""

    defs: list[ast.FunctionDef]
    stopped: set[str] = field(default_factory=set)
    """The torch paths read through `lax.stop_gradient`."""
    mixed: set[str] = field(default_factory=set)
    """Torch paths of no-gradient leaves a shared def reads where other calls read trained ones."""


def stop_gradients(program: Program, untrained: set[str]) -> Stops:
    """Copies of the program's defs (`Function.node()`) reading each leaf in `untrained` through
    `lax.stop_gradient(...)`; the program itself is left as it was."""
    leaves = set(program.param_paths) - set(program.state_paths)
    children: dict[str, set[str]] = {}
    for path in leaves:
        parts = path.split(".")
        for i in range(len(parts)):
            children.setdefault(".".join(parts[:i]), set()).add(parts[i])
    stops = Stops([])
    for function in [*program.functions, *program.helpers]:
        tree = function.node()
        if untrained and function.anchor is not None:  # a def reading `params`
            reader = _Reader(_anchors(function, function.anchor), leaves, children, untrained, stops)
            tree = copy.deepcopy(tree)  # its statements' nodes are the program's
            reader.bind_loops(tree)
            tree = reader.visit(tree)
        stops.defs.append(tree)
    return stops


def _anchors(function: Function, anchor: str) -> list[str]:
    """The module paths `params` stands for in the def, one per call where each call's own is known
    (a method's: its module's path), else its first call's (`anchor`)."""
    paths = [c.module_path for c in function.calls]
    if anchor == paths[0] and all(p is not None for p in paths):
        return list(dict.fromkeys(p for p in paths if p is not None))
    return [anchor]


class _Reader(ast.NodeTransformer):
    """Wraps each `params[...]` chain that reaches a no-gradient leaf in every call."""

    def __init__(self, anchors: list[str], leaves: set[str], children: dict[str, set[str]],
                 untrained: set[str], stops: Stops) -> None:
        self.scope: dict[str, list[str]] = {"params": anchors}
        self.leaves, self.children, self.untrained, self.stops = leaves, children, untrained, stops

    def bind_loops(self, tree: ast.AST) -> None:
        """Loop variables over lists of modules, each to the paths of the items it runs over."""
        loops = [(n.target, n.iter) for n in ast.walk(tree) if isinstance(n, ast.For)]
        loops += [(n.target, n.iter) for n in ast.walk(tree) if isinstance(n, ast.comprehension)]
        for target, iterable in loops:
            if (isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name)
                    and iterable.func.id == "enumerate" and len(iterable.args) == 1
                    and isinstance(target, ast.Tuple) and len(target.elts) == 2):
                target, iterable = target.elts[1], iterable.args[0]
            pairs: list[tuple[ast.expr, ast.expr]] = [(target, iterable)]
            if (isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name)
                    and iterable.func.id == "zip" and isinstance(target, ast.Tuple)):
                pairs = list(zip(target.elts, iterable.args, strict=False))
            for name, source in pairs:
                self._bind(name, self._items(source))

    def _bind(self, target: ast.expr, items: list[str]) -> None:
        if isinstance(target, ast.Name) and items:
            self.scope[target.id] = items
        elif isinstance(target, ast.Tuple):  # `for attn, ff in params["layers"]`: each item's parts
            for position, element in enumerate(target.elts):
                self._bind(element, [f"{item}.{position}" for item in items
                                     if str(position) in self.children.get(item, ())])

    def _items(self, source: ast.expr) -> list[str]:
        """The paths of the items of the list `source` is (`params["blocks"]`, `params["block"][1:]`)."""
        start = 0
        if isinstance(source, ast.Subscript) and isinstance(source.slice, ast.Slice):
            lower = source.slice.lower
            if source.slice.upper is not None or source.slice.step is not None:
                return []
            start = lower.value if isinstance(lower, ast.Constant) and type(lower.value) is int else 0
            source = source.value
        found = []
        for prefix in self._paths(source) or []:
            keys = self.children.get(prefix, set())
            if keys and all(is_index(k) for k in keys):
                found += [_join(prefix, str(k)) for k in sorted(map(int, keys))[start:]]
        return found

    def _paths(self, node: ast.expr) -> list[str] | None:
        """The torch paths a `params["a"][0]` chain stands for (a list position read by a variable:
        every item), or None when it is no such chain."""
        if isinstance(node, ast.Name):
            return self.scope.get(node.id)
        if not isinstance(node, ast.Subscript):
            return None
        inner = self._paths(node.value)
        if inner is None or any(p in self.leaves for p in inner):
            return None
        key = node.slice
        found = []
        for prefix in inner:
            keys = self.children.get(prefix, set())
            if isinstance(key, ast.Constant) and isinstance(key.value, (str, int)):
                if str(key.value) in keys:
                    found.append(_join(prefix, str(key.value)))
            elif isinstance(key, ast.Name) and keys and all(is_index(k) for k in keys):
                found += [_join(prefix, k) for k in keys]  # `params["gates"][i]` in a loop over `i`
            else:
                return None
        return found or None

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        if node.attr in _METADATA and self._paths(node.value) is not None:
            return node  # `params["w"].shape[0]`: no value read
        return self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        paths = self._paths(node)
        if paths is None or not all(p in self.leaves for p in paths):
            return self.generic_visit(node)
        stopped = [p for p in paths if p in self.untrained]
        if not stopped:
            return node
        if len(stopped) < len(paths):
            self.stops.mixed.update(stopped)
            return node
        self.stops.stopped.update(stopped)
        return ast.Call(ast.Attribute(named("lax"), "stop_gradient", ast.Load()), [node], [])


def _join(prefix: str, part: str) -> str:
    return f"{prefix}.{part}" if prefix else part


def gradients_paragraph(stops: Stops, frozen: frozenset[str]) -> str | None:
    """What the module docstring says of the leaves torch gives no gradient (None: there are none)."""
    if not stops.stopped and not stops.mixed:
        return None
    buffers = _shown({p for p in stops.stopped if p not in frozen})
    params = _shown({p for p in stops.stopped if p in frozen})
    parts = ([f"the float buffers the torch code only reads ({buffers})"] if buffers else []) + (
        [f"the parameters torch froze with `requires_grad=False` ({params})"] if params else [])
    text = ("Gradients are torch's: " + " and ".join(parts) + " are read through `lax.stop_gradient`, so "
            "`jax.grad` gives them zeros where torch gives no gradient." if parts else "")
    return " ".join(filter(None, [text, unstopped_sentence(stops.mixed, "a def", "`jax.grad`")]))


def unstopped_sentence(paths: set[str], shared: str, grad: str) -> str:
    """What the docstring says of frozen parameters the code shared with trained ones cannot stop
    (`shared`: "a def", "a class"; `grad`: the framework's gradient), or "" when there are none."""
    if not paths:
        return ""
    shown = _shown(paths, exact=True)
    return (f"The parameters torch froze in some instances of {shared} and not in others ({shown}) "
            f"are differentiated by {grad} as the others are: mask their gradients to train as torch does.")


def _shown(paths: set[str], most: int = 3, exact: bool = False) -> str:
    """`blocks.*.scale` for the scale of every block (`exact`: each path as it is), the first few."""
    patterns = sorted(paths if exact else {".".join("*" if is_index(p) else p for p in path.split("."))
                                           for path in paths})
    return ", ".join(f"`{p}`" for p in patterns[:most]) + (", ..." if len(patterns) > most else "")
