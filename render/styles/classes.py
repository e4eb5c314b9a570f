"""Program -> a class-style module (Flax NNX or Equinox): one class per torch class, the defs as its
methods, plain defs and `Config` as in the functional export, and `from_torch`, the one converter.

`Style` is what a framework adds: its imports, how a class declares its attributes, how the
converter makes its layers. The statements come from `render.styles.methods`.
"""

from __future__ import annotations

import ast
import keyword
import re
from dataclasses import dataclass
from typing import Protocol

from jaxside.render import text as user_text
from jaxside.render.gradients import unstopped_sentence
from jaxside.render.ir import Program
from jaxside.render.layout import MODULE_WIDTH, double_quotes, format_statement
from jaxside.render.module import (
    IMPORTS,
    STANDARD,
    config_class,
    config_from_text,
    fill,
    import_order,
    sizes_paragraphs,
)
from jaxside.render.names import snake
from jaxside.render.styles.layers import find_layers
from jaxside.render.styles.lists import Build, child_value, list_value
from jaxside.render.styles.methods import Framework, Writer
from jaxside.render.styles.tree import Klass, Node, StyleError, Tree, kept_flags, members

__all__ = ["Style", "render_classes"]


class Style(Framework, Protocol):
    layers: bool
    """Whether torch Linear and Embedding modules become the framework's layers."""
    bottom_up: bool
    """Whether a class comes after its children's classes (annotations that name them)."""
    name: str
    """As the docstring says it: "Flax NNX"."""
    base: str
    """The classes' base: `nnx.Module`."""
    imports: list[str]
    layout: str
    """The docstring's sentence on where tensors change layout."""
    grad: str
    """Its gradient, as the docstring names it: "`nnx.grad`"."""

    def declare(self, klass: Klass, attributes: list[tuple[str, str, bool]], tree: Tree) -> list[str]:
        """The class body's lines before the methods (fields, or `__init__`)."""
        ...

    def argument(self, attribute: str) -> str:
        """The constructor's keyword for an attribute."""
        ...

    def layer_helpers(self, kinds: set[str]) -> list[str]:
        """The converter's helpers for the framework layers used ("linear", "embed")."""
        ...

    def leaf(self, kind: str, value: str, path: str) -> str:
        """The converter's expression for a leaf of this kind (`nnx.Param(value)` or `value`), given
        the expression of its tensor (`value`) and of its path (`path`: `path + "weight"`)."""
        ...

    def variables(self, kinds: set[str], unfrozen: set[str]) -> list[str]:
        """Classes and helpers of the module's own for the leaf kinds its classes hold (NNX's
        `FrozenParam`), `unfrozen` the paths of the frozen parameters of "mixed" attributes."""
        ...

    def gradients(self, held: set[str], read: set[str]) -> str | None:
        """The docstring's sentence on what gets no gradient, from the kinds of the leaves the classes
        hold and those the methods read (None: nothing to say)."""
        ...

    def unstopped(self, classes: list[Klass], read: set[str]) -> set[str]:
        """The frozen parameters the framework differentiates after all, from the classes and the
        frozen parameters the methods read as trained (`read`): NNX's type is its class's."""
        ...

    def inner_list(self, items: list[str], made: bool) -> str:
        """The converter's expression for a list held in a list, from its items (one layer's
        `[attention, feed_forward]`), or `made` by the one comprehension in `items`: an
        `nnx.List` in NNX, a tuple (or a list, made) in Equinox."""
        ...

    def finish(self, root: str, program: Program) -> list[str]:
        """`from_torch`'s last lines, given the root's builder call."""
        ...

    def usage(self, program: Program, root: str) -> list[str]:
        """The docstring's "Call it:" lines."""
        ...


