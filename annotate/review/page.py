"""The review as a page: each port line beside the torch line it was paired with, and the first divergence.

Rows follow the port file, every port line once; beside a port line sit the torch lines whose values
it computed (a torch line paired with several port lines sits at the first, the others link to it).
Torch lines whose values the port never computed follow the row of the torch line before them.
Long runs of port lines paired with nothing (imports, docstrings) are folded.
"""

from __future__ import annotations

import ast
import html
import linecache
from pathlib import Path
from typing import Any

from jaxside.annotate.options import ReviewOptions
from jaxside.annotate.review.report import agreed_until, error_text, labels, rows, side_files, site_of
from jaxside.render.html import folds, highlight
from jaxside.render.html.page import document
from jaxside.render.source import python_lines

LEGEND = [
    ("paired, equal", "var(--ok)", "the port computed these values within --rtol/--atol"),
    ("paired, differs", "var(--bad)", "the port's counterpart differs"),
    ("first divergence", "var(--first)", "the first torch value whose counterpart differs"),
    ("no counterpart", "var(--none)", "torch values the port never computed"),
]


Line = tuple[str, int]
Row = tuple[Line | None, list[Line]]
"""A port line (None for a row of torch lines the port never computed) and the torch lines beside it."""


def _aligned(table: dict[Line, tuple[set[Line], Any, bool, bool]], port_lines: list[Line]) -> list[Row]:
    """Rows in the order of `port_lines`, each torch line (`table` is in torch order) once."""
    by_port: dict[Line, list[Line]] = {}
    for torch_line, (lines, *_) in table.items():
        for p in lines:
            by_port.setdefault(p, []).append(torch_line)
    order = {t: i for i, t in enumerate(table)}
    shown: set[Line] = set()
    out: list[Row] = []
    for p in port_lines:
        new = [t for t in sorted(by_port.get(p, []), key=order.__getitem__) if t not in shown]
        out.append((p, new))
        shown.update(new)
    # Torch lines without a counterpart: after the row of the nearest paired torch line before them.
    for torch_line in [t for t in table if t not in shown]:
        at = max((i for i, (_, ts) in enumerate(out) if any(order[t] < order[torch_line] for t in ts)),
                 default=-1)
        out.insert(at + 1, (None, [torch_line]))
    return out


def _error_cell(err: float | None, seen: bool, why: str | None) -> str:
    """A torch line's error as the report writes it, `unmatched (no cache)` with a known reason."""
    if seen and err is not None:
        return error_text(err)
    return "unmatched" + (f" ({why})" if why and not seen else "")


