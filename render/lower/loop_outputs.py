"""What the iterations of a rolled loop give back together: values each iteration binds that the
code after the run reads one per iteration, collected by the loop into one list.

The code after a run of N segments may read the values of every segment, not only the last's:

- as one list of them (`torch.stack([out, out_1])`), or one list of one container per segment
  (a cache's `[{"keys": keys, "values": values}, {"keys": keys_1, "values": values_1}]`): the loop
  appends the element (`layers.append({"keys": keys, "values": values})`), the list is read instead;
- as the flat run a def hands its callers (`return out, keys, values, keys_1, values_1`, values a
  callee made that escape through a torch object, the per-layer entries of a `DynamicCache`): the
  loop appends one tuple per segment (`past_key_values.append((keys, values))`) and the def
  returns the list in the run's place. Its callers (`adapt_callers`) then unpack one value where
  they unpacked the run, and read it where they built one container per segment from it
  (`[{"keys": keys, "values": values} for keys, values in past_key_values]`); a caller that reads
  them otherwise unpacks the list again (`out, [(keys, values), (keys_1, values_1)] = ...`).

Only containers of the segments' names are collected (lists, tuples, dicts, constants): the loop
appends what the code after it built, so nothing is computed otherwise.
"""

from __future__ import annotations

import ast
import copy
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from jaxside.render.ir import Function, Loop, Statement, named
from jaxside.render.lower.places import positions, put
from jaxside.tracing.trace import Site

_CONTAINERS = (ast.List, ast.Tuple, ast.Dict, ast.Constant, ast.Name, ast.Load, ast.Store)


@dataclass
class Collected:
    """One list the loop fills: per segment the element `template` (segment 0's, read with segment
    j's names in segment j), appended once the names at `positions` are bound."""

    template: ast.expr
    positions: list[int]
    nodes: list[ast.expr] = field(default_factory=list)
    """The lists of the code after the run that it stands for (each replaced by it)."""
    elements: list[ast.expr] = field(default_factory=list)
    """The nodes the lists are made of (reading the earlier segments' names there is fine)."""
    span: tuple[int, int] | None = None
    """For a def's flat run of returned values: the items `returns.elts[a:b]` it replaces."""
    order: list[int] = field(default_factory=list)
    """For such a run: its items (from `a`) in the loop's order, segment by segment."""
    prefix: list[ast.expr] = field(default_factory=list)
    """For such a run: the elements made before the loop that lead the list (T5's block 0's)."""


def unique_names(defined: list[list[str]]) -> list[dict[str, int]]:
    """Per segment, the names it binds once and no other segment binds, with their positions:
    the names an element can read as its own segment's (`hidden_states`, rebound in every
    segment, is the last one's after the run)."""
    counts: dict[str, int] = {}
    for names in defined:
        for name in names:
            counts[name] = counts.get(name, 0) + 1
    return [{name: m for m, name in enumerate(names) if counts[name] == 1} for names in defined]


def element_template(
    elements: list[ast.expr], groups: list[dict[str, int]], free: Callable[[str], bool]
) -> Collected | None:
    """The one form `elements` share, element j reading segment j's names where element 0 reads
    segment 0's; None if they do not. Each element is a container of its names (a dict, tuple,
    list) but for `free` names' (`jnp.int32(4096)`), which read the same in every element."""
    everyone = {name for group in groups for name in group}
    forms, read = [], []
    for element, group in zip(elements, groups, strict=True):
        shape = copy.deepcopy(element)
        used: list[int] = []
        for node in ast.walk(shape):
            if isinstance(node, ast.Name) and node.id not in everyone and free(node.id):
                continue
            if isinstance(node, ast.Name):
                if node.id not in group:
                    return None
                used.append(group[node.id])
                node.id = f"_{group[node.id]}"
        if not used or not all(_container(node, everyone) for node in ast.walk(element)):
            return None
        forms.append(ast.dump(shape))
        read.append(used)
    if any(form != forms[0] for form in forms):
        return None
    return Collected(copy.deepcopy(elements[0]), sorted(set(read[0])), list(elements), list(elements))


def _container(node: ast.AST, names: set[str]) -> bool:
    """Whether `node` of an element only holds what it holds (no call or operation reads it)."""
    if isinstance(node, _CONTAINERS):
        return True
    return not any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node))


