"""Rolling repeated calls back into the loops the torch code had: `for layer in layers` (and,
through `comprehensions`, `[expert(x) for expert in experts]`).

A run of statements that are identical up to the names they bind, integers that step evenly
(`params["layers"][0]`, `[1]`, ...) and the def's arguments each reads its own of (a cache passed
in: `loop_inputs`) is the unrolled trace of one loop; writing the loop again runs the same
operations in the same order, so nothing changes but the length. What the code after the run reads
of every iteration the loop collects into lists (`loop_outputs`).
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass, field
from typing import cast

from jaxside.render import source as torch_source
from jaxside.render.ir import Function, Loop, Statement, named
from jaxside.render.lower.comprehensions import reroll_lists
from jaxside.render.lower.context import Context
from jaxside.render.lower.loop_headers import (
    Places,
    chain_keys,
    counting_ints,
    even_steps,
    indexed_list,
    list_header,
    list_length,
    list_name,
    range_header,
    sliced,
)
from jaxside.render.lower.loop_inputs import (
    Inputs,
    call_statements,
    input_lengths,
    layout,
    own_inputs,
    pass_as_list,
    read_outside,
    take_as_list,
    zipped,
)
from jaxside.render.lower.loop_outputs import (
    Collected,
    Earlier,
    adapt_callers,
    append,
    cache_argument,
    collected_lists,
    filled_name,
    list_base,
    made_before,
    plain_callers,
    reorder_callers,
    replaced,
    returned_spans,
)
from jaxside.render.lower.loop_reads import argument_names, own_reads, zip_reads
from jaxside.render.lower.places import positions, put
from jaxside.render.names import Scope, snake


@dataclass
class Pattern:
    """How the segments of a run are one loop body."""

    defined: list[list[str]]
    """The names each segment binds, in order; a name's position `m` is the same in each."""
    carries: dict[int, str]
    """A name the next segment reads (`hidden_states`), by position: the name the first segment
    reads instead (what the loop starts from)."""
    progressions: list[tuple[int, int]]
    """Each integer of a segment (in `counting_ints` order) as (first value, step)."""
    collected: list[Collected]
    """What the code after the run reads of every segment, as one list each (`torch.stack(outputs)`,
    a def's returned run of per-layer cache entries): the lists the loop fills."""
    inputs: Inputs | None = None
    """Parameters of the def each segment reads its own of (a cache passed in): one list zipped in."""
    reads: dict[str, list[str]] = field(default_factory=dict)
    """Values bound before the run each segment reads a different one of (`loop_reads`)."""


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


def reroll(ctx: Context, function: Function, functions: list[Function]) -> None:
    """Roll runs of identical call statements (layer 0..N-1) back into loops, and lists of
    identical calls (`[expert(x) for expert in experts]`) back into comprehensions. A statement
    that holds a call of one of `functions` inside it (`x = block_forward(...) * gates[0]`) counts.

    Run on callees before their callers: a def whose returned run of per-segment values becomes
    one list changes how its callers (still unrolled then) unpack it."""
    defs = frozenset(f.name for f in functions)
    body = function.body
    done = 0
    first_extra = _first_extra(function, functions)
    params = function.params if function is not functions[0] else []  # the entry's are the user's
    while True:
        plan = _find_run(body, done, function.returns, defs, first_extra, params, function.value_shapes)
        if plan is None:
            break
        if plan.pattern.inputs is not None and not call_statements(functions, function):
            params = []  # a call the list cannot be passed to: no loop takes the inputs
            continue
        old_returns = function.returns
        loop, before = _make_loop(ctx, function, body, plan, functions)
        body[plan.start : plan.end] = [*before, loop]
        done = plan.start + len(before) + 1
        for collected, base in zip(plan.pattern.collected, plan.bases):
            if collected.span is not None and isinstance(old_returns, ast.Tuple):
                reorder_callers(functions, function, collected)
                adapt_callers(functions, function, collected.span, plan.count + len(collected.prefix), base)
                first_extra = None  # the returned items are no longer the callers' flat run
        if plan.pattern.inputs is not None:
            lengths = input_lengths(functions[0], [i.name for i in ctx.trace.inputs if i.kind == "arg"])
            pass_as_list(functions, function, plan.pattern.inputs, functions[0], lengths)
    for statement in body:
        reroll_lists(ctx, function, statement)
    function.body = body


def _calls_of(statement: Statement, defs: frozenset[str]) -> str | None:
    if statement.when is not None:
        return None  # under a flag of its def: not rolled (a loop of it would need its `if`)
    if statement.call is not None and isinstance(statement.value, ast.Call):
        func = statement.value.func
    else:  # a call folded into the statement's expression
        inner = [n.func for n in ast.walk(statement.value) if isinstance(n, ast.Call)
                 and isinstance(n.func, ast.Name) and n.func.id in defs]
        if not inner:
            return None
        func = inner[0]
    site = statement.site
    where = (site.file, site.line, site.col) if site else None
    return repr((ast.dump(func), where))


def _first_extra(function: Function, functions: list[Function]) -> int | None:
    """Where the values a def hands its callers beside what torch returned (`function.calling.
    out_slots`) start among its returned items, if every caller unpacks them to names."""
    slots = function.calling.out_slots
    returns = function.returns
    if not slots or not isinstance(returns, ast.Tuple) or not plain_callers(functions, function):
        return None
    return len(returns.elts) - len(slots)


