"""Rolling repeated calls back into the loops the torch code had: `for layer in layers` and
`[expert(x) for expert in experts]`.

A run of statements that are identical up to the names they bind and integers that step
evenly (`params["layers"][0]`, `[1]`, ...) is the unrolled trace of one loop; writing the loop
again runs the same operations in the same order, so nothing changes but the length.
"""

from __future__ import annotations

import ast
import copy
from typing import Any

from jaxside.render import source as torch_source
from jaxside.render.ir import Function, Loop, Statement, named
from jaxside.render.lower.context import Context
from jaxside.render.lower.places import positions, put
from jaxside.render.names import snake
from jaxside.tracing.trace import Site


def reroll(low: Context, function: Function, defs: frozenset[str]) -> None:
    """Roll runs of identical call statements (layer 0..N-1) back into loops, and lists of
    identical calls (`[expert(x) for expert in experts]`) back into comprehensions. A statement
    that holds a call of one of `defs` inside it (`x = block_forward(...) * gates[0]`) counts."""
    body = function.body
    done = 0
    while True:
        run = _find_run(body, done, function.returns, defs)
        if run is None:
            break
        start, count, length, plan = run
        loop, before = _make_loop(low, function, body, start, count, length, plan)
        body[start : start + count * length] = [*before, loop]
        done = start + len(before) + 1
    for statement in body:
        _reroll_lists(low, function, statement)
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


def _find_run(
    body: list[Statement], done: int, returns: ast.expr | None, defs: frozenset[str]
) -> tuple[int, int, int, dict] | None:
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
            after = [s.node() for s in body[start + len(calls) * length :]]
            if returns is not None:
                after.append(ast.Return(returns))
            plan = _match(segments, after)
            if plan is not None:
                plan["anchor"] = offset
                return start, len(calls), length, plan
    return None


def _module_name(anchor: Statement) -> str | None:
    """`basic_block` for a loop over `BasicBlock`s that no torch loop names (an `nn.Sequential`),
    `block` for `_Block`s."""
    kind = anchor.call.module_type if anchor.call is not None else None
    return snake(kind).lstrip("_") or None if kind else None


