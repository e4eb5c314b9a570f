"""The one way from a traced `Site` (or a line) to the torch source's `ast` nodes.

A `Site` and `ast` nodes both give positions as (line, column, end line, end column) with
columns in UTF-8 bytes, so one containment rule answers every question: which loop holds an
expression, which comprehension an expression has, which node an expression is, which def
starts at a line.  Files are read and parsed once per version.
"""

from __future__ import annotations

import ast
import functools
import io
import linecache
import os
import tokenize
from collections.abc import Iterator
from pathlib import Path
from typing import Any

Span = tuple[int, int, int, int]
"""(line, column, end line, end column), columns in UTF-8 bytes as `ast` and code positions give them."""

LOOPS = (ast.For, ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.DictComp)
COMPREHENSIONS = (ast.ListComp, ast.GeneratorExp)


def read(file: str) -> tuple[str, ast.Module] | None:
    """The text and tree of a source file, or None if it cannot be read or parsed (parsed once
    per version of the file, or of a notebook cell's text)."""
    try:
        stat = os.stat(file)
    except (OSError, ValueError):
        lines = linecache.getlines(file)
        return _parse_text("".join(lines)) if lines else None
    return _parse(file, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=64)
def _parse_text(text: str) -> tuple[str, ast.Module] | None:
    try:
        return text, ast.parse(text)
    except (SyntaxError, ValueError):
        return None


@functools.lru_cache(maxsize=256)
def _parse(file: str, mtime: int, size: int) -> tuple[str, ast.Module] | None:
    try:
        text = read_source(file)
        return text, ast.parse(text)
    except (OSError, SyntaxError, ValueError):
        return None


def read_source(path: str | Path) -> str:
    """A Python file's text as Python reads it (its coding cookie, a UTF-8 BOM dropped), with
    its newlines as they are (CRLF stays CRLF). Code with no file on disk, such as a notebook
    cell (`<ipython-input-3-...>`), is read from `linecache`, where IPython keeps it."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        lines = linecache.getlines(str(path))
        if not lines:
            raise
        return "".join(lines)
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding)


def python_lines(text: str, *, keepends: bool = False) -> list[str]:
    """`text` in lines as Python counts them: at ``\\n``, ``\\r\\n`` and ``\\r`` only. (`str.splitlines`
    also splits at form feeds, ``\\x1c``-``\\x1e``, ``\\x85``, U+2028 and U+2029, which Python leaves
    inside a line: every line number after one would be off.)"""
    lines = io.StringIO(text, newline="").readlines()
    if keepends:
        return lines
    return [line[:-2] if line.endswith("\r\n") else line.rstrip("\r\n") for line in lines]


def tree(file: str) -> ast.Module | None:
    parsed = read(file)
    return parsed[1] if parsed else None


def site_span(site: Any) -> Span:
    return (site.line, site.col, site.end_line, site.end_col)


def node_span(node: Any) -> Span:
    return (node.lineno, node.col_offset, node.end_lineno or 0, node.end_col_offset or 0)


def contains(outer: Span, inner: Span) -> bool:
    """Whether `inner` lies within `outer` (equal spans included)."""
    return outer[:2] <= inner[:2] and inner[2:] <= outer[2:]


def site_contains(outer: Any, inner: Any) -> bool:
    """Whether the expression at site `inner` is part of the one at site `outer` (same file)."""
    return outer.file == inner.file and contains(site_span(outer), site_span(inner))


def function_at(module: ast.AST | None, line: int) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The def whose code starts at `line` (its first decorator, or `def` itself)."""
    for node in ast.walk(module) if module is not None else ():
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
            node.lineno == line or any(d.lineno == line for d in node.decorator_list)
        ):
            return node
    return None


def parameters(file: str, line: int) -> list[str]:
    """The parameter names (without `self`, `cls`) of the def starting at `line` of `file`."""
    node = function_at(tree(file), line)
    if node is None:
        return []
    names = [a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs]
    return [n for n in names if n not in ("self", "cls")]


def around(site: Any, kinds: tuple[type, ...]) -> ast.AST | None:
    """The innermost node of `kinds` in the source whose span holds `site`'s."""
    best: ast.AST | None = None
    for node in _nodes(site, kinds):
        if contains(node_span(node), site_span(site)) and (
            best is None or node_span(node)[:2] >= node_span(best)[:2]
        ):
            best = node
    return best


def assigned_name(site: Any) -> str | None:
    """The name a statement binds the expression at `site` to, whole: `outputs` for
    `outputs: BaseModelOutput = self.model(x)` or `h = self.block(h)`; None for anything else."""
    node = around(site, (ast.Assign, ast.AnnAssign))
    if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
        return None
    if node_span(node.value) != site_span(site):
        return None
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return targets[0].id if len(targets) == 1 and isinstance(targets[0], ast.Name) else None