def collected_lists(
    later: ast.Module, defined: list[list[str]], free: Callable[[str], bool]
) -> list[Collected]:
    """The lists of the code after the run with one element per segment, each segment's own
    (`[out, out_1]`, `[{"keys": keys}, {"keys": keys_1}]`); equal ones share one `Collected`.
    An element may read `free` names besides (defined before the run: the loop reads them)."""
    groups = unique_names(defined)
    found: dict[str, Collected] = {}
    inside: set[int] = set()
    for node in ast.walk(later):
        if id(node) in inside or not isinstance(node, (ast.List, ast.Tuple)):
            continue
        if len(node.elts) != len(defined) or not isinstance(node.ctx, ast.Load):
            continue
        collected = element_template(node.elts, groups, free)
        if collected is None:
            continue
        inside.update(id(n) for n in ast.walk(node))
        same = found.setdefault(ast.dump(collected.template), collected)
        same.nodes.append(node)
        if same is not collected:
            same.elements += collected.elements
    return list(found.values())


Earlier = Callable[[str, str], bool]
"""Whether a name made before a run is like a name of its first segment (leads its list)."""


def made_before(body: list[Statement], start: int, shapes: dict[str, tuple[int, ...]]) -> Earlier:
    """Names bound before the run at `start` only, of the shape and the name of the segment's
    (`keys` for `keys_2`; not for `value_states`, whose role it may not have: a list mixing the
    orders of its items would be unreadable)."""
    before = {name for s in body[:start] for name in s.targets}
    before -= {name for s in body[start:] for name in s.targets}

    def like(name: str, mine: str) -> bool:
        same = re.sub(r"_\d+$", "", name) == re.sub(r"_\d+$", "", mine)
        return name in before and same and shapes.get(name, ()) == shapes.get(mine, ())

    return like


def returned_spans(
    returns: ast.expr, first: int, defined: list[list[str]], earlier: Earlier
) -> list[Collected]:
    """The runs of `returns.elts[first:]` that are every segment's names (`keys, values, keys_1,
    values_1`), last first: one tuple per segment (the name alone for one name). A run's items may
    come in another order (Gemma 2's `keys, values, value_states, k_embed, ...`: the entry's output
    reads its full attention layers' first): each segment's the same names, in the order of the
    first listed. Items right before a run like its first segment's (`earlier(name, segment 0's
    name)`: bound before the run, T5's block 0's cache entries) lead its list."""
    if not isinstance(returns, ast.Tuple):
        return []
    groups = unique_names(defined)
    owner = {name: (j, m) for j, group in enumerate(groups) for name, m in group.items()}
    elts, found, end = returns.elts, [], len(returns.elts)
    while end > first:
        while end > first and _name_of(elts[end - 1]) not in owner:
            end -= 1
        start = end
        while start > first and _name_of(elts[start - 1]) in owner:
            start -= 1
        if start == end:
            break
        collected = _one_span(elts, (start, end), groups, first, earlier)
        if collected is None:
            return []
        found.append(collected)
        end = cast(tuple[int, int], collected.span)[0]
    return found


def _one_span(
    elts: list[ast.expr], span: tuple[int, int], groups: list[dict[str, int]], first: int, earlier: Earlier
) -> Collected | None:
    """The list `elts[span[0]:span[1]]` (every segment's names) is, with the items before it that
    lead it."""
    start, end = span
    owner = {name: (j, m) for j, group in enumerate(groups) for name, m in group.items()}
    found = [owner[cast(str, _name_of(e))] for e in elts[start:end]]
    per: dict[int, list[int]] = {}
    for j, m in found:
        per.setdefault(j, []).append(m)
    ordered = per[found[0][0]]
    if sorted(per) != list(range(len(groups))) or any(sorted(p) != sorted(ordered) for p in per.values()):
        return None
    size = len(ordered)
    order = [found.index((j, m)) for j in range(len(groups)) for m in ordered]
    items = [[elts[start + i] for i in order[j * size : (j + 1) * size]] for j in range(len(groups))]
    collected = element_template([_pack_items(e) for e in items], groups, lambda name: False)
    if collected is None:
        return None
    begin = start
    while begin - size >= first and all(
        _name_of(e) is not None and earlier(cast(str, _name_of(e)), cast(str, _name_of(mine)))
        for e, mine in zip(elts[begin - size : begin], items[0])
    ):
        begin -= size
    collected.elements, collected.span = elts[begin:end], (begin, end)
    collected.order = list(range(start - begin)) + [start - begin + i for i in order]
    collected.prefix = [_pack_items(elts[k : k + size]) for k in range(begin, start, size)]
    return collected


def _pack_items(items: list[ast.expr]) -> ast.expr:
    return items[0] if len(items) == 1 else ast.Tuple(list(items), ast.Load())


