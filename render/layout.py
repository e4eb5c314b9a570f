"""Statements as source lines, laid out the way `ruff format` lays them out.

The exported module (`render.module`) is a file people commit, so its text is what `ruff format`
would make of it at ruff's default line length (`MODULE_WIDTH`): a statement that fits stays on one
line; one that does not is split at its brackets, outermost first, with one item per line and a
trailing comma when the items do not fit on one line either, and at its loosest operators, each
starting a line, inside brackets (added when the statement has none of its own). The comments
beside torch lines (`render.comments`) use the same layout at their own width, so a long statement
reads the same in both.

Expressions are documents of `render.expressions`; here statements are put together from them.
Every result is parsed back and compared with the statement it came from.
"""

from __future__ import annotations

import ast
import inspect

from jaxside.render import text as user_text
from jaxside.render.expressions import (
    LINE,
    SOFT,
    TEST,
    Doc,
    Docs,
    flat_tuple,
    group,
    if_break,
    join,
    print_doc,
)
from jaxside.render.expressions import (
    indent as indented,
)
from jaxside.render.text import display_width, double_quotes

__all__ = ["MODULE_WIDTH", "WIDTH", "display_width", "double_quotes", "format_body", "format_statement",
           "wrap_text"]

WIDTH = 100
"""Comments beside torch lines: long statements are wrapped to this width, and a comment goes
beside a torch line only if the line stays within it."""
MODULE_WIDTH = 88
"""The exported module's line length: ruff's (and black's) default, so `ruff format` leaves it as it is."""


# -- statements ------------------------------------------------------------------------------------------


def format_statement(node: ast.stmt, indent: int, width: int = WIDTH) -> list[str]:
    """`node` as source lines at `indent`, laid out as `ruff format` would at `width`."""
    lines = _statement(node, indent, width)
    text = "\n".join(line[indent:] if line.startswith(" " * indent) else line for line in lines)
    try:
        # parsed back from `ast.unparse`: a built node lacks the fields a version adds (3.12's `type_params`)
        same = _meaning(ast.parse(text)) == _meaning(ast.parse(ast.unparse(node)))
    except SyntaxError:
        same = False
    if not same:  # a layout bug must never change what the code means: the plain form instead
        return [" " * indent + line for line in double_quotes(ast.unparse(node)).splitlines()]
    return lines


def _meaning(tree: ast.Module) -> str:
    """The tree's dump, docstrings read as `help()` reads them (their indentation is layout)."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            doc = _docstring(node.body[0])
            if doc is not None:
                doc.value = inspect.cleandoc(str(doc.value))
    return ast.dump(tree)


def format_body(body: list[ast.stmt], indent: int, width: int, *, function: bool) -> list[str]:
    """A block's statements with the blank lines ruff puts around nested defs."""
    lines: list[str] = []
    for index, statement in enumerate(body):
        is_def = isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        after_def = index > 0 and _ends_with_def(body[index - 1])
        if (is_def and (index > 0 or not function)) or after_def:
            lines.append("")
        lines += _statement(statement, indent, width)
    return lines


def _ends_with_def(node: ast.stmt) -> bool:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return True
    body = getattr(node, "orelse", None) or getattr(node, "body", None)
    return isinstance(body, list) and bool(body) and _ends_with_def(body[-1])


def _docstring(node: ast.stmt) -> ast.Constant | None:
    """The string constant of a statement that is a docstring, else None."""
    value = node.value if isinstance(node, ast.Expr) else None
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return value
    return None


def _statement(node: ast.stmt, indent: int, width: int) -> list[str]:
    docs = Docs()
    pad = " " * indent

    def laid(*parts: Doc) -> list[str]:
        return (pad + print_doc(list(parts), indent, width, indent)).split("\n")

    if isinstance(node, ast.FunctionDef):
        lines = [pad + "@" + line for d in node.decorator_list for line in laid(docs.expr(d, False))]
        args = node.args
        params = _parameters(args)
        if not params or params == [""]:
            lines += laid(f"def {node.name}():")
        else:
            lines += laid(f"def {node.name}", group("(", indented(SOFT, *join([",", LINE], params),
                                                                  if_break(",")), SOFT, "):"))
        body = node.body
        doc = _docstring(body[0]) if body else None
        if doc is not None:
            lines.append(f"{pad}    {user_text.docstring(str(doc.value), indent + 4)}")
            body = body[1:]
            if body and isinstance(body[0], (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                lines.append("")
        return lines + format_body(body, indent + 4, width, function=True)
    if isinstance(node, ast.If):  # a size check, or statements only some calls of a shared def run
        lines = laid("if ", docs.value(node.test), ":")
        lines += format_body(node.body, indent + 4, width, function=False)
        if node.orelse:
            lines += [pad + "else:", *format_body(node.orelse, indent + 4, width, function=False)]
        return lines
    if isinstance(node, ast.Raise) and node.exc is not None and node.cause is None:
        return laid("raise ", docs.value(node.exc))
    if isinstance(node, ast.For):
        loop = node.target
        target = flat_tuple(loop) if isinstance(loop, ast.Tuple) else docs.expr(loop, False)
        head = laid("for ", target, " in ", docs.value(node.iter), ":")
        return head + format_body(node.body, indent + 4, width, function=False)
    if isinstance(node, ast.Assign):
        parts: list[Doc] = []
        for target in node.targets:
            if isinstance(target, ast.Tuple) and len(target.elts) > 1:
                items = [group(docs.sub(e, TEST, True)) for e in target.elts]
                trailing = "," if len(items) == 1 else if_break(",")
                parts.append(group(if_break("("), indented(SOFT, *join([",", LINE], items), trailing),
                                    SOFT, if_break(")")))
            else:
                parts.append(docs.expr(target, False))
            parts.append(" = ")
        return laid(*parts, docs.value(node.value))
    if isinstance(node, ast.Return):
        return laid("return") if node.value is None else laid("return ", docs.value(node.value, True))
    if isinstance(node, ast.Expr):
        return laid(docs.value(node.value))
    return [pad + line for line in double_quotes(ast.unparse(node)).splitlines()]


# -- text ------------------------------------------------------------------------------------------------


def wrap_text(text: str, indent: int, width: int) -> list[str]:
    """A statement's text over several lines, the way the exported module lays it out."""
    code, _, shapes = text.partition("  # ")
    if indent + display_width(text) <= width:
        return [text]
    try:
        (node,) = ast.parse(code).body
    except (SyntaxError, ValueError):
        return [text]
    lines = [line[indent:] for line in format_statement(node, indent, width)]
    if shapes:
        lines[-1] += f"  # {shapes}"
    return lines


def _parameters(args: ast.arguments) -> list[str]:
    """Each parameter as ruff lays one on its line: `x`, `*`, `config`, `stride=2`."""
    positional = args.posonlyargs + args.args
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    parts = [a.arg if d is None else f"{a.arg}={ast.unparse(d)}" for a, d in zip(positional, defaults)]
    if args.posonlyargs:
        parts.insert(len(args.posonlyargs), "/")
    if args.vararg:
        parts.append("*" + args.vararg.arg)
    elif args.kwonlyargs:
        parts.append("*")
    parts += [
        a.arg if d is None else f"{a.arg}={ast.unparse(d)}" for a, d in zip(args.kwonlyargs, args.kw_defaults)
    ]
    if args.kwarg:
        parts.append("**" + args.kwarg.arg)
    return parts
