"""Config numbers that differ between the calls sharing a def, as its keyword-only arguments;
names for the defs of one function that took other branches.

Blocks of one class built with other strides (a ResNet block that downsamples, one that does not)
run the same torch code with other static numbers: `window_strides=(2, 2)` here, `(1, 1)` there.
No size gives them, so the shared def takes them as arguments, `*, stride`, and each call passes
its own (`basic_block_forward(params["layer2"][0], x, stride=2)`), as a hand port does. A number
inside a keyword of a call takes that keyword's torch name (`stride`, `padding`, `dilation`,
`groups`, `kernel_size`; a def's own keyword keeps its name, so one passed down reads
`stride=stride`); a tuple whose numbers are equal in each call is one number (`(stride, stride)`),
any other is passed whole. Numbers with the same name and the same value in every call are one
argument; the same name with other values takes the torch attribute called
(`conv_dw_stride`). A number only some calls' statements have (one under a flag of the def,
`render.lower.merge.branch_flags`) defaults to the commonest value, which those calls leave out. The def runs
the very same Python numbers at each call, so it stages the same equations as the defs it
replaces.
"""

from __future__ import annotations

import ast
import copy
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from jaxside.render import source as torch_source
from jaxside.render.ir import Function, Keyword, Program, named
from jaxside.render.lower.merge.branch_flags import branch
from jaxside.render.lower.places import place_in, put
from jaxside.render.names import is_index

Difference = tuple[ast.AST, str, int | None, list[Any]]
"""Where a number differs between the defs: (parent, field, index or None, value in each def,
None in a def that did not run that statement)."""

TORCH_NAMES = {
    "window_strides": "stride",
    "rhs_dilation": "dilation",
    "feature_group_count": "groups",
    "window_dimensions": "kernel_size",
}
"""The torch attribute (`nn.Conv2d.stride`) for the keyword of the JAX call that takes it."""


def config_keywords(
    function: Function, tree: ast.Module, differences: list[Difference], functions: list[Function]
) -> list[Keyword]:
    """Replace each difference in `tree` (the body of `function`, the first of `functions`) by a
    keyword-only argument; the keywords with the value each call of `functions[k]` passes."""
    parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    statements = {id(node): i for i, top in enumerate(tree.body) for node in ast.walk(top)}
    by_place: dict[int, tuple[ast.keyword | None, list[ast.Constant], list[Any]]] = {}
    for parent, attr, index, values in differences:
        constant = getattr(parent, attr) if index is None else getattr(parent, attr)[index]
        holder = _keyword_of(constant, parents)
        key = id(holder) if holder is not None else id(constant)
        by_place.setdefault(key, (holder, [], []))
        by_place[key][1].append(constant)
        by_place[key][2].append(values)
    found: list[tuple[str, list[ast.expr | None], int, list[tuple[ast.AST, str, int | None]]]] = []
    for holder, constants, rows in by_place.values():
        name = _base_name(holder, [v for v in rows[0] if v is not None])
        uniform = all(len({row[k] for row in rows}) == 1 for k in range(len(functions)))
        ran = [k for k in range(len(functions)) if rows[0][k] is not None]
        given: list[ast.expr | None] = [None] * len(functions)
        if holder is None or uniform:
            for k in ran:
                given[k] = ast.Constant(rows[0][k])
            places = [place_in(parents[id(c)], c) for c in constants]
        else:
            for k in ran:
                for constant, row in zip(constants, rows):
                    constant.value = row[k]
                given[k] = copy.deepcopy(holder.value)
            places = [(holder, "value", None)]
        found.append((name, given, statements.get(id(constants[0]), -1), places))
    return _named(function, functions, found)


def _keyword_of(node: ast.AST, parents: dict[int, ast.AST]) -> ast.keyword | None:
    """The keyword of a call whose value holds the number (through tuples and signs), if any."""
    parent = parents.get(id(node))
    while isinstance(parent, (ast.Tuple, ast.List, ast.UnaryOp)):
        parent = parents.get(id(parent))
    return parent if isinstance(parent, ast.keyword) and parent.arg else None


