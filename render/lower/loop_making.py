"""Writing a run of statements that is one loop (a `Plan`) as that loop, in stages: the header
(what the loop goes over), the carried names, the body (with the lists it fills) and the code after
it, which then reads what the loop left.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass, field

from jaxside.render import source as torch_source
from jaxside.render.ir import Function, Loop, Statement, named
from jaxside.render.lower.context import Context
from jaxside.render.lower.loop_headers import (
    Places,
    chain_keys,
    counting_ints,
    indexed_list,
    list_header,
    list_length,
    list_name,
    range_header,
    sliced,
    tree_length,
    unpacked,
)
from jaxside.render.lower.loop_inputs import take_as_list, zipped
from jaxside.render.lower.loop_match import Pattern
from jaxside.render.lower.loop_outputs import append, cache_argument, filled_name, list_base, replaced
from jaxside.render.lower.loop_reads import argument_names, zip_reads
from jaxside.render.lower.places import positions, put
from jaxside.render.names import Scope, snake


@dataclass
class Plan:
    """A run of `count` segments of `length` statements from `start` that is one loop."""

    start: int
    count: int
    length: int
    anchor: int
    """The statement of a segment that holds the call the run was found by."""
    pattern: Pattern
    names: list[str] = field(default_factory=list)
    """The names of the lists the loop fills (`pattern.collected`'s), once made."""
    bases: list[str] = field(default_factory=list)
    """What each list is named for (`past_key_values`), which its def's callers name theirs."""

    @property
    def end(self) -> int:
        return self.start + self.count * self.length

    def segments(self, body: list[Statement]) -> list[list[Statement]]:
        step = self.length
        return [body[self.start + j * step : self.start + (j + 1) * step] for j in range(self.count)]


def _module_name(anchor: Statement) -> str | None:
    """`basic_block` for a loop over `BasicBlock`s that no torch loop names (an `nn.Sequential`),
    `block` for `_Block`s."""
    kind = anchor.call.module_type if anchor.call is not None else None
    return snake(kind).lstrip("_") or None if kind else None


def make_loop(
    ctx: Context, function: Function, body: list[Statement], plan: Plan, functions: list[Function]
) -> tuple[Loop, list[Statement]]:
    """The loop a run is, and the statements to put before it (aliases of carried names, the
    empty lists it fills); the code after the run is rewritten to read what the loop left."""
    segments = plan.segments(body)
    anchor = segments[0][plan.anchor]
    module = ast.Module([copy.deepcopy(s.node()) for s in segments[0]], [])
    header_target, iterable = _header(ctx, function, plan, anchor, module)
    element = _element_name(header_target)
    inputs = plan.pattern.inputs
    if inputs is not None:
        name = function.scope.fresh(cache_argument(anchor.site) or f"{element}_inputs", "argument")
        header_target, iterable = zipped(header_target, iterable, inputs, name)
        take_as_list(function, inputs, name)
    func = anchor.value.func if isinstance(anchor.value, ast.Call) else None
    callee = next((f for f in functions if isinstance(func, ast.Name) and f.name == func.id), None)
    header_target, iterable, lists = zip_reads(
        function, plan.pattern.reads, module, (header_target, iterable),
        argument_names(anchor.value, callee), anchor.site)
    canon, aliases = _carried(function.scope, plan.pattern, anchor)
    renames = _rename(module, plan.pattern, canon)
    later = body[plan.end :]
    collected = plan.pattern.collected
    site = anchor.site
    plan.bases = [list_base(later, function.returns, c, element, site) for c in collected]
    names = {  # named in the order the def returns them (`past_key_values`, `past_key_values_1`)
        k: function.scope.fresh(filled_name(plan.bases[k], function.params), "local")
        for k in sorted(range(len(collected)), key=lambda k: collected[k].span or (-1, -1))
    }
    plan.names = [names[k] for k in range(len(collected))]
    loop_body = _loop_body(segments, module, canon, plan, renames)
    before = lists + aliases + [
        Statement([n], ast.List(copy.deepcopy(c.prefix), ast.Load()), [], anchor.site)
        for c, n in zip(plan.pattern.collected, plan.names)
    ]
    _after_loop(function, later, plan, canon)
    main = loop_body[plan.anchor]
    loop = Loop(
        main.targets,
        main.value,
        sorted({i for seg in segments for s in seg for i in s.eqns}),
        anchor.site,
        anchor.call,
        main.target,
        header_target,
        iterable,
        loop_body,
        [call for seg in segments if (call := seg[plan.anchor].call) is not None],
    )
    return loop, before


def _header(
    ctx: Context, function: Function, plan: Plan, anchor: Statement, module: ast.Module
) -> tuple[ast.expr, ast.expr]:
    """The loop's target and iterable; in `module`, the integers that count along the run
    become what the loop reads (an element of the list they index, or the index)."""
    scope = function.scope
    places: Places = {id(node): (parent, attr, index) for parent, attr, index, node in positions(module)}
    counting = zip(counting_ints(module), plan.pattern.progressions)
    varying = [(node, v0, step) for node, (v0, step) in counting if step]
    source = torch_source.around(anchor.site, torch_source.LOOPS) if anchor.site else None
    torch_index, torch_element = torch_source.loop_names(source)
    skipped = varying[0][1] if varying else 0  # `for block in params["block"][1:]` after block 0's own def
    by_list = all(
        v0 == skipped >= 0 and step == 1 and list_length(ctx, function, places, node) == skipped + plan.count
        for node, v0, step in varying
    )
    if not (varying and by_list):
        return range_header(scope, varying, places, torch_index or "i", plan.count)
    subscripted = [indexed_list(places, node).value for node, _, _ in varying]
    if torch_index and torch_element and len({ast.dump(node) for node in subscripted}) > 1 and not skipped:
        # `for i, block in enumerate(self.blocks): ... self.gates[i]`: torch's own form.
        main = _enumerated(source, subscripted)
        index_name, element_name = scope.fresh(torch_index, "loop"), scope.fresh(torch_element, "loop")
        for node, _, _ in varying:
            parent = indexed_list(places, node)
            if ast.dump(parent.value) == ast.dump(main):
                put(*places[id(parent)], named(element_name))
            else:
                put(*places[id(node)], named(index_name))
        pair: list[ast.expr] = [named(index_name, ast.Store()), named(element_name, ast.Store())]
        return ast.Tuple(pair, ast.Store()), ast.Call(named("enumerate"), [copy.deepcopy(main)], [])
    element = torch_element or _module_name(anchor) or "item"
    zipped = torch_source.zipped_names(source)
    target, iterable = list_header(scope, varying, places, lambda indexed, another: list_name(
        indexed, element, zipped, another))
    names = torch_source.unpacked_names(source)
    length = tree_length(ctx, function, iterable, skipped) if names else None
    target = unpacked(scope, target, module, names, length)
    return target, sliced(iterable, skipped)


def _carried(scope: Scope, pattern: Pattern, anchor: Statement) -> tuple[dict[int, str], list[Statement]]:
    """The name the loop gives each name its body binds, and the aliases to put before it.

    A carry torch names otherwise inside the loop (`hidden_states = inputs_embeds` before `for
    layer in layers: hidden_states = layer(hidden_states)`) takes that name, from an alias."""
    defined, carries = pattern.defined, pattern.carries
    canon = {m: carries.get(m, name) for m, name in enumerate(defined[0])}
    aliases: list[Statement] = []
    for m, entry in carries.items():
        inner = defined[0][m]
        renamed = scope.bases.get(inner, inner) != scope.bases.get(entry, entry)
        if renamed and scope.names.get(inner) == "local":
            canon[m] = inner
            aliases.append(Statement([inner], named(entry), [], anchor.site))
    return canon, aliases


def _rename(module: ast.Module, pattern: Pattern, canon: dict[int, str]) -> dict[str, str]:
    """The loop body's names (segment 0's, carries as the loop names them); the renames."""
    renames = {name: canon[m] for m, name in enumerate(pattern.defined[0])}
    renames.update({pattern.carries[m]: canon[m] for m in pattern.carries})  # the first pass reads the alias
    for node in ast.walk(module):
        if isinstance(node, ast.Name) and node.id in renames:
            node.id = renames[node.id]
    return renames


def _element_name(target: ast.expr) -> str:
    """The loop's element (`decoder_layer` of `for decoder_layer in params["layers"]`)."""
    first = target.elts[-1] if isinstance(target, ast.Tuple) else target
    return first.id if isinstance(first, ast.Name) else "item"


def _loop_body(
    segments: list[list[Statement]], module: ast.Module, canon: dict[int, str], plan: Plan,
    renames: dict[str, str],
) -> list[Statement]:
    """The loop's statements (with the equations of every segment), each element a list collects
    appended to it right after its names are bound."""
    loop_body: list[Statement] = []
    defined_at: dict[int, int] = {}
    appended: set[int] = set()
    for q, (statement, node) in enumerate(zip(segments[0], module.body)):
        eqns = sorted({i for seg in segments for i in seg[q].eqns})
        assign = node if isinstance(node, ast.Assign) else None
        assert isinstance(node, (ast.Assign, ast.Expr))  # what a plain `Statement.node()` is
        value = node.value
        target = assign.targets[0] if assign else None
        flat = [n.id for n in ast.walk(target) if isinstance(n, ast.Name)] if target is not None else []
        loop_body.append(Statement(flat, value, eqns, statement.site, statement.call, target))
        for name in flat:
            for m, c in canon.items():
                if c == name:
                    defined_at[m] = len(loop_body) - 1
        here = len(loop_body) - 1
        for k, (collected, name) in enumerate(zip(plan.pattern.collected, plan.names)):
            if k not in appended and all(defined_at.get(m, here + 1) <= here for m in collected.positions):
                appended.add(k)
                element = copy.deepcopy(collected.template)
                for read in ast.walk(element):
                    if isinstance(read, ast.Name):
                        read.id = renames.get(read.id, read.id)
                loop_body.append(append(name, element, statement.site))
    return loop_body


def _after_loop(function: Function, later: list[Statement], plan: Plan, canon: dict[int, str]) -> None:
    """After the loop: its last values under the loop's names; earlier ones through the lists."""
    pattern = plan.pattern
    last = {name: canon[m] for m, name in enumerate(pattern.defined[-1])}
    for collected, name in zip(pattern.collected, plan.names):
        if collected.span is not None and isinstance(function.returns, ast.Tuple):
            start, end = collected.span
            items = function.returns.elts
            items[start:end] = [named(name)]
            function.returns = items[0] if len(items) == 1 else function.returns
    roots: list[ast.expr] = [s.value for s in later] + [s.target for s in later if s.target is not None]
    if function.returns is not None:
        roots.append(function.returns)
    wrapped = [ast.Expr(r) for r in roots]
    holder = ast.Module(list[ast.stmt](wrapped), [])
    for parent, attr, index, node in list(positions(holder)):
        for collected, name in zip(pattern.collected, plan.names):
            if any(node is n for n in collected.nodes):
                replaced(parent, attr, index, node, name)
    for node in ast.walk(holder):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in last:
            node.id = last[node.id]
    for statement, root in zip(later, wrapped):
        statement.value = root.value
    if function.returns is not None:
        function.returns = wrapped[-1].value


def _enumerated(loop: ast.AST | None, lists: list[ast.expr]) -> ast.expr:
    """Of the lists a loop indexes, the one torch's `enumerate(self.blocks)` goes over: the list
    whose last key is the attribute enumerated, else the first."""
    iterable = loop.iter if isinstance(loop, ast.For) else None
    argument = iterable.args[0] if isinstance(iterable, ast.Call) and iterable.args else None
    attribute = argument.attr if isinstance(argument, ast.Attribute) else None
    for node in lists:
        keys = chain_keys(node)
        if keys and keys[-1] == attribute:
            return node
    return lists[0]
