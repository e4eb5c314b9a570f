"""Layout rules, read from the source: modules under 500 lines, no import circles, no borrowed private
names, functions under 80 lines, classes setting at most 15 attributes, at most five
`# type: ignore` (each saying why), every module in the tables of docs/architecture.md, no public
class name defined in two packages.

Imports inside functions count; imports under ``if TYPE_CHECKING:`` do not. A private name (or a
private module) may be imported only from a ``_``-prefixed module of the importer's own package.
Each rule runs per package: annotate/, render/ and tracing/.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ("annotate", "render", "tracing")
PACKAGES = tuple(f"jaxside.{p}" for p in PROJECT)  # installed and imported in one namespace
MAX_LINES = 500


@dataclass(frozen=True)
class Import:
    importer: str
    line: int
    module: str
    """The module imported, or imported from."""
    name: str | None = None
    """The name imported from `module` (None for ``import module``)."""


def module_files() -> dict[str, Path]:
    """Every module of the project's packages by dotted name (a package by its own name)."""
    found = {}
    for package in PROJECT:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(["jaxside", *(parts[:-1] if parts[-1] == "__init__" else parts)])] = path
    return found


MODULES = module_files()


def imports_of(name: str) -> list[Import]:
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    return imports_in(path.read_text(encoding="utf-8"), name, package)


def imports_in(source: str, name: str, package: str) -> list[Import]:
    """The imports of project modules in `source` (the module `name` of `package`)."""
    found: list[Import] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend(Import(name, node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            base = parts[: len(parts) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            for alias in node.names:
                if f"{module}.{alias.name}" in MODULES:  # `from tracing import _internals`: a module
                    found.append(Import(name, node.lineno, f"{module}.{alias.name}"))
                else:
                    found.append(Import(name, node.lineno, module, alias.name))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return [item for item in found if any(in_package(item.module, p) for p in PACKAGES)]


def in_package(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def parent(module: str) -> str:
    return module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def borrowed_private(item: Import) -> str | None:
    """Why an import borrows a private name, or None if it does not."""
    if item.module not in MODULES:
        return None
    own = parent(item.module) == parent(item.importer)
    private_module = any(is_private(part) for part in item.module.split("."))
    if private_module and not own:
        return f"{item.module} is private to {parent(item.module)}"
    if item.name is not None and is_private(item.name):
        if not (own and is_private(item.module.rpartition(".")[2])):
            return f"{item.name} is private to {item.module}"
    return None


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_is_over_500_lines(package):
    lengths = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in MODULES.items()}
    long = {name: lines for name, lines in lengths.items() if in_package(name, package) and lines > MAX_LINES}
    assert long == {}


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_circle(package):
    graph = {name: {item.module for item in imports_of(name) if item.module in MODULES} for name in MODULES}
    circles = []
    for start in (name for name in MODULES if in_package(name, package)):
        path = _path_back(graph, start)
        if path is not None:
            circles.append(" -> ".join(path))
    assert circles == []


def _path_back(graph: dict[str, set[str]], start: str) -> list[str] | None:
    """A path of imports from `start` back to itself, if there is one (breadth first: the shortest)."""
    came_from: dict[str, str | None] = {start: None}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph.get(node, set()) - {node}):
                if target == start:
                    path = [node]
                    while (previous := came_from[path[-1]]) is not None:
                        path.append(previous)
                    return [*reversed(path), start]
                if target not in came_from:
                    came_from[target] = node
                    following.append(target)
        frontier = following
    return None


@pytest.mark.parametrize("package", PACKAGES)
def test_no_private_name_is_borrowed(package):
    """Neither by the package's modules nor from them (annotate importing `tracing._capture`)."""
    borrowed = [
        f"{MODULES[item.importer].relative_to(ROOT)}:{item.line}: {reason}"
        for name in MODULES for item in imports_of(name)
        if (in_package(item.importer, package) or in_package(item.module, package))
        and (reason := borrowed_private(item)) is not None
    ]
    assert borrowed == []


def test_tracing_imports_neither_render_nor_annotate():
    upward = [
        f"{MODULES[item.importer].relative_to(ROOT)}:{item.line}: {item.module}"
        for name in MODULES if in_package(name, "jaxside.tracing") for item in imports_of(name)
        if not in_package(item.module, "jaxside.tracing")
    ]
    assert upward == []


def test_the_rules_see_what_they_must():
    """The checks above see imports inside functions, skip TYPE_CHECKING ones, find a circle and a
    borrowed name (on made-up code, so they are known to fail when they should)."""
    source = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from jaxside.tracing import _capture\n"
        "def f():\n    from jaxside.tracing import _files\n"
        "    from . import errors\n    from .trace import Site\n"
    )
    found = imports_in(source, "jaxside.tracing._made_up", "jaxside.tracing")
    assert [(i.module, i.name) for i in found] == [
        ("jaxside.tracing._files", None), ("jaxside.tracing.errors", None), ("jaxside.tracing.trace", "Site")
    ]
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _path_back(graph, "a") == ["a", "b", "c", "a"]
    assert _path_back(graph, "d") is None
    assert borrowed_private(Import("jaxside.annotate.cli", 1, "jaxside.tracing._progress", "PROGRESS_AFTER"))
    assert borrowed_private(Import("jaxside.tracing._jaxfn", 1, "jaxside.tracing.errors", "_classify"))
    assert borrowed_private(Import("jaxside.tracing._jaxfn", 1, "jaxside.tracing._torch", "_Slot")) is None
    assert borrowed_private(Import("jaxside.tracing._jaxfn", 1, "jaxside.tracing._internals")) is None


MAX_FUNCTION_LINES = 80
MAX_ATTRIBUTES = 15


def long_functions(source: str, module: str) -> dict[str, int]:
    """Each def (a method, a nested def) over MAX_FUNCTION_LINES lines, by qualified name: its lines."""
    found: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}.{child.name}"
                if not isinstance(child, ast.ClassDef):
                    lines = child.end_lineno - child.lineno + 1
                    if lines > MAX_FUNCTION_LINES:
                        found[name] = lines
                visit(child, name)
            else:
                visit(child, prefix)

    visit(ast.parse(source), module)
    return found


