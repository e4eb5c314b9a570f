"""The review as a page: each port line beside the torch line it was paired with, and the first divergence.

Rows follow the port file, every port line once; beside a port line sit the torch lines whose values
it computed (a torch line paired with several port lines sits at the first, the others link to it).
Torch lines whose values the port never computed follow the row of the torch line before them.
Long runs of port lines paired with nothing (imports, docstrings) are folded.
"""

from __future__ import annotations

import argparse
import ast
import html
from pathlib import Path
from typing import Any

from jaxside.annotate.review_report import rows, site_of
from jaxside.render.html import folds, highlight
from jaxside.render.html.page import document
from jaxside.render.source import python_lines

LEGEND = [
    ("paired, equal", "var(--ok)", "the port computed these values within --rtol/--atol"),
    ("paired, differs", "var(--bad)", "the port's counterpart differs"),
    ("first divergence", "var(--first)", "the first torch value whose counterpart differs"),
    ("no counterpart", "var(--none)", "torch values the port never computed"),
]


Row = tuple[int | None, list[int]]
"""A port line (None for a row of torch lines the port never computed) and the torch lines beside it."""


def _aligned(table: dict[int, tuple[set[int], Any, bool, bool]], port_count: int) -> list[Row]:
    by_port: dict[int, list[int]] = {}
    for torch_line, (lines, *_) in table.items():
        for p in lines:
            by_port.setdefault(p, []).append(torch_line)
    shown: set[int] = set()
    out: list[Row] = []
    for p in range(1, port_count + 1):
        new = [t for t in sorted(by_port.get(p, [])) if t not in shown]
        out.append((p, new))
        shown.update(new)
    # Torch lines without a counterpart: after the row of the nearest paired torch line before them.
    for torch_line in sorted(t for t in table if t not in shown):
        at = max((i for i, (_, ts) in enumerate(out) if any(t < torch_line for t in ts)), default=-1)
        out.insert(at + 1, (None, [torch_line]))
    return out


def html_page(options: argparse.Namespace, torch: Any, port: Any, alignment: Any) -> str:
    torch_path, port_path = Path(options.file), Path(options.port)
    port_source = port_path.read_text(encoding="utf-8")
    torch_lines = highlight.lines(torch_path.read_text(encoding="utf-8"))
    port_lines = highlight.lines(port_source)
    table = rows(torch, port, alignment)
    first = alignment.first
    torch_first = site_of(torch, first.torch_var) if first else None
    port_first = site_of(port, first.port_var) if first else None
    aligned = _aligned(table, len(port_lines))
    home = {t: f"p-L{p}" if p is not None else f"t-L{t}" for p, ts in aligned for t in ts}
    body_rows: list[tuple[int | None, str]] = []
    for p, torch_here in aligned:
        earlier = [t for t in sorted(t for t, v in table.items() if p in v[0]) if t not in torch_here]
        statuses, errors = [], []
        for t in torch_here:
            lines, err, ok, seen = table[t]
            statuses.append(("ok" if ok else "bad") if seen else "none")
            errors.append(f"{err:.2g}" if seen and err is not None else "no port value")
        status = "bad" if "bad" in statuses else "ok" if "ok" in statuses else "none" if statuses else ""
        if torch_first is not None and torch_first.line in torch_here and (
                p is None or port_first is None or port_first.line == p):
            status += " first"
        torch_html = "".join(highlight.block(torch_lines[t - 1]) for t in torch_here)
        torch_html += "".join(f"<span class=ln><a class=call href='#{home[t]}'>= torch line {t}</a></span>"
                              for t in earlier)
        port_html = highlight.block(port_lines[p - 1]) if p is not None else ""
        ident = f"p-L{p}" if p is not None else f"t-L{torch_here[0]}"
        numbers = "\n".join(map(str, torch_here))
        body_rows.append((p, f"<tr id={ident} class='r {status}' data-l={p or ''}>"
                             f"<td class=n>{numbers}</td><td class=t>{torch_html}</td>"
                             f"<td class=e>{chr(10).join(errors)}</td><td class=n>{p or ''}</td>"
                             f"<td class=q>{port_html}</td></tr>\n"))
    title = f"review: {torch_path.name} against {port_path.name}"
    if first is not None and torch_first is not None:
        target = home.get(torch_first.line, f"t-L{torch_first.line}")
        port_where = f"{port_path.name}:{port_first.line}" if port_first is not None else "?"
        banner = (f"<div class=banner id=first>First divergence: torch <a href='#{target}'>"
                  f"{html.escape(torch_path.name)}:{torch_first.line}</a> <code>"
                  f"{html.escape(' '.join((torch_first.text or '').split()))}</code> against port "
                  f"{html.escape(port_where)}, max error {first.error:.3g}</div>")
    else:
        banner = "<div class='banner good' id=first>No divergence: every paired value agrees.</div>"
    intro = (f"{html.escape(port_path.name)} in its own order on the right; beside each line, the lines of "
             f"{html.escape(torch_path.name)} whose values it computed, and the max error between them.")
    head = ("<colgroup><col style='width:3.2em'><col style='width:44%'><col style='width:7em'>"
            "<col style='width:3.2em'><col></colgroup><thead><tr><th></th><th>torch · "
            f"{html.escape(torch_path.name)}</th><th>max error</th><th></th><th>port · "
            f"{html.escape(port_path.name)}</th></tr></thead>")
    body = f"{banner}<table>{head}{_folded(body_rows, port_source)}</table>"
    return document(title, intro, LEGEND, body)


def _folded(body_rows: list[tuple[int | None, str]], source: str) -> str:
    """The rows in tbody groups, long runs of port lines paired with nothing folded."""
    lines = python_lines(source)
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
        parts.append(f"<tbody class='fold closed'><tr class=bar><td colspan=5><button type=button>"
                     f"{html.escape(label)}</button></td></tr>"
                     + "".join(row for _, row in body_rows[first : last + 1]) + "</tbody>")
        position = last + 1
    parts.append("<tbody>" + "".join(row for _, row in body_rows[position:]) + "</tbody>")
    return "".join(parts)