def _base_name(holder: ast.keyword | None, values: list[Any]) -> str:
    if holder is not None and holder.arg:
        return TORCH_NAMES.get(holder.arg, holder.arg)
    return "n" if all(type(v) is int for v in values) else "value"


def _named(
    function: Function,
    functions: list[Function],
    found: list[tuple[str, list[ast.expr | None], int, list[tuple[ast.AST, str, int | None]]]],
) -> list[Keyword]:
    """One keyword per name and values; a name with other values prefixed by its torch attribute."""
    values_of: dict[str, set[str]] = {}
    for name, given, _, _ in found:
        values_of.setdefault(name, set()).add(_dumps(given))
    keywords: dict[tuple[str, str], Keyword] = {}
    for name, given, statement, places in found:
        values = _dumps(given)
        base = name
        if len(values_of[name]) > 1:
            attribute = _attribute(function, statement)
            base = f"{attribute}_{name}" if attribute else name
        keyword = keywords.get((base, values))
        if keyword is None:
            by_call = {id(c): expr for f, expr in zip(functions, given) if expr is not None for c in f.calls}
            default = None
            if None in given:  # calls that do not run it pass nothing: the commonest value
                dumps = Counter(ast.dump(v) for v in by_call.values())
                default = next(v for v in by_call.values() if ast.dump(v) == dumps.most_common(1)[0][0])
            fresh = function.scope.fresh(base, "argument")
            keyword = keywords[(base, values)] = Keyword(fresh, by_call, copy.deepcopy(default))
        for parent, attr, index in places:
            put(parent, attr, index, named(keyword.name))
    return list(keywords.values())


def _dumps(given: list[ast.expr | None]) -> str:
    return repr([None if g is None else ast.dump(g) for g in given])


def _attribute(function: Function, statement: int) -> str | None:
    """The torch attribute the statement's source calls (`conv_dw` for `self.conv_dw(x)`)."""
    if not 0 <= statement < len(function.body) or function.body[statement].site is None:
        return None
    found = torch_source.expression(function.body[statement].site)
    expr = found[0] if found else None
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
        return expr.func.attr
    return None


# -- naming the kinds ----------------------------------------------------------------------------------


def kind_suffixes(functions: list[Function]) -> dict[int, str]:
    """The suffix of each def of one torch function whose calls took other branches (a block with
    a downsample, one without), by `id`: from the `if` around a line only that def ran
    (`_downsample` for `if self.downsample is not None:`, `_has_skip` for `if self.has_skip:`),
    else the attribute that line calls (`_act`); none for a def that ran no line of its own."""
    lines = [{(s.site.file, s.site.line): s.site for s in f.body if s.site is not None} for f in functions]
    suffixes = {}
    for k, function in enumerate(functions):
        others = set().union(*(set(lines[j]) for j in range(len(functions)) if j != k))
        own = sorted(set(lines[k]) - others)
        found = branch(function, lines[k][own[0]]) if own else None
        if found:  # `_downsample`, `_no_downsample` in its `else`
            suffixes[id(function)] = f"_{found[0]}" if found[1] else f"_no_{found[0]}"
    return suffixes


# -- the model's config by name (`render.lower.attributes`) ----------------------------------------


@dataclass
class ConfigField:
    """One field of the export's `Config`: its value and where `config_from` reads it."""

    name: str
    value: Any
    module_path: str
    attribute: str
    module_type: str = ""
    nodes: list[ast.Attribute] = field(default_factory=list)


