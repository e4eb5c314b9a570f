"""The call tree of a lowering: which calls become defs, what each takes and gives, which calls share a def.

Each `Node` is a call of user code with the equations it (and its callees) computed, its inputs
and outputs as values, and the module path its `params`/`state` subtrees start at.  `signature`
describes everything that decides how a node renders, values referred to by role; nodes with
the same signature form a `Group` and share one def.  `hoist` moves computations of captured
values (a cell's `x[:, t]`) out to the caller so the calls share one def again.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from jax.extend.core import Literal, Var

from jaxside.render.ir import Function
from jaxside.render.lower.context import Context
from jaxside.render.lower.paths import relative, under
from jaxside.tracing.trace import Call


@dataclass(eq=False)
class Node:
    call: Call
    parent: Node | None
    anchor: str | None
    position: int
    own: list[int] = field(default_factory=list)
    hoisted: dict[int, Node] = field(default_factory=dict)
    children: list[Node] = field(default_factory=list)
    eqns: set[int] = field(default_factory=set)
    inputs: list[Any] = field(default_factory=list)
    outputs: list[Any] = field(default_factory=list)
    state_out: list[str] = field(default_factory=list)
    group: Group | None = None

    def walk(self) -> Iterator[Node]:
        yield self
        for child in self.children:
            yield from child.walk()

    @property
    def code(self) -> tuple[str, int, str]:
        return (self.call.file, self.call.line, self.call.function)


@dataclass(eq=False)
class Group:
    key: int
    """The id of its nodes' signature (`CallTree.key`)."""
    nodes: list[Node]
    height: int = 0
    function: Function | None = None