def render_classes(program: Program, style: Style, *, source: str, types: dict[str, str],
                   frozen: frozenset[str] = frozenset()) -> str:
    """The module text of `program` in `style`; `types` gives the torch class of each module path
    (`torch.nn.modules.linear.Linear`), `frozen` the parameters torch does not differentiate
    (`requires_grad=False`), `source` what it was generated from."""
    entry = program.entry.calls[0].file, program.entry.calls[0].line
    if program.entry.calls[0].module_type is None:
        raise StyleError("the entry is a function, not a torch module: only the functional export fits it",
                         where=entry)
    if program.written_inputs:
        raise StyleError("the torch code writes its inputs in place: only the functional export returns them",
                         where=entry)
    tree = Tree(program, types, frozen)
    odd = next((node.prefix(n) for node in tree.nodes.values() for n in [*node.children, *node.leaves]
                if not n.isidentifier() or keyword.iskeyword(n)), None)
    if odd is not None:
        attribute = odd.rpartition(".")[2]
        raise StyleError(f"a torch attribute named {attribute!r} is no Python attribute name", odd)
    _check_class_names(tree, program)
    if style.layers:
        find_layers(tree)
    classes = tree.classes()
    if style.bottom_up:  # field annotations name the children's classes: those come first
        classes = _bottom_up(classes)
    methods = {f.name for k in classes for f in k.methods}
    plain = [f.node() for f in program.functions + program.helpers if f.name not in methods]
    writer = Writer(tree, style, _MODULE_NAMES | {d.name for d in plain} | {n for n, _ in program.constants})
    kinds = {kind for klass in classes for _, kind, _ in klass.attributes()}
    unfrozen = {path for klass in classes for path in klass.unfrozen()}
    blocks = [*style.variables(kinds, unfrozen), *(_class(klass, style, writer, tree) for klass in classes)]
    blocks += ["\n".join(format_statement(d, 0, MODULE_WIDTH)) for d in plain]
    constants = [ast.Assign([ast.Name(n, ast.Store())], v, lineno=0) for n, v in program.constants]
    blocks.append(_converter(tree, classes, style))
    if program.config:
        blocks.append(config_from_text(program, "from_torch"))
    text = "\n".join(blocks)
    used = {n.id for tree in [ast.parse(text), *constants] for n in ast.walk(tree) if isinstance(n, ast.Name)}
    used |= {"jnp"}
    if program.config:
        used.add("dataclasses")
    standard = [IMPORTS[name] for name in STANDARD if name in used]
    extend = (n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Attribute) and n.attr == "extend")
    if any(isinstance(n.value, ast.Name) and n.value.id == "jax" for n in extend):
        style_imports = [*style.imports, "import jax.extend"]  # an exact primitive's home
    else:
        style_imports = list(style.imports)
    imports = sorted([line for name, line in IMPORTS.items() if name in used and name not in STANDARD]
                     + style_imports, key=import_order)
    layers = any(node.layer for node in tree.nodes.values())
    unstopped = unstopped_sentence(style.unstopped(classes, writer.unstopped), "a class", style.grad)
    gradients = " ".join(filter(None, [style.gradients(kinds, writer.read_kinds), unstopped]))
    top = [user_text.docstring(_docstring(program, style, tree.root.cls, source, layers, gradients))]
    top += ["\n".join(standard)] if standard else []
    top.append("\n".join(imports))
    if constants:
        top.append("\n".join(line for c in constants for line in format_statement(c, 0, MODULE_WIDTH)))
    if program.config:
        top.append("\n" + config_class(program))
    text = double_quotes("\n\n".join(top) + "".join("\n\n\n" + block for block in blocks) + "\n")
    user_text.check_compiles(text, "module")
    return text


_MODULE_NAMES = frozenset({"Config", "config_from", "from_torch", "dataclasses", "jax", "jnp", "lax", "np",
                           "nnx", "eqx", "torch", "FrozenParam"})
"""Names a class-style module binds besides its classes (its plain defs and constants are the program's)."""


def _check_class_names(tree: Tree, program: Program) -> None:
    """Each class is written under its torch class's name: one that is no Python class name, names
    two torch classes, or is a name the module binds otherwise, is refused, never written."""
    taken = _MODULE_NAMES | {f.name for f in program.functions + program.helpers} | {
        n for n, _ in program.constants}
    torch_types: dict[str, set[str]] = {}
    first: dict[str, str] = {}
    for node in tree.nodes.values():
        torch_types.setdefault(node.cls, set()).add(node.torch_type)
        first.setdefault(node.cls, node.path)
    defs = {f.calls[0].module_type: (f.calls[0].file, f.calls[0].line) for f in reversed(program.functions)}
    for name, types in torch_types.items():  # refused at its method's def, or where a module of it is made
        if not name.isidentifier() or keyword.iskeyword(name):
            raise StyleError(f"a torch class named {name!r} is no Python class name", first[name],
                             defs.get(name))
        if name in taken:
            raise StyleError(f"the torch class {name} has the name of the module's own `{name}`", first[name],
                             defs.get(name))
        if len(types - {""}) > 1:
            known = tree.nodes[first[name]].torch_type or next(iter(types - {""}))
            path = next(n.path for n in tree.nodes.values()
                        if n.cls == name and n.torch_type not in ("", known))
            raise StyleError(f"two torch classes are named {name} ({', '.join(sorted(types - {''}))})", path)


def _bottom_up(classes: list[Klass]) -> list[Klass]:
    by_name = {k.name: k for k in classes}
    done: dict[str, Klass] = {}

    def visit(klass: Klass) -> None:
        if klass.name in done:
            return
        done[klass.name] = klass  # marked first: a class reaching itself is no cycle to follow
        for node in klass.nodes:
            for child in node.children.values():
                for item in members(child):
                    if item.cls in by_name:
                        visit(by_name[item.cls])
        done.pop(klass.name)
        done[klass.name] = klass

    for klass in classes:
        visit(klass)
    return list(done.values())


