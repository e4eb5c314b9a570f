"""Lower a `Trace` to a `Program`: one def per distinct call of user code, values named after torch.

    program = lower(trace)
    program.functions            # entry first, then in call order; each with `.body` statements

Calls of the same code with the same structure (layer 0..N-1) share one `Function`; module
methods read their module's params subtree (`params["wqkv"]["weight"]`), buffers written in
place come in as `state` and go out as new state.  Runs of identical calls become loops, so
the program does not grow with the number of layers.  Every equation is rendered by
`render.ops`; nothing here changes what is computed, only where and under which name.
"""

from __future__ import annotations

import ast
import copy
import functools
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from jax.extend.core import ClosedJaxpr, Jaxpr, Literal, Var

from render import names as naming
from render._signature import STRUCTURE
from render.names import Scope
from render.ops import RULES, atom_expr, render_eqn
from tracing.trace import Call, Input, Site, Trace

CALL_LIKE = frozenset(
    {"jit", "pjit", "closed_call", "core_call", "remat2", "checkpoint", "custom_jvp_call", "custom_vjp_call",
     "custom_vjp_call_jaxpr", "custom_lin"}
)
"""Primitives that call their body once: when no rule can write one, its body inline computes the same."""
MODULE_NAMES = frozenset(
    {"jax", "jnp", "lax", "np", "torch", "load_params", "_lists", "_is_state", "STATE_BUFFERS"}
    | {"params", "state"}
)
INLINE_LIMIT = 60
"""A sub-expression of another torch expression is written inside it when at most this long."""


class LoweringError(Exception):
    """The trace has a shape this lowering cannot express; the message says where."""


# -- the data model the renderers read ---------------------------------------------------------------


@dataclass
class Statement:
    """One assignment (or loop) in a def, for one torch source expression.

    `eqns` are the equations of the caller it computes (a call statement's callee equations
    are the callee's); `site` is the torch expression it came from; `call` the trace call a
    call statement stands for (the first one, for a def shared by many calls).
    """

    targets: list[str]
    value: ast.expr
    eqns: list[int]
    site: Site | None
    call: Call | None = None
    target: ast.expr | None = None
    """The assignment target when it is not a flat tuple of `targets` (`(k, v), state = ...`)."""

    def node(self) -> ast.stmt:
        if self.target is not None:
            target = self.target
        elif not self.targets:
            return ast.Expr(self.value)
        elif len(self.targets) == 1:
            target = _name(self.targets[0], ast.Store())
        else:
            target = ast.Tuple([_name(t, ast.Store()) for t in self.targets], ast.Store())
        return ast.Assign([target], self.value, lineno=0)


@dataclass
class Loop(Statement):
    """A run of identical calls rolled back into the `for` loop the torch code had.

    `targets`/`value` are those of the loop's call statement, so a caller that only wants
    "the JAX for this torch line" can treat it like any statement; `node()` is the loop.
    """

    loop_target: ast.expr | None = None
    iterable: ast.expr | None = None
    body: list[Statement] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)

    def node(self) -> ast.stmt:
        return ast.For(self.loop_target, self.iterable, [s.node() for s in self.body], [], lineno=0)


@dataclass
class Function:
    """One def: a user function or module method, shared by every call with its structure."""

    name: str
    calls: list[Call]
    params: list[str]
    body: list[Statement]
    returns: ast.expr | None
    scope: Scope
    doc: str | None = None
    # How callers call it: which of a call's args ("arg", i) and inputs ("extra", i) it takes,
    # in parameter order, and what it gives back.
    operands: list[tuple[str, int]] = field(default_factory=list)
    packing: list[list[tuple[str, int]] | None] = field(default_factory=list)
    """Per parameter after `params`/`state`: None for one operand (the next), or the operands a
    pytree parameter holds, as `(path, operand position)` (`params` of a JAX function)."""
    out_slots: list[int] = field(default_factory=list)
    ret_paths: list[str] = field(default_factory=list)
    uses_params: bool = False
    uses_state: bool = False
    state_out: list[str] = field(default_factory=list)
    """Buffer paths (relative to the call's module) whose new value it returns."""
    anchor: str | None = None
    """The module path its `params`/`state` subtrees start at (of its first call)."""
    decorators: list[ast.expr] = field(default_factory=list)

    def plain_params(self) -> list[tuple[str, int]]:
        """`(parameter, operand position)` for the parameters that take one operand."""
        names = self.params[len(self.params) - len(self.packing) :] if self.packing else self.params[
            len(self.params) - len(self.operands) :
        ]
        if not self.packing:
            return list(zip(names, range(len(self.operands))))
        result, position = [], 0
        for name, pack in zip(names, self.packing):
            if pack is None:
                result.append((name, position))
                position += 1
            else:
                position += len(pack)
        return result

    def call_args(self, values: list[ast.expr]) -> list[ast.expr]:
        """The arguments that pass these operand expressions (pytree parameters rebuilt)."""
        if not any(self.packing):
            return list(values)
        args, position = [], 0
        for pack in self.packing:
            if pack is None:
                args.append(values[position])
                position += 1
            else:
                args.append(_tree_arg([(path, values[i]) for path, i in pack]))
                position += len(pack)
        return args

    def node(self) -> ast.FunctionDef:
        body: list[ast.stmt] = []
        if self.doc:
            body.append(ast.Expr(ast.Constant(self.doc)))
        body += [s.node() for s in self.body]
        if self.returns is not None:
            body.append(ast.Return(self.returns))
        if not body:
            body.append(ast.Pass())
        args = ast.arguments([], [ast.arg(p) for p in self.params], None, [], [], None, [])
        return ast.FunctionDef(self.name, args, body, list(self.decorators), None, lineno=0)


@dataclass
class Program:
    """Everything a module renderer needs: defs, helpers, constants and the params layout."""

    trace: Trace
    functions: list[Function]
    helpers: list[Function]
    constants: list[tuple[str, ast.expr]]
    entry: Function
    arg_names: list[str]
    """The entry's tensor arguments, in order (after `params` and `state` when present)."""
    param_paths: list[str]
    state_paths: list[str]
    fallbacks: Counter[str]
    """Primitives without a rule, rendered as their exact `bind` (count of equations)."""

    @property
    def takes_params(self) -> bool:
        return self.entry.uses_params

    @property
    def takes_state(self) -> bool:
        return self.entry.uses_state

    def assigned_names(self) -> list[tuple[str, str]]:
        """Every name the user defs assign (parameters, targets, loop variables) with its source."""
        result = []
        for function in self.functions:
            seen: set[str] = set()
            tree = function.node()
            skip = int(function.uses_params) + int(function.uses_state)
            names = [a.arg for a in tree.args.args[skip:]]
            names += [
                n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
            ]
            for name in names:
                if name != "_" and name not in seen:
                    seen.add(name)
                    result.append((name, function.scope.names.get(name, "fallback")))
        return result

    def name_share(self) -> tuple[int, int]:
        """(assigned names derived from torch source identifiers, all assigned names)."""
        names = self.assigned_names()
        return sum(source in naming.DERIVED for _, source in names), len(names)


def lower(trace: Trace) -> Program:
    """The program for `trace`: defs for its call tree, statements for its equations."""
    return _Lowering(trace).run()


# -- paths into the params / state trees ---------------------------------------------------------------


def _under(path: str, anchor: str | None) -> bool:
    if anchor is None:
        return False
    return anchor == "" or path == anchor or path.startswith(anchor + ".")


def _relative(path: str, anchor: str) -> str:
    return path if anchor == "" else path[len(anchor) + 1 :]


