"""Statements as source lines: one line when it fits `WIDTH`, else split at the outermost brackets.

The exported module (`render.module`) and the comments beside torch lines (`render.comments`)
lay statements out with the same rules, so a long statement reads the same in both.
"""

from __future__ import annotations

import ast
import io
import tokenize
import unicodedata

from render import text as user_text

WIDTH = 100
"""Lines longer than this are split at call arguments, list items and operators; comments go
beside a torch line only if the line stays within it."""


def format_statement(node: ast.stmt, indent: int) -> list[str]:
    """`node` as source lines at `indent`, split at its outermost brackets to fit `WIDTH`."""
    pad = " " * indent
    if isinstance(node, ast.FunctionDef):
        args = ", ".join(a.arg for a in node.args.args)
        lines = [f"{pad}@{ast.unparse(d)}" for d in node.decorator_list]
        head = f"{pad}def {node.name}({args}):"
        if len(head) > WIDTH:
            one_line = f"{pad}    {args},"
            params = [one_line] if len(one_line) <= WIDTH else [f"{pad}    {a.arg}," for a in node.args.args]
            lines += [f"{pad}def {node.name}(", *params, f"{pad}):"]
        else:
            lines.append(head)
        body = node.body
        if (
            body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            lines.append(f"{pad}    {user_text.docstring(body[0].value.value, indent + 4)}")
            body = body[1:]
        for statement in body:
            lines += format_statement(statement, indent + 4)
        return lines
    if isinstance(node, ast.For):
        lines = _wrap(node.iter, indent, f"{pad}for {_target(node.target)} in ", ":")
        for statement in node.body:
            lines += format_statement(statement, indent + 4)
        return lines
    if isinstance(node, ast.Assign):
        target = node.targets[0]
        if isinstance(target, ast.Tuple) and len(f"{pad}{_target(target)} = ") > WIDTH // 2:
            # Many names at once (a gradient's forward residuals): one per line.
            elements = [f"{pad}    {ast.unparse(e)}," for e in target.elts]
            return [f"{pad}(", *elements, *_wrap(node.value, indent, f"{pad}) = ")]
        return _wrap(node.value, indent, f"{pad}{_target(target)} = ")
    if isinstance(node, ast.Return) and node.value is not None:
        value = node.value
        if isinstance(value, ast.Tuple) and value.elts:  # `return a, b`, not `return (a, b)`
            text = f"{pad}return {_target(value)}"
            if len(text) <= WIDTH:
                return [text]
        return _wrap(value, indent, f"{pad}return ")
    if isinstance(node, ast.Expr):
        return _wrap(node.value, indent, pad)
    return [pad + line for line in ast.unparse(node).splitlines()]


def _target(node: ast.expr) -> str:
    """`a, (b, c)`: a tuple target without its outer parentheses."""
    if isinstance(node, ast.Tuple) and node.elts:
        return ", ".join(ast.unparse(e) for e in node.elts)
    return ast.unparse(node)


def _fits(lines: list[str]) -> bool:
    return all(len(line) <= WIDTH for line in lines)


def _wrap(node: ast.expr, indent: int, prefix: str, suffix: str = "") -> list[str]:
    """`prefix + node + suffix`, split over lines at the outermost brackets when too long."""
    text = prefix + ast.unparse(node) + suffix
    if len(text) <= WIDTH:
        return [text]
    inner = indent + 4
    pad, inner_pad = " " * indent, " " * (indent + 4)
    if isinstance(node, ast.Call):
        items = [ast.unparse(a) for a in node.args] + [
            (f"{k.arg}=" if k.arg else "**") + ast.unparse(k.value) for k in node.keywords
        ]
        head = prefix + ast.unparse(node.func) + "("
        one_line = inner_pad + ", ".join(items)
        if len(head) <= WIDTH and len(one_line) <= WIDTH:
            return [head, one_line, pad + ")" + suffix]
        lines = [head]
        # `jax.shard_map(f, ...)(x)`, `x.at[i, j].set(v)`: the callee itself split first
        if len(head) > WIDTH and isinstance(node.func, (ast.Call, ast.Attribute, ast.Subscript)):
            lines = _wrap(node.func, indent, prefix, "(")
            if len(lines[-1]) + len(", ".join(items)) + len(suffix) + 1 <= WIDTH:
                return lines[:-1] + [lines[-1] + ", ".join(items) + ")" + suffix]
        for arg in node.args:
            lines += _wrap(arg, inner, inner_pad, ",")
        for keyword in node.keywords:
            lines += _wrap(
                keyword.value, inner, inner_pad + (f"{keyword.arg}=" if keyword.arg else "**"), ","
            )
        return lines + [pad + ")" + suffix]
    brackets = {ast.List: "[]", ast.Tuple: "()", ast.Set: "{}"}
    if type(node) in brackets:
        opening, closing = brackets[type(node)]
        lines = [prefix + opening]
        for element in node.elts:  # type: ignore[attr-defined]
            lines += _wrap(element, inner, inner_pad, ",")
        return lines + [pad + closing + suffix]
    if isinstance(node, ast.Dict):
        lines = [prefix + "{"]
        for key, value in zip(node.keys, node.values):
            head = inner_pad + (f"{ast.unparse(key)}: " if key is not None else "**")
            lines += _wrap(value, inner, head, ",")
        return lines + [pad + "}" + suffix]
    if isinstance(node, ast.ListComp):
        lines = [prefix + "["]
        lines += _wrap(node.elt, inner, inner_pad)
        for generator in node.generators:
            lines.append(inner_pad + f"for {_target(generator.target)} in {ast.unparse(generator.iter)}")
        return lines + [pad + "]" + suffix]
    if isinstance(node, ast.Subscript) and _plain(node.value, node):
        index = ast.unparse(node)[len(ast.unparse(node.value)) :]
        lines = _wrap(node.value, indent, prefix, index + suffix)
        if not _fits(lines) and isinstance(node.slice, ast.Tuple):  # `x.at[` one index a line `]`
            lines = _wrap(node.value, indent, prefix, "[")
            for element in node.slice.elts:
                lines += _wrap(element, inner, inner_pad, ",")
            return lines + [pad + "]" + suffix]
        return lines
    if isinstance(node, ast.Attribute) and _plain(node.value, node):
        return _wrap(node.value, indent, prefix, "." + node.attr + suffix)
    if isinstance(node, ast.BinOp):
        left, operator, right = _split_binop(node)
        if len(left) <= 30 and right == ast.unparse(node.right):
            lines = _wrap(node.right, indent, f"{prefix}{left} {operator} ", suffix)
            if _fits(lines):
                return lines
        if len(right) <= 30 and left == ast.unparse(node.left):
            lines = _wrap(node.left, indent, prefix, f" {operator} {right}{suffix}")
            if _fits(lines):
                return lines
        return [prefix + "(", *_chain(node, inner, ""), pad + ")" + suffix]
    return [text]


def _chain(node: ast.expr, indent: int, head: str) -> list[str]:
    """`a * b - c` as one operand per line (`a`, `* b`, `- c`): the same tokens, in brackets."""
    if not isinstance(node, ast.BinOp) or len(" " * indent + head + ast.unparse(node)) <= WIDTH:
        return _wrap(node, indent, " " * indent + head)
    left, operator, right = _split_binop(node)
    lines = (
        _chain(node.left, indent, head)
        if left == ast.unparse(node.left)
        else _wrap_text(left, node.left, indent, head)
    )
    return lines + _wrap_text(right, node.right, indent, operator + " ")


def _plain(inner: ast.expr, outer: ast.expr) -> bool:
    """`inner` appears unparenthesized in `outer`'s source."""
    return ast.unparse(outer).startswith(ast.unparse(inner))


def _split_binop(node: ast.BinOp) -> tuple[str, str, str]:
    """The source of a binary operation's two sides, parenthesized as `ast.unparse` would."""
    marker = "__JAXSIDE__"
    with_left = ast.unparse(ast.BinOp(node.left, node.op, ast.Name(marker, ast.Load())))
    with_right = ast.unparse(ast.BinOp(ast.Name(marker, ast.Load()), node.op, node.right))
    left, operator = with_left[: with_left.rindex(marker)].rstrip().rsplit(" ", 1)
    right = with_right[with_right.index(marker) + len(marker) :].strip().split(" ", 1)[1]
    return left, operator, right


def _wrap_text(text: str, node: ast.expr, indent: int, head: str) -> list[str]:
    if text == ast.unparse(node):
        return _wrap(node, indent, " " * indent + head)
    if text == f"({ast.unparse(node)})":
        return _wrap(node, indent, " " * indent + head + "(", ")")
    return [" " * indent + head + text]


def double_quotes(text: str) -> str:
    """`params["wqkv"]` rather than `params['wqkv']`: plain single-quoted strings get double quotes."""
    tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    lines = text.splitlines(keepends=True)
    edits = []
    for token in tokens:
        if (
            token.type == tokenize.STRING
            and token.string.startswith("'")
            and not token.string.startswith("'''")
        ):
            body = token.string[1:-1]
            if '"' not in body and "\\" not in body and token.start[0] == token.end[0]:
                edits.append((token.start, token.end, f'"{body}"'))
    for (row, col), (_, end), replacement in reversed(edits):
        line = lines[row - 1]
        lines[row - 1] = line[:col] + replacement + line[end:]
    return "".join(lines)


def wrap_text(text: str, indent: int, width: int) -> list[str]:
    """A statement's text over several lines, the way the exported module lays it out."""
    code, _, shapes = text.partition("  # ")
    if indent + display_width(text) <= width:
        return [text]
    try:
        (node,) = ast.parse(code).body
    except (SyntaxError, ValueError):
        return [text]
    lines = double_quotes("\n".join(format_statement(node, indent))).split("\n")
    lines = [line[indent:] for line in lines]
    if shapes:
        lines[-1] += f"  # {shapes}"
    return lines


def display_width(text: str) -> int:
    """Columns `text` takes in a terminal or editor: wide (CJK) characters two, combining none."""
    return sum(
        0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1
        for c in text
    )