def _docstring(program: Program, style: Style, root: str, source: str, layers: bool, gradients: str | None
               ) -> str:
    trace = program.trace
    inputs = ", ".join(f"{i.name}: {i.var.aval.str_short()}" for i in trace.inputs if i.kind == "arg")
    paragraphs = [
        f"{style.name} for {user_text.comment(source)}, exported by jaxside from one traced run (torchax).",
        f"Traced with {inputs or 'no tensor inputs'}; non-tensor inputs are baked in as they were then.",
        *sizes_paragraphs(program),
        "\n".join(["Call it:", "", *style.usage(program, root)]),
        "One class per torch class, attributes named as in torch. " + (
            style.layout if layers else "Every tensor keeps torch's layout: `from_torch` only places them."),
    ]
    if program.config:
        paragraphs.append(
            "Config: the numbers the torch code read from its modules are the fields of `Config`, "
            "the traced model's by default; for another model built the same way, pass "
            "`config=config_from(model)` to `from_torch`."
        )
    paragraphs += [gradients] if gradients else []
    if program.fallbacks:
        names = ", ".join(sorted(program.fallbacks))
        paragraphs.append(f"Written as their exact primitive, for want of an idiomatic rule: {names}.")
    return "\n\n".join(fill(p) for p in paragraphs)


def _class(klass: Klass, style: Style, writer: Writer, tree: Tree) -> str:
    node = klass.nodes[0] if klass.nodes else None
    more = f" and {len(klass.nodes) - 1} more" if len(klass.nodes) > 1 else ""
    what = "the torch module" if klass.methods else "the tensors of the torch module"
    doc = (f"`{klass.name}`: {what} at `{node.path}`{more}." if node is not None and node.path
           else f"`{klass.name}`: the traced torch module.")
    lines = [f"class {klass.name}({style.base}):", f"    {user_text.docstring(doc, 4)}"]
    declared = style.declare(klass, klass.attributes(), tree)
    lines += ["", *declared] if declared else []
    for function in klass.methods:
        lines.append("")
        lines += format_statement(writer.method(function), 4, MODULE_WIDTH)
    while lines[-1] == "":
        lines.pop()
    return "\n".join(lines)


# -- from_torch --------------------------------------------------------------------------------------


_TENSORS = '''def _tensors(model):
    """Every tensor of a torch module (parameters, buffers, tensor attributes) or of a
    `state_dict` (of torch tensors, or of NumPy arrays: then torch is not needed), by
    dotted path, as `jnp` arrays."""
    if isinstance(model, dict):
        tensors = dict(model)
    else:
        import torch

        tensors = {**dict(model.named_parameters()), **dict(model.named_buffers())}
        for prefix, module in model.named_modules():
            for name, value in vars(module).items():
                if isinstance(value, torch.Tensor):
                    tensors.setdefault(f"{prefix}.{name}" if prefix else name, value)
    arrays = {}
    for path, tensor in tensors.items():
        if hasattr(tensor, "detach"):  # a torch tensor
            tensor = tensor.detach().cpu()
            if str(tensor.dtype) == "torch.bfloat16":
                tensor = jnp.asarray(tensor.float().numpy(), dtype=jnp.bfloat16)
            else:
                tensor = tensor.numpy()
        arrays[path] = jnp.asarray(tensor)
    return arrays


def _count(tensors, prefix):
    """How many numbered children (a ModuleList) the tensors have under `prefix`."""
    numbers = {
        path[len(prefix) :].split(".")[0] for path in tensors if path.startswith(prefix)
    }
    return len(numbers)'''


@dataclass
class _Builder:
    name: str
    klass: Klass


def _needs_config(classes: list[Klass]) -> set[str]:
    """The classes whose builders take the config: those that keep it, and those above them."""
    by_name = {k.name: k for k in classes}
    needs = {k.name for k in classes if k.uses_config}
    grew = True
    while grew:
        grew = False
        for klass in classes:
            children = {item.cls for node in klass.nodes for child in node.children.values()
                        for item in members(child) if item.cls in by_name}
            if klass.name not in needs and children & needs:
                needs.add(klass.name)
                grew = True
    return needs