class _Tree:
    """The nesting of dotted paths: digit segments 0..n-1 under one prefix become a list."""

    def __init__(self, paths: list[str]) -> None:
        children: dict[str, set[str]] = {}
        for path in paths:
            parts = path.split(".")
            for i in range(len(parts)):
                children.setdefault(".".join(parts[:i]), set()).add(parts[i])
        self.lists = {
            prefix
            for prefix, keys in children.items()
            if all(k.isdigit() for k in keys) and sorted(int(k) for k in keys) == list(range(len(keys)))
        }
        self.lengths = {prefix: len(children[prefix]) for prefix in self.lists}

    def subscript(self, base: ast.expr, path: str, prefix: str = "") -> ast.expr:
        """`base["a"][0]["b"]` for `path` (relative to `prefix` in this tree)."""
        node = base
        current = prefix
        for part in path.split(".") if path else []:
            key: Any = int(part) if current in self.lists else part
            node = ast.Subscript(node, ast.Constant(key), ast.Load())
            current = f"{current}.{part}" if current else part
        return node


# -- call-tree nodes ---------------------------------------------------------------------------------


@dataclass(eq=False)
class _Node:
    call: Call
    parent: _Node | None
    anchor: str | None
    position: int
    own: list[int] = field(default_factory=list)
    hoisted: dict[int, _Node] = field(default_factory=dict)
    children: list[_Node] = field(default_factory=list)
    eqns: set[int] = field(default_factory=set)
    inputs: list[Any] = field(default_factory=list)
    outputs: list[Any] = field(default_factory=list)
    state_out: list[str] = field(default_factory=list)
    group: _Group | None = None

    def walk(self) -> Iterator[_Node]:
        yield self
        for child in self.children:
            yield from child.walk()

    @property
    def code(self) -> tuple[str, int, str]:
        return (self.call.file, self.call.line, self.call.function)


@dataclass(eq=False)
class _Group:
    key: str
    nodes: list[_Node]
    height: int = 0
    function: Function | None = None


# -- the lowering ------------------------------------------------------------------------------------


