"""The def of a call of user code: `Body` extended with the call tree's arguments, params and state.

A `CallDef` writes one group's def from its first call: parameters in the torch def's order
(pytree arguments packed again for a JAX function), module tensors read from its `params` and
`state` subtrees, child calls as calls of their defs (new state coming back), sub-expressions
folded into the torch expression they are part of, and the returned values with new state.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from jax.extend.core import Literal, Var

from jaxside.render import names as naming
from jaxside.render import source as torch_source
from jaxside.render.ir import Fold, Function, Statement, fold, named
from jaxside.render.lower.body import Body
from jaxside.render.lower.calltree import CallTree, Group, Node, hoisted_from, made_by_hoisted, operand_values
from jaxside.render.lower.clone import clone
from jaxside.render.lower.context import INLINE_LIMIT, Context, LoweringError
from jaxside.render.lower.keys import is_key, key_name
from jaxside.render.lower.paths import (
    call_args,
    nested_dict,
    path_expr,
    paths_expr,
    plain_params,
    relative,
    spec_expr,
    tree_root,
)
from jaxside.render.lower.value_names import (
    cache_name,
    call_name,
    cast_name,
    module_attribute,
    passed_values,
    returned_names,
    state_base,
)
from jaxside.render.rules import Structured, atom_expr
from jaxside.render.source import site_contains
from jaxside.tracing.trace import Site


class CallDef(Body):
    """Writes the def a group of calls shares (from its first call's node)."""

    def __init__(self, ctx: Context, tree: CallTree, group: Group) -> None:
        super().__init__(ctx)
        self.tree = tree
        self.group = group
        self.node = group.nodes[0]
        self.folded: dict[Any, list[int]] = {}
        self.uses_params = False
        self.uses_state = False
        self.child_states: list[tuple[Node, str]] = []
        self.param_shapes: dict[str, tuple[int, ...]] = {}

    def expr(self, v: Any) -> ast.expr:
        """The expression for value `v` here; folding an inlined expression in, once."""
        if isinstance(v, Literal):
            return atom_expr(v, self)
        if v in self.env:
            if v in self.folded:
                self.pending += self.folded.pop(v)
            return clone(self.env[v])
        role = self.tree.classify(self.node, v)
        if role[0] == "param":
            self.uses_params = True
            leaf = self.ctx.roles.param_tree.subscript(named("params"), role[1], self.node.anchor or "")
            self.param_shapes.setdefault(ast.unparse(leaf), tuple(v.aval.shape))
            return leaf
        if role[0] == "state":
            self.uses_state = True
            return self.ctx.roles.state_tree.subscript(named("state"), role[1], self.node.anchor or "")
        if role[0] == "const":
            return self.ctx.module.constant(self.ctx.flow.consts[v], "const")
        raise LoweringError(f"no value for {v} in `{self.node.call.function}`")

    # -- a user def --------------------------------------------------------------------------------

    def build(self) -> None:
        node = self.node
        self.scope.preferred = {name for name, _, _ in node.call.seen.bindings}
        function = Function("", [n.call for n in self.group.nodes], [], [], None, self.scope)
        items = self.tree.items(node)
        self._count_uses(node, items)
        params = self._parameters(node, function)
        for item in items:
            if isinstance(item, Node):
                self._emit_call(item)
            else:
                self._emit_eqn(item)
        function.returns = self._returns(node, function)
        function.body = self.body
        function.params = (
            (["params"] if self.uses_params else []) + (["state"] if self.uses_state else []) + params
        )
        function.calling.uses_params, function.calling.uses_state = self.uses_params, self.uses_state
        function.calling.state_out = (
            [relative(p, node.anchor) for p in node.state_out] if node.anchor is not None else []
        )
        function.anchor = node.anchor
        if node.parent is None:
            function.arg_shapes = {
                function.arg_names.get(item.name, item.name): tuple(item.var.aval.shape)
                for item in self.ctx.trace.inputs
                if item.kind == "arg" and function.arg_names.get(item.name, item.name) in params
            }
        else:
            values = operand_values(node, function)
            function.arg_shapes = {name: tuple(values[at].aval.shape) for name, at in plain_params(function)}
        self.record_shapes(function)
        function.param_shapes = self.param_shapes
        self.group.function = function

    def _count_uses(self, node: Node, items: list[int | Node]) -> None:
        def use(v: Any, site: Site | None | str) -> None:
            if isinstance(v, Var):
                self.uses[v] += 1
                self.consumer[v] = site

        for item in items:
            if isinstance(item, Node):
                function = item.group.function if item.group else None
                assert function is not None, "callee rendered first"
                for v in self._call_operands(item, function):
                    use(v, item.call.call_site)
            else:
                for v in self.ctx.flow.eqns[item].invars:
                    use(v, self.ctx.trace.eqn_sites[item])
        for _, v in self.tree.returned(node):
            use(v, "return")
        for v in self._extra_outputs(node):
            use(v, "return")
        for path in node.state_out:
            if not any(path in c.state_out for c in node.children):
                use(self.ctx.roles.state_final[path], "return")

    def _call_operands(self, child: Node, function: Function) -> list[Any]:
        return operand_values(child, function)

    def _extra_outputs(self, node: Node) -> list[Any]:
        if node.parent is None:
            return []
        returned = {v for _, v in self.tree.returned(node)}
        finals = {self.ctx.roles.state_final[p] for p in node.state_out}
        extras = [v for v in node.outputs if v not in returned and v not in finals]
        # in the order the entry returns them (a cache's `keys, values`), the others after, as made
        outputs = list(enumerate(v for _, v in self.ctx.flow.outputs))
        order = {v: i for i, v in reversed(outputs) if isinstance(v, Var)}
        return sorted(extras, key=lambda v: order.get(v, len(order)) if isinstance(v, Var) else len(order))

    def _parameters(self, node: Node, function: Function) -> list[str]:
        ctx, names = self.ctx, []
        if node.parent is None:
            seen: dict[str, str] = {}
            for item in ctx.trace.inputs:
                if item.kind != "arg":
                    continue
                head = re.match(r"[A-Za-z_][A-Za-z0-9_]*", item.name)
                root = head.group(0) if head else "arg"
                if root not in seen:
                    seen[root] = self.scope.fresh(root, "argument")
                    names.append(seen[root])
                self.env[item.var] = path_expr(seen[root], item.name[len(root) :])
            function.arg_names = seen
            return names
        signature = torch_source.parameters(node.call.file, node.call.line)
        bound = {name for name, _ in node.call.args}
        passed = passed_values(node)
        unbound = [n for n in signature if n not in bound and (passed is None or n in passed)]
        operands: list[tuple[str, str, int]] = []  # (name, kind, slot)
        for index, (name, var) in enumerate(node.call.args):
            v = ctx.flow.resolve(var)
            if v in node.inputs and v not in self.env:
                operands.append((name, "arg", index))
                self.env[v] = named(name)  # placeholder until the name is final
        hoisted_vars = [v for v in node.inputs if made_by_hoisted(ctx, node, v)]
        for index, v in enumerate(node.inputs):
            if v in self.env or self.tree.classify(node, v) != ("extra",):
                continue
            if v in hoisted_vars and len(hoisted_vars) == len(unbound):
                base = unbound[hoisted_vars.index(v)]
            elif is_key(v):
                base = "key"
            else:
                origin = ctx.trace.origin(v)
                sources = hoisted_from(ctx, node, v) if v in hoisted_vars else []
                made_of = ctx.trace.origin(sources[0]) if len(sources) == 1 else None
                if made_of is not None and made_of.kind in ("param", "buffer"):
                    origin = made_of  # the one tensor it is made of: `shift` of `shift * 2.0`
                base = (
                    naming.leaf_name(origin.name, node.call.module_path)
                    if origin and origin.name
                    else naming.expression_name(origin.expression if origin else None) or ""
                )
            operands.append((base, "extra", index))
            self.env[v] = named(base)
        # In the torch def's parameter order where the names tell it (`x_t, h`), captured values last.
        order = {name: i for i, name in enumerate(signature)}
        operands.sort(key=lambda op: order.get(tree_root(op[0]) or op[0], len(order)))
        trees = ctx.trace.frontend == "jax"  # a JAX function's pytree arguments stay pytrees
        grouped: dict[str | int, list[tuple[str, str, int]]] = {}
        for base, kind, index in operands:
            top = tree_root(base) if trees and kind == "arg" else None
            grouped.setdefault(top if top in order else len(grouped), []).append((base, kind, index))
        for key, members in grouped.items():
            if not isinstance(key, str):
                ((base, kind, index),) = members
                name = self.scope.fresh(base, "argument" if base else "fallback")
                names.append(name)
                function.calling.packing.append(None)
                function.calling.operands.append((kind, index))
                v = ctx.flow.resolve(node.call.args[index][1]) if kind == "arg" else node.inputs[index]
                self.env[v] = named(name)
                continue
            name = self.scope.fresh(key, "argument")
            names.append(name)
            pack = []
            for base, kind, index in members:
                pack.append((base[len(key) :], len(function.calling.operands)))
                function.calling.operands.append((kind, index))
                self.env[ctx.flow.resolve(node.call.args[index][1])] = path_expr(name, base[len(key) :])
            function.calling.packing.append(pack)
        return names

    def _inlinable(self, v: Any, site: Site | None, value: ast.expr, call_site: bool = False) -> bool:
        if self.uses[v] != 1 or self.tree.local_name(self.node, v):
            return False
        if self.ctx.trace.gradients.get(v) is not None:
            return False  # the gradient of a named value: a line of its own, to read and to edit
        consumer = self.consumer.get(v)
        long = len(ast.unparse(value)) > INLINE_LIMIT and not (call_site and self._named_as_def(site))
        if site is not None and consumer not in (site, "return") and long:
            return False  # a long sub-expression of its own (`self.conv1(x)`) reads better named
        if consumer == "return":
            return True
        if site is None or not isinstance(consumer, Site):
            return False
        if call_site and consumer == site:
            return False  # the same call site again: the next iteration of a loop
        # (`d[:, 1:3] = h[:, :2]`: the slice read inside the item assignment, `d.at[:, 1:3].set(h[:, :2])`)
        return site_contains(consumer, site) or torch_source.assigned_into(consumer, site)

    def _named_as_def(self, site: Site | None) -> bool:
        """Whether a call's value would be named as a def is (`self.feed_forward(...)` calling the def
        `feed_forward`): it stays in the expression using it (`h + feed_forward(...)`, as torch
        writes it), since a name of its own would be `feed_forward_out`."""
        name = naming.expression_name(site.text if site else None)
        return name is not None and not name.isupper() and name in self.ctx.module.scope.names

    def _target(
        self,
        v: Any,
        site: Site | None,
        fallback: str,
        operand: ast.expr | None = None,
        *,
        made_in_call: bool = False,
        returned_as: str | None = None,
    ) -> str:
        local = self.tree.local_name(self.node, v)
        if local:
            return self.scope.fresh(local, "local")
        if v in self.ctx.trace.gradients:
            return self.scope.fresh(self._gradient_base(v, site), "gradient")
        if v in self.ctx.trace.derivatives:
            return self.scope.fresh(self._derivative_base(v, site), "gradient")
        readers = [self.ctx.flow.eqns[u] for u in self.ctx.flow.uses.get(v, [])]
        key = key_name(v, readers, site.text if site else None)
        if key:  # `key, drop_key = jax.random.split(key)`
            return self.scope.fresh(key, "local")
        if returned_as:  # `cos, sin = rotary_emb(...)`: an item of a tuple the callee returns by name
            return self.scope.fresh(returned_as, "local")
        if made_in_call:
            cached = cache_name(self.ctx.trace.outputs, self.ctx.flow.resolve, v)
            if cached:  # a cache the entry returns: `keys`, `values` as its path says, not `k_embed`
                return self.scope.fresh(cached, "expression")
            # A value a callee made and the caller needs (a forward residual): the callee's name for it.
            origin = self.ctx.trace.origin(v)
            base = origin.name or naming.expression_name(origin.expression) if origin else None
            if base:
                return self.scope.fresh(base, "local" if origin and origin.name else "expression")
        uses = self.ctx.flow.uses.get(v, [])
        if (
            site is not None
            and isinstance(operand, ast.Name)
            and uses
            and any(self._within(u, site) for u in uses if u not in self.ctx.flow.backward_eqns)
        ):
            # A step inside one torch expression: a new version of its operand, not the expression.
            return self.scope.fresh(
                re.sub(r"_\d+$", "", operand.id), self.scope.names.get(operand.id, "fallback"), temporary=True
            )
        cast = cast_name(operand, site) if fallback == "convert_element_type" else None
        if cast:  # `xshaped[..., 0] * freqs_cis[..., 0]` at two dtypes: the cast is `freqs_cis_0`
            return self.scope.fresh(cast, "expression", temporary=True)
        keyed = torch_source.dict_key(site) if site is not None else None
        keyed = keyed if keyed and self._result(v, site) else None
        if keyed:  # `{"full_attention": create_causal_mask(...)}`: the entry's value, as its key names it
            return self.scope.fresh(keyed, "expression", temporary=True)
        base = naming.expression_name(site.text if site else None)
        if base:
            return self.scope.fresh(base, "expression", temporary=True)
        return self.scope.fresh(fallback, "fallback")

    def _result(self, v: Any, site: Site | None) -> bool:
        """Whether `v` is what the torch expression at `site` gives: its last equation's value, not
        a step of it (nor a step two entries share: `{"full_attention": ..., "sliding_attention": ...}`)."""
        sites, live = self.ctx.trace.eqn_sites, self.ctx.flow.live
        at = [i for i in self.node.eqns if i in live and sites[i] == site]
        return bool(at) and v in self.ctx.flow.eqns[max(at)].outvars

    def _within(self, use: int, site: Site) -> bool:
        """Whether equation `use` is of the torch expression at `site`: the same, or part of it (the
        item `e[..., 1] += 1.0` writes back into, `e[..., 1]`)."""
        at = self.ctx.trace.eqn_sites[use]
        return at == site or (at is not None and site_contains(site, at))

    def _emit_eqn(self, index: int) -> None:
        eqn = self.ctx.flow.eqns[index]
        site = self.ctx.trace.eqn_sites[index]
        self.pending = [index]
        self.site = site
        operands = [self.expr(v) for v in eqn.invars]
        value = self.render(eqn, clone(operands))
        outs = eqn.outvars
        if len(outs) == 1 and not isinstance(value, Structured) and self._inlinable(outs[0], site, value):
            self.folded[outs[0]] = self._take_pending()
            self.env[outs[0]] = fold(value, Fold(None, list(self.folded[outs[0]]), site))
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
        if isinstance(value, Structured):
            names = {i: t for i, t in enumerate(targets) if t != "_"}
            self.emit_structured(list(outs), value, names, site, self._take_pending())
            return
        self._emit(Statement(targets, value, self._take_pending(), site))
        for v, t in zip(outs, targets):
            if t != "_":
                self.env[v] = named(t)

    def _hoisted_name(self, child: Node, v: Any, site: Site | None, fallback: str) -> str:
        function = child.group.function if child.group else None
        if function is not None and v in child.inputs:
            operand = ("extra", child.inputs.index(v))
            if operand in function.calling.operands:
                position = function.calling.operands.index(operand)
                for name, at in plain_params(function):
                    if at == position:
                        return self.scope.fresh(name, "argument")
        return self._target(v, site, fallback)

    def _emit_call(self, child: Node) -> None:
        ctx, node = self.ctx, self.node
        function = child.group.function if child.group else None
        assert function is not None
        self.pending = []
        self.site = child.call.call_site
        args: list[ast.expr] = []
        below = (
            relative(child.anchor, node.anchor)
            if child.anchor is not None and node.anchor is not None
            else ""
        )
        if function.calling.uses_params:
            self.uses_params = True
            args.append(ctx.roles.param_tree.subscript(named("params"), below, node.anchor or ""))
        if function.calling.uses_state:
            self.uses_state = True
            args.append(ctx.roles.state_tree.subscript(named("state"), below, node.anchor or ""))
        args += call_args(function, [self.expr(v) for v in self._call_operands(child, function)])
        keywords = [k for k in (keyword.at(child.call) for keyword in function.keywords) if k is not None]
        value: ast.expr = ast.Call(named(function.name), args, keywords)
        returned = self.tree.returned(child)
        extras = [child.outputs[i] for i in function.calling.out_slots]
        if (
            len(returned) == 1
            and returned[0][0] == ""
            and not function.calling.state_out
            and not extras
            and returned[0][1] not in self.env
            and self._inlinable(returned[0][1], self.site, value, True)
        ):
            v = returned[0][1]
            self.folded[v] = self._take_pending()
            site = self.site
            name = call_name(site, child.call)
            self.env[v] = fold(value, Fold(name, list(self.folded[v]), site, child.call))
            return
        targets: list[ast.expr] = []
        flat: list[str] = []
        if returned:
            targets.append(self._returned_target(child, returned, flat))
        if function.calling.state_out:
            state_name = self.scope.fresh(state_base(child, node), "parameter")
            flat.append(state_name)
            targets.append(named(state_name, ast.Store()))
            self.child_states.append((child, state_name))
            for path in child.state_out:
                var = ctx.roles.state_final[path]
                if var not in self.env:
                    self.env[var] = ctx.roles.state_tree.subscript(
                        named(state_name), relative(path, child.anchor or ""), child.anchor or ""
                    )
        for v in extras:
            name = self._target(v, self.site, "value", made_in_call=True)
            flat.append(name)
            targets.append(named(name, ast.Store()))
            self.env[v] = named(name)
        target = targets[0] if len(targets) == 1 else ast.Tuple(targets, ast.Store())
        self._emit(Statement(flat, value, self._take_pending(), self.site, child.call, target))

    def _returned_target(self, child: Node, returned: list[tuple[str, Any]], flat: list[str]) -> ast.expr:
        paths = [p for p, _ in returned]
        if paths == [""] or paths == [f"[{i}]" for i in range(len(paths))]:
            names = []
            callee = returned_names(child.group.function if child.group else None, len(paths))
            for k, (_, v) in enumerate(returned):
                if v in self.env or not self.uses[v]:
                    names.append("_")
                    continue
                single = module_attribute(self.site.text, child.call) if self.site and paths == [""] else None
                name = self._target(v, self.site, "value", returned_as=callee[k] or single)
                self.env[v] = named(name)
                names.append(name)
            flat += [n for n in names if n != "_"]
            if paths == [""]:
                return named(names[0], ast.Store())
            return ast.Tuple([named(n, ast.Store()) for n in names], ast.Store())
        assigned = torch_source.assigned_name(self.site) if self.site else None
        if assigned:  # `outputs: ModelOutput = self.model(...)`: the torch name for the whole result
            whole = self.scope.fresh(assigned, "local")
        else:
            base = call_name(self.site, child.call) or "result"
            whole = self.scope.fresh(base, "expression")
        flat.append(whole)
        for path, v in returned:
            if v not in self.env:
                self.env[v] = path_expr(whole, path)
        return named(whole, ast.Store())

    def _returns(self, node: Node, function: Function) -> ast.expr | None:
        ctx = self.ctx
        parts: list[ast.expr] = []
        if node.parent is None:
            leaves = iter(self.expr(v) for _, v in ctx.flow.outputs)
            parts.append(spec_expr(ctx.trace.out_tree, leaves, ctx.trace.static_outputs))
        else:
            returned = self.tree.returned(node)
            function.calling.ret_paths = [p for p, _ in returned]
            if returned:
                parts.append(paths_expr([(p, self.expr(v)) for p, v in returned]))
            elif not node.state_out and not self._extra_outputs(node):
                parts.append(ast.Constant(None))
        if node.state_out:
            parts.append(self._state_dict(node))
        extras = self._extra_outputs(node)
        function.calling.out_slots = [node.outputs.index(v) for v in extras]
        parts += [self.expr(v) for v in extras]
        if len(parts) == 1:
            return parts[0]
        return ast.Tuple(parts, ast.Load())

    def _state_dict(self, node: Node) -> ast.expr:
        ctx, anchor = self.ctx, node.anchor or ""
        entries: dict[str, ast.expr] = {}
        for path in node.state_out:
            child = next((c for c, _ in self.child_states if path in c.state_out), None)
            if child is not None:
                name = next(n for c, n in self.child_states if c is child)
                entries.setdefault(
                    relative(child.anchor or "", anchor) if child.anchor != anchor else "", named(name)
                )
            else:
                entries[relative(path, anchor)] = self.expr(ctx.roles.state_final[path])
        return nested_dict(entries, ctx.roles.state_tree, anchor)