def _make_loop(
    low: Context, function: Function, body: list[Statement], start: int, count: int, length: int, plan: dict
) -> tuple[Loop, list[Statement]]:
    scope = function.scope
    segments = [body[start + j * length : start + (j + 1) * length] for j in range(count)]
    defined, carries = plan["defined"], plan["carries"]
    canon = {m: carries.get(m, name) for m, name in enumerate(defined[0])}
    anchor = segments[0][plan["anchor"]]
    module = ast.Module([copy.deepcopy(s.node()) for s in segments[0]], [])
    places = {id(node): (parent, attr, index) for parent, attr, index, node in positions(module)}
    ints = _ints(module)
    varying = [(node, v0, step) for node, (v0, step) in zip(ints, plan["progressions"]) if step]
    source = torch_source.around(anchor.site, torch_source.LOOPS) if anchor.site else None
    torch_index, torch_element = torch_source.loop_names(source)
    lists: dict[str, tuple[ast.expr, str]] = {}
    by_list = all(
        v0 == 0 and step == 1 and _list_length(low, function, places, node) == count
        for node, v0, step in varying
    )
    header_target: ast.expr
    subscripted = [places[id(node)][0].value for node, _, _ in varying] if by_list else []  # type: ignore[attr-defined]
    listed = {ast.dump(node) for node in subscripted}
    zipped = torch_source.zipped_names(source)
    if varying and by_list and torch_index and torch_element and len(listed) > 1:
        # `for i, block in enumerate(self.blocks): ... self.gates[i]`: torch's own form.
        main = _enumerated(source, subscripted)
        index_name, element_name = scope.fresh(torch_index, "loop"), scope.fresh(torch_element, "loop")
        for node, _, _ in varying:
            parent, attr, index = places[id(node)]
            if ast.dump(parent.value) == ast.dump(main):  # type: ignore[attr-defined]
                grand, attr, index = places[id(parent)]
                put(grand, attr, index, named(element_name))
            else:
                put(parent, attr, index, named(index_name))
        pair = [named(index_name, ast.Store()), named(element_name, ast.Store())]
        header_target = ast.Tuple(pair, ast.Store())
        iterable = ast.Call(named("enumerate"), [copy.deepcopy(main)], [])
    elif varying and by_list:
        for node, _, _ in varying:
            parent, _, _ = places[id(node)]
            key = ast.dump(parent.value)  # type: ignore[attr-defined]
            if key not in lists:
                root = _chain_root(parent.value)  # type: ignore[attr-defined]
                element = torch_element or _module_name(anchor) or "item"
                base = element if root == "params" else f"{element}_{root}"
                keys = [k for k in _chain_keys(parent.value) if isinstance(k, str)]  # type: ignore[attr-defined]
                if keys and keys[-1] in zipped:  # `for block, gate in zip(self.blocks, self.gates)`
                    base = zipped[keys[-1]]
                elif lists and keys and root == "params":  # another list beside the first (`block_gates`)
                    base = f"{element}_{keys[-1]}"
                lists[key] = (parent.value, scope.fresh(base, "loop"))  # type: ignore[attr-defined]
            grand, attr, index = places[id(parent)]
            put(grand, attr, index, named(lists[key][1]))
        names = [named(n, ast.Store()) for _, n in lists.values()]
        iterables = [copy.deepcopy(e) for e, _ in lists.values()]
        header_target = names[0] if len(names) == 1 else ast.Tuple(names, ast.Store())
        iterable = iterables[0] if len(iterables) == 1 else ast.Call(named("zip"), iterables, [])
    else:
        index_name = scope.fresh(torch_index or "i", "loop")
        for node, v0, step in varying:
            parent, attr, index = places[id(node)]
            put(parent, attr, index, _affine(index_name, v0, step))
        header_target = named(index_name, ast.Store())
        iterable = ast.Call(named("range"), [ast.Constant(count)], [])
    # A carry torch names otherwise inside the loop (`hidden_states = inputs_embeds` before
    # `for layer in layers: hidden_states = layer(hidden_states)`) takes that name, from an alias.
    aliases: list[Statement] = []
    for m, entry in carries.items():
        inner = defined[0][m]
        renamed = scope.bases.get(inner, inner) != scope.bases.get(entry, entry)
        if renamed and scope.names.get(inner) == "local":
            canon[m] = inner
            aliases.append(Statement([inner], named(entry), [], anchor.site))
    renames = {name: canon[m] for m, name in enumerate(defined[0])}
    renames.update({carries[m]: canon[m] for m in carries})  # the first pass reads the alias
    for node in ast.walk(module):
        if isinstance(node, ast.Name) and node.id in renames:
            node.id = renames[node.id]
    collected_names: dict[int, str] = {}
    for m, node in plan["collected"].items():
        collected_names[m] = scope.fresh(
            _collected_base(body[start + count * length :], node, canon[m]), "local"
        )
    loop_body: list[Statement] = []
    defined_at: dict[int, int] = {}
    for q, (statement, node) in enumerate(zip(segments[0], module.body)):
        eqns = sorted({i for seg in segments for i in seg[q].eqns})
        assign = node if isinstance(node, ast.Assign) else None
        value = assign.value if assign else node.value  # type: ignore[attr-defined]
        target = assign.targets[0] if assign else None
        flat = [n.id for n in ast.walk(target) if isinstance(n, ast.Name)] if target is not None else []
        loop_body.append(Statement(flat, value, eqns, statement.site, statement.call, target))
        for name in flat:
            for m, c in canon.items():
                if c == name:
                    defined_at[m] = len(loop_body) - 1
        for m in sorted(collected_names):
            if defined_at.get(m) == len(loop_body) - 1:
                append = ast.Call(
                    ast.Attribute(named(collected_names[m]), "append", ast.Load()), [named(canon[m])], []
                )
                loop_body.append(Statement([], append, [], statement.site))
    before = aliases + [
        Statement([n], ast.List([], ast.Load()), [], anchor.site) for n in collected_names.values()
    ]
    # After the loop: its last values under the loop's names; earlier ones through the lists.
    last = {name: canon[m] for m, name in enumerate(defined[-1])}
    later = body[start + count * length :]
    roots: list[ast.AST] = [s.value for s in later] + [s.target for s in later if s.target is not None]
    if function.returns is not None:
        roots.append(function.returns)
    holder = ast.Module([ast.Expr(r) if isinstance(r, ast.expr) else r for r in roots], [])  # type: ignore[misc]
    for parent, attr, index, node in list(positions(holder)):
        for m, target in plan["collected"].items():
            if node is target:
                replacement: ast.expr = named(collected_names[m])
                if isinstance(node, ast.Tuple) and not (isinstance(parent, ast.Call) and attr == "args"):
                    replacement = ast.Call(named("tuple"), [replacement], [])
                put(parent, attr, index, replacement)
    for node in ast.walk(holder):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in last:
            node.id = last[node.id]
    if function.returns is not None:
        function.returns = holder.body[-1].value  # type: ignore[attr-defined]
    main = loop_body[plan["anchor"]]
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
        [seg[plan["anchor"]].call for seg in segments if seg[plan["anchor"]].call is not None],
    )
    return loop, before