class _Lowering:
    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.jaxpr = trace.jaxpr.jaxpr
        self.alias = _common_subexpressions(trace)
        self.eqns = [
            eqn.replace(invars=[self.alias.get(v, v) if isinstance(v, Var) else v for v in eqn.invars])
            for eqn in self.jaxpr.eqns
        ]
        outvars = [self.resolve(v) for v in self.jaxpr.outvars]
        self.live = _live_eqns(self.eqns, outvars, self.alias)
        self.uses: dict[Any, list[int]] = {}
        for i in sorted(self.live):
            for v in self.eqns[i].invars:
                if isinstance(v, Var):
                    self.uses.setdefault(v, []).append(i)
        self.program_outs = {v for v in outvars if isinstance(v, Var)}
        self.available = {v for i in self.live for v in self.eqns[i].outvars}
        self.available.update(self.jaxpr.invars, self.jaxpr.constvars)
        self.gradients = trace.gradients
        self.backward_eqns = {
            i for i, eqn in enumerate(self.eqns) if any(v in self.gradients for v in eqn.outvars)
        }
        self.outputs = [(p, self.resolve(v)) for p, v in trace.outputs]
        self.input_of: dict[Any, Input] = {i.var: i for i in trace.inputs}
        self.state_in = {s.input.var: s.input.name for s in trace.state}
        self.state_final = {s.input.name: self.resolve(s.var) for s in trace.state}
        stored = [i.name for i in trace.inputs if i.kind in ("param", "buffer")]
        self.param_tree = _Tree([p for p in stored if p not in self.state_final])
        self.state_tree = _Tree(list(self.state_final))
        self.consts = dict(zip(self.jaxpr.constvars, trace.jaxpr.consts))
        self.module_entry = any(i.kind != "arg" for i in trace.inputs) or trace.root.module_path is not None
        # `params` and `state` name the trees of a module's tensors; a function's arguments may take them.
        self.reserved = MODULE_NAMES if self.module_entry else MODULE_NAMES - {"params", "state"}
        self.module = Scope(reserved=set(self.reserved))
        self.constants: list[tuple[str, ast.expr]] = []
        self.constant_names: dict[tuple, str] = {}
        self.helpers: list[Function] = []
        self.helper_names: dict[str, str] = {}
        self.custom_names: dict[tuple, str] = {}
        self.fallbacks: Counter[str] = Counter()

    def resolve(self, v: Any) -> Any:
        """The value an equation computed first, for a repeat of the same equation."""
        return self.alias.get(v, v) if isinstance(v, Var) else v

    # -- structure ---------------------------------------------------------------------------------

    def run(self) -> Program:
        from render._loops import reroll  # it builds on this module's statements

        root = self._build(self.trace.root, None)
        assert root is not None
        self.root = root
        self._dataflow(root)
        self._hoist(root)
        groups = self._group(root)
        entry_base = "forward" if self.module_entry else naming.function_name(root.call.function)
        entry_name = self.module.fresh(entry_base, "local")
        for height in sorted({g.height for g in groups}):
            level = [g for g in groups if g.height == height]
            for group in level:
                _Builder(self, group).build()
            self._merge_variants(level)
            for group in level:
                function = group.function
                assert function is not None
                if function.name == "":
                    is_entry = group.nodes[0] is root
                    function.name = (
                        entry_name
                        if is_entry
                        else self.module.fresh(naming.function_name(group.nodes[0].call.function), "local")
                    )
        functions: list[Function] = []
        for node in root.walk():
            function = node.group.function if node.group else None
            if function is not None and function not in functions:
                functions.append(function)
        for function in functions:
            reroll(self, function)
            function.doc = self._docstring(function)
        entry = root.group.function
        arg_names = entry.params[int(entry.uses_params) + int(entry.uses_state) :]
        return Program(
            trace=self.trace,
            functions=functions,
            helpers=self.helpers,
            constants=self.constants,
            entry=entry,
            arg_names=arg_names,
            param_paths=[
                i.name for i in self.trace.inputs if i.kind != "arg" and i.name not in self.state_final
            ],
            state_paths=list(self.state_final),
            fallbacks=self.fallbacks,
        )

    def _build(self, call: Call, parent: _Node | None) -> _Node | None:
        if parent is None:
            anchor = "" if self.module_entry else None
        elif call.module_path is not None and _under(call.module_path, parent.anchor):
            anchor = call.module_path
        else:
            anchor = parent.anchor
        eqns = [i for i in call.all_eqns() if i in self.live]
        if not eqns and parent is not None:
            return None
        node = _Node(call, parent, anchor, min(eqns) if eqns else 0)
        node.own = [i for i in call.eqns if i in self.live]
        node.children = [c for c in (self._build(child, node) for child in call.children) if c is not None]
        return node

    def _dataflow(self, node: _Node) -> None:
        for child in node.children:
            self._dataflow(child)
        node.eqns = set(node.own).union(*(c.eqns for c in node.children))
        defined: set[Any] = set()
        inputs: dict[Any, None] = {}
        for i in sorted(node.eqns):
            for v in self.eqns[i].invars:
                if isinstance(v, Var) and v not in defined:
                    inputs.setdefault(v)
            defined.update(self.eqns[i].outvars)
        node.inputs = list(inputs)
        node.outputs = sorted(
            (
                v
                for v in defined
                if v in self.program_outs or any(u not in node.eqns for u in self.uses.get(v, ()))
            ),
            key=lambda v: _defining_index(self.eqns, node.eqns, v),
        )
        node.state_out = [
            path for path, var in self.state_final.items() if var in defined and _under(path, node.anchor)
        ]

    def classify(self, node: _Node, v: Any) -> tuple:
        """How `node`'s def gets input `v`: an argument, its params/state subtree, or an extra."""
        if node.parent is None:
            item = self.input_of.get(v)
            if item is not None and item.kind == "arg":
                return ("arg", item.name)
        else:
            for index, (_, var) in enumerate(node.call.args):
                if self.resolve(var) is v:
                    return ("arg", index)
        item = self.input_of.get(v)
        if item is not None and item.kind in ("param", "buffer") and _under(item.name, node.anchor):
            kind = "state" if v in self.state_in else "param"
            return (kind, _relative(item.name, node.anchor))
        if v in self.consts:
            return ("const",)
        return ("extra",)

    def items(self, node: _Node) -> list[int | _Node]:
        """What `node`'s body does, in order: its own equations and its child calls."""
        keyed: list[tuple[tuple[int, int, int], int | _Node]] = []
        for i in node.own:
            source = node.hoisted.get(i)
            keyed.append(((source.position if source else i, 0, i), i))
        for child in node.children:
            keyed.append(((child.position, 1, 0), child))
        return [item for _, item in sorted(keyed, key=lambda pair: pair[0])]

    def local_name(self, node: _Node, v: Any) -> str | None:
        for name, _line, var in node.call.bindings:
            if self.resolve(var) is v:
                return name
        return None

    def returned(self, node: _Node) -> list[tuple[str, Any]]:
        if node.parent is None:
            return list(self.outputs)
        # A result nobody used is not computed (a loss under `jax.grad`): the call returns the rest.
        return [
            (p, self.resolve(v))
            for p, v in node.call.returned
            if isinstance(v, Var) and self.resolve(v) in self.available
        ]

    # -- grouping ----------------------------------------------------------------------------------

    def signature(self, node: _Node, exclude: frozenset[int] = frozenset()) -> str:
        """Everything that decides how `node` renders, with values referred to by role."""
        refs: dict[Any, tuple] = {}
        extras = 0

        def ref(v: Any) -> tuple:
            nonlocal extras
            if isinstance(v, Literal):
                return ("literal", repr(v.val), str(v.aval))
            if v not in refs:
                role = self.classify(node, v)
                if role == ("extra",):
                    role = ("extra", extras)
                    extras += 1
                refs[v] = role
            return refs[v]

        parts: list[Any] = [node.code, node.anchor is None]
        for position, item in enumerate(self.items(node)):
            if isinstance(item, _Node):
                parts.append(
                    (
                        "call",
                        item.group.key if item.group else self.signature(item),
                        tuple(ref(v) for v in item.inputs),
                        _relative(item.anchor, node.anchor)
                        if item.anchor is not None and node.anchor is not None
                        else None,
                    )
                )
                for j, v in enumerate(item.outputs):
                    refs[v] = ("call", position, j)
                continue
            eqn = self.eqns[item]
            if item in exclude:
                continue
            site = self.trace.eqn_sites[item]
            parts.append(
                (
                    eqn.primitive.name,
                    _canonical(eqn.params),
                    tuple(ref(v) for v in eqn.invars),
                    tuple(str(v.aval) for v in eqn.outvars),
                    (site.line, site.col, site.end_line, site.end_col) if site else None,
                    tuple(self.local_name(node, v) for v in eqn.outvars),
                )
            )
            for j, v in enumerate(eqn.outvars):
                refs[v] = ("eqn", position, j)
        parts.append(("returns", tuple((p, ref(v)) for p, v in self.returned(node))))
        parts.append(("outputs", tuple(ref(v) for v in node.outputs), tuple(node.state_out)))
        return repr(parts)

    def _hoist(self, root: _Node) -> None:
        """Move computations of captured values out of calls that differ only in those.

        A cell called at every time step with `x[:, t]` reads `x` itself (torchax materializes
        the slice inside the call), so each call slices differently; the slice belongs to
        the caller, and the calls then share one def.
        """
        by_code: dict[tuple, list[_Node]] = {}
        for node in root.walk():
            if node.parent is not None:
                by_code.setdefault(node.code, []).append(node)
        changed = False
        for nodes in by_code.values():
            if len(nodes) < 2 or len({self.signature(n) for n in nodes}) == 1:
                continue
            plans = [(n, self._hoistable(n)) for n in nodes]
            if not all(h for _, h in plans):
                continue
            if len({self.signature(n, frozenset(h)) for n, h in plans}) != 1:
                continue
            for node, hoisted in plans:
                node.own = [i for i in node.own if i not in hoisted]
                assert node.parent is not None
                node.parent.own += sorted(hoisted)
                for i in hoisted:
                    node.parent.hoisted[i] = node
            changed = True
        if changed:
            self._dataflow(root)

    def _hoistable(self, node: _Node) -> list[int]:
        """`node`'s own equations that depend only on captured values (and each other)."""
        made: set[Any] = set()
        inputs = set(node.inputs)
        result = []
        for i in node.own:
            eqn = self.eqns[i]
            if eqn.effects:
                continue
            if all(
                isinstance(v, Literal) or v in made or (v in inputs and self.classify(node, v) == ("extra",))
                for v in eqn.invars
            ):
                result.append(i)
                made.update(eqn.outvars)
        return result

    def _group(self, root: _Node) -> list[_Group]:
        groups: dict[str, _Group] = {}
        order: list[_Group] = []

        def visit(node: _Node) -> int:
            height = max((visit(c) for c in node.children), default=-1) + 1
            key = self.signature(node)
            group = groups.get(key)
            if group is None:
                group = groups[key] = _Group(key, [], height)
                order.append(group)
            group.nodes.append(node)
            node.group = group
            return height

        visit(root)
        return order

    def _merge_variants(self, level: list[_Group]) -> None:
        """Calls of one function that differ only in shapes (q and k heads) share one def."""
        by_code: dict[tuple, list[_Group]] = {}
        for group in level:
            if group.nodes[0].parent is not None:
                by_code.setdefault(group.nodes[0].code, []).append(group)
        for variants in by_code.values():
            if len(variants) > 1:
                _merge_shapes(self, variants)

    # -- module-level things the emitter asks for -------------------------------------------------

    def constant(self, value: Any, hint: str) -> ast.expr:
        array = np.asarray(value)
        key = (array.dtype.str, array.shape, array.tobytes())
        name = self.constant_names.get(key)
        if name is None:
            name = self.module.fresh(naming.identifier(hint, "const").upper(), "local")
            self.constant_names[key] = name
            self.constants.append((name, _array_literal(array)))
        return _name(name)

    def helper(self, jaxpr: Any, hint: str) -> ast.expr:
        key = str(jaxpr)
        name = self.helper_names.get(key)
        if name is None:
            if self._user_code(jaxpr):
                from render._bodies import BodyBuilder, def_name
                from render._signature import Signature, pack

                # A function of the user's (`@jax.jit def attention`): its name, its arguments' names.
                name = self.module.fresh(def_name(self, jaxpr, naming.identifier(hint.lstrip("_"))), "local")
                self.helper_names[key] = name
                inner = jaxpr.jaxpr if isinstance(jaxpr, ClosedJaxpr) else jaxpr
                signature = Signature(
                    list(range(len(inner.invars))), pack(range(len(inner.outvars))),
                    names=_helper_params(len(inner.invars)),
                )
                self.helpers.append(BodyBuilder(self).build(name, jaxpr, signature))
                return _name(name)
            name = self.module.fresh("_" + naming.identifier(hint.lstrip("_"), "body"), "local")
            self.helper_names[key] = name
            builder = _Builder(self, None)
            self.helpers.append(builder.build_helper(name, jaxpr))
        return _name(name)

    def _user_code(self, jaxpr: Any) -> bool:
        """Whether a sub-jaxpr holds the user's code (values with a source expression or a name)."""
        inner = jaxpr.jaxpr if isinstance(jaxpr, ClosedJaxpr) else jaxpr
        for v in [*inner.invars, *(v for e in inner.eqns for v in e.outvars)]:
            origin = self.trace.origin(v) if isinstance(v, Var) else None
            if origin is not None and (origin.name or origin.site is not None):
                return True
        return False

    def _docstring(self, function: Function) -> str:
        first = function.calls[0]
        where = f"`{first.function}`, {first.file.replace(chr(92), '/').rsplit('/', 1)[-1]}"
        if first.line:  # line 0: a transformation of the code (`jax.grad(f)`), not a def of its own
            where += f":{first.line}"
        paths = [c.module_path for c in function.calls if c.module_path]
        if len(function.calls) == 1:
            return where + (f", for `{paths[0]}`." if paths else ".")
        span = ""
        if len(paths) == len(function.calls):
            span = f" of `{paths[0]}`" if len(set(paths)) == 1 else f": `{paths[0]}` ... `{paths[-1]}`"
        text = f"{where}, for {len(function.calls)} calls{span}."
        if len(text) <= 80:
            return text
        return f"{where}.\n\nShared by {len(function.calls)} calls{span}."