def loop_names(loop: ast.AST | None) -> tuple[str | None, str | None]:
    """(index, element): the names torch's loop binds, `for i in range(n)` -> (`i`, None),
    `for layer in self.layers` -> (None, `layer`), `for i, block in enumerate(self.h)` -> (`i`, `block`)."""
    if isinstance(loop, ast.For):
        target, iterable = loop.target, loop.iter
    elif isinstance(loop, (ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.DictComp)):
        target, iterable = loop.generators[0].target, loop.generators[0].iter
    else:
        return None, None
    func = iterable.func if isinstance(iterable, ast.Call) else None
    called = func.id if isinstance(func, ast.Name) else None
    if called == "enumerate" and isinstance(target, ast.Tuple) and len(target.elts) == 2:
        index, element = (e.id if isinstance(e, ast.Name) else None for e in target.elts)
        return index, element
    if not isinstance(target, ast.Name):
        return None, None
    return (target.id, None) if called == "range" else (None, target.id)


def unpacked_names(loop: ast.AST | None) -> list[str]:
    """`for attn, ff in self.layers` -> ["attn", "ff"]: the names torch unpacks each element of one
    iterable into (not `zip`'s or `enumerate`'s tuples); [] for any other loop."""
    if not isinstance(loop, ast.For) or not isinstance(loop.target, ast.Tuple):
        return []
    if isinstance(loop.iter, ast.Call) and isinstance(loop.iter.func, ast.Name):
        if loop.iter.func.id in ("zip", "enumerate"):
            return []
    names = [e.id for e in loop.target.elts if isinstance(e, ast.Name)]
    return names if len(names) == len(loop.target.elts) else []


def zipped_names(loop: ast.AST | None) -> dict[str, str]:
    """`for block, gate in zip(self.blocks, self.gates)` -> {"blocks": "block", "gates": "gate"}."""
    if not isinstance(loop, ast.For) or not isinstance(loop.target, ast.Tuple):
        return {}
    iterable = loop.iter
    func = iterable.func if isinstance(iterable, ast.Call) else None
    if not (isinstance(iterable, ast.Call) and isinstance(func, ast.Name) and func.id == "zip"):
        return {}
    return {
        argument.attr: target.id
        for argument, target in zip(iterable.args, loop.target.elts)
        if isinstance(argument, ast.Attribute) and isinstance(target, ast.Name)
    }


def assigned_into(item: Any, part: Any) -> bool:
    """Whether `item` is the item a torch statement assigns into (`d[:, 1:3]` of `d[:, 1:3] =
    h[:, :2]`) and `part` is part of the value it assigns (`h[:, :2]`): one line of torch."""
    if item is None or part is None or item.file != part.file:
        return False
    node = around(item, (ast.Assign,))
    if not isinstance(node, ast.Assign):
        return False
    into = any(isinstance(t, ast.Subscript) and contains(node_span(t), site_span(item)) for t in node.targets)
    return into and contains(node_span(node.value), site_span(part))


def dict_key(site: Any) -> str | None:
    """The key a dict display gives the expression at `site` (`full_attention` of
    `{"full_attention": create_causal_mask(**mask_kwargs), ...}`), if it is a plain name."""
    found = expression(site) if site is not None else None
    if found is None:
        return None
    node, parents, _ = found
    parent = parents.get(node)
    if not isinstance(parent, ast.Dict):
        return None
    keys = [k for k, v in zip(parent.keys, parent.values) if v is node]
    key = keys[0] if keys else None
    text = key.value if isinstance(key, ast.Constant) else None
    return text if isinstance(text, str) and text.isidentifier() else None


def within(site: Any, kinds: tuple[type, ...]) -> ast.AST | None:
    """The first node of `kinds` (in `ast.walk` order) whose span lies within `site`'s."""
    return next((n for n in _nodes(site, kinds) if contains(site_span(site), node_span(n))), None)


def expression(site: Any) -> tuple[ast.expr, dict[ast.AST, ast.AST], str] | None:
    """The expression node at exactly `site`'s span, every node's parent, and the file's text."""
    parsed = read(site.file) if site is not None else None
    if parsed is None:
        return None
    text, module = parsed
    parents, spans = _indexed(module)
    found = spans.get(site_span(site))
    return (found[-1], parents, text) if found else None


_INDEXES: dict[int, tuple[ast.Module, dict[ast.AST, ast.AST], dict[Any, list[ast.expr]]]] = {}


def _indexed(module: ast.Module) -> tuple[dict[ast.AST, ast.AST], dict[Any, list[ast.expr]]]:
    """Every node's parent in a parsed file, and its expressions by span (in `ast.walk` order):
    made once per tree, which `read` keeps per version of the file."""
    hit = _INDEXES.get(id(module))
    if hit is None or hit[0] is not module:
        if len(_INDEXES) >= 64:
            _INDEXES.clear()
        parents = {child: node for node in ast.walk(module) for child in ast.iter_child_nodes(node)}
        spans: dict[Any, list[ast.expr]] = {}
        for node in ast.walk(module):
            if isinstance(node, ast.expr):
                spans.setdefault(node_span(node), []).append(node)
        hit = _INDEXES[id(module)] = (module, parents, spans)
    return hit[1], hit[2]


def _nodes(site: Any, kinds: tuple[type, ...]) -> Iterator[ast.AST]:
    module = tree(site.file) if site is not None else None
    for node in ast.walk(module) if module is not None else ():
        if isinstance(node, kinds):
            yield node
