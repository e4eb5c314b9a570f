"""The side-by-side view: each torch line beside the JAX it made, linked both ways, in one offline page.

Rows are torch lines, so the columns stay aligned however long a JAX statement is; a JAX statement
is laid out as comments mode writes it (wrapped the way the exported module is). A torch statement
and its JAX share a colour band; hovering either lights the other, down to the torch sub-expression
a JAX statement came from. A call to another def links to that def (defs from other files and
JAX-only helpers are on the page too, folded) and back. Lines that did not run in the trace are
dimmed, and long runs of them (imports, config, `__init__`) are folded, so the first screen shows
where the JAX is.
"""

from __future__ import annotations

import ast
import html
from pathlib import Path
from typing import Any

# The data model and the comments printer's notes: the only render internals read here.
from jaxside.render.comments import Note, SourceMap, notes_for, statement_text
from jaxside.render.html import folds, highlight, tree
from jaxside.render.html.page import document
from jaxside.render.html.runs import Runs
from jaxside.render.html.statements import layouts
from jaxside.render.source import read_source

BANDS = 6
LEGEND = [
    ("made JAX", "var(--b0)", "a torch line and the JAX it made share a colour band"),
    ("ran, no JAX", "var(--bg)", "ran in the trace without making an array operation"),
    ("did not run", "var(--head)", "dimmed: never ran in the traced call (folded when long)"),
    ("×N", "var(--f)", "how many times it ran: repeated layers are shown once"),
]


def side_by_side(program: Any, path: str | None = None, *, shapes: bool = False) -> str:
    """The HTML view of `path` (by default the entry's file, or notebook cell) with the JAX each
    of its lines produced in the lowered `program` (a `render.ir.Program`)."""
    trace = program.trace
    return _View(program, shapes).render(Path(trace.root.file if path is None else path).resolve())


def _chars(text: str, byte_col: int) -> int:
    """A character column for a UTF-8 byte column (what CPython positions count)."""
    return len(text.encode()[:byte_col].decode(errors="ignore"))


