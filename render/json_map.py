"""`annotate --json`: the torch-line -> JAX-statements map, for editors and review bots.

One JSON document (schema in docs/usage.md, "`--json`"): for each torch statement that made JAX,
the statements of the exported module it became and, for every value they compute, where it
came from (function, module path, local, line) with its shape and dtype.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

from jaxside.render import source as torch_source
from jaxside.render.comments import return_note, statement_text
from jaxside.render.ir import Loop, Program

SCHEMA = "jaxside.map/1"


def line_map(program: Program) -> dict[str, Any]:
    """The map of a lowered program as plain data: ``{"schema", "entry", "frontend", "lines": [...]}``,
    lines in file and line order, statements in program order."""
    trace = program.trace
    eqns = trace.jaxpr.jaxpr.eqns
    lines: dict[tuple[str, int], dict[str, Any]] = {}
    for function in program.functions:
        for statement in function.body:
            site = statement.site
            made = statement.eqns or statement.call is not None or isinstance(statement, Loop)
            if site is None or not made:
                continue
            entry = lines.setdefault((site.file, site.line), {
                "file": site.file, "line": site.line, "end_line": site.end_line, "torch": site.text,
                "jax": [],
            })
            values = [_value(trace, var) for i in statement.eqns for var in eqns[i].outvars]
            entry["jax"].append({
                "function": function.name,
                "code": statement_text(statement),
                "columns": [site.col, site.end_col],
                "values": values,
            })
        _add_return(lines, function)
    return {
        "schema": SCHEMA,
        "entry": trace.entry,
        "frontend": trace.frontend,
        "lines": [lines[key] for key in sorted(lines, key=lambda k: (str(Path(k[0])), k[1]))],
    }


def _add_return(lines: dict[tuple[str, int], dict[str, Any]], function: Any) -> None:
    """The def's `return ...` at the torch function's return statement, when the returned
    expression computes (JAX that lives only in a `return` has no statement of its own)."""
    if function.returns is None or all(isinstance(n, _STRUCTURE) for n in ast.walk(function.returns)):
        return
    first = function.calls[0]
    parsed = torch_source.read(first.file)
    definition = torch_source.function_at(parsed[1], first.line) if parsed else None
    returned = return_note(function, definition) if definition is not None else None
    if parsed is None or returned is None:
        return
    node, code = returned
    value = node.value or node
    entry = lines.setdefault((first.file, value.lineno), {
        "file": first.file, "line": value.lineno, "end_line": value.end_lineno,
        "torch": ast.get_source_segment(parsed[0], value), "jax": [],
    })
    entry["jax"].append({"function": function.name, "code": code,
                          "columns": [value.col_offset, value.end_col_offset], "values": []})


_STRUCTURE = (ast.Name, ast.Tuple, ast.List, ast.Dict, ast.Constant, ast.Starred, ast.expr_context)


def _value(trace: Any, var: Any) -> dict[str, Any]:
    origin = trace.origin(var)
    aval = var.aval
    return {
        "shape": list(getattr(aval, "shape", ())),
        "dtype": str(getattr(aval, "dtype", "")),
        "kind": origin.kind if origin else None,
        "function": origin.function if origin else None,
        "module_path": origin.module_path if origin else None,
        "name": origin.name if origin else None,
        "line": origin.line if origin else None,
    }


def to_json(program: Program) -> str:
    """The map as JSON text (UTF-8, keys in schema order), one document."""
    return json.dumps(line_map(program), indent=1, ensure_ascii=False) + "\n"
