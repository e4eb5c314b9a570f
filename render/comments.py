"""JAX comments beside the lines of the original torch file, the file's code left untouched.

Each statement of the structured export (`render.lower`) knows the torch expression it
came from; here those statements are gathered per torch statement (`ast` gives every
statement's span, multi-line ones included) and written as comments: beside the line when
short, below the statement as aligned comment lines when long. A line that ran many times
is shown once with its count; a function that ran is marked at its ``def`` line with the
signature of its JAX counterpart.
"""

from __future__ import annotations

import ast
import bisect
import io
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jaxside.render import source as torch_source
from jaxside.render.ir import Loop, Program, Statement
from jaxside.render.layout import WIDTH, display_width, double_quotes, wrap_text
from jaxside.render.text import CommentsChangeCode


@dataclass
class Note:
    """What to say about one torch statement."""

    texts: list[str] = field(default_factory=list)
    """The JAX statements it produced, in order, without repeats."""
    count: int = 0
    """How many times it ran, over every call."""
    variants: int = 1
    """How many variants it had: defs of one torch function for calls with other shapes or dtypes
    (the comment says "forms")."""
    calls: int | None = None
    """How many calls of its def ran it, where not every one did (a statement under a flag)."""


class SourceMap:
    """The statements of a torch file, to find the one holding a source position."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.lines = torch_source.python_lines(source, keepends=True)
        self.tree = ast.parse(source)
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
        self.commented = {t.start[0] for t in tokens if t.type == tokenize.COMMENT}
        """Lines that already end with a comment of their own."""
        self.open_ends = {t.start[0] for t in tokens if t.type in (tokenize.NEWLINE, tokenize.NL)}
        """Lines whose end a comment may follow (not inside a string, not continued by `\\`)."""
        self._logical_ends = sorted(t.start[0] for t in tokens if t.type == tokenize.NEWLINE)
        self._statements = sorted(
            (node for node in ast.walk(self.tree) if isinstance(node, ast.stmt)),
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
            return max(node.lineno, int(first_line) - 1)
        return node.end_lineno or node.lineno

    def logical_end(self, line: int) -> int:
        """The line where the logical line holding `line`'s end ends (`x = 1; s = \"\"\"...`), below
        which comment lines cannot land inside a string."""
        at = bisect.bisect_left(self._logical_ends, line)
        return self._logical_ends[at] if at < len(self._logical_ends) else line

    def statement_at(self, line: int) -> ast.stmt | None:
        """The innermost statement whose own lines (a header, for compound ones) hold `line`."""
        candidates = self._by_line.get(line)
        return candidates[-1] if candidates else None

    def function_at(self, first_line: int) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The function whose code starts at `first_line` (its first decorator, or `def`)."""
        return torch_source.function_at(self.tree, first_line)


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
        fits = len(comment) == 1 and display_width(line) + 2 + display_width(comment[0]) <= width
        beside = fits and first_line not in source_map.commented and first_line in source_map.open_ends
        if end == first_line and beside:
            lines[first_line - 1] = f"{line}  {comment[0]}{_newline(lines[first_line - 1])}"
        else:
            body = getattr(node, "body", None)
            inner = body[0] if isinstance(body, list) and body and isinstance(body[0], ast.stmt) else node
            indent = _indent(lines[inner.lineno - 1])  # below a header, comments sit with the body
            below.setdefault(source_map.logical_end(end), []).extend(comment_lines(note, indent, width))
    out = []
    for number, text in enumerate(lines, start=1):
        out.append(text)
        if number in below:
            newline = _newline(text) or "\n"
            if not text.endswith(("\n", "\r")):
                out[-1] = text + newline
            out.extend(comment + newline for comment in below[number])
    return "".join(out)