def attributes_set(source: str, module: str) -> dict[str, set[str]]:
    """The attributes each class sets, by qualified name: its annotated fields (a dataclass's) and
    what its methods assign to their first parameter (`self.x = ...`, `self.x += ...`)."""
    found: dict[str, set[str]] = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        names = found.setdefault(f"{module}.{node.name}", set())
        for statement in node.body:
            if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                if "ClassVar" not in ast.unparse(statement.annotation):
                    names.add(statement.target.id)
            elif isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)) and statement.args.args:
                own = statement.args.args[0].arg
                names.update(
                    target.attr for target in ast.walk(statement)
                    if isinstance(target, ast.Attribute) and isinstance(target.ctx, ast.Store)
                    and isinstance(target.value, ast.Name) and target.value.id == own
                )
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_no_function_is_over_80_lines(package):
    long = {
        name: lines for module, path in MODULES.items() if in_package(module, package)
        for name, lines in long_functions(path.read_text(encoding="utf-8"), module).items()
    }
    assert long == {}


@pytest.mark.parametrize("package", PACKAGES)
def test_no_class_sets_over_15_attributes(package):
    wide = {
        name: len(names) for module, path in MODULES.items() if in_package(module, package)
        for name, names in attributes_set(path.read_text(encoding="utf-8"), module).items()
        if len(names) > MAX_ATTRIBUTES
    }
    assert wide == {}


def test_the_size_rules_see_what_they_must():
    """The two checks above count what they must, on made-up code: a method's lines, a nested
    def's, a dataclass's fields with what `__init__` and other methods set, no ClassVar."""
    body = "\n".join(f"        x{i} = {i}" for i in range(MAX_FUNCTION_LINES - 1))
    source = f"class A:\n    def run(self):\n{body}\n\ndef outer():\n    def inner():\n{body}\n        pass\n"
    over = MAX_FUNCTION_LINES + 1
    assert long_functions(source, "m") == {"m.outer": over + 1, "m.outer.inner": over}
    assert long_functions(source.replace("        pass\n", ""), "m") == {"m.outer": over}
    source = (
        "class R:\n    a: int\n    b: ClassVar[int] = 1\n    def __init__(me, c):\n        me.c = c\n"
        "        other.d = 1\n    def grow(self):\n        self.e += 1\n        self.f.g = 2\n"
        "        (self.h, self.i) = 1, 2\n"
    )
    assert attributes_set(source, "m") == {"m.R": {"a", "c", "e", "h", "i"}}



MAX_TYPE_IGNORES = 5
_IGNORE = re.compile(r"#\s*type:\s*ignore(?P<codes>\[[\w\-, ]+\])?(?P<rest>.*)$")


def type_ignores(source: str, module: str) -> list[tuple[str, bool]]:
    """Each `# type: ignore` in `source` (by `module:line`) and whether it names its codes
    (`[attr-defined]`) and says why after them, on the same line."""
    found = []
    for number, line in enumerate(source.splitlines(), 1):
        match = _IGNORE.search(line)
        if match:
            said = match.group("codes") is not None and re.match(r"\s*#\s*\S", match.group("rest"))
            found.append((f"{module}:{number}", bool(said)))
    return found