# -- one def -----------------------------------------------------------------------------------------


class _Builder:
    """Renders one group's def (or one helper) and is the `Emitter` its rules talk to."""

    def __init__(self, lowering: _Lowering, group: _Group | None) -> None:
        self.low = lowering
        self.group = group
        self.node = group.nodes[0] if group else None
        self.scope = Scope(reserved=set(lowering.reserved), outer=lowering.module)
        self.env: dict[Any, ast.expr] = {}
        self.folded: dict[Any, list[int]] = {}
        self.pending: list[int] = []
        self.body: list[Statement] = []
        self.uses: Counter[Any] = Counter()
        self.consumer: dict[Any, Site | None | str] = {}
        self.uses_params = False
        self.uses_state = False
        self.site: Site | None = None
        self.child_states: list[tuple[_Node, str]] = []

    # -- Emitter -----------------------------------------------------------------------------------

    def constant(self, value: Any, hint: str) -> ast.expr:
        return self.low.constant(value, hint)

    def function(self, jaxpr: Any, hint: str) -> ast.expr:
        return self.low.helper(jaxpr, hint)

    def custom_jvp(self, eqn: Any) -> ast.expr | None:
        """A module-level `jax.custom_jvp` def with its rule for the function `eqn` calls, if known."""
        from render._bodies import define_custom_jvp

        return define_custom_jvp(self.low, eqn)

    def used(self, var: Any) -> bool:
        return bool(self.uses[var]) if isinstance(var, Var) else False

    def nested(self, jaxpr: Any, hint: str, signature: Any) -> ast.expr:
        """Write `jaxpr` as a def nested in this one (see `render._bodies.Signature`); name it."""
        from render._bodies import nested

        return nested(self, jaxpr, hint, signature)

    def inline(self, jaxpr: Any, args: list[ast.expr], hint: str) -> list[ast.expr]:
        closed = jaxpr if isinstance(jaxpr, ClosedJaxpr) else None
        inner: Jaxpr = closed.jaxpr if closed is not None else jaxpr
        local: dict[Any, ast.expr] = {}
        counts: Counter[Any] = Counter(v for e in inner.eqns for v in e.invars if isinstance(v, Var))
        counts.update(v for v in inner.outvars if isinstance(v, Var))
        base = naming.expression_name(self.site.text if self.site else None) or naming.identifier(hint)
        for v, arg in zip(inner.invars, args):
            if counts[v] > 1 and not _is_simple(arg):
                name = self.scope.fresh(base, "expression", temporary=True)
                self._emit(Statement([name], arg, self._take_pending(), self.site))
                arg = _name(name)
            local[v] = arg
        if closed is not None:
            for v, c in zip(inner.constvars, closed.consts):
                local[v] = self.low.constant(c, hint)
        for eqn in inner.eqns:
            value = self.render(
                eqn,
                [copy.deepcopy(local[v]) if isinstance(v, Var) else ast.Constant(None) for v in eqn.invars],
            )
            if len(eqn.outvars) == 1 and counts[eqn.outvars[0]] == 1:
                local[eqn.outvars[0]] = value
                continue
            targets = [
                self.scope.fresh(base, "expression", temporary=True) if counts[v] else "_"
                for v in eqn.outvars
            ]
            self._emit(Statement(targets, value, self._take_pending(), self.site))
            for v, t in zip(eqn.outvars, targets):
                local[v] = _name(t)
        return [copy.deepcopy(local[v]) if isinstance(v, Var) else atom_expr(v, self) for v in inner.outvars]

    # -- rendering ---------------------------------------------------------------------------------

    def render(self, eqn: Any, args: list[ast.expr]) -> ast.expr:
        eqn = _without_trivial_sharding(eqn)
        name = eqn.primitive.name
        if name not in RULES:
            self.low.fallbacks[name] += 1
        try:
            return render_eqn(eqn, args, self)
        except Exception as error:
            body = eqn.params.get("jaxpr", eqn.params.get("call_jaxpr"))
            if body is None or name not in CALL_LIKE:
                raise LoweringError(f"cannot render `{name}` equation {eqn}: {error}") from error
            # A call-like primitive the rules could not write: its body, inline, computes the same.
            self.low.fallbacks[f"{name} (inlined)"] += 1
            outs = self.inline(body, args, name)
            return outs[0] if len(outs) == 1 else ast.Tuple(outs, ast.Load())

    def _emit(self, statement: Statement) -> None:
        self.body.append(statement)

    def _take_pending(self) -> list[int]:
        pending, self.pending = sorted(set(self.pending)), []
        return pending

    def expr(self, v: Any) -> ast.expr:
        """The expression for value `v` here; folding an inlined expression in, once."""
        if isinstance(v, Literal):
            return atom_expr(v, self)
        if v in self.env:
            if v in self.folded:
                self.pending += self.folded.pop(v)
            return copy.deepcopy(self.env[v])
        assert self.node is not None
        role = self.low.classify(self.node, v)
        if role[0] == "param":
            self.uses_params = True
            return self.low.param_tree.subscript(_name("params"), role[1], self.node.anchor or "")
        if role[0] == "state":
            self.uses_state = True
            return self.low.state_tree.subscript(_name("state"), role[1], self.node.anchor or "")
        if role[0] == "const":
            return self.low.constant(self.low.consts[v], "const")
        raise LoweringError(f"no value for {v} in `{self.node.call.function}`")

    # -- a user def --------------------------------------------------------------------------------

    def build(self) -> None:
        node, low = self.node, self.low
        assert node is not None and self.group is not None
        self.scope.preferred = {name for name, _, _ in node.call.bindings}
        function = Function("", [n.call for n in self.group.nodes], [], [], None, self.scope)
        items = low.items(node)
        self._count_uses(node, items)
        params = self._parameters(node, function)
        for item in items:
            if isinstance(item, _Node):
                self._emit_call(item)
            else:
                self._emit_eqn(item)
        function.returns = self._returns(node, function)
        function.body = self.body
        function.params = (
            (["params"] if self.uses_params else []) + (["state"] if self.uses_state else []) + params
        )
        function.uses_params, function.uses_state = self.uses_params, self.uses_state
        function.state_out = (
            [_relative(p, node.anchor) for p in node.state_out] if node.anchor is not None else []
        )
        function.anchor = node.anchor
        self.group.function = function

    def _count_uses(self, node: _Node, items: list[int | _Node]) -> None:
        def use(v: Any, site: Site | None | str) -> None:
            if isinstance(v, Var):
                self.uses[v] += 1
                self.consumer[v] = site

        for item in items:
            if isinstance(item, _Node):
                function = item.group.function if item.group else None
                assert function is not None, "callee rendered first"
                for v in self._call_operands(item, function):
                    use(v, item.call.call_site)
            else:
                for v in self.low.eqns[item].invars:
                    use(v, self.low.trace.eqn_sites[item])
        for _, v in self.low.returned(node):
            use(v, "return")
        for v in self._extra_outputs(node):
            use(v, "return")
        for path in node.state_out:
            if not any(path in c.state_out for c in node.children):
                use(self.low.state_final[path], "return")

    def _call_operands(self, child: _Node, function: Function) -> list[Any]:
        return _operand_values(child, function)

    def _extra_outputs(self, node: _Node) -> list[Any]:
        if node.parent is None:
            return []
        returned = {v for _, v in self.low.returned(node)}
        finals = {self.low.state_final[p] for p in node.state_out}
        return [v for v in node.outputs if v not in returned and v not in finals]

    def _parameters(self, node: _Node, function: Function) -> list[str]:
        low, names = self.low, []
        if node.parent is None:
            seen: dict[str, str] = {}
            for item in low.trace.inputs:
                if item.kind != "arg":
                    continue
                base = re.match(r"[A-Za-z_][A-Za-z0-9_]*", item.name)
                root = base.group(0) if base else "arg"
                if root not in seen:
                    seen[root] = self.scope.fresh(root, "argument")
                    names.append(seen[root])
                self.env[item.var] = _path_expr(seen[root], item.name[len(root) :])
            return names
        signature = _signature(node.call)
        bound = {name for name, _ in node.call.args}
        unbound = [n for n in signature if n not in bound]
        operands: list[tuple[str, str, int]] = []  # (name, kind, slot)
        for index, (name, var) in enumerate(node.call.args):
            v = low.resolve(var)
            if v in node.inputs and v not in self.env:
                operands.append((name, "arg", index))
                self.env[v] = _name(name)  # placeholder until the name is final
        hoisted_vars = [v for v in node.inputs if _made_by_hoisted(low, node, v)]
        for index, v in enumerate(node.inputs):
            if v in self.env or low.classify(node, v) != ("extra",):
                continue
            if v in hoisted_vars and len(hoisted_vars) == len(unbound):
                base = unbound[hoisted_vars.index(v)]
            else:
                origin = low.trace.origin(v)
                base = (
                    naming.leaf_name(origin.name, node.call.module_path)
                    if origin and origin.name
                    else naming.expression_name(origin.expression if origin else None) or ""
                )
            operands.append((base, "extra", index))
            self.env[v] = _name(base)
        # In the torch def's parameter order where the names tell it (`x_t, h`), captured values last.
        order = {name: i for i, name in enumerate(signature)}
        operands.sort(key=lambda op: order.get(_tree_root(op[0]) or op[0], len(order)))
        trees = low.trace.frontend == "jax"  # a JAX function's pytree arguments stay pytrees
        grouped: dict[str | int, list[tuple[str, str, int]]] = {}
        for base, kind, index in operands:
            root = _tree_root(base) if trees and kind == "arg" else None
            grouped.setdefault(root if root in order else len(grouped), []).append((base, kind, index))
        for key, members in grouped.items():
            if not isinstance(key, str):
                ((base, kind, index),) = members
                name = self.scope.fresh(base, "argument" if base else "fallback")
                names.append(name)
                function.packing.append(None)
                function.operands.append((kind, index))
                v = low.resolve(node.call.args[index][1]) if kind == "arg" else node.inputs[index]
                self.env[v] = _name(name)
                continue
            name = self.scope.fresh(key, "argument")
            names.append(name)
            pack = []
            for base, kind, index in members:
                pack.append((base[len(key) :], len(function.operands)))
                function.operands.append((kind, index))
                self.env[low.resolve(node.call.args[index][1])] = _path_expr(name, base[len(key) :])
            function.packing.append(pack)
        return names

    def _inlinable(self, v: Any, site: Site | None, value: ast.expr, call_site: bool = False) -> bool:
        assert self.node is not None
        if self.uses[v] != 1 or self.low.local_name(self.node, v):
            return False
        if self.low.gradients.get(v) is not None:
            return False  # the gradient of a named value: a line of its own, to read and to edit
        consumer = self.consumer.get(v)
        if site is not None and consumer not in (site, "return") and len(ast.unparse(value)) > INLINE_LIMIT:
            return False  # a long sub-expression of its own (`self.conv1(x)`) reads better named
        if consumer == "return":
            return True
        if site is None or not isinstance(consumer, Site):
            return False
        if call_site and consumer == site:
            return False  # the same call site again: the next iteration of a loop
        return _contains(consumer, site)

    def _target(
        self,
        v: Any,
        site: Site | None,
        fallback: str,
        operand: ast.expr | None = None,
        *,
        made_in_call: bool = False,
    ) -> str:
        assert self.node is not None
        local = self.low.local_name(self.node, v)
        if local:
            return self.scope.fresh(local, "local")
        if v in self.low.gradients:
            return self.scope.fresh(self._gradient_base(v, site), "gradient")
        if v in self.low.trace.derivatives:
            return self.scope.fresh(self._derivative_base(v, site), "gradient")
        if made_in_call:
            # A value a callee made and the caller needs (a forward residual): the callee's name for it.
            origin = self.low.trace.origin(v)
            base = origin.name or naming.expression_name(origin.expression) if origin else None
            if base:
                return self.scope.fresh(base, "local" if origin and origin.name else "expression")
        uses = self.low.uses.get(v, [])
        if (
            site is not None
            and isinstance(operand, ast.Name)
            and uses
            and any(self.low.trace.eqn_sites[u] == site for u in uses if u not in self.low.backward_eqns)
        ):
            # A step inside one torch expression: a new version of its operand, not the expression.
            return self.scope.fresh(
                re.sub(r"_\d+$", "", operand.id), self.scope.names.get(operand.id, "fallback"), temporary=True
            )
        base = naming.expression_name(site.text if site else None)
        if base:
            return self.scope.fresh(base, "expression", temporary=True)
        return self.scope.fresh(fallback, "fallback")

    def _gradient_base(self, v: Any, site: Site | None) -> str:
        """`grad_h` for the gradient of `h`: the name the forward value has here, or had where it was made."""
        return naming.gradient_name(self._primal_name(self.low.gradients.get(v), site))

    def _primal_name(self, primal: Any, site: Site | None) -> str | None:
        base = None
        if primal is not None:
            known = self.env.get(primal)
            if isinstance(known, ast.Name):
                base = known.id
            else:
                origin = self.low.trace.origin(primal)
                base = origin.name or naming.expression_name(origin.expression) if origin else None
        return base or naming.expression_name(site.text if site else None)

    def _derivative_base(self, v: Any, site: Site | None) -> str:
        """`d_hidden` for a factor of the derivative of `hidden` (`1.0 - hidden` for a tanh)."""
        return naming.derivative_name(self._primal_name(self.low.trace.derivatives[v], site))

    def _emit_eqn(self, index: int) -> None:
        assert self.node is not None
        eqn = self.low.eqns[index]
        site = self.low.trace.eqn_sites[index]
        self.pending = [index]
        self.site = site
        operands = [self.expr(v) for v in eqn.invars]
        value = self.render(eqn, copy.deepcopy(operands))
        outs = eqn.outvars
        structured = getattr(value, STRUCTURE, None) is not None
        if len(outs) == 1 and not structured and self._inlinable(outs[0], site, value):
            self.env[outs[0]] = value
            self.folded[outs[0]] = self._take_pending()
            return
        source = self.node.hoisted.get(index)
        targets = []
        for v in outs:
            if not self.uses[v]:
                targets.append("_")
            elif source is not None and source.group and source.group.function:
                targets.append(self._hoisted_name(source, v, site, eqn.primitive.name))
            else:
                targets.append(self._target(v, site, eqn.primitive.name, operands[0] if operands else None))
        if structured:
            from render._bodies import emit_structured

            names = {i: t for i, t in enumerate(targets) if t != "_"}
            emit_structured(self, list(outs), value, names, site, self._take_pending())
            return
        self._emit(Statement(targets, value, self._take_pending(), site))
        for v, t in zip(outs, targets):
            if t != "_":
                self.env[v] = _name(t)

    def _hoisted_name(self, child: _Node, v: Any, site: Site | None, fallback: str) -> str:
        function = child.group.function if child.group else None
        if function is not None and v in child.inputs:
            operand = ("extra", child.inputs.index(v))
            if operand in function.operands:
                position = function.operands.index(operand)
                for name, at in function.plain_params():
                    if at == position:
                        return self.scope.fresh(name, "argument")
        return self._target(v, site, fallback)

    def _emit_call(self, child: _Node) -> None:
        assert self.node is not None
        low, node = self.low, self.node
        function = child.group.function if child.group else None
        assert function is not None
        self.pending = []
        self.site = child.call.call_site
        args: list[ast.expr] = []
        relative = (
            _relative(child.anchor, node.anchor)
            if child.anchor is not None and node.anchor is not None
            else ""
        )
        if function.uses_params:
            self.uses_params = True
            args.append(low.param_tree.subscript(_name("params"), relative, node.anchor or ""))
        if function.uses_state:
            self.uses_state = True
            args.append(low.state_tree.subscript(_name("state"), relative, node.anchor or ""))
        args += function.call_args([self.expr(v) for v in self._call_operands(child, function)])
        value: ast.expr = ast.Call(_name(function.name), args, [])
        returned = low.returned(child)
        extras = [child.outputs[i] for i in function.out_slots]
        if (
            len(returned) == 1
            and returned[0][0] == ""
            and not function.state_out
            and not extras
            and returned[0][1] not in self.env
            and self._inlinable(returned[0][1], self.site, value, True)
        ):
            v = returned[0][1]
            self.env[v] = value
            self.folded[v] = self._take_pending()
            return
        targets: list[ast.expr] = []
        flat: list[str] = []
        if returned:
            targets.append(self._returned_target(child, returned, flat))
        if function.state_out:
            state_name = self.scope.fresh(_state_base(child, node), "parameter")
            flat.append(state_name)
            targets.append(_name(state_name, ast.Store()))
            self.child_states.append((child, state_name))
            for path in child.state_out:
                var = low.state_final[path]
                if var not in self.env:
                    self.env[var] = low.state_tree.subscript(
                        _name(state_name), _relative(path, child.anchor or ""), child.anchor or ""
                    )
        for v in extras:
            name = self._target(v, self.site, "value", made_in_call=True)
            flat.append(name)
            targets.append(_name(name, ast.Store()))
            self.env[v] = _name(name)
        target = targets[0] if len(targets) == 1 else ast.Tuple(targets, ast.Store())
        self._emit(Statement(flat, value, self._take_pending(), self.site, child.call, target))

    def _returned_target(self, child: _Node, returned: list[tuple[str, Any]], flat: list[str]) -> ast.expr:
        paths = [p for p, _ in returned]
        if paths == [""] or paths == [f"[{i}]" for i in range(len(paths))]:
            names = []
            for _, v in returned:
                if v in self.env or not self.uses[v]:
                    names.append("_")
                    continue
                name = self._target(v, self.site, "value")
                self.env[v] = _name(name)
                names.append(name)
            flat += [n for n in names if n != "_"]
            if paths == [""]:
                return _name(names[0], ast.Store())
            return ast.Tuple([_name(n, ast.Store()) for n in names], ast.Store())
        whole = self.scope.fresh(
            naming.expression_name(self.site.text if self.site else None) or "result", "expression"
        )
        flat.append(whole)
        for path, v in returned:
            if v not in self.env:
                self.env[v] = _path_expr(whole, path)
        return _name(whole, ast.Store())

    def _returns(self, node: _Node, function: Function) -> ast.expr | None:
        low = self.low
        parts: list[ast.expr] = []
        if node.parent is None:
            leaves = iter(self.expr(v) for _, v in low.outputs)
            parts.append(_spec_expr(low.trace.out_tree, leaves, low.trace.static_outputs))
        else:
            returned = low.returned(node)
            function.ret_paths = [p for p, _ in returned]
            if returned:
                parts.append(_paths_expr([(p, self.expr(v)) for p, v in returned]))
            elif not node.state_out and not self._extra_outputs(node):
                parts.append(ast.Constant(None))
        if node.state_out:
            parts.append(self._state_dict(node))
        extras = self._extra_outputs(node)
        function.out_slots = [node.outputs.index(v) for v in extras]
        parts += [self.expr(v) for v in extras]
        if len(parts) == 1:
            return parts[0]
        return ast.Tuple(parts, ast.Load())

    def _state_dict(self, node: _Node) -> ast.expr:
        low, anchor = self.low, node.anchor or ""
        entries: dict[str, ast.expr] = {}
        for path in node.state_out:
            child = next((c for c, _ in self.child_states if path in c.state_out), None)
            if child is not None:
                name = next(n for c, n in self.child_states if c is child)
                entries.setdefault(
                    _relative(child.anchor or "", anchor) if child.anchor != anchor else "", _name(name)
                )
            else:
                entries[_relative(path, anchor)] = self.expr(low.state_final[path])
        return _nested_dict(entries, low.state_tree, anchor)

    # -- a helper def for a sub-jaxpr --------------------------------------------------------------

    def build_helper(self, name: str, jaxpr: Any) -> Function:
        inner = jaxpr.jaxpr if isinstance(jaxpr, ClosedJaxpr) else jaxpr
        params = [self.scope.fresh(p, "fallback") for p in _helper_params(len(inner.invars))]
        outs = self.inline(jaxpr, [_name(p) for p in params], name.lstrip("_"))
        returns = outs[0] if len(outs) == 1 else ast.Tuple(outs, ast.Load())
        return Function(name, [], params, self.body, returns, self.scope)


