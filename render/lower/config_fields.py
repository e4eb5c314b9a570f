"""The export's `Config`: its fields (one per attribute name and value, `eps` of every norm one
field), `config` threaded through the defs that read it, and where `config_from(model)` reads
each field. `render.lower.attributes` decides which literal is a field; `render.module` writes
the class and `config_from`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from jaxside.render.ir import Function, Keyword, Program, named
from jaxside.render.names import is_index


@dataclass
class ConfigField:
    """One field of the export's `Config`: its value and where `config_from` reads it."""

    name: str
    value: Any
    module_path: str
    attribute: str
    module_type: str = ""
    nodes: list[ast.Attribute] = field(default_factory=list)
    owners: set[str] = field(default_factory=set)
    """The children of their modules the number is read from (`downsample` for
    `self.downsample[1].eps`, "" for the module's own), which tell two values of one class apart."""


class Fields:
    """The `Config` being built: one field per attribute name and value (the `eps` of every norm
    is one field), named after the attribute."""

    def __init__(self) -> None:
        self.fields: dict[tuple[str, str], ConfigField] = {}

    @staticmethod
    def node(owner: Any, path: str) -> ast.Attribute:
        """`config.<field>` for `self.<path>`, a field only once the number is chosen (`register`)."""
        node = ast.Attribute(named("config"), path, ast.Load())
        node.jaxside_config = path  # type: ignore[attr-defined]  # a mark on the node, read by `register`
        return node

    def register(self, owner: Any, expr: ast.expr) -> None:
        for node in ast.walk(expr):
            path = getattr(node, "jaxside_config", None)
            if path is not None and isinstance(node, ast.Attribute):  # made by `node` above
                self._field(owner, path, node)

    def _field(self, owner: Any, path: str, node: ast.Attribute) -> None:
        # (an attribute only some calls' modules have is read from one that has it)
        value, module_path = (owner.attributes[path], owner.module_path) if path in owner.attributes else (
            owner.partial[path])
        if type(value) is list:
            value = tuple(value)
        name = path.rsplit(".", 1)[-1]
        found = self.fields.get((name, repr(value)))
        if found is None:
            found = ConfigField(name, value, module_path, path, owner.module_type)
            self.fields[(name, repr(value))] = found
        if owner.config is None:
            owner.config = owner.function.scope.fresh("config", "argument")
        node.value = named(owner.config)
        node.attr = found.name
        found.nodes.append(node)
        found.owners.add("_".join(p for p in path.split(".")[:-1] if not is_index(p)))

    def declared(self, classes: dict[str, str]) -> list[ConfigField]:
        """The fields, in order of first use; a name with two values prefixed by its class."""
        fields = list(self.fields.values())
        counts: dict[str, int] = {}
        for f in fields:
            counts[f.name] = counts.get(f.name, 0) + 1
        for f in fields:
            if counts[f.name] > 1:
                f.name = f"{classes.get(f.module_type, f.module_type.lower())}_{f.name}"
        _by_child(fields)
        seen: dict[str, int] = {}
        for f in fields:  # still twice (one class, two values): numbered
            seen[f.name] = seen.get(f.name, 0) + 1
            if seen[f.name] > 1:
                f.name = f"{f.name}_{seen[f.name]}"
            for node in f.nodes:
                node.attr = f.name
        return fields


def _by_child(fields: list[ConfigField]) -> None:
    """Where one name still has two values, a value read from one child only (a ResNet block's
    `self.downsample[1].eps`) is named for it (`downsample_eps`), the others keep the name."""
    names = {f.name for f in fields}
    for name in sorted(names):
        alike = [f for f in fields if f.name == name]
        if len(alike) < 2:
            continue
        for f in alike:
            (child,) = f.owners if len(f.owners) == 1 else ("",)
            own = f"{child}_{f.attribute.rsplit('.', 1)[-1]}"
            if child and own not in names and not any(g.owners == f.owners for g in alike if g is not f):
                f.name = own
                names.add(own)