def test_type_ignores_are_few_and_say_why():
    found = [
        item for name, path in MODULES.items()
        for item in type_ignores(path.read_text(encoding="utf-8"), name)
    ]
    assert [where for where, said in found if not said] == []
    assert len(found) <= MAX_TYPE_IGNORES, found


def test_the_ignore_rule_sees_what_it_must():
    source = (
        "x.a = 1  # type: ignore[attr-defined]  # a mark on the node\n"
        "y = f()  # type: ignore[arg-type]\n"
        "z = g()  # type: ignore  # no code\n"
        "w = 2  # types: fine\n"
    )
    assert type_ignores(source, "m") == [("m:1", True), ("m:2", False), ("m:3", False)]

ARCHITECTURE = ROOT / "docs" / "architecture.md"


def documented_modules(text: str) -> set[str]:
    """The module paths docs/architecture.md's tables list: each row's first cells (`x.py`, `sub/`
    or `__init__.py` for a package), under the heading that names their folder (`### render/lower/: ...`)."""
    found: set[str] = set()
    folder = None
    for line in text.splitlines():
        if line.startswith("#"):
            heading = re.search(r"\b((?:annotate|render|tracing)/(?:\w+/)*)", line)
            folder = heading.group(1) if heading else None
            if folder:
                found.add(folder)
        elif folder and line.startswith("| `"):
            cell = line.split("|")[1]
            names = re.findall(r"`([\w/.]+)`", cell)
            found.update((folder + name).removesuffix("__init__.py") for name in names)
    return found


def module_paths() -> set[str]:
    """Each module's path as the tables write it: `render/lower/loops.py`, a package as `render/rules/`."""
    paths = set()
    for path in MODULES.values():
        relative = path.relative_to(ROOT).as_posix()
        paths.add(relative.removesuffix("__init__.py"))
    return paths


def test_every_module_is_in_the_architecture_tables():
    missing = sorted(module_paths() - documented_modules(ARCHITECTURE.read_text(encoding="utf-8")))
    assert missing == []


def test_the_tables_are_read_as_they_must():
    """On made-up tables: a row under its folder's heading, two modules in one row, a subpackage;
    rows under a heading that names no folder count for nothing."""
    text = (
        "## render/\n\n| module | what |\n| --- | --- |\n| `ir.py` | the program |\n| `rules/` | rules |\n"
        "### render/lower/: steps\n| `a.py`, `merge/b.py` | two |\n| `__init__.py` | its surface |\n"
        "## Elsewhere\n| `c.py` | no folder |\n"
    )
    assert documented_modules(text) == {
        "render/", "render/ir.py", "render/rules/", "render/lower/", "render/lower/a.py",
        "render/lower/merge/b.py",
    }


# -- one name, one class across packages -----------------------------------------------------------

KNOWN_SHARED_NAMES = {"Entry", "Guard"}
"""Public class names two packages both define, left for now: annotate's `loading.Entry` (a
model file's entry) beside tracing's and the catalogue's, `output.Guard` beside `ir.Guard`. No
other may join them."""


def public_classes(source: str, module: str) -> dict[str, str]:
    """The public classes `source` (the module `module`) defines at its top level, by name."""
    return {node.name: module for node in ast.parse(source).body
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_")}


def shared_class_names(modules: dict[str, str]) -> dict[str, list[str]]:
    """Public class names defined by modules of more than one package (`modules`: name -> source)."""
    where: dict[str, list[str]] = {}
    for module, source in modules.items():
        for name in public_classes(source, module):
            where.setdefault(name, []).append(module)
    packages = {name: {p for p in PACKAGES for m in found if in_package(m, p)}
                for name, found in where.items()}
    return {name: sorted(where[name]) for name, held in packages.items() if len(held) > 1}


def test_no_two_packages_define_a_class_of_one_name():
    """`annotate.errors.Context` beside `render.lower.Context` read as one concept; it was another."""
    shared = shared_class_names({name: path.read_text(encoding="utf-8") for name, path in MODULES.items()})
    assert set(shared) - KNOWN_SHARED_NAMES == set(), shared


def test_the_class_name_rule_sees_what_it_must():
    modules = {
        "jaxside.annotate.a": "class Context:\n    pass\nclass _Hidden: ...\n",
        "jaxside.render.b": "class Context: ...\nclass _Hidden: ...\ndef f():\n    class Inner: ...\n",
        "jaxside.render.c": "class Inner: ...\nclass Own: ...\n",
        "jaxside.render.d": "class Own: ...\n",
    }
    assert shared_class_names(modules) == {"Context": ["jaxside.annotate.a", "jaxside.render.b"]}