# -- variants ----------------------------------------------------------------------------------------


def _merge_shapes(low: _Lowering, variants: list[_Group]) -> None:
    """Merge defs whose bodies differ only in integers that are dimensions of their arguments."""
    functions = [g.function for g in variants]
    assert all(functions)
    first = functions[0]
    assert first is not None
    if any(
        f.params != first.params
        or f.operands != first.operands
        or f.packing != first.packing
        or f.out_slots != first.out_slots
        or f.ret_paths != first.ret_paths
        or f.state_out != first.state_out
        for f in functions
        if f is not None
    ):
        return
    trees = [_body_module(f) for f in functions if f is not None]
    differences: list[tuple[ast.AST, str, int | None, list[int]]] = []
    if not _parallel_diff(trees, differences):
        return
    shapes = [_param_shapes(low, g) for g in variants]
    replacements = []
    for parent, attr, index, values in differences:
        expr = _dimension_of(first.params, shapes, values)
        if expr is None:
            return
        replacements.append((parent, attr, index, expr))
    for parent, attr, index, expr in replacements:
        if index is None:
            setattr(parent, attr, expr)
        else:
            getattr(parent, attr)[index] = expr
    for group in variants[1:]:
        assert group.function is not None
        first.calls += group.function.calls
        group.function = first