def _affine(index: str, start: int, step: int) -> ast.expr:
    term: ast.expr = named(index) if step == 1 else ast.BinOp(ast.Constant(step), ast.Mult(), named(index))
    if start == 0:
        return term
    return (
        ast.BinOp(term, ast.Add(), ast.Constant(start))
        if start > 0
        else ast.BinOp(term, ast.Sub(), ast.Constant(-start))
    )


def _enumerated(loop: ast.AST | None, lists: list[ast.expr]) -> ast.expr:
    """Of the lists a loop indexes, the one torch's `enumerate(self.blocks)` goes over: the list
    whose last key is the attribute enumerated, else the first."""
    iterable = loop.iter if isinstance(loop, ast.For) else None
    argument = iterable.args[0] if isinstance(iterable, ast.Call) and iterable.args else None
    attribute = argument.attr if isinstance(argument, ast.Attribute) else None
    for node in lists:
        keys = _chain_keys(node)
        if keys and keys[-1] == attribute:
            return node
    return lists[0]


def _chain_root(node: ast.expr) -> str | None:
    while isinstance(node, ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _chain_keys(node: ast.expr) -> list[Any]:
    keys = []
    while isinstance(node, ast.Subscript):
        if not isinstance(node.slice, ast.Constant):
            return []
        keys.append(node.slice.value)
        node = node.value
    return list(reversed(keys))


def _list_length(low: Context, function: Function, places: dict, node: ast.AST) -> int | None:
    """How long the params/state list that `node` indexes is (None if it is not such an index)."""
    parent, attr, _ = places.get(id(node), (None, None, None))
    if not isinstance(parent, ast.Subscript) or attr != "slice":
        return None
    root = _chain_root(parent.value)
    if root not in ("params", "state") or function.anchor is None:
        return None
    keys = _chain_keys(parent.value)
    if not keys and not isinstance(parent.value, ast.Name):
        return None
    tree = low.param_tree if root == "params" else low.state_tree
    path = ".".join([function.anchor] * bool(function.anchor) + [str(k) for k in keys])
    return tree.lengths.get(path)


def _collected_base(later: list[Statement], node: ast.AST, element: str) -> str:
    """The torch name of a list a loop filled (`outputs` in `torch.stack(outputs, dim=1)`)."""
    for statement in later:
        for call in ast.walk(statement.value):
            if isinstance(call, ast.Call) and node in call.args and statement.site and statement.site.text:
                try:
                    source = ast.parse(statement.site.text.strip(), mode="eval").body
                except SyntaxError:
                    continue
                position = call.args.index(node)  # type: ignore[arg-type]
                if isinstance(source, ast.Call) and position < len(source.args):
                    arg = source.args[position]
                    if isinstance(arg, ast.Name):
                        return arg.id
    return element + "s"


def _reroll_lists(low: Context, function: Function, statement: Statement) -> None:
    """`[f(p[0], x), f(p[1], x)]` -> `[f(item, x) for item in p]`, inside one statement."""
    if isinstance(statement, Loop):
        return
    holder = ast.Module([ast.Expr(statement.value)], [])
    for parent, attr, index, node in list(positions(holder)):
        if not isinstance(node, (ast.List, ast.Tuple)) or len(node.elts) < 2:
            continue
        if not all(isinstance(e, ast.Call) and isinstance(e.func, ast.Name) for e in node.elts):
            continue
        comprehension = _comprehension(low, function, node.elts, statement.site)
        if comprehension is None:
            continue
        if isinstance(node, ast.Tuple) and not (isinstance(parent, ast.Call) and attr == "args"):
            comprehension = ast.Call(named("tuple"), [comprehension], [])
        put(parent, attr, index, comprehension)
    statement.value = holder.body[0].value  # type: ignore[attr-defined]


def _comprehension(
    low: Context, function: Function, elements: list[ast.expr], site: Site | None
) -> ast.expr | None:
    forms = []
    for element in elements:
        copy_ = copy.deepcopy(element)
        ints = _ints(ast.Expr(copy_))
        values = [n.value for n in ints]  # type: ignore[attr-defined]
        for n in ints:
            n.value = 0  # type: ignore[attr-defined]
        forms.append((ast.dump(copy_), values))
    if any(f[0] != forms[0][0] or len(f[1]) != len(forms[0][1]) for f in forms):
        return None
    progressions = []
    for values in zip(*(f[1] for f in forms)):
        step = values[1] - values[0]
        if any(v != values[0] + step * j for j, v in enumerate(values)):
            return None
        progressions.append((values[0], step))
    element = copy.deepcopy(elements[0])
    holder = ast.Expr(element)
    places = {id(node): (parent, attr, index) for parent, attr, index, node in positions(holder)}
    ints = _ints(holder)
    varying = [(node, v0, step) for node, (v0, step) in zip(ints, progressions) if step]
    if not varying:
        return None
    comprehension = torch_source.within(site, torch_source.COMPREHENSIONS) if site else None
    torch_index, target = torch_source.loop_names(comprehension)
    count = len(elements)
    if all(
        v0 == 0 and step == 1 and _list_length(low, function, places, node) == count
        for node, v0, step in varying
    ):
        lists: dict[str, tuple[ast.expr, str]] = {}
        for node, _, _ in varying:
            parent, _, _ = places[id(node)]
            key = ast.dump(parent.value)  # type: ignore[attr-defined]
            if key not in lists:
                root = _chain_root(parent.value)  # type: ignore[attr-defined]
                base = (target or "item") if root == "params" else f"{target or 'item'}_{root}"
                lists[key] = (parent.value, function.scope.fresh(base, "loop"))  # type: ignore[attr-defined]
            grand, attr, index = places[id(parent)]
            put(grand, attr, index, named(lists[key][1]))
        names = [named(n, ast.Store()) for _, n in lists.values()]
        iterables = [copy.deepcopy(e) for e, _ in lists.values()]
        loop_target = names[0] if len(names) == 1 else ast.Tuple(names, ast.Store())
        iterable = iterables[0] if len(iterables) == 1 else ast.Call(named("zip"), iterables, [])
    else:
        index_name = function.scope.fresh(torch_index or "i", "loop")
        for node, v0, step in varying:
            parent, attr, index = places[id(node)]
            put(parent, attr, index, _affine(index_name, v0, step))
        loop_target = named(index_name, ast.Store())
        iterable = ast.Call(named("range"), [ast.Constant(count)], [])
    return ast.ListComp(holder.value, [ast.comprehension(loop_target, iterable, [], 0)])


def _ints(tree: ast.AST) -> list[ast.Constant]:
    """The integers under `tree` that may count up along a run, in field order: not the config a
    call passes to a shared def (`stride=2`), which must be equal for the calls to be one loop."""
    config = {
        id(n) for call in ast.walk(tree) if isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
        for keyword in call.keywords for n in ast.walk(keyword)
    }
    return [
        node for _, _, _, node in positions(tree)
        if isinstance(node, ast.Constant) and type(node.value) is int and id(node) not in config
    ]


def _form(statements: list[Statement]) -> tuple[str, list[tuple[str, str]], list[int], list[str]]:
    """A segment as (skeleton, name uses, integers, names it defines)."""
    module = ast.Module([copy.deepcopy(s.node()) for s in statements], [])
    uses: list[tuple[str, str]] = []
    ints: list[int] = []
    defined: list[str] = []
    counted = {id(node) for node in _ints(module)}
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
        elif id(node) in counted:
            ints.append(node.value)  # type: ignore[attr-defined]
            node.value = 0  # type: ignore[attr-defined]
    return ast.dump(module), uses, ints, defined


def _match(segments: list[list[Statement]], after: list[ast.stmt]) -> dict | None:
    """How the segments are one loop body: carried names, integer progressions."""
    forms = [_form(s) for s in segments]
    skeleton, _, ints0, _ = forms[0]
    if any(f[0] != skeleton or len(f[1]) != len(forms[0][1]) or len(f[2]) != len(ints0) for f in forms):
        return None
    defined = [f[3] for f in forms]
    carries: dict[int, str] = {}
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
                return None
    progressions = []
    for values in zip(*(f[2] for f in forms)):
        step = values[1] - values[0]
        if any(v != values[0] + step * j for j, v in enumerate(values)):
            return None
        progressions.append((values[0], step))
    # After the run: only the last segment's values by name, earlier ones only as one list each.
    later = ast.Module(after, [])
    collected: dict[int, ast.AST] = {}
    for m in range(len(defined[0])):
        names = [d[m] for d in defined]
        lists = [
            n
            for n in ast.walk(later)
            if isinstance(n, (ast.List, ast.Tuple)) and [getattr(e, "id", None) for e in n.elts] == names
        ]
        if lists:
            collected[m] = lists[0]
    earlier = {name: m for d in defined[:-1] for m, name in enumerate(d)}
    allowed = {id(e) for node in collected.values() for e in node.elts}  # type: ignore[attr-defined]
    for node in ast.walk(later):
        if isinstance(node, ast.Name) and node.id in earlier and id(node) not in allowed:
            return None
    init_uses = {name for name in carries.values()}
    for f in forms[1:]:
        if any(kind == "ext" and value in init_uses for kind, value in f[1]):
            return None
    if any(isinstance(n, ast.Name) and n.id in init_uses for n in ast.walk(later)):
        return None
    return {"carries": carries, "progressions": progressions, "defined": defined, "collected": collected}