class Fields:
    """The `Config` being built: one field per attribute name and value (the `eps` of every norm
    is one field), named after the attribute."""

    def __init__(self) -> None:
        self.fields: dict[tuple[str, str], ConfigField] = {}

    @staticmethod
    def node(owner: Any, path: str) -> ast.Attribute:
        """`config.<field>` for `self.<path>`, a field only once the number is chosen (`register`)."""
        node = ast.Attribute(named("config"), path, ast.Load())
        node.jaxside_config = path  # type: ignore[attr-defined]
        return node

    def register(self, owner: Any, expr: ast.expr) -> None:
        for node in ast.walk(expr):
            path = getattr(node, "jaxside_config", None)
            if path is not None:
                self._field(owner, path, node)  # type: ignore[arg-type]

    def _field(self, owner: Any, path: str, node: ast.Attribute) -> None:
        value = owner.attributes[path]
        if type(value) is list:
            value = tuple(value)
        name = path.rsplit(".", 1)[-1]
        found = self.fields.get((name, repr(value)))
        if found is None:
            found = ConfigField(name, value, owner.module_path, path, owner.module_type)
            self.fields[(name, repr(value))] = found
        if owner.config is None:
            owner.config = owner.function.scope.fresh("config", "argument")
        node.value = named(owner.config)
        node.attr = found.name
        found.nodes.append(node)

    def declared(self, classes: dict[str, str]) -> list[ConfigField]:
        """The fields, in order of first use; a name with two values prefixed by its class."""
        fields = list(self.fields.values())
        counts: dict[str, int] = {}
        for f in fields:
            counts[f.name] = counts.get(f.name, 0) + 1
        for f in fields:
            if counts[f.name] > 1:
                f.name = f"{classes.get(f.module_type, f.module_type.lower())}_{f.name}"
        seen: dict[str, int] = {}
        for f in fields:  # still twice (one class, two values): numbered
            seen[f.name] = seen.get(f.name, 0) + 1
            if seen[f.name] > 1:
                f.name = f"{f.name}_{seen[f.name]}"
            for node in f.nodes:
                node.attr = f.name
        return fields


def thread_config(program: Program) -> None:
    """`config` into every def that reads it or calls one that does; calls pass it on."""
    names = {f.name: _config_name(f) for f in program.functions}
    needs = {name for name, config in names.items() if config is not None}
    changed = True
    while changed:
        changed = False
        for function in program.functions:
            if function.name in needs:
                continue
            if any(callee in needs for callee in _callees(function)):
                needs.add(function.name)
                changed = True
    for function in program.functions:
        if function.name in needs and names[function.name] is None:
            names[function.name] = function.scope.fresh("config", "argument")
            function.keywords.append(Keyword(names[function.name], {}))
    for function in program.functions:
        mine = names[function.name]
        if mine is None:
            continue
        for call in _calls(function):
            callee = call.func.id  # type: ignore[attr-defined]
            if callee in needs and not any(k.arg == names[callee] for k in call.keywords):
                call.keywords.append(ast.keyword(names[callee], named(mine)))
    entry = program.entry
    if entry.name in needs:
        keyword = next(k for k in entry.keywords if k.name == names[entry.name])
        keyword.default = ast.Call(named("Config"), [], [])


def _config_name(function: Function) -> str | None:
    return next((k.name for k in function.keywords if not k.values and k.default is None), None)


def _callees(function: Function) -> set[str]:
    return {call.func.id for call in _calls(function)}  # type: ignore[attr-defined]


def _calls(function: Function) -> list[ast.Call]:
    """The calls of defs in `function`'s statements and its returned value."""
    trees: list[ast.AST] = [s.node() for s in function.body]
    trees += [function.returns] if function.returns is not None else []
    nodes = [n for tree in trees for n in ast.walk(tree)]
    return [n for n in nodes if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]


def accessor(f: ConfigField) -> str:
    """Where `config_from(model)` reads the field: `model.layers[0].attention.n_head`."""
    text = "model"
    for part in [p for p in f.module_path.split(".") if p]:
        if is_index(part):
            text += f"[{part}]"
        elif part.isidentifier():
            text += f".{part}"
        else:
            return f"model.get_submodule({f.module_path!r}).{f.attribute}"
    value = f"{text}.{f.attribute}"
    return f"tuple({value})" if type(f.value) is tuple else value