class _View:
    def __init__(self, program: Any, shapes: bool) -> None:
        trace = program.trace
        self.trace, self.shapes = trace, shapes
        self.program = program
        self.names = {f.name for f in self.program.functions + self.program.helpers}
        self.sites: dict[str, list[Any]] = {}
        """JAX statement text -> the torch sites of the statements that read so."""
        for function in self.program.functions:
            for statement in function.body:
                if statement.site is not None:
                    text = statement_text(statement, trace, shapes=shapes)
                    self.sites.setdefault(text, []).append(statement.site)
        self.maps: dict[Path, SourceMap | None] = {}
        self.originals = {Path(c.file).resolve(): c.file for c in trace.root.walk()}
        """Each file by the name the code had: a notebook cell's is not a path (`<ipython-input-1-...>`)."""
        self.callers: dict[str, list[tuple[str, str]]] = {}
        self.sections = 0
        self.band = 0
        self.titled = False
        """Whether each file's section has its name above it (more than one file on the page)."""
        self.tree = tree.call_tree(trace, self.program)
        entry = [f for f in self.program.functions if any(c is trace.root for c in f.calls)]
        self.entry = entry[0].name if entry else None
        """The JAX name of the traced entry, marked on the page."""

    def source_map(self, file: str) -> SourceMap | None:
        path = Path(file).resolve()
        if path not in self.maps:
            try:
                # A notebook cell has no file: its text is under its own name in linecache.
                named = path if path.exists() else self.originals.get(path, file)
                self.maps[path] = SourceMap(read_source(named))
            except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
                self.maps[path] = None
        return self.maps[path]

    def definition(self, function: Any) -> tuple[Path, ast.FunctionDef | ast.AsyncFunctionDef] | None:
        """The file and def node of a function's torch source, when it has one."""
        first = function.calls[0]
        source_map = self.source_map(first.file) if first.line > 0 else None
        node = source_map.function_at(first.line) if source_map is not None else None
        return (Path(first.file).resolve(), node) if node is not None else None

    def render(self, path: Path) -> str:
        others: dict[Path, list[tuple[int, int, str]]] = {}
        jax_only = []
        for function in self.program.functions:
            found = self.definition(function)
            if found is None:
                jax_only.append((function, False))
            elif found[0] != path:
                node = found[1]
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                others.setdefault(found[0], []).append((start, node.end_lineno or node.lineno, function.name))
        jax_only += [(helper, True) for helper in self.program.helpers]
        # Files from the entry down: in the order the run reached their defs. The file asked for
        # comes first when it made JAX; a file that made none (an `example()` file) comes last.
        reached = {name: index for index, name in enumerate(f.name for f in tree.order(self.tree))}
        files: dict[Path, int] = {}
        for function in self.program.functions:
            file = Path(function.calls[0].file).resolve()
            files[file] = min(files.get(file, len(reached)), reached.get(function.name, len(reached)))
        self.titled = bool(others)
        main = self.file_section(path, None)
        body = [] if "<div class=st" not in main else [main]
        for file in sorted(others, key=lambda f: files.get(f, len(reached))):
            body.append(self.file_section(file, others[file]))
        if "<div class=st" not in main:
            body.append(main)
        if jax_only:
            body.append(self.jax_section(jax_only))
        text = "".join(body)
        present = {name for name in self.names if f"id=def-{name}" in text}
        text = tree.nav(self.tree, present, self.entry) + text
        for name in self.names:
            links = " ".join(f"<a href='#{row}'>{html.escape(label)}</a>"
                             for row, label in self.callers.get(name, []))
            text = text.replace(f"<!--callers {name}-->", f"<span class=call>called from {links}</span>"
                                if links else "")
        title = f"{path.name}: {self.trace.entry} in JAX"
        side = "torch" if self.trace.frontend == "torch" else "The source"
        intro = (f"{side} on the left, the JAX each line made on the right. Hover or click a line, a torch "
                 "expression or a JAX statement to see its partner; click a call to go to its def, and Back "
                 "to return. Keys: j / k step through the JAX statements, Enter shows the torch they came "
                 "from. A selection in one column copies that column's code.")
        unfold = "<button class=link id=unfold type=button>unfold all</button>"
        return document(title, intro, LEGEND, text, unfold)

    # -- a torch file ---------------------------------------------------------------------------------

    def file_section(self, path: Path, spans: list[tuple[int, int, str]] | None) -> str:
        """All of `path` (folded where nothing ran), or only the defs in `spans`, each folded."""
        source_map = self.source_map(str(path))
        if source_map is None:
            return ""
        section = f"f{self.sections}"
        self.sections += 1
        notes = notes_for(self.program, self.trace, str(path), source_map, shapes=self.shapes)
        runs = Runs(self.trace, str(path), source_map.tree)
        groups: dict[int, int] = {}
        for first in notes:
            node = source_map.statement_at(first)
            end = source_map.header_end(node) if node is not None else first
            groups.update((line, first) for line in range(first, end + 1))
        items, cuts = self._items(path, source_map, notes)
        torch = highlight.lines(source_map.source, dict(cuts))
        rows = {}
        bands: dict[int, int] = {}
        for number in range(1, len(source_map.lines) + 1):
            group = groups.get(number)
            if group is not None and group not in bands:
                bands[group] = self.band % BANDS
                self.band += 1
            state = "j" if group is not None else "run" if number in runs.ran else "dim"
            jax = self._jax_cell(section, number, notes.get(number), items.get(number, []), path)
            if self.entry is not None and f"id=def-{self.entry} " in jax:
                state += " entry"
            band = bands.get(group) if group is not None else None
            rows[number] = self._row(section, number, state, band, group,
                                     highlight.block(torch[number - 1]) if number <= len(torch) else "", jax)
        outline = folds.outline(source_map.tree)
        title = f"<h2>{html.escape(str(path.name))}</h2>" if self.titled else ""
        keep = self._context_headers(source_map.tree, runs)

        def blank(n: int) -> bool:
            return not source_map.lines[n - 1].strip()

        def foldable(n: int) -> bool:
            return n not in runs.ran and n not in groups and n not in keep and not blank(n)

        if spans is None:
            parts = self._folded(rows, 1, len(source_map.lines), foldable, blank, outline)
        else:
            # Only the defs that ran, open, each under a bar naming it; inside, what did not run folds.
            parts, covered = [], 0
            for start, end, name in sorted(set(spans)):
                if end <= covered:
                    continue  # a def inside one already shown
                start = max(start, covered + 1)
                covered = end
                label = f"{path.name}:{start}  {folds.describe(start, end, outline)}  →  {name}"
                parts.append(f"<tbody><tr class=bar><td colspan=3>{html.escape(label)}</td></tr></tbody>")
                parts += self._folded(rows, start, end, foldable, blank, outline)
        named = f"<table data-name='{html.escape(path.name, quote=True)}'>"  # a row's label: name:line
        return f"{title}{named}{self._head(path.name, self.trace.frontend)}{''.join(parts)}</table>"

    @staticmethod
    def _folded(rows: dict[int, str], first: int, last: int, foldable: Any, blank: Any,
                outline: list[tuple[int, int, str]]) -> list[str]:
        """Rows `first`..`last` in tbody groups, long runs of foldable lines folded."""
        parts, shown = [], first
        for start, end in folds.runs(last - first + 1, lambda k: foldable(k + first - 1),
                                     lambda k: blank(k + first - 1)):
            start, end = start + first - 1, end + first - 1
            if shown < start:
                parts.append("<tbody>" + "".join(rows[n] for n in range(shown, start)) + "</tbody>")
            label = f"lines {start}–{end}, not run in the trace: {folds.describe(start, end, outline)}"
            parts.append(folds.fold([rows[n] for n in range(start, end + 1)], label, 3))
            shown = end + 1
        if shown <= last:
            parts.append("<tbody>" + "".join(rows[n] for n in range(shown, last + 1)) + "</tbody>")
        return parts

    @staticmethod
    def _context_headers(tree: ast.Module, runs: Runs) -> set[int]:
        """Header lines of classes with code that ran: kept out of folds, as the context of what ran."""
        keep: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and any(
                line in runs.ran for line in range(node.lineno, (node.end_lineno or node.lineno) + 1)
            ):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                keep.update(range(first, node.body[0].lineno))
        return keep

    @staticmethod
    def _head(name: str, frontend: str) -> str:
        side = "torch" if frontend == "torch" else "source"
        return ("<colgroup><col style='width:3.2em'><col style='width:46%'><col></colgroup>"
                f"<thead><tr><th></th><th>{side} · {html.escape(name)}</th><th>JAX</th></tr></thead>")

    def _row(self, section: str, number: int, state: str, band: int | None, group: int | None,
             torch: str, jax: str) -> str:
        classes = " ".join(["r", state] + ([f"b{band}"] if band is not None else []))
        attrs = f"id={section}-L{number} class='{classes}' data-f={section} data-l={number}"
        if group is not None:
            attrs += f" data-g={section}:{group}"
        return f"<tr {attrs}><td class=n>{number}</td><td class=t>{torch}</td><td class=j>{jax}</td></tr>\n"

    def _items(self, path: Path, source_map: SourceMap, notes: dict[int, Note]
               ) -> tuple[dict[int, list[tuple[str, tuple[int, int, int, int] | None]]], dict[int, set[int]]]:
        """Per noted line its JAX statements with the torch span each came from (character
        columns), and per torch line the columns where such spans start or end."""
        items: dict[int, list[tuple[str, tuple[int, int, int, int] | None]]] = {}
        cuts: dict[int, set[int]] = {}
        text_of = source_map.lines
        for first, note in notes.items():
            for text in note.texts:
                site = self._site(text, path, source_map, first)
                if site is None:
                    items.setdefault(first, []).append((text, None))
                    continue
                span = (site.line, _chars(text_of[site.line - 1], site.col),
                        site.end_line, _chars(text_of[site.end_line - 1], site.end_col))
                items.setdefault(first, []).append((text, span))
                for line in range(span[0], span[2] + 1):
                    cuts.setdefault(line, set()).update(
                        ([span[1]] if line == span[0] else []) + ([span[3]] if line == span[2] else []))
        return items, cuts

    def _site(self, text: str, path: Path, source_map: SourceMap, first: int) -> Any:
        candidates = [s for s in self.sites.get(text, []) if Path(s.file).resolve() == path
                      and 0 < s.line <= s.end_line <= len(source_map.lines)]
        for site in candidates:
            node = source_map.statement_at(site.line)
            if node is not None and node.lineno == first:
                return site
        return candidates[0] if candidates else None

    def _jax_cell(
        self, section: str, number: int, note: Note | None, items: list[Any], file_path: Path
    ) -> str:
        if note is None or not note.texts:
            return ""
        row, file = f"{section}-L{number}", file_path.name
        parts = []
        for index, (text, span) in enumerate(items):
            # Badges are drawn from attributes (`.cnt::after`), so a copy of the code leaves them out.
            badge = ""
            if index == 0 and note.count > 1:
                badge += f"<span class=cnt title='ran {note.count} times' data-t='×{note.count}'></span>"
            if index == 0 and note.variants > 1:
                badge += (f"<span class=cnt title='calls differ in shapes or dtypes' "
                          f"data-t='{note.variants} forms'></span>")
            if text.startswith("jax: def "):
                name = text.removeprefix("jax: def ").split("(", 1)[0]
                signature = f"def {text.removeprefix('jax: def ')}:"
                tools = ("<button type=button class=tool data-copy=def title='copy this def as Python'>"
                         "copy def</button>")
                code = highlight.code(signature, None, f"{badge}{tools}<!--callers {name}-->")
                end = self._def_end(file_path, number)
                parts.append(f"<div class=st id=def-{name} tabindex=0 data-end={end}>{code}</div>")
                continue
            code = layouts(text, self._linker(row, f"{file}:{number}"), badge)
            site = f" data-site='{' '.join(map(str, span))}'" if span else ""
            parts.append(f"<div class=st tabindex=0{site}>{code}</div>")
        return "".join(parts)

    def _def_end(self, path: Path, line: int) -> int:
        """The last line of the torch def whose JAX def is noted at `line`: where its statements end."""
        source_map = self.source_map(str(path))
        if source_map is None:
            return line
        node = source_map.function_at(line) or source_map.statement_at(line)
        return (node.end_lineno or line) if node is not None else line

    def _linker(self, row: str, label: str) -> highlight.Link:
        def link(name: str) -> str | None:
            if name not in self.names:
                return None
            if not row:
                return f"<a class=fn href='#def-{name}'>{name}</a>"
            callers = self.callers.setdefault(name, [])
            if (row, label) not in callers:
                callers.append((row, label))
            return f"<a class=fn href='#def-{name}'>{name}</a>"
        return link

    # -- defs with no torch source: JAX-only functions and the export's helpers ----------------------------

    def jax_section(self, functions: list[tuple[Any, bool]]) -> str:
        section = f"x{self.sections}"
        self.sections += 1
        parts = []
        link = self._linker("", "")
        for function, helper in functions:
            node = function.node()
            name = function.name
            header = ast.FunctionDef(node.name, node.args, [], [], None, lineno=0, type_params=[])
            text = ast.unparse(header).strip()
            signature = highlight.code(text.removesuffix(":").rstrip() + ":", link,
                                       f"<span id=def-{name}></span><!--callers {name}-->")
            cells = [f"<div class=st tabindex=0>{signature}</div>"]
            cells += [f"<div class=st tabindex=0>{layouts(ast.unparse(statement), link)}</div>"
                      for statement in node.body]
            rows = [f"<tr id={section}-{name}-L{number} class='r j' data-f={section} data-l={number} "
                    f"data-label='{name}:{number}'><td class=n></td><td class=j colspan=2>{cell}</td></tr>\n"
                    for number, cell in enumerate(cells, start=1)]
            what = "a helper of the export" if helper else "no torch source"
            parts.append(folds.fold(rows, f"def {name}  ({what})", 3, closed=helper))
        head = "<colgroup><col style='width:3.2em'><col></colgroup>"
        return f"<h2>JAX-only defs: no torch source</h2><table>{head}{''.join(parts)}</table>"
