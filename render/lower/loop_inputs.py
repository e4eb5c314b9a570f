"""Arguments a rolled loop's iterations each read their own of: a def handed one argument per
layer and entry (a `DynamicCache` passed in: `keys, values, keys_1, values_1`) takes them as one
list the loop zips with its layers (`for decoder_layer, (keys, values) in zip(params["layers"],
past_key_values)`), and its callers pass that list (`[(keys, values), (keys_1, values_1)]`, a
comprehension where the items count along a list of the entry's inputs:
`[(layer["keys"], layer["values"]) for layer in past_key_values["layers"]]`).

Only parameters of the def no code outside the run reads, laid out one segment's after another's,
so each iteration reads exactly the values its segment read.
"""

from __future__ import annotations

import ast
import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from jaxside.render.ir import Function, Loop, named
from jaxside.render.lower.loop_headers import Places, counting_ints, even_steps, indexed_list
from jaxside.render.lower.places import positions, put


@dataclass
class Inputs:
    """The def's parameters `params[start : start + len(slots) * count]`, each segment's own."""

    start: int
    slots: list[list[str]]
    """Per value a segment reads, its name in each segment (`["keys", "keys_1"]`), in parameter order."""

    @property
    def end(self) -> int:
        return self.start + len(self.slots) * len(self.slots[0])


def layout(varying: dict[str, list[str]], params: list[str]) -> Inputs | None:
    """The parameters each segment reads its own of (`varying`: by segment 0's name, the names
    in each segment), if they are one segment's after another's in the def's parameters."""
    if not varying:
        return None
    slots = sorted(varying.values(), key=lambda names: params.index(names[0]))
    start, size, count = params.index(slots[0][0]), len(slots), len(slots[0])
    for j in range(count):
        for i, names in enumerate(slots):
            at = start + j * size + i
            if at >= len(params) or params[at] != names[j]:
                return None
    return Inputs(start, slots)


def own_inputs(uses: list[list[tuple[str, str]]], inputs: Inputs) -> bool:
    """Whether each segment (its name `uses`) reads of the inputs only its own (segment 1 never
    reads `keys`)."""
    slot_of = {name: (i, j) for i, names in enumerate(inputs.slots) for j, name in enumerate(names)}
    return all(
        slot_of[value][1] == j
        for j, form in enumerate(uses) for kind, value in form if kind == "ext" and value in slot_of
    )


def read_outside(inputs: Inputs, statements: Sequence[ast.AST]) -> bool:
    """Whether any of `statements` (the code outside the run) reads one of the inputs."""
    names = {name for names in inputs.slots for name in names}
    return any(
        isinstance(n, ast.Name) and n.id in names for statement in statements for n in ast.walk(statement)
    )


def zipped(target: ast.expr, iterable: ast.expr, inputs: Inputs, name: str) -> tuple[ast.expr, ast.expr]:
    """The loop's header with the list of inputs zipped in: `for layer, (keys, values) in
    zip(params["layers"], past_key_values)`."""
    return zip_with(target, iterable, _pack([names[0] for names in inputs.slots], ast.Store()), named(name))


def zip_with(
    target: ast.expr, iterable: ast.expr, item: ast.expr, listed: ast.expr
) -> tuple[ast.expr, ast.expr]:
    """The loop's header with one more list zipped in, its elements read as `item`."""
    if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name) and iterable.func.id == "zip":
        assert isinstance(target, ast.Tuple)  # a zip's target is one name per list
        lists = [*iterable.args, listed]
        return ast.Tuple([*target.elts, item], ast.Store()), ast.Call(iterable.func, lists, [])
    return ast.Tuple([target, item], ast.Store()), ast.Call(named("zip"), [iterable, listed], [])


def take_as_list(function: Function, inputs: Inputs, name: str) -> None:
    """The def takes the list `name` where it took the inputs one by one."""
    taken = function.params[inputs.start : inputs.end]
    function.params[inputs.start : inputs.end] = [name]
    for gone in taken:
        function.arg_shapes.pop(gone, None)