def _body_module(function: Function) -> ast.Module:
    body: list[ast.stmt] = [s.node() for s in function.body]
    if function.returns is not None:
        body.append(ast.Return(function.returns))
    return ast.Module(body, [])


def _parallel_diff(trees: list[ast.AST], out: list) -> bool:
    """Walk equal-shaped trees; collect int constants that differ; False on any other difference."""
    first = trees[0]
    if any(type(t) is not type(first) for t in trees):
        return False
    for attr, value in ast.iter_fields(first):
        others = [getattr(t, attr) for t in trees]
        if isinstance(value, list):
            if any(not isinstance(o, list) or len(o) != len(value) for o in others):
                return False
            for i, item in enumerate(value):
                items = [o[i] for o in others]
                if isinstance(item, ast.AST):
                    if isinstance(item, ast.Constant) and _int_differs(items):
                        out.append((first, attr, i, [it.value for it in items]))
                    elif not _parallel_diff(items, out):
                        return False
                elif any(it != item for it in items):
                    return False
        elif isinstance(value, ast.AST):
            if isinstance(value, ast.Constant) and _int_differs(others):
                out.append((first, attr, None, [o.value for o in others]))
            elif not _parallel_diff(others, out):
                return False
        elif attr not in ("ctx", "lineno", "col_offset", "end_lineno", "end_col_offset") and any(
            o != value or type(o) is not type(value) for o in others
        ):
            return False
    return True


