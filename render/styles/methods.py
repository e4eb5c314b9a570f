"""A def of the functional export as a method of its class: `params["wq"]["weight"]` reads become the
module's own attributes, calls of child defs `self.child(...)` calls, and the `state` the functional
defs thread through becomes each framework's own (NNX variables written in place, Equinox's `State`).

The statements are the Program's, copied: idioms, names, sizes and the config read as they do in
the functional export. `Framework` is what differs between the styles.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass, field
from typing import Any, Protocol

from jaxside.render.ir import Define, Function, Loop, Statement, named
from jaxside.render.styles.layers import layer_match
from jaxside.render.styles.method_names import method_names
from jaxside.render.styles.reading import (
    all_statements,
    attribute_chain,
    enumerated,
    keys_of,
    list_tail,
    loop_aliases,
    loop_modules,
    walk,
)
from jaxside.render.styles.refold import refold
from jaxside.render.styles.tree import Child, Flag, Node, StyleError, Tree, leaf_kind
from jaxside.render.styles.unpacking import packed, unpack

__all__ = ["Framework", "Writer"]

_BODY_INDENT = 8
"""A method's statements' indent (`render.styles.classes` writes its methods at 4)."""


class Framework(Protocol):
    threads_state: bool
    """Equinox: stateful methods take `state` last and return `(output, state)`."""

    def read(self, ref: ast.expr, kind: str, indexed: bool) -> ast.expr:
        """A leaf of kind "param", "frozen" (a parameter with `requires_grad=False`: no gradient may
        reach it), "buffer" (read only, of floats: no gradient may reach it either),
        "discrete_buffer" (read only, of integers or booleans) or "state" at `ref` (`self.weight`),
        `indexed` when the expression using it subscripts it at once."""
        ...

    def write(self, ref: ast.expr, value: ast.expr) -> ast.stmt:
        """The statement storing a new value of the state leaf at `ref`."""
        ...


@dataclass
class _Scope:
    """Where a def's names point: `params`/`state` at its own node, loop variables at a list item."""

    aliases: dict[str, Child] = field(default_factory=dict)
    state_names: set[str] = field(default_factory=set)


def _is_none(attribute: str, op: ast.cmpop) -> ast.expr:
    """`self.downsample is None` (`op` Is) or `is not None` (IsNot)."""
    return ast.Compare(ast.Attribute(named("self"), attribute, ast.Load()), [op], [ast.Constant(None)])


def _unclashed(tree: ast.FunctionDef, function: Function, module_names: frozenset[str]) -> ast.FunctionDef:
    """`tree` with the names the functional export suffixed only not to hide a def given back where
    that def is a method here (`feed_forward_out` -> `feed_forward`, called as `self.feed_forward`)."""
    bound = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {a.arg for a in ast.walk(tree)
                                                                         if isinstance(a, ast.arg)}
    renames = {name: base for name, base in function.scope.clashed.items()
               if name in bound and base not in bound and base not in module_names}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in renames:
            node.id = renames[node.id]
    return tree


def _appended(value: ast.expr | None) -> bool:
    """Whether `value` is a `name.append(...)` call."""
    return (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
            and value.func.attr == "append" and isinstance(value.func.value, ast.Name))


