"""JAX comments beside the lines of the original torch file, the file's code left untouched.

Each statement of the structured export (`render.program`) knows the torch expression it
came from; here those statements are gathered per torch statement (asttokens gives every
statement's span, multi-line ones included) and written as comments: beside the line when
short, below the statement as aligned comment lines when long. A line that ran many times
is shown once with its count; a function that ran is marked at its ``def`` line with the
signature of its JAX counterpart.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asttokens

WIDTH = 100
"""Comments go beside a line only if the line stays within this many characters."""


@dataclass
class Note:
    """What to say about one torch statement."""

    texts: list[str] = field(default_factory=list)
    """The JAX statements it produced, in order, without repeats."""
    count: int = 0
    """How many times it ran, over every call."""
    variants: int = 1
    """How many different JAX forms it had (calls with other shapes or dtypes)."""


class SourceMap:
    """The statements of a torch file, to find the one holding a source position."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.lines = source.splitlines(keepends=True)
        self.tokens = asttokens.ASTTokens(source, parse=True)
        self._statements = sorted(
            (node for node in ast.walk(self.tokens.tree) if isinstance(node, ast.stmt)),
            key=lambda node: (node.lineno, -(node.end_lineno or node.lineno)),
        )
        self._by_line: dict[int, list[ast.stmt]] = {}
        for node in self._statements:
            for line in range(node.lineno, self.header_end(node) + 1):
                self._by_line.setdefault(line, []).append(node)

    @staticmethod
    def header_end(node: ast.stmt) -> int:
        """Last line of a statement, or of a compound statement's header (`for ...:`)."""
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
            first = body[0]
            first_line = min([first.lineno, *(d.lineno for d in getattr(first, "decorator_list", ()))])
            return max(node.lineno, first_line - 1)
        return node.end_lineno or node.lineno

    def statement_at(self, line: int) -> ast.stmt | None:
        """The innermost statement whose own lines (a header, for compound ones) hold `line`."""
        candidates = self._by_line.get(line)
        return candidates[-1] if candidates else None

    def function_at(self, first_line: int) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The function whose code starts at `first_line` (its first decorator, or `def`)."""
        for node in self._statements:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                if start == first_line:
                    return node
        return None


def place(source_map: SourceMap, notes: dict[int, Note], *, width: int = WIDTH) -> str:
    """`source` with each note written at the statement starting at its key line."""
    lines = list(source_map.lines)
    below: dict[int, list[str]] = {}
    for first_line, note in sorted(notes.items()):
        node = source_map.statement_at(first_line)
        if node is None or not note.texts:
            continue
        end = source_map.header_end(node)
        comment = comment_lines(note)
        line = lines[first_line - 1].rstrip("\r\n")
        fits = len(comment) == 1 and len(line) + 2 + len(comment[0]) <= width
        if end == first_line and fits and not line.rstrip().endswith("\\"):
            lines[first_line - 1] = f"{line}  {comment[0]}{_newline(lines[first_line - 1])}"
        else:
            body = getattr(node, "body", None)
            inner = body[0] if isinstance(body, list) and body and isinstance(body[0], ast.stmt) else node
            indent = _indent(lines[inner.lineno - 1])  # below a header, comments sit with the body
            below.setdefault(end, []).extend(f"{indent}{text}" for text in comment)
    out = []
    for number, text in enumerate(lines, start=1):
        out.append(text)
        if number in below:
            newline = _newline(text) or "\n"
            if not text.endswith(("\n", "\r")):
                out[-1] = text + newline
            out.extend(comment + newline for comment in below[number])
    return "".join(out)


def comment_lines(note: Note) -> list[str]:
    suffix = f"  ×{note.count}" if note.count > 1 else ""
    if note.variants > 1:
        suffix += f"  ({note.variants} forms: calls differ in shapes or dtypes)"
    texts = [f"# {text}" for text in note.texts]
    texts[0] += suffix
    return texts


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _newline(line: str) -> str:
    return line[len(line.rstrip("\r\n")) :]


def same_code(original: str, annotated: str) -> bool:
    """Whether two sources parse to the same AST (comments are not in the AST)."""
    return ast.dump(ast.parse(original)) == ast.dump(ast.parse(annotated))


def notes_for(
    program: Any, trace: Any, path: str, source_map: SourceMap, *, shapes: bool = False
) -> dict[int, Note]:
    """Gather the program's statements that came from `path`, per torch statement.

    A def stands for every call it was used for, so its lines ran that many times more. In
    a def's body, statements come in execution order: a torch statement ran once more each
    time its statements start again after another statement's (a loop), or when it calls a
    def again from the same expression (a one-line loop over layers).
    """
    target = str(Path(path).resolve())
    merged: dict[int, Note] = {}
    for function in program.functions:
        calls = len(function.calls)
        local: dict[int, Note] = {}
        mark = _def_mark(function, source_map)
        if mark is not None:
            local[mark[0]] = Note([mark[1]], 1)
        anchor, spans = None, set()
        for statement in function.body:
            site = statement.site
            node = source_map.statement_at(site.line) if site is not None else None
            if node is None or str(Path(site.file).resolve()) != target:
                continue
            span = (site.line, site.col, site.end_line, site.end_col)
            note = local.setdefault(node.lineno, Note())
            if node.lineno != anchor or (statement.call is not None and span in spans):
                anchor, spans = node.lineno, set()
                note.count += 1
            spans.add(span)
            if note.count == 1:
                text = statement_text(statement, trace, shapes=shapes)
                if text not in note.texts:
                    note.texts.append(text)
        for line, note in local.items():
            if line in merged:  # the same torch line in another def: a call of another form
                merged[line].count += note.count * calls
                merged[line].variants += 1
            else:
                merged[line] = Note(note.texts, note.count * calls)
    return merged


def _def_mark(function: Any, source_map: SourceMap) -> tuple[int, str] | None:
    call = function.calls[0]
    node = source_map.function_at(call.line)
    if node is None:
        return None
    return node.lineno, f"jax: def {function.name}({', '.join(function.params)})"


def statement_text(statement: Any, trace: Any = None, *, shapes: bool = False) -> str:
    """One export statement as it reads in the module (`q = jnp.reshape(q, (1, 8, 4, 16))`)."""
    if statement.targets:
        target = ast.Tuple([ast.Name(t, ast.Store()) for t in statement.targets], ast.Store()) \
            if len(statement.targets) > 1 else ast.Name(statement.targets[0], ast.Store())
        text = ast.unparse(ast.Assign([target], statement.value, lineno=0))
    else:
        text = ast.unparse(statement.value)
    if shapes and trace is not None and statement.eqns:
        outvars = trace.jaxpr.jaxpr.eqns[statement.eqns[-1]].outvars
        text += "  : " + ", ".join(v.aval.str_short() for v in outvars)
    return text


def annotate_file(trace: Any, path: str, *, shapes: bool = False) -> str:
    """The torch file at `path`, with the JAX each line produced in `trace` beside it."""
    from render.program import lower

    source = Path(path).read_text(encoding="utf-8")
    source_map = SourceMap(source)
    annotated = place(source_map, notes_for(lower(trace), trace, path, source_map, shapes=shapes))
    if not same_code(source, annotated):
        raise AssertionError(f"annotating {path} changed its code; this is a jaxside bug")
    return annotated