def _converter(tree: Tree, classes: list[Klass], style: Style) -> str:
    builders = {k.name: f"_{snake(k.name)}" for k in classes}
    needs = _needs_config(classes)
    kinds = {n.layer for n in tree.nodes.values() if n.layer}
    parts = [_TENSORS, *style.layer_helpers(kinds)]
    table = _flags_table(classes)
    if table:
        parts.append(table)
    for klass in classes:
        parts.append(_builder(klass, builders, style, needs))
    root = _build_call(tree.root, builders, '""', needs)
    changes = ("every layout change is made here, in the helpers it calls" if kinds
               else "every tensor keeps torch's layout")
    doc = (f'"""The `{tree.root.cls}` holding a torch module\'s weights (the module, or its\n'
           f'`state_dict`): {changes}."""')
    keyword = ", *, config=Config()" if tree.program.config else ""
    signature = f"def from_torch(model{keyword}):"
    lines = [signature, f"    {doc}", "    tensors = _tensors(model)"]
    lines += [f"    {line}" for line in style.finish(root, tree.program)]
    converter = "\n".join(format_statement(ast.parse("\n".join(lines)).body[0], 0, MODULE_WIDTH))
    return "\n\n\n".join([*parts, converter])


def _builder(klass: Klass, builders: dict[str, str], style: Style, needs: set[str]) -> str:
    args, before = [], []
    build = Build(lambda node, path: _build_call(node, builders, path, needs), _holds)
    for name, kind, optional in klass.attributes():
        key = user_text.literal(name)
        if kind in ("child", "list"):
            choice = list_value(klass, name, build, style.inner_list) if kind == "list" else child_value(
                klass, name, build)
            value = choice[0][1]
            if len(choice) > 1:  # instances hold other modules: the one the tensors say, chosen first
                value = f"{name}_" if name in ("tensors", "path", "config") else name
                for k, (test, expr) in enumerate(choice):
                    head = ("if " if k == 0 else "elif ") + test if test else "else"
                    before.append(f"    {head}:\n        {value} = {expr}")
        else:
            read = f"tensors.get(path + {key})" if optional else f"tensors[path + {key}]"
            value = style.leaf(kind, read, f"path + {key}") if not optional or kind == "mixed" else read
        if kind in ("child", "list") and optional and _holds_tensors(klass, name):
            value = f'({value} if any(p.startswith(path + "{name}.") for p in tensors) else None)'
        args.append(f"        {style.argument(name)}={value},")
    if klass.uses_config:
        args.append("        config=config,")
    if any(f.differing for f in kept_flags(klass)):
        args.append('        **_FLAGS.get(path.removesuffix("."), {}),')
    body = "\n".join(args)
    config = ", config" if klass.name in needs else ""
    signature = f"def {builders[klass.name]}(tensors, path{config}):"
    doc = f'    """`{klass.name}` from the tensors under `path`."""'
    text = "\n".join([signature, doc, *before, f"    return {klass.name}(\n{body}\n    )"])
    lines = format_statement(ast.parse(text).body[0], 0, MODULE_WIDTH)
    return re.sub(r"f'([^'\"]*)'", r'f"\1"', "\n".join(lines))


def _holds(node: Node) -> bool:
    """Whether a module holds a tensor, itself or below."""
    return bool(node.leaves) or any(_holds(n) for c in node.children.values() for n in members(c))


def _holds_tensors(klass: Klass, name: str) -> bool:
    """Whether the child `name` holds a tensor in some instance: the converter then builds it where
    tensors lie under its path. One holding none (an activation module) leaves no trace in a
    `state_dict`, so it is built in every instance, and is there wherever the torch code calls it."""
    return any(_holds(n) for node in klass.nodes if name in node.children
               for n in members(node.children[name]))


def _flags_table(classes: list[Klass]) -> str:
    """`_FLAGS`: per instance path, the flags its torch module was built with that differ from
    its class's defaults (`{"layers.1": {"stride": 2}}`)."""
    rows: dict[str, dict[str, str]] = {}
    for klass in classes:
        for flag in kept_flags(klass):
            for path, value in flag.differing.items():
                rows.setdefault(path, {})[flag.attribute] = value
    if not rows:
        return ""
    def entries(row: dict[str, str]) -> str:
        return ", ".join(f"{user_text.literal(k)}: {v}" for k, v in row.items())

    items = ", ".join(f"{user_text.literal(path)}: {{{entries(row)}}}" for path, row in rows.items())
    tree = ast.parse(f"_FLAGS = {{{items}}}")
    lines = format_statement(tree.body[0], 0, MODULE_WIDTH)
    doc = '"""Per torch module, the flags it was built with where they differ from its class\'s defaults."""'
    return double_quotes("\n".join(lines)) + "\n" + doc


def _build_call(node: Node, builders: dict[str, str], path: str, needs: set[str]) -> str:
    if node.layer is not None:
        return f"_{node.layer}_layer(tensors, {path})"
    config = ", config" if node.cls in needs else ""
    return f"{builders[node.cls]}(tensors, {path}{config})"