class Writer:
    """Writes the methods of one class from its defs, for one framework."""

    def __init__(self, tree: Tree, framework: Framework, module_names: frozenset[str] = frozenset()
                 ) -> None:
        self.tree = tree
        self.framework = framework
        self.module_names = module_names
        """What the module binds but its classes' methods: a local given back its name must not hide it."""
        self.defs = {f.name: f for f in tree.program.functions}
        self.config = tree.config_name
        self._current: Function = tree.program.entry
        self.read_kinds: set[str] = set()
        """The kinds of the leaves the methods read (what the docstring says gets no gradient)."""
        self.unstopped: set[str] = set()
        """Frozen parameters read where other instances read trained ones: read as trained."""
        self._seen: dict[str, int] = {}
        """Per def taking no params, its calls written so far in the method (`_callee_path`)."""
        self._method_names: dict[str, dict[int, str]] = {}
        """Per class, its defs' method names, by `id`."""

    def method_name(self, function: Function) -> str:
        """`__call__` for the torch `forward` (the first def of it), else the torch method's name;
        a further def of one torch method named for what sets it apart (`method_names`)."""
        klass = self.tree.methods.get(function.calls[0].module_type or "")
        if klass is None:
            return function.name
        if klass.name not in self._method_names:
            self._method_names[klass.name] = method_names(klass.methods)
        return self._method_names[klass.name][id(function)]

    def method(self, function: Function) -> ast.FunctionDef:
        self._current, self._seen = function, {}
        node = self.tree.nodes[function.calls[0].module_path or ""]
        scope = _Scope(loop_aliases(function, node, self.tree), self._state_names(function))
        written = [(s, self._statement(s, function, scope)) for s in function.body]
        pairs = [(s, styled) for s, styled in written if styled is not None]
        returns = copy.deepcopy(function.returns)
        updates: list[Statement] = []
        if function.calling.state_out and isinstance(returns, ast.Tuple) and len(returns.elts) == 2:
            updates = self._updates(returns.elts[1], [], scope)
            returns = returns.elts[0]
        returns = self._expr(returns, function, scope) if returns is not None else None
        if self._gives_state(function):
            returns = ast.Tuple([returns or ast.Constant(None), named("state")], ast.Load())
        body, returns = refold(pairs + [(u, u) for u in updates], returns, _BODY_INDENT)
        skip = int(function.calling.uses_params) + int(function.calling.uses_state)
        params = ["self", *function.params[skip:], *(["state"] if self._takes_state(function) else [])]
        tree = Function(self.method_name(function), function.calls, params, body, returns,
                        function.scope, doc=function.doc).node()
        tree = _unclashed(tree, function, self.module_names | {k.name for k in self.tree.classes()})
        gone = {"params"} | scope.state_names | (set() if self.framework.threads_state else {"state"})
        left = sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id in gone})
        if left:  # a use of the functional defs' trees this writer does not know
            raise StyleError(f"`{function.name}` uses {', '.join(left)} in a way not written as a method yet",
                             where=_where(function))
        return tree

    def _takes_state(self, function: Function) -> bool:
        """Equinox: whether the method takes the `State` (it reads or writes a cache)."""
        return self.framework.threads_state and function.calling.uses_state

    def _gives_state(self, function: Function) -> bool:
        """Equinox: whether the method returns `(output, state)`: it writes a cache, or is the
        entry of a model with state (called as `model(*inputs, state)`)."""
        entry = function is self.tree.program.entry
        calling = function.calling
        return self.framework.threads_state and (bool(calling.state_out) or entry and calling.uses_state)

    # -- statements ------------------------------------------------------------------------------

    def _statement(self, statement: Statement, function: Function, scope: _Scope) -> Statement | None:
        if isinstance(statement, Define):  # a helper the def calls (a custom rule's body): as it is,
            node = self._expr(statement.node(), function, scope)  # its reads made the module's own
            return _Raw(statement.targets, statement.value, statement.eqns, statement.site, node_=node)
        statement = copy.copy(statement)
        if isinstance(statement, Loop):
            return self._loop(statement, function, scope)
        value = statement.value
        names = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
        stores = statement.targets
        if stores and set(stores) <= scope.state_names:
            return None
        if not stores and _appended(value) and names & scope.state_names:
            return None
        callee = self._callee(value)
        target = statement.target
        if target is None and len(stores) == 2:
            target = ast.Tuple([named(t, ast.Store()) for t in stores], ast.Store())
        if callee is not None and callee.calling.state_out:
            if not isinstance(target, ast.Tuple) or len(target.elts) != 2:
                raise StyleError(f"`{ast.unparse(value)}`: a call returning state without its own statement",
                                 where=_where(function))
            out = target.elts[0]
            if self.framework.threads_state:
                target = ast.Tuple([out, named("state", ast.Store())], ast.Store())
            else:
                target = out
            statement.target = target
            statement.targets = [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]
        statement.value = self._expr(value, function, scope)
        if statement.when is not None:
            statement.when = self._expr(statement.when, function, scope)
        if statement.target is not None and isinstance(statement.target, ast.Name):
            statement.targets, statement.target = [statement.target.id], None
        return statement

    def _state_names(self, function: Function) -> set[str]:
        """The names the functional def gives the new state its calls return (`new_layer_state`),
        the loop variables over state lists (`layer_state`) and the lists collecting them: what the
        module styles do not write (the framework holds the state)."""
        names: set[str] = set()
        statements = all_statements(function.body)
        for statement in statements:
            if isinstance(statement, Loop) and isinstance(statement.loop_target, ast.Tuple):
                sources = statement.iterable.args if isinstance(statement.iterable, ast.Call) else []
                for source, bound in zip(sources, statement.loop_target.elts, strict=False):
                    chain = keys_of(source)
                    if chain is not None and chain[0] == "state" and isinstance(bound, ast.Name):
                        names.add(bound.id)
            callee = self._callee(statement.value)
            target = statement.target
            if callee is not None and callee.calling.state_out:
                if isinstance(target, ast.Tuple) and isinstance(target.elts[-1], ast.Name):
                    names.add(target.elts[-1].id)
                elif target is None and len(statement.targets) == 2:
                    names.add(statement.targets[1])
        for statement in statements:  # `new_layer_states.append(new_layer_state)`
            value = statement.value
            if not statement.targets and _appended(value) and isinstance(value, ast.Call):
                argument, func = value.args[0] if value.args else None, value.func
                appended = isinstance(argument, ast.Name) and argument.id in names
                if appended and isinstance(func, ast.Attribute):
                    names.add(ast.unparse(func.value))
        return names

    def _callee(self, value: ast.expr | None) -> Function | None:
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
            return self.defs.get(value.func.id)
        return None

    def _loop(self, loop: Loop, function: Function, scope: _Scope) -> Statement | None:
        own = loop.loop_target  # the functional export's names for an element's items (`attn, ff`)
        elements = own.elts if isinstance(own, ast.Tuple) else []
        own_names = {e.id for e in elements if isinstance(e, ast.Name)}
        loop = copy.copy(packed(loop, _bound(function)))
        bound = loop_modules(loop, scope.aliases)
        if bound:  # `for layer, layer_state in zip(params["layers"], ...)`: `for layer in self.layers`
            name, items = bound[0]
            iterable = loop.iterable
            source, start = list_tail(iterable.args[0] if isinstance(iterable, ast.Call) else iterable)
            chain = keys_of(source) if source is not None else None
            assert chain is not None
            values = _zipped_values(loop)  # `zip(params["layers"], past_key_values)`: the list stays
            target = loop.loop_target
            counter = target.elts[0] if enumerated(loop) and isinstance(target, ast.Tuple) else None
            loop.iterable = self._module_ref(chain, scope)
            if start:  # `for block in self.block[1:]`
                loop.iterable = ast.Subscript(loop.iterable, ast.Slice(ast.Constant(start)), ast.Load())
            loop.loop_target = named(name, ast.Store())
            if counter is not None:  # `for i, layer in enumerate(self.layers)`: `i` stays
                loop.iterable = ast.Call(named("enumerate"), [loop.iterable], [])
                loop.loop_target = ast.Tuple([counter, loop.loop_target], ast.Store())
            taken = _bound(function) - {name} - own_names
            unpacked = unpack(loop, name, items, taken) if not (values or counter) else None
            if unpacked is not None:  # `for attn, ff in self.layers:`, as torch wrote it
                names, loop.body = unpacked
                loop.loop_target = ast.Tuple([named(n, ast.Store()) for n in names], ast.Store())
                for k, item_name in enumerate(names):
                    scope.aliases[item_name] = [i[k] if isinstance(i, list) else i for i in items]
            elif values:
                sources = [self._expr(v, function, scope) for _, v in values]
                loop.iterable = ast.Call(named("zip"), [loop.iterable, *sources], [])
                loop.loop_target = ast.Tuple([loop.loop_target, *(t for t, _ in values)], ast.Store())
        else:
            loop.iterable = self._expr(loop.iterable, function, scope) if loop.iterable else None
        loop.body = [s for s in (self._statement(s, function, scope) for s in loop.body) if s is not None]
        if loop.when is not None:
            loop.when = self._expr(loop.when, function, scope)
        return loop

    # -- expressions -----------------------------------------------------------------------------

    def _module_ref(self, chain: tuple[str, list[str | int]], scope: _Scope) -> ast.expr:
        base = named("self") if chain[0] in ("params", "state") else named(chain[0])
        return attribute_chain(base, chain[1])

    def _expr(self, value: Any, function: Function, scope: _Scope) -> Any:
        writer = self

        class Rewrite(ast.NodeTransformer):
            def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
                return writer._layer(node, scope) or self.generic_visit(node)

            def visit_Call(self, node: ast.Call) -> ast.AST:
                layer = writer._layer(node, scope)
                if layer is not None:
                    return layer
                self.generic_visit(node)
                if isinstance(node.func, ast.Name) and node.func.id in writer.defs:
                    return writer._call(node, writer.defs[node.func.id], function, scope)
                return node

            def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
                chain = keys_of(node)
                if chain is not None and chain[0] in scope.aliases:
                    return writer._leaf(chain, scope, indexed=False) or node
                inner = keys_of(node.value)
                if inner is not None and inner[0] in scope.aliases:
                    leaf = writer._leaf(inner, scope, indexed=True)
                    if leaf is not None:
                        node.value = leaf
                        node.slice = self.visit(node.slice)
                        return node
                return self.generic_visit(node)

            def visit_ListComp(self, node: ast.ListComp | ast.GeneratorExp) -> ast.AST:
                writer._comprehension(node, scope)
                return self.generic_visit(node)

            visit_GeneratorExp = visit_ListComp  # noqa: N815 (ast.NodeTransformer's naming)

            def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
                flag = writer._flag(function, node.operand) if isinstance(node.op, ast.Not) else None
                if flag is not None and flag.presence:  # `not downsample`: `self.downsample is None`
                    return _is_none(flag.name, ast.Is())
                return self.generic_visit(node)

            def visit_Name(self, node: ast.Name) -> ast.AST:
                if node.id == writer.config:
                    return ast.Attribute(named("self"), node.id, ast.Load())
                flag = writer._flag(function, node)
                if flag is not None and flag.presence:
                    return _is_none(flag.name, ast.IsNot())
                if flag is not None:
                    return ast.Attribute(named("self"), flag.attribute, ast.Load())
                return node

        return Rewrite().visit(copy.deepcopy(value))

    def _comprehension(self, node: ast.ListComp | ast.GeneratorExp, scope: _Scope) -> None:
        """`for expert in params["experts"]` in a comprehension: `for expert in self.experts`."""
        for generator in node.generators:
            chain = keys_of(generator.iter)
            base = scope.aliases.get(chain[0]) if chain is not None else None
            items = walk(base, chain[1]) if chain is not None and base is not None else None
            if isinstance(items, list) and isinstance(generator.target, ast.Name) and chain is not None:
                scope.aliases[generator.target.id] = items
                generator.iter = self._module_ref(chain, scope)

    def _flag(self, function: Function, node: ast.expr) -> Flag | None:
        """The flag of `function`'s class a name is (`stride`), if it is one."""
        klass = self.tree.methods.get(function.calls[0].module_type or "") if function.calls else None
        if klass is None or not isinstance(node, ast.Name) or node.id not in self._flags(function):
            return None
        return klass.flags.get(node.id)

    def _flags(self, function: Function) -> set[str]:
        return {k.name for k in function.keywords if k.name != self.config}

    def _leaf(self, chain: tuple[str, list[str | int]], scope: _Scope, *, indexed: bool) -> ast.expr | None:
        base = scope.aliases[chain[0]]
        found = walk(base, chain[1])
        if isinstance(found, str):
            owner = walk(base, chain[1][:-1])
            leaf = found.removeprefix("leaf:")
            holders = self._holders(chain, owner, leaf)
            kind = leaf_kind(holders, leaf)
            if kind == "param":  # frozen in some instances the method runs on, not in all: read as trained
                self.unstopped |= {n.prefix(leaf) for n in holders if n.leaves.get(leaf) == "frozen"}
            dtype = next((n.dtypes[leaf] for n in holders if leaf in n.dtypes), "float32")
            if kind == "buffer" and not dtype.startswith(("float", "bfloat", "complex")):
                kind = "discrete_buffer"
            self.read_kinds.add(kind)
            return self.framework.read(self._module_ref(chain, scope), kind, indexed)
        return None

    def _holders(self, chain: tuple[str, list[str | int]], owner: Child | str | None, leaf: str
                 ) -> list[Node]:
        """The modules whose `leaf` the read of `chain` reads: from each instance of the method's class
        where the read starts at its own tensors (`self.embed.weight` reads one `Linear`'s weight,
        frozen or not whatever other `Linear`s hold), else every module of the owner's class."""
        klass = self.tree.methods.get(self._current.calls[0].module_type or "")
        if chain[0] == "params" and klass is not None:
            reached = [walk(n, chain[1][:-1]) for n in klass.nodes]
            holders = [n for n in reached if isinstance(n, Node) and leaf in n.leaves]
            if holders:
                return holders
        return [owner, *owner.peers] if isinstance(owner, Node) else []

    def _layer(self, node: ast.expr, scope: _Scope) -> ast.expr | None:
        """`self.wqkv(x)` for `x @ params["wqkv"]["weight"].T` when `wqkv` is a framework layer."""
        match = layer_match(node)
        if match is None:
            return None
        base = scope.aliases.get(match.module[0])
        found = walk(base, match.module[1]) if base is not None else None
        items: list[Child | None] = (found if isinstance(found, list)
                                     else [found] if isinstance(found, Node) else [])
        if not items or not all(isinstance(n, Node) and n.layer for n in items):
            return None
        argument = self._expr(match.argument, self._current, scope)
        return ast.Call(self._module_ref(match.module, scope), [argument], [])

    def _call(self, call: ast.Call, callee: Function, function: Function, scope: _Scope) -> ast.expr:
        """`attention_forward(params["attention"], state["attention"], x, ...)` as
        `self.attention(x, ...)`; a def of no module (`apply_rotary_emb`) stays as it is."""
        if callee.calls[0].module_type is None:
            if callee.calling.uses_params or callee.calling.uses_state:
                raise StyleError(f"`{callee.name}` reads a module's tensors but is no method of it",
                                 where=_where(callee))
            return call
        skip = int(callee.calling.uses_params) + int(callee.calling.uses_state)
        args = call.args[skip:]
        ref: ast.expr = named("self")
        for arg in call.args[:skip]:
            chain = keys_of(arg) if not isinstance(arg, ast.Name) or arg.id in scope.aliases else None
            if isinstance(arg, ast.Name) and arg.id in scope.aliases:
                chain = (arg.id, [])
            if chain is None:
                raise StyleError(f"`{ast.unparse(call)}`: the module a call runs is not a path",
                                 where=_where(function))
            if chain[0] in scope.aliases:
                ref = self._module_ref(chain, scope)
                break
        else:
            relative = self._callee_path(callee, function) if skip == 0 else ""
            if relative:
                keys: list[str | int] = [int(k) if k.isdecimal() else k for k in relative.split(".")]
                ref = attribute_chain(named("self"), keys)
        name = self.method_name(callee)
        func = ref if name == "__call__" else ast.Attribute(ref, name, ast.Load())
        if self._takes_state(callee):
            args = [*args, named("state")]
        keywords = [k for k in call.keywords if k.arg != self.config and k.arg not in self._flags(callee)]
        return ast.Call(func, args, keywords)

    def _callee_path(self, callee: Function, function: Function) -> str:
        """The submodule, relative to the caller's, that a call of a def taking no params runs
        (`reattn_norm.2`): the one module it runs there, or, where it runs several (DeepViT's two
        `Rearrange`s of one `Sequential`, one def), the one of this call, in the order they ran."""
        own = function.calls[0].module_path or ""
        paths = [c.module_path for c in callee.calls if c.module_path is not None
                 and (not own or c.module_path.startswith(own + "."))]
        relative = [p[len(own) + 1:] if own else p for p in paths]
        if len(set(relative)) <= 1:
            path = callee.calls[0].module_path or ""
            return "" if path == own else path[len(own) + 1:] if own else path
        calls = sum(1 for s in all_statements(function.body) for n in ast.walk(s.node())
                    if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == callee.name)
        if calls != len(relative):
            raise StyleError(f"`{callee.name}` runs {len(set(relative))} modules of `{function.name}`, "
                             "not one a call: not written as a method yet", where=_where(function))
        seen = self._seen[callee.name] = self._seen.get(callee.name, -1) + 1
        return relative[seen % len(relative)]

    def _updates(self, tree: ast.expr, keys: list[str | int], scope: _Scope) -> list[Statement]:
        """The writes of a def's own state leaves, from the state tree its functional twin returns."""
        if isinstance(tree, ast.Dict):
            found: list[Statement] = []
            for key, value in zip(tree.keys, tree.values, strict=True):
                if not isinstance(key, ast.Constant) or not isinstance(key.value, (str, int)):
                    raise StyleError(f"`{ast.unparse(tree)}`: a state tree with computed keys",
                                     where=_where(self._current))
                found += self._updates(value, [*keys, key.value], scope)
            return found
        if isinstance(tree, ast.Name) and tree.id in scope.state_names:
            return []
        ref = self._module_ref(("state", keys), scope)
        write = self.framework.write(ref, self._expr(tree, self._current, scope))
        return [_Raw([], tree, [], None, node_=write)]


@dataclass
class _Raw(Statement):
    """A statement given as `ast` (a state write)."""

    node_: ast.stmt | None = None

    def plain(self) -> ast.stmt:
        assert self.node_ is not None
        return self.node_


def _where(function: Function) -> tuple[str, int]:
    """The torch `def` a functional def came from (its file and line)."""
    return function.calls[0].file, function.calls[0].line


def _bound(function: Function) -> set[str]:
    """Every name a def uses or binds."""
    names = {n.id for s in all_statements(function.body) for n in ast.walk(s.node())
             if isinstance(n, ast.Name)}
    return names | set(function.params)


def _zipped_values(loop: Loop) -> list[tuple[ast.expr, ast.expr]]:
    """The (target, list) pairs of a loop's `zip` after its first that are no module's params or
    state (a cache passed in as a list: `(keys, values)`, `past_key_values`)."""
    iterable, target = loop.iterable, loop.loop_target
    if not isinstance(iterable, ast.Call) or ast.unparse(iterable.func) != "zip":
        return []
    if not isinstance(target, ast.Tuple):
        return []
    pairs = list(zip(target.elts, iterable.args))[1:]
    return [(t, v) for t, v in pairs if (keys_of(v) or ("",))[0] not in ("params", "state")]