def call_statements(functions: list[Function], callee: Function) -> bool:
    """Whether every call of `callee` is the value of a statement of its own (a loop's neither)."""
    for function in functions:
        mine = [s.value for s in function.body if not isinstance(s, Loop) and _calls(s.value, callee.name)]
        for statement in function.body:
            for node in ast.walk(statement.node()):
                if _calls(node, callee.name) and not any(node is m for m in mine):
                    return False
    return True


def pass_as_list(functions: list[Function], callee: Function, inputs: Inputs, entry: Function,
                 lengths: dict[str, int]) -> None:
    """Each call of `callee` passes one list where it passed the inputs one by one; a
    comprehension where they count along a list of the entry's inputs (`lengths`: how long each
    is, by its path)."""
    count, size = len(inputs.slots[0]), len(inputs.slots)
    for function in functions:
        for statement in function.body:
            call = statement.value
            if not _calls(call, callee.name):
                continue
            assert isinstance(call, ast.Call)
            run = call.args[inputs.start : inputs.end]
            items = [_pack_exprs(run[j * size : (j + 1) * size]) for j in range(count)]
            listed = _comprehension(items, lengths if function is entry else {})
            passed = listed or ast.List(items, ast.Load())
            call.args[inputs.start : inputs.end] = [passed]


def _comprehension(items: list[ast.expr], lengths: dict[str, int]) -> ast.expr | None:
    """`[(layer["keys"], layer["values"]) for layer in past_key_values["layers"]]` for items alike
    but for an index counting 0, 1, ... along one list of the entry's inputs, that long."""
    forms, ints = [], []
    for item in items:
        shape = copy.deepcopy(item)
        found = counting_ints(shape)
        ints.append([cast(int, n.value) for n in found])  # `counting_ints` holds ints only
        for n in found:
            n.value = 0
        forms.append(ast.dump(shape))
    progressions = even_steps(ints)
    if any(form != forms[0] for form in forms) or not progressions:
        return None
    holder = ast.Expr(copy.deepcopy(items[0]))
    places: Places = {id(node): (parent, attr, index) for parent, attr, index, node in positions(holder)}
    varying = [node for node, (_, step) in zip(counting_ints(holder), progressions) if step]
    if not varying or any(progressions[k] != (0, 1) for k, (_, step) in enumerate(progressions) if step):
        return None
    lists = {ast.unparse(indexed_list(places, node).value) for node in varying if _indexes(places, node)}
    if len(lists) != 1 or len(varying) != sum(_indexes(places, node) for node in varying):
        return None
    (path,) = lists
    if lengths.get(path) != len(items):
        return None
    keys = re.findall(r"\['([A-Za-z_][A-Za-z0-9_]*)'\]", path)
    base = keys[-1][:-1] if keys and keys[-1].endswith("s") and len(keys[-1]) > 1 else "item"
    listed = copy.deepcopy(indexed_list(places, varying[0]).value)
    for node in varying:
        put(*places[id(indexed_list(places, node))], named(base))
    return ast.ListComp(holder.value, [ast.comprehension(named(base, ast.Store()), listed, [], 0)])


def _indexes(places: Places, node: ast.AST) -> bool:
    parent, attr, _ = places[id(node)]
    return isinstance(parent, ast.Subscript) and attr == "slice"


def input_lengths(function: Function, names: list[str]) -> dict[str, int]:
    """How long each list of the entry's inputs is (`past_key_values['layers']`: 2), from the
    inputs' paths (`past_key_values['layers'][1]['keys']`)."""
    renamed = function.arg_names
    found: dict[str, set[int]] = {}
    for name in names:
        for match in re.finditer(r"\[(\d+)\]", name):
            head = name[: match.start()]
            root = re.match(r"[A-Za-z_][A-Za-z0-9_]*", head)
            if root is None:
                continue
            path = renamed.get(root.group(0), root.group(0)) + head[root.end() :]
            found.setdefault(path, set()).add(int(match.group(1)))
    return {path: len(seen) for path, seen in found.items() if seen == set(range(len(seen)))}


def _calls(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name


def _pack(names: list[str], ctx: ast.expr_context) -> ast.expr:
    return named(names[0], ctx) if len(names) == 1 else ast.Tuple([named(n, ctx) for n in names], ctx)


def _pack_exprs(items: list[ast.expr]) -> ast.expr:
    return items[0] if len(items) == 1 else ast.Tuple(list(items), ast.Load())