def reorder_callers(functions: list[Function], callee: Function, collected: Collected) -> None:
    """Each caller of `callee` unpacks the items of the run `collected.span` in the loop's order."""
    assert collected.span is not None
    start, end = collected.span
    for function in functions:
        for statement in function.body:
            items = _target_items(statement) if _calls(statement, callee.name) else None
            if items is None:
                continue
            items[start:end] = [items[start + i] for i in collected.order]
            statement.target = ast.Tuple(items, ast.Store())


def _name_of(node: ast.expr) -> str | None:
    return node.id if isinstance(node, ast.Name) else None


def list_base(
    later: list[Statement], returns: ast.expr | None, collected: Collected, element: str, site: Site | None
) -> str:
    """The name of a list a loop fills: torch's (`outputs` in `torch.stack(outputs, dim=1)`), the
    element's (`outs`), the key a list of containers sits under (`layers` of `{"layers": [...]}`),
    for a def's returned run the cache its calls filled (`past_key_values`, passed to each layer),
    else the loop element's."""
    if collected.span is not None:
        return cache_argument(site) or f"{element}_outputs"
    for node in collected.nodes:
        torch_name = _torch_argument(later, node)
        if torch_name:
            return torch_name
    template = collected.template
    if isinstance(template, ast.Name):
        return template.id + "s"
    roots = [s.value for s in later] + ([returns] if returns is not None else [])
    holder = ast.Module([ast.Expr(r) for r in roots], [])
    for parent, attr, index, child in positions(holder):
        if any(child is n for n in collected.nodes) and isinstance(parent, ast.Dict) and attr == "values":
            key = parent.keys[index] if index is not None else None
            if isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value.isidentifier():
                return key.value
    return element + "s"


def filled_name(base: str, params: list[str]) -> str:
    """The name of a list the loop fills: its base, `new_` before it where a parameter of the def
    has that name (the cache passed in, which the loop reads as it fills the new one)."""
    return f"new_{base}" if base in params else base


def _torch_argument(later: list[Statement], node: ast.expr) -> str | None:
    for statement in later:
        for call in ast.walk(statement.value):
            if isinstance(call, ast.Call) and node in call.args and statement.site and statement.site.text:
                try:
                    source = ast.parse(statement.site.text.strip(), mode="eval").body
                except SyntaxError:
                    continue
                position = call.args.index(node)
                if isinstance(source, ast.Call) and position < len(source.args):
                    arg = source.args[position]
                    if isinstance(arg, ast.Name):
                        return arg.id
    return None