def thread_config(program: Program) -> None:
    """`config` into every def that reads it or calls one that does; calls pass it on. A call
    through a list of defs (`for block, block_forward in zip(params["trunk"], block_forwards)`)
    may call any of them: all of them take `config` if one does, and the call passes it."""
    names = {f.name: _config_name(f) for f in program.functions}
    needs = {name for name, config in names.items() if config is not None}
    calls = {f.name: _calls(f, set(names)) for f in program.functions}
    changed = True
    while changed:
        changed = False
        for function in program.functions:
            for _, callees in calls[function.name]:
                if not any(callee in needs for callee in callees):
                    continue
                for name in [function.name, *callees]:
                    if name in names and name not in needs:
                        needs.add(name)
                        changed = True
    for function in program.functions:
        if function.name in needs and names[function.name] is None:
            fresh = names[function.name] = function.scope.fresh("config", "argument")
            function.keywords.append(Keyword(fresh, {}))
    for function in program.functions:
        mine = names[function.name]
        if mine is None:
            continue
        for call, callees in calls[function.name]:
            taking = [names[c] for c in callees if c in needs]
            if taking and not any(k.arg == taking[0] for k in call.keywords):
                call.keywords.append(ast.keyword(taking[0], named(mine)))
    entry = program.entry
    if entry.name in needs:
        keyword = next(k for k in entry.keywords if k.name == names[entry.name])
        keyword.default = ast.Call(named("Config"), [], [])


def _config_name(function: Function) -> str | None:
    return next((k.name for k in function.keywords if not k.values and k.default is None), None)


def _calls(function: Function, defs: set[str]) -> list[tuple[ast.Call, list[str]]]:
    """The calls of names in `function`'s statements and its returned value, each with the names it
    may call: the name called, or the defs of the list a loop takes it from."""
    trees: list[ast.AST] = [s.node() for s in function.body]
    trees += [function.returns] if function.returns is not None else []
    nodes = [n for tree in trees for n in ast.walk(tree)]
    tables = _def_tables(nodes, defs)
    return [
        (n, tables.get(n.func.id, [n.func.id]))
        for n in nodes
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    ]


def _def_tables(nodes: list[ast.AST], defs: set[str]) -> dict[str, list[str]]:
    """The loop variables that hold one def of a list of them per iteration, with the list:
    `block_forward` of `block_forwards = [block_forward_0, block_forward_1]` and
    `for layer, block_forward in zip(params["layers"], block_forwards)`."""
    lists: dict[str, list[str]] = {}
    for node in nodes:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            listed = _defs_listed(node.value, defs, {})
            if listed:
                lists[node.targets[0].id] = listed
    tables: dict[str, list[str]] = {}
    for node in nodes:
        if not isinstance(node, ast.For):
            continue
        for target, iterable in _zipped(node.target, node.iter):
            listed = _defs_listed(iterable, defs, lists)
            if isinstance(target, ast.Name) and listed:
                tables[target.id] = listed
    return tables


def _zipped(target: ast.expr, iterable: ast.expr) -> list[tuple[ast.expr, ast.expr]]:
    """Each loop variable with the list it takes its elements from: `(a, b)` of `zip(xs, ys)`
    with `xs` and `ys`."""
    if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name) and iterable.func.id == "zip":
        if isinstance(target, ast.Tuple) and len(target.elts) == len(iterable.args):
            return list(zip(target.elts, iterable.args))
    return [(target, iterable)]


def _defs_listed(node: ast.expr, defs: set[str], lists: dict[str, list[str]]) -> list[str]:
    """The defs `node` lists (`[f, g]`, or a name bound to such a list), [] if it is no such list."""
    if isinstance(node, ast.Name):
        return lists.get(node.id, [])
    if isinstance(node, (ast.List, ast.Tuple)) and node.elts:
        if all(isinstance(e, ast.Name) and e.id in defs for e in node.elts):
            return [e.id for e in node.elts if isinstance(e, ast.Name)]
    return []


def accessor(f: ConfigField) -> str:
    """Where `config_from(model)` reads the field: `model.layers[0].attention.n_head`."""
    text = "model"
    for part in [p for p in f.module_path.split(".") if p]:
        if is_index(part):
            text += f"[{part}]"
        elif part.isidentifier():
            text += f".{part}"
        else:
            text = f"model.get_submodule({f.module_path!r})"
            break
    # (the attribute may sit in a numbered child: `downsample.1.eps` is `downsample[1].eps`)
    text += "".join(f"[{part}]" if is_index(part) else f".{part}" for part in f.attribute.split("."))
    return f"tuple({text})" if type(f.value) is tuple else text

