"""A self-contained two-column page: the torch file on the left, the JAX each line made on the right.

Rows are torch lines, so both columns stay aligned however long a JAX statement is.
Hovering a row highlights it; clicking a row whose JAX calls another exported function
also highlights that function's torch lines. No network: styles and script are inline.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

from render.comments import Note, SourceMap, comment_lines, notes_for
from render.lower import lower

_STYLE = """
body { font: 13px/1.45 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; margin: 0;
       color: #1f2328; background: #fff; }
header { padding: 10px 16px; border-bottom: 1px solid #d0d7de; font-family: system-ui, sans-serif; }
header h1 { font-size: 15px; margin: 0; } header p { margin: 4px 0 0; color: #59636e; }
table { border-collapse: collapse; width: 100%; table-layout: fixed; }
th { text-align: left; font-family: system-ui, sans-serif; font-weight: 600; padding: 6px 8px;
     background: #f6f8fa; border-bottom: 1px solid #d0d7de; position: sticky; top: 0; }
td { vertical-align: top; padding: 0 8px; white-space: pre-wrap; word-break: break-all; }
td.n { width: 3.5em; color: #8c959f; text-align: right; user-select: none; padding-right: 6px; }
td.torch { border-right: 1px solid #d0d7de; }
td.jax { color: #0a3069; background: #f6fbff; }
td.jax:empty { background: transparent; }
tr.ran td.torch { background: #fafbfc; }
tr:hover td, tr.hl td { background: #fff8c5 !important; }
tr.pin td { background: #ddf4ff !important; }
.count { color: #8250df; }
"""

_SCRIPT = """
const rows = document.querySelectorAll('tr[data-line]');
const defs = JSON.parse(document.getElementById('defs').textContent);
rows.forEach(row => row.addEventListener('click', () => {
  document.querySelectorAll('tr.pin').forEach(r => r.classList.remove('pin'));
  row.classList.add('pin');
  for (const name of (row.dataset.calls || '').split(' ').filter(Boolean)) {
    const [start, end] = defs[name];
    rows.forEach(r => { const n = +r.dataset.line; if (n >= start && n <= end) r.classList.add('pin'); });
  }
}));
"""


def render_page(source_map: SourceMap, notes: dict[int, Note], defs: dict[str, tuple[int, int]],
                title: str) -> str:
    """The page for one torch file and its notes; `defs` maps exported names to torch line spans."""
    call_pattern = re.compile(r"\b(" + "|".join(map(re.escape, sorted(defs))) + r")\(") if defs else None
    rows = []
    for number, line in enumerate(source_map.lines, start=1):
        note = notes.get(number)
        jax_text = "\n".join(t.removeprefix("# ") for t in comment_lines(note)) if note and note.texts else ""
        calls = sorted(set(call_pattern.findall(jax_text))) if call_pattern and jax_text else []
        jax_html = html.escape(jax_text)
        jax_html = re.sub(r"(  ×\d+.*)$", r'<span class="count">\1</span>', jax_html, flags=re.M)
        attrs = f' id=L{number} data-line="{number}"' + (f' data-calls="{" ".join(calls)}"' if calls else "")
        row_class = ' class="ran"' if note else ""
        rows.append(
            f"<tr{attrs}{row_class}><td class=n>{number}</td>"
            f"<td class=torch>{html.escape(line.rstrip())}</td><td class=jax>{jax_html}</td></tr>"
        )
    return (
        "<!doctype html>\n<html lang=en><head><meta charset=utf-8>"
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>"
        f"<header><h1>{html.escape(title)}</h1><p>torch on the left, the JAX each line produced on "
        "the right; click a row to pin it and the torch lines of the functions it calls.</p></header>"
        "<table><colgroup><col style='width:3.5em'><col style='width:50%'><col></colgroup>"
        "<thead><tr><th></th><th>torch</th><th>JAX</th></tr></thead><tbody>"
        + "\n".join(rows)
        + f"</tbody></table><script type='application/json' id=defs>{json.dumps(defs)}</script>"
        f"<script>{_SCRIPT}</script></body></html>\n"
    )


def side_by_side(trace: Any, path: str, *, shapes: bool = False) -> str:
    """The HTML view of `path` with the JAX each of its lines produced in `trace`."""
    program = lower(trace)
    source_map = SourceMap(Path(path).read_text(encoding="utf-8"))
    notes = notes_for(program, trace, path, source_map, shapes=shapes)
    defs = {}
    for function in program.functions:
        node = source_map.function_at(function.calls[0].line)
        if node is not None and Path(function.calls[0].file).resolve() == Path(path).resolve():
            defs[function.name] = (node.lineno, node.end_lineno or node.lineno)
    return render_page(source_map, notes, defs, f"{Path(path).name}: {trace.entry} in JAX")
