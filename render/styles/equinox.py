"""``--style equinox``: Equinox modules. Parameters and buffers are plain array fields in torch's
layout, buffers the torch code writes (KV caches) `eqx.nn.StateIndex` fields: stateful methods take
the `eqx.nn.State` last and return `(output, state)`, reading with `state.get` and writing with
`state.set`. A float buffer, and a parameter torch froze (`requires_grad=False`), is read through
`jax.lax.stop_gradient` (Equinox's way to mark an array non-trainable), so `eqx.filter_grad` gives
it zeros as torch gives it no gradient. Config and flags are static fields."""

from __future__ import annotations

import ast
import re

from jaxside.render.ir import Program, named
from jaxside.render.rules import dotted
from jaxside.render.styles.lists import fixed
from jaxside.render.styles.tree import Child, Klass, Node, Tree, kept_flags, members

__all__ = ["Equinox"]


class Equinox:
    name = "Equinox"
    base = "eqx.Module"
    imports = ["import equinox as eqx"]
    layout = ""  # no framework layers: every tensor keeps torch's layout
    threads_state = True
    grad = "`eqx.filter_grad`"
    layers = False
    bottom_up = True

    def read(self, ref: ast.expr, kind: str, indexed: bool) -> ast.expr:
        if kind == "state":
            return ast.Call(ast.Attribute(named("state"), "get", ast.Load()), [ref], [])
        if kind in ("buffer", "frozen"):  # a field like any other: `eqx.filter_grad` would differentiate it
            return ast.Call(dotted("jax.lax.stop_gradient"), [ref], [])
        return ref

    def write(self, ref: ast.expr, value: ast.expr) -> ast.stmt:
        new = ast.Call(ast.Attribute(named("state"), "set", ast.Load()), [ref, value], [])
        return ast.Assign([named("state", ast.Store())], new, lineno=0)

    def declare(self, klass: Klass, attributes: list[tuple[str, str, bool]], tree: Tree) -> list[str]:
        lines = []
        config = ["    config: Config = eqx.field(static=True)"] if klass.uses_config else []
        around = _reaching(tree, klass.name)
        for name, kind, optional in sorted(attributes, key=lambda a: a[2]):  # defaults last
            if optional and config:
                lines += config
                config = []
            if kind == "child":  # CaiT's `LayerScale.fn`: an `Attention` here, a `FeedForward` there
                held = [n.children[name] for n in klass.nodes if name in n.children]
                annotation = " | ".join(dict.fromkeys(_class_of(child) for child in held)) or "eqx.Module"
            elif kind == "list":
                held = [n.children[name] for n in klass.nodes if name in n.children]
                kinds = {_annotation(child) for child in held}
                classes = dict.fromkeys(item.cls for child in held for item in members(child))
                union = " | ".join(classes) or "eqx.Module"
                annotation = kinds.pop() if len(kinds) == 1 else f"list[{union}]"
            elif kind == "state":
                annotation = "eqx.nn.StateIndex"
            else:
                annotation = "jax.Array"
            annotation += " | None" if optional else ""
            if kind in ("child", "list") and set(re.findall(r"\w+", annotation)) & around:
                annotation = f'"{annotation}"'  # a class of its cycle: not defined yet, one of them
            lines.append(f"    {name}: {annotation}" + (" = None" if optional else ""))
        lines += config
        for flag in kept_flags(klass):
            kind = type(ast.literal_eval(flag.default)).__name__ if _literal(flag.default) else "object"
            lines.append(f"    {flag.attribute}: {kind} = eqx.field(static=True, default={flag.default})")
        return lines

    def argument(self, attribute: str) -> str:
        return attribute

    def unstopped(self, classes: list[Klass], read: set[str]) -> set[str]:
        return read

    def variables(self, kinds: set[str], unfrozen: set[str]) -> list[str]:
        return []

    def gradients(self, held: set[str], read: set[str]) -> str | None:
        stopped = (["the float buffers the torch code only reads"] if "buffer" in read else []) + (
            ["the parameters torch froze (`requires_grad=False`)"] if "frozen" in read else [])
        if not stopped:
            return None
        return ("Gradients are torch's: " + " and ".join(stopped) + " are read through "
                "`jax.lax.stop_gradient`, so `eqx.filter_grad` gives them zeros where torch gives no "
                "gradient.")

    def layer_helpers(self, kinds: set[str]) -> list[str]:
        return []

    def leaf(self, kind: str, value: str, path: str) -> str:
        return f"eqx.nn.StateIndex({value})" if kind == "state" else value

    def inner_list(self, items: list[str], made: bool) -> str:
        if made:
            return items[0]
        return f"({', '.join(items)},)" if len(items) == 1 else f"({', '.join(items)})"

    def finish(self, root: str, program: Program) -> list[str]:
        if not program.takes_state:
            return [f"return {root}"]
        return [f"model = {root}",
                "state = eqx.nn.State(model)  # the StateIndex fields' first values",
                "return eqx.nn.delete_init_state(model), state"]

    def usage(self, program: Program, root: str) -> list[str]:
        args = ", ".join(program.arg_names)
        if program.takes_state:
            return ["    model, state = from_torch(torch_model)  # the torch module, or its state_dict",
                    f"    outputs, state = model({args}, state)"]
        return ["    model = from_torch(torch_model)  # the torch module, or its state_dict",
                f"    outputs = model({args})"]


def _literal(text: str) -> bool:
    try:
        ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return False
    return True


def _reaching(tree: Tree, name: str) -> set[str]:
    """The classes whose instances hold, at some depth, an instance of class `name` (and `name` when
    it holds itself): an annotation naming one comes before that class's definition, as no order
    puts every class of a cycle after its children (minGPT's `ModuleDict` holds a `Block` list,
    and each `Block` a `ModuleDict`)."""
    holds: dict[str, set[str]] = {}
    for node in tree.nodes.values():
        for child in node.children.values():
            holds.setdefault(node.cls, set()).update(n.cls for n in members(child))
    reaching: set[str] = set()
    frontier = {name}
    while frontier:
        found = {cls for cls, held in holds.items() if held & frontier} - reaching
        reaching |= found
        frontier = found
    return reaching


def _class_of(node: object) -> str:
    cls = getattr(node, "cls", None)
    return cls if isinstance(cls, str) else "eqx.Module"


def _annotation(child: Child | None, level: int = 0) -> str:
    """A field's type: `Attention`, `list[Block]`, `list[tuple[Attention, FeedForward]]` (a list
    built item by item in a list is a tuple), `list[Conv2d | BatchNorm2d | None]` (`None` where
    torch's list holds a module with nothing to keep)."""
    if child is None:
        return "None"
    if isinstance(child, Node):
        return child.cls
    kinds = list(dict.fromkeys(_annotation(item, level + 1) for item in child))
    if fixed(child) and level > 0:
        return f"tuple[{', '.join(_annotation(item, level + 1) for item in child)}]"
    real = [k for k in kinds if k != "None"]
    one = " | ".join(real) or "eqx.Module"
    return f"list[{one}{' | None' if 'None' in kinds else ''}]"
