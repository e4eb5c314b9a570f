"""`annotate --json`: the torch-line -> JAX-statements map, for editors and review bots.

One JSON document (schema in docs/usage.md, "`--json`"): for each torch statement that made JAX,
the statements of the exported module it became and, for every value they compute, where it
came from (function, module path, local, line) with its shape and dtype.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jaxside.render.comments import statement_text
from jaxside.render.ir import Loop
from jaxside.render.lower import lower

SCHEMA = "jaxside.map/1"


def line_map(trace: Any) -> dict[str, Any]:
    """The map as plain data: ``{"schema", "entry", "frontend", "lines": [...]}``, lines in file
    and line order, statements in program order."""
    program = lower(trace)
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
    return {
        "schema": SCHEMA,
        "entry": trace.entry,
        "frontend": trace.frontend,
        "lines": [lines[key] for key in sorted(lines, key=lambda k: (str(Path(k[0])), k[1]))],
    }


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


def to_json(trace: Any) -> str:
    """The map as JSON text (UTF-8, keys in schema order), one document."""
    return json.dumps(line_map(trace), indent=1, ensure_ascii=False) + "\n"