def _read(file: str) -> str:
    if file.startswith("<"):  # a notebook cell: IPython keeps its text in linecache
        return "".join(linecache.getlines(file))
    try:
        return Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def html_page(options: ReviewOptions, torch: Any, port: Any, alignment: Any,
              reasons: dict[Line, str] | None = None) -> str:
    """The page; `reasons`: why a torch line has no port value (`no cache`), written beside it as
    the report does."""
    torch_path, port_path = Path(options.source.file).resolve(), Path(options.port).resolve()
    sited = {site.file for site in port.trace.eqn_sites if site is not None}
    port_files = [f for f in side_files(port, options.port) if f in sited] or [str(port_path)]
    torch_label = labels(side_files(torch, options.source.file))
    port_label = labels(side_files(port, options.port))
    table = rows(torch, port, alignment)
    texts = {f: _read(f) for f in {*port_files, *(f for f, _ in table)}}
    sources = {f: highlight.lines(text) for f, text in texts.items()}
    first = alignment.first
    torch_first = site_of(torch, first.torch_var) if first else None
    port_first = site_of(port, first.port_var) if first else None
    ids = {f: "p" if k == 0 else f"p{k}" for k, f in enumerate(port_files)}
    aligned = _aligned(table, [(f, n) for f in port_files for n in range(1, len(sources[f]) + 1)])

    def number(file: str, line: int) -> str:
        return str(line) if file == str(torch_path) else f"{torch_label.get(file, Path(file).name)}:{line}"

    def ident(p: Line | None, torch_here: list[Line]) -> str:
        return f"{ids[p[0]]}-L{p[1]}" if p is not None else "t-" + number(*torch_here[0]).replace(":", "-L")

    home = {t: ident(p, ts) for p, ts in aligned for t in ts}
    sections: dict[str, list[tuple[int | None, str]]] = {f: [] for f in port_files}
    file = port_files[0]
    for p, torch_here in aligned:
        file = p[0] if p is not None else file
        earlier = [t for t in table if p in table[t][0] and t not in torch_here]
        statuses, errors = [], []
        for t in torch_here:
            lines, err, ok, seen = table[t]
            statuses.append(("ok" if ok else "bad") if seen else "none")
            errors.append(_error_cell(err, seen, (reasons or {}).get(t)))
        status = "bad" if "bad" in statuses else "ok" if "ok" in statuses else "none" if statuses else ""
        if torch_first is not None and (torch_first.file, torch_first.line) in torch_here and (
                p is None or port_first is None or (port_first.file, port_first.line) == p):
            status += " first"
        torch_html = "".join(highlight.block(sources[f][n - 1]) if n <= len(sources[f]) else ""
                             for f, n in torch_here)
        torch_html += "".join(f"<span class='ln lab'><a class=call href='#{home[t]}'>= torch line "
                              f"{html.escape(number(*t))}</a></span>" for t in earlier)
        port_html = highlight.block(sources[p[0]][p[1] - 1]) if p is not None else ""
        numbers = html.escape("\n".join(number(*t) for t in torch_here))
        sections[file].append((p[1] if p is not None else None,
                               f"<tr id={ident(p, torch_here)} class='r {status}' data-l={p[1] if p else ''}>"
                               f"<td class=n>{numbers}</td><td class=t>{torch_html}</td>"
                               f"<td class=e>{chr(10).join(errors)}</td><td class=n>{p[1] if p else ''}</td>"
                               f"<td class=q>{port_html}</td></tr>\n"))
    if first is not None and torch_first is not None:
        key = (torch_first.file, torch_first.line)
        target = home.get(key, ident(None, [key]))
        line_error = table.get(key, (None, None))[1]
        worst = (f" (the line's worst: {error_text(line_error)})" if line_error is not None
                 and error_text(line_error) != error_text(first.error) else "")
        port_where = (f"{port_label.get(port_first.file, Path(port_first.file).name)}:{port_first.line}"
                      if port_first is not None else "?")
        banner = (f"<div class=banner id=first>First divergence: torch <a href='#{target}'>"
                  f"{html.escape(torch_label.get(torch_first.file, torch_path.name))}:{torch_first.line}</a> "
                  f"<code>{html.escape(' '.join((torch_first.text or '').split()))}</code> against port "
                  f"{html.escape(port_where)}, max error {error_text(first.error)}{worst}"
                  f"{_agreed(torch, port, alignment, torch_label, port_label, ids)}</div>")
    else:
        banner = "<div class='banner good' id=first>No divergence: every paired value agrees.</div>"
    shown = ", ".join(port_label.get(f, Path(f).name) for f in port_files)
    intro = (f"{html.escape(shown)} in their own order on the right; beside each line, the torch lines "
             f"whose values it computed, and the max error between them.")
    head = ("<colgroup><col style='width:3.2em'><col style='width:44%'><col style='width:7em'>"
            "<col style='width:3.2em'><col></colgroup><thead><tr><th></th><th>torch · "
            f"{html.escape(torch_path.name)}</th><th>max error</th><th></th><th>port · "
            f"{html.escape(port_path.name)}</th></tr></thead>")
    parts = []
    for f in port_files:
        if len(port_files) > 1:
            parts.append(f"<tbody><tr class=file><th colspan=5>{html.escape(port_label.get(f, f))}</th></tr>"
                         "</tbody>")
        parts.append(_folded(sections[f], texts[f]))
    body = f"{banner}<table>{head}{''.join(parts)}</table>"
    return document(f"review: {torch_path.name} against {port_path.name}", intro, LEGEND, body)


def _agreed(torch: Any, port: Any, alignment: Any, torch_label: dict[str, str], port_label: dict[str, str],
            ids: dict[str, str]) -> str:
    """The report's line after the first divergence (the port's last equal value), in its words,
    the port line it names linked to its row."""
    parts = []
    for text, site in agreed_until(torch, port, alignment, torch_label, port_label):
        shown = html.escape(text)
        parts.append(f"<a href='#{ids[site.file]}-L{site.line}'>{shown}</a>"
                     if site is not None and site.file in ids else shown)
    return f"<div class=after>{''.join(parts)}</div>" if parts else ""


def _folded(body_rows: list[tuple[int | None, str]], source: str) -> str:
    """The rows in tbody groups, long runs of port lines paired with nothing folded."""
    lines = python_lines(source)
    if not lines:
        return "<tbody>" + "".join(row for _, row in body_rows) + "</tbody>"
    index = {p: i for i, (p, _) in enumerate(body_rows) if p is not None}
    plain = {p for p, row in body_rows if p is not None and "class='r '" in row}
    outline = folds.outline(ast.parse(source))
    parts, position = [], 0
    for start, end in folds.runs(len(lines), lambda n: n in plain, lambda n: not lines[n - 1].strip()):
        first, last = index[start], index[end]
        if last - first != end - start:
            continue  # torch rows sit in between: not one run of port lines
        parts.append("<tbody>" + "".join(row for _, row in body_rows[position:first]) + "</tbody>")
        label = f"port lines {start}–{end}, nothing paired: {folds.describe(start, end, outline)}"
        parts.append(folds.fold([row for _, row in body_rows[first : last + 1]], label, 5))
        position = last + 1
    parts.append("<tbody>" + "".join(row for _, row in body_rows[position:]) + "</tbody>")
    return "".join(parts)