def _int_differs(nodes: list[Any]) -> bool:
    values = [n.value for n in nodes if isinstance(n, ast.Constant)]
    return len(values) == len(nodes) and all(type(v) is int for v in values) and len(set(values)) > 1


def _param_shapes(low: _Lowering, group: _Group) -> dict[str, tuple[int, ...]]:
    function, node = group.function, group.nodes[0]
    assert function is not None
    values = _operand_values(node, function)
    return {name: tuple(values[at].aval.shape) for name, at in function.plain_params()}


def _operand_values(node: _Node, function: Function) -> list[Any]:
    return [node.call.args[i][1] if kind == "arg" else node.inputs[i] for kind, i in function.operands]


def _common_subexpressions(trace: Trace) -> dict[Any, Any]:
    """Repeats of an equation within one call, mapped to the first one's outputs.

    torchax re-slices a view each time it is read (`x_re * cos` slices `pairs` again); the
    first slice is the one bound to `x_re`.  The same pure operation on the same operands
    gives the same bits, so each value is computed once, under its torch name.
    """
    eqns = trace.jaxpr.jaxpr.eqns
    alias: dict[Any, Any] = {}
    for call in trace.root.walk():
        seen: dict[Any, Any] = {}
        for i in call.eqns:
            eqn = eqns[i]
            if eqn.effects:
                continue
            operands = tuple(
                ("literal", repr(v.val), str(v.aval)) if isinstance(v, Literal) else alias.get(v, v)
                for v in eqn.invars
            )
            key = (
                eqn.primitive.name,
                _canonical(eqn.params),
                operands,
                tuple(str(v.aval) for v in eqn.outvars),
            )
            first = seen.get(key)
            if first is None:
                seen[key] = eqn
                continue
            for mine, theirs in zip(eqn.outvars, first.outvars):
                alias[mine] = theirs
    return alias


def _dimension_of(
    params: list[str], shapes: list[dict[str, tuple[int, ...]]], values: list[int]
) -> ast.expr | None:
    for param in params:
        if param in ("params", "state") or any(param not in s for s in shapes):
            continue
        ranks = {len(s[param]) for s in shapes}
        if len(ranks) != 1:
            continue
        for dim in range(ranks.pop()):
            if all(s[param][dim] == v for s, v in zip(shapes, values)):
                shape = ast.Attribute(_name(param), "shape", ast.Load())
                return ast.Subscript(shape, ast.Constant(dim), ast.Load())
    return None


# -- small helpers -----------------------------------------------------------------------------------


def _name(name: str, ctx: ast.expr_context | None = None) -> ast.Name:
    return ast.Name(name, ctx or ast.Load())


class _NoMesh:
    axis_names = ("?",)


_NO_MESH = _NoMesh()


def _without_trivial_sharding(eqn: Any) -> Any:
    """`eqn` with a sharding over a mesh of no axes (what a backward pass sets on a single device)
    as None: it places nothing, and None is what the public functions take for it."""
    trivial = [
        k
        for k, v in eqn.params.items()
        if k in ("sharding", "out_sharding") and v is not None and not getattr(v, "mesh", _NO_MESH).axis_names
    ]
    if not trivial:
        return eqn
    return eqn.replace(params={**eqn.params, **dict.fromkeys(trivial)})


def _live_eqns(eqns: list[Any], outvars: list[Any], alias: dict[Any, Any]) -> set[int]:
    needed = {v for v in outvars if isinstance(v, Var)}
    live: set[int] = set()
    for i in range(len(eqns) - 1, -1, -1):
        eqn = eqns[i]
        if any(v in alias for v in eqn.outvars):
            continue  # a repeat: its first occurrence computes it
        if eqn.effects or any(v in needed for v in eqn.outvars):
            live.add(i)
            needed.update(v for v in eqn.invars if isinstance(v, Var))
    return live


def _defining_index(eqns: list[Any], within: set[int], v: Any) -> tuple[int, int]:
    """Where `v` is made: its equation, then its place among that equation's outputs (a `split`'s)."""
    found = (i for i in sorted(within) if v in eqns[i].outvars)
    index = next(found, -1)
    return (index, list(eqns[index].outvars).index(v)) if index >= 0 else (-1, 0)


def _canonical(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple((k, _canonical(v)) for k, v in value.items())
    if isinstance(value, (tuple, list)) and not hasattr(value, "_fields"):
        return tuple(_canonical(v) for v in value)
    if isinstance(value, (ClosedJaxpr, Jaxpr)):
        return str(value)
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    return re.sub(r"0x[0-9a-f]+", "", repr(value))


def _contains(outer: Site, inner: Site) -> bool:
    return (
        outer.file == inner.file
        and (outer.line, outer.col) <= (inner.line, inner.col)
        and (inner.end_line, inner.end_col) <= (outer.end_line, outer.end_col)
    )


def _is_simple(node: ast.expr) -> bool:
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        node = node.value
    return isinstance(node, (ast.Name, ast.Constant))


_PATH_PART = re.compile(r"\[(\d+|'[^']*'|\"[^\"]*\")\]")
_PATH = re.compile(r"(\[(\d+|'[^']*'|\"[^\"]*\")\])+")


def _path_parts(path: str) -> list[int | str]:
    return [int(p) if p.isdigit() else p[1:-1] for p in _PATH_PART.findall(path)]


def _tree_root(path: str) -> str | None:
    """`params` for `params['w1']` or `params[0]`: an argument's name when `path` is inside it."""
    match = re.match(r"[A-Za-z_][A-Za-z0-9_]*", path)
    if match is None or match.end() == len(path):
        return None
    return match.group(0) if _PATH.fullmatch(path[match.end() :]) else None


def _tree_arg(leaves: list[tuple[str, ast.expr]]) -> ast.expr:
    """The pytree holding these leaves: the caller's own tree when each leaf is that tree at its
    path (`params`), else a literal of the leaves (`{"w1": w1, "b1": b1}`)."""
    bases = []
    for path, expr in leaves:
        parts = _path_parts(path)
        node = expr
        for part in reversed(parts):
            if not (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
                    and node.slice.value == part):
                return _paths_expr(leaves)
            node = node.value
        bases.append(node)
    if bases and all(ast.dump(b) == ast.dump(bases[0]) for b in bases):
        return bases[0]
    return _paths_expr(leaves)


def _path_expr(name: str, path: str) -> ast.expr:
    node: ast.expr = _name(name)
    for part in _path_parts(path):
        node = ast.Subscript(node, ast.Constant(part), ast.Load())
    return node


def _paths_expr(leaves: list[tuple[str, ast.expr]]) -> ast.expr:
    """A tuple/dict structure from pytree paths (`''`, `[0]`, `['logits']`) and leaf expressions."""
    if len(leaves) == 1 and leaves[0][0] == "":
        return leaves[0][1]
    tree: dict[Any, Any] = {}
    for path, expr in leaves:
        parts = _path_parts(path)
        node = tree
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1] if parts else ""] = expr
    return _tree_expr(tree)