def comment_lines(note: Note, indent: str = "", width: int | None = None) -> list[str]:
    """The note as comment lines; with a `width`, long statements are wrapped to fit it."""
    suffix = f"  ×{note.count}" if note.count > 1 else ""
    if note.variants > 1:
        suffix += f"  ({note.variants} forms: calls differ in shapes, dtypes or what they call)"
    lines: list[str] = []
    for text in note.texts:
        # A statement of several lines (an `if` with its body) is a comment line each: every
        # line break any reader knows (`str.splitlines`, more than Python's own) starts a `# `.
        wrapped = [piece for line in (wrap_text(text, len(indent) + 2, width) if width else [text])
                   for piece in line.splitlines() or [""]]
        if not lines:
            wrapped[-1] += suffix  # the count closes the first statement, however long it is
        lines += [f"{indent}# {line}" for line in wrapped]
    return lines


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

    A def stands for every call it was used for, so its lines ran that many times more; the
    same torch line in two defs is one torch function with two variants (shapes, dtypes).
    """
    target = str(Path(path).resolve())
    merged: dict[int, Note] = {}
    for function in program.functions:
        first = function.calls[0]
        definition = source_map.function_at(first.line) if _same_file(first.file, target) else None
        if definition is None:
            continue
        notes = _function_notes(function, trace, source_map, definition, target, shapes)
        for line, note in notes.items():
            calls = len(function.calls) if note.calls is None else note.calls
            if line in merged:
                merged[line].count += note.count * calls
                merged[line].variants += 1
            else:
                merged[line] = Note(note.texts, note.count * calls)
    return merged


def _function_notes(
    function: Any, trace: Any, source_map: SourceMap, definition: ast.FunctionDef | ast.AsyncFunctionDef,
    target: str, shapes: bool,
) -> dict[int, Note]:
    """Notes for one call of a def, keyed by the first line of their torch statements.

    Statements come in execution order: a torch statement ran once more each time its
    statements start again after another statement's (a loop), or when it calls a def again
    from the same expression (a one-line loop over layers). A statement whose torch
    expression lies outside this function (a view sliced in the callee, hoisted into the
    caller by the export) is shown with the next statement of this function.
    """
    first_line, last_line = definition.lineno, definition.end_lineno or definition.lineno
    keywords = [k.name if k.default is None else f"{k.name}={ast.unparse(k.default)}"
                for k in function.keywords]
    keywords = ["*", *keywords] if keywords else []
    signature = f"jax: def {function.name}({', '.join(function.params + keywords)})"
    notes: dict[int, Note] = {definition.lineno: Note([signature], 1)}
    anchor: int | None = None
    spans: set[tuple[int, int, int, int]] = set()
    first_run, pending = True, []
    for statement in function.body:
        rolled = statement.calls if isinstance(statement, Loop) else None
        if not statement.eqns and statement.call is None and not rolled:
            continue  # bookkeeping of the export (a list to collect loop results)
        site = statement.site
        node = source_map.statement_at(site.line) if site is not None else None
        if node is None or site is None or not first_line < node.lineno <= last_line:
            pending.append(statement)
            continue
        if not _same_file(site.file, target):
            pending.append(statement)
            continue
        span = (site.line, site.col, site.end_line, site.end_col)
        note = notes.setdefault(node.lineno, Note())
        if node.lineno != anchor or (statement.call is not None and span in spans):
            anchor, spans = node.lineno, set()
            runs = len(rolled) if rolled else 1
            note.count += runs
            first_run = note.count == runs
        spans.add(span)
        if statement.when is not None:
            note.calls = function.running(statement.when)
        if first_run:
            for shown in [*pending, statement]:
                text = statement_text(shown, trace, shapes=shapes)
                if text not in note.texts:
                    note.texts.append(text)
        pending = []
    returned = return_note(function, definition)
    if returned is not None:
        node, text = returned
        note = notes.setdefault(node.lineno, Note([], 1))
        note.texts += [statement_text(s, trace, shapes=shapes) for s in pending] + [text]
    return notes


def _same_file(file: str, target: str) -> bool:
    return str(Path(file).resolve()) == target


def return_note(function: Any, definition: ast.AST) -> tuple[ast.Return, str] | None:
    """`return ...` of the def, and the torch function's (last) return statement it goes with."""
    if function.returns is None:
        return None
    returns = [n for n in _own_statements(definition) if isinstance(n, ast.Return)]
    if not returns:
        return None
    return returns[-1], double_quotes(ast.unparse(ast.Return(function.returns)))


def _own_statements(function: ast.AST) -> list[ast.stmt]:
    """Statements of a function, not of the functions or classes nested in it."""
    found, stack = [], list(getattr(function, "body", []))
    while stack:
        node = stack.pop()
        found.append(node)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stack.extend(child for child in ast.iter_child_nodes(node) if isinstance(child, ast.stmt))
    return found


def statement_text(statement: Any, trace: Any = None, *, shapes: bool = False) -> str:
    """One export statement as it reads in the module (`q = jnp.reshape(q, (1, 8, 4, 16))`);
    a loop over calls reads as the call in it."""
    node = Statement.node(statement) if isinstance(statement, Loop) else statement.node()
    text = double_quotes(ast.unparse(node))
    if shapes and trace is not None and statement.eqns:
        outvars = trace.jaxpr.jaxpr.eqns[statement.eqns[-1]].outvars
        text += "  # " + ", ".join(v.aval.str_short(short_dtypes=True) for v in outvars)
    return text


def annotate_file(program: Program, path: str | None = None, *, shapes: bool = False) -> str:
    """The torch file at `path` (by default the entry's: a file, or a notebook cell), with the
    JAX each line produced in the lowered `program` beside it (the caller encodes it back in the
    file's encoding)."""
    trace = program.trace
    path = trace.root.file if path is None else path
    source = torch_source.read_source(path)
    source_map = SourceMap(source)
    annotated = place(source_map, notes_for(program, trace, path, source_map, shapes=shapes))
    check_same_code(source, annotated, str(path))
    return annotated


def check_same_code(original: str, annotated: str, path: str) -> None:
    """Refuse `annotated` (raise `CommentsChangeCode` naming the first line that differs) unless
    it parses to `original`'s AST: the last gate before anything is written or printed."""
    try:
        if same_code(original, annotated):
            return
        detail, line = "the code would change", _first_difference(original, annotated)
    except SyntaxError as error:
        detail, line = f"a comment would break the code ({error.msg})", error.lineno or 1
    raise CommentsChangeCode(path, line, detail)


def _first_difference(original: str, annotated: str) -> int:
    """The first line of `annotated` whose code differs from `original` (comments aside)."""
    mine = [(t.type, t.string, t.start[0]) for t in _code_tokens(annotated)]
    theirs = [(t.type, t.string) for t in _code_tokens(original)]
    for (kind, text, line), other in zip(mine, theirs, strict=False):
        if (kind, text) != other:
            return line
    return 1


def _code_tokens(source: str) -> list[tokenize.TokenInfo]:
    skip = (tokenize.COMMENT, tokenize.NL)
    try:
        return [t for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type not in skip]
    except (tokenize.TokenError, SyntaxError):
        return []


