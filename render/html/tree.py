"""The call tree at the top of the view: the entry and the defs it called, each a link to its code.

A library model's page holds many defs over several files; the tree says where the run started and
what it went through, in the order it went, and jumps there. Each def is listed once (a repeated layer
is one def), under the first call that reached it; calls that made no def of their own are see-through.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

Node = tuple[Any, list["Node"]]
"""A JAX function and the nodes of the functions it called first."""


def _by_call(program: Any) -> dict[int, Any]:
    return {id(call): function for function in program.functions for call in function.calls}


def call_tree(trace: Any, program: Any) -> list[Node]:
    """The functions of `program` in the order the run reached them, nested under their first caller."""
    functions = _by_call(program)
    seen: set[str] = set()

    # Depth first, a def listed where the run first reached it: visit marks it before its children.
    def walk(call: Any) -> list[Node]:
        function = functions.get(id(call))
        if function is not None and function.name not in seen:
            seen.add(function.name)
            return [(function, [node for child in call.children for node in walk(child)])]
        return [node for child in call.children for node in walk(child)]

    return walk(trace.root)


def order(nodes: list[Node]) -> list[Any]:
    """The functions of the tree, depth first."""
    return [item for function, below in nodes for item in [function, *order(below)]]


def nav(nodes: list[Node], present: set[str], entry: str | None) -> str:
    """The tree as nested lists of links (to `def-NAME` ids in `present`), the entry marked."""
    def items(level: list[Node]) -> str:
        out = []
        for function, below in level:
            call = function.calls[0]
            where = f"{call.function} · {Path(call.file).name}:{call.line}" if call.line > 0 else ""
            name = html.escape(function.name)
            link = f"<a href='#def-{name}'>{name}</a>" if function.name in present else name
            count = f" ×{len(function.calls)}" if len(function.calls) > 1 else ""
            mark = " <b class=lab>entry</b>" if function.name == entry else ""
            inner = f"<ul>{items(below)}</ul>" if below else ""
            out.append(f"<li>{link}{count}<span class=where>{html.escape(where)}</span>{mark}{inner}</li>")
        return "".join(out)

    if not nodes:
        return ""
    count = len(order(nodes))
    return (f"<details class=tree open><summary>call tree: {count} def{'s' if count != 1 else ''}, "
            f"from the entry down</summary><nav class=tree aria-label='call tree'><ul>{items(nodes)}</ul>"
            "</nav></details>")
