"""The torch module tree a class-style export is built on: one `Node` per module instance, one
`Klass` per torch class, and which library modules become the framework's own layers.

Read from the Program's public data only: the `params`/`state` paths, the defs' calls (their
module paths and types) and the torch class of each module path the caller gives (`types`, from the
torch module itself; a path it does not name is a parameter holder named as its last word).
"""

from __future__ import annotations

import ast
from collections import Counter
from dataclasses import dataclass, field
from typing import TypeAlias

from jaxside.render.ir import Function, Keyword, Program
from jaxside.render.names import is_index

__all__ = ["EMBEDDING", "LINEAR", "Child", "Flag", "Klass", "Node", "StyleError", "Tree", "kept_flags",
           "leaf_kind", "members"]

LINEAR = "torch.nn.modules.linear.Linear"
EMBEDDING = "torch.nn.modules.sparse.Embedding"


class StyleError(Exception):
    """The program has something a class-style export cannot write yet (named in the message);
    `path` is the torch submodule at fault, where there is one (`layers.0.0`), `where` the torch
    file and line at fault where render knows it (a def's line)."""

    def __init__(self, message: str, path: str | None = None, where: tuple[str, int] | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.where = where


Child: TypeAlias = "Node | list[Child | None]"
"""What a torch attribute holds: a module, or a numbered list (`ModuleList`, `Sequential`) of them,
of lists too (vit-pytorch's `nn.ModuleList([attention, feed_forward])` per layer), indexed as torch
indexes it: `None` where the torch list holds a module with no tensors and no def (a `GELU`)."""


def leaf_kind(holders: list[Node], leaf: str, mixed: str = "param") -> str:
    """The kind of attribute `leaf` over the instances of a class: "frozen" only where every instance
    froze it; `mixed` where some froze it and others train it (a class's code is shared: a method
    reads it as a "param" in all)."""
    kinds = [n.leaves[leaf] for n in holders if leaf in n.leaves]
    if "frozen" in kinds and set(kinds) != {"frozen"}:
        return mixed
    return kinds[0] if kinds else "param"


def members(child: Child | None) -> list[Node]:
    """The modules `child` holds, at any depth, in order."""
    if child is None:
        return []
    if isinstance(child, list):
        return [node for item in child for node in members(item)]
    return [child]


@dataclass
class Node:
    """One torch module instance: its path (`layers.0.attention`), class and what it holds."""

    path: str
    cls: str
    torch_type: str
    children: dict[str, Child] = field(default_factory=dict)
    leaves: dict[str, str] = field(default_factory=dict)
    """Attribute -> "param", "frozen" (a parameter with `requires_grad=False`), "buffer" (read only)
    or "state" (written by the torch code). (`Klass.attributes` adds "mixed": frozen in some
    instances only.)"""
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    dtypes: dict[str, str] = field(default_factory=dict)
    layer: str | None = None
    """The framework layer it is ("linear", "embed"), or None: a class of the export."""
    peers: list[Node] = field(default_factory=list, repr=False)
    """The other instances of its class."""

    def prefix(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name


@dataclass
class Klass:
    """One class of the export: a torch class, its instances and its methods (defs)."""

    name: str
    nodes: list[Node]
    methods: list[Function] = field(default_factory=list)
    keywords: list[str] = field(default_factory=list)
    """Flags of its defs other than the config (`stride`): attributes set per instance."""
    uses_config: bool = False
    flags: dict[str, Flag] = field(default_factory=dict)
    """Each flag's value per instance (by path), as source text."""


    def attributes(self) -> list[tuple[str, str, bool]]:
        """(attribute, kind, optional) over every instance, in the first instance's order; kind is
        "child", "list", or a leaf kind; optional when some instance lacks it."""
        order: dict[str, str] = {}
        for node in self.nodes:
            for name, child in node.children.items():
                order.setdefault(name, "list" if isinstance(child, list) else "child")
            for name in node.leaves:
                order.setdefault(name, leaf_kind(self.nodes, name, "mixed"))
        every = [set(n.children) | set(n.leaves) for n in self.nodes]
        return [(name, kind, not all(name in names for names in every)) for name, kind in order.items()]

    def unfrozen(self) -> set[str]:
        """The paths of the parameters torch froze where other instances of the class train theirs
        (attributes of kind "mixed")."""
        kinds = {name: kind for name, kind, _ in self.attributes()}
        return {n.prefix(leaf) for n in self.nodes for leaf, kind in n.leaves.items()
                if kind == "frozen" and kinds.get(leaf) == "mixed"}


@dataclass
class Flag:
    """A number or switch the calls sharing a def pass differently (`stride=2` in one block)."""

    name: str
    default: str
    """The value most instances have (the def's default when it has one): the `__init__` default."""
    values: dict[str, str]
    """Per instance path, its value (source text)."""
    presence: bool = False
    """True when the flag says whether the module has an attribute of the same name (the torch
    code's `if self.downsample is not None`): the methods test the attribute instead."""
    attribute: str = ""
    """The attribute a flag that is no presence test is kept as (`stride`, or `downsample_flag`
    when the class has a `downsample` of its own)."""
    read: bool = True
    """Whether a method of the class reads it: not when every def only hands it on to a child's
    def (LeViT's `Transformer` passing `heads` to its `Attention`, which keeps its own)."""

    @property
    def differing(self) -> dict[str, str]:
        return {path: value for path, value in self.values.items() if value != self.default}


class Tree:
    """The module tree of a program: `root`, every node by path, and the classes in def order."""

    def __init__(self, program: Program, types: dict[str, str], frozen: frozenset[str] = frozenset()) -> None:
        self.program = program
        kinds = {i.name: i.kind for i in program.trace.inputs}
        written = set(program.state_paths)
        avals = {i.name: i.var.aval for i in program.trace.inputs}
        defined = {c.module_path: c.module_type for f in program.functions for c in f.calls
                   if c.module_path is not None and c.module_type}
        self.nodes: dict[str, Node] = {}
        leaves = [*program.param_paths, *(p for p in program.state_paths if p not in program.param_paths)]
        modules = {""} | set(defined)
        for path in [*leaves, *defined]:  # `pool.1` (a def, no tensors) makes `pool` a module too
            parts = path.split(".")
            modules |= {".".join(parts[:i]) for i in range(len(parts))}
        below: dict[str, set[str]] = {}
        for path in modules | set(leaves):
            if path:
                parent, _, name = path.rpartition(".")
                below.setdefault(parent, set()).add(name)
        lists = {p for p in modules if p not in defined and p and below.get(p)
                 and all(is_index(k) for k in below[p])}
        seen = [*leaves, *defined]
        first = {path: next((n for n, p in enumerate(seen) if p == path or p.startswith(path + ".")), 0)
                 for path in modules}

        def order(path: str) -> tuple[int, int]:
            return path.count("."), first[path]

        for path in sorted(modules - lists, key=order):
            self.nodes[path] = self._node(path, defined, types)

        def items(path: str) -> list[Child | None]:
            numbered = {int(k): f"{path}.{k}" for k in below.get(path, ()) if f"{path}.{k}" in modules}
            return [None if k not in numbered else items(numbered[k]) if numbered[k] in lists
                    else self.nodes[numbered[k]] for k in range(max(numbered, default=-1) + 1)]

        for path in sorted(modules - {""}, key=order):
            parent, _, name = path.rpartition(".")
            if parent in lists:
                continue  # an item of a list: placed by its list
            if path in lists:
                self.nodes[parent].children[name] = items(path)
            else:
                self.nodes[parent].children[name] = self.nodes[path]
        for path in leaves:
            parent, _, leaf = path.rpartition(".")
            if parent in lists:
                raise StyleError(f"`{path}`: a tensor in a numbered list (a ParameterList)", path)
            node = self.nodes[parent]
            node.leaves[leaf] = "state" if path in written else "buffer" if kinds.get(path) != "param" else (
                "frozen" if path in frozen else "param")
            node.shapes[leaf] = tuple(avals[path].shape) if path in avals else ()
            node.dtypes[leaf] = str(avals[path].dtype) if path in avals else "float32"
        self.root = self.nodes[""]
        by_class: dict[str, list[Node]] = {}
        for node in self.nodes.values():
            by_class.setdefault(node.cls, []).append(node)
        for node in self.nodes.values():
            node.peers = [n for n in by_class[node.cls] if n is not node]
        self.methods = self._methods()

    def _node(self, path: str, defined: dict[str, str], types: dict[str, str]) -> Node:
        torch_type = types.get(path, "")
        cls = defined.get(path) or torch_type.rpartition(".")[2] or (path.rpartition(".")[2] or "Model")
        return Node(path, cls, torch_type)

    def _methods(self) -> dict[str, Klass]:
        classes: dict[str, Klass] = {}
        defs = {f.name: f for f in self.program.functions}
        for function in self.program.functions:
            call = function.calls[0]
            if call.module_path is None or not call.module_type:
                continue
            klass = classes.get(call.module_type)
            if klass is None:
                nodes = [n for n in self.nodes.values() if n.cls == call.module_type]
                klass = classes[call.module_type] = Klass(call.module_type, nodes)
            klass.methods.append(function)
            passed = {id(k.value) for n in ast.walk(function.node()) if isinstance(n, ast.Call)
                      for k in n.keywords if k.arg == self.config_name}
            reads = [n for n in ast.walk(function.node()) if isinstance(n, ast.Name)
                     and n.id == self.config_name and id(n) not in passed]
            klass.uses_config |= bool(reads)
            read = _read_names(function, defs)
            for keyword in function.keywords:
                if keyword.name == self.config_name:
                    continue
                if keyword.name not in klass.keywords:
                    klass.keywords.append(keyword.name)
                known = klass.flags.get(keyword.name)
                flag = klass.flags[keyword.name] = _flag(klass, keyword, function, known)
                flag.read = keyword.name in read or (known is not None and known.read)
        return classes

    @property
    def config_name(self) -> str | None:
        """The config keyword of the defs (`config`), when the export has a `Config`."""
        if not self.program.config:
            return None
        for keyword in self.program.entry.keywords:
            if keyword.default is not None and ast.unparse(keyword.default) == "Config()":
                return keyword.name
        return None

    def classes(self) -> list[Klass]:
        """Every class of the export: the torch classes with defs, in def order, then the holders of
        parameters (library modules that are no framework layer), one per torch class."""
        result = list(self.methods.values())
        holders: dict[str, Klass] = {}
        for node in self.nodes.values():
            if node.cls in self.methods or node.layer is not None:
                continue
            holders.setdefault(node.cls, Klass(node.cls, []))
            holders[node.cls].nodes.append(node)
        return result + list(holders.values())

    def at(self, path: str) -> Child | None:
        if path in self.nodes:
            return self.nodes[path]
        parent, _, name = path.rpartition(".")
        owner = self.nodes.get(parent)
        return owner.children.get(name) if owner is not None else None


def _flag(klass: Klass, keyword: Keyword, function: Function, known: Flag | None) -> Flag:
    values = dict(known.values) if known is not None else {}
    default = ast.unparse(keyword.default) if keyword.default is not None else None
    for call in function.calls:
        value = keyword.values.get(id(call), keyword.default)
        if call.module_path is not None and value is not None:
            values.setdefault(call.module_path, ast.unparse(value))
    if default is None:
        counts = Counter(values.values())
        default = counts.most_common(1)[0][0] if counts else "None"
    flag = Flag(keyword.name, default, values)
    owned = {n.path: keyword.name in n.children or keyword.name in n.leaves for n in klass.nodes}
    if any(owned.values()) and all(values.get(p) in ("True", "False") for p in owned):
        if all((values[p] == "True") == present for p, present in owned.items()):
            flag.presence = True
    taken = any(owned.values())
    flag.attribute = f"{keyword.name}_flag" if taken and not flag.presence else keyword.name
    return flag


def _read_names(function: Function, defs: dict[str, Function]) -> set[str]:
    """The names `function`'s method reads: its def's, but for the keyword arguments it hands a
    child module's def (`n=n`), which the method drops, the child keeping its own."""
    tree = function.node()
    handed: set[int] = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        callee = defs.get(node.func.id)
        if callee is None or callee.calls[0].module_type is None:
            continue
        takes = {k.name for k in callee.keywords}
        handed |= {id(n) for k in node.keywords if k.arg in takes for n in ast.walk(k.value)}
    return {n.id for s in tree.body for n in ast.walk(s) if isinstance(n, ast.Name) and id(n) not in handed}


def kept_flags(klass: Klass) -> list[Flag]:
    """The flags a class keeps as attributes (`stride`): not the ones that test for an attribute,
    nor those no method reads."""
    return [f for f in klass.flags.values() if not f.presence and f.read]