class CallTree:
    """The trace's call tree, cut to the calls that compute something, and questions about its nodes."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._ids: dict[str, int] = {}
        """Each signature seen, by its id: a caller's signature names a callee's by id, so
        signatures stay as long as the caller's own body however deep the calls nest."""
        self._keys: dict[Node, int] = {}
        """Signature ids of nodes not grouped yet, valid until the tree changes."""
        self._local_names: dict[int, dict[Any, str]] = {}
        """Each call's torch locals by the value first bound to them (`local_name`)."""
        root = self.build(ctx.trace.root, None)
        assert root is not None
        self.root = root
        self.dataflow(root)

    def build(self, call: Call, parent: Node | None) -> Node | None:
        if parent is None:
            anchor = "" if self.ctx.roles.module_entry else None
        elif call.module_path is not None and under(call.module_path, parent.anchor):
            anchor = call.module_path
        else:
            anchor = parent.anchor
        live = self.ctx.flow.live
        node = Node(call, parent, anchor, 0)
        node.own = [i for i in call.eqns if i in live]
        # (a child is None when none of its equations is live: its first live one is its position)
        node.children = [c for c in (self.build(child, node) for child in call.children) if c is not None]
        if not node.own and not node.children and parent is not None:
            return None
        node.position = min([*node.own, *(c.position for c in node.children)], default=0)
        return node

    def dataflow(self, root: Node) -> None:
        """Each node's equations, inputs (in the order first read), outputs (in the order made) and
        the state it writes. Where each value is made by one equation and read only after it (the
        trace's order), a node's are merged from its own equations' and its children's (`_merged`):
        each equation is read once, not once per call around it."""
        makers = _makers(self.ctx.flow.eqns, self.ctx.flow.live)
        if makers is None:
            self._walked(root)
            return
        paths = list(self.ctx.roles.state_final)
        finals: dict[int, list[int]] = {}  # by equation, the state paths whose new value it makes
        for n, var in enumerate(self.ctx.roles.state_final.values()):
            if var in makers:
                finals.setdefault(makers[var][0], []).append(n)
        self._merged(root, makers, finals, paths)

    def _merged(
        self, node: Node, makers: dict[Any, tuple[int, int]], finals: dict[int, list[int]], paths: list[str]
    ) -> tuple[dict[Any, tuple[int, int]], set[int]]:
        """`_walked`'s answers from the children's and the node's own equations, by where each value
        is made (`makers`); returns where the node first reads each of its inputs, and which state
        paths it makes the new values of (by place in `paths`)."""
        children = [self._merged(child, makers, finals, paths) for child in node.children]
        node.eqns = within = set(node.own).union(*(c.eqns for c in node.children))
        written = set().union(*(w for _, w in children))
        for i in node.own:
            written.update(finals.get(i, ()))
        eqns = self.ctx.flow.eqns
        first: dict[Any, tuple[int, int]] = {}
        made: list[Any] = []
        for i in node.own:
            eqn = eqns[i]
            for k, v in enumerate(eqn.invars):
                if isinstance(v, Var):
                    maker = makers.get(v)
                    if (maker is None or maker[0] not in within) and first.get(v, (i, k)) >= (i, k):
                        first[v] = (i, k)
            made += eqn.outvars
        for reads, _ in children:
            for v, at in reads.items():
                maker = makers.get(v)
                if (maker is None or maker[0] not in within) and first.get(v, at) >= at:
                    first[v] = at
        node.inputs = sorted(first, key=first.__getitem__)
        # (a value made in a child and read beyond this node is read beyond the child: its output)
        made += [v for c in node.children for v in c.outputs]
        outs, uses = self.ctx.flow.program_outs, self.ctx.flow.uses
        leaving = [v for v in made if v in outs or not within.issuperset(uses.get(v, ()))]
        node.outputs = sorted(leaving, key=makers.__getitem__)
        node.state_out = [paths[n] for n in sorted(written) if under(paths[n], node.anchor)]
        return first, written

    def _walked(self, node: Node) -> None:
        for child in node.children:
            self._walked(child)
        node.eqns = within = set(node.own).union(*(c.eqns for c in node.children))
        flow = self.ctx.flow
        eqns = flow.eqns
        made: dict[Any, tuple[int, int]] = {}  # each value made within: (equation, output)
        inputs: dict[Any, None] = {}
        for i in sorted(within):
            eqn = eqns[i]
            for v in eqn.invars:
                if isinstance(v, Var) and v not in made:
                    inputs.setdefault(v)
            for j, v in enumerate(eqn.outvars):
                made.setdefault(v, (i, j))
        node.inputs = list(inputs)
        outs, uses = flow.program_outs, flow.uses
        leaving = [v for v in made if v in outs or not within.issuperset(uses.get(v, ()))]
        node.outputs = sorted(leaving, key=made.__getitem__)
        finals = self.ctx.roles.state_final
        node.state_out = [path for path, var in finals.items() if var in made and under(path, node.anchor)]

    def classify(self, node: Node, v: Any) -> tuple[Any, ...]:
        """How `node`'s def gets input `v`: an argument, its params/state subtree, or an extra."""
        if node.parent is None:
            item = self.ctx.roles.input_of.get(v)
            if item is not None and item.kind == "arg":
                return ("arg", item.name)
        else:
            for index, (_, var) in enumerate(node.call.args):
                if self.ctx.flow.resolve(var) is v:
                    return ("arg", index)
        item = self.ctx.roles.input_of.get(v)
        anchor = node.anchor
        stored = item is not None and item.kind in ("param", "buffer")
        if item is not None and stored and anchor is not None and under(item.name, anchor):
            kind = "state" if v in self.ctx.roles.state_in else "param"
            return (kind, relative(item.name, anchor))
        if v in self.ctx.flow.consts:
            return ("const",)
        return ("extra",)

    def items(self, node: Node) -> list[int | Node]:
        """What `node`'s body does, in order: its own equations and its child calls."""
        keyed: list[tuple[tuple[int, int, int], int | Node]] = []
        for i in node.own:
            source = node.hoisted.get(i)
            keyed.append(((source.position if source else i, 0, i), i))
        for child in node.children:
            keyed.append(((child.position, 1, 0), child))
        return [item for _, item in sorted(keyed, key=lambda pair: pair[0])]

    def local_name(self, node: Node, v: Any) -> str | None:
        """The first torch local `node`'s call bound `v` to, if any."""
        if not isinstance(v, Var):
            return next((n for n, _, var in node.call.seen.bindings if self.ctx.flow.resolve(var) is v), None)
        return self._names(node).get(v)

    def _names(self, node: Node) -> dict[Any, str]:
        """`node`'s call's torch locals by the value first bound to them."""
        names = self._local_names.get(id(node.call))  # (the trace, which holds the calls, outlives this)
        if names is None:
            names = self._local_names[id(node.call)] = {}
            for name, _line, var in node.call.seen.bindings:
                bound = self.ctx.flow.resolve(var)
                if isinstance(bound, Var):
                    names.setdefault(bound, name)
        return names

    def returned(self, node: Node) -> list[tuple[str, Any]]:
        if node.parent is None:
            return list(self.ctx.flow.outputs)
        # A result nobody used is not computed (a loss under `jax.grad`): the call returns the rest.
        returned = [
            (p, self.ctx.flow.resolve(v))
            for p, v in node.call.returned
            if isinstance(v, Var) and self.ctx.flow.resolve(v) in self.ctx.flow.available
        ]
        if [p for p, _ in returned] == ["[0]"]:
            # `return attn_output, attn_weights` with `attn_weights` None: the value itself, as a
            # person writes the def (the entry keeps torch's structure: it is not a call of one).
            return [("", returned[0][1])]
        return returned

    def key(self, node: Node) -> int:
        """The id of `node`'s signature: equal ids, equal signatures."""
        if node.group is not None:
            return node.group.key
        if node not in self._keys:
            self._keys[node] = self._id(self.signature(node))
        return self._keys[node]

    def _id(self, signature: str) -> int:
        return self._ids.setdefault(signature, len(self._ids))

    def signature(self, node: Node, exclude: frozenset[int] = frozenset()) -> str:
        """Everything that decides how `node` renders, with values referred to by role (and
        callees by the id of their signature)."""
        refs: dict[Any, tuple[Any, ...]] = {}
        extras = 0
        keys = self.ctx.flow.keys

        def ref(v: Any) -> tuple[Any, ...]:
            nonlocal extras
            if isinstance(v, Literal):
                return keys.literal(v)
            if v not in refs:
                role = self.classify(node, v)
                if role == ("extra",):
                    role = ("extra", extras)
                    extras += 1
                refs[v] = role
            return refs[v]

        parts: list[Any] = [node.code, node.anchor is None]
        eqns, sites, names = self.ctx.flow.eqns, self.ctx.trace.eqn_sites, self._names(node)
        for position, item in enumerate(self.items(node)):
            if isinstance(item, Node):
                parts.append(
                    (
                        "call",
                        self.key(item),
                        # Its params and state come as one subtree: which leaves, the callee's
                        # signature says, so a deep call's leaves are not listed at every level.
                        tuple(r for r in (ref(v) for v in item.inputs) if r[0] not in ("param", "state")),
                        relative(item.anchor, node.anchor)
                        if item.anchor is not None and node.anchor is not None
                        else None,
                    )
                )
                for j, v in enumerate(item.outputs):
                    refs[v] = ("call", position, j)
                continue
            if item in exclude:
                continue
            eqn, site = eqns[item], sites[item]
            outvars = eqn.outvars
            parts.append(
                (
                    eqn.primitive.name,
                    keys.params(eqn.params),
                    tuple([ref(v) for v in eqn.invars]),
                    tuple([keys.type(v.aval) for v in outvars]),
                    (site.line, site.col, site.end_line, site.end_col) if site else None,
                    tuple([names.get(v) for v in outvars]),
                )
            )
            for j, v in enumerate(outvars):
                refs[v] = ("eqn", position, j)
        parts.append(("returns", tuple((p, ref(v)) for p, v in self.returned(node))))
        # The state it writes, relative to its subtree as its def returns it: the layers of a
        # stack, each writing its own cache, share one def.
        state_out = [relative(p, node.anchor) for p in node.state_out] if node.anchor is not None else []
        parts.append(("outputs", tuple(ref(v) for v in node.outputs), tuple(state_out)))
        return repr(parts)

    def hoist(self, root: Node) -> None:
        """Move computations of captured values out of calls that differ only in those.

        A cell called at every time step with `x[:, t]` reads `x` itself (torchax materializes
        the slice inside the call), so each call slices differently; the slice belongs to
        the caller, and the calls then share one def.
        """
        by_code: dict[tuple[Any, ...], list[Node]] = {}
        for node in root.walk():
            if node.parent is not None:
                by_code.setdefault(node.code, []).append(node)
        changed = False
        for nodes in by_code.values():
            if len(nodes) < 2 or len({self.key(n) for n in nodes}) == 1:
                continue
            plans = [(n, self.hoistable(n)) for n in nodes]
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
            self._keys.clear()
        if changed:
            self.dataflow(root)
            self._keys.clear()  # (some were taken between a hoist and the new data flow)

    def hoistable(self, node: Node) -> list[int]:
        """`node`'s own equations that depend only on captured values (and each other), short of
        what it returns: a call whose whole body reads captured values (`rotate_half` of a lazy
        slice `q[..., :d]`) keeps its result, so its def still computes something."""
        made: set[Any] = set()
        inputs = set(node.inputs)
        returned = {v for _, v in self.returned(node)}
        result = []
        for i in node.own:
            eqn = self.ctx.flow.eqns[i]
            if eqn.effects or any(v in returned for v in eqn.outvars):
                continue
            if all(
                isinstance(v, Literal) or v in made or (v in inputs and self.classify(node, v) == ("extra",))
                for v in eqn.invars
            ):
                result.append(i)
                made.update(eqn.outvars)
        return result

    def group(self, root: Node) -> list[Group]:
        groups: dict[int, Group] = {}
        order: list[Group] = []

        def visit(node: Node) -> int:
            height = max((visit(c) for c in node.children), default=-1) + 1
            key = self.key(node)  # (hoisting took most already)
            group = groups.get(key)
            if group is None:
                group = groups[key] = Group(key, [], height)
                order.append(group)
            group.nodes.append(node)
            node.group = group
            return height

        visit(root)
        return order


