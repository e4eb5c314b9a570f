"""Row 4: rendering time per 1,000 jaxpr equations, against JAX printing the same jaxpr."""

from __future__ import annotations

import ast
from typing import Any

from benchmarks import models
from benchmarks._common import Result, medians

ROW = "4 render / 1k eqns"


class _Emitter:
    """The least `render.rules` needs: nested jaxprs rendered in turn, every equation counted."""

    nests = False  # no nested defs: rules write their flat forms

    def __init__(self, render_eqn: Any) -> None:
        self.render_eqn = render_eqn
        self.lines: list[str] = []
        self.count = 0

    def constant(self, value: Any, hint: str) -> ast.expr:
        return ast.Name(f"{hint}_const", ast.Load())

    def function(self, jaxpr: Any, hint: str) -> ast.expr:
        self.body(jaxpr.jaxpr)
        return ast.Name(hint, ast.Load())

    def inline(self, jaxpr: Any, args: list[ast.expr], hint: str) -> list[ast.expr]:
        self.body(jaxpr.jaxpr)
        return [ast.Name(f"v{id(var)}", ast.Load()) for var in jaxpr.jaxpr.outvars]

    def rewrote(self, name: str) -> None:
        return None

    def body(self, jaxpr: Any) -> None:
        for eqn in jaxpr.eqns:
            args: list[ast.expr] = [ast.Name(f"v{id(var)}", ast.Load()) for var in eqn.invars]
            self.lines.append(ast.unparse(self.render_eqn(eqn, args, self)))
            self.count += 1


def run(smoke: bool = False) -> list[Result]:
    try:
        from jaxside.render.rules import render_eqn
    except ImportError as error:
        return [Result(ROW, "", "", verdict=f"pending: {error}")]
    from jaxside.tracing import capture

    model, inputs = models.llama(1 if smoke else 8, smoke=smoke)
    trace = capture(model, *inputs)
    eqns = len(trace.jaxpr.jaxpr.eqns)
    emitted: list[int] = []

    def render_ops() -> None:
        emitter = _Emitter(render_eqn)
        emitter.body(trace.jaxpr.jaxpr)
        emitted.append(emitter.count)

    cases = {"jax": lambda: str(trace.jaxpr), "ops": render_ops}
    try:
        from jaxside.render.comments import annotate_file
        from jaxside.render.lower import lower
        from jaxside.render.module import render_program

        cases["module"] = lambda: render_program(lower(trace), source="benchmarks")
        cases["comments"] = lambda: annotate_file(lower(trace), str(models.LLAMA))
    except ImportError as error:
        missing = f"pending: {error}"
    else:
        missing = ""
    times = medians(cases, runs=1 if smoke else 5)
    per_k = {name: value / eqns * 1000 for name, value in times.items()}
    size = f"{eqns:,} eqns" + (" (tiny)" if smoke else "")
    labels = {
        "ops": f"render_eqn + unparse, {emitted[-1]:,} eqns",
        "module": f"export_module, {size}",
        "comments": f"annotate_file, {size}",
    }
    results = [
        Result(ROW, labels[name], f"{per_k[name] * 1e3:.1f} ms", f"{per_k['jax'] * 1e3:.1f} ms",
               per_k[name] / per_k["jax"], "", "n/a")
        for name in ("ops", "module", "comments") if name in per_k
    ]
    if missing:
        results.append(Result(ROW, "export_module, annotate_file", "", verdict=missing))
    return results