def cache_argument(site: Site | None) -> str | None:
    """The cache torch passed each call of the run (`past_key_values=past_key_values`): a name in
    the call's arguments that names a cache, as `--check`'s paths do."""
    if site is None or not site.text:
        return None
    try:
        call = ast.parse(site.text.strip(), mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(call, ast.Call):
        return None
    arguments = [*call.args, *(k.value for k in call.keywords)]
    for argument in arguments:
        for node in ast.walk(argument):
            if isinstance(node, ast.Name) and ("cache" in node.id or node.id.startswith("past")):
                return node.id
    return None


def append(name: str, element: ast.expr, site: Site | None) -> Statement:
    """`name.append(element)`."""
    call = ast.Call(ast.Attribute(named(name), "append", ast.Load()), [element], [])
    return Statement([], call, [], site)


def replaced(parent: ast.AST, attr: str, index: int | None, node: ast.AST, name: str) -> None:
    """The list `node` read as the list `name` (`tuple(name)` where it was a tuple, but for a
    call's argument, which any sequence does)."""
    replacement: ast.expr = named(name)
    if isinstance(node, ast.Tuple) and not (isinstance(parent, ast.Call) and attr == "args"):
        replacement = ast.Call(named("tuple"), [replacement], [])
    put(parent, attr, index, replacement)


# -- the callers of a def whose returned run became one list ---------------------------------------


def plain_callers(functions: list[Function], callee: Function) -> bool:
    """Whether every call of `callee` is a statement of its own in a def (no loop yet) that
    unpacks each returned item to a name (`out, keys, values, ... = callee(...)`)."""
    returns = callee.returns
    if not isinstance(returns, ast.Tuple):
        return False
    for function in functions:
        mine = [s for s in function.body if _calls(s, callee.name)]
        nodes = [s.value for s in mine]
        for statement in function.body:
            for node in ast.walk(statement.node()):
                if isinstance(node, ast.Call) and _is_name(node.func, callee.name) and node not in nodes:
                    return False
        for statement in mine:
            items = _target_items(statement)
            if isinstance(statement, Loop) or items is None or len(items) != len(returns.elts):
                return False
    return True


def adapt_callers(
    functions: list[Function], callee: Function, span: tuple[int, int], count: int, base: str
) -> None:
    """Each caller of `callee`, whose items `span` became one list of `count` items, unpacks the
    list as one value where it reads it as one list (one container per item), else as a list."""
    start, end = span
    size = (end - start) // count
    for function in functions:
        for index, statement in enumerate(function.body):
            if not _calls(statement, callee.name):
                continue
            items = _target_items(statement)
            assert items is not None  # `plain_callers` said so
            run = items[start:end]
            names = [[_store_name(n) for n in run[j * size : (j + 1) * size]] for j in range(count)]
            later = function.body[index + 1 :]
            name = _read_as_list(function, later, names, base)
            if name is not None:
                middle: list[ast.expr] = [named(name, ast.Store())]
            else:
                middle = [ast.List([_pack(group, ast.Store()) for group in names], ast.Store())]
            target_items = [*items[:start], *middle, *items[end:]]
            target = target_items[0] if len(target_items) == 1 else ast.Tuple(target_items, ast.Store())
            statement.target = target
            statement.targets = [n.id for n in ast.walk(statement.target) if isinstance(n, ast.Name)]


def _read_as_list(
    function: Function, later: list[Statement], names: list[list[str]], base: str
) -> str | None:
    """Where the code after the call reads the items only as lists of one container per item,
    those lists read a list named after `base` instead (a comprehension over it); its name."""
    roots: list[ast.expr] = [s.value for s in later]
    if function.returns is not None:
        roots.append(function.returns)
    holder = ast.Module([ast.Expr(r) for r in roots], [])
    groups = [{n: m for m, n in enumerate(group)} for group in names]
    found = []
    inside: set[int] = set()
    for node in ast.walk(holder):
        if id(node) in inside or not isinstance(node, (ast.List, ast.Tuple)) or len(node.elts) != len(names):
            continue
        collected = element_template(node.elts, groups, lambda name: True)  # read where it was
        if collected is not None:
            found.append((node, collected.template))
            inside.update(id(n) for n in ast.walk(node))
    everyone = {n for group in names for n in group}
    reads = [
        n for s in later for root in (s.value, s.target) if root is not None for n in ast.walk(root)
        if isinstance(n, ast.Name) and n.id in everyone and id(n) not in inside
    ]
    if function.returns is not None:
        reads += [n for n in ast.walk(function.returns) if isinstance(n, ast.Name) and n.id in everyone
                  and id(n) not in inside]
    if not found or reads:
        return None
    name = function.scope.fresh(base, "local")
    item = _pack(names[0], ast.Load())
    for parent, attr, index, node in list(positions(holder)):
        for list_node, template in found:
            if node is not list_node:
                continue
            if ast.dump(template) == ast.dump(item):  # the items themselves: the list as it is
                replaced(parent, attr, index, node, name)
                continue
            loop = ast.comprehension(_pack(names[0], ast.Store()), named(name), [], 0)
            comprehension: ast.expr = ast.ListComp(template, [loop])
            if isinstance(node, ast.Tuple) and not (isinstance(parent, ast.Call) and attr == "args"):
                comprehension = ast.Call(named("tuple"), [comprehension], [])
            put(parent, attr, index, comprehension)
    for statement, wrapped in zip(later, holder.body, strict=False):
        assert isinstance(wrapped, ast.Expr)
        statement.value = wrapped.value
    if function.returns is not None:
        last = holder.body[-1]
        assert isinstance(last, ast.Expr)
        function.returns = last.value
    return name


def _pack(names: list[str], ctx: ast.expr_context) -> ast.expr:
    if len(names) == 1:
        return named(names[0], ctx)
    return ast.Tuple([named(n, ctx) for n in names], ctx)


def _calls(statement: Statement, name: str) -> bool:
    value = statement.value
    return isinstance(value, ast.Call) and _is_name(value.func, name)


def _is_name(node: ast.expr, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _target_items(statement: Statement) -> list[ast.expr] | None:
    """The items a call statement unpacks (`out, keys, values = ...`), each a name; else None."""
    target = statement.target
    if target is None:
        if len(statement.targets) < 2:
            return None
        return [named(t, ast.Store()) for t in statement.targets]
    return list(target.elts) if isinstance(target, ast.Tuple) else None


def _store_name(node: ast.expr) -> str:
    assert isinstance(node, ast.Name)  # extras are always named (`_emit_call`)
    return node.id