def operand_values(node: Node, function: Function) -> list[Any]:
    operands = function.calling.operands
    return [node.call.args[i][1] if kind == "arg" else node.inputs[i] for kind, i in operands]


def made_by_hoisted(ctx: Context, node: Node, v: Any) -> bool:
    parent = node.parent
    return parent is not None and any(
        source is node and v in ctx.flow.eqns[i].outvars for i, source in parent.hoisted.items()
    )


def hoisted_from(ctx: Context, node: Node, v: Any) -> list[Any]:
    """The values a value hoisted out of `node` is computed from, outside the hoisted equations
    (`params["shift"]` for `params["shift"] * 2.0`), in the order first read."""
    parent = node.parent
    made = (
        {u: i for i, source in parent.hoisted.items() if source is node for u in ctx.flow.eqns[i].outvars}
        if parent is not None
        else {}
    )
    found: list[Any] = []
    todo, done = [v], set()
    while todo:
        u = todo.pop()
        if u in done:
            continue
        done.add(u)
        if u not in made:
            found.append(u)
            continue
        todo.extend(reversed([w for w in ctx.flow.eqns[made[u]].invars if isinstance(w, Var)]))
    return found


def _makers(eqns: list[Any], live: set[int]) -> dict[Any, tuple[int, int]] | None:
    """Where each value a live equation makes is made (the equation, its place among the outputs);
    None when a value is made twice or read before it is made."""
    makers: dict[Any, tuple[int, int]] = {}
    read: set[Any] = set()
    for i in sorted(live):
        eqn = eqns[i]
        read.update([v for v in eqn.invars if isinstance(v, Var) and v not in makers])
        for j, v in enumerate(eqn.outvars):
            if v in makers or v in read:
                return None
            makers[v] = (i, j)
    return makers