def _tree_expr(tree: Any) -> ast.expr:
    if not isinstance(tree, dict):
        return tree
    keys = list(tree)
    if all(isinstance(k, int) for k in keys):
        return ast.Tuple([_tree_expr(tree[k]) for k in sorted(keys)], ast.Load())
    return ast.Dict([ast.Constant(k) for k in keys], [_tree_expr(tree[k]) for k in keys])


def _spec_expr(
    spec: Any, leaves: Iterator[ast.expr], static: dict[int, Any], counter: list[int] | None = None
) -> ast.expr:
    """The entry's return value rebuilt from its torch pytree spec (static leaves as constants)."""
    counter = counter if counter is not None else [0]
    if spec.is_leaf():
        index = counter[0]
        counter[0] += 1
        if index in static:
            return _constant(static[index])
        return next(leaves)
    specs = spec.children() if hasattr(spec, "children") else spec.children_specs
    children = [_spec_expr(c, leaves, static, counter) for c in specs]
    if spec.type is dict or (isinstance(spec.type, type) and issubclass(spec.type, dict)):
        return ast.Dict([ast.Constant(k) for k in spec.context], children)
    if spec.type is list:
        return ast.List(children, ast.Load())
    return ast.Tuple(children, ast.Load())


def _constant(value: Any) -> ast.expr:
    if value is None or isinstance(value, (bool, int, float, str)):
        return ast.Constant(value)
    if isinstance(value, (tuple, list)):
        return ast.Tuple([_constant(v) for v in value], ast.Load())
    return ast.Constant(repr(value))


def _nested_dict(entries: dict[str, ast.expr], tree: _Tree, anchor: str) -> ast.expr:
    nested: dict[str, Any] = {}
    splats: list[ast.expr] = []
    for path, expr in entries.items():
        if path == "":
            splats.append(expr)
            continue
        node = nested
        parts = path.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = expr

    def build(node: dict[str, Any], prefix: str) -> ast.expr:
        keys = list(node)
        values = [build(node[k], _join(prefix, k)) if isinstance(node[k], dict) else node[k] for k in keys]
        if prefix in tree.lists and sorted(int(k) for k in keys) == list(range(tree.lengths[prefix])):
            ordered = [v for _, v in sorted(zip((int(k) for k in keys), values), key=lambda kv: kv[0])]
            return ast.List(ordered, ast.Load())
        constants = [ast.Constant(int(k) if prefix in tree.lists else k) for k in keys]
        return ast.Dict(constants, values)

    result = build(nested, anchor)
    if splats and isinstance(result, ast.Dict):
        result.keys = [None] * len(splats) + result.keys
        result.values = splats + result.values
    return result


def _join(prefix: str, part: str) -> str:
    return f"{prefix}.{part}" if prefix else part


def _state_base(child: _Node, node: _Node) -> str:
    relative = _relative(child.anchor or "", node.anchor or "") if child.anchor != node.anchor else ""
    last = relative.split(".")[-1] if relative else ""
    if not last or last.isdigit():
        site = child.call.call_site
        callee = naming.expression_name(site.text if site else None)
        last = (callee or "call").split("_")[0] if not last else (callee or last)
        if site and site.text:
            match = re.match(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*\(", site.text)
            if match:
                last = match.group(1)
    return f"new_{last}_state"


def _array_literal(array: np.ndarray) -> ast.expr:
    dtype = ast.Attribute(_name("np"), array.dtype.name, ast.Load())
    flat = array.reshape(-1)
    if flat.size and (flat == flat[0]).all():
        value = ast.parse(repr(flat[0].item()), mode="eval").body
        return ast.Call(
            ast.Attribute(_name("np"), "full", ast.Load()),
            [ast.Constant(array.shape), value],
            [ast.keyword("dtype", dtype)],
        )
    if array.ndim == 1 and array.size > 1 and np.issubdtype(array.dtype, np.integer):
        step = int(array[1] - array[0])
        if step and (np.diff(array) == step).all():
            args = [ast.Constant(int(array[0])), ast.Constant(int(array[-1]) + step), ast.Constant(step)]
            return ast.Call(
                ast.Attribute(_name("np"), "arange", ast.Load()), args, [ast.keyword("dtype", dtype)]
            )
    value = ast.parse(repr(array.tolist()), mode="eval").body
    return ast.Call(ast.Attribute(_name("np"), "array", ast.Load()), [value], [ast.keyword("dtype", dtype)])


def _helper_params(count: int) -> list[str]:
    letters = ["x", "y", "z", "w"]
    return letters[:count] if count <= len(letters) else [f"x{i}" for i in range(count)]


def _short_file(path: str) -> str:
    parts = path.replace("\\", "/").split("/")
    return "/".join(parts[-2:]) if len(parts) > 1 else path


def _made_by_hoisted(low: _Lowering, node: _Node, v: Any) -> bool:
    parent = node.parent
    return parent is not None and any(
        source is node and v in low.eqns[i].outvars for i, source in parent.hoisted.items()
    )


@functools.lru_cache(maxsize=256)
def _source_tree(file: str) -> ast.Module | None:
    try:
        with open(file, encoding="utf-8") as handle:
            return ast.parse(handle.read())
    except (OSError, SyntaxError, ValueError):
        return None


def _signature(call: Call) -> list[str]:
    """The torch def's parameter names (without `self`), read from its source."""
    tree = _source_tree(call.file)
    if tree is None:
        return []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
            node.lineno == call.line or any(d.lineno == call.line for d in node.decorator_list)
        ):
            names = [a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs]
            return [n for n in names if n not in ("self", "cls")]
    return []


def source_loop(site: Site | None) -> ast.AST | None:
    """The innermost `for` loop or comprehension in the torch source around `site`."""
    if site is None:
        return None
    tree = _source_tree(site.file)
    if tree is None:
        return None
    best: ast.AST | None = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.DictComp)) and (
            (node.lineno, node.col_offset) <= (site.line, site.col)
            and (site.end_line, site.end_col) <= (node.end_lineno or 0, node.end_col_offset or 0)
        ):
            if best is None or (node.lineno, node.col_offset) >= (best.lineno, best.col_offset):  # type: ignore[attr-defined]
                best = node
    return best


# The rules for higher-order primitives write nested defs with the builders above: registered last.
from render import control as _control  # noqa: E402, F401