def _find_run(
    body: list[Statement], done: int, returns: ast.expr | None, defs: frozenset[str], first_extra: int | None,
    params: list[str], shapes: dict[str, tuple[int, ...]],
) -> Plan | None:
    anchors: dict[str, list[int]] = {}
    for index in range(done, len(body)):
        key = _calls_of(body[index], defs)
        if key is not None:
            anchors.setdefault(key, []).append(index)
    for calls in sorted(anchors.values()):
        if len(calls) < 2:
            continue
        length = calls[1] - calls[0]
        if any(b - a != length for a, b in zip(calls, calls[1:])):
            continue
        for offset in range(length):
            start = calls[0] - offset
            if start < done or start + len(calls) * length > len(body):
                continue
            segments = [body[start + j * length : start + (j + 1) * length] for j in range(len(calls))]
            if any(s.when is not None or isinstance(s, Loop) for segment in segments for s in segment):
                continue  # a statement under a flag, or a loop already: the body would lose its `if`
            after = [s.node() for s in body[start + len(calls) * length :]]
            if returns is not None:
                after.append(ast.Return(returns))
            extra = None
            if returns is not None and first_extra is not None:
                extra = (first_extra, made_before(body, start, shapes))
            pattern = _match(segments, after, extra, params)
            if pattern is not None and pattern.inputs is not None:
                if read_outside(pattern.inputs, [s.node() for s in body[:start]]):
                    continue
            if pattern is not None:
                return Plan(start, len(calls), length, offset, pattern)
    return None


def _module_name(anchor: Statement) -> str | None:
    """`basic_block` for a loop over `BasicBlock`s that no torch loop names (an `nn.Sequential`),
    `block` for `_Block`s."""
    kind = anchor.call.module_type if anchor.call is not None else None
    return snake(kind).lstrip("_") or None if kind else None


def _make_loop(
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


def _form(statements: list[Statement]) -> tuple[str, list[tuple[str, str]], list[int], list[str]]:
    """A segment as (skeleton, name uses, integers, names it defines)."""
    module = ast.Module([copy.deepcopy(s.node()) for s in statements], [])
    uses: list[tuple[str, str]] = []
    ints: list[int] = []
    defined: list[str] = []
    counted = {id(node) for node in counting_ints(module)}
    for _, _, _, node in list(positions(module)):
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Store):
                if node.id != "_":
                    defined.append(node.id)
                    uses.append(("def", str(defined.index(node.id))))
                node.id = "_"
            else:
                uses.append(("def", str(defined.index(node.id))) if node.id in defined else ("ext", node.id))
                node.id = "_"
        elif isinstance(node, ast.Constant) and id(node) in counted:
            ints.append(cast(int, node.value))
            node.value = 0
    return ast.dump(module), uses, ints, defined


def _match(
    segments: list[list[Statement]], after: list[ast.stmt], extra: tuple[int, Earlier] | None,
    params: list[str],
) -> Pattern | None:
    """How the segments are one loop body: carried names, integer progressions, the lists the
    code after them reads (`after` ends in the def's return; from `first_extra` on, its items may
    be a run of every segment's values), the `params` each segment reads its own of."""
    forms = [_form(s) for s in segments]
    skeleton, _, ints0, _ = forms[0]
    if any(f[0] != skeleton or len(f[1]) != len(forms[0][1]) or len(f[2]) != len(ints0) for f in forms):
        return None
    defined = [f[3] for f in forms]
    carries: dict[int, str] = {}
    varying: dict[str, list[str]] = {}
    for j in range(1, len(forms)):
        previous = {name: m for m, name in enumerate(defined[j - 1])}
        for k, (use, use0) in enumerate(zip(forms[j][1], forms[0][1])):
            kind, value = use
            if kind == "ext" and value in previous:
                m = previous[value]
                if use0[0] != "ext" or carries.setdefault(m, use0[1]) != use0[1]:
                    return None
                if j > 1 and forms[1][1][k] != ("ext", defined[0][m]):
                    return None
            elif use != use0:
                if kind != "ext" or use0[0] != "ext":
                    return None
                if value not in params or use0[1] not in params:
                    continue  # a value bound before the run (`own_reads`)
                names = varying.setdefault(use0[1], [use0[1]] + [""] * (len(forms) - 1))
                if names[j] not in ("", value):
                    return None
                names[j] = value
    inputs = layout(varying, params)
    if varying and (inputs is None or not own_inputs([f[1] for f in forms], inputs)):
        inputs = None  # then they are values read differently (`own_reads`), or no loop
    reads = own_reads([f[1] for f in forms], defined, carries, inputs)
    if reads is None:
        return None
    progressions = even_steps([f[2] for f in forms])
    if progressions is None:
        return None
    # After the run: only the last segment's values by name, earlier ones only through lists.
    later = ast.Module(after, [])
    bound = {n.id for n in ast.walk(later) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    bound.update(name for names in defined for name in names)
    collected = collected_lists(later, defined, lambda name: name not in bound)  # read before the run
    last = after[-1] if after else None
    if extra is not None and isinstance(last, ast.Return) and last.value is not None:
        if not any(node is last.value for c in collected for node in c.nodes):
            collected += returned_spans(last.value, *extra[:1], defined, extra[1])
    earlier = {name: m for d in defined[:-1] for m, name in enumerate(d)}
    allowed = {id(n) for c in collected for e in c.elements for n in ast.walk(e)}
    for node in ast.walk(later):
        if isinstance(node, ast.Name) and node.id in earlier and id(node) not in allowed:
            return None
    init_uses = {name for name in carries.values()}
    for f in forms[1:]:
        if any(kind == "ext" and value in init_uses for kind, value in f[1]):
            return None
    if any(isinstance(n, ast.Name) and n.id in init_uses for n in ast.walk(later)):
        return None
    if inputs is not None and read_outside(inputs, after):
        return None
    return Pattern(defined, carries, progressions, collected, inputs, reads)
